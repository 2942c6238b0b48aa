//! Read, verify and write ONNX Runtime on-device training checkpoints (`.ckpt`, flatbuffer file
//! identifier `ODTC`) without onnxruntime-training.
//!
//! * [`index_checkpoint`] verifies a checkpoint held in memory (a memory map or a byte buffer) and
//!   returns a [`CheckpointIndex`]: names, data types, dims and the byte range of every tensor, and
//!   the optimizer state and properties. It never reads tensor bytes.
//! * [`serialize_checkpoint`] / [`write_checkpoint`] turn a [`CheckpointSpec`] into the bytes ORT
//!   1.19.2 writes (deterministically ordered) and save them crash-consistently
//!   ([`save_pair`]: journal, backups, renames; [`recover`] settles an interrupted save).
//! * [`open_checkpoint`] opens a checkpoint and its external data file as one pair, even while
//!   other processes save over it; only regular files are opened, never blocking.
//!
//! Every number read from a file is checked; malformed input gives an [`Error`], never a panic.

mod commit;
mod crash;
mod dtype;
mod error;
mod external;
mod files;
mod index;
mod journal;
mod mapped;
mod names;
mod open;
mod placement;
mod reader;
mod recover;
mod save;
mod schema;
mod shape;
mod verify;
mod writer;

pub use commit::{save_pair, WriteFile};
pub use crash::STEPS as CRASH_STEPS;
pub use dtype::DataType;
pub use error::{Error, ErrorKind, Result};
pub use external::check_external_ranges;
pub use files::{FileId, TempFile};
pub use index::{
    CheckpointIndex, OptimizerGroupIndex, ParameterStateIndex, Property, PropertyValue, Storage, TensorIndex,
};
pub use mapped::{FileStamp, MappedFile};
pub use open::{open_checkpoint, OpenMode, OpenedCheckpoint};
pub use placement::{EXTERNAL_ALIGNMENT, MIN_EXTERNAL_BYTES};
pub use reader::{index_checkpoint, FILE_IDENTIFIER, SUPPORTED_VERSIONS};
pub use recover::{helper_files, recover, Recovery};
pub use save::{
    external_data_path, save_checkpoint, SaveOptions, SaveSummary, DEFAULT_EXTERNAL_DATA_THRESHOLD,
};
pub use writer::{
    serialize_checkpoint, write_checkpoint, CheckpointSpec, OptimizerGroupSpec, ParameterStateSpec,
    TensorPayload, TensorSpec, DATA_ALIGNMENT, WRITTEN_VERSION,
};

#[cfg(test)]
mod raw_builder;
#[cfg(test)]
mod reader_tests;
