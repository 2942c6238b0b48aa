"""save()'s writer options, read back with ortckpt itself (tests/ort/test_ort_writer.py proves the
same files against ORT 1.19.2): format_version, external_momentums, and the streamed layout."""

from __future__ import annotations

import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointError, TensorDataError

W = np.arange(3000, dtype=np.float32).reshape(30, 100)  # 12,000 bytes


def _state() -> ortckpt.CheckpointState:
    group = ortckpt.OptimizerGroup(
        step=3, initial_learning_rate=0.5, states={"w": {"momentum0": W * 2, "momentum1": W * 3}}
    )
    return ortckpt.CheckpointState({"w": W}, frozen={"b": np.arange(40)}, optimizer={"group0": group})


def test_format_version_1_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "v1.ckpt"
    ortckpt.save(_state(), path, format_version=1)
    back = ortckpt.load(path)
    assert back.version == 1
    assert np.array_equal(back.parameters["w"].data, W)
    assert back.optimizer is not None
    assert np.array_equal(back.optimizer["group0"].states["w"]["momentum1"], W * 3)
    assert ortckpt.serialize(_state(), format_version=1) == path.read_bytes()
    # version 1 and 2 differ only in the version field's value
    v1, v2 = ortckpt.serialize(_state(), format_version=1), ortckpt.serialize(_state())
    assert len(v1) == len(v2) and sum(a != b for a, b in zip(v1, v2)) == 1


@pytest.mark.parametrize("version", [0, 3, -1])
def test_other_versions_are_refused(tmp_path: Path, version: int) -> None:
    with pytest.raises(TensorDataError, match=f"format version {version}"):
        ortckpt.save(_state(), tmp_path / "x.ckpt", format_version=version)
    assert not list(tmp_path.iterdir())


def test_version_1_refuses_nominal_states_and_external_data(tmp_path: Path) -> None:
    nominal = ortckpt.serialize(_state())  # a complete state: fine as v1
    assert nominal
    onnx = pytest.importorskip("onnx")
    proto = onnx.numpy_helper.from_array(W, "w")
    ortckpt.save_tensor_protos([proto], [], tmp_path / "n.ckpt", nominal=True)
    with pytest.raises(CheckpointError, match="no nominal flag"):
        ortckpt.save(ortckpt.load(tmp_path / "n.ckpt"), tmp_path / "n1.ckpt", format_version=1)
    with pytest.raises(CheckpointError, match="cannot hold external data"):
        ortckpt.save(_state(), tmp_path / "e.ckpt", format_version=1, external_data_threshold=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n.ckpt"]


@pytest.mark.parametrize("external_momentums", [False, True])
def test_momentums_inline_unless_asked(tmp_path: Path, external_momentums: bool) -> None:
    path = tmp_path / "c.ckpt"
    ortckpt.save(_state(), path, external_data_threshold=0, external_momentums=external_momentums)
    ext = os.path.getsize(ortckpt.external_data_path(path))
    assert ext == (12000 + 320 + 2 * 12000 if external_momentums else 12000 + 320)
    back = ortckpt.load(path)
    assert back.has_external_data and back.optimizer is not None
    assert np.array_equal(back.optimizer["group0"].states["w"]["momentum0"], W * 2)
    assert np.array_equal(back.parameters["b"].data, np.arange(40))


def test_every_dtype_and_layout_round_trips_aligned(tmp_path: Path) -> None:
    """Arrays handed to the writer as they are (builtin numpy types) and through spec_data
    (ml_dtypes, non-native byte order, strings) land at 16-byte aligned offsets with their bytes."""
    params = {
        "f64": np.linspace(0, 1, 7),
        "bf16": np.arange(5).astype(ml_dtypes.bfloat16),
        "f8": np.arange(3).astype(ml_dtypes.float8_e4m3fn),
        "big_endian": np.arange(6, dtype=">i4"),
        "scalar": np.float16(2.5),
        "empty": np.zeros((0, 4), np.int8),
        "strings": np.array(["a", "héllo", ""], dtype=object),
        "bools": np.array([True, False, True]),
    }
    path = tmp_path / "d.ckpt"
    ortckpt.save(ortckpt.CheckpointState(params), path)
    back = ortckpt.load(path)
    for name, value in params.items():
        got = back.parameters[name].data
        assert got.shape == np.shape(value), name
        assert np.array_equal(got.astype(object), np.asarray(value).astype(object)), name
        if got.dtype != object and got.size:
            assert got.ctypes.data % 16 == 0, f"{name} is not aligned in the mapping"


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (0,), (4, 0)])
def test_every_numeric_type_and_shape_round_trips(tmp_path: Path, shape: tuple[int, ...]) -> None:
    from ortckpt import _dtypes

    params = {}
    for code in range(1, 21):
        if code == _dtypes.STRING:
            continue
        dtype = _dtypes.to_numpy(code)
        raw = np.arange(int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8) % 7
        params[f"t{code:02d}"] = raw.view(dtype).reshape(shape)
    path = tmp_path / "all.ckpt"
    ortckpt.save(ortckpt.CheckpointState(params), path)
    back = ortckpt.load(path)
    for name, value in params.items():
        got = back.parameters[name].data
        assert got.dtype == value.dtype and got.shape == shape, name
        assert got.tobytes() == value.tobytes(), name
