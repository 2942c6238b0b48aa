"""Loading and saving checkpoints: ``load``, ``load_bytes``, ``save``, ``serialize``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from . import _native
from ._index import state_from_index
from ._spec import build_spec
from .state import CheckpointState

if TYPE_CHECKING:
    from typing_extensions import Buffer

    StrPath = str | os.PathLike[str]

__all__ = ["DEFAULT_EXTERNAL_DATA_THRESHOLD", "external_data_path", "load", "load_bytes", "save", "serialize"]

BYTES_SOURCE = "<bytes>"

#: ORT's default ``external_data_threshold``: 1800 MiB.
DEFAULT_EXTERNAL_DATA_THRESHOLD: int = _native.DEFAULT_EXTERNAL_DATA_THRESHOLD


def _fspath(path: StrPath) -> str:
    return os.fsdecode(os.fspath(path))


def external_data_path(path: StrPath) -> str:
    """ORT's ``ExternalCheckpointDataPath``: the checkpoint path with ``.data`` appended."""
    return os.fspath(_native.external_data_path(_fspath(path)))


def _read(path: str, mmap: bool) -> Buffer:
    if mmap:
        return _native.MappedFile(path)
    with open(path, "rb") as f:
        return f.read()


def load(path: StrPath, *, mmap: bool = True) -> CheckpointState:
    """Load a checkpoint file.

    With ``mmap=True`` (the default) the file is memory-mapped: nothing beyond the flatbuffer
    structure is touched until a tensor's ``.data`` is used, and aligned tensors are zero-copy
    read-only views of the mapping. With ``mmap=False`` the file is read into memory first.

    Raises ``FileNotFoundError``/``OSError`` for I/O failures and ``CheckpointError`` subclasses
    for malformed checkpoints.
    """
    name = _fspath(path)
    data = _read(name, mmap)
    # ORT keeps large tensors in "<path>.data". It is always memory-mapped (lazily paged in), and
    # every external range is checked against its real size before any tensor is used.
    ext_name = external_data_path(name)
    external: Buffer | None = _native.MappedFile(ext_name) if os.path.isfile(ext_name) else None
    index = _native.index_checkpoint(data, name, external, ext_name)
    return state_from_index(index, data, name, external)


def _as_readonly_buffer(data: Buffer) -> Buffer:
    if isinstance(data, bytes):
        return data
    view = memoryview(data)
    if view.readonly and view.c_contiguous:
        return view if view.format == "B" and view.ndim == 1 else view.cast("B")
    # a writable buffer could change under the state: take a private copy
    return view.tobytes()


def load_bytes(data: Buffer, *, external_data: Buffer | None = None) -> CheckpointState:
    """Load a checkpoint from its bytes.

    ``bytes`` and read-only buffers (``memoryview``, ...) are used zero-copy; writable buffers such
    as ``bytearray`` are copied first so later changes cannot alter the state. ``external_data`` is
    the content of the external data file, for checkpoints that have one.
    """
    buffer = _as_readonly_buffer(data)
    ext = None if external_data is None else _as_readonly_buffer(external_data)
    index = _native.index_checkpoint(buffer, BYTES_SOURCE, ext, None)
    return state_from_index(index, buffer, BYTES_SOURCE, ext)


def save(
    state: CheckpointState,
    path: StrPath,
    *,
    include_optimizer_state: bool = True,
    external_data_threshold: int | None = None,
) -> None:
    """Write ``state`` to ``path`` atomically (temporary file, fsync, rename).

    Saving over the file a state was loaded from is safe: the old mapping stays valid. Tensors,
    optimizer states and properties are written sorted by name, in the format version ORT 1.19.2
    writes.

    When the tensor data exceed ``external_data_threshold`` bytes in total, every numeric tensor
    of at least 64 bytes goes to ``external_data_path(path)`` (``<path>.data``), written and
    renamed together with the checkpoint. The default is ORT's 1800 MiB, or 0 for a state loaded
    from a checkpoint with external data (ORT keeps such a checkpoint external).
    """
    if not isinstance(state, CheckpointState):
        raise TypeError(f"expected a CheckpointState, got {type(state).__name__}")
    if external_data_threshold is None:
        external_data_threshold = 0 if state.has_external_data else DEFAULT_EXTERNAL_DATA_THRESHOLD
    if external_data_threshold < 0:
        raise ValueError(f"external_data_threshold must be >= 0, got {external_data_threshold}")
    spec = build_spec(state, include_optimizer_state)
    _native.write_checkpoint(_fspath(path), spec, external_data_threshold)


def serialize(state: CheckpointState, *, include_optimizer_state: bool = True) -> bytes:
    """The bytes ``save`` would write."""
    if not isinstance(state, CheckpointState):
        raise TypeError(f"expected a CheckpointState, got {type(state).__name__}")
    return _native.serialize_checkpoint(build_spec(state, include_optimizer_state))
