//! The functions of an MSL program as the convergence pass needs them: where each function
//! and lambda body is, what kind of definition it is (a kernel, a function or lambda whose
//! callers can pass a call site, or one whose cannot), and small token-level parsing helpers
//! (matching brackets, the end of a statement, the arguments of a call). Light by design: it
//! reads the shapes kernels use (templates, methods, lambdas bound to `auto`) and calls
//! anything else opaque, which costs exactness checks, never correctness.

use std::collections::HashSet;

use super::tokens::{Kind, Token};
use crate::source::limits::{exceeded, MAX_NESTING};

/// Where a function's parameters are: its parentheses, or (a lambda without them) the `]`
/// after which they go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Params {
    Parens(usize, usize),
    After(usize),
}

/// What a function body is, for its `CallScope`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Body {
    /// A kernel entry: the root of every position, no scope.
    Kernel,
    /// A function or `auto name = [..](..) {..}` lambda called by name: the site becomes the
    /// parameter after the `required` ones (before any with a default), of `total`.
    /// `noinline_at` is where its declaration starts.
    Named { name: String, params: Params, required: usize, total: usize, noinline_at: Option<usize> },
    /// One whose callers cannot pass a site: its body runs out of line (the attribute goes
    /// before token `noinline_at`) and its calls are told apart by return address.
    Opaque { name: Option<String>, noinline_at: Option<usize>, lambda_parens: Option<usize> },
}

pub(super) struct Scope {
    pub open: usize,
    pub close: usize,
    pub body: Body,
}

pub(super) struct Source<'a> {
    pub toks: &'a [Token],
    pub sig: &'a [usize],
    brackets: Brackets,
}

/// Precomputed bracket structure of the significant tokens, so that matching a bracket or
/// finding the end of a statement costs no scan.
pub(super) struct Brackets {
    /// For `(`, `[`, `{` and their closers: the position of the partner, counting each kind
    /// on its own (as a scan that counts only that kind would find it).
    partner: Vec<Option<usize>>,
    /// For each position: the next `;` at its own bracket depth before the enclosing bracket
    /// closes, stepping over matched brackets.
    semicolon: Vec<Option<usize>>,
}

const BRACKETS: [(&str, &str); 3] = [("(", ")"), ("[", "]"), ("{", "}")];

impl Brackets {
    pub fn new(toks: &[Token], sig: &[usize]) -> Brackets {
        let n = sig.len();
        let mut partner = vec![None; n];
        let mut open: [Vec<usize>; 3] = Default::default();
        for (k, &i) in sig.iter().enumerate() {
            let t = &toks[i];
            if t.kind != Kind::Punct {
                continue;
            }
            for (b, (o, c)) in BRACKETS.iter().enumerate() {
                if t.text == *o {
                    open[b].push(k);
                } else if t.text == *c {
                    if let Some(j) = open[b].pop() {
                        partner[j] = Some(k);
                        partner[k] = Some(j);
                    }
                }
            }
        }
        let mut semicolon = vec![None; n + 1];
        for k in (0..n).rev() {
            let t = &toks[sig[k]];
            let is = |s: &str| t.kind == Kind::Punct && t.text == s;
            semicolon[k] = if is(";") {
                Some(k)
            } else if BRACKETS.iter().any(|(o, _)| is(o)) {
                partner[k].and_then(|c| semicolon[c + 1])
            } else if BRACKETS.iter().any(|(_, c)| is(c)) {
                None
            } else {
                semicolon[k + 1]
            };
        }
        Brackets { partner, semicolon }
    }

    /// The bracket closing the one opened at `k`.
    pub fn closing(&self, toks: &[Token], sig: &[usize], k: usize) -> Option<usize> {
        let t = &toks[sig[k]];
        BRACKETS.iter().any(|(o, _)| t.text == *o).then(|| self.partner[k]).flatten()
    }

    /// The bracket opening the one closed at `k`.
    pub fn opening(&self, toks: &[Token], sig: &[usize], k: usize) -> Option<usize> {
        let t = &toks[sig[k]];
        BRACKETS.iter().any(|(_, c)| t.text == *c).then(|| self.partner[k]).flatten()
    }

