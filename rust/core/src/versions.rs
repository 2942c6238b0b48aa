//! The format versions ortckpt reads, kept below every module that names them: the readers check
//! against them, and the error messages (`error.rs`, which everything uses) quote them.

/// Checkpoint versions this library reads.
pub const SUPPORTED_VERSIONS: [i32; 2] = [1, 2];

/// The `CheckpointIndex::version` of a checkpoint read from an ORT 1.15 folder: the folder format
/// predates the flatbuffer format, whose versions start at 1.
#[cfg_attr(not(feature = "fs"), allow(dead_code))] // the folder reader is part of the file layer
pub const LEGACY_FOLDER_VERSION: i32 = 0;

/// The adapter format version ORT writes and the only one it reads (ORT 1.20 to today).
pub const ADAPTER_FORMAT_VERSION: i32 = 1;
