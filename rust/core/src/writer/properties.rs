//! The property bag's tables.

use super::meta::{f32_unless_zero, unless_default, Field, Meta};
use crate::index::{Property, PropertyValue};
use crate::schema::fbs;
use crate::spec::sorted_by_name;
use crate::Result;

/// The property bag: every property in the list of its type, sorted by name; all three lists are
/// written, empty ones too, as ORT does.
pub(super) fn property_bag(m: &mut Meta, at: usize, properties: &[Property]) -> Result<()> {
    let sorted = sorted_by_name(properties, |p| &p.name);
    let (table, refs) = m.table(&[
        Some(Field::Ref(fbs::PropertyBag::VT_INTS)),
        Some(Field::Ref(fbs::PropertyBag::VT_FLOATS)),
        Some(Field::Ref(fbs::PropertyBag::VT_STRINGS)),
    ])?;
    m.patch(at, table)?;
    let of_kind = |want: u8| {
        sorted
            .iter()
            .copied()
            .filter(move |p| match p.value {
                PropertyValue::Int(_) => want == 0,
                PropertyValue::Float(_) => want == 1,
                PropertyValue::Str(_) => want == 2,
            })
            .collect::<Vec<_>>()
    };
    for (kind, bag_slot) in [
        (0u8, fbs::PropertyBag::VT_INTS),
        (1, fbs::PropertyBag::VT_FLOATS),
        (2, fbs::PropertyBag::VT_STRINGS),
    ] {
        let list = of_kind(kind);
        let first = m.offset_vector(refs.at(bag_slot), list.len())?;
        for (i, p) in list.into_iter().enumerate() {
            let value = match p.value {
                PropertyValue::Int(v) => unless_default(Field::I64(fbs::IntProperty::VT_VALUE, v), v, 0),
                PropertyValue::Float(v) => f32_unless_zero(fbs::IntProperty::VT_VALUE, v),
                PropertyValue::Str(_) => Some(Field::Ref(fbs::IntProperty::VT_VALUE)),
            };
            let (table, refs) = m.table(&[Some(Field::Ref(fbs::IntProperty::VT_NAME)), value])?;
            m.patch(first + 4 * i, table)?;
            m.string(refs.at(fbs::IntProperty::VT_NAME), &p.name)?;
            if let PropertyValue::Str(s) = &p.value {
                m.string(refs.at(fbs::IntProperty::VT_VALUE), s)?;
            }
        }
    }
    Ok(())
}
