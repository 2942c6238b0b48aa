//! How messages spell names, shapes and numbers: as Python does (`'fc1.weight'`, `(5,)`, `0.0`),
//! since the messages reach Python users first. A leaf: anything may use it, it uses nothing.

/// Python's `repr` of a string, for names in messages.
pub fn py_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's spelling of a shape: `()`, `(5,)`, `(5, 6)`.
pub(crate) fn py_tuple(dims: &[i64]) -> String {
    match dims {
        [one] => format!("({one},)"),
        _ => format!("({})", dims.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// Python's spelling of a float (`0.0`, `-1.5`, `inf`, `nan`).
pub(crate) fn py_float(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        }
    } else if v == v.trunc() && v.abs() < 1e16 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_spellings() {
        assert_eq!(py_repr("fc1.weight"), "'fc1.weight'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a\nb\\"), "'a\\nb\\\\'");
        assert_eq!(py_tuple(&[]), "()");
        assert_eq!(py_tuple(&[5]), "(5,)");
        assert_eq!(py_tuple(&[5, 6]), "(5, 6)");
        assert_eq!(py_float(0.0), "0.0");
        assert_eq!(py_float(-1.5), "-1.5");
        assert_eq!(py_float(f64::NEG_INFINITY), "-inf");
    }
}
