//! The optimizer state's tables: groups, parameter states and their momentum tensors.

use super::meta::{f32_unless_zero, unless_default, Field, Meta};
use super::tensors::tensor_tables;
use crate::placement::Place;
use crate::schema::fbs;
use crate::spec::{sorted_by_name, OptimizerGroupSpec, TensorSpec};
use crate::Result;

/// Writes the optimizer groups (sorted by name), their parameter states (sorted by name) and
/// momentum tables, and points `at` to the group vector.
pub(super) fn optimizer_groups<'s, 'a: 's>(
    m: &mut Meta,
    at: usize,
    groups: &[OptimizerGroupSpec<'a>],
    next: &mut impl Iterator<Item = &'s (&'s TensorSpec<'a>, Place)>,
    data: &mut Vec<&'a [u8]>,
) -> Result<()> {
    let sorted = sorted_by_name(groups, |g| &g.name);
    let first = m.offset_vector(at, sorted.len())?;
    for (i, g) in sorted.into_iter().enumerate() {
        let (table, refs) = m.table(&[
            Some(Field::Ref(fbs::OptimizerGroup::VT_GROUP_NAME)),
            unless_default(Field::I64(fbs::OptimizerGroup::VT_STEP, g.step), g.step, 0),
            f32_unless_zero(fbs::OptimizerGroup::VT_INITIAL_LEARNING_RATE, g.initial_learning_rate),
            Some(Field::Ref(fbs::OptimizerGroup::VT_OPTIMIZER_STATES)),
        ])?;
        m.patch(first + 4 * i, table)?;
        m.string(refs.at(fbs::OptimizerGroup::VT_GROUP_NAME), &g.name)?;
        let states = sorted_by_name(&g.states, |s| &s.param_name);
        let states_at = m.offset_vector(refs.at(fbs::OptimizerGroup::VT_OPTIMIZER_STATES), states.len())?;
        for (j, s) in states.into_iter().enumerate() {
            let (table, refs) = m.table(&[
                Some(Field::Ref(fbs::ParameterOptimizerState::VT_PARAM_NAME)),
                Some(Field::Ref(fbs::ParameterOptimizerState::VT_MOMENTUMS)),
            ])?;
            m.patch(states_at + 4 * j, table)?;
            m.string(refs.at(fbs::ParameterOptimizerState::VT_PARAM_NAME), &s.param_name)?;
            let momentums_at =
                m.offset_vector(refs.at(fbs::ParameterOptimizerState::VT_MOMENTUMS), s.momentums.len())?;
            tensor_tables(m, momentums_at, s.momentums.len(), next, data)?;
        }
    }
    Ok(())
}
