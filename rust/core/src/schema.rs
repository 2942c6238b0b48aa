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
