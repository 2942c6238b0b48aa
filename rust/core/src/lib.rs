//! Read, verify and write ONNX Runtime on-device training checkpoints (`.ckpt`, flatbuffer file
//! identifier `ODTC`) without onnxruntime-training.
//!
//! * [`index_checkpoint`] (and [`index_checkpoint_raw`] for memory that may change while it is
//!   read) checks a checkpoint held in memory in one pass and returns a compact
//!   [`CheckpointIndex`]: names, data types, dims and the storage of every tensor, and the
//!   optimizer state and properties. It never reads tensor bytes.
//! * [`serialize_checkpoint`] / [`save_checkpoint`] turn a [`CheckpointSpec`] into a checkpoint
//!   ORT loads (deterministically ordered) and save it crash-consistently, streaming the tensor
//!   bytes (journal, backups, renames; [`recover`] settles an interrupted save).
//! * [`read_legacy_folder`] reads the checkpoint folder ORT 1.15 wrote into the same index,
//!   streamed and bounded (`legacy/`).
//! * [`open_checkpoint`] opens a checkpoint and its external data file as one pair, even while
//!   other processes save over it; only regular files are opened, never blocking.
//! * [`LoadedCheckpoint`] holds a verified checkpoint with the bytes its ranges point into and
//!   makes every decision about using them (checks before first use, readahead, value ranges),
//!   so that bindings only convert types.
//!
//! Writing runs in one line: `spec` (the input model) ← `placement` (inline or external) ←
//! `writer` (the flatbuffer layout, as pieces) ← `save` (the files, through `commit`).
//!
//! Every number read from a file is checked; malformed input gives an [`Error`], never a panic.

#![warn(missing_docs)]

mod adapter;
pub mod aggregate;
mod alloc;
mod assemble;
#[cfg(feature = "fs")]
mod atomic;
#[cfg(feature = "fs")]
mod beneath;
#[cfg(feature = "fs")]
mod commit;
#[cfg(feature = "fs")]
mod crash;
#[cfg(feature = "fs")]
mod digest;
#[cfg(feature = "fs")]
mod dir;
mod dtype;
mod error;
mod external;
#[cfg(feature = "fs")]
mod files;
mod flatbuf;
mod index;
mod input;
#[cfg(feature = "fs")]
mod journal;
mod kind_check;
#[cfg(feature = "fs")]
mod legacy;
mod loaded;
#[cfg(feature = "fs")]
mod lock;
#[cfg(feature = "fs")]
mod mapped;
pub mod message;
mod names;
mod npz;
#[cfg(feature = "fs")]
mod open;
#[cfg(feature = "fs")]
mod paged;
#[cfg(feature = "fs")]
mod pair;
mod parallel;
mod placement;
#[cfg(feature = "fs")]
mod platform;
mod reader;
#[cfg(feature = "fs")]
mod recover;
#[cfg(feature = "fs")]
mod safetensors;
#[cfg(feature = "fs")]
mod save;
mod schema;
mod shape;
mod simd;
mod sniff;
mod spec;
#[cfg(feature = "fs")]
mod target;
pub mod values;
mod versions;
mod writer;

pub use adapter::{
    index_adapter, serialize_adapter, AdapterIndex, AdapterParameter, AdapterParameterSpec,
    ADAPTER_FILE_IDENTIFIER, ADAPTER_FORMAT_VERSION,
};
#[cfg(feature = "fs")]
pub use adapter::{read_adapter_file, AdapterFile};
#[cfg(feature = "fs")]
pub use atomic::{AtomicOutput, StagedOutput};
#[cfg(feature = "fs")]
pub use beneath::open_beneath;
#[cfg(feature = "fs")]
pub use crash::{Step as CrashStep, STEPS as CRASH_STEPS};
#[cfg(feature = "fs")]
pub use dir::Dir;
pub use dtype::DataType;
pub use error::{Error, ErrorKind, Result};
pub use external::check_external_ranges;
#[cfg(feature = "fs")]
pub use files::sniff_file;
pub use index::{
    CheckpointIndex, OptimizerGroupIndex, ParamKind, ParameterStateIndex, Property, PropertyValue, Storage,
    TensorRef,
};
pub use kind_check::expect_kind;
#[cfg(feature = "fs")]
pub use legacy::{
    classify_legacy_file, read_legacy_files, read_legacy_folder, tensor_proto_field_values,
    tensor_proto_values, LegacyCheckpoint, LegacyFile, LegacyInput, OpenLegacyFile, LEGACY_FOLDER_VERSION,
    LEGACY_LR_PROPERTY, LEGACY_STEP_PROPERTY, MAX_PBSEQ_MESSAGE_BYTES,
};
pub use loaded::{CheckpointBytes, LoadedCheckpoint, Values};
#[cfg(feature = "fs")]
pub use lock::DEFAULT_LOCK_TIMEOUT_SECS;
#[cfg(feature = "fs")]
pub use mapped::MappedFile;
pub use message::{Message, Plain, Spelling};
pub use npz::{
    default_npz_budget, npz_member_problem, parse_npy_buffer, read_npz, read_npz_raw, NpyHeader, NpzData,
    NpzError, NpzMember, MAX_NPY_HEADER_LEN, NPZ_BUDGET_RATIO, NPZ_MIN_BUDGET,
};
#[cfg(feature = "fs")]
pub use open::{open_checkpoint, OpenMode, OpenedCheckpoint};
#[cfg(feature = "fs")]
pub use paged::{BlockSource, PagedBytes};
pub use placement::{SaveOptions, DEFAULT_EXTERNAL_DATA_THRESHOLD, EXTERNAL_ALIGNMENT, MIN_EXTERNAL_BYTES};
pub use reader::{index_checkpoint, index_checkpoint_raw, LengthCheck, FILE_IDENTIFIER, SUPPORTED_VERSIONS};
#[cfg(feature = "fs")]
pub use recover::{helper_files, recover, recover_interruptible, Recovery};
#[cfg(feature = "fs")]
pub use safetensors::{
    read_safetensors, SafetensorsDtype, SafetensorsError, SafetensorsErrorKind, SafetensorsFile,
    SafetensorsTensor, SAFETENSORS_DTYPES, SAFETENSORS_MAX_HEADER_BYTES, SAFETENSORS_MAX_RANK,
};
#[cfg(feature = "fs")]
pub use save::{
    external_data_location, external_data_path, save_checkpoint, save_checkpoint_interruptible, SaveSummary,
};
pub use simd::{simd_level, SimdLevel, SIMD_ENV};
pub use sniff::{sniff, wrong_kind_message, FileKind, SNIFF_LEN};
pub use spec::{
    CheckpointSpec, OptimizerGroupSpec, ParameterStateSpec, TensorPayload, TensorSpec, WRITABLE_VERSIONS,
    WRITTEN_VERSION,
};
pub use writer::{serialize_checkpoint, DATA_ALIGNMENT};

#[cfg(any(test, feature = "test-support"))]
pub use adapter::oracle::check_adapter_bytes;
#[cfg(test)]
mod protocol_tests;
#[cfg(test)]
mod reader_tests;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
#[cfg(test)]
mod writer_tests;
