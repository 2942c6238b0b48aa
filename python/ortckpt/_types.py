"""The input types of the public API (one definition each): a path, and a checkpoint source."""

import os
from typing import TYPE_CHECKING, TypeAlias, Union

if TYPE_CHECKING:
    from .state import CheckpointState

#: A file system path as the public API takes it: ``str``, ``bytes`` (any file name, also one that
#: is not valid UTF-8) or an ``os.PathLike`` of either. The native module gets it through
#: ``os.fsencode``, so every byte of the name is kept.
StrPath: TypeAlias = str | bytes | os.PathLike[str] | os.PathLike[bytes]


def path_str(path: StrPath) -> str:
    """``path`` as ``str``: non-UTF-8 bytes become surrogate escapes, which ``os.fsencode``
    turns back into the same bytes (how the native module receives every path)."""
    return os.fsdecode(os.fspath(path))


#: A checkpoint as the functions that read one take it (``convert``, the ``to_*`` conversions,
#: ``average``): a loaded state (used as it is), a checkpoint's bytes (validated by the core like
#: a file), or a local path or fsspec URL.
CheckpointSource: TypeAlias = Union["CheckpointState", bytes, bytearray, memoryview, StrPath]
