"""Value comparison for ``ortckpt diff``: tensors of any size compared chunk by chunk, bit for bit
or within a tolerance."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from .. import _dtypes
from ._format import JsonValue, json_float

if TYPE_CHECKING:
    from .._tensor import Tensor

    # Only for the type checker: numpy < 1.22 cannot subscript np.dtype at run time.
    Mask = np.ndarray[Any, np.dtype[np.bool_]]

_FLOAT_TYPES = frozenset(
    {
        _dtypes.FLOAT,
        _dtypes.DOUBLE,
        _dtypes.FLOAT16,
        _dtypes.BFLOAT16,
        _dtypes.FLOAT8E4M3FN,
        _dtypes.FLOAT8E4M3FNUZ,
        _dtypes.FLOAT8E5M2,
        _dtypes.FLOAT8E5M2FNUZ,
    }
)
_COMPLEX_TYPES = frozenset({_dtypes.COMPLEX64, _dtypes.COMPLEX128})

#: Elements compared at a time: bounds the temporaries of a value comparison, whatever the tensor size.
CHUNK = 1 << 16
_BITS: dict[int, type[np.unsignedinteger[Any]]] = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class Tolerance(NamedTuple):
    """How values are compared: bit for bit (``exact``), else ``|a - b| <= atol + rtol * |b|``.
    NaN equals NaN either way."""

    rtol: float = 0.0
    atol: float = 0.0
    exact: bool = True


EXACT = Tolerance()


def _flat_values(tensor: Tensor, name: str) -> np.ndarray[Any, Any]:
    """The values as a flat array, not cached in the state: numeric tensors are zero-copy views of
    the mapped file (possibly unaligned; they are read chunk by chunk)."""
    if tensor.data_type == _dtypes.STRING:
        return tensor.array(name).reshape(-1)
    if tensor.nbytes == 0:
        return np.empty(0, dtype=tensor.dtype)
    return np.frombuffer(cast("bytes", tensor.spec_data(name)), dtype=tensor.dtype)


def _finite_max(diff: np.ndarray[Any, Any]) -> float | None:
    """The largest |a - b| that is a number (pairs where one side only is NaN have none)."""
    diff = diff[~np.isnan(diff)]
    return float(diff.max()) if diff.size else None


def _float_chunk(
    ca: np.ndarray[Any, Any], cb: np.ndarray[Any, Any], tol: Tolerance
) -> tuple[Mask, float | None]:
    a64 = ca.astype(np.float64)
    b64 = cb.astype(np.float64)
    if tol.exact:
        bits = _BITS[ca.dtype.itemsize]
        mask: Mask = (ca.view(bits) != cb.view(bits)) & ~(np.isnan(a64) & np.isnan(b64))
    else:
        mask = ~np.isclose(a64, b64, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
    if not mask.any():
        return mask, None
    return mask, _finite_max(np.abs(a64[mask] - b64[mask]))


def _complex_chunk(
    ca: np.ndarray[Any, Any], cb: np.ndarray[Any, Any], tol: Tolerance
) -> tuple[Mask, float | None]:
    a128 = ca.astype(np.complex128)
    b128 = cb.astype(np.complex128)
    if tol.exact:
        bits = _BITS[ca.dtype.itemsize // 2]
        differ = (ca.view(bits).reshape(-1, 2) != cb.view(bits).reshape(-1, 2)).any(axis=1)
        mask: Mask = differ & ~(np.isnan(a128) & np.isnan(b128))
    else:
        mask = ~np.isclose(a128, b128, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
    if not mask.any():
        return mask, None
    return mask, _finite_max(np.abs(a128[mask] - b128[mask]))


def _int_chunk(ca: np.ndarray[Any, Any], cb: np.ndarray[Any, Any], tol: Tolerance) -> tuple[Mask, int | None]:
    bits = _BITS[ca.dtype.itemsize]
    ua = ca.view(bits)
    ub = cb.view(bits)
    # |a - b| exactly, as an unsigned number of the same width (which always holds it): the
    # wrapping difference of the bit patterns, taken the right way round
    greater = (ca >= cb) if ca.dtype.kind == "i" else (ua >= ub)
    diff = np.where(greater, ua - ub, ub - ua)
    if tol.exact:
        mask: Mask = ua != ub
    else:
        mask = diff.astype(np.float64) > tol.atol + tol.rtol * np.abs(cb.astype(np.float64))
    if not mask.any():
        return mask, None
    return mask, int(diff[mask].max())


def compare_values(a: Tensor, b: Tensor, name: str, tol: Tolerance) -> dict[str, JsonValue] | None:
    """None when the values of two tensors of one data type and shape are equal, else
    ``{"differing": count, "total": count, "max_abs_diff": number | None}``.

    The tensors are read ``CHUNK`` elements at a time, so memory use stays bounded whatever their
    size.
    """
    chunk = CHUNK

    fa = _flat_values(a, name)
    fb = _flat_values(b, name)
    code = a.data_type
    total = int(fa.size)
    differing = 0
    worst: float | int | None = None
    with np.errstate(all="ignore"):
        for start in range(0, total, chunk):
            ca = fa[start : start + chunk]
            cb = fb[start : start + chunk]
            chunk_max: float | int | None
            if code == _dtypes.STRING:
                mask: Mask = np.asarray(ca != cb, dtype=bool)
                chunk_max = None
            elif code in _FLOAT_TYPES:
                mask, chunk_max = _float_chunk(ca, cb, tol)
            elif code in _COMPLEX_TYPES:
                mask, chunk_max = _complex_chunk(ca, cb, tol)
            else:  # integers and bool
                mask, chunk_max = _int_chunk(ca, cb, tol)
            differing += int(np.count_nonzero(mask))
            if chunk_max is not None and (worst is None or chunk_max > worst):
                worst = chunk_max
    if differing == 0:
        return None
    if worst is None and code != _dtypes.STRING:
        worst = math.nan  # every differing pair has a NaN on one side only
    shown = json_float(worst) if isinstance(worst, float) else worst
    return {"differing": differing, "total": total, "max_abs_diff": shown}
