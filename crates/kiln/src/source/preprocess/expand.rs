//! Macro definitions and their expansion, as C++ [cpp.replace] specifies it: object- and
//! function-like macros, variadic ones (`...` with `__VA_ARGS__`, GNU `name...` and the GNU
//! `, ## __VA_ARGS__` comma that disappears with empty arguments), `#` stringizing and `##`
//! pasting, arguments fully expanded before substitution unless next to `#` or `##`, and the
//! result rescanned with the rest of the text.
//!
//! Recursion is stopped with hide sets (Prosser's algorithm, as in the C standard's rationale):
//! every token carries the names of the macros that produced it, and a macro never expands a
//! token whose hide set holds its name. Newlines inside an invocation are put back after its
//! expansion, so the text keeps its line count.

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use super::lex::{lex, HideSet, PpKind, PpToken};
use crate::source::limits::{exceeded, MAX_EXPANSION_TOKENS, MAX_MACRO_DEPTH};

/// A macro definition.
#[derive(Clone, Debug)]
pub struct Macro {
    /// The parameter names of a function-like macro; `None` for an object-like macro.
    pub params: Option<Vec<String>>,
    /// The last parameter takes the variable arguments.
    pub variadic: bool,
    /// The replacement list: significant tokens, with `space` set where whitespace preceded.
    pub body: Vec<PpToken>,
}

/// The macros defined so far.
#[derive(Default)]
pub struct Macros {
    defs: HashMap<String, Rc<Macro>>,
    ids: HashMap<String, u32>,
    /// Tokens produced by substitutions and arguments rescanned so far, against
    /// `MAX_EXPANSION_TOKENS`.
    produced: usize,
    /// Arguments being expanded inside arguments, against `MAX_MACRO_DEPTH`.
    depth: usize,
}

/// The arguments of one invocation: the tokens of each, and the commas between them (kept for
/// the variable arguments, which are all arguments from the last parameter on).
struct Args {
    args: Vec<Vec<PpToken>>,
    commas: Vec<PpToken>,
    close: PpToken,
    newlines: usize,
}

fn placemarker(line: u32) -> PpToken {
    PpToken { kind: PpKind::Placemarker, text: String::new(), space: false, hide: HideSet::default(), line }
}

fn newline(line: u32) -> PpToken {
    PpToken { kind: PpKind::Newline, text: "\n".into(), space: false, hide: HideSet::default(), line }
}

impl Macros {
    pub fn define(&mut self, name: &str, m: Macro) {
        self.defs.insert(name.to_string(), Rc::new(m));
    }

    pub fn undef(&mut self, name: &str) {
        self.defs.remove(name);
    }

    pub fn is_defined(&self, name: &str) -> bool {
        self.defs.contains_key(name)
    }

    fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let next = self.ids.len() as u32;
        *self.ids.entry(name.to_string()).or_insert(next)
    }

    /// Expands every macro invocation in `tokens` (blank tokens included, and kept where they are
    /// outside invocations).
    pub fn expand(&mut self, tokens: Vec<PpToken>) -> Result<Vec<PpToken>, String> {
        let mut work: VecDeque<PpToken> = tokens.into();
        let mut out = Vec::with_capacity(work.len());
        while let Some(t) = work.pop_front() {
            let Some(m) = (t.kind == PpKind::Ident).then(|| self.defs.get(&t.text)).flatten().cloned() else {
                out.push(t);
                continue;
            };
            let id = self.id(&t.text);
            if t.hide.contains(id) {
                out.push(t);
                continue;
            }
            let (body, newlines) = match &m.params {
                None => (self.substitute(&t, &m, &[], t.hide.with(id))?, 0),
                Some(params) => {
                    let Some(open) = work.iter().position(|w| !w.is_blank()) else {
                        out.push(t);
                        continue;
                    };
                    if !work[open].is_punct("(") {
                        out.push(t);
                        continue;
                    }
                    let a = collect_args(&mut work, open, &t)?;
                    let args = bind_args(&t, params, m.variadic, a.args, &a.commas)?;
                    let hide = t.hide.intersection(&a.close.hide).with(id);
                    (self.substitute(&t, &m, &args, hide)?, a.newlines)
                }
            };
            for _ in 0..newlines {
                work.push_front(newline(t.line));
            }
            for tok in body.into_iter().rev() {
                work.push_front(tok);
            }
        }
        Ok(out)
    }

    /// The replacement list of `m` invoked at `at`, with `args` substituted; every token gets
    /// `hide` added to its hide set.
    fn substitute(
        &mut self,
        at: &PpToken,
        m: &Macro,
        args: &[Vec<PpToken>],
        hide: HideSet,
    ) -> Result<Vec<PpToken>, String> {
        if hide.len() > MAX_MACRO_DEPTH {
            return Err(format!(
                "line {}: expanding macro `{}`: {}",
                at.line,
                at.text,
                exceeded("the nesting of macro expansions", MAX_MACRO_DEPTH)
            ));
        }
        let params: &[String] = m.params.as_deref().unwrap_or(&[]);
        let param = |t: &PpToken| (t.kind == PpKind::Ident).then(|| params.iter().position(|p| *p == t.text)).flatten();
        let mut expanded: Vec<Option<Vec<PpToken>>> = vec![None; args.len()];
        let mut out: Vec<PpToken> = Vec::new();
        let body = &m.body;
        let mut i = 0;
        while i < body.len() {
            let t = &body[i];
            if m.params.is_some() && t.is_punct("#") {
                let p = body.get(i + 1).and_then(param).ok_or_else(|| {
                    format!("line {}: in macro `{}`, `#` is not followed by a parameter", at.line, at.text)
                })?;
                self.charge(at, 1)?;
                out.push(stringize(&args[p], t.space, at.line));
                i += 2;
                continue;
            }
            if t.is_punct("##") && i + 1 < body.len() {
                let rhs = &body[i + 1];
                i += 2;
                let rhs_toks = match param(rhs) {
                    // `, ## __VA_ARGS__`: the comma goes when there are no variable arguments.
                    Some(p) if m.variadic && p + 1 == params.len() && out.last().is_some_and(|l| l.is_punct(",")) => {
                        if args[p].is_empty() {
                            out.pop();
                        } else {
                            self.charge(at, args[p].len())?;
                            out.extend(spaced(args[p].clone(), rhs.space));
                        }
                        continue;
                    }
                    Some(p) if args[p].is_empty() => vec![placemarker(at.line)],
                    Some(p) => args[p].clone(),
                    None => vec![rhs.clone()],
                };
                self.charge(at, rhs_toks.len())?;
                let lhs = out.pop().unwrap_or_else(|| placemarker(at.line));
                out.push(paste(at, &lhs, &rhs_toks[0])?);
                out.extend(rhs_toks.into_iter().skip(1));
                continue;
            }
            if let Some(p) = param(t) {
                let toks = if body.get(i + 1).is_some_and(|n| n.is_punct("##")) {
                    if args[p].is_empty() {
                        vec![placemarker(at.line)]
                    } else {
                        args[p].clone()
                    }
                } else {
                    if expanded[p].is_none() {
                        expanded[p] = Some(self.expand_argument(at, args[p].clone())?);
                    }
                    expanded[p].clone().unwrap_or_default()
                };
                self.charge(at, toks.len())?;
                out.extend(spaced(toks, t.space));
                i += 1;
                continue;
            }
            self.charge(at, 1)?;
            let mut t = t.clone();
            t.line = at.line;
            out.push(t);
            i += 1;
        }
        out.retain(|t| t.kind != PpKind::Placemarker);
        // Tokens of one argument share their set, so the union is computed once for them.
        let mut last: Option<(HideSet, HideSet)> = None;
        for t in &mut out {
            let union = match &last {
                Some((from, to)) if from.same(&t.hide) => to.clone(),
                _ => {
                    let to = t.hide.union(&hide);
                    last = Some((t.hide.clone(), to.clone()));
                    to
                }
            };
            t.hide = union;
        }
        if let Some(first) = out.first_mut() {
            first.space = at.space;
        }
        Ok(out)
    }
}

impl Macros {
    /// Counts `n` tokens produced by the expansion of the macro at `at`; past the budget the
    /// expansion stops before its text is built.
    fn charge(&mut self, at: &PpToken, n: usize) -> Result<(), String> {
        self.produced += n;
        if self.produced > MAX_EXPANSION_TOKENS {
            return Err(format!(
                "line {}: expanding macro `{}`: {}",
                at.line,
                at.text,
                exceeded("the tokens produced or rescanned by macro expansion", MAX_EXPANSION_TOKENS)
            ));
        }
        Ok(())
    }

    /// The full expansion of an argument of the macro invoked at `at`, one level deeper.
    fn expand_argument(&mut self, at: &PpToken, arg: Vec<PpToken>) -> Result<Vec<PpToken>, String> {
        if self.depth >= MAX_MACRO_DEPTH {
            return Err(format!(
                "line {}: expanding macro `{}`: {}",
                at.line,
                at.text,
                exceeded("the nesting of macro invocations in arguments", MAX_MACRO_DEPTH)
            ));
        }
        // Rescanning the argument is work too: nested invocations rescan their arguments once
        // per level.
        self.charge(at, arg.len())?;
        self.depth += 1;
        let expanded = self.expand(arg);
        self.depth -= 1;
        expanded
    }
}

