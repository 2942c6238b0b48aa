"""Saving a loaded state: the parameters nobody touched cross into native code in one call (the
index hands over the writer's specs for all of them), and the bytes written are the same as when
every parameter goes through its own ``Parameter``."""

from __future__ import annotations

import collections
import os
import pathlib
import types
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import _native, io


class _CountingIndex:
    """The real ``_native.Index``, its method calls counted."""

    def __init__(self, index: _native.Index, calls: collections.Counter[str]) -> None:
        self._index = index
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._index, name)
        if not callable(attr):
            return attr
        calls = self._calls

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[f"Index.{name}"] += 1
            return attr(*args, **kwargs)

        return counted


def _count_native_calls(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Counts every call of a ``_native`` function and of a loaded ``Index``'s methods."""
    calls: collections.Counter[str] = collections.Counter()
    for name in dir(_native):
        func = getattr(_native, name)
        if not isinstance(func, types.BuiltinFunctionType):
            continue

        def counted(*args: Any, _func: Any = func, _name: str = name, **kwargs: Any) -> Any:
            calls[_name] += 1
            result = _func(*args, **kwargs)
            return _CountingIndex(result, calls) if _name == "load_checkpoint" else result

        monkeypatch.setattr(_native, name, counted)
    return calls


def _checkpoint(path: pathlib.Path, count: int) -> bytes:
    rng = np.random.default_rng(34)
    params = {f"p{i:04d}": rng.standard_normal(16 + i % 5).astype(np.float32) for i in range(count - 3)}
    frozen = {
        "frozen_i64": np.arange(4, dtype=np.int64),
        "frozen_f16": np.ones((2, 2), np.float16),
        "vocab": np.array(["a", "bc"], dtype=object),
    }
    state = ortckpt.CheckpointState(params, frozen=frozen, properties={"step": 3})
    state.parameters["p0001"].doc_string = "documented"
    io.save(state, path)
    return path.read_bytes()


@pytest.mark.parametrize("external", [False, True])
def test_saving_1000_untouched_tensors_is_one_native_call(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, external: bool
) -> None:
    source = tmp_path / "source.ckpt"
    original = _checkpoint(source, 1000)
    if external:  # the same tensors with their values in ext.ckpt.data
        io.save(io.load(source), tmp_path / "ext.ckpt", external_data_threshold=1)
        source = tmp_path / "ext.ckpt"
        assert os.path.exists(f"{source}.data")
    # what saving gives when every parameter has its Parameter (the per-tensor path)
    touched = io.load(source)
    assert len(touched.parameters) == 1000
    for name in touched.parameters:
        touched.parameters[name].data  # noqa: B018 - made and read, so the state holds it
    expected = touched.to_bytes()
    if not external:
        assert expected == original  # a re-save writes the file it read, byte for byte

    calls = _count_native_calls(monkeypatch)
    state = io.load(source)
    calls.clear()
    assert state.to_bytes() == expected
    # one call hands over every parameter; one serializes (it was 2 per tensor: 2,002)
    assert calls == {"Index.parameter_specs": 1, "serialize_checkpoint": 1}, calls

    calls.clear()
    io.save(state, tmp_path / "again.ckpt")
    assert calls["Index.parameter_specs"] == 1 and calls["save_checkpoint"] == 1, calls
    assert sum(calls.values()) <= 4, calls  # and a few calls for the path, none per tensor
    monkeypatch.undo()
    assert io.load(tmp_path / "again.ckpt").to_bytes() == expected


def test_touched_edited_and_removed_parameters_keep_their_own_path(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "source.ckpt"
    _checkpoint(source, 50)
    state = io.load(source)
    del state.parameters["p0002"]
    state.parameters["p0003"] = np.zeros(2, np.float64)
    state.parameters["new"] = np.ones(1, np.int8)
    state.parameters["p0004"].data  # noqa: B018
    back = io.load_bytes(state.to_bytes())
    assert "p0002" not in back.parameters and back.parameters["new"].data.tolist() == [1]
    assert back.parameters["p0003"].data.dtype == np.float64
    assert back.parameters["p0001"].doc_string == "documented"
    assert list(back.parameters["vocab"].data) == ["a", "bc"]
    assert not back.parameters["frozen_i64"].trainable and back.parameters["p0010"].trainable
    assert len(back.parameters) == len(state.parameters) == 50


def test_a_loaded_state_s_untouched_momentums_are_one_native_call(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saving a loaded state with its optimizer state: the momentums' files are checked in one
    call (``Index.prepare_momentums``), not one ``prepare`` per momentum; the bytes are those of
    the per-tensor path, inline and in ``.data``; a momentum replaced in memory keeps its own."""
    rng = np.random.default_rng(7)
    params = {f"p{i:03d}": rng.standard_normal(8).astype(np.float32) for i in range(300)}
    states = {n: {"momentum0": v * 2, "momentum1": v * 3} for n, v in params.items()}
    group = ortckpt.OptimizerGroup(step=5, initial_learning_rate=0.01, states=states)
    source = tmp_path / "source.ckpt"
    io.save(ortckpt.CheckpointState(params, optimizer={"g": group}), source)
    io.save(io.load(source), tmp_path / "ext.ckpt", external_data_threshold=1, external_momentums=True)
    for path in (source, tmp_path / "ext.ckpt"):
        touched = io.load(path)
        for moms in touched.optimizer["g"].states.values():
            for name in list(moms):
                moms[name] = np.array(moms[name])  # held in memory: the per-tensor path
        expected = touched.to_bytes(include_optimizer_state=True)
        calls = _count_native_calls(monkeypatch)
        state = io.load(path)
        calls.clear()
        assert state.to_bytes(include_optimizer_state=True) == expected
        assert calls == {
            "Index.parameter_specs": 1,
            "Index.prepare_momentums": 1,
            "serialize_checkpoint": 1,
        }, calls
        monkeypatch.undo()
    state = io.load(source)
    state.optimizer["g"].states["p007"]["momentum0"] = np.full(8, 9, np.float32)
    back = io.load_bytes(state.to_bytes(include_optimizer_state=True))
    assert back.optimizer["g"].states["p007"]["momentum0"].tolist() == [9.0] * 8
    assert back.optimizer["g"].states["p008"]["momentum1"].tolist() == (params["p008"] * 3).tolist()