    /// The next `;` at the depth of `k` (from `k` on).
    pub fn semicolon(&self, k: usize) -> Option<usize> {
        self.semicolon.get(k).copied().flatten()
    }
}

/// Refuses brackets nested deeper than `MAX_NESTING` (the passes that follow the nesting would
/// otherwise take time or stack in proportion to it).
pub(super) fn check_nesting(toks: &[Token], sig: &[usize]) -> Result<(), String> {
    let mut depth = 0usize;
    for &i in sig {
        let t = &toks[i];
        if t.kind != Kind::Punct {
            continue;
        }
        if BRACKETS.iter().any(|(o, _)| t.text == *o) {
            depth += 1;
            if depth > MAX_NESTING {
                return Err(format!("line {}: {}", t.line, exceeded("the nesting of brackets", MAX_NESTING)));
            }
        } else if BRACKETS.iter().any(|(_, c)| t.text == *c) {
            depth = depth.saturating_sub(1);
        }
    }
    Ok(())
}

impl<'a> Source<'a> {
    pub fn new(toks: &'a [Token], sig: &'a [usize]) -> Source<'a> {
        Source { toks, sig, brackets: Brackets::new(toks, sig) }
    }

    pub fn tok(&self, k: usize) -> &Token {
        &self.toks[self.sig[k]]
    }
    pub fn is(&self, k: usize, s: &str) -> bool {
        k < self.sig.len() && self.tok(k).is(s)
    }
    pub fn ident(&self, k: usize) -> bool {
        k < self.sig.len() && self.tok(k).kind == Kind::Ident
    }
    pub fn len(&self) -> usize {
        self.sig.len()
    }

    /// The bracket closing the one opened at `k`.
    pub fn matching(&self, k: usize) -> Option<usize> {
        self.brackets.closing(self.toks, self.sig, k)
    }

    /// The bracket opening the one closed at `k` (`)` or `]`).
    pub fn matching_back(&self, k: usize) -> Option<usize> {
        if self.is(k, "}") {
            return None;
        }
        self.brackets.opening(self.toks, self.sig, k)
    }

    /// The last token of the statement starting at `k`.
    pub fn statement_end(&self, k: usize) -> Option<usize> {
        self.statement_end_at(k, 0)
    }

    /// `statement_end` for a statement nested `depth` statements deep (`if (a) for (..) x;`),
    /// which gives up past `MAX_NESTING`.
    fn statement_end_at(&self, k: usize, depth: usize) -> Option<usize> {
        if k >= self.len() || depth > MAX_NESTING {
            return None;
        }
        let inner = |k: usize| self.statement_end_at(k, depth + 1);
        match self.tok(k).text.as_str() {
            "{" => self.matching(k),
            ";" => Some(k),
            "if" => {
                // `else if` chains are followed in a loop: they may be long, but are not deep.
                let mut k = k;
                loop {
                    let open = if self.is(k + 1, "constexpr") { k + 2 } else { k + 1 };
                    let end = inner(self.matching(open)? + 1)?;
                    if !self.is(end + 1, "else") {
                        return Some(end);
                    }
                    if !self.is(end + 2, "if") {
                        return inner(end + 2);
                    }
                    k = end + 2;
                }
            }
            "for" | "while" | "switch" => inner(self.matching(k + 1)? + 1),
            "do" => {
                let end = inner(k + 1)?;
                let close = self.matching(end + 2).filter(|_| self.is(end + 1, "while"))?;
                self.is(close + 1, ";").then_some(close + 1)
            }
            _ => self.brackets.semicolon(k),
        }
    }

    /// For a name at `k` followed by a call: the call's `(` (after template arguments, if any).
    pub fn call_open(&self, k: usize) -> Option<usize> {
        if self.is(k + 1, "(") {
            return Some(k + 1);
        }
        if !self.is(k + 1, "<") {
            return None;
        }
        let mut depth = 0i32;
        for j in k + 1..self.len().min(k + 64) {
            match self.tok(j).text.as_str() {
                "<" => depth += 1,
                ">" => depth -= 1,
                ">>" => depth -= 2,
                "(" | "[" => depth += 100,
                ")" | "]" => depth -= 100,
                ";" | "{" | "}" | "&&" | "||" => return None,
                _ => {}
            }
            if depth == 0 {
                return self.is(j + 1, "(").then_some(j + 1);
            }
            if depth < 0 {
                return None;
            }
        }
        None
    }

    /// Whether the `[` at `k` opens a lambda (not a subscript or an array declarator).
    pub fn lambda_introducer(&self, k: usize) -> bool {
        k == 0 || !(self.ident(k - 1) && !self.is(k - 1, "return") || self.is(k - 1, "]") || self.is(k - 1, ")"))
    }
}

