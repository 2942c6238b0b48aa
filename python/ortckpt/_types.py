"""A checkpoint as the functions that read one take it. It names ``CheckpointState``, so only
modules above ``state`` use it; paths are ``_paths``' (below everything)."""

from typing import TYPE_CHECKING, TypeAlias, Union

from ._paths import StrPath

if TYPE_CHECKING:
    from .state import CheckpointState

#: A checkpoint as the functions that read one take it (``convert``, the ``to_*`` conversions,
#: ``average``): a loaded state (used as it is), a checkpoint's bytes (validated by the core like
#: a file), or a local path or fsspec URL.
CheckpointSource: TypeAlias = Union["CheckpointState", bytes, bytearray, memoryview, StrPath]
