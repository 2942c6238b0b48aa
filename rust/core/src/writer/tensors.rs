//! Tensor tables: each tensor's name, doc string, dims, type and values (strings, or the place of
//! its bytes in the data tail or the external file), for the checkpoint's and the optimizer's
//! tensors alike.

use super::meta::{unless_default, Field, Meta};
use crate::placement::Place;
use crate::schema::fbs;
use crate::spec::{TensorPayload, TensorSpec};
use crate::{Error, Result};

/// Writes the tables of the next `n` tensors of `next` and points the `n` offsets at `first` to
/// them.
pub(super) fn tensor_tables<'s, 'a: 's>(
    m: &mut Meta,
    first: usize,
    n: usize,
    next: &mut impl Iterator<Item = &'s (&'s TensorSpec<'a>, Place)>,
    data: &mut Vec<&'a [u8]>,
) -> Result<()> {
    for i in 0..n {
        let (t, place) = next.next().ok_or_else(|| Error::Internal {
            detail: "placement lists fewer tensors than the spec".into(),
        })?;
        let table = tensor(m, t, *place, data)?;
        m.patch(first + 4 * i, table)?;
    }
    Ok(())
}

/// Writes one Tensor table and its name, doc string, dims and strings; returns its position.
fn tensor<'a>(m: &mut Meta, t: &TensorSpec<'a>, place: Place, data: &mut Vec<&'a [u8]>) -> Result<usize> {
    let external = match place {
        Place::External { offset } => Some(
            i64::try_from(offset)
                .map_err(|_| Error::Internal { detail: "external offset overflow".into() })?,
        ),
        Place::Inline => None,
    };
    let (raw, strings) = match (&t.data, external) {
        // External tensors have no raw_data field at all, as ORT writes them.
        (TensorPayload::Bytes(_), Some(_)) => (false, false),
        (TensorPayload::Bytes(_), None) => (true, false),
        (TensorPayload::Strings(_), _) => (false, true),
        // ORT requires raw_data to be present (if empty) on every numeric tensor, nominal ones too.
        (TensorPayload::Nominal, _) => (true, false),
    };
    let (table, refs) = m.table(&[
        Some(Field::Ref(fbs::Tensor::VT_NAME)),
        t.doc_string.as_ref().map(|_| Field::Ref(fbs::Tensor::VT_DOC_STRING)),
        Some(Field::Ref(fbs::Tensor::VT_DIMS)),
        unless_default(Field::I32(fbs::Tensor::VT_DATA_TYPE, t.data_type.code()), t.data_type.code(), 0),
        raw.then_some(Field::Ref(fbs::Tensor::VT_RAW_DATA)),
        strings.then_some(Field::Ref(fbs::Tensor::VT_STRING_DATA)),
        external.map(|o| Field::I64(fbs::Tensor::VT_EXTERNAL_DATA_OFFSET, o)),
    ])?;
    m.string(refs.at(fbs::Tensor::VT_NAME), &t.name)?;
    if let Some(doc) = &t.doc_string {
        m.string(refs.at(fbs::Tensor::VT_DOC_STRING), doc)?;
    }
    // Readers tell a nominal tensor (no values) from a zero-element one (no values either) by
    // its element count, so a nominal tensor never gets a zero-element shape: it is written
    // without dims then, as ORT writes every nominal tensor.
    let nominal = matches!(t.data, TensorPayload::Nominal);
    let dims: &[i64] = if nominal && t.dims.contains(&0) { &[] } else { &t.dims };
    m.i64_vector(refs.at(fbs::Tensor::VT_DIMS), dims)?;
    match &t.data {
        TensorPayload::Strings(values) => {
            let first = m.offset_vector(refs.at(fbs::Tensor::VT_STRING_DATA), values.len())?;
            for (i, s) in values.iter().enumerate() {
                m.string(first + 4 * i, s)?;
            }
        }
        TensorPayload::Bytes(bytes) if raw && !bytes.is_empty() => {
            m.raw.push(refs.at(fbs::Tensor::VT_RAW_DATA));
            data.push(*bytes);
        }
        // An empty raw_data vector needs no alignment and stays with the metadata.
        _ if raw => {
            m.align(4, 0);
            let pos = m.pos();
            m.buf.extend_from_slice(&0u32.to_le_bytes());
            m.patch(refs.at(fbs::Tensor::VT_RAW_DATA), pos)?;
        }
        _ => {}
    }
    Ok(table)
}
