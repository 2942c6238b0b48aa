//! Fallible allocation for every buffer whose size comes from an input (a count of tensors, dims
//! or strings read from a file, an archive's declared sizes): an allocation the process cannot
//! make becomes [`Error::OutOfMemory`] (Python: `MemoryError`), never Rust's default abort. The
//! readers check each such size against the input's length first, so it is the input's own size
//! that is too large for the memory (or the address-space limit) the process has, not a forged
//! count.

use crate::{Error, Result};

fn out_of_memory<T>(count: usize) -> Error {
    Error::OutOfMemory { bytes: count.saturating_mul(std::mem::size_of::<T>().max(1)) }
}

/// An empty vector with room for `count` items.
pub(crate) fn vec_for<T>(count: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    reserve(&mut v, count)?;
    Ok(v)
}

/// Room for `count` more items in `v`.
pub(crate) fn reserve<T>(v: &mut Vec<T>, count: usize) -> Result<()> {
    v.try_reserve(count).map_err(|_| out_of_memory::<T>(count))
}

/// Room for `count` more bytes in `s`.
pub(crate) fn reserve_str(s: &mut String, count: usize) -> Result<()> {
    s.try_reserve(count).map_err(|_| out_of_memory::<u8>(count))
}

/// Fails with [`Error::OutOfMemory`] unless `bytes` can be allocated now (the block is freed at
/// once): called before handing an input to a library whose own allocations grow with it (the
/// zip crate's directory, serde_json's header tree) and would abort when they fail. It makes
/// such an abort unlikely, not impossible: memory may run out between the probe and the use.
pub(crate) fn probe(bytes: usize) -> Result<()> {
    let mut block: Vec<u8> = Vec::new();
    block.try_reserve_exact(bytes).map_err(|_| Error::OutOfMemory { bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_sizes_are_errors_not_aborts() {
        let err = vec_for::<u64>(usize::MAX / 2).unwrap_err();
        assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
        assert!(err.to_string().contains("out of memory"), "{err}");
        assert!(reserve_str(&mut String::new(), usize::MAX).is_err());
        assert_eq!(vec_for::<u8>(16).unwrap().capacity(), 16);
    }
}
