"""``CheckpointState.to_numpy()``: every parameter's values in one pass, equal to ``.data`` one by
one, for every way a state comes to be (mapped, read into memory, from bytes, built in memory,
edited after loading), and the checks of first use still made (file changed, stored lengths)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointChangedError, CheckpointError, CheckpointState, Parameter

Arrays = dict[str, np.ndarray[Any, Any]]


def one_by_one(state: CheckpointState) -> Arrays:
    return {name: param.data for name, param in state.parameters.items()}


def assert_same_arrays(found: Arrays, expected: Arrays) -> None:
    assert list(found) == list(expected)  # same names, same (sorted) order
    for name, array in expected.items():
        got = found[name]
        assert got.dtype == array.dtype and got.shape == array.shape, name
        if array.dtype == np.dtype(object):
            assert got.tolist() == array.tolist(), name
        else:
            assert got.tobytes() == array.tobytes(), name
        assert not got.flags.writeable, name


def loaded_states(path: Path) -> dict[str, CheckpointState]:
    return {
        "mmap": ortckpt.load(path),
        "read": ortckpt.load(path, mmap=False),
        "bytes": ortckpt.load_bytes(path.read_bytes()),
    }


def test_every_dtype_and_shape(tmp_path: Path, dtype_arrays: Arrays) -> None:
    target = tmp_path / "all.ckpt"
    ortckpt.save(CheckpointState(dtype_arrays, frozen={"zz.frozen": np.arange(5, dtype=np.int64)}), target)
    expected = one_by_one(ortckpt.load(target))
    assert sorted(expected) == list(expected) and "zz.frozen" in expected
    for how, state in loaded_states(target).items():
        found = state.to_numpy()
        assert_same_arrays(found, expected)
        if how == "mmap":
            # zero-copy: the same kind of view `.data` gives (not a copy of it)
            big = max(found, key=lambda n: found[n].nbytes)
            assert found[big].base is not None, how


def test_external_data(tmp_path: Path) -> None:
    arrays = {f"w{i}": np.full((64, 64), i, np.float32) for i in range(3)}
    target = tmp_path / "ext.ckpt"
    state = CheckpointState(arrays, frozen={"b": np.ones(3, np.float32)})
    ortckpt.save(state, target, external_data_threshold=0)
    assert os.path.exists(f"{target}.data")
    for state in (ortckpt.load(target), ortckpt.load(target, mmap=False)):
        assert state.has_external_data
        found = state.to_numpy()
        assert_same_arrays(found, one_by_one(ortckpt.load(target)))
        np.testing.assert_array_equal(found["w2"], arrays["w2"])


def test_corpus_files_agree_with_data(corpus_case: Path) -> None:
    state = ortckpt.load(corpus_case)
    if state.is_nominal:
        with pytest.raises(CheckpointError, match="nominal"):
            state.to_numpy()
        return
    expected = one_by_one(ortckpt.load(corpus_case))
    for state in (ortckpt.load(corpus_case), ortckpt.load(corpus_case, mmap=False)):
        assert_same_arrays(state.to_numpy(), expected)


def test_edits_after_loading_are_seen(tmp_path: Path) -> None:
    target = tmp_path / "e.ckpt"
    ortckpt.save(CheckpointState({n: np.full(4, i, np.float32) for i, n in enumerate("abcd")}), target)
    state = ortckpt.load(target)
    _ = state.parameters["b"].data  # asked for: now a Parameter of its own
    state.parameters["c"] = np.zeros(2, np.float64)  # replaced, new dtype and shape
    del state.parameters["a"]
    state.parameters["0new"] = Parameter("0new", np.arange(3, dtype=np.int32), trainable=False)
    found = state.to_numpy()
    assert list(found) == ["0new", "b", "c", "d"]
    assert found["c"].dtype == np.float64 and found["c"].shape == (2,)
    assert_same_arrays(found, one_by_one(state))


def test_states_built_in_memory() -> None:
    state = CheckpointState({"w": np.ones((2, 3), np.float32)}, frozen={"a": np.zeros(1, np.int8)})
    found = state.to_numpy()
    assert list(found) == ["a", "w"]
    assert_same_arrays(found, one_by_one(state))
    assert CheckpointState().to_numpy() == {}


def test_a_file_rewritten_in_place_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "r.ckpt"
    ortckpt.save(CheckpointState({"w": np.ones(1000, np.float32)}), target)
    state = ortckpt.load(target)
    safe = ortckpt.load(target, mmap=False)
    with open(target, "r+b") as f:  # what ORT's save_checkpoint does: rewrite in place
        f.write(f.read() + b"\0" * 8)
    with pytest.raises(CheckpointChangedError, match=str(target)):
        state.to_numpy()
    np.testing.assert_array_equal(safe.to_numpy()["w"], np.ones(1000, np.float32))


def test_many_tensors_in_one_pass(tmp_path: Path) -> None:
    arrays = {f"t{i:05d}": np.full(3, i, np.float32) for i in range(5000)}
    target = tmp_path / "many.ckpt"
    ortckpt.save(CheckpointState(arrays), target)
    found = ortckpt.load(target, mmap=False).to_numpy()
    assert list(found) == sorted(arrays)
    assert all(found[n][0] == i for i, n in enumerate(sorted(arrays)))
