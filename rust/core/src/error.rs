//! One error type for every way a checkpoint can be wrong or fail to be read or written.

use std::fmt;
use std::io;
use std::path::PathBuf;

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
}

#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The input is too short to hold a flatbuffer header and file identifier.
    TooShort { len: usize },
    /// Bytes 4..8 are not the checkpoint file identifier `ODTC`.
    WrongIdentifier { found: [u8; 4] },
    /// The flatbuffer verifier rejected the input.
    Flatbuffer(flatbuffers::InvalidFlatbuffer),
    /// The checkpoint version is not one this library reads.
    UnsupportedVersion { found: i32 },
    /// A field ORT always writes is absent.
    MissingField { what: String },
    /// A tensor has a data type code that is not a valid `TensorDataType`.
    UnknownDataType { tensor: String, code: i32 },
    /// A tensor has a negative dimension.
    NegativeDim { tensor: String, dims: Vec<i64> },
    /// The element count or byte size of a tensor overflows 64 bits.
    SizeOverflow { tensor: String, dims: Vec<i64> },
    /// A tensor's data length differs from what its dims and data type require.
    DataLengthMismatch { tensor: String, dims: Vec<i64>, expected: u64, found: u64 },
    /// A string tensor holds a different number of strings than its dims say.
    StringCountMismatch { tensor: String, dims: Vec<i64>, expected: u64, found: u64 },
    /// A tensor stores its values in the wrong field (`raw_data` for strings, or
    /// `string_data` for a numeric type).
    WrongStorage { tensor: String, detail: &'static str },
    /// A tensor has both inline `raw_data` and an external data offset.
    InlineAndExternal { tensor: String },
    /// A tensor's `external_data_offset` is neither -1 nor a valid offset.
    BadExternalOffset { tensor: String, offset: i64 },
    /// A tensor refers to external data but the module state says there is none.
    ExternalWithoutFlag { tensor: String },
    /// A tensor's external range ends past the end of the external data file.
    ExternalOutOfRange { tensor: String, offset: u64, len: u64, file_len: u64 },
    /// Two tensors claim overlapping bytes of the external data file.
    ExternalOverlap { first: String, second: String },
    /// The checkpoint has external data but its file is not available.
    ExternalDataMissing { detail: String },
    /// A name that must be unique appears twice.
    DuplicateName { kind: &'static str, name: String },
    /// The checkpoint is too large for one flatbuffer (2 GiB); tensor data must go external.
    TooLarge { bytes: u64 },
    /// An argument given to the writer is invalid (not a property of any file).
    InvalidSpec { detail: String },
    /// The framing of an ORT 1.15 `.pbseq` file is broken (at byte `offset`).
    BadMessageSequence { offset: u64, detail: String },
    /// A file of an ORT 1.15 checkpoint folder starts with `optim` but is not named
    /// `optim_<group>_<momentum>_tensors.pbseq` or `optim_<group>_properties.pbseq`.
    BadLegacyFileName { name: String },
    /// An operating system error on `path`.
    Io { path: PathBuf, action: &'static str, source: io::Error },
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        use Error::*;
        match self {
            TooShort { .. }
            | WrongIdentifier { .. }
            | Flatbuffer(_)
            | MissingField { .. }
            | BadMessageSequence { .. }
            | BadLegacyFileName { .. } => ErrorKind::InvalidCheckpoint,
            UnsupportedVersion { .. } => ErrorKind::UnsupportedVersion,
            UnknownDataType { .. }
            | NegativeDim { .. }
            | SizeOverflow { .. }
            | DataLengthMismatch { .. }
            | StringCountMismatch { .. }
            | WrongStorage { .. }
            | InlineAndExternal { .. }
            | TooLarge { .. }
            | InvalidSpec { .. } => ErrorKind::TensorData,
            BadExternalOffset { .. }
            | ExternalWithoutFlag { .. }
            | ExternalOutOfRange { .. }
            | ExternalOverlap { .. }
            | ExternalDataMissing { .. } => ErrorKind::ExternalData,
            DuplicateName { .. } => ErrorKind::DuplicateName,
            Io { .. } => ErrorKind::Io,
        }
    }

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
            Flatbuffer(e) => write!(f, "corrupt checkpoint flatbuffer: {e}"),
            UnsupportedVersion { found } => write!(
                f,
                "checkpoint version {found} is not supported (this ortckpt reads versions {}); \
                 upgrade ortckpt if the file comes from a newer ONNX Runtime",
                crate::reader::SUPPORTED_VERSIONS.map(|v| v.to_string()).join(", ")
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
            BadMessageSequence { offset, detail } => {
                write!(f, "corrupt .pbseq message sequence at byte {offset}: {detail}")
            }
            BadLegacyFileName { name } => write!(
                f,
                "{name:?} is not an optimizer state file name (expected optim_<group>_<momentum>_tensors.pbseq \
                 or optim_<group>_properties.pbseq, names without '_')"
            ),
            Io { path, action, source } => {
                write!(f, "cannot {action} {}: {source}", path.display())
            }
        }
    }
}

fn show_identifier(found: &[u8; 4]) -> String {
    match std::str::from_utf8(found) {
        Ok(s) if s.chars().all(|c| c.is_ascii_graphic()) => format!("{s:?}"),
        _ => format!("{found:02x?}"),
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Flatbuffer(e) => Some(e),
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<flatbuffers::InvalidFlatbuffer> for Error {
    fn from(e: flatbuffers::InvalidFlatbuffer) -> Self {
        Error::Flatbuffer(e)
    }
}
