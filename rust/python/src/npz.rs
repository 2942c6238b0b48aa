//! `read_npz`: the core's `.npz` decoder on a file opened by the core (regular files only, never
//! blocking), members returned as (buffer, offset) pairs numpy views without copying.

use std::panic::{catch_unwind, AssertUnwindSafe};

use ortckpt_core::{NpzData, NpzMember};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::errors::{core_error, with_attributes, ConversionError, GuardedError};
use crate::mapped::{interruptible, path_arg, show, MappedFile};

/// One member: (key, dtype string, shape, fortran order, buffer, data offset in the buffer); the
/// buffer is the opened file (stored members) or a `bytes` of the inflated member.
type Member = (String, String, Vec<u64>, bool, Py<PyAny>, u64);

/// Opens the `.npz` archive at `path` and decodes every member (deflated members may total at
/// most `max_decompressed_bytes`, default: the core's budget for the archive's size). Returns the
/// opened file and the members; a stored member's buffer is the file itself. SourceTooLargeError
/// for an archive of more than `max_bytes` bytes, before a byte is read.
#[pyfunction]
#[pyo3(signature = (path, max_decompressed_bytes=None, max_bytes=None))]
pub(crate) fn read_npz(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    max_decompressed_bytes: Option<u64>,
    max_bytes: Option<u64>,
) -> PyResult<(Py<MappedFile>, Vec<Member>)> {
    let path = path_arg(path)?;
    let source = show(&path);
    // Read into private memory, not mapped: members are inflated from these bytes and stored
    // members are viewed in place, so a mapping would let another program's truncation SIGBUS us.
    let file = interruptible(py, &source, |keep_going| {
        ortckpt_core::MappedFile::read_path_within(&path, max_bytes, keep_going)
    })?;
    let bytes = file.bytes();
    let budget =
        max_decompressed_bytes.unwrap_or_else(|| ortckpt_core::default_npz_budget(bytes.len() as u64));
    let (base, len) = (bytes.as_ptr() as usize, bytes.len());
    let decoded = py.detach(|| {
        catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `file` owns the mapping (or buffer) at base..base + len and outlives this call.
            unsafe { ortckpt_core::read_npz_raw(base as *const u8, len, budget) }
        }))
    });
    let members = match decoded {
        Ok(Ok(members)) => members,
        // ConversionError naming the member as its `tensor`
        Ok(Err(err)) => return Err(core_error(&source, GuardedError::Core(err))),
        Err(_) => {
            let message = format!(
                "{source}: internal error in ortckpt's npz decoder; please report this with the file"
            );
            return Err(with_attributes(ConversionError::new_err(message), &source, None));
        }
    };
    let file = Py::new(py, MappedFile::wrap(file))?;
    let mut out = Vec::with_capacity(members.len());
    for NpzMember { key, header, data } in members {
        let (buffer, offset) = match data {
            NpzData::InPlace { offset } => (file.clone_ref(py).into_any(), offset),
            // Copied into a `bytes` (memory that cannot change, so a state keeps views of it
            // without another copy); each decoded vector is freed as soon as it is copied, so the
            // peak is the inflated members plus the largest one.
            NpzData::Inflated(bytes) => {
                (PyBytes::new(py, &bytes).into_any().unbind(), header.header_len as u64)
            }
        };
        out.push((key, header.descr, header.shape, header.fortran_order, buffer, offset));
    }
    Ok((file, out))
}

/// Why an `.npz` member may not be named `name` (the core's rule: a zip tool would extract it
/// outside its folder, or it cannot be a file name), or None.
#[pyfunction]
pub(crate) fn npz_member_problem(name: &str) -> Option<&'static str> {
    ortckpt_core::npz_member_problem(name)
}

/// The `.npy` header of one tensor's buffer (a Flower `Array`'s data), parsed by the core's `.npy`
/// parser (the one `read_npz` uses, with its header limit): (descr, fortran order, shape, offset of
/// the values). `ConversionError` naming `tensor` when it is not one.
#[pyfunction]
pub(crate) fn parse_npy_buffer(
    py: Python<'_>,
    data: &[u8],
    tensor: &str,
) -> PyResult<(String, bool, Vec<u64>, usize)> {
    match ortckpt_core::parse_npy_buffer(data) {
        Ok(h) => Ok((h.descr, h.fortran_order, h.shape, h.header_len)),
        Err(detail) => {
            let shown =
                PyString::new(py, tensor).repr().map_or_else(|_| format!("{tensor:?}"), |r| r.to_string());
            let err = ConversionError::new_err(format!(
                "tensor {shown}: malformed .npy header in the Array's data: {detail}"
            ));
            Err(with_attributes(err, "<Array>", Some(tensor)))
        }
    }
}
