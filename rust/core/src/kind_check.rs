//! The readers' check of a file's kind, as an error: a file recognized as another kind than the
//! reader's (`sniff.rs` tells which) fails with [`Error::WrongKind`], whose message says what it is
//! and what reads it.

use crate::sniff::{sniff, FileKind};
use crate::Error;

/// `Err(Error::WrongKind)` when `head` is recognized as another kind than `expected`; `Ok` when
/// it is `expected` or unrecognized (the reader then gives its own message if it fails).
pub fn expect_kind(head: &[u8], len: u64, expected: FileKind) -> Result<(), Error> {
    match sniff(head, len) {
        Some(found) if found != expected => Err(Error::WrongKind { expected, found }),
        _ => Ok(()),
    }
}

/// The error a reader expecting `expected` gives when its format check failed with `otherwise`:
/// [`Error::WrongKind`] when the input was recognized as another kind (`found`), else `otherwise`.
pub(crate) fn not_a(expected: FileKind, found: Option<FileKind>, otherwise: Error) -> Error {
    match found {
        Some(found) if found != expected => Error::WrongKind { expected, found },
        _ => otherwise,
    }
}
