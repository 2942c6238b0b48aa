"""File system paths as the public API takes them (a leaf: it imports nothing of the package, so
every module may use it, ``state`` and the modules below it included)."""

import os
from typing import TypeAlias

#: A file system path as the public API takes it: ``str``, ``bytes`` (any file name, also one that
#: is not valid UTF-8) or an ``os.PathLike`` of either. The native module gets it through
#: ``os.fsencode``, so every byte of the name is kept.
StrPath: TypeAlias = str | bytes | os.PathLike[str] | os.PathLike[bytes]


def path_str(path: StrPath) -> str:
    """``path`` as ``str``: non-UTF-8 bytes become surrogate escapes, which ``os.fsencode``
    turns back into the same bytes (how the native module receives every path)."""
    return os.fsdecode(os.fspath(path))
