"""Checkpoints <-> safetensors files (the ``safetensors`` package, ``pip install 'ortckpt[safetensors]'``).

Parameters are stored under their names and momentums under ``_layout.momentum_key``; the rest of
the checkpoint is the JSON layout in the metadata key ``"ortckpt"``. Writing hands safetensors
pointers to the (memory-mapped) tensors, which it streams to disk; reading validates the file with
``safetensors.safe_open`` and then maps each tensor zero-copy.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

from ._atomic import atomic_path
from ._layout import SAFETENSORS_KEY, ConversionError, array_of, build_state, decode, encode, tensors_of
from ._progress import progress
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


def _numpy_dtype(name: str) -> np.dtype[Any]:
    if name in ("bfloat16",) or name.startswith("float8"):
        import ml_dtypes

        dtype: np.dtype[Any] = np.dtype(getattr(ml_dtypes, name))
        return dtype
    return np.dtype(name)


def _safetensors() -> Any:
    try:
        import safetensors
    except ImportError:
        raise ImportError(
            "safetensors files need the 'safetensors' package: pip install 'ortckpt[safetensors]'"
        ) from None
    return safetensors


def write(state: CheckpointState, path: str, *, include_optimizer_state: bool, show_progress: bool) -> None:
    st = _safetensors()
    items, layout = tensors_of(state, include_optimizer_state)
    keep: list[np.ndarray[Any, Any]] = []  # safetensors reads raw pointers: keep the arrays alive
    specs: dict[str, Any] = {}
    supported = ", ".join(sorted(set(_DTYPES.values())))
    for key, provider in progress(
        items, enabled=show_progress, desc="reading", total=len(items), unit="tensor"
    ):
        array = array_of(state, provider)
        if array.dtype == np.dtype(object) or array.dtype.name not in _DTYPES.values():
            what = "string" if array.dtype == np.dtype(object) else array.dtype.name
            raise ConversionError(
                f"tensor {key!r} is {what}: safetensors cannot hold it (it holds {supported}); "
                "convert to .npz instead, which holds every checkpoint dtype"
            )
        if not array.flags.c_contiguous:  # (np.ascontiguousarray would make 0-d arrays 1-d)
            array = array.copy(order="C")
        keep.append(array)
        specs[key] = st.TensorSpec(
            dtype=array.dtype.name, shape=list(array.shape), data_ptr=array.ctypes.data, data_len=array.nbytes
        )
    with atomic_path(path) as tmp:
        st.serialize_file(specs, tmp, metadata={SAFETENSORS_KEY: encode(layout)})
    del keep


def _header(path: str) -> tuple[dict[str, Any], int]:
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header: dict[str, Any] = json.loads(f.read(size))
    return header, 8 + size


def read(path: str, *, trainable: object, show_progress: bool) -> CheckpointState:
    st = _safetensors()
    try:
        # safe_open checks the whole header: offsets in range and contiguous, sizes = shape x dtype
        with st.safe_open(path, framework="np") as f:
            metadata = f.metadata() or {}
            keys = list(f.offset_keys())
    except st.SafetensorError as exc:
        raise ConversionError(f"{path}: not a valid safetensors file: {exc}") from None
    header, data_start = _header(path)
    mapping = np.memmap(path, dtype=np.uint8, mode="r") if keys else None
    tensors: dict[str, np.ndarray[Any, Any]] = {}
    for key in progress(keys, enabled=show_progress, desc="reading", total=len(keys), unit="tensor"):
        info = header[key]
        code = info["dtype"]
        if code not in _DTYPES:
            raise ConversionError(
                f"{path}: tensor {key!r} has safetensors dtype {code}, "
                "which ONNX Runtime checkpoints cannot hold"
            )
        dtype = _numpy_dtype(_DTYPES[code])
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if end == begin:
            tensors[key] = np.zeros(shape, dtype)
            continue
        assert mapping is not None
        tensors[key] = mapping[data_start + begin : data_start + end].view(dtype).reshape(shape)
    layout_text = metadata.get(SAFETENSORS_KEY)
    layout = decode(layout_text, path) if layout_text is not None else None
    return build_state(path, tensors, layout, trainable)
