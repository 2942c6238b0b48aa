//! One error type for every way a checkpoint can be wrong or fail to be read or written.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::message::{Message, Plain, Spelling};

/// The result of every fallible function of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The family an [`Error`] belongs to; the Python bindings map each to an exception class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Not a checkpoint, or its flatbuffer structure is broken.
    InvalidCheckpoint,
    /// A checkpoint version this library does not understand.
    UnsupportedVersion,
    /// A tensor's data type, dims or data do not agree.
    TensorData,
    /// Two entries share a name where names must be unique.
    DuplicateName,
    /// The external data file is missing, short, or referenced out of range.
    ExternalData,
    /// Reading or writing a file failed at the operating system level.
    Io,
    /// A save of the checkpoint was interrupted (crash) in the middle of replacing its files.
    InterruptedSave,
    /// A loaded checkpoint's file was modified on disk since it was opened.
    CheckpointChanged,
    /// The checkpoint kept being replaced while it was being loaded.
    KeptChanging,
    /// The caller asked to stop (e.g. Ctrl-C) during a long read.
    Interrupted,
    /// A broken internal invariant of ortckpt: a bug to report, never the input's fault.
    Internal,
    /// An aggregation round cannot give an aggregate (too few accepted uploads, or one that is
    /// not finite).
    Aggregation,
    /// An allocation an input called for failed (the process is out of memory or address space).
    OutOfMemory,
    /// A file of another format read for a conversion (npz, safetensors) is not valid.
    Conversion,
    /// An input is larger than the caller's size limit.
    SizeLimit,
}

