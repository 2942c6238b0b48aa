"""ONNX Runtime adapter files (``.onnx_adapter``, ORT >= 1.20): the Multi-LoRA format ORT,
onnxruntime-web and onnxruntime-genai load to swap weights of a deployed model per request
(``RunOptions.add_active_adapter``). The format lives in the Rust core (reader and writer); this
module converts between adapters and :class:`CheckpointState`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Any

import numpy as np

from .. import _atomic, _dtypes, _native
from .._paths import StrPath, path_str
from .._sources import open_state
from ..state import CheckpointState

__all__ = ["ADAPTER_VERSION_PROPERTY", "MODEL_VERSION_PROPERTY", "from_adapter", "to_adapter"]

#: The properties ``from_adapter`` keeps an adapter's two version numbers in (``to_adapter``
#: writes them back when not given).
ADAPTER_VERSION_PROPERTY = "adapter_version"
MODEL_VERSION_PROPERTY = "model_version"

_Source = CheckpointState | bytes | bytearray | memoryview | StrPath


def _selected(state: CheckpointState, parameters: str | Iterable[str] | None) -> list[str]:
    """The names to export, in the state's order: all, those matching a glob, or a list (each of
    which must exist)."""
    names = list(state.parameters)
    if parameters is None:
        return names
    if isinstance(parameters, str):
        chosen = [n for n in names if fnmatch.fnmatchcase(n, parameters)]
        if not chosen:
            raise ValueError(f"no parameter matches {parameters!r} (the checkpoint has {len(names)})")
        return chosen
    wanted = list(parameters)
    missing = [n for n in wanted if n not in state.parameters]
    if missing:
        raise ValueError(f"the checkpoint has no parameter {missing[0]!r}")
    return wanted


def _version(value: int | None, state: CheckpointState, prop: str) -> int:
    if value is None:
        stored = state.properties.get(prop, 0)
        value = stored if isinstance(stored, int) else 0
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not -(2**31) <= value < 2**31:
        raise ValueError(f"{prop} must be an int32, got {value!r}")
    return int(value)


def _little_endian_bytes(array: np.ndarray[Any, Any]) -> memoryview:
    array = np.ascontiguousarray(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array.reshape(-1).view(np.uint8).data


def _serialize(
    state_or_path: _Source,
    parameters: str | Iterable[str] | None,
    adapter_version: int | None,
    model_version: int | None,
) -> tuple[bytes, list[str]]:
    """The bytes of the adapter file ``to_adapter`` writes, and the names in it."""
    state = open_state(state_or_path)
    if state.is_nominal:
        raise ValueError("a nominal checkpoint has no values to put in an adapter")
    entries = []
    for name in _selected(state, parameters):
        param = state.parameters[name]
        # Strings have no raw bytes: the core refuses them, with the reason, from the type alone.
        values = b"" if param.data_type == _dtypes.STRING else _little_endian_bytes(param.data)
        entries.append((name, param.data_type, list(param.shape), values))
    data = _native.serialize_adapter(
        entries,
        _version(adapter_version, state, ADAPTER_VERSION_PROPERTY),
        _version(model_version, state, MODEL_VERSION_PROPERTY),
    )
    return data, [name for name, *_ in entries]


def to_adapter(
    state_or_path: _Source,
    out: StrPath,
    *,
    parameters: str | Iterable[str] | None = None,
    adapter_version: int | None = None,
    model_version: int | None = None,
) -> list[str]:
    """Write the parameters of a checkpoint (a state, its bytes, or a path) as an ORT adapter file
    ``out`` (replaced atomically) and return the names written.

    ``parameters``: a glob (``"*lora*"``) or a list of names; all parameters by default.
    ``adapter_version`` / ``model_version``: int32 numbers ORT stores for you; by default the
    state's ``adapter_version`` / ``model_version`` properties (set by ``from_adapter``), else 0.
    """
    data, names = _serialize(state_or_path, parameters, adapter_version, model_version)
    with _atomic.atomic_file(path_str(out)) as f:
        f.write(data)
    return names


def from_adapter(path: StrPath | bytes | bytearray | memoryview) -> CheckpointState:
    """Read an ORT adapter file (a path, or its bytes) into a state: its parameters (trainable),
    and its version numbers in the properties ``adapter_version`` and ``model_version``.
    Malformed files raise ``InvalidCheckpointError`` (or another ``CheckpointError``); nothing of
    a file is trusted before the core has checked it.

    Lazy, as ``load(path, mmap=False)``: a file is read into private memory once and indexed by the
    core; each parameter's values are a view of those bytes, made when first used (``bytes`` are
    used in place; other buffers are copied first). Memory is the file plus the core's compact
    index, never a copy per tensor; an allocation the input calls for that fails raises
    ``MemoryError``."""
    if isinstance(path, (bytes, bytearray, memoryview)):
        _format, adapter_version, model_version, index = _native.read_adapter_bytes(path, "<bytes>")
    else:
        _format, adapter_version, model_version, index = _native.read_adapter(path)
    state = CheckpointState._from_index(index)
    state.properties[ADAPTER_VERSION_PROPERTY] = adapter_version
    state.properties[MODEL_VERSION_PROPERTY] = model_version
    return state