/// The first token of argument `n` (from 0) of the list in parentheses `open..close`.
/// With `angles`, `<` after a name opens template arguments (in parameter lists; in call
/// arguments it may be a comparison).
pub(super) fn nth_arg(src: &Source, open: usize, close: usize, n: usize, angles: bool) -> Option<usize> {
    arg_starts(src, open, close, angles).get(n).copied()
}

/// The first token of every argument of the list in parentheses `open..close` (none for `()`),
/// in one pass.
pub(super) fn arg_starts(src: &Source, open: usize, close: usize, angles: bool) -> Vec<usize> {
    if close == open + 1 {
        return Vec::new();
    }
    let mut depth = 0i32;
    let mut starts = vec![open + 1];
    for j in open + 1..close {
        match src.tok(j).text.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth -= 1,
            "<" if angles && src.ident(j - 1) => depth += 1,
            ">" if angles && depth > 0 => depth -= 1,
            ">>" if angles && depth > 0 => depth -= 2,
            "," if depth == 0 => starts.push(j + 1),
            _ => {}
        }
    }
    starts
}

/// The function bodies of the program (with what they are) and the names declared without a
/// body at file or struct scope (`T f(args);`).
pub(super) fn find_scopes(src: &Source, kernels: &HashSet<String>) -> (Vec<Scope>, HashSet<String>) {
    #[derive(Clone, Copy, PartialEq)]
    enum Brace {
        Outer,
        Struct,
        Function,
        Block,
    }
    let mut stack: Vec<Brace> = Vec::new();
    let mut scopes = Vec::new();
    let mut prototypes = HashSet::new();
    for k in 0..src.len() {
        let in_function = stack.contains(&Brace::Function);
        if src.is(k, "{") {
            let brace = if in_function {
                match lambda_at(src, k) {
                    Some(body) => {
                        if let Some(close) = src.matching(k) {
                            scopes.push(Scope { open: k, close, body });
                        }
                        Brace::Function
                    }
                    None => Brace::Block,
                }
            } else {
                match outer_brace(src, k) {
                    OuterBrace::Struct => Brace::Struct,
                    OuterBrace::Other => Brace::Outer,
                    OuterBrace::Function => {
                        if let Some(close) = src.matching(k) {
                            scopes.push(Scope { open: k, close, body: function_head(src, k, kernels) });
                        }
                        Brace::Function
                    }
                }
            };
            stack.push(brace);
        } else if src.is(k, "}") {
            stack.pop();
        } else if !in_function && src.ident(k) && src.is(k + 1, "(") {
            // `name(...)` followed by qualifiers and `;` outside function bodies.
            if let Some(close) = src.matching(k + 1) {
                let mut j = close + 1;
                while src.ident(j)
                    && ["const", "noexcept", "override", "final", "thread", "device"]
                        .contains(&src.tok(j).text.as_str())
                {
                    j += 1;
                }
                if src.is(j, ";") {
                    prototypes.insert(src.tok(k).text.clone());
                }
            }
        }
    }
    (scopes, prototypes)
}

enum OuterBrace {
    Struct,
    Function,
    Other,
}

