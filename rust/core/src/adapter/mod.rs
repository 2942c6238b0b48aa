//! ONNX Runtime adapter files (`.onnx_adapter`, flatbuffer identifier `TORT`, ORT >= 1.20): the
//! Multi-LoRA format ORT, onnxruntime-web and onnxruntime-genai load to swap a model's weights per
//! request. A flat list of named tensors with two user version numbers; no optimizer state.
//!
//! * [`index_adapter`] checks an adapter held in memory in one pass (every number checked when it
//!   is read, no allocation sized by an unchecked value) and returns an [`AdapterIndex`].
//! * [`serialize_adapter`] writes one from [`AdapterParameterSpec`]s, in the layout ORT expects
//!   (tensor bytes 8-byte aligned, as the schema's `force_align` asks).
//! * [`read_adapter_file`] opens (regular files only) and reads a file, then indexes it.

#[cfg(any(test, feature = "test-support"))]
pub mod oracle;
mod read;
mod rules;
mod schema;
mod write;

pub use crate::versions::ADAPTER_FORMAT_VERSION;
pub use read::{index_adapter, AdapterIndex, AdapterParameter};
#[cfg(feature = "fs")]
pub use read::{read_adapter_file, AdapterFile};
pub use rules::ADAPTER_FILE_IDENTIFIER;
pub use write::{serialize_adapter, AdapterParameterSpec};

#[cfg(test)]
mod tests;
