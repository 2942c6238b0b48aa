"""What ``io`` and ``CheckpointState``'s own methods share: opening a checkpoint into the core's
index, and writing a state through the core. It never imports ``state`` (a state is a
``_state_view.StateView`` here), so ``state`` can use it and ``io`` builds on both: imports run one
way (no cycle).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from . import _native
from ._paths import StrPath, path_str
from ._spec import build_spec

if TYPE_CHECKING:
    from ._state_view import StateView

#: The source name of a checkpoint given as bytes, in messages.
BYTES_SOURCE = "<bytes>"

#: ORT's default ``external_data_threshold``: 1800 MiB.
DEFAULT_EXTERNAL_DATA_THRESHOLD: int = _native.DEFAULT_EXTERNAL_DATA_THRESHOLD


def check_threshold(value: object) -> int:
    """An ``external_data_threshold`` argument, validated: a non-negative int (numpy ints too)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"external_data_threshold must be an int, got {type(value).__name__}: {value!r}")
    result = int(value)
    if result < 0:
        raise ValueError(f"external_data_threshold must not be negative, got {result}")
    return result


def open_index(path: StrPath, mmap: bool, max_bytes: int | None = None) -> _native.Index:
    """The verified index of the checkpoint file at ``path`` (with its ``.data``), or of the
    checkpoint folder ORT 1.15 wrote (see ``io.load``). ``max_bytes``: ``SourceTooLargeError``
    when the opened files (the checkpoint and the ``.data`` the core opens with it, or the
    folder's checkpoint files) hold more, before a byte is read."""
    name = path_str(path)
    if os.path.isdir(name):
        # ORT 1.15 wrote a checkpoint as a folder of .pbseq files
        from ._legacy import read_folder

        return read_folder(name, max_bytes)
    # The core opens both files as one pair and checks every external range against the
    # external file's real size before any tensor is used.
    return _native.load_checkpoint(path, name, mmap, max_bytes)


def save_state(
    state: StateView,
    path: StrPath,
    *,
    include_optimizer_state: bool,
    external_data_threshold: int | None,
    external_momentums: bool,
    format_version: int,
) -> None:
    """``io.save`` once its arguments are known to be a state and options."""
    if external_data_threshold is None:
        external_data_threshold = 0 if state.has_external_data else DEFAULT_EXTERNAL_DATA_THRESHOLD
    threshold = check_threshold(external_data_threshold)
    spec = build_spec(state, include_optimizer_state, format_version)
    _native.save_checkpoint(path, spec, threshold, bool(external_momentums))


def serialize_state(state: StateView, *, include_optimizer_state: bool, format_version: int) -> bytes:
    """``io.serialize`` once its argument is known to be a state."""
    return _native.serialize_checkpoint(build_spec(state, include_optimizer_state, format_version))
