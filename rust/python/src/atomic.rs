//! `AtomicOutput` and `StagedOutput`: the core's atomic replacement of one output file (see
//! `ortckpt-core`'s `atomic.rs`), for Python writers (`ortckpt._atomic.atomic_file` /
//! `atomic_path`).

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::{core_error, guarded};
use crate::mapped::{path_arg, show};

/// One output file being written under a temporary name beside its destination.
#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct AtomicOutput {
    inner: Mutex<Option<ortckpt_core::AtomicOutput>>,
    path: String,
}

impl AtomicOutput {
    fn with<T>(&self, f: impl FnOnce(&ortckpt_core::AtomicOutput) -> T) -> PyResult<T> {
        let guard = self.inner.lock().map_err(|_| PyValueError::new_err("atomic output poisoned"))?;
        match guard.as_ref() {
            Some(out) => Ok(f(out)),
            None => Err(PyValueError::new_err(format!("the output to {} is already finished", self.path))),
        }
    }
}

#[pymethods]
impl AtomicOutput {
    #[new]
    fn new(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<Self> {
        let path = path_arg(path)?;
        let out = py
            .detach(|| guarded(|| ortckpt_core::AtomicOutput::create(&path)))
            .map_err(|e| core_error(&show(&path), e))?;
        Ok(AtomicOutput { inner: Mutex::new(Some(out)), path: show(&path) })
    }

    /// The temporary file's descriptor (owned by this object: dup it to keep it).
    fn fileno(&self) -> PyResult<i32> {
        self.with(|out| out.file().as_raw_fd())
    }

    /// Syncs the file and renames it over the destination.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let out = self.inner.lock().map_err(|_| PyValueError::new_err("atomic output poisoned"))?.take();
        let Some(out) = out else {
            return Err(PyValueError::new_err(format!("the output to {} is already finished", self.path)));
        };
        py.detach(|| guarded(|| out.commit())).map_err(|e| core_error(&self.path, e))
    }

    /// Removes the temporary file (nothing once committed).
    fn discard(&self) -> PyResult<()> {
        let out = self.inner.lock().map_err(|_| PyValueError::new_err("atomic output poisoned"))?.take();
        drop(out);
        Ok(())
    }
}

/// One output file written by a by-path writer into a private staging directory beside its
/// destination.
#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct StagedOutput {
    inner: Mutex<Option<ortckpt_core::StagedOutput>>,
    path: String,
}

#[pymethods]
impl StagedOutput {
    #[new]
    #[pyo3(signature = (path, companions = Vec::new()))]
    fn new(py: Python<'_>, path: &Bound<'_, PyAny>, companions: Vec<String>) -> PyResult<Self> {
        let path = path_arg(path)?;
        let suffixes: Vec<&str> = companions.iter().map(String::as_str).collect();
        let out = py
            .detach(|| guarded(|| ortckpt_core::StagedOutput::create_with(&path, &suffixes)))
            .map_err(|e| core_error(&show(&path), e))?;
        Ok(StagedOutput { inner: Mutex::new(Some(out)), path: show(&path) })
    }

    /// The path the writer must create and write (companions: this path + their suffixes).
    fn writer_path(&self) -> PyResult<OsString> {
        let guard = self.inner.lock().map_err(|_| PyValueError::new_err("staged output poisoned"))?;
        match guard.as_ref() {
            Some(out) => Ok(out.writer_path().into_os_string()),
            None => Err(PyValueError::new_err(format!("the output to {} is already finished", self.path))),
        }
    }

    /// Renames the written companions, then the file, over their destinations (permission rule
    /// applied, synced).
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let out = self.inner.lock().map_err(|_| PyValueError::new_err("staged output poisoned"))?.take();
        let Some(out) = out else {
            return Err(PyValueError::new_err(format!("the output to {} is already finished", self.path)));
        };
        py.detach(|| guarded(|| out.commit())).map_err(|e| core_error(&self.path, e))
    }

    /// Removes the staging directory and whatever was written (nothing once committed).
    fn discard(&self) -> PyResult<()> {
        let out = self.inner.lock().map_err(|_| PyValueError::new_err("staged output poisoned"))?.take();
        drop(out);
        Ok(())
    }
}
