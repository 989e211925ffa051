//! The functions of an MSL program as the convergence pass needs them: where each function
//! and lambda body is, what kind of definition it is (a kernel, a function or lambda whose
//! callers can pass a call site, or one whose cannot), and small token-level parsing helpers
//! (where a call's arguments open). Light by design: it
//! reads the shapes kernels use (templates, methods, lambdas bound to `auto`) and calls
//! anything else opaque, which costs exactness checks, never correctness.

use std::collections::HashSet;

use crate::source::cursor::Cursor;
use crate::source::parse::is_function_qualifier;
use crate::source::tokens::{Kind, Token};

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

/// For a name at `k` followed by a call: the call's `(` (after template arguments, if any).
pub(super) fn call_open(src: &Cursor, k: usize) -> Option<usize> {
    if src.is(k + 1, "(") {
        return Some(k + 1);
    }
    if !src.is(k + 1, "<") {
        return None;
    }
    let mut depth = 0i32;
    for j in k + 1..src.len().min(k + 64) {
        match src.tok(j).text.as_str() {
            "<" => depth += 1,
            ">" => depth -= 1,
            ">>" => depth -= 2,
            "(" | "[" => depth += 100,
            ")" | "]" => depth -= 100,
            ";" | "{" | "}" | "&&" | "||" => return None,
            _ => {}
        }
        if depth == 0 {
            return src.is(j + 1, "(").then_some(j + 1);
        }
        if depth < 0 {
            return None;
        }
    }
    None
}

/// Whether the `[` at `k` opens a lambda (not a subscript or an array declarator).
fn lambda_introducer(src: &Cursor, k: usize) -> bool {
    k == 0 || !(src.ident(k - 1) && !src.is(k - 1, "return") || src.is(k - 1, "]") || src.is(k - 1, ")"))
}

/// The function bodies of the program (with what they are) and the names declared without a
/// body at file or struct scope (`T f(args);`).
pub(super) fn find_scopes(src: &Cursor, kernels: &HashSet<String>) -> (Vec<Scope>, HashSet<String>) {
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
fn outer_brace(src: &Cursor, k: usize) -> OuterBrace {
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

/// The function whose body opens at `k`.
fn function_head(src: &Cursor, k: usize, kernels: &HashSet<String>) -> Body {
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
    if decl
        .iter()
        .any(|t| t.is("kernel") || (t.kind == Kind::Attr && crate::source::parse::is_kernel_attribute(t.attr_inner())))
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
fn parameters(src: &Cursor, open: usize, close: usize) -> Option<(usize, usize)> {
    if close == open + 1 {
        return Some((0, 0));
    }
    if close == open + 2 && src.is(open + 1, "void") {
        return None;
    }
    let starts = src.arg_starts(open, close, true);
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
fn angle_close(src: &Cursor, k: usize) -> Option<usize> {
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
fn angle_open(src: &Cursor, k: usize) -> Option<usize> {
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
fn lambda_at(src: &Cursor, k: usize) -> Option<Body> {
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
    if !lambda_introducer(src, intro) {
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
