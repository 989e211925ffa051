//! Which lanes of a SIMD-group meet at a SIMD-group function, for the CPU emulator.
//!
//! Metal combines the lanes that execute one call together: lanes split at a branch and meet
//! again where it ends. The emulator runs lanes one by one and gives each a position: the loops
//! (with their iteration) and the calls of functions it is in, then the call it waits at
//! (prelude/cpu/convergence.h). This pass writes what positions are made of, into code that
//! reaches SIMD-group functions (a body whose text calls one, or calls a function that does):
//!
//! - every loop whose text reaches one runs inside `for (kiln::rt::LoopScope kiln_loop(K);
//!   kiln_loop.once(); )`, and counts its iterations with `kiln_loop.step()`: in the increment of
//!   a `for` (the condition belongs to the iteration that follows), in the condition of a
//!   `while` or `do`, and before the body of a range `for`;
//! - a function that reaches one gets a last parameter `kiln::rt::CallSite kiln_call_site`
//!   (by default unknown) and a `CallScope` first in its body, and every call of it passes
//!   `kiln::rt::CallSite(K)`. Functions whose signature cannot take one (constructors,
//!   operators, lambdas, parameter packs, default arguments, out-of-class definitions,
//!   separately declared ones, names the prelude also uses) get the scope with an unknown
//!   site: the scheduler then refuses to combine part of a SIMD-group inside them.
//!
//! K is the position of a significant token: the loop's keyword, the closing parenthesis of a
//! call (its arguments run first), as for the site tags of SIMD-group function calls. Text is
//! only added before or after tokens and never holds a newline, so lines stay where they were.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use super::rewrite::SITED_COLLECTIVES;
use super::tokens::{tokenize, Kind, Token};

/// What a function body is, for its `CallScope`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Body {
    /// A kernel entry: the root of every position, no scope.
    Kernel,
    /// A named function whose parameter list `(open, close)` can take the call site.
    Extendable { name: String, params: (usize, usize) },
    /// A function or lambda whose callers cannot pass a site; `name` is what calls it by name.
    Opaque { name: Option<String> },
}

struct Scope {
    open: usize,
    close: usize,
    body: Body,
}

struct Source<'a> {
    toks: &'a [Token],
    sig: &'a [usize],
}

impl Source<'_> {
    fn tok(&self, k: usize) -> &Token {
        &self.toks[self.sig[k]]
    }
    fn is(&self, k: usize, s: &str) -> bool {
        k < self.sig.len() && self.tok(k).is(s)
    }
    fn ident(&self, k: usize) -> bool {
        k < self.sig.len() && self.tok(k).kind == Kind::Ident
    }
    fn len(&self) -> usize {
        self.sig.len()
    }

    /// The bracket closing the one opened at `k`.
    fn matching(&self, k: usize) -> Option<usize> {
        let (open, close) = match self.tok(k).text.as_str() {
            "(" => ("(", ")"),
            "[" => ("[", "]"),
            "{" => ("{", "}"),
            _ => return None,
        };
        let mut depth = 0;
        for j in k..self.len() {
            let t = self.tok(j);
            if t.kind != Kind::Punct {
                continue;
            }
            if t.text == open {
                depth += 1;
            } else if t.text == close {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
        }
        None
    }

    /// The bracket opening the one closed at `k`.
    fn matching_back(&self, k: usize) -> Option<usize> {
        let (open, close) = match self.tok(k).text.as_str() {
            ")" => ("(", ")"),
            "]" => ("[", "]"),
            _ => return None,
        };
        let mut depth = 0;
        for j in (0..=k).rev() {
            let t = self.tok(j);
            if t.kind != Kind::Punct {
                continue;
            }
            if t.text == close {
                depth += 1;
            } else if t.text == open {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
        }
        None
    }

    /// The last token of the statement starting at `k`.
    fn statement_end(&self, k: usize) -> Option<usize> {
        if k >= self.len() {
            return None;
        }
        match self.tok(k).text.as_str() {
            "{" => self.matching(k),
            ";" => Some(k),
            "if" => {
                let open = if self.is(k + 1, "constexpr") { k + 2 } else { k + 1 };
                let end = self.statement_end(self.matching(open)? + 1)?;
                if self.is(end + 1, "else") {
                    self.statement_end(end + 2)
                } else {
                    Some(end)
                }
            }
            "for" | "while" | "switch" => self.statement_end(self.matching(k + 1)? + 1),
            "do" => {
                let end = self.statement_end(k + 1)?;
                let close = self.matching(end + 2).filter(|_| self.is(end + 1, "while"))?;
                self.is(close + 1, ";").then_some(close + 1)
            }
            _ => {
                let mut depth = 0i32;
                for j in k..self.len() {
                    match self.tok(j).text.as_str() {
                        "(" | "[" | "{" => depth += 1,
                        ")" | "]" | "}" => depth -= 1,
                        ";" if depth == 0 => return Some(j),
                        _ => {}
                    }
                    if depth < 0 {
                        return None;
                    }
                }
                None
            }
        }
    }

    /// For a name at `k` followed by a call: the call's `(` (after template arguments, if any).
    fn call_open(&self, k: usize) -> Option<usize> {
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
    fn lambda_introducer(&self, k: usize) -> bool {
        k == 0 || !(self.ident(k - 1) && !self.is(k - 1, "return") || self.is(k - 1, "]") || self.is(k - 1, ")"))
    }
}

/// Names of functions the preludes define or call: a user function of that name is not given
/// a site parameter (a call meant for the prelude's would receive it too).
fn prelude_names() -> &'static HashSet<String> {
    static NAMES: OnceLock<HashSet<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut texts: Vec<&str> = super::super::cpu::COMMON_PRELUDE.iter().map(|(_, t)| *t).collect();
        texts.push(super::super::cpu::MLX_UTILS);
        texts.push(include_str!("../../../prelude/cpu/runtime.h"));
        texts.push(include_str!("../../../prelude/cpu/simd.h"));
        let mut names = HashSet::new();
        for text in texts {
            let toks: Vec<Token> = tokenize(text).into_iter().filter(|t| !t.is_trivia()).collect();
            for w in toks.windows(2) {
                if w[0].kind == Kind::Ident && w[1].is("(") {
                    names.insert(w[0].text.clone());
                }
            }
        }
        names
    })
}

