//! Messages that keep names, shapes and numbers as values, for each binding to spell as its
//! users read them: the core reports the structure, the bindings spell it. Python's binding
//! spells a name as Python's `repr` (`'fc1.weight'`), a shape as a tuple (`(5, 6)`) and a float
//! as Python prints it (`0.0`, `inf`); [`Plain`] (what `Display` and the browser viewer use)
//! spells them as Rust does (`"fc1.weight"`, `[5, 6]`, `0.0`). A leaf: it uses nothing of the
//! crate.

use std::fmt;

/// How a binding spells the values of a [`Message`].
pub trait Spelling {
    /// A name (of a tensor, a property, a file location).
    fn name(&self, name: &str) -> String;
    /// A tensor's shape.
    fn shape(&self, dims: &[i64]) -> String;
    /// A number.
    fn float(&self, value: f64) -> String;
}

/// Rust's spelling: `"name"`, `[5, 6]`, `1.5`.
pub struct Plain;

impl Spelling for Plain {
    fn name(&self, name: &str) -> String {
        format!("{name:?}")
    }

    fn shape(&self, dims: &[i64]) -> String {
        format!("{dims:?}")
    }

    fn float(&self, value: f64) -> String {
        format!("{value:?}")
    }
}

/// One piece of a message.
#[derive(Clone, Debug, PartialEq)]
enum Piece {
    Text(String),
    Name(String),
    Shape(Vec<i64>),
    Float(f64),
}

/// A sentence for users whose names, shapes and numbers a binding spells ([`Message::spell`]).
/// Built piece by piece: `Message::name("w").text(" is missing")`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Message(Vec<Piece>);

impl Message {
    /// A message that starts with `text`.
    pub fn text_first(text: impl Into<String>) -> Message {
        Message(vec![Piece::Text(text.into())])
    }

    /// A message that starts with the name `name`.
    pub fn name_first(name: impl Into<String>) -> Message {
        Message(vec![Piece::Name(name.into())])
    }

    /// This message, then `text`.
    #[must_use]
    pub fn text(mut self, text: impl Into<String>) -> Message {
        self.0.push(Piece::Text(text.into()));
        self
    }

    /// This message, then the name `name`.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Message {
        self.0.push(Piece::Name(name.into()));
        self
    }

    /// This message, then the shape `dims`.
    #[must_use]
    pub fn shape(mut self, dims: &[i64]) -> Message {
        self.0.push(Piece::Shape(dims.to_vec()));
        self
    }

    /// This message, then the number `value`.
    #[must_use]
    pub fn float(mut self, value: f64) -> Message {
        self.0.push(Piece::Float(value));
        self
    }

    /// This message, then `other`.
    #[must_use]
    pub fn then(mut self, other: Message) -> Message {
        self.0.extend(other.0);
        self
    }

    /// The message as `spelling` spells its values.
    pub fn spell(&self, spelling: &dyn Spelling) -> String {
        let mut out = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Name(n) => out.push_str(&spelling.name(n)),
                Piece::Shape(d) => out.push_str(&spelling.shape(d)),
                Piece::Float(v) => out.push_str(&spelling.float(*v)),
            }
        }
        out
    }
}

impl From<String> for Message {
    fn from(text: String) -> Message {
        Message::text_first(text)
    }
}

impl From<&str> for Message {
    fn from(text: &str) -> Message {
        Message::text_first(text)
    }
}

/// [`Plain`]'s spelling.
impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spell(&Plain))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spelling that marks each kind of value, to see which piece is which.
    struct Marked;

    impl Spelling for Marked {
        fn name(&self, name: &str) -> String {
            format!("<{name}>")
        }

        fn shape(&self, dims: &[i64]) -> String {
            format!("<{}>", dims.len())
        }

        fn float(&self, value: f64) -> String {
            format!("<{value}>")
        }
    }

    #[test]
    fn values_are_spelled_by_the_spelling_given() {
        let m = Message::text_first("parameter ")
            .name("w")
            .text(" has shape ")
            .shape(&[5, 6])
            .text(", weight ")
            .float(1.5);
        assert_eq!(m.spell(&Marked), "parameter <w> has shape <2>, weight <1.5>");
        assert_eq!(m.to_string(), "parameter \"w\" has shape [5, 6], weight 1.5");
        let joined = Message::name_first("a").then(Message::text_first(" and ").name("b"));
        assert_eq!(joined.spell(&Marked), "<a> and <b>");
        assert_eq!(Message::from("plain").to_string(), "plain");
    }
}
