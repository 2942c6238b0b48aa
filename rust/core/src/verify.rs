//! Flatbuffer verification of a checkpoint, mirroring the generated verifier table for table with
//! one relaxation: `[int64]` vectors (tensor dims) need only the 4-byte alignment of their length
//! prefix, not 8. ORT 1.19.2 writes such vectors (its nominal checkpoints have them), ORT's own
//! C++ verifier accepts them, and the generated Rust accessors read scalars with unaligned loads,
//! so this costs no safety. Every other check (offsets, ranges, UTF-8, depth, table count,
//! apparent size) is the flatbuffers crate's own.

use flatbuffers::{ForwardsUOffset, InvalidFlatbuffer, Vector, Verifiable, Verifier, VerifierOptions};

use crate::schema::fbs;

type Res = Result<(), InvalidFlatbuffer>;
type Tables<T> = ForwardsUOffset<Vector<'static, ForwardsUOffset<T>>>;
type Str = ForwardsUOffset<&'static str>;

/// Verifies that `buf` holds a `Checkpoint` whose every field can be read safely.
pub(crate) fn verify_checkpoint(opts: &VerifierOptions, buf: &[u8]) -> Res {
    let mut v = Verifier::new(opts, buf);
    <ForwardsUOffset<CheckpointV>>::run_verifier(&mut v, 0)
}

/// `[int64]` whose elements may sit on a 4-byte boundary.
struct I64VectorV;

impl Verifiable for I64VectorV {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Res {
        // get_uoffset checks the length prefix is 4-aligned and inside the buffer.
        let len = v.get_uoffset(pos)? as usize;
        v.range_in_buffer(pos.saturating_add(4), len.saturating_mul(8))
    }
}

struct TensorV;

impl Verifiable for TensorV {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Res {
        use fbs::Tensor as T;
        v.visit_table(pos)?
            .visit_field::<Str>("name", T::VT_NAME, false)?
            .visit_field::<Str>("doc_string", T::VT_DOC_STRING, false)?
            .visit_field::<ForwardsUOffset<I64VectorV>>("dims", T::VT_DIMS, false)?
            .visit_field::<fbs::TensorDataType>("data_type", T::VT_DATA_TYPE, false)?
            .visit_field::<ForwardsUOffset<Vector<'_, u8>>>("raw_data", T::VT_RAW_DATA, false)?
            .visit_field::<ForwardsUOffset<Vector<'_, Str>>>("string_data", T::VT_STRING_DATA, false)?
            .visit_field::<i64>("external_data_offset", T::VT_EXTERNAL_DATA_OFFSET, false)?
            .finish();
        Ok(())
    }
}

struct ModuleStateV;

impl Verifiable for ModuleStateV {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Res {
        use fbs::ModuleState as T;
        v.visit_table(pos)?
            .visit_field::<Tables<TensorV>>("requires_grad_params", T::VT_REQUIRES_GRAD_PARAMS, false)?
            .visit_field::<Tables<TensorV>>("frozen_params", T::VT_FROZEN_PARAMS, false)?
            .visit_field::<bool>("is_nominal_state", T::VT_IS_NOMINAL_STATE, false)?
            .visit_field::<bool>("has_external_data", T::VT_HAS_EXTERNAL_DATA, false)?
            .finish();
        Ok(())
    }
}

struct ParameterOptimizerStateV;

impl Verifiable for ParameterOptimizerStateV {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Res {
        use fbs::ParameterOptimizerState as T;
        v.visit_table(pos)?
            .visit_field::<Str>("param_name", T::VT_PARAM_NAME, false)?
            .visit_field::<Tables<TensorV>>("momentums", T::VT_MOMENTUMS, false)?
            .finish();
        Ok(())
    }
}

struct OptimizerGroupV;

impl Verifiable for OptimizerGroupV {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Res {
        use fbs::OptimizerGroup as T;
        v.visit_table(pos)?
            .visit_field::<Str>("group_name", T::VT_GROUP_NAME, false)?
            .visit_field::<i64>("step", T::VT_STEP, false)?
            .visit_field::<f32>("initial_learning_rate", T::VT_INITIAL_LEARNING_RATE, false)?
            .visit_field::<Tables<ParameterOptimizerStateV>>(
                "optimizer_states",
                T::VT_OPTIMIZER_STATES,
                false,
            )?
            .finish();
        Ok(())
    }
}

/// Int, float and string properties share a shape: a name and a value of type `V`.
struct PropertyV<V>(std::marker::PhantomData<V>);

impl<V: Verifiable> Verifiable for PropertyV<V> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Res {
        // The three property tables put `name` in slot 4 and `value` in slot 6.
        debug_assert_eq!(fbs::IntProperty::VT_VALUE, fbs::StringProperty::VT_VALUE);
        v.visit_table(pos)?
            .visit_field::<Str>("name", fbs::IntProperty::VT_NAME, false)?
            .visit_field::<V>("value", fbs::IntProperty::VT_VALUE, false)?
            .finish();
        Ok(())
    }
}

struct PropertyBagV;

impl Verifiable for PropertyBagV {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Res {
        use fbs::PropertyBag as T;
        v.visit_table(pos)?
            .visit_field::<Tables<PropertyV<i64>>>("ints", T::VT_INTS, false)?
            .visit_field::<Tables<PropertyV<f32>>>("floats", T::VT_FLOATS, false)?
            .visit_field::<Tables<PropertyV<Str>>>("strings", T::VT_STRINGS, false)?
            .finish();
        Ok(())
    }
}

struct CheckpointV;

impl Verifiable for CheckpointV {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Res {
        use fbs::Checkpoint as T;
        v.visit_table(pos)?
            .visit_field::<i32>("version", T::VT_VERSION, false)?
            .visit_field::<ForwardsUOffset<ModuleStateV>>("module_state", T::VT_MODULE_STATE, false)?
            .visit_field::<Tables<OptimizerGroupV>>("optimizer_groups", T::VT_OPTIMIZER_GROUPS, false)?
            .visit_field::<ForwardsUOffset<PropertyBagV>>("property_bag", T::VT_PROPERTY_BAG, false)?
            .finish();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn property_tables_share_slots() {
        assert_eq!(fbs::IntProperty::VT_NAME, fbs::FloatProperty::VT_NAME);
        assert_eq!(fbs::IntProperty::VT_NAME, fbs::StringProperty::VT_NAME);
        assert_eq!(fbs::IntProperty::VT_VALUE, fbs::FloatProperty::VT_VALUE);
        assert_eq!(fbs::IntProperty::VT_VALUE, fbs::StringProperty::VT_VALUE);
    }
}