/// `toks` with the first token's leading space set to `space`.
fn spaced(mut toks: Vec<PpToken>, space: bool) -> Vec<PpToken> {
    if let Some(first) = toks.first_mut() {
        first.space = space;
    }
    toks
}

/// Takes `name ( args )` off the front of `work` (`open` is the position of the `(`): the
/// arguments' significant tokens, split at commas outside nested parentheses.
fn collect_args(work: &mut VecDeque<PpToken>, open: usize, name: &PpToken) -> Result<Args, String> {
    let mut newlines = 0;
    for _ in 0..=open {
        if let Some(t) = work.pop_front() {
            newlines += t.newlines();
        }
    }
    let mut args = vec![Vec::new()];
    let mut commas = Vec::new();
    let mut depth = 0usize;
    let mut space = false;
    loop {
        let Some(mut t) = work.pop_front() else {
            return Err(format!("line {}: unterminated invocation of macro `{}`", name.line, name.text));
        };
        if t.is_blank() {
            newlines += t.newlines();
            space = true;
            continue;
        }
        t.space = space;
        space = false;
        if t.is_punct(")") && depth == 0 {
            return Ok(Args { args, commas, close: t, newlines });
        }
        if t.is_punct(",") && depth == 0 {
            commas.push(t);
            args.push(Vec::new());
            continue;
        }
        if t.is_punct("(") {
            depth += 1;
        } else if t.is_punct(")") {
            depth -= 1;
        }
        if let Some(last) = args.last_mut() {
            last.push(t);
        }
    }
}

/// Matches the arguments of an invocation to `params`: one per parameter, the variable
/// arguments (with their commas) as the last.
fn bind_args(
    name: &PpToken,
    params: &[String],
    variadic: bool,
    mut args: Vec<Vec<PpToken>>,
    commas: &[PpToken],
) -> Result<Vec<Vec<PpToken>>, String> {
    // `F()` passes one empty argument, which is no argument for a macro without parameters.
    if params.is_empty() && args.len() == 1 && args[0].is_empty() {
        args.clear();
    }
    let named = params.len() - usize::from(variadic);
    let count_ok = if variadic { args.len() >= named } else { args.len() == params.len() };
    if !count_ok {
        return Err(format!(
            "line {}: macro `{}` takes {}{} argument{}, but {} were given",
            name.line,
            name.text,
            if variadic { "at least " } else { "" },
            named,
            if named == 1 { "" } else { "s" },
            args.len()
        ));
    }
    if variadic {
        let mut rest = Vec::new();
        for (k, arg) in args.drain(named..).enumerate() {
            if k > 0 {
                rest.push(commas[named + k - 1].clone());
            }
            rest.extend(arg);
        }
        args.push(rest);
    }
    Ok(args)
}

/// `#param`: the argument's spelling as a string literal, whitespace between tokens shrunk to
/// one space, `"` and `\` escaped inside literals.
fn stringize(arg: &[PpToken], space: bool, line: u32) -> PpToken {
    let mut s = String::from("\"");
    for (k, t) in arg.iter().enumerate() {
        if k > 0 && t.space {
            s.push(' ');
        }
        if t.kind == PpKind::Str {
            for c in t.text.chars() {
                if c == '"' || c == '\\' {
                    s.push('\\');
                }
                s.push(c);
            }
        } else {
            s.push_str(&t.text);
        }
    }
    s.push('"');
    PpToken { kind: PpKind::Str, text: s, space, hide: HideSet::default(), line }
}

/// `a ## b`: one token spelled as both together (a placemarker is the empty token).
fn paste(at: &PpToken, a: &PpToken, b: &PpToken) -> Result<PpToken, String> {
    if a.kind == PpKind::Placemarker {
        return Ok(PpToken { space: a.space, ..b.clone() });
    }
    if b.kind == PpKind::Placemarker {
        return Ok(a.clone());
    }
    let text = format!("{}{}", a.text, b.text);
    let toks = lex(&text);
    match toks.as_slice() {
        [one] if !one.is_blank() => {
            Ok(PpToken { kind: one.kind, text, space: a.space, hide: a.hide.clone(), line: a.line })
        }
        _ => Err(format!(
            "line {}: in macro `{}`, pasting `{}` and `{}` does not give a valid token",
            at.line, at.text, a.text, b.text
        )),
    }
}
