//! An independent reference for the reader: the flatbuffers crate's generated verifier and
//! accessors, feeding the same rules (`assemble.rs`). Whenever the generated verifier accepts a
//! buffer, [`crate::index_checkpoint`] must return exactly what [`reference_index`] returns.
//!
//! The generated verifier is stricter than the reader in one documented way (alignment: it
//! refuses `[int64]` dims on a 4-byte boundary, which ORT 1.19.2 writes), so it refuses some
//! buffers the reader accepts; those are not compared. And it is laxer in one: the Rust
//! verifier follows offsets of 0 and of 2^31 or more, which the C++ verifier ORT runs refuses
//! ("may not point to itself", "can't wrap around"), and so does the reader (`flatbuf.rs`); a
//! buffer the reader refuses for that reason is not compared either ([`same_result`]).

use flatbuffers::{ForwardsUOffset, Vector, VerifierOptions};

use crate::assemble::{Assembler, RawData, Role, TensorFields};
use crate::flatbuf::OFFSET_ZERO_OR_NEGATIVE;
use crate::schema::fbs;
use crate::{CheckpointIndex, Error, PropertyValue, Result, FILE_IDENTIFIER};

type Tables<'a, T> = Option<Vector<'a, ForwardsUOffset<T>>>;

/// What the generated verifier and accessors make of `buf`: `None` when the verifier refuses it,
/// else the index (or the error) that the reader's rules give for what the accessors read.
pub fn reference_index(buf: &[u8]) -> Option<Result<CheckpointIndex>> {
    if buf.len() < 8 {
        return Some(Err(Error::TooShort { len: buf.len() }));
    }
    let mut found = [0u8; 4];
    found.copy_from_slice(&buf[4..8]);
    if &found != FILE_IDENTIFIER {
        let kind = crate::sniff(buf, buf.len() as u64);
        return Some(Err(crate::kind_check::not_a(
            crate::FileKind::Checkpoint,
            kind,
            Error::WrongIdentifier { found },
        )));
    }
    let opts = VerifierOptions {
        max_depth: 16,
        max_tables: buf.len() / 4 + 1,
        max_apparent_size: buf.len().saturating_mul(2),
        ignore_missing_null_terminator: false,
    };
    let root = fbs::root_as_checkpoint_with_opts(&opts, buf).ok()?;
    Some(assemble(buf, root))
}

/// Whether two reads agree: equal indexes (NaN floats included), or errors with the same message;
/// or either refused an offset of 0 or 2^31 and up (the C++ verifier's rule, see above).
pub fn same_result(a: &Result<CheckpointIndex>, b: &Result<CheckpointIndex>) -> bool {
    let cpp_offset_rule = |r: &Result<CheckpointIndex>| matches!(r, Err(Error::Malformed { what, .. }) if *what == OFFSET_ZERO_OR_NEGATIVE);
    if cpp_offset_rule(a) || cpp_offset_rule(b) {
        return true;
    }
    match (a, b) {
        // The debug form shows every field, and tells -0.0 from 0.0 and NaN from NaN-free.
        (Ok(a), Ok(b)) => format!("{a:?}") == format!("{b:?}"),
        (Err(a), Err(b)) => a.to_string() == b.to_string(),
        _ => false,
    }
}

fn assemble(buf: &[u8], root: fbs::Checkpoint<'_>) -> Result<CheckpointIndex> {
    let mut asm = Assembler::new(root.version())?;
    match root.module_state() {
        Some(m) => {
            // Bools read as bytes: the generated accessor would turn a byte other than 0 or 1
            // into an invalid `bool`. SAFETY: the verifier checked both fields lie in `buf`.
            let flag = |slot| unsafe { m._tab.get::<u8>(slot, Some(0)) }.unwrap_or(0) != 0;
            asm.module_state(
                flag(fbs::ModuleState::VT_IS_NOMINAL_STATE),
                flag(fbs::ModuleState::VT_HAS_EXTERNAL_DATA),
            );
            tensors(buf, m.requires_grad_params(), Role::Parameter, &mut asm)?;
            asm.end_trainable();
            tensors(buf, m.frozen_params(), Role::Parameter, &mut asm)?;
        }
        None => asm.end_trainable(),
    }
    asm.end_parameters()?;
    for g in root.optimizer_groups().into_iter().flatten() {
        asm.begin_group(g.group_name(), g.step(), g.initial_learning_rate())?;
        for s in g.optimizer_states().into_iter().flatten() {
            asm.begin_state(s.param_name())?;
            tensors(buf, s.momentums(), Role::Momentum, &mut asm)?;
            asm.end_state()?;
        }
        asm.end_group()?;
    }
    asm.end_groups()?;
    if let Some(bag) = root.property_bag() {
        for p in bag.ints().into_iter().flatten() {
            asm.property("int", p.name(), Some(PropertyValue::Int(p.value())))?;
        }
        for p in bag.floats().into_iter().flatten() {
            asm.property("float", p.name(), Some(PropertyValue::Float(p.value())))?;
        }
        for p in bag.strings().into_iter().flatten() {
            asm.property("string", p.name(), p.value().map(|v| PropertyValue::Str(v.to_owned())))?;
        }
    }
    asm.finish()
}

fn tensors(buf: &[u8], ts: Tables<'_, fbs::Tensor<'_>>, role: Role, asm: &mut Assembler) -> Result<()> {
    for t in ts.into_iter().flatten() {
        let dims: Vec<i64> = t.dims().map(|d| d.iter().collect()).unwrap_or_default();
        let raw_data = t.raw_data().map_or(RawData::Absent, |r| RawData::Read {
            offset: r.bytes().as_ptr() as usize - buf.as_ptr() as usize,
            len: r.len(),
        });
        let strings = t.string_data();
        let fields = TensorFields {
            name: t.name(),
            doc_string: t.doc_string(),
            dims: &dims,
            data_type: t.data_type().0,
            raw_data,
            string_count: strings.map_or(0, |s| s.len()),
            external_data_offset: t.external_data_offset(),
        };
        asm.tensor(&fields, role, &mut |out| {
            out.extend(strings.into_iter().flatten().map(str::to_owned));
            Ok(())
        })?;
    }
    Ok(())
}
