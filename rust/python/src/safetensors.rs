//! `read_safetensors`: the core's safetensors checks on a file the core opened (regular files
//! only, never blocking) and read into private memory; tensors come back as (offset, length)
//! ranges of that memory for numpy to view without copying.

use std::panic::{catch_unwind, AssertUnwindSafe};

use ortckpt_core::{SafetensorsFile, SafetensorsTensor};
use pyo3::prelude::*;

use crate::errors::{core_error, with_attributes, ConversionError, GuardedError};
use crate::mapped::{interruptible, path_arg, show, MappedFile};

/// One tensor: (name, numpy dtype name, shape, offset in the file, byte length).
type Tensor = (String, &'static str, Vec<u64>, u64, u64);

/// `__metadata__` pairs in file order (None when absent).
type Metadata = Option<Vec<(String, String)>>;

/// Opens the safetensors file at `path`, reads it into private memory and checks it. Returns the
/// file's bytes, its `__metadata__` and its tensors in file order. SourceTooLargeError for a
/// file of more than `max_bytes` bytes, before a byte is read.
#[pyfunction]
#[pyo3(signature = (path, max_bytes=None))]
pub(crate) fn read_safetensors(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    max_bytes: Option<u64>,
) -> PyResult<(Py<MappedFile>, Metadata, Vec<Tensor>)> {
    let path = path_arg(path)?;
    let source = show(&path);
    // Read, not mapped: the tensors are views of these bytes for as long as the state lives, and
    // a mapping would let another program's truncation of the file SIGBUS us.
    let file = interruptible(py, &source, |keep_going| {
        ortckpt_core::MappedFile::read_path_within(&path, max_bytes, keep_going)
    })?;
    let checked =
        py.detach(|| catch_unwind(AssertUnwindSafe(|| ortckpt_core::read_safetensors(file.bytes()))));
    let SafetensorsFile { metadata, tensors, .. } = match checked {
        Ok(Ok(checked)) => checked,
        // ConversionError naming the tensor at fault as its `tensor`
        Ok(Err(err)) => return Err(core_error(&source, GuardedError::Core(err))),
        Err(_) => {
            let message = format!(
                "{source}: not a valid safetensors file: internal error in ortckpt's safetensors reader; \
                 please report this with the file"
            );
            return Err(with_attributes(ConversionError::new_err(message), &source, None));
        }
    };
    let tensors = tensors
        .into_iter()
        .map(|SafetensorsTensor { name, dtype, shape, offset, len }| (name, dtype.name, shape, offset, len))
        .collect();
    Ok((Py::new(py, MappedFile::wrap(file))?, metadata, tensors))
}

/// (safetensors code, numpy dtype name) of every dtype read and written.
pub(crate) fn dtypes() -> Vec<(&'static str, &'static str)> {
    ortckpt_core::SAFETENSORS_DTYPES.iter().map(|d| (d.code, d.name)).collect()
}
