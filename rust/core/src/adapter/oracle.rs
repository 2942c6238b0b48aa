//! The fuzz target's and the tests' oracle for the adapter reader, against the flatbuffers
//! verifier of the generated code (an independent reading of the same schema).

use flatbuffers::{InvalidFlatbuffer, VerifierOptions};

use super::schema::fbs;
use super::{index_adapter, serialize_adapter, AdapterIndex, AdapterParameterSpec};

/// Checks `index_adapter` on arbitrary `data`: it returns (never panics), whatever it accepts the
/// flatbuffers verifier accepts with the same contents, and it writes back and reads back the same.
pub fn check_adapter_bytes(data: &[u8]) {
    let Ok(index) = index_adapter(data) else { return };
    check_rewrite(&index, data);
    // `from_adapter` reads it as a checkpoint index over the same bytes: every accepted adapter is one
    let as_checkpoint = index.to_checkpoint_index().expect("an accepted adapter is no checkpoint index");
    assert_eq!(as_checkpoint.parameter_count(), index.parameters.len());
    // The verifier with the reader's budgets.
    let opts = VerifierOptions {
        max_depth: 8,
        max_tables: data.len() / 4 + 1,
        max_apparent_size: data.len().saturating_mul(2),
        ignore_missing_null_terminator: false,
    };
    let verified = match fbs::root_as_adapter_with_opts(&opts, data) {
        Ok(adapter) => adapter,
        // The one documented difference: like ORT's C++ verifier, the reader wants `[int64]` dims
        // only on the 4-byte boundary of their length, the Rust verifier on an 8-byte one. It
        // stops there, so nothing else of this buffer can be compared.
        Err(InvalidFlatbuffer::Unaligned { unaligned_type, .. }) if unaligned_type == "i64" => return,
        Err(e) => panic!("ortckpt accepted an adapter the flatbuffers verifier refuses: {e}"),
    };
    assert_eq!(verified.format_version(), index.format_version);
    assert_eq!(verified.adapter_version(), index.adapter_version);
    assert_eq!(verified.model_version(), index.model_version);
    let params = verified.parameters().expect("accepted without a parameter list");
    assert_eq!(params.len(), index.parameters.len());
    for (theirs, ours) in params.iter().zip(&index.parameters) {
        assert_eq!(theirs.name(), Some(ours.name.as_str()));
        assert_eq!(theirs.data_type().0, ours.data_type as i32);
        let dims: Vec<i64> = theirs.dims().expect("accepted without dims").iter().collect();
        assert_eq!(dims, ours.dims);
        assert_eq!(theirs.raw_data().map(|v| v.bytes()), data.get(ours.offset..ours.offset + ours.len));
    }
}

/// What `index_adapter` accepted writes back with `serialize_adapter` (values 8-byte aligned) and
/// reads back the same.
fn check_rewrite(index: &AdapterIndex, data: &[u8]) {
    let again = rewrite(index, data);
    let reread = index_adapter(&again).expect("a rewritten adapter does not read back");
    assert_eq!(strip(&reread), strip(index));
    for (a, b) in reread.parameters.iter().zip(&index.parameters) {
        assert_eq!(again.get(a.offset..a.offset + a.len), data.get(b.offset..b.offset + b.len));
        assert_eq!(a.offset % 8, 0, "values of {:?} are not 8-byte aligned", a.name);
    }
}

/// Writes the adapter `index` describes (values from `data`) again.
pub(crate) fn rewrite(index: &AdapterIndex, data: &[u8]) -> Vec<u8> {
    let specs: Vec<_> = index
        .parameters
        .iter()
        .map(|p| AdapterParameterSpec {
            name: &p.name,
            data_type: p.data_type,
            dims: &p.dims,
            data: &data[p.offset..p.offset + p.len],
        })
        .collect();
    serialize_adapter(&specs, index.adapter_version, index.model_version)
        .expect("an accepted adapter does not write")
}

/// The index without byte positions, which differ between layouts.
fn strip(index: &AdapterIndex) -> AdapterIndex {
    let mut index = index.clone();
    for p in &mut index.parameters {
        p.offset = 0;
    }
    index
}
