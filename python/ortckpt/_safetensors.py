"""Checkpoints <-> safetensors files (read and written here; the ``safetensors`` package is not
needed).

Parameters are stored under their names and momentums under ``_flat_layout.momentum_key``; the rest of
the checkpoint is the JSON layout in the metadata key ``"ortckpt"``. The format: an 8-byte
little-endian header length, a JSON header ``{key: {"dtype", "shape", "data_offsets"}, ...,
"__metadata__": {str: str}}`` (padded with spaces to a multiple of 8), then the tensors' bytes.

Writing streams each tensor into the output (``_atomic.atomic_file``: a new file that replaces the
target only when complete). Reading opens the file once as a regular file through the core (a FIFO
or device is refused, never waited on), maps it, checks every header entry (known dtype, shape of
non-negative integers, offsets in range, contiguous and sized shape x itemsize) and views each
tensor in the mapping without copying.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

from . import _native
from ._atomic import atomic_file
from ._flat_layout import SAFETENSORS_KEY, array_of, build_state, decode, encode, tensors_of
from ._progress import progress
from .errors import ConversionError
from .state import CheckpointState

# safetensors dtype codes -> numpy dtype names (ml_dtypes names for bfloat16 and float8)
_DTYPES: dict[str, str] = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "U32": "uint32",
    "I32": "int32",
    "U64": "uint64",
    "I64": "int64",
    "F16": "float16",
    "F32": "float32",
    "F64": "float64",
    "C64": "complex64",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2": "float8_e5m2",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
}
_CODES = {name: code for code, name in _DTYPES.items()}
_METADATA = "__metadata__"
# The largest header read (as the safetensors package refuses more than 100 MB itself).
MAX_HEADER_BYTES = 100_000_000
_LENGTH = struct.Struct("<Q")


def numpy_dtype(name: str) -> np.dtype[Any] | None:
    """The numpy dtype of a dtype name safetensors or npz layouts use; None for any other name."""
    if name not in _CODES:
        return None
    if name == "bfloat16" or name.startswith("float8"):
        import ml_dtypes

        dtype: np.dtype[Any] = np.dtype(getattr(ml_dtypes, name))
        return dtype
    return np.dtype(name)


def _bytes_of(array: np.ndarray[Any, Any]) -> memoryview:
    """The array's bytes in C order (a view when it is C-contiguous already)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    return flat.view(np.uint8).data


def write(state: CheckpointState, path: str, *, include_optimizer_state: bool, show_progress: bool) -> None:
    items, layout = tensors_of(state, include_optimizer_state)
    supported = ", ".join(sorted(_CODES))
    header: dict[str, Any] = {_METADATA: {SAFETENSORS_KEY: encode(layout)}}
    offset = 0
    for key, provider in items:
        array = array_of(state, provider)
        code = _CODES.get(array.dtype.name) if array.dtype != np.dtype(object) else None
        if code is None:
            what = "string" if array.dtype == np.dtype(object) else array.dtype.name
            raise ConversionError(
                f"tensor {key!r} is {what}: safetensors cannot hold it (it holds {supported}); "
                "convert to .npz instead, which holds every checkpoint dtype"
            )
        header[key] = {
            "dtype": code,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with atomic_file(path) as out:
        out.write(_LENGTH.pack(len(text)))
        out.write(text)
        for _, provider in progress(
            items, enabled=show_progress, desc="writing", total=len(items), unit="tensor"
        ):
            out.write(_bytes_of(array_of(state, provider)))


def _fail(path: str, what: str) -> ConversionError:
    return ConversionError(f"{path}: not a valid safetensors file: {what}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _header(path: str, data: memoryview) -> tuple[dict[str, Any], int]:
    if len(data) < 8:
        raise _fail(path, f"it is {len(data)} bytes long, shorter than the 8-byte header length")
    (size,) = _LENGTH.unpack_from(data)
    if size > min(len(data) - 8, MAX_HEADER_BYTES):
        raise _fail(path, f"its header claims {size} bytes, more than the file (or {MAX_HEADER_BYTES}) holds")
    try:
        header = json.loads(bytes(data[8 : 8 + size]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _fail(path, f"its header is not UTF-8 JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(header, dict):
        raise _fail(path, "its header is not a JSON object")
    return header, 8 + size


def _entry(path: str, key: str, info: object, data_len: int) -> tuple[np.dtype[Any], list[int], int, int]:
    where = f"tensor {key!r}"
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise _fail(path, f"{where}: its entry is not {{dtype, shape, data_offsets}}")
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str) or code not in _DTYPES:
        raise ConversionError(
            f"{path}: tensor {key!r} has safetensors dtype {code!r}, "
            "which ONNX Runtime checkpoints cannot hold"
        )
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise _fail(path, f"{where}: its shape {shape!r} is not a list of non-negative integers")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_int(o) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= data_len
    ):
        raise _fail(
            path, f"{where}: its data_offsets {offsets!r} are not a range of the {data_len} data bytes"
        )
    dtype = numpy_dtype(_DTYPES[code])
    assert dtype is not None  # every code maps to a known name
    expected = math.prod(shape) * dtype.itemsize
    if offsets[1] - offsets[0] != expected:
        raise _fail(
            path, f"{where}: it holds {offsets[1] - offsets[0]} bytes, its shape and dtype {expected}"
        )
    return dtype, shape, offsets[0], offsets[1]


def read(path: str, *, trainable: object, show_progress: bool) -> CheckpointState:
    file = _native.MappedFile(path)  # regular files only, never blocking
    data = memoryview(file)
    header, data_start = _header(path, data)
    metadata = header.pop(_METADATA, None)
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):
        raise _fail(path, "its __metadata__ is not an object of strings")
    data_len = len(data) - data_start
    entries = sorted(
        ((key, *_entry(path, key, info, data_len)) for key, info in header.items()),
        key=lambda e: (e[3], e[4]),
    )
    end = 0
    for key, _, _, begin, stop in entries:
        if begin != end:
            raise _fail(path, f"tensor {key!r} starts at data byte {begin}, not at {end} (overlap or gap)")
        end = stop
    if end != data_len:
        raise _fail(
            path, f"its tensors end at data byte {end} but the file holds {data_len} (truncated or padded)"
        )
    tensors: dict[str, np.ndarray[Any, Any]] = {}
    for key, dtype, shape, begin, stop in progress(
        entries, enabled=show_progress, desc="reading", total=len(entries), unit="tensor"
    ):
        if stop == begin:
            tensors[key] = np.zeros(shape, dtype)
            continue
        count = (stop - begin) // dtype.itemsize
        tensors[key] = np.frombuffer(file, dtype=dtype, count=count, offset=data_start + begin).reshape(shape)  # type: ignore[call-overload]
    layout_text = None if metadata is None else metadata.get(SAFETENSORS_KEY)
    layout = decode(layout_text, path) if layout_text is not None else None
    return build_state(path, tensors, layout, trainable)
