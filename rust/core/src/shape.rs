//! Element counts and byte sizes of tensors, with checked arithmetic.

use crate::{DataType, Error, Result};

/// The number of elements of a tensor with `dims` (1 for a scalar), checked for negative
/// dimensions and overflow.
pub(crate) fn element_count(tensor: &str, dims: &[i64]) -> Result<u64> {
    let mut count: u64 = 1;
    for &d in dims {
        let d = u64::try_from(d)
            .map_err(|_| Error::NegativeDim { tensor: tensor.to_owned(), dims: dims.to_vec() })?;
        count = count
            .checked_mul(d)
            .ok_or_else(|| Error::SizeOverflow { tensor: tensor.to_owned(), dims: dims.to_vec() })?;
    }
    Ok(count)
}

/// The byte size of a numeric tensor's data (`None` for strings).
pub(crate) fn byte_size(tensor: &str, data_type: DataType, dims: &[i64]) -> Result<Option<u64>> {
    let count = element_count(tensor, dims)?;
    match data_type.element_size() {
        None => Ok(None),
        Some(size) => count
            .checked_mul(size)
            .map(Some)
            .ok_or_else(|| Error::SizeOverflow { tensor: tensor.to_owned(), dims: dims.to_vec() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(element_count("t", &[]).unwrap(), 1);
        assert_eq!(element_count("t", &[2, 0, 3]).unwrap(), 0);
        assert_eq!(byte_size("t", DataType::Double, &[3, 4]).unwrap(), Some(96));
        assert_eq!(byte_size("t", DataType::String, &[3]).unwrap(), None);
    }

    #[test]
    fn negative_and_overflow() {
        assert!(matches!(element_count("t", &[2, -1]), Err(Error::NegativeDim { .. })));
        assert!(matches!(element_count("t", &[i64::MAX, i64::MAX]), Err(Error::SizeOverflow { .. })));
        assert!(matches!(byte_size("t", DataType::Complex128, &[i64::MAX]), Err(Error::SizeOverflow { .. })));
    }
}
