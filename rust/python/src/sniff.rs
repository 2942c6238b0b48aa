//! What kind of file a path or some leading bytes are: the core's rules (`sniff.rs` there), for
//! the readers implemented in Python (ONNX models through onnx) and `ortckpt inspect`.

use ortckpt_core::{Error, FileKind};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::{core_error, guarded, with_attributes, ConversionError, GuardedError};
use crate::mapped::{path_arg, show};

/// The kind of the file at `path` (`"checkpoint"`, `"adapter"`, `"onnx"`, ...; see
/// `ortckpt_core::FileKind::name`), or None when no rule recognizes it. Regular files only.
#[pyfunction]
fn file_kind(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<Option<&'static str>> {
    let path = path_arg(path)?;
    let kind =
        py.detach(|| guarded(|| ortckpt_core::sniff_file(&path))).map_err(|e| core_error(&show(&path), e))?;
    Ok(kind.map(FileKind::name))
}

/// Raises when `head` (the first bytes of a file of `length` bytes named `source`) is recognized
/// as another kind than `expected`: `ConversionError` saying what it is and what reads it (the
/// core's `CheckpointError` subclass for a checkpoint or adapter reader).
#[pyfunction]
fn expect_kind(head: &[u8], length: u64, expected: &str, source: &str) -> PyResult<()> {
    let Some(expected) = FileKind::from_name(expected) else {
        return Err(PyValueError::new_err(format!("unknown file kind {expected:?}")));
    };
    match ortckpt_core::expect_kind(head, length, expected) {
        Ok(()) => Ok(()),
        Err(e @ Error::WrongKind { .. }) if !matches!(expected, FileKind::Checkpoint | FileKind::Adapter) => {
            Err(with_attributes(ConversionError::new_err(format!("{source}: {e}")), source, None))
        }
        Err(e) => Err(core_error(source, GuardedError::Core(e))),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(file_kind, m)?)?;
    m.add_function(wrap_pyfunction!(expect_kind, m)?)?;
    m.add("SNIFF_LEN", ortckpt_core::SNIFF_LEN)?;
    Ok(())
}