/// Adds the instrumentation to `out` (the rewriter's text per token, indexed like `toks`).
/// `kernels` names the kernel functions.
pub fn instrument(toks: &[Token], sig: &[usize], out: &mut [String], kernels: &HashSet<String>) -> Result<(), String> {
    let src = Source { toks, sig };
    let sited: Vec<usize> = (0..src.len())
        .filter(|&k| src.ident(k) && src.is(k + 1, "(") && SITED_COLLECTIVES.contains(&src.tok(k).text.as_str()))
        .collect();
    if sited.is_empty() {
        return Ok(());
    }
    let (scopes, prototypes) = find_scopes(&src, kernels);
    let heads: HashSet<usize> = scopes
        .iter()
        .filter_map(|s| match &s.body {
            Body::Extendable { params, .. } => Some(params.0 - 1),
            _ => None,
        })
        .collect();
    let in_function = |k: usize| scopes.iter().any(|s| s.open < k && k < s.close);
    // Calls by name inside function bodies: (name position, callee).
    let calls: Vec<(usize, &str)> = (0..src.len())
        .filter(|&k| src.ident(k) && !heads.contains(&k) && src.call_open(k).is_some() && in_function(k))
        .map(|k| (k, src.tok(k).text.as_str()))
        .collect();

    // Names that reach SIMD-group functions, to a fixed point.
    let mut reaching: HashSet<&str> = HashSet::new();
    loop {
        let before = reaching.len();
        for s in &scopes {
            let name = match &s.body {
                Body::Extendable { name, .. } | Body::Opaque { name: Some(name) } => name.as_str(),
                _ => continue,
            };
            if !reaching.contains(name) && reaches(s.open, s.close, &sited, &calls, &reaching) {
                reaching.insert(name);
            }
        }
        if reaching.len() == before {
            break;
        }
    }
    // Names every definition of which can take the call site.
    let mut extendable: HashMap<&str, bool> = HashMap::new();
    for s in &scopes {
        match &s.body {
            Body::Extendable { name, .. } => {
                let ok = !prototypes.contains(name.as_str())
                    && !prelude_names().contains(name)
                    && !SITED_COLLECTIVES.contains(&name.as_str());
                extendable.entry(name).and_modify(|e| *e &= ok).or_insert(ok);
            }
            Body::Opaque { name: Some(name) } => {
                extendable.insert(name, false);
            }
            _ => {}
        }
    }
    let tagged = |name: &str| reaching.contains(name) && extendable.get(name).copied().unwrap_or(false);

    for s in &scopes {
        if s.body == Body::Kernel || !reaches(s.open, s.close, &sited, &calls, &reaching) {
            continue;
        }
        let line = src.tok(s.open).line;
        // A constexpr function cannot hold the scope; one that reaches SIMD-group functions
        // never runs at compile time anyway.
        let mut j = if in_function(s.open) { 0 } else { s.open };
        while j > 0 && !matches!(src.tok(j - 1).text.as_str(), ";" | "{" | "}") {
            j -= 1;
            if src.is(j, "constexpr") {
                out[sig[j]].clear();
            }
        }
        let site = match &s.body {
            Body::Extendable { name, params: (open, close) } if tagged(name) => {
                let sep = if close == &(open + 1) { "" } else { ", " };
                let param = format!("{sep}kiln::rt::CallSite kiln_call_site = kiln::rt::CallSite::unknown({line})");
                out[sig[*close]].insert_str(0, &param);
                "kiln_call_site".to_string()
            }
            _ => format!("kiln::rt::CallSite::unknown({line})"),
        };
        out[sig[s.open]].push_str(&format!(" kiln::rt::CallScope kiln_call_scope({site});"));
    }
    for &(k, name) in &calls {
        if !tagged(name) {
            continue;
        }
        let open = src.call_open(k).ok_or("call without parentheses")?;
        let close = src.matching(open).ok_or_else(|| format!("line {}: unbalanced call of {name}", src.tok(k).line))?;
        let sep = if close == open + 1 { "" } else { ", " };
        out[sig[close]].insert_str(0, &format!("{sep}kiln::rt::CallSite({close})"));
    }
    instrument_loops(&src, out, &sited, &calls, &reaching, &in_function)
}

