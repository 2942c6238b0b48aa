//! Uniqueness of names: ORT keys parameters, groups, momentums and properties by name.

use crate::{Error, Result};

/// Fails with [`Error::DuplicateName`] when a name appears twice (naming the duplicate seen first
/// in file order for a few names, the smallest duplicate otherwise). Sorts instead of hashing:
/// no per-name allocation, and O(n log n) whatever the names.
pub(crate) fn ensure_unique<'a>(kind: &'static str, names: impl IntoIterator<Item = &'a str>) -> Result<()> {
    let names = names.into_iter();
    let mut list: Vec<&str> = crate::alloc::vec_for(names.size_hint().0)?;
    list.extend(names);
    let mut names = list;
    if names.len() <= 8 {
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                return Err(Error::DuplicateName { kind, name: (*name).to_owned() });
            }
        }
        return Ok(());
    }
    names.sort_unstable();
    ensure_unique_sorted(kind, names)
}

/// [`ensure_unique`] for names already in sorted order: duplicates are neighbours.
pub(crate) fn ensure_unique_sorted<'a>(
    kind: &'static str,
    sorted: impl IntoIterator<Item = &'a str>,
) -> Result<()> {
    let mut previous: Option<&str> = None;
    for name in sorted {
        if previous == Some(name) {
            return Err(Error::DuplicateName { kind, name: name.to_owned() });
        }
        previous = Some(name);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_duplicates_small_and_large() {
        assert!(ensure_unique("x", ["a", "b", "c"]).is_ok());
        let e = ensure_unique("x", ["b", "a", "b", "a"]).unwrap_err();
        assert!(matches!(e, Error::DuplicateName { kind: "x", ref name } if name == "b"), "{e}");
        let many: Vec<String> = (0..100).map(|i| format!("n{i}")).collect();
        assert!(ensure_unique("x", many.iter().map(String::as_str)).is_ok());
        let mut dup = many.clone();
        dup.push("n57".into());
        let e = ensure_unique("x", dup.iter().map(String::as_str)).unwrap_err();
        assert!(matches!(e, Error::DuplicateName { ref name, .. } if name == "n57"), "{e}");
    }
}
