"""Load the checkpoint *folder* that ONNX Runtime 1.15 wrote (before the ``ODTC`` flatbuffer).

The core reads the folder (docs/format.md, "The ORT 1.15 checkpoint folder"): it opens only the
folder's regular files, checks the framing of each ``.pbseq`` file while reading it, decodes the
``onnx.TensorProto`` messages itself within a memory budget, and applies the same rules as to a
flatbuffer checkpoint. It hands back an index like a flatbuffer checkpoint's, which ``io`` turns
into a ``CheckpointState`` (version 0) as it does for files; the ``onnx`` package is not needed.
"""

from __future__ import annotations

import errno

from . import _native

__all__ = ["not_a_folder", "read_folder"]


def read_folder(folder: str, max_bytes: int | None = None) -> _native.Index:
    """The index of the checkpoint folder ORT 1.15 wrote (version 0); ``SourceTooLargeError``
    when its checkpoint files hold more than ``max_bytes`` (measured before any is read)."""
    index = _native.read_legacy_folder(folder, max_bytes)
    if index is None:
        raise not_a_folder(folder)
    return index


def not_a_folder(folder: str) -> IsADirectoryError:
    """The error for a directory that holds none of an ORT 1.15 folder's files."""
    # (ORT 1.15 writes an empty state as an empty folder, but an empty or unrelated directory is
    # far more likely a wrong path than such a checkpoint)
    return IsADirectoryError(
        errno.EISDIR,
        "Is a directory, and not an ORT 1.15 checkpoint folder (it has no paramtrain_/paramfrozen_/"
        "optim_/custom_ .pbseq files); checkpoints of later ORT releases are single files",
        folder,
    )
