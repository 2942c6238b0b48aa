//! Why an `.npz` archive cannot be read (a leaf: the core's `Error` wraps it).

use std::fmt;

/// Why an archive cannot be read; `member` names the member when one is at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpzError {
    /// The member's name (as stored, lossily decoded for the message), if one is at fault.
    pub member: Option<String>,
    /// What is wrong, as a sentence fragment ("it is truncated").
    pub detail: String,
}

impl fmt::Display for NpzError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.member {
            Some(m) => write!(f, "member {m:?}: {}", self.detail),
            None => write!(f, "{}", self.detail),
        }
    }
}

impl std::error::Error for NpzError {}
