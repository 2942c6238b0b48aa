//! Test support shared by this crate's tests and the fuzz crate (cargo feature `test-support`):
//!
//! * [`raw`]: build checkpoint flatbuffers field by field, bypassing the writer's validation, so
//!   tests can make exactly the (malformed) file they need;
//! * [`oracle`]: what the flatbuffers crate's generated verifier and accessors make of a buffer,
//!   an independent reference for the hand-written reader;
//! * [`spec_from_index`]: the spec that writes an index back;
//! * [`alloc::CountingAllocator`]: a global allocator that measures heap use, for memory bounds.

pub mod alloc;
pub mod oracle;
pub mod raw;
mod spec;

pub use spec::spec_from_index;
