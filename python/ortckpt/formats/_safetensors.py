"""Checkpoints <-> safetensors files (read and written here; the ``safetensors`` package is not
needed).

Parameters are stored under their names and momentums under ``_flat_layout.momentum_key``; the rest of
the checkpoint is the JSON layout in the metadata key ``"ortckpt"``. The format: an 8-byte
little-endian header length, a JSON header ``{key: {"dtype", "shape", "data_offsets"}, ...,
"__metadata__": {str: str}}`` (padded with spaces to a multiple of 8), then the tensors' bytes.

Writing streams each tensor into the output (``_atomic.atomic_file``: a new file that replaces the
target only when complete). Reading is the core's (``_native.read_safetensors``): the file is
opened once as a regular file (a FIFO or device is refused, never waited on), read into private
memory (another program truncating it cannot SIGBUS us) and its header checked entry by entry;
this module only views each tensor's range of those bytes and builds the state. The dtype table
is the core's too.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

from .. import _dtypes, _native
from .._atomic import atomic_file
from .._progress import progress
from .._tensor import empty_array
from ..errors import ConversionError
from ..state import CheckpointState
from ._flat_layout import SAFETENSORS_KEY, array_of, build_state, decode, encode, tensors_of

# safetensors dtype codes -> numpy dtype names (ml_dtypes names for bfloat16 and float8), the core's table
_DTYPES: dict[str, str] = dict(_native.SAFETENSORS_DTYPES)
_CODES = {name: code for code, name in _DTYPES.items()}
_METADATA = "__metadata__"
_LENGTH = struct.Struct("<Q")


def numpy_dtype(name: str) -> np.dtype[Any] | None:
    """The numpy dtype of a dtype name safetensors or npz layouts use; None for any other name."""
    code = _dtypes.from_name(name)
    if name not in _CODES or code is None:
        return None
    return _dtypes.to_numpy(code)


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
    if len(text) > _native.SAFETENSORS_MAX_HEADER_BYTES:
        raise ConversionError(
            f"{path}: the safetensors header would take {len(text)} bytes, more than readers accept "
            f"({_native.SAFETENSORS_MAX_HEADER_BYTES}); convert to .npz instead, which has no such limit"
        )
    with atomic_file(path) as out:
        out.write(_LENGTH.pack(len(text)))
        out.write(text)
        for _, provider in progress(
            items, enabled=show_progress, desc="writing", total=len(items), unit="tensor"
        ):
            out.write(_bytes_of(array_of(state, provider)))


def read(
    path: str, *, trainable: object, show_progress: bool, max_bytes: int | None = None
) -> CheckpointState:
    """The state in the safetensors file at ``path``; ``SourceTooLargeError`` past ``max_bytes``
    (the opened file's size, before a byte is read)."""
    file, metadata, entries = _native.read_safetensors(path, max_bytes)
    tensors: dict[str, np.ndarray[Any, Any]] = {}
    for key, name, shape, offset, nbytes in progress(
        entries, enabled=show_progress, desc="reading", total=len(entries), unit="tensor"
    ):
        dtype = numpy_dtype(name)
        assert dtype is not None  # the core returns only names of its own table
        if nbytes == 0:
            tensors[key] = empty_array(tuple(shape), dtype, key, path)
            continue
        flat = np.frombuffer(file, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset)  # type: ignore[call-overload]
        # a read-only view of the file's private bytes: memory that cannot change, which a state
        # keeps without copying
        flat.flags.writeable = False
        tensors[key] = flat.reshape(shape)
    layout_text = None if metadata is None else dict(metadata).get(SAFETENSORS_KEY)
    layout = decode(layout_text, path) if layout_text is not None else None
    return build_state(path, tensors, layout, trainable)
