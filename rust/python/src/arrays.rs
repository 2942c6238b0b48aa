//! numpy arrays over a checkpoint's bytes, made in Rust through numpy's C API: one call builds
//! every parameter's array (`Index.parameter_arrays`), at a fraction of the cost of a Python
//! `np.frombuffer` per tensor when there are many small tensors.

use std::ffi::{c_int, c_void};
use std::ptr;

use numpy::npyffi::{self, npy_intp, NpyTypes, NPY_ARRAY_CARRAY_RO, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods};
use pyo3::prelude::*;

/// numpy 1.x's limit on dims (numpy 2 allows 64): arrays with more go through the Python path,
/// which names the tensor in its error.
const MAX_DIMS: usize = 32;

/// A read-only, C-contiguous array of `descr` and `dims` over the bytes at `data`, whose `base` is
/// `owner` (which keeps the bytes alive). `None` when this path does not apply and the caller
/// must make the array another way: no elements, too many dims, or `data` not aligned for
/// `descr`.
///
/// # Safety
/// `data` must point to `element count × itemsize` readable bytes owned by `owner`, valid for as
/// long as `owner` lives.
pub(crate) unsafe fn view<'py>(
    py: Python<'py>,
    descr: &Bound<'py, PyArrayDescr>,
    dims: &[i64],
    data: *const u8,
    nbytes: usize,
    owner: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let aligned = (data as usize).is_multiple_of(descr.alignment().max(1));
    if nbytes == 0 || dims.len() > MAX_DIMS || !aligned {
        return Ok(None);
    }
    // Non-negative, and their product times the itemsize is `nbytes`: each fits an npy_intp.
    let mut shape: Vec<npy_intp> = dims.iter().map(|&d| d as npy_intp).collect();
    // SAFETY: numpy's C API with the GIL held. NewFromDescr steals the descr reference given;
    // without strides it lays the array out C-contiguously over `data`, which the caller
    // guarantees holds the elements; no WRITEABLE flag, so the array is read-only.
    let array = unsafe {
        let subtype = npyffi::get_type_object(py, NpyTypes::PyArray_Type);
        let raw = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            subtype,
            descr.clone().into_ptr().cast(),
            shape.len() as c_int,
            shape.as_mut_ptr(),
            ptr::null_mut(),
            data.cast_mut().cast::<c_void>(),
            NPY_ARRAY_CARRAY_RO,
            ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_err(py, raw)?
    };
    // SAFETY: SetBaseObject steals the reference to `owner` (also when it fails).
    let status =
        unsafe { PY_ARRAY_API.PyArray_SetBaseObject(py, array.as_ptr().cast(), owner.clone().into_ptr()) };
    if status != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(Some(array))
}
