//! The checkpoint folder ORT 1.15 wrote (before the `ODTC` flatbuffer), read into a
//! [`crate::CheckpointIndex`] of version 0 and one buffer of values. See docs/format.md, "The ORT
//! 1.15 checkpoint folder".
//!
//! * `names`: which file of a folder holds what (ORT's file-name rules).
//! * `stream`: the framing of a `.pbseq` file, checked while the file is read.
//! * `tensor_proto`: one `onnx.TensorProto` decoded into checkpoint values, within a budget.
//! * `folder`: the directory (regular files only, no link leading out), the files in ORT's
//!   roles, and the index built through the flatbuffer reader's rules (`assemble.rs`).

mod folder;
mod names;
mod stream;
mod tensor_proto;

pub use crate::versions::LEGACY_FOLDER_VERSION;
pub use folder::{read_legacy_files, read_legacy_folder, LegacyCheckpoint, LegacyInput, OpenLegacyFile};
pub use names::{classify_legacy_file, LegacyFile, LEGACY_LR_PROPERTY, LEGACY_STEP_PROPERTY};
pub use stream::MAX_PBSEQ_MESSAGE_BYTES;
pub use tensor_proto::{tensor_proto_field_values, tensor_proto_values};