/// What a `{` outside function bodies opens, as the rewriter decides it (rewrite.rs,
/// `scope_for_brace`): a function body when it follows `)`, possibly with qualifiers between
/// (`) const thread {`).
fn outer_brace(src: &Source, k: usize) -> OuterBrace {
    let mut q = k;
    while q > 0 && is_function_qualifier(&src.tok(q - 1).text) {
        q -= 1;
    }
    if q > 0 && src.is(q - 1, ")") {
        return OuterBrace::Function;
    }
    let mut j = k;
    while j > 0 {
        j -= 1;
        match src.tok(j).text.as_str() {
            ";" | "{" | "}" => break,
            "struct" | "class" | "union" => return OuterBrace::Struct,
            "namespace" | "extern" | "enum" | "=" => return OuterBrace::Other,
            _ => {}
        }
    }
    OuterBrace::Other
}

/// Whether a word may stand between a function's parameters and its body: C++'s qualifiers
/// and Metal's address spaces of `this` (`float get() const thread {`).
pub(super) fn is_function_qualifier(word: &str) -> bool {
    matches!(
        word,
        "const" | "volatile" | "noexcept" | "override" | "final" | "thread" | "device" | "constant" | "threadgroup"
    )
}

/// The function whose body opens at `k`.
fn function_head(src: &Source, k: usize, kernels: &HashSet<String>) -> Body {
    let mut close = k - 1;
    while !src.is(close, ")") && close > 0 {
        close -= 1;
    }
    let Some(open) = src.matching_back(close).filter(|&open| open > 0) else {
        return Body::Opaque { name: None, noinline_at: None, lambda_parens: None };
    };
    // Everything from the start of the declaration to the parameters.
    let mut start = open - 1;
    while start > 0 && !matches!(src.tok(start - 1).text.as_str(), ";" | "{" | "}") {
        start -= 1;
    }
    let decl: Vec<&Token> = (start..open).map(|j| src.tok(j)).collect();
    if decl.iter().any(|t| t.is("kernel") || (t.kind == Kind::Attr && t.attr_inner() == "kernel"))
        || kernels.contains(&src.tok(open - 1).text)
    {
        return Body::Kernel;
    }
    // The attribute goes after the template header.
    let mut at = start;
    if src.is(at, "template") && src.is(at + 1, "<") {
        at = angle_close(src, at + 1).map_or(at, |c| c + 1);
    }
    let before = if open >= 2 { src.tok(open - 2).text.as_str() } else { "" };
    if matches!(before, ":" | ",") {
        return Body::Opaque { name: None, noinline_at: None, lambda_parens: None };
        // a constructor
    }
    let name = if src.is(open - 1, ">") {
        // An explicit specialisation `f<A>(...)`: its calls look like the primary's.
        angle_open(src, open - 1).filter(|&a| src.ident(a - 1)).map(|a| src.tok(a - 1).text.clone())
    } else if src.ident(open - 1) && src.tok(open - 1).text != "operator" && !matches!(before, "::" | "~" | "operator")
    {
        Some(src.tok(open - 1).text.clone())
    } else {
        None
    };
    // A return type: something besides specifiers and the template header.
    let mut depth = 0i32;
    let mut has_type = false;
    for t in &decl[..decl.len() - 1] {
        match t.text.as_str() {
            "<" => depth += 1,
            ">" => depth -= 1,
            ">>" => depth -= 2,
            "template" | "inline" | "static" | "constexpr" | "explicit" | "virtual" | "friend" | "METAL_FUNC"
            | "public" | "private" | "protected" | ":" => {}
            _ if t.kind == Kind::Attr => {}
            _ if depth == 0 => has_type = true,
            _ => {}
        }
    }
    let noinline_at = has_type.then_some(at);
    match (name, parameters(src, open, close)) {
        (Some(name), Some((required, total))) if has_type && !src.is(open - 1, ">") => {
            Body::Named { name, params: Params::Parens(open, close), required, total, noinline_at }
        }
        (name, _) => Body::Opaque { name, noinline_at, lambda_parens: None },
    }
}