/// Everything that can go wrong reading or writing a checkpoint. Variants about one tensor name it
/// in `tensor`; the display form is a complete sentence for users.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The input is too short to hold a flatbuffer header and file identifier.
    TooShort {
        /// Length of the input in bytes.
        len: usize,
    },
    /// Bytes 4..8 are not the checkpoint file identifier `ODTC`.
    WrongIdentifier {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// The input is a file of another kind than the reader reads (an ONNX model where a checkpoint
    /// is expected, ...): the message says what it is and what reads it (`sniff.rs`).
    WrongKind {
        /// What the reader reads.
        expected: crate::FileKind,
        /// What the input is.
        found: crate::FileKind,
    },
    /// The flatbuffer structure is broken: `what` went wrong at byte `offset` of the input.
    Malformed {
        /// What is wrong, e.g. "a string runs past the end of the buffer".
        what: &'static str,
        /// Where in the input it was found.
        offset: usize,
    },
    /// The checkpoint version is not one this library reads.
    UnsupportedVersion {
        /// The version in the file.
        found: i32,
    },
    /// A field ORT always writes is absent.
    MissingField {
        /// Which field, e.g. "a tensor's name".
        what: String,
    },
    /// A tensor has a data type code that is not a valid `TensorDataType`.
    UnknownDataType {
        /// The tensor's name.
        tensor: String,
        /// The code found.
        code: i32,
    },
    /// A tensor has a negative dimension.
    NegativeDim {
        /// The tensor's name.
        tensor: String,
        /// Its shape.
        dims: Vec<i64>,
    },
    /// The element count or byte size of a tensor overflows 64 bits.
    SizeOverflow {
        /// The tensor's name.
        tensor: String,
        /// Its shape.
        dims: Vec<i64>,
    },
    /// A tensor's data length differs from what its dims and data type require.
    DataLengthMismatch {
        /// The tensor's name.
        tensor: String,
        /// Its shape.
        dims: Vec<i64>,
        /// Bytes the shape and type call for.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// A string tensor holds a different number of strings than its dims say.
    StringCountMismatch {
        /// The tensor's name.
        tensor: String,
        /// Its shape.
        dims: Vec<i64>,
        /// Strings the shape calls for.
        expected: u64,
        /// Strings present.
        found: u64,
    },
    /// A tensor stores its values in the wrong field (`raw_data` for strings, or
    /// `string_data` for a numeric type).
    WrongStorage {
        /// The tensor's name.
        tensor: String,
        /// What is wrong.
        detail: &'static str,
    },
    /// A tensor has both inline `raw_data` and an external data offset.
    InlineAndExternal {
        /// The tensor's name.
        tensor: String,
    },
    /// A tensor's `external_data_offset` is neither -1 nor a valid offset.
    BadExternalOffset {
        /// The tensor's name.
        tensor: String,
        /// The offset found.
        offset: i64,
    },
    /// A tensor refers to external data but the module state says there is none.
    ExternalWithoutFlag {
        /// The tensor's name.
        tensor: String,
    },
    /// A tensor's external range ends past the end of the external data file.
    ExternalOutOfRange {
        /// The tensor's name.
        tensor: String,
        /// Start of its range in the external data file.
        offset: u64,
        /// Length of its range.
        len: u64,
        /// Length of the external data file.
        file_len: u64,
    },
    /// Two tensors claim overlapping bytes of the external data file.
    ExternalOverlap {
        /// The tensor whose range starts first.
        first: String,
        /// The tensor whose range starts inside the first one's.
        second: String,
    },
    /// An ONNX external data `location` that cannot name a file inside the model's directory
    /// (empty, NUL, absolute, leading out of it, a directory).
    ExternalDataLocation {
        /// The location as given.
        location: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The checkpoint has external data but its file is not available.
    ExternalDataMissing {
        /// Why, e.g. "its external data file x.ckpt.data is missing".
        detail: String,
    },
    /// A name that must be unique appears twice.
    DuplicateName {
        /// What the name names: "parameter", "momentum", "optimizer group", "property", ...
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// The checkpoint is too large for one flatbuffer (2 GiB); tensor data must go external.
    TooLarge {
        /// Bytes the checkpoint would need.
        bytes: u64,
    },
    /// An argument given to the writer is invalid (not a property of any file).
    InvalidSpec {
        /// What is wrong.
        detail: String,
    },
    /// Memory for an input's contents could not be allocated.
    OutOfMemory {
        /// The allocation that failed.
        bytes: usize,
    },
    /// A broken internal invariant of ortckpt (a bug, not a problem of the input).
    Internal {
        /// What went wrong.
        detail: String,
    },
    /// The framing of an ORT 1.15 `.pbseq` file is broken (at byte `offset`).
    BadMessageSequence {
        /// Where in the file.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// A file of an ORT 1.15 checkpoint folder starts with `optim` but is not named
    /// `optim_<group>_<momentum>_tensors.pbseq` or `optim_<group>_properties.pbseq`.
    BadLegacyFileName {
        /// The file's name.
        name: String,
    },
    /// A message of an ORT 1.15 `.pbseq` file is not a TensorProto a checkpoint can hold.
    BadTensorProto {
        /// The message's position in its file.
        message: u64,
        /// What is wrong.
        detail: String,
    },
    /// A TensorProto's values cannot be a checkpoint tensor's (where they are, how many).
    TensorProtoValues {
        /// The tensor's name.
        tensor: String,
        /// What is wrong.
        detail: String,
    },
    /// An ORT 1.15 checkpoint folder breaks a rule of the folder (file names, links, properties).
    BadLegacyFolder {
        /// What is wrong.
        detail: String,
    },
    /// `error` was found in the file `file` of a checkpoint folder.
    InFile {
        /// The file's name in the folder.
        file: String,
        /// What is wrong with it.
        error: Box<Error>,
    },
    /// An operating system error on `path`.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done, e.g. "open".
        action: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
    /// A save of `path` was interrupted between its renames; `recover` settles it.
    InterruptedSave {
        /// The checkpoint.
        path: PathBuf,
        /// What was found.
        detail: String,
    },
    /// An interrupted save of `path` that recovery cannot settle (files removed by someone else).
    Unrecoverable {
        /// The checkpoint.
        path: PathBuf,
        /// What was found.
        detail: String,
    },
    /// The file `path` was modified on disk since it was opened (in place, not replaced).
    CheckpointChanged {
        /// The modified file.
        path: PathBuf,
        /// What changed.
        detail: String,
    },
    /// Saves kept replacing `path` during every attempt to load it.
    KeptChanging {
        /// The checkpoint.
        path: PathBuf,
        /// What kept changing.
        detail: String,
    },
    /// An input is larger than the caller's size limit (`max_bytes`): measured on the opened
    /// files (a checkpoint with its external data file, a folder's files) before a byte is read.
    SizeLimit {
        /// The input (a checkpoint file or a folder).
        path: PathBuf,
        /// Its bytes, all files counted.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The caller's interruption check asked to stop while `path` was read.
    Interrupted {
        /// The file being read.
        path: PathBuf,
    },
    /// The input is not an ORT adapter file (too short, or another file identifier than `TORT`).
    NotAnAdapter {
        /// What was found.
        detail: String,
    },
    /// An adapter's flatbuffer structure is broken: `what` went wrong at byte `offset`.
    MalformedAdapter {
        /// What is wrong.
        what: &'static str,
        /// Where in the input it was found.
        offset: usize,
    },
    /// The adapter format version is not one ORT (and so ortckpt) reads.
    UnsupportedAdapterVersion {
        /// The version in the file.
        found: i32,
    },
    /// An aggregation round cannot give an aggregate.
    Aggregation {
        /// Why, for users (tensor names as values, for the binding to spell).
        detail: Message,
    },
    /// An `.npz` archive cannot be read (the member at fault in the record).
    Npz(crate::npz::error::NpzError),
    /// A safetensors file cannot be read (its kind and the tensor at fault in the record).
    #[cfg(feature = "fs")] // the safetensors reader reads files
    Safetensors(crate::safetensors::error::SafetensorsError),
}

impl From<crate::npz::error::NpzError> for Error {
    fn from(e: crate::npz::error::NpzError) -> Error {
        Error::Npz(e)
    }
}

#[cfg(feature = "fs")]
impl From<crate::safetensors::error::SafetensorsError> for Error {
    fn from(e: crate::safetensors::error::SafetensorsError) -> Error {
        Error::Safetensors(e)
    }
}

impl Error {
    /// The family of this error (the Python bindings raise one exception class per family).
    pub fn kind(&self) -> ErrorKind {
        use Error::*;
        match self {
            TooShort { .. }
            | WrongIdentifier { .. }
            | WrongKind { .. }
            | Malformed { .. }
            | MissingField { .. }
            | BadMessageSequence { .. }
            | BadLegacyFileName { .. }
            | BadLegacyFolder { .. }
            | BadTensorProto { .. }
            | NotAnAdapter { .. }
            | MalformedAdapter { .. } => ErrorKind::InvalidCheckpoint,
            InFile { error, .. } => error.kind(),
            UnsupportedVersion { .. } | UnsupportedAdapterVersion { .. } => ErrorKind::UnsupportedVersion,
            UnknownDataType { .. }
            | NegativeDim { .. }
            | SizeOverflow { .. }
            | DataLengthMismatch { .. }
            | StringCountMismatch { .. }
            | WrongStorage { .. }
            | InlineAndExternal { .. }
            | TensorProtoValues { .. }
            | TooLarge { .. }
            | InvalidSpec { .. } => ErrorKind::TensorData,
            BadExternalOffset { .. }
            | ExternalWithoutFlag { .. }
            | ExternalOutOfRange { .. }
            | ExternalOverlap { .. }
            | ExternalDataMissing { .. }
            | ExternalDataLocation { .. } => ErrorKind::ExternalData,
            DuplicateName { .. } => ErrorKind::DuplicateName,
            Io { .. } => ErrorKind::Io,
            InterruptedSave { .. } | Unrecoverable { .. } => ErrorKind::InterruptedSave,
            CheckpointChanged { .. } => ErrorKind::CheckpointChanged,
            KeptChanging { .. } => ErrorKind::KeptChanging,
            Interrupted { .. } => ErrorKind::Interrupted,
            SizeLimit { .. } => ErrorKind::SizeLimit,
            // It is never the input's fault; the message says it is a bug to report.
            Internal { .. } => ErrorKind::Internal,
            Aggregation { .. } => ErrorKind::Aggregation,
            OutOfMemory { .. } => ErrorKind::OutOfMemory,
            Npz(_) => ErrorKind::Conversion,
            #[cfg(feature = "fs")]
            Safetensors(_) => ErrorKind::Conversion,
        }
    }

    /// The tensor this error is about, when it is about one (for duplicate names: the name when
    /// it is a parameter's or a momentum's; for overlapping external ranges: the second tensor).
    pub fn tensor(&self) -> Option<&str> {
        use Error::*;
        match self {
            UnknownDataType { tensor, .. }
            | NegativeDim { tensor, .. }
            | SizeOverflow { tensor, .. }
            | DataLengthMismatch { tensor, .. }
            | StringCountMismatch { tensor, .. }
            | WrongStorage { tensor, .. }
            | InlineAndExternal { tensor }
            | BadExternalOffset { tensor, .. }
            | ExternalWithoutFlag { tensor }
            | ExternalOutOfRange { tensor, .. }
            | TensorProtoValues { tensor, .. } => Some(tensor),
            InFile { error, .. } => error.tensor(),
            Npz(e) => e.member.as_deref(),
            #[cfg(feature = "fs")]
            Safetensors(e) => e.tensor.as_deref(),
            ExternalOverlap { second, .. } => Some(second),
            DuplicateName { kind, name } if *kind == "parameter" || *kind == "momentum" => Some(name),
            _ => None,
        }
    }

    /// The message with its names and tensor labels spelled by `spelling` (a binding's: see
    /// [`Message`]); `to_string()` is [`Plain`]'s.
    pub fn spelled(&self, spelling: &dyn Spelling) -> String {
        use Error::*;
        match self {
            ExternalDataLocation { location, detail } => {
                format!("external data location {} {detail}", spelling.name(location))
            }
            Aggregation { detail } => detail.spell(spelling),
            InFile { file, error } => format!("{file}: {}", error.spelled(spelling)),
            other => other.to_string(),
        }
    }

    #[cfg_attr(not(feature = "fs"), allow(dead_code))] // used by the file layer only
    pub(crate) fn io(path: impl Into<PathBuf>, action: &'static str, source: io::Error) -> Error {
        Error::Io { path: path.into(), action, source }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Error::*;
        match self {
            TooShort { len } => write!(
                f,
                "not an ORT training checkpoint: {len} bytes is too short for a flatbuffer header"
            ),
            WrongIdentifier { found } => write!(
                f,
                "not an ORT training checkpoint: file identifier is {} (expected \"ODTC\")",
                show_identifier(found)
            ),
            WrongKind { expected, found } => {
                f.write_str(&crate::sniff::wrong_kind_message(*expected, *found))
            }
            Malformed { what, offset } => {
                write!(f, "corrupt checkpoint flatbuffer: {what} (at byte {offset})")
            }
            UnsupportedVersion { found } => write!(
                f,
                "checkpoint version {found} is not supported (this ortckpt reads versions {}); \
                 upgrade ortckpt if the file comes from a newer ONNX Runtime",
                crate::versions::SUPPORTED_VERSIONS.map(|v| v.to_string()).join(", ")
            ),
            MissingField { what } => write!(f, "corrupt checkpoint: {what} is missing"),
            UnknownDataType { tensor, code } => {
                write!(f, "tensor {tensor:?}: unknown data type code {code}")
            }
            NegativeDim { tensor, dims } => {
                write!(f, "tensor {tensor:?}: negative dimension in shape {dims:?}")
            }
            SizeOverflow { tensor, dims } => {
                write!(f, "tensor {tensor:?}: shape {dims:?} is too large (size overflows 64 bits)")
            }
            DataLengthMismatch { tensor, dims, expected, found } => write!(
                f,
                "tensor {tensor:?}: shape {dims:?} needs {expected} bytes of data but {found} are present"
            ),
            StringCountMismatch { tensor, dims, expected, found } => write!(
                f,
                "string tensor {tensor:?}: shape {dims:?} needs {expected} strings but {found} are present"
            ),
            WrongStorage { tensor, detail } => write!(f, "tensor {tensor:?}: {detail}"),
            InlineAndExternal { tensor } => write!(
                f,
                "tensor {tensor:?} has both inline raw_data and an external data offset"
            ),
            BadExternalOffset { tensor, offset } => {
                write!(f, "tensor {tensor:?}: invalid external data offset {offset}")
            }
            ExternalWithoutFlag { tensor } => write!(
                f,
                "tensor {tensor:?} refers to external data but the checkpoint's has_external_data flag is false"
            ),
            ExternalOutOfRange { tensor, offset, len, file_len } => write!(
                f,
                "tensor {tensor:?}: external data range {offset}..{} lies past the end of the \
                 external data file ({file_len} bytes); the file is truncated or belongs to another checkpoint",
                offset.saturating_add(*len)
            ),
            ExternalDataMissing { detail } => write!(f, "checkpoint has external data but {detail}"),
            ExternalDataLocation { location, detail } => {
                write!(f, "external data location {} {detail}", Plain.name(location))
            }
            ExternalOverlap { first, second } => {
                write!(f, "tensors {first:?} and {second:?} claim overlapping external data")
            }
            DuplicateName { kind, name } => write!(f, "duplicate {kind} name {name:?}"),
            TooLarge { bytes } => write!(
                f,
                "checkpoint needs {bytes} bytes, more than a flatbuffer can hold (2 GiB); \
                 store large tensors in an external data file"
            ),
            InvalidSpec { detail } => f.write_str(detail),
            Internal { detail } => {
                write!(f, "internal error in ortckpt: {detail}; please report this as a bug")
            }
            OutOfMemory { bytes } => write!(
                f,
                "out of memory: {bytes} bytes for the input's contents could not be allocated (the input is \
                 larger than this process's memory or address-space limit allows)"
            ),
            BadMessageSequence { offset, detail } => {
                write!(f, "corrupt .pbseq message sequence at byte {offset}: {detail}")
            }
            BadLegacyFileName { name } => write!(
                f,
                "{name:?} is not an optimizer state file name (expected optim_<group>_<momentum>_tensors.pbseq \
                 or optim_<group>_properties.pbseq, names without '_')"
            ),
            BadTensorProto { message, detail } => {
                write!(f, "message {message} is not a serialized onnx.TensorProto a checkpoint can hold: {detail}")
            }
            TensorProtoValues { tensor, detail } => write!(f, "tensor {tensor:?}: {detail}"),
            BadLegacyFolder { detail } => f.write_str(detail),
            InFile { file, error } => write!(f, "{file}: {error}"),
            Io { path, action, source } => {
                write!(f, "cannot {action} {}: {source}", path.display())
            }
            InterruptedSave { path, detail } => write!(
                f,
                "{detail}; run `ortckpt recover {0}` (or ortckpt.recover(path)) to restore one complete \
                 state and remove the interrupted save's files",
                path.display()
            ),
            Unrecoverable { path, detail } => write!(f, "{}: {detail}", path.display()),
            CheckpointChanged { path, detail } => write!(
                f,
                "the file {} {detail} (another program rewrote it in place, as ONNX Runtime's \
                 save_checkpoint does); its memory-mapped values may now be wrong or unreadable. Load \
                 it again, and use ortckpt.load(path, mmap=False) when another program may rewrite it",
                path.display()
            ),
            KeptChanging { path, detail } => write!(
                f,
                "{} kept changing while it was being loaded ({detail}): other programs are saving it \
                 continuously; try again",
                path.display()
            ),
            Interrupted { path } => write!(f, "reading {} was interrupted", path.display()),
            SizeLimit { path, size, limit } => write!(
                f,
                "{}: {size} bytes exceed the size limit of {limit} bytes (raise max_bytes if it is legitimate)",
                path.display()
            ),
            NotAnAdapter { detail } => write!(f, "not an ORT adapter file: {detail}"),
            MalformedAdapter { what, offset } => {
                write!(f, "corrupt ORT adapter flatbuffer: {what} (at byte {offset})")
            }
            Aggregation { detail } => f.write_str(&detail.spell(&Plain)),
            Npz(e) => write!(f, "{e}"),
            #[cfg(feature = "fs")]
            Safetensors(e) => write!(f, "{e}"),
            UnsupportedAdapterVersion { found } => write!(
                f,
                "adapter format version {found} is not supported (ONNX Runtime 1.20 and later and \
                 ortckpt read version {})",
                crate::versions::ADAPTER_FORMAT_VERSION
            ),
        }
    }
}

pub(crate) fn show_identifier(found: &[u8; 4]) -> String {
    match std::str::from_utf8(found) {
        Ok(s) if s.chars().all(|c| c.is_ascii_graphic()) => format!("{s:?}"),
        _ => format!("{found:02x?}"),
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
