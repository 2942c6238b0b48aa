"""Loading and saving checkpoints: ``load``, ``load_bytes``, ``save``, ``serialize``, ``recover``.

The file protocol (crash-consistent saves, loads that never mix two saves, special files) lives
in the Rust core; see docs/format.md, "Crash consistency".
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal, cast

from . import _native, _persist
from ._paths import StrPath
from .state import CheckpointState

if TYPE_CHECKING:
    from typing_extensions import Buffer


__all__ = [
    "DEFAULT_EXTERNAL_DATA_THRESHOLD",
    "external_data_path",
    "load",
    "load_bytes",
    "recover",
    "save",
    "serialize",
]

# (re-exported: the public names and the helpers other modules take from io)
BYTES_SOURCE = _persist.BYTES_SOURCE
DEFAULT_EXTERNAL_DATA_THRESHOLD: int = _persist.DEFAULT_EXTERNAL_DATA_THRESHOLD
check_threshold = _persist.check_threshold


def external_data_path(path: StrPath) -> str:
    """ORT's ``ExternalCheckpointDataPath``: the checkpoint path with ``.data`` appended."""
    return os.fsdecode(_native.external_data_path(path))


def load(path: StrPath, *, mmap: bool = True) -> CheckpointState:
    """Load a checkpoint file (and its external data file ``<path>.data`` when it has one), or the
    checkpoint folder ORT 1.15 wrote.

    With ``mmap=True`` (the default) both files are memory-mapped: nothing beyond the flatbuffer
    structure is touched until a tensor's ``.data`` is used, and aligned tensors are zero-copy
    read-only views of the mapping. A mapping shows later changes of the file: if another program
    rewrites the file in place (ONNX Runtime's ``save_checkpoint`` does), using a tensor not used
    before raises ``CheckpointChangedError``, and values already handed out may change or, for a
    truncated file, crash the process with SIGBUS (see README, "Guarantees").

    With ``mmap=False`` both files are read fully into private memory before ``load`` returns
    (Ctrl-C interrupts the read): nothing another program does to the files afterwards can affect
    the state. Use it when another program may rewrite the checkpoint.

    The two files are opened as one consistent pair: a load that overlaps a save returns the old
    or the new checkpoint, never a mix. Raises ``InterruptedSaveError`` when a crashed save left
    the files mixed (``recover`` settles it), ``FileNotFoundError``/``OSError`` for I/O failures
    and for paths that are not regular files (FIFOs, devices: refused without blocking), and
    ``CheckpointError`` subclasses for malformed checkpoints.
    """
    return CheckpointState._from_index(_persist.open_index(path, mmap))


Recovery = Literal["clean", "leftovers", "new", "old"]


def recover(path: StrPath) -> Recovery:
    """Settle interrupted saves of the checkpoint ``path`` and remove the files they left.

    A save killed in the middle (crash, power loss, SIGKILL) leaves a journal beside the
    checkpoint; ``recover`` completes that save when all its new files are still there (the usual
    case) or restores the checkpoint from before it, then removes every temporary, backup and
    journal file of interrupted saves. It waits for a save that is still running. Returns:

    * ``"clean"``: nothing was interrupted, nothing left over;
    * ``"leftovers"``: nothing was interrupted; files of dead saves were removed;
    * ``"new"``: an interrupted save was completed;
    * ``"old"``: an interrupted save was undone (the checkpoint is absent if there was none).

    The next ``save`` of the same path does the same first, so calling this is only needed to
    load a checkpoint for which ``load`` raised ``InterruptedSaveError``.
    """
    return cast("Recovery", _native.recover(path))


def load_bytes(data: Buffer, *, external_data: Buffer | None = None) -> CheckpointState:
    """Load a checkpoint from its bytes.

    Memory that cannot change is used zero-copy: ``bytes``, a read-only ``mmap``, read-only numpy
    arrays that own their data, and read-only views of those. Any other buffer (``bytearray``, a
    read-only ``memoryview`` or array over writable memory, ...) is copied first, since the state
    must not change with it, and so is a strided buffer (a non-contiguous view). ``external_data``
    is the content of the external data file, for checkpoints that have one.
    """
    data, external_data = _contiguous(data), None if external_data is None else _contiguous(external_data)
    return CheckpointState._from_index(_native.index_checkpoint(data, BYTES_SOURCE, external_data, None))


def _contiguous(data: Buffer) -> Buffer:
    """``data``, or a copy of its bytes in order when it is a strided view (which the native
    reader, taking one contiguous block, would refuse with a ValueError)."""
    if isinstance(data, bytes):
        return data
    view = memoryview(data)
    return data if view.c_contiguous else view.tobytes()


def save(
    state: CheckpointState,
    path: StrPath,
    *,
    include_optimizer_state: bool = True,
    external_data_threshold: int | None = None,
    external_momentums: bool = False,
    format_version: int = 2,
) -> None:
    """Write ``state`` to ``path`` crash-consistently.

    The new files are written under temporary names and synced; a journal, backups of the old
    files and renames then replace ``path`` (and ``<path>.data``) so that after a crash at any
    point ``load`` gives the old or the new checkpoint, or raises ``InterruptedSaveError`` until
    ``recover`` is run (see docs/format.md, "Crash consistency"). Concurrent saves of one path
    take turns. A symlink is followed (its target is replaced); a replaced file keeps its
    permissions; an existing target that is not a regular file (``/dev/null``, a FIFO, a socket, a
    device) is refused with ``OSError``.

    Saving over the file a state was loaded from is safe: the old mapping stays valid. Tensors,
    optimizer states and properties are written sorted by name. Tensor bytes are streamed from
    the state's arrays to the file, never copied into one big buffer, so a save needs little
    memory beyond the state itself.

    When the tensor data exceed ``external_data_threshold`` bytes in total, every numeric
    parameter of at least 64 bytes goes to ``external_data_path(path)`` (``<path>.data``), written
    and committed together with the checkpoint; a checkpoint saved inline removes a stale
    ``<path>.data``. The default is ORT's 1800 MiB, or 0 for a state loaded from a checkpoint with
    external data (ORT keeps such a checkpoint external). Optimizer momentums stay in the
    checkpoint, as ORT keeps them, unless ``external_momentums=True`` (for optimizer state too
    large for the 2 GiB a checkpoint file can hold; ORT loads either).

    ``format_version`` 2 is what ORT 1.18 and later read; 1 is for ORT 1.16-1.17 (not for
    nominal states or external data, which version 1 cannot express).
    """
    if not isinstance(state, CheckpointState):
        raise TypeError(f"expected a CheckpointState, got {type(state).__name__}")
    _persist.save_state(
        state,
        path,
        include_optimizer_state=include_optimizer_state,
        external_data_threshold=external_data_threshold,
        external_momentums=external_momentums,
        format_version=format_version,
    )


def serialize(
    state: CheckpointState, *, include_optimizer_state: bool = True, format_version: int = 2
) -> bytes:
    """The bytes ``save`` would write, every tensor inline (``format_version`` as in ``save``)."""
    if not isinstance(state, CheckpointState):
        raise TypeError(f"expected a CheckpointState, got {type(state).__name__}")
    return _persist.serialize_state(
        state, include_optimizer_state=include_optimizer_state, format_version=format_version
    )
