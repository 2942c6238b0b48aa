"""Type aliases shared by the package (one definition each)."""

import os
from typing import TypeAlias

#: A file system path as the public API takes it: ``str``, ``bytes`` (any file name, also one that
#: is not valid UTF-8) or an ``os.PathLike`` of either. The native module gets it through
#: ``os.fsencode``, so every byte of the name is kept.
StrPath: TypeAlias = str | bytes | os.PathLike[str] | os.PathLike[bytes]