/// Whether tokens `from..=to` call a SIMD-group function or a function in `reaching`.
fn reaches(from: usize, to: usize, sited: &[usize], calls: &[(usize, &str)], reaching: &HashSet<&str>) -> bool {
    let at = sited.partition_point(|&k| k < from);
    if at < sited.len() && sited[at] <= to {
        return true;
    }
    let at = calls.partition_point(|&(k, _)| k < from);
    calls[at..].iter().take_while(|&&(k, _)| k <= to).any(|(_, n)| reaching.contains(n))
}

fn instrument_loops(
    src: &Source,
    out: &mut [String],
    sited: &[usize],
    calls: &[(usize, &str)],
    reaching: &HashSet<&str>,
    in_function: &dyn Fn(usize) -> bool,
) -> Result<(), String> {
    let sig = src.sig;
    let mut do_whiles = HashSet::new();
    for k in 0..src.len() {
        let word = src.tok(k).text.as_str();
        let is_loop = src.tok(k).kind == Kind::Ident
            && (word == "do" || ((word == "for" || word == "while") && src.is(k + 1, "(")))
            && !do_whiles.contains(&k);
        if !is_loop || !in_function(k) {
            continue;
        }
        let line = src.tok(k).line;
        let end =
            src.statement_end(k).ok_or_else(|| format!("line {line}: cannot find where this `{word}` loop ends"))?;
        if word == "do" {
            // `do body while (cond);`: the `while` is at end - 1 - (its parentheses).
            if let Some(w) = src.matching_back(end - 1).map(|open| open - 1) {
                do_whiles.insert(w);
            }
        }
        if !reaches(k, end, sited, calls, reaching) {
            continue;
        }
        out[sig[k]].insert_str(0, &format!("for (kiln::rt::LoopScope kiln_loop({k}); kiln_loop.once(); ) "));
        let step_in_condition = |out: &mut [String], open: usize, close: usize| {
            // A condition that declares a variable cannot start with an expression.
            let declares = src.ident(open + 1) && src.ident(open + 2) && close > open + 3;
            if declares {
                out[sig[close + 1]].insert_str(0, "if (kiln_loop.step(), false) {} else ");
            } else {
                out[sig[open + 1]].insert_str(0, "kiln_loop.step(), ");
            }
        };
        match word {
            "do" => {
                let close = end - 1;
                let open = src.matching_back(close).ok_or("unbalanced do-while condition")?;
                out[sig[open + 1]].insert_str(0, "kiln_loop.step(), ");
            }
            "while" => {
                let close = src.matching(k + 1).ok_or("unbalanced while condition")?;
                step_in_condition(out, k + 1, close);
            }
            _ => {
                let close = src.matching(k + 1).ok_or("unbalanced for header")?;
                let mut depth = 0i32;
                let mut semis = Vec::new();
                for j in k + 2..close {
                    match src.tok(j).text.as_str() {
                        "(" | "[" | "{" => depth += 1,
                        ")" | "]" | "}" => depth -= 1,
                        ";" if depth == 0 => semis.push(j),
                        _ => {}
                    }
                }
                match semis[..] {
                    [_, b] if b + 1 == close => out[sig[close]].insert_str(0, "kiln_loop.step()"),
                    [_, b] => out[sig[b + 1]].insert_str(0, "kiln_loop.step(), "),
                    // A range `for`: counted before its body.
                    [] => out[sig[close + 1]].insert_str(0, "if (kiln_loop.step(), false) {} else "),
                    _ => return Err(format!("line {line}: malformed `for` header")),
                }
            }
        }
    }
    Ok(())
}

