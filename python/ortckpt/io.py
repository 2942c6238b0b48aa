"""Loading and saving checkpoints: ``load``, ``load_bytes``, ``save``, ``serialize``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Union

from . import _index, _native
from ._spec import build_spec
from .state import CheckpointState

if TYPE_CHECKING:
    from typing_extensions import Buffer

    StrPath = Union[str, os.PathLike[str]]

__all__ = ["DEFAULT_EXTERNAL_DATA_THRESHOLD", "external_data_path", "load", "load_bytes", "save", "serialize"]

BYTES_SOURCE = "<bytes>"

#: ORT's default ``external_data_threshold``: 1800 MiB.
DEFAULT_EXTERNAL_DATA_THRESHOLD: int = _native.DEFAULT_EXTERNAL_DATA_THRESHOLD


def _fspath(path: StrPath) -> str:
    return os.fsdecode(os.fspath(path))


def external_data_path(path: StrPath) -> str:
    """ORT's ``ExternalCheckpointDataPath``: the checkpoint path with ``.data`` appended."""
    return os.fspath(_native.external_data_path(_fspath(path)))


def _read(path: str, mmap: bool) -> bytes | _native.MappedFile:
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
    external = _native.MappedFile(ext_name) if os.path.isfile(ext_name) else None
    return _state(_native.index_checkpoint(data, name, external, ext_name))


def _state(index: _native.Index) -> CheckpointState:
    return CheckpointState._from_loaded(
        version=index.version,
        is_nominal=index.is_nominal,
        has_external_data=index.has_external_data,
        params=_index.parameters(index),
        optimizer=_index.optimizer_groups(index),
        properties=_index.properties(index),
        source=index.source,
    )


def _immutable(data: Buffer) -> bytes | _native.MappedFile:
    """``data`` itself when nothing can change it while the state lives (``bytes``, ortckpt's own
    read-only mapping), else a private copy taken now, with the GIL held: a read-only view of
    writable memory (``memoryview(bytearray).toreadonly()``, a non-writeable numpy array over a
    writable base) can still change under the state."""
    if isinstance(data, (bytes, _native.MappedFile)):
        return data
    view = memoryview(data)
    whole = view.obj if isinstance(view.obj, (bytes, _native.MappedFile)) else None
    if whole is not None and view.c_contiguous and view.nbytes == memoryview(whole).nbytes:
        return whole  # a view of all of an immutable buffer: use the buffer itself
    return view.tobytes()


def load_bytes(data: Buffer, *, external_data: Buffer | None = None) -> CheckpointState:
    """Load a checkpoint from its bytes.

    ``bytes`` are used zero-copy; any other buffer (``bytearray``, ``memoryview``, numpy arrays,
    even read-only views) is copied first, since the memory behind it could still change and the
    state must not. ``external_data`` is
    the content of the external data file, for checkpoints that have one.
    """
    buffer = _immutable(data)
    ext = None if external_data is None else _immutable(external_data)
    return _state(_native.index_checkpoint(buffer, BYTES_SOURCE, ext, None))


def save(
    state: CheckpointState,
    path: StrPath,
    *,
    include_optimizer_state: bool = True,
    external_data_threshold: int | None = None,
    external_momentums: bool = False,
    format_version: int = 2,
) -> None:
    """Write ``state`` to ``path`` atomically (temporary file, fsync, rename).

    Saving over the file a state was loaded from is safe: the old mapping stays valid. Tensors,
    optimizer states and properties are written sorted by name. Tensor bytes are streamed from
    the state's arrays to the file, never copied into one big buffer, so a save needs little
    memory beyond the state itself.

    When the tensor data exceed ``external_data_threshold`` bytes in total, every numeric
    parameter of at least 64 bytes goes to ``external_data_path(path)`` (``<path>.data``), written
    and renamed together with the checkpoint. The default is ORT's 1800 MiB, or 0 for a state
    loaded from a checkpoint with external data (ORT keeps such a checkpoint external). Optimizer
    momentums stay in the checkpoint, as ORT keeps them, unless ``external_momentums=True`` (for
    optimizer state too large for the 2 GiB a checkpoint file can hold; ORT loads either).

    ``format_version`` 2 is what ORT 1.18 and later read; 1 is for ORT 1.16-1.17 (not for
    nominal states or external data, which version 1 cannot express).
    """
    if not isinstance(state, CheckpointState):
        raise TypeError(f"expected a CheckpointState, got {type(state).__name__}")
    if external_data_threshold is None:
        external_data_threshold = 0 if state.has_external_data else DEFAULT_EXTERNAL_DATA_THRESHOLD
    if external_data_threshold < 0:
        raise ValueError(f"external_data_threshold must be >= 0, got {external_data_threshold}")
    spec = build_spec(state, include_optimizer_state, format_version)
    _native.save_checkpoint(_fspath(path), spec, external_data_threshold, bool(external_momentums))


def serialize(
    state: CheckpointState, *, include_optimizer_state: bool = True, format_version: int = 2
) -> bytes:
    """The bytes ``save`` would write, every tensor inline (``format_version`` as in ``save``)."""
    if not isinstance(state, CheckpointState):
        raise TypeError(f"expected a CheckpointState, got {type(state).__name__}")
    return _native.serialize_checkpoint(build_spec(state, include_optimizer_state, format_version))
