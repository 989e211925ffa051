//! Metal's shader logging (`os_log`, MSL 3.2) for both targets.
//!
//! A call `LOG.log(FORMAT, args...)` (also `log_debug`, `log_info`, `log_error`, `log_fault`
//! and `log_with_type(TYPE, FORMAT, ...)`), where `LOG` is `os_log_default` or a name declared
//! `os_log`, becomes an immediately called lambda that evaluates the arguments once, in order,
//! and hands `kiln::oslog::print` (prelude `*/oslog.h`) one printf format: the thread tag, then
//! the user's format with every conversion widened to what the argument becomes (integers to
//! 64 bits with `ll`, floats of any width to `double`, vectors spelled out lane by lane). The
//! CPU formats it with `snprintf`, CUDA passes it to device `printf`, so both print the same
//! line. A conversion Metal does not allow is refused with its line.
//!
//! Text is only replaced or added on the call's own tokens and never holds a newline, so lines
//! stay where they were.

use std::collections::HashSet;
use std::fmt::Write;

use crate::source::cursor::Cursor;
use crate::source::tokens::Kind;

const METHODS: [(&str, &str); 6] = [
    ("log", "metal::os_log_type_default"),
    ("log_debug", "metal::os_log_type_debug"),
    ("log_info", "metal::os_log_type_info"),
    ("log_error", "metal::os_log_type_error"),
    ("log_fault", "metal::os_log_type_fault"),
    ("log_with_type", ""),
];

/// Lowers every logging call of the program in `out` (the text of each significant token).
/// `kernel` names the program in the tag each line starts with.
pub(super) fn lower_calls(src: &Cursor, out: &mut [String], kernel: &str) -> Result<(), String> {
    let mut logs: HashSet<&str> = HashSet::from(["os_log_default"]);
    // Objects and references declared `os_log NAME`, `const constant os_log& NAME`, ...
    for k in 0..src.len() {
        if src.is(k, "os_log") {
            let mut j = k + 1;
            while ["&", "const", "constant", "thread"].iter().any(|s| src.is(j, s)) {
                j += 1;
            }
            if src.ident(j) {
                logs.insert(src.tok(j).text.as_str());
            }
        }
    }
    let mut k = 0;
    while k + 3 < src.len() {
        let call = src.ident(k)
            && logs.contains(src.tok(k).text.as_str())
            && src.is(k + 1, ".")
            && src.is(k + 3, "(")
            && !(k > 0 && (src.is(k - 1, ".") || src.is(k - 1, "->")));
        let method = METHODS.iter().find(|(m, _)| src.is(k + 2, m));
        match (call, method) {
            (true, Some(&(name, level))) => {
                k = lower_call(src, out, kernel, k, name, level)?;
            }
            _ => k += 1,
        }
    }
    Ok(())
}

