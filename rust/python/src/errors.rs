//! The Python exception hierarchy, and the mapping from core errors (and panics) to it.

use std::panic::{catch_unwind, AssertUnwindSafe};

use ortckpt_core::{Error, ErrorKind};
use pyo3::create_exception;
use pyo3::exceptions::{
    PyFileExistsError, PyFileNotFoundError, PyIsADirectoryError, PyKeyboardInterrupt, PyMemoryError,
    PyNotADirectoryError, PyOSError, PyPermissionError, PyValueError,
};
use pyo3::prelude::*;

use crate::spelling::spell_error;

create_exception!(
    ortckpt,
    CheckpointError,
    PyValueError,
    "Base class of every ortckpt error about checkpoint contents."
);
create_exception!(
    ortckpt,
    InvalidCheckpointError,
    CheckpointError,
    "Not a checkpoint, or its structure is corrupt."
);
create_exception!(
    ortckpt,
    UnsupportedVersionError,
    CheckpointError,
    "A checkpoint version this ortckpt does not read."
);
create_exception!(ortckpt, TensorDataError, CheckpointError, "A tensor's data type, dims and data disagree.");
create_exception!(
    ortckpt,
    DuplicateNameError,
    CheckpointError,
    "Two entries share a name that must be unique."
);
create_exception!(
    ortckpt,
    ExternalDataError,
    CheckpointError,
    "External tensor data is missing, short or out of range."
);

create_exception!(
    ortckpt,
    InterruptedSaveError,
    CheckpointError,
    "A save was interrupted (crash) while replacing the checkpoint's files; ortckpt.recover(path) settles it."
);
create_exception!(
    ortckpt,
    CheckpointChangedError,
    CheckpointError,
    "A loaded checkpoint file was modified on disk (in place) since it was loaded."
);
create_exception!(
    ortckpt,
    ConversionError,
    CheckpointError,
    "A safetensors or npz file is malformed, or a conversion cannot keep what the checkpoint holds."
);
create_exception!(
    ortckpt,
    AggregationError,
    CheckpointError,
    "No aggregate could be made: no upload was accepted, fewer than the method needs, or the aggregate is not finite (``.report`` says why, when it comes from ``average`` or ``Round.result``)."
);
create_exception!(
    ortckpt,
    SourceTooLargeError,
    CheckpointError,
    "A checkpoint (or upload) is larger than the size limit it was read with."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let base = py.get_type::<CheckpointError>();
    // Defaults for errors raised without them (by Python code); instances from the core set both.
    base.setattr("source", py.None())?;
    base.setattr("tensor", py.None())?;
    m.add("CheckpointError", base)?;
    m.add("InvalidCheckpointError", py.get_type::<InvalidCheckpointError>())?;
    m.add("UnsupportedVersionError", py.get_type::<UnsupportedVersionError>())?;
    m.add("TensorDataError", py.get_type::<TensorDataError>())?;
    m.add("DuplicateNameError", py.get_type::<DuplicateNameError>())?;
    m.add("ExternalDataError", py.get_type::<ExternalDataError>())?;
    m.add("InterruptedSaveError", py.get_type::<InterruptedSaveError>())?;
    m.add("CheckpointChangedError", py.get_type::<CheckpointChangedError>())?;
    m.add("ConversionError", py.get_type::<ConversionError>())?;
    m.add("SourceTooLargeError", py.get_type::<SourceTooLargeError>())?;
    m.add("AggregationError", py.get_type::<AggregationError>())?;
    Ok(())
}

/// Panics are caught at the boundary (see [`guarded`]) and raised with their message; the default
/// hook would also print the panic and a backtrace to stderr for an error the caller already gets.
pub(crate) fn silence_panic_output() {
    std::panic::set_hook(Box::new(|_| {}));
}

/// Runs `f`, turning a panic into an error so it can never reach Python as a PanicException.
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, GuardedError> {
    crate::reserve::rearm(); // one atomic load when the reserve is in place
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(GuardedError::Core),
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(GuardedError::Panic(message))
        }
    }
}

