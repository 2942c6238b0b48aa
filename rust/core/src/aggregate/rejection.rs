//! Why an upload is not averaged.

/// Why an upload is not averaged: a short `kind` code (documented in docs/federated.md) and a
/// message naming the tensor and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// `missing-parameter`, `dtype`, `non-finite`, `overflow`, `too-large`, ...
    pub kind: &'static str,
    /// A sentence for users.
    pub message: String,
}

impl Rejection {
    /// A rejection of `kind`.
    pub fn new(kind: &'static str, message: impl Into<String>) -> Rejection {
        Rejection { kind, message: message.into() }
    }
}