/// Lowers the call whose log object is at `k`; returns the position after it.
fn lower_call(
    src: &Cursor,
    out: &mut [String],
    kernel: &str,
    k: usize,
    method: &str,
    level: &str,
) -> Result<usize, String> {
    // Where the call stands, as kiln's errors name it (mapped to the user's line later).
    let at = format!("line {}, column {}", src.tok(k).line, src.column(k));
    let open = k + 3;
    let close = src.matching(open).ok_or_else(|| format!("{at}: unbalanced call of {method}"))?;
    let starts = src.arg_starts(open, close, false);
    let sig = &src.sig;
    let with_type = method == "log_with_type";
    let fmt_at = usize::from(with_type);
    let Some(&fmt_start) = starts.get(fmt_at) else {
        return Err(format!("{at}: `{method}` needs a format string"));
    };
    let fmt_end = starts.get(fmt_at + 1).map_or(close, |&s| s - 1);
    if fmt_start == fmt_end || (fmt_start..fmt_end).any(|j| src.tok(j).kind != Kind::Str) {
        return Err(format!("{at}: the format of `{method}` must be a string literal"));
    }
    let mut literal = String::new();
    for j in fmt_start..fmt_end {
        let text = &src.tok(j).text;
        if !text.starts_with('"') || text.len() < 2 {
            return Err(format!("{at}: the format of `{method}` must be a string literal"));
        }
        literal.push_str(&text[1..text.len() - 1]);
    }
    let (format, conversions) = translate(&literal).map_err(|e| format!("{at}: {method}(\"{literal}\"): {e}"))?;
    let values = &starts[fmt_at + 1..];
    if values.len() != conversions.len() {
        return Err(format!(
            "{at}: {method}(\"{literal}\") has {} conversion(s) but {} argument(s)",
            conversions.len(),
            values.len()
        ));
    }
    let set = |out: &mut [String], j: usize, text: String| out[sig[j]] = text;
    // A qualified object (`metal::os_log_default`) keeps its qualification.
    let mut first = k;
    while first >= 2 && src.is(first - 1, "::") && src.ident(first - 2) {
        first -= 2;
    }
    if first >= 1 && src.is(first - 1, "::") {
        first -= 1;
    }
    let object: String = (first..=k).map(|j| src.tok(j).text.as_str()).collect();
    set(out, first, "[&]{ ".to_string());
    for j in first + 1..k {
        set(out, j, String::new());
    }
    for j in k.max(first + 1)..=open {
        set(out, j, String::new());
    }
    let level = if with_type {
        let end = fmt_start - 1;
        out[sig[starts[0]]].insert_str(0, "auto&& kiln_log_type = (");
        out[sig[end - 1]].push_str(");");
        set(out, end, String::new());
        "kiln_log_type".to_string()
    } else {
        level.to_string()
    };
    for j in fmt_start..fmt_end {
        set(out, j, String::new());
    }
    if let Some(&first) = values.first() {
        set(out, first - 1, String::new());
    }
    let mut passed = String::new();
    for (i, (&start, conversion)) in values.iter().zip(&conversions).enumerate() {
        let end = values.get(i + 1).map_or(close, |&s| s - 1);
        out[sig[start]].insert_str(0, &format!("auto&& kiln_log_{i} = ("));
        out[sig[end - 1]].push_str(");");
        if end != close {
            set(out, end, String::new());
        }
        conversion.pass(&format!("kiln_log_{i}"), &mut passed);
    }
    let mut tag = String::from("\"[");
    for c in kernel.chars() {
        match c {
            '%' => tag.push_str("%%"),
            '"' | '\\' => tag.push('_'),
            c if c.is_control() => tag.push('_'),
            c => tag.push(c),
        }
    }
    tag.push_str(" tg(%u,%u,%u) t(%u,%u,%u)] %s%s%s%s%s");
    set(
        out,
        close,
        format!(" kiln::oslog::print(kiln::oslog::as_log({object}), {level}, {tag}{format}\\n\"{passed}); }}()"),
    );
    Ok(close + 1)
}

/// What an argument is converted to before it is passed to printf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Signed(u32),
    Unsigned(u32),
    Float,
    Char,
    Str,
    Pointer,
}

/// One conversion of the format: how its argument is passed, lane by lane for a vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Conversion {
    pass: Pass,
    lanes: usize,
}

impl Conversion {
    /// Appends `, converted(value)` for each lane to `out`.
    fn pass(&self, value: &str, out: &mut String) {
        let convert = |v: String| match self.pass {
            Pass::Signed(bits) => format!("kiln::oslog::signed_arg<{bits}>({v})"),
            Pass::Unsigned(bits) => format!("kiln::oslog::unsigned_arg<{bits}>({v})"),
            Pass::Float => format!("kiln::oslog::float_arg({v})"),
            Pass::Char => format!("kiln::oslog::char_arg({v})"),
            Pass::Str => format!("kiln::oslog::string_arg({v})"),
            Pass::Pointer => format!("kiln::oslog::pointer_arg({v})"),
        };
        if self.lanes == 1 {
            let _ = write!(out, ", {}", convert(value.to_string()));
        } else {
            for lane in 0..self.lanes {
                let _ = write!(out, ", {}", convert(format!("{value}[{lane}]")));
            }
        }
    }
}

