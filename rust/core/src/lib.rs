//! Read, verify and write ONNX Runtime on-device training checkpoints (`.ckpt`, flatbuffer file
//! identifier `ODTC`) without onnxruntime-training.
//!
//! * [`index_checkpoint`] verifies a checkpoint held in memory (a memory map or a byte buffer) and
//!   returns a [`CheckpointIndex`]: names, data types, dims and the byte range of every tensor, and
//!   the optimizer state and properties. It never reads tensor bytes.
//! * [`serialize_checkpoint`] / [`write_checkpoint`] turn a [`CheckpointSpec`] into the bytes ORT
//!   1.19.2 writes (deterministically ordered) and save them atomically.
//!
//! Every number read from a file is checked; malformed input gives an [`Error`], never a panic.

mod atomic;
mod dtype;
mod error;
mod external;
mod index;
mod legacy_pbseq;
mod mapped;
mod names;
mod placement;
mod reader;
mod save;
mod schema;
mod shape;
mod verify;
mod writer;

pub use atomic::{write_file_atomically, PendingFile};
pub use dtype::DataType;
pub use error::{Error, ErrorKind, Result};
pub use external::check_external_ranges;
pub use index::{
    CheckpointIndex, OptimizerGroupIndex, ParameterStateIndex, Property, PropertyValue, Storage, TensorIndex,
};
pub use legacy_pbseq::{
    classify_legacy_file, pbseq_messages, LegacyFile, LEGACY_LR_PROPERTY, LEGACY_STEP_PROPERTY,
    MAX_PBSEQ_MESSAGE_BYTES,
};
pub use mapped::MappedFile;
pub use placement::{EXTERNAL_ALIGNMENT, MIN_EXTERNAL_BYTES};
pub use reader::{index_checkpoint, FILE_IDENTIFIER, SUPPORTED_VERSIONS};
pub use save::{
    external_data_path, save_checkpoint, SaveOptions, SaveSummary, DEFAULT_EXTERNAL_DATA_THRESHOLD,
};
pub use writer::{
    serialize_checkpoint, write_checkpoint, CheckpointSpec, OptimizerGroupSpec, ParameterStateSpec,
    TensorPayload, TensorSpec, DATA_ALIGNMENT, WRITABLE_VERSIONS, WRITTEN_VERSION,
};

#[cfg(test)]
mod raw_builder;
#[cfg(test)]
mod reader_tests;
