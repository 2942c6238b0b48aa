//! The flatbuffers code generated from `schema/adapter_schema.fbs` (see
//! `scripts/regen_flatbuffers.sh`): its field slots name the reader's and writer's offsets, and
//! its verifier is the tests' oracle. Kept private, like the checkpoint's.

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
#[path = "../generated/adapter_schema_generated.rs"]
mod generated;

pub(crate) use generated::onnxruntime::adapters as fbs;