/// The function bodies of the program (with what they are) and the names declared without a
/// body at file or struct scope (`T f(args);`).
fn find_scopes(src: &Source, kernels: &HashSet<String>) -> (Vec<Scope>, HashSet<String>) {
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
                    Some(name) => {
                        if let Some(close) = src.matching(k) {
                            scopes.push(Scope { open: k, close, body: Body::Opaque { name } });
                        }
                        Brace::Function
                    }
                    None => Brace::Block,
                }
            } else {
                match outer_brace(src, k, stack.last() == Some(&Brace::Struct)) {
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
/// `scope_for_brace`): a function body when it follows `)` (possibly `) const`).
fn outer_brace(src: &Source, k: usize, in_struct: bool) -> OuterBrace {
    if in_struct && k > 0 && src.is(k - 1, ")") {
        return OuterBrace::Function;
    }
    let mut j = k;
    while j > 0 {
        j -= 1;
        match src.tok(j).text.as_str() {
            ";" | "{" | "}" => break,
            "struct" | "class" | "union" => return OuterBrace::Struct,
            "namespace" | "extern" | "enum" | "=" => return OuterBrace::Other,
            ")" if j + 1 == k => return OuterBrace::Function,
            _ => {}
        }
    }
    let mut j = k;
    while j > 0 && matches!(src.tok(j - 1).text.as_str(), "const" | "noexcept" | "override" | "final") {
        j -= 1;
    }
    if j > 0 && j < k && src.is(j - 1, ")") {
        OuterBrace::Function
    } else {
        OuterBrace::Other
    }
}

/// The function whose body opens at `k`.
fn function_head(src: &Source, k: usize, kernels: &HashSet<String>) -> Body {
    let opaque = Body::Opaque { name: None };
    let mut close = k - 1;
    while !src.is(close, ")") && close > 0 {
        close -= 1;
    }
    let Some(open) = src.matching_back(close) else { return opaque };
    if open == 0 {
        return opaque;
    }
    if src.is(open - 1, ">") {
        // An explicit specialisation `f<A>(...)`: its calls look like the primary's.
        return Body::Opaque {
            name: angle_open(src, open - 1).filter(|&a| src.ident(a - 1)).map(|a| src.tok(a - 1).text.clone()),
        };
    }
    if !src.ident(open - 1) {
        return opaque; // an operator
    }
    let name_at = open - 1;
    let name = src.tok(name_at).text.clone();
    // Everything from the start of the declaration to the name.
    let mut start = name_at;
    while start > 0 && !matches!(src.tok(start - 1).text.as_str(), ";" | "{" | "}") {
        start -= 1;
    }
    let decl: Vec<&Token> = (start..name_at).map(|j| src.tok(j)).collect();
    let is_kernel = kernels.contains(&name)
        || decl.iter().any(|t| t.is("kernel") || (t.kind == Kind::Attr && t.attr_inner() == "kernel"));
    if is_kernel {
        return Body::Kernel;
    }
    let before = if name_at > 0 { src.tok(name_at - 1).text.as_str() } else { "" };
    if name == "operator" || matches!(before, "::" | "~" | ":" | "," | "operator") {
        return Body::Opaque { name: None }; // out of class, destructor, member initialiser, operator
    }
    // A return type: something besides specifiers and the template header.
    let mut depth = 0i32;
    let mut has_type = false;
    for t in &decl {
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
    let params: Vec<&Token> = (open + 1..close).map(|j| src.tok(j)).collect();
    let mut depth = 0i32;
    let mut plain = has_type && !(params.len() == 1 && params[0].is("void"));
    for t in &params {
        match t.text.as_str() {
            "(" | "[" | "{" | "<" => depth += 1,
            ")" | "]" | "}" | ">" => depth -= 1,
            ">>" => depth -= 2,
            "..." => plain = false,
            "=" if depth == 0 => plain = false,
            _ => {}
        }
    }
    if plain {
        Body::Extendable { name, params: (open, close) }
    } else {
        Body::Opaque { name: Some(name) }
    }
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

/// For a `{` inside a function body that opens a lambda's body: `Some(name)` when the lambda
/// initialises `auto name`, `Some(None)` for any other lambda.
fn lambda_at(src: &Source, k: usize) -> Option<Option<String>> {
    let mut j = k;
    // Trailing return type and specifiers back to `)` or `]`.
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
    }
    if src.is(j, ")") {
        j = src.matching_back(j)?.checked_sub(1)?;
    }
    if !src.is(j, "]") {
        return None;
    }
    let intro = src.matching_back(j)?;
    if !src.lambda_introducer(intro) {
        return None;
    }
    let named = intro >= 3 && src.is(intro - 1, "=") && src.ident(intro - 2) && src.is(intro - 3, "auto");
    Some(named.then(|| src.tok(intro - 2).text.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lowered(src: &str) -> String {
        let toks = tokenize(src);
        let sig: Vec<usize> = (0..toks.len()).filter(|&i| !toks[i].is_trivia()).collect();
        let mut out: Vec<String> = toks.iter().map(|t| t.text.clone()).collect();
        let kernels: HashSet<String> = ["k".to_string()].into_iter().collect();
        instrument(&toks, &sig, &mut out, &kernels).unwrap();
        out.concat()
    }

    #[test]
    fn helpers_that_reach_simd_functions_take_their_call_site() {
        let text = lowered(
            "template <typename T> T lanesum(T v) { return simd_sum(v); }\n\
             float plain(float v) { return v * 2.0f; }\n\
             kernel void k(uint l) { float r = l & 1 ? lanesum(1.0f) : lanesum(plain(2.0f)); }\n",
        );
        assert!(text.contains(
            "T lanesum(T v, kiln::rt::CallSite kiln_call_site = kiln::rt::CallSite::unknown(1)) { kiln::rt::CallScope"
        ));
        assert!(text.contains("float plain(float v) { return"), "{text}");
        assert_eq!(text.matches("kiln::rt::CallSite(").count(), 2, "{text}");
        assert!(!text.contains("plain(2.0f, kiln"), "{text}");
        assert!(!text.contains("void k(uint l) { kiln"), "{text}");
    }

    #[test]
    fn loops_that_reach_simd_functions_count_iterations() {
        let text = lowered(
            "kernel void k(uint l) {\n  int s = 0;\n  for (uint i = 0; i < 2; ++i) { s += simd_sum(1); }\n\
             for (;;) { if (simd_any(true)) break; }\n  while (l < 4) l += simd_max(l);\n\
             do { s += 1; } while (simd_any(s < 3));\n  for (int j = 0; j < 3; ++j) s += j;\n}\n",
        );
        assert!(text.contains("; kiln_loop.once(); ) for (uint i = 0; i < 2; kiln_loop.step(), ++i)"), "{text}");
        assert!(text.contains("for (;;kiln_loop.step())"), "{text}");
        assert!(text.contains("while (kiln_loop.step(), l < 4)"), "{text}");
        assert!(text.contains("while (kiln_loop.step(), simd_any(s < 3))"), "{text}");
        assert!(text.contains("\n  for (int j = 0"), "a loop without SIMD-group functions stays: {text}");
    }

    #[test]
    fn functions_whose_calls_cannot_carry_a_site_get_an_unknown_one() {
        let text = lowered(
            "struct Op { float operator()(float v) { return simd_sum(v); } };\n\
             float dflt(float v, int n = 2) { return simd_max(v) * n; }\n\
             kernel void k(uint l) { Op op; auto f = [&](float v) { return simd_min(v); }; float r = op(1.0f) + dflt(2.0f) + f(3.0f); }\n",
        );
        assert_eq!(
            text.matches("kiln::rt::CallScope kiln_call_scope(kiln::rt::CallSite::unknown(").count(),
            3,
            "{text}"
        );
        assert!(!text.contains("kiln::rt::CallSite("), "no call passes a site: {text}");
    }
}