/// Translates the text of a Metal format string (escape sequences left as written) into the
/// printf format both targets print with, and the conversions its arguments need.
fn translate(format: &str) -> Result<(String, Vec<Conversion>), String> {
    let b = format.as_bytes();
    let mut out = String::with_capacity(format.len() + 16);
    let mut conversions = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            out.push_str(&format[i..i + 2]);
            i += 2;
            continue;
        }
        if b[i] != b'%' {
            let c = format[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
            continue;
        }
        let start = i;
        i += 1;
        if b.get(i) == Some(&b'%') {
            out.push_str("%%");
            i += 1;
            continue;
        }
        let mut spec = String::from("%");
        while let Some(&c) = b.get(i).filter(|c| b"-+ #0".contains(c)) {
            spec.push(c as char);
            i += 1;
        }
        let digits = |i: &mut usize, spec: &mut String| {
            while let Some(&c) = b.get(*i).filter(|c| c.is_ascii_digit()) {
                spec.push(c as char);
                *i += 1;
            }
        };
        if b.get(i) == Some(&b'*') {
            return Err("a width from an argument (`*`) is not supported".into());
        }
        digits(&mut i, &mut spec);
        if b.get(i) == Some(&b'.') {
            spec.push('.');
            i += 1;
            if b.get(i) == Some(&b'*') {
                return Err("a precision from an argument (`.*`) is not supported".into());
            }
            digits(&mut i, &mut spec);
        }
        let mut lanes = 1;
        if b.get(i) == Some(&b'v') {
            i += 1;
            let from = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            lanes = format[from..i].parse().unwrap_or(0);
            if ![2, 3, 4, 8, 16].contains(&lanes) {
                let written = &format[start..(i + 1).min(format.len())];
                return Err(format!("`{written}`: a vector conversion takes 2, 3, 4, 8 or 16 lanes"));
            }
        }
        let length = ["hh", "hl", "ll", "h", "l"].into_iter().find(|l| format[i..].starts_with(l)).unwrap_or("");
        i += length.len();
        let Some(&conv) = b.get(i) else {
            return Err(format!("`{}` is an incomplete conversion", &format[start..]));
        };
        i += 1;
        let written = &format[start..i];
        let bits = match length {
            "hh" => 8,
            "h" => 16,
            "" | "hl" => 32,
            _ => 64,
        };
        let integer = |spec: &mut String, pass: Pass| {
            spec.push_str("ll");
            spec.push(conv as char);
            pass
        };
        let pass = match conv {
            b'd' | b'i' => integer(&mut spec, Pass::Signed(bits)),
            b'u' | b'o' | b'x' | b'X' => integer(&mut spec, Pass::Unsigned(bits)),
            b'f' | b'F' | b'e' | b'E' | b'g' | b'G' | b'a' | b'A' if length != "hh" && length != "ll" => {
                spec.push(conv as char);
                Pass::Float
            }
            b'c' if length.is_empty() && lanes == 1 => {
                spec.push('c');
                Pass::Char
            }
            b's' if length.is_empty() && lanes == 1 => {
                spec.push('s');
                Pass::Str
            }
            b'p' if length.is_empty() && lanes == 1 && spec == "%" => {
                spec = "0x%llx".into();
                Pass::Pointer
            }
            b'n' => return Err(format!("`{written}` (writing through a pointer) is not allowed")),
            _ => return Err(format!("`{written}` is not a conversion Metal's os_log accepts")),
        };
        if lanes > 1 && length.is_empty() && matches!(pass, Pass::Signed(_) | Pass::Unsigned(_) | Pass::Float) {
            // OpenCL's rule, which Metal follows: a vector conversion names its lane size.
            if !matches!(pass, Pass::Float) {
                return Err(format!("`{written}`: a vector conversion needs a length (hh, h, hl or l)"));
            }
        }
        let one = spec;
        let mut joined = one.clone();
        for _ in 1..lanes {
            joined.push(',');
            joined.push_str(&one);
        }
        out.push_str(&joined);
        conversions.push(Conversion { pass, lanes });
    }
    Ok((out, conversions))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(pass: Pass) -> Conversion {
        Conversion { pass, lanes: 1 }
    }

    #[test]
    fn scalars_widen_to_what_printf_reads() {
        let (f, c) = translate("i=%d u=%5u x=%#x l=%ld h=%hd f=%.3f s=%s c=%c").unwrap();
        assert_eq!(f, "i=%lld u=%5llu x=%#llx l=%lld h=%lld f=%.3f s=%s c=%c");
        assert_eq!(
            c,
            vec![
                conv(Pass::Signed(32)),
                conv(Pass::Unsigned(32)),
                conv(Pass::Unsigned(32)),
                conv(Pass::Signed(64)),
                conv(Pass::Signed(16)),
                conv(Pass::Float),
                conv(Pass::Str),
                conv(Pass::Char)
            ]
        );
    }

    #[test]
    fn vectors_pointers_and_percent() {
        let (f, c) = translate("%v4hlf|%v2hd|%p|100%%").unwrap();
        assert_eq!(f, "%f,%f,%f,%f|%lld,%lld|0x%llx|100%%");
        assert_eq!(c[0], Conversion { pass: Pass::Float, lanes: 4 });
        assert_eq!(c[1], Conversion { pass: Pass::Signed(16), lanes: 2 });
        assert_eq!(c[2], conv(Pass::Pointer));
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn unsupported_conversions_are_refused() {
        for bad in ["%n", "%*d", "%.*f", "%q", "%Lf", "%v5f", "%v4d", "%ls", "%", "%{public}d", "%zu", "%hhf"] {
            assert!(translate(bad).is_err(), "{bad} accepted");
        }
    }
}
