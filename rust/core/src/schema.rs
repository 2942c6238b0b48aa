//! The flatbuffers code generated from `schema/*.fbs` (see `scripts/regen_flatbuffers.sh`).
//! Kept private: the rest of the crate exposes its own owned types.

#[allow(
    unused_imports,
    dead_code,
    deprecated,
    non_camel_case_types,
    non_snake_case,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks
)]
#[rustfmt::skip]
#[path = "generated/ort_training_checkpoint_generated.rs"]
mod generated;

pub(crate) use generated::onnxruntime::fbs;

use flatbuffers::VOffsetT;

/// The file identifier every checkpoint carries (the schema's `file_identifier`).
pub(crate) const FILE_IDENTIFIER: &[u8; 4] = match fbs::CHECKPOINT_IDENTIFIER.as_bytes() {
    [a, b, c, d] => &[*a, *b, *c, *d],
    _ => panic!("the schema's file identifier has 4 bytes"),
};

/// The field id of the field whose entry sits at vtable offset `vt` (`4 + 2 × id`): the generated
/// `VT_*` constants are vtable offsets.
pub(crate) const fn field_id(vt: VOffsetT) -> usize {
    (vt as usize - 4) / 2
}

/// How many fields each table of the schema has, from the generated offset of its last field.
pub(crate) mod field_count {
    use super::{fbs, field_id};

    pub(crate) const CHECKPOINT: usize = field_id(fbs::Checkpoint::VT_PROPERTY_BAG) + 1;
    pub(crate) const MODULE_STATE: usize = field_id(fbs::ModuleState::VT_HAS_EXTERNAL_DATA) + 1;
    pub(crate) const TENSOR: usize = field_id(fbs::Tensor::VT_EXTERNAL_DATA_OFFSET) + 1;
    pub(crate) const OPTIMIZER_GROUP: usize = field_id(fbs::OptimizerGroup::VT_OPTIMIZER_STATES) + 1;
    pub(crate) const PARAMETER_STATE: usize = field_id(fbs::ParameterOptimizerState::VT_MOMENTUMS) + 1;
    pub(crate) const PROPERTY_BAG: usize = field_id(fbs::PropertyBag::VT_STRINGS) + 1;
    /// Int, float and string properties alike (`property_tables_share_fields`).
    pub(crate) const PROPERTY: usize = field_id(fbs::IntProperty::VT_VALUE) + 1;

    /// The most fields of any table.
    pub(crate) const MAX: usize = TENSOR;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn property_tables_share_fields() {
        assert_eq!(fbs::IntProperty::VT_NAME, fbs::FloatProperty::VT_NAME);
        assert_eq!(fbs::IntProperty::VT_NAME, fbs::StringProperty::VT_NAME);
        assert_eq!(fbs::IntProperty::VT_VALUE, fbs::FloatProperty::VT_VALUE);
        assert_eq!(fbs::IntProperty::VT_VALUE, fbs::StringProperty::VT_VALUE);
    }

    #[test]
    fn counts_are_the_generated_tables_and_max_is_the_largest() {
        use field_count::*;
        for n in [CHECKPOINT, MODULE_STATE, TENSOR, OPTIMIZER_GROUP, PARAMETER_STATE, PROPERTY_BAG, PROPERTY]
        {
            assert!(n <= MAX, "{n} fields exceed MAX ({MAX})");
        }
        assert_eq!((CHECKPOINT, MODULE_STATE, TENSOR, PROPERTY_BAG, PROPERTY), (4, 4, 7, 3, 2));
        assert_eq!(FILE_IDENTIFIER, b"ODTC");
    }
}
