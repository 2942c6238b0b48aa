"""One rule for "memory that cannot change", shared by loading (``load_bytes`` keeps such input
zero-copy, copies the rest) and states (``from_array`` keeps such arrays zero-copy, copies the
rest): ``_native.is_unchanging``."""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import _native


def _blob() -> bytes:
    return ortckpt.CheckpointState({"w": np.arange(64, dtype=np.float32)}).to_bytes()


def _owned_readonly() -> np.ndarray[Any, Any]:
    array = np.frombuffer(_blob(), dtype=np.uint8).copy()
    array.flags.writeable = False
    return array


def _over_bytearray() -> np.ndarray[Any, Any]:
    array = np.frombuffer(bytearray(_blob()), dtype=np.uint8)
    array.flags.writeable = False
    return array


def test_the_rule(tmp_path: Path) -> None:
    blob = _blob()
    path = tmp_path / "b"
    path.write_bytes(blob)
    with path.open("rb") as f:
        readonly_map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        writable_map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    unchanging = {
        "bytes": blob,
        "view of bytes": memoryview(blob)[8:],
        "array over bytes": np.frombuffer(blob, dtype=np.uint8)[4:].reshape(-1, 4),
        "MappedFile": _native.MappedFile(path),
        "read-only mmap": readonly_map,
        "array over a read-only mmap": np.frombuffer(readonly_map, dtype=np.uint8),
        "read-only array owning its data": _owned_readonly(),
        "np.memmap mode r": np.memmap(path, mode="r", dtype=np.uint8),
    }
    changing = {
        "bytearray": bytearray(blob),
        "read-only view of a bytearray": memoryview(bytearray(blob)).toreadonly(),
        "read-only array over a bytearray": _over_bytearray(),
        "writable array": np.frombuffer(blob, dtype=np.uint8).copy(),
        "read-only view of a writable array": np.arange(4)[1:].view(),
        "writable mmap": writable_map,
    }
    changing["read-only view of a writable array"].flags.writeable = False
    for what, data in unchanging.items():
        assert _native.is_unchanging(data), what
    for what, data in changing.items():
        assert not _native.is_unchanging(data), what
    del unchanging, changing
    readonly_map.close()
    writable_map.close()


@pytest.mark.parametrize("make", [lambda b: b, lambda b: memoryview(b), _owned_readonly])
def test_load_bytes_keeps_unchanging_memory(make: Any) -> None:
    blob = _blob()
    data = make(blob) if make is not _owned_readonly else _owned_readonly()
    w = ortckpt.load_bytes(data).parameters["w"].data
    assert np.shares_memory(w, np.frombuffer(data, dtype=np.uint8)), "unchanging input must not be copied"


def test_load_bytes_copies_memory_that_can_change() -> None:
    blob = _blob()
    base = bytearray(blob)
    w = ortckpt.load_bytes(memoryview(base).toreadonly()).parameters["w"].data
    assert not np.shares_memory(w, np.frombuffer(base, dtype=np.uint8))
    base[:] = bytes(len(base))
    assert np.array_equal(w, np.arange(64, dtype=np.float32))


def test_states_apply_the_same_rule() -> None:
    state = ortckpt.CheckpointState({})
    kept = np.arange(8, dtype=np.float32)
    kept.flags.writeable = False
    state.parameters["kept"] = kept
    assert state.parameters["kept"].data is kept

    base = bytearray(np.arange(8, dtype=np.float32).tobytes())
    view = np.frombuffer(base, dtype=np.float32)
    view.flags.writeable = False
    state.parameters["copied"] = view  # read-only, but its bytearray can still change
    base[:] = bytes(len(base))
    assert np.array_equal(state.parameters["copied"].data, np.arange(8, dtype=np.float32))