pub(crate) enum GuardedError {
    Core(Error),
    Panic(String),
}

/// Maps an error to the matching Python exception; `source` (a path or `<bytes>`) prefixes the
/// message so users see which input was wrong.
pub(crate) fn core_error(source: &str, e: GuardedError) -> PyErr {
    crate::reserve::rearm(); // the failed operation's memory is freed by now
    let e = match e {
        GuardedError::Core(e) => e,
        GuardedError::Panic(message) => {
            let err = CheckpointError::new_err(format!(
                "{source}: internal error in ortckpt ({message}); please report this with the file"
            ));
            return with_attributes(err, source, None);
        }
    };
    if let Error::Io { path, source: io, .. } = &e {
        if io.kind() == std::io::ErrorKind::OutOfMemory {
            // ENOMEM for a buffer an input called for (a file's private copy): as Python's own
            return PyMemoryError::new_err(e.to_string());
        }
        return os_error(&e.to_string(), path, io);
    }
    let message = format!("{source}: {}", spell_error(&e));
    let err = match e.kind() {
        ErrorKind::InvalidCheckpoint => InvalidCheckpointError::new_err(message),
        ErrorKind::UnsupportedVersion => UnsupportedVersionError::new_err(message),
        ErrorKind::TensorData => TensorDataError::new_err(message),
        ErrorKind::DuplicateName => DuplicateNameError::new_err(message),
        ErrorKind::ExternalData => ExternalDataError::new_err(message),
        ErrorKind::InterruptedSave => InterruptedSaveError::new_err(message),
        ErrorKind::CheckpointChanged => CheckpointChangedError::new_err(message),
        ErrorKind::Interrupted => return PyKeyboardInterrupt::new_err(message),
        ErrorKind::OutOfMemory => return PyMemoryError::new_err(message),
        ErrorKind::Internal => CheckpointError::new_err(format!(
            "{message}; this is a bug in ortckpt, please report it with the file"
        )),
        ErrorKind::Io | ErrorKind::KeptChanging => CheckpointError::new_err(message),
        ErrorKind::Aggregation => AggregationError::new_err(spell_error(&e)),
        ErrorKind::Conversion => ConversionError::new_err(message),
        ErrorKind::SizeLimit => SourceTooLargeError::new_err(spell_error(&e)),
    };
    with_attributes(err, source, e.tensor())
}

/// Sets `source` (the path or "<bytes>") and `tensor` (the tensor's name, or None) on a
/// CheckpointError, so callers can tell which input and tensor failed without parsing messages.
pub(crate) fn with_attributes(err: PyErr, source: &str, tensor: Option<&str>) -> PyErr {
    Python::attach(|py| {
        let value = err.value(py);
        // Setting attributes on a fresh exception instance cannot fail short of memory exhaustion;
        // the exception is raised either way.
        let _ = value.setattr("source", source);
        let _ = value.setattr("tensor", tensor);
    });
    err
}

/// An OSError of the subclass Python itself would raise, with errno and filename set.
fn os_error(message: &str, path: &std::path::Path, io: &std::io::Error) -> PyErr {
    let filename = path.as_os_str().to_os_string(); // a str, bytes preserved (fs-decoded)
    if let Some(errno) = io.raw_os_error() {
        // OSError(errno, strerror, filename) picks the subclass (FileNotFoundError, ...) itself.
        return PyOSError::new_err((errno, message.to_owned(), filename));
    }
    let args = (message.to_owned(),);
    match io.kind() {
        std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(args),
        std::io::ErrorKind::PermissionDenied => PyPermissionError::new_err(args),
        std::io::ErrorKind::AlreadyExists => PyFileExistsError::new_err(args),
        std::io::ErrorKind::IsADirectory => PyIsADirectoryError::new_err(args),
        std::io::ErrorKind::NotADirectory => PyNotADirectoryError::new_err(args),
        _ => PyOSError::new_err(args),
    }
}