/// (parameters before the first with a default, all parameters) of the list `open..close`, or
/// `None` for a parameter pack or `(void)`.
fn parameters(src: &Source, open: usize, close: usize) -> Option<(usize, usize)> {
    if close == open + 1 {
        return Some((0, 0));
    }
    if close == open + 2 && src.is(open + 1, "void") {
        return None;
    }
    let starts = arg_starts(src, open, close, true);
    let total = starts.len();
    let mut required = total;
    for n in 0..total {
        let from = starts[n];
        let to = starts.get(n + 1).map_or(close, |j| j - 1);
        let mut depth = 0i32;
        for j in from..to {
            match src.tok(j).text.as_str() {
                "..." => return None,
                "(" | "[" | "{" | "<" => depth += 1,
                ")" | "]" | "}" | ">" => depth -= 1,
                ">>" => depth -= 2,
                "=" if depth == 0 => required = required.min(n),
                _ => {}
            }
        }
    }
    Some((required, total))
}

/// The `>` closing the `<` at `k`.
fn angle_close(src: &Source, k: usize) -> Option<usize> {
    let mut depth = 0i32;
    for j in k..src.len() {
        match src.tok(j).text.as_str() {
            "<" => depth += 1,
            ">" => depth -= 1,
            ">>" => depth -= 2,
            "(" | ")" | ";" | "{" | "}" => {}
            _ => {}
        }
        if depth <= 0 {
            return Some(j);
        }
    }
    None
}

/// The `<` matching the `>` at `k` (k > 0).
fn angle_open(src: &Source, k: usize) -> Option<usize> {
    let mut depth = 0i32;
    for j in (1..=k).rev() {
        match src.tok(j).text.as_str() {
            ">" => depth += 1,
            ">>" => depth += 2,
            "<" => depth -= 1,
            ";" | "{" | "}" => return None,
            _ => {}
        }
        if depth == 0 {
            return Some(j);
        }
    }
    None
}

/// For a `{` inside a function body that opens a lambda's body, what the lambda is: named when
/// it initialises `auto name`.
fn lambda_at(src: &Source, k: usize) -> Option<Body> {
    // Specifiers and a trailing return type back to `)` or `]`.
    let mut j = k;
    let mut after_params = k;
    for _ in 0..16 {
        if j == 0 {
            return None;
        }
        j -= 1;
        let t = src.tok(j);
        if t.is(")") || t.is("]") {
            break;
        }
        let skippable = t.kind == Kind::Ident || ["::", "<", ">", "->", "*", "&", ","].contains(&t.text.as_str());
        if !skippable {
            return None;
        }
        if !matches!(t.text.as_str(), "mutable" | "constexpr" | "noexcept") {
            after_params = j;
        }
    }
    let parens = if src.is(j, ")") {
        let open = src.matching_back(j)?;
        let p = (open, j);
        j = open.checked_sub(1)?;
        Some(p)
    } else {
        None
    };
    if !src.is(j, "]") {
        return None;
    }
    let intro = src.matching_back(j)?;
    if !src.lambda_introducer(intro) {
        return None;
    }
    let named = intro >= 3 && src.is(intro - 1, "=") && src.ident(intro - 2) && src.is(intro - 3, "auto");
    let params = parens.map_or(Some((0, 0)), |(open, close)| parameters(src, open, close));
    match (named, parens, params) {
        (true, Some((open, close)), Some((required, total))) => Some(Body::Named {
            name: src.tok(intro - 2).text.clone(),
            params: Params::Parens(open, close),
            required,
            total,
            noinline_at: None,
        }),
        (true, None, _) => Some(Body::Named {
            name: src.tok(intro - 2).text.clone(),
            params: Params::After(j),
            required: 0,
            total: 0,
            noinline_at: None,
        }),
        _ => Some(Body::Opaque {
            name: named.then(|| src.tok(intro - 2).text.clone()),
            noinline_at: Some(after_params),
            lambda_parens: parens.is_none().then_some(j),
        }),
    }
}
