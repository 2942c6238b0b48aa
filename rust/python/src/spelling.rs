//! How the core's messages spell names, shapes and numbers for Python users: as Python does
//! (`'fc1.weight'`, `(5,)`, `0.0`), the way the same values look in their own code
//! (`ortckpt_core::Message` keeps them as values). A leaf of the binding.

use ortckpt_core::{Error, Message, Spelling};

/// Python's spelling.
pub(crate) struct Python;

impl Spelling for Python {
    /// Python's `repr` of a string.
    fn name(&self, text: &str) -> String {
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

    /// A tuple: `()`, `(5,)`, `(5, 6)`.
    fn shape(&self, dims: &[i64]) -> String {
        match dims {
            [one] => format!("({one},)"),
            _ => format!("({})", dims.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")),
        }
    }

    /// `0.0`, `-1.5`, `inf`, `nan`.
    fn float(&self, v: f64) -> String {
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
}

/// `message` as Python users read it.
pub(crate) fn spell(message: &Message) -> String {
    message.spell(&Python)
}

/// `error`'s message as Python users read it.
pub(crate) fn spell_error(error: &Error) -> String {
    error.spelled(&Python)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_spellings() {
        let p = Python;
        assert_eq!(p.name("fc1.weight"), "'fc1.weight'");
        assert_eq!(p.name("it's"), "\"it's\"");
        assert_eq!(p.name("a\nb\\"), "'a\\nb\\\\'");
        assert_eq!(p.shape(&[]), "()");
        assert_eq!(p.shape(&[5]), "(5,)");
        assert_eq!(p.shape(&[5, 6]), "(5, 6)");
        assert_eq!(p.float(0.0), "0.0");
        assert_eq!(p.float(-1.5), "-1.5");
        assert_eq!(p.float(f64::NEG_INFINITY), "-inf");
        let m = Message::text_first("parameter ").name("w").text(" has shape ").shape(&[3]);
        assert_eq!(spell(&m), "parameter 'w' has shape (3,)");
    }
}
