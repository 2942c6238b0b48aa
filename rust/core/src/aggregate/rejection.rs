//! Why an upload is not averaged: a kind from one list (the codes docs/federated.md documents,
//! which every binding and report uses as they are) and a message.

use crate::message::Message;

/// The kinds of rejection. `code()` is the string reports and docs use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectionKind {
    /// Cannot be read, or is not a valid checkpoint.
    Unreadable,
    /// Larger than the round's size limit.
    TooLarge,
    /// The same upload as an earlier one.
    Duplicate,
    /// A nominal checkpoint (no values).
    Nominal,
    /// Lacks a parameter of the reference.
    MissingParameter,
    /// Has a parameter the reference does not.
    ExtraParameter,
    /// Marks a parameter trainable where the reference has it frozen, or the reverse.
    TrainableFlag,
    /// A parameter of another data type.
    Dtype,
    /// A parameter of another shape.
    Shape,
    /// NaN or infinite values.
    NonFinite,
    /// Finite values whose sum with the uploads before it (or whose update) passes float64's limit.
    Overflow,
    /// No usable weight.
    Weight,
    /// Lacks (or has mismatched) momentums the round averages.
    Optimizer,
    /// Trained from a global model older than the round's cut-off.
    Stale,
}

impl RejectionKind {
    /// Every kind, in the order docs/federated.md lists them.
    pub const ALL: [RejectionKind; 14] = [
        RejectionKind::Unreadable,
        RejectionKind::TooLarge,
        RejectionKind::Duplicate,
        RejectionKind::Nominal,
        RejectionKind::MissingParameter,
        RejectionKind::ExtraParameter,
        RejectionKind::TrainableFlag,
        RejectionKind::Dtype,
        RejectionKind::Shape,
        RejectionKind::NonFinite,
        RejectionKind::Overflow,
        RejectionKind::Weight,
        RejectionKind::Optimizer,
        RejectionKind::Stale,
    ];

    /// The kind's code: `missing-parameter`, `non-finite`, ...
    pub fn code(self) -> &'static str {
        match self {
            RejectionKind::Unreadable => "unreadable",
            RejectionKind::TooLarge => "too-large",
            RejectionKind::Duplicate => "duplicate",
            RejectionKind::Nominal => "nominal",
            RejectionKind::MissingParameter => "missing-parameter",
            RejectionKind::ExtraParameter => "extra-parameter",
            RejectionKind::TrainableFlag => "trainable-flag",
            RejectionKind::Dtype => "dtype",
            RejectionKind::Shape => "shape",
            RejectionKind::NonFinite => "non-finite",
            RejectionKind::Overflow => "overflow",
            RejectionKind::Weight => "weight",
            RejectionKind::Optimizer => "optimizer",
            RejectionKind::Stale => "stale",
        }
    }

    /// The kind of `code`, when it is one.
    pub fn from_code(code: &str) -> Option<RejectionKind> {
        RejectionKind::ALL.into_iter().find(|k| k.code() == code)
    }
}

/// Why an upload is not averaged: its kind and a message naming the tensor and what is wrong
/// (its names and shapes as values, for the binding to spell).
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    /// The kind.
    pub kind: RejectionKind,
    /// A sentence for users.
    pub message: Message,
}

impl Rejection {
    /// A rejection of `kind`.
    pub fn new(kind: RejectionKind, message: impl Into<Message>) -> Rejection {
        Rejection { kind, message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_names_one_kind() {
        for kind in RejectionKind::ALL {
            assert_eq!(RejectionKind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(RejectionKind::from_code("no-such-kind"), None);
    }
}
