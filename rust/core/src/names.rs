//! Uniqueness of names: ORT keys parameters, groups, momentums and properties by name.

use std::collections::HashSet;

use crate::{Error, Result};

/// Fails with [`Error::DuplicateName`] on the first name seen twice.
pub(crate) fn ensure_unique<'a>(kind: &'static str, names: impl IntoIterator<Item = &'a str>) -> Result<()> {
    let mut seen = HashSet::new();
    for name in names {
        if !seen.insert(name) {
            return Err(Error::DuplicateName { kind, name: name.to_owned() });
        }
    }
    Ok(())
}
