//! `MappedFile`: a read-only memory map exposed through the buffer protocol, so numpy arrays can
//! be zero-copy views into it; each view holds a reference that keeps the map alive.

use std::ffi::c_int;
use std::path::PathBuf;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::{core_error, GuardedError};

#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct MappedFile {
    inner: ortckpt_core::MappedFile,
}

#[pymethods]
impl MappedFile {
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let inner = py
            .detach(|| ortckpt_core::MappedFile::open(&path))
            .map_err(|e| core_error(&path.display().to_string(), GuardedError::Core(e)))?;
        Ok(MappedFile { inner })
    }

    /// The mapped file's path, as given.
    #[getter]
    fn path(&self) -> String {
        self.inner.path().display().to_string()
    }

    /// Gives `length` bytes at `offset` normal readahead (the mapping starts with random-access
    /// advice); call before reading a tensor's values in order. Advice only: never fails.
    fn advise_normal(&self, offset: usize, length: usize) {
        self.inner.advise_normal(offset, length);
    }

    fn __len__(&self) -> usize {
        self.inner.bytes().len()
    }

    fn __repr__(&self) -> String {
        format!(
            "MappedFile({:?}, {} bytes)",
            self.inner.path().display().to_string(),
            self.inner.bytes().len()
        )
    }

    /// Exports the mapping as a read-only 1-D buffer of unsigned bytes.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("buffer view is null"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("a checkpoint memory map is read-only"));
        }
        let bytes = slf.get().inner.bytes();
        let len = isize::try_from(bytes.len()).map_err(|_| PyBufferError::new_err("mapping too large"))?;
        // SAFETY: `view` is non-null; FillInfo stores a new reference to `slf` in the view, which
        // keeps the mapping (and so `bytes`) alive until the view is released.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), bytes.as_ptr() as *mut std::ffi::c_void, len, 1, flags)
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }
}
