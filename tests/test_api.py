"""The typed Python API: building, saving, loading, editing, zero-copy behaviour and errors."""

from __future__ import annotations

import gc
import math
import os
import pathlib
import re
import sys
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import (
    CheckpointError,
    CheckpointState,
    DuplicateNameError,
    ExternalDataError,
    InvalidCheckpointError,
    OptimizerGroup,
    Parameter,
    PropertyBag,
    TensorDataError,
    _dtypes,
    _native,
)

Comparer = Callable[..., None]
Raw = Callable[[np.ndarray[Any, Any]], "bytes | list[str]"]
Arrays = dict[str, np.ndarray[Any, Any]]


def _base_chain(arr: np.ndarray[Any, Any]) -> list[object]:
    chain: list[object] = []
    obj: object = arr
    while isinstance(obj, np.ndarray) and obj.base is not None:
        obj = obj.base
        chain.append(obj)
    if isinstance(obj, memoryview):
        chain.append(obj.obj)
    return chain


def _roundtrips(state: CheckpointState, tmp_path: pathlib.Path) -> dict[str, CheckpointState]:
    path = tmp_path / "rt.ckpt"
    state.save(path)
    return {
        "mmap": ortckpt.load(path),
        "read": ortckpt.load(path, mmap=False),
        "bytes": ortckpt.load_bytes(ortckpt.serialize(state)),
        "bytes_of_file": ortckpt.load_bytes(path.read_bytes()),
    }


# -- dtypes ---------------------------------------------------------------------------------------


EXPECTED_DTYPES: dict[int, object] = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    4: np.uint16,
    5: np.int16,
    6: np.int32,
    7: np.int64,
    8: object,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
    12: np.uint32,
    13: np.uint64,
    14: np.complex64,
    15: np.complex128,
    16: ml_dtypes.bfloat16,
    17: ml_dtypes.float8_e4m3fn,
    18: ml_dtypes.float8_e4m3fnuz,
    19: ml_dtypes.float8_e5m2,
    20: ml_dtypes.float8_e5m2fnuz,
}


@pytest.mark.parametrize("code", sorted(EXPECTED_DTYPES))
def test_dtype_table(code: int) -> None:
    dtype = np.dtype(EXPECTED_DTYPES[code])  # type: ignore[call-overload]
    assert _dtypes.to_numpy(code) == dtype
    assert _dtypes.from_numpy(dtype, "t") == code
    if dtype.kind != "O":
        assert _dtypes.to_numpy(code).byteorder in ("<", "|", "=")
        assert _dtypes.element_size(code) == dtype.itemsize
        assert _dtypes.from_numpy(dtype.newbyteorder(">"), "t") == code


def test_dtype_table_is_complete() -> None:
    assert set(_dtypes.DATA_TYPES) == set(range(1, 21))
    with pytest.raises(ValueError, match="unknown"):
        _dtypes.to_numpy(0)
    with pytest.raises(ValueError, match="unknown"):
        _dtypes.to_numpy(21)


@pytest.mark.parametrize("dtype", ["<U5", ">U5", "O"])
def test_string_dtypes_map_to_string(dtype: str) -> None:
    assert _dtypes.from_numpy(np.dtype(dtype), "t") == _dtypes.STRING


@pytest.mark.parametrize(
    "value",
    [
        np.zeros(2, dtype="S3"),
        np.zeros(2, dtype="datetime64[s]"),
        np.zeros(2, dtype="timedelta64[s]"),
        np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]),
        np.zeros(2, dtype="V4"),
        np.zeros(2, dtype=np.longdouble) if np.dtype(np.longdouble).itemsize > 8 else np.zeros(2, "S1"),
        np.zeros(2, dtype=ml_dtypes.int4),
        np.zeros(2, dtype=ml_dtypes.float4_e2m1fn),
    ],
    ids=["bytes", "datetime", "timedelta", "struct", "void", "longdouble", "int4", "float4"],
)
def test_unsupported_dtype_is_type_error_naming_tensor(value: np.ndarray[Any, Any]) -> None:
    with pytest.raises(TypeError, match=re.escape("my.tensor")):
        CheckpointState({"my.tensor": value})


def test_object_array_of_non_str_is_type_error() -> None:
    with pytest.raises(TypeError, match=re.escape("bad.strings")):
        CheckpointState({"bad.strings": np.array(["a", 1], dtype=object)})
    with pytest.raises(TypeError, match=re.escape("bad.strings")):
        CheckpointState({"bad.strings": np.array([b"a"], dtype=object)})


# -- building and round trips ----------------------------------------------------------------------


def test_every_dtype_roundtrips_bit_exactly(
    sample_state: CheckpointState, tmp_path: pathlib.Path, assert_same_state: Comparer, raw: Raw
) -> None:
    assert sample_state.version == 2
    assert not sample_state.is_nominal
    assert not sample_state.has_external_data
    for how, loaded in _roundtrips(sample_state, tmp_path).items():
        assert loaded.version == 2, how
        assert_same_state(sample_state, loaded)
        # dtypes come back as the exact numpy/ml_dtypes types
        assert loaded.parameters["p.bfloat16"].dtype == np.dtype(ml_dtypes.bfloat16)
        assert loaded.parameters["q.float8_e4m3fn"].data.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
        assert loaded.parameters["h.string"].data.tolist() == [["héllo ✓", ""], ["a\x00b", "日本語"]]
        assert loaded.parameters["u.scalar_f32"].shape == ()
        assert loaded.parameters["u.scalar_f32"].data[()] == np.float32(3.25)
        assert loaded.parameters["w.scalar_str"].data[()] == "only"
        assert loaded.parameters["x.empty_0x3"].data.shape == (0, 3)
        assert loaded.parameters["y.empty_2x0x4"].nbytes == 0


def test_every_dtype_individually(dtype_arrays: Arrays, tmp_path: pathlib.Path, raw: Raw) -> None:
    for name, arr in dtype_arrays.items():
        state = CheckpointState({name: arr})
        for how, loaded in _roundtrips(state, tmp_path).items():
            param = loaded.parameters[name]
            assert param.data_type == _dtypes.from_numpy(arr.dtype, name), (name, how)
            assert param.shape == arr.shape, (name, how)
            assert raw(param.data) == raw(arr), (name, how)


def test_parameter_attributes(sample_state: CheckpointState) -> None:
    p = sample_state.parameters["a.float32"]
    assert p.name == "a.float32"
    assert p.trainable and p.requires_grad
    assert p.data_type == 1
    assert p.dtype == np.dtype(np.float32)
    assert p.shape == (4, 8) and p.ndim == 2 and p.size == 32
    assert p.nbytes == 128
    assert not p.is_nominal
    assert repr(p) == "Parameter('a.float32', float32, shape=(4, 8), trainable)"
    strings = sample_state.parameters["h.string"]
    assert strings.nbytes == len("héllo ✓".encode()) + 3 + len("日本語".encode())
    assert "frozen" in repr(strings)
    assert np.asarray(p).shape == (4, 8)
    assert np.asarray(p, dtype=np.float64).dtype == np.float64


def test_big_endian_is_stored_little_endian(tmp_path: pathlib.Path) -> None:
    be = np.array([1.5, -2.25, 1e30], dtype=">f4")
    be_i = np.array([[1, -2], [2**40, 7]], dtype=">i8")
    state = CheckpointState({"f": be, "i": be_i})
    assert state.parameters["f"].dtype == np.dtype("<f4")
    assert state.parameters["f"].data.dtype.byteorder in ("<", "=")
    for loaded in _roundtrips(state, tmp_path).values():
        f = loaded.parameters["f"].data
        assert f.tolist() == be.tolist()
        assert f.tobytes() == be.astype("<f4").tobytes()
        assert loaded.parameters["i"].data.tolist() == be_i.tolist()


def test_unicode_array_becomes_string_tensor(tmp_path: pathlib.Path) -> None:
    state = CheckpointState({"s": np.array(["π", "ψω", ""]), "t": np.array([["x"]], dtype=">U3")})
    assert state.parameters["s"].data_type == _dtypes.STRING
    assert state.parameters["s"].dtype == np.dtype(object)
    for loaded in _roundtrips(state, tmp_path).values():
        data = loaded.parameters["s"].data
        assert data.dtype == np.dtype(object)
        assert data.tolist() == ["π", "ψω", ""]
        assert all(type(s) is str for s in data)
        assert loaded.parameters["t"].data.tolist() == [["x"]]


def test_lone_surrogates_are_rejected() -> None:
    with pytest.raises(ValueError, match="UTF-8"):
        CheckpointState({"s": np.array(["ok", "\ud800"], dtype=object)})
    with pytest.raises(ValueError, match="UTF-8"):
        CheckpointState({"bad\udcff": np.zeros(1)})
    with pytest.raises(ValueError, match="UTF-8"):
        PropertyBag({"k": "\ud800"})


def test_state_copies_input_arrays() -> None:
    arr = np.arange(4, dtype=np.float32)
    state = CheckpointState({"w": arr})
    arr[0] = 100
    assert state.parameters["w"].data[0] == 0
    with pytest.raises(ValueError):
        state.parameters["w"].data[0] = 5  # read-only


def test_constructor_forms_and_duplicates() -> None:
    w = Parameter("w", np.zeros(2, np.float32))
    b = Parameter("b", np.ones(1, np.float32), trainable=False)
    state = CheckpointState([w, b], frozen={"c": np.zeros(3, np.int8)})
    assert list(state.parameters) == ["b", "c", "w"]
    assert list(state.trainable_parameters) == ["w"]
    assert list(state.frozen_parameters) == ["b", "c"]
    # Parameters given as frozen are frozen in the state; the caller's object is left alone
    t = Parameter("t", np.zeros(1))
    state2 = CheckpointState(frozen=[t])
    assert not state2.parameters["t"].trainable and t.trainable
    # mapping values may be Parameters, but the key must match
    CheckpointState({"w": w})
    with pytest.raises(ValueError, match="'x'"):
        CheckpointState({"x": w})

    with pytest.raises(DuplicateNameError, match="'w'"):
        CheckpointState({"w": np.zeros(1)}, frozen={"w": np.zeros(1)})
    with pytest.raises(DuplicateNameError, match="'w'"):
        CheckpointState([w, Parameter("w", np.zeros(1))])
    assert issubclass(DuplicateNameError, CheckpointError)
    assert issubclass(CheckpointError, ValueError)

    with pytest.raises(TypeError):
        CheckpointState([np.zeros(3)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        CheckpointState({1: np.zeros(3)})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Parameter("w", np.zeros(1), trainable=1)  # type: ignore[arg-type]

    empty = CheckpointState()
    assert len(empty.parameters) == 0 and empty.optimizer is None and len(empty.properties) == 0


def test_parameters_mapping_editing(tmp_path: pathlib.Path) -> None:
    state = CheckpointState({"b": np.zeros(2, np.float32)}, frozen={"a": np.zeros(3, np.int32)})
    params = state.parameters
    params["c"] = np.ones((2, 2), np.float64)  # new -> trainable
    assert params["c"].trainable and params["c"].shape == (2, 2)
    params["a"] = np.arange(5, dtype=np.int64)  # existing -> keeps frozen flag, new shape/dtype allowed
    assert not params["a"].trainable and params["a"].dtype == np.dtype(np.int64)
    params["d"] = Parameter("d", np.zeros(1, np.int8), trainable=False)
    with pytest.raises(ValueError):
        params["e"] = Parameter("d", np.zeros(1))
    del params["b"]
    assert "b" not in params
    assert list(params) == ["a", "c", "d"]
    assert list(state.trainable_parameters) == ["c"]
    assert list(state.frozen_parameters) == ["a", "d"]
    # trainable can be toggled and the views follow
    state.parameters["c"].trainable = False
    assert list(state.trainable_parameters) == []
    assert "c" in state.frozen_parameters and "c" not in state.trainable_parameters
    with pytest.raises(KeyError):
        state.trainable_parameters["c"]
    with pytest.raises(TypeError):
        state.frozen_parameters["z"] = np.zeros(1)  # type: ignore[index]
    state.save(tmp_path / "e.ckpt")
    loaded = ortckpt.load(tmp_path / "e.ckpt")
    assert list(loaded.frozen_parameters) == ["a", "c", "d"]
    assert loaded.parameters["a"].data.tolist() == [0, 1, 2, 3, 4]


def test_parameters_iterate_sorted_by_name() -> None:
    names = ["z", "a", "é", "B", "a.b", "a_b", "10", "9"]
    state = CheckpointState({n: np.zeros(1) for n in names})
    assert list(state.parameters) == sorted(names)
    loaded = ortckpt.load_bytes(state.to_bytes())
    assert list(loaded.parameters) == sorted(names)


# -- Parameter.data setter -----------------------------------------------------------------------------


def test_data_setter_replaces_values(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.ckpt"
    CheckpointState({"w": np.zeros((2, 3), np.float32)}).save(path)
    state = ortckpt.load(path)
    new = np.arange(6, dtype=np.float32).reshape(2, 3)
    state.parameters["w"].data = new
    new[0, 0] = 99  # the state keeps its own copy
    assert state.parameters["w"].data[0, 0] == 0
    assert not state.parameters["w"].data.flags.writeable
    state.parameters["w"].copy_from([[1, 1, 1], [2, 2, 2]])  # lists are converted to the dtype
    assert state.parameters["w"].data.dtype == np.float32
    state.save(path)
    assert ortckpt.load(path).parameters["w"].data.tolist() == [[1, 1, 1], [2, 2, 2]]


def test_data_setter_errors() -> None:
    state = CheckpointState({"fc.weight": np.zeros((2, 3), np.float32), "s": np.array(["a"])})
    p = state.parameters["fc.weight"]
    with pytest.raises(TensorDataError, match=r"'fc\.weight'.*expected shape \(2, 3\), got \(3, 2\)"):
        p.data = np.zeros((3, 2), np.float32)
    with pytest.raises(TensorDataError, match=r"'fc\.weight'.*expected dtype float32, got float64"):
        p.data = np.zeros((2, 3), np.float64)
    with pytest.raises(TensorDataError, match=r"'fc\.weight'"):
        p.data = [[1, 2, 3]]
    with pytest.raises(TensorDataError, match=r"'fc\.weight'"):
        p.data = "nope"
    with pytest.raises(TensorDataError, match="expected dtype string"):
        state.parameters["s"].data = np.array([1])
    state.parameters["s"].data = np.array(["b"])  # <U is accepted for a string parameter
    assert state.parameters["s"].data.tolist() == ["b"]
    assert p.data.tolist() == [[0, 0, 0], [0, 0, 0]]  # unchanged after failures


# -- properties -------------------------------------------------------------------------------------------


def test_property_types(tmp_path: pathlib.Path) -> None:
    bag = PropertyBag()
    bag["i"] = 3
    bag["npi"] = np.int32(-5)
    bag["u"] = np.uint64(2**63 - 1)
    bag["max"] = 2**63 - 1
    bag["min"] = -(2**63)
    bag["f"] = 0.1
    bag["npf"] = np.float64(2.5)
    bag["f32"] = np.float32(1.1)
    bag["whole"] = 3.0
    bag["inf"] = float("inf")
    bag["nan"] = float("nan")
    bag["s"] = "héllo ✓"
    bag["nps"] = np.str_("x")
    bag["empty"] = ""
    assert type(bag["npi"]) is int and bag["npi"] == -5
    assert type(bag["u"]) is int
    assert bag["f"] == float(np.float32(0.1)) and bag["f"] != 0.1
    assert type(bag["npf"]) is float and type(bag["f32"]) is float
    assert bag["f32"] == float(np.float32(1.1))
    assert type(bag["whole"]) is float
    assert type(bag["nps"]) is str

    state = CheckpointState(properties=bag)
    for loaded in _roundtrips(state, tmp_path).values():
        props = loaded.properties
        assert sorted(props) == sorted(bag)
        for key, value in bag.items():
            got = props[key]
            assert type(got) is type(value), key
            if isinstance(value, float) and math.isnan(value):
                assert isinstance(got, float) and math.isnan(got)
            else:
                assert got == value, key


@pytest.mark.parametrize("value", [True, False, np.bool_(True)], ids=["True", "False", "np.bool_"])
def test_property_bool_rejected(value: object) -> None:
    with pytest.raises(TypeError, match="bool"):
        PropertyBag({"flag": value})


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, np.uint64(2**64 - 1), 10**30])
def test_property_int64_overflow(value: object) -> None:
    with pytest.raises(OverflowError, match="'big'"):
        PropertyBag({"big": value})


def test_property_float32_overflow_and_bad_types() -> None:
    with pytest.raises(OverflowError, match="32-bit float"):
        PropertyBag({"x": 1e39})
    for bad in [None, b"bytes", [1], 1 + 2j, np.array([1.0]), object()]:
        with pytest.raises(TypeError, match="'k'"):
            PropertyBag({"k": bad})
    bag = PropertyBag()
    with pytest.raises(TypeError, match="must be str"):
        bag[1] = 2  # type: ignore[index]
    with pytest.raises(TypeError, match="must be str"):
        bag[b"k"] = 2  # type: ignore[index]
    assert len(bag) == 0


def test_properties_mapping_behaviour() -> None:
    state = CheckpointState(properties=[("a", 1), ("b", "x")])
    props = state.properties
    props["c"] = 2.5
    del props["a"]
    assert dict(props) == {"b": "x", "c": 2.5}
    assert "b" in props and "a" not in props
    assert props == {"b": "x", "c": 2.5}
    assert repr(props) == "PropertyBag({'b': 'x', 'c': 2.5})"
    state.properties = {"z": 1}
    assert dict(state.properties) == {"z": 1}


# -- optimizer ---------------------------------------------------------------------------------------------


def test_optimizer_group_validation() -> None:
    g = OptimizerGroup()
    assert g.step == 0 and g.initial_learning_rate == 0.0 and len(g.states) == 0
    g.step = np.int64(5)  # type: ignore[assignment]
    assert g.step == 5 and type(g.step) is int
    g.initial_learning_rate = 0.1
    assert g.initial_learning_rate == float(np.float32(0.1))
    with pytest.raises(TypeError):
        g.step = True
    with pytest.raises(TypeError):
        g.step = 1.5  # type: ignore[assignment]
    with pytest.raises(OverflowError):
        g.step = 2**63
    with pytest.raises(TypeError):
        g.initial_learning_rate = "0.1"  # type: ignore[assignment]
    with pytest.raises(TypeError):
        OptimizerGroup(states={"w": [np.zeros(1)]})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        CheckpointState(optimizer={"g": {"step": 1}})  # type: ignore[dict-item]


def test_optimizer_roundtrip_and_include_flag(
    sample_state: CheckpointState, tmp_path: pathlib.Path, assert_same_state: Comparer
) -> None:
    assert sample_state.optimizer is not None
    assert list(sample_state.optimizer) == ["group0", "group1"]
    g0 = sample_state.optimizer["group0"]
    assert list(g0.states) == ["a.float32", "p.bfloat16"]
    assert list(g0.states["a.float32"]) == ["momentum0", "momentum1"]
    assert "step=3" in repr(g0)

    with_opt = tmp_path / "with.ckpt"
    sample_state.save(with_opt)  # includes optimizer state by default
    loaded = ortckpt.load(with_opt)
    assert_same_state(sample_state, loaded)
    assert loaded.optimizer is not None
    assert loaded.optimizer["group1"].step == 2**40
    assert loaded.optimizer["group0"].initial_learning_rate == float(np.float32(0.001))
    m = loaded.optimizer["group0"].states["a.float32"]["momentum1"]
    assert not m.flags.writeable

    without = tmp_path / "without.ckpt"
    ortckpt.save(sample_state, without, include_optimizer_state=False)
    assert ortckpt.load(without).optimizer is None
    assert_same_state(sample_state, ortckpt.load(without), optimizer=False)


def test_optimizer_editing(sample_state: CheckpointState, tmp_path: pathlib.Path) -> None:
    opt = sample_state.optimizer
    assert opt is not None
    g0 = opt["group0"]
    g0.step = 10
    g0.states["a.float32"]["momentum0"] = np.zeros((4, 8), np.float32)
    g0.states["new"] = {"momentum0": np.ones(2, np.float16)}
    del opt["group1"]
    path = tmp_path / "o.ckpt"
    sample_state.save(path)
    loaded = ortckpt.load(path)
    assert loaded.optimizer is not None
    assert list(loaded.optimizer) == ["group0"]
    lg = loaded.optimizer["group0"]
    assert lg.step == 10
    assert not lg.states["a.float32"]["momentum0"].any()
    assert lg.states["new"]["momentum0"].dtype == np.float16
    # copying the states of a loaded group into another group shares (immutable) data
    loaded.optimizer["copy"] = OptimizerGroup(step=1, states=lg.states)
    assert list(loaded.optimizer["copy"].states) == list(lg.states)
    loaded.optimizer = None
    assert loaded.optimizer is None
    ortckpt.save(loaded, path)
    assert ortckpt.load(path).optimizer is None


def test_momentums_are_lazy_views(tmp_path: pathlib.Path, sample_state: CheckpointState) -> None:
    path = tmp_path / "m.ckpt"
    sample_state.save(path)
    loaded = ortckpt.load(path)
    assert loaded.optimizer is not None
    m = loaded.optimizer["group0"].states["a.float32"]["momentum0"]
    assert any(isinstance(b, _native.MappedFile) for b in _base_chain(m))


# -- ORT-compatible aliases --------------------------------------------------------------------------


def test_ort_aliases(
    sample_state: CheckpointState, tmp_path: pathlib.Path, assert_same_state: Comparer
) -> None:
    path = tmp_path / "alias.ckpt"
    CheckpointState.save_checkpoint(sample_state, path)  # ORT default: no optimizer state
    loaded = CheckpointState.load_checkpoint(path)
    assert loaded.optimizer is None
    assert_same_state(sample_state, loaded, optimizer=False)
    CheckpointState.save_checkpoint(sample_state, str(path), include_optimizer_state=True)
    assert CheckpointState.load_checkpoint(str(path)).optimizer is not None
    sample_state.save(path, include_optimizer_state=False)
    assert ortckpt.load(path).optimizer is None


def test_pathlike_everywhere(tmp_path: pathlib.Path) -> None:
    class MyPath(os.PathLike[str]):
        def __init__(self, p: str) -> None:
            self.p = p

        def __fspath__(self) -> str:
            return self.p

    state = CheckpointState({"w": np.ones(2, np.float32)})
    paths: list[str | os.PathLike[str]] = [
        tmp_path / "a.ckpt",
        MyPath(str(tmp_path / "b.ckpt")),
        str(tmp_path / "c.ckpt"),
    ]
    for path in paths:
        ortckpt.save(state, path)
        state.save(path)
        assert ortckpt.load(path).parameters["w"].data.tolist() == [1, 1]
        assert ortckpt.load(path, mmap=False).parameters["w"].data.tolist() == [1, 1]
        assert CheckpointState.load_checkpoint(path).source == os.fspath(path)


def test_repr(sample_state: CheckpointState, tmp_path: pathlib.Path) -> None:
    text = repr(sample_state)
    assert "version=2" in text
    assert "23 trainable + 4 frozen parameters" in text
    assert "'group0' step 3" in text and "'epoch'" in text
    path = tmp_path / "r.ckpt"
    sample_state.save(path)
    assert str(path) in repr(ortckpt.load(path))


# -- nominal checkpoints -----------------------------------------------------------------------------------


def _nominal_bytes() -> bytes:
    return _native.serialize_checkpoint(
        {
            "is_nominal": True,
            "trainable": [("fc1.weight", 1, [], None)],
            "frozen": [("fc1.bias", 1, [], None), ("emb", 16, [], None)],
            "optimizer_groups": [],
            "properties": [],
        }
    )


def test_nominal_state(tmp_path: pathlib.Path) -> None:
    state = ortckpt.load_bytes(_nominal_bytes())
    assert state.is_nominal
    p = state.parameters["fc1.weight"]
    assert p.is_nominal and p.shape == () and p.nbytes == 0
    assert p.dtype == np.float32 and state.parameters["emb"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert "nominal" in repr(p) and "nominal" in repr(state)
    with pytest.raises(CheckpointError, match=r"fc1\.weight.*nominal.*ONNX model"):
        p.data  # noqa: B018
    with pytest.raises(CheckpointError, match="nominal"):
        p.data = np.zeros(1, np.float32)
    p.trainable = False  # flags can still be edited

    path = tmp_path / "nominal.ckpt"
    state.save(path)
    again = ortckpt.load(path)
    assert again.is_nominal
    assert list(again.parameters) == ["emb", "fc1.bias", "fc1.weight"]
    assert list(again.trainable_parameters) == []
    assert [again.parameters[n].data_type for n in again.parameters] == [16, 1, 1]
    assert all(again.parameters[n].shape == () for n in again.parameters)


def test_nominal_state_keeps_values_it_is_given(tmp_path: pathlib.Path) -> None:
    """A nominal checkpoint may hold values (ORT writes such files when it re-saves a nominal
    state); ortckpt writes them back rather than dropping them."""
    state = ortckpt.load_bytes(_nominal_bytes())
    state.parameters["extra"] = np.arange(2, dtype=np.float32)
    state.save(tmp_path / "x.ckpt")
    again = ortckpt.load(tmp_path / "x.ckpt")
    assert again.is_nominal
    assert again.parameters["extra"].data.tolist() == [0.0, 1.0]
    assert again.parameters["fc1.weight"].is_nominal


def test_nominal_tensor_rejected_outside_nominal_state(tmp_path: pathlib.Path) -> None:
    nominal = ortckpt.load_bytes(_nominal_bytes())
    state = CheckpointState([nominal.parameters["fc1.weight"]])
    with pytest.raises(CheckpointError, match="nominal"):
        state.to_bytes()


# -- zero-copy and buffer ownership ----------------------------------------------------------------------


def test_loaded_data_is_readonly_view_of_mapping(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "z.ckpt"
    values = np.arange(64, dtype=np.float64).reshape(8, 8)
    CheckpointState({"w": values, "i": np.arange(3, dtype=np.int16)}).save(path)
    state = ortckpt.load(path)
    data = state.parameters["w"].data
    assert not data.flags.writeable
    with pytest.raises(ValueError):
        data[0, 0] = 1.0
    assert data.flags.aligned
    chain = _base_chain(data)
    mapped = [b for b in chain if isinstance(b, _native.MappedFile)]
    assert mapped, chain
    mf = mapped[0]
    assert len(mf) == path.stat().st_size and os.fspath(mf.path) == str(path)
    assert np.shares_memory(data, np.frombuffer(mf, dtype=np.uint8))  # type: ignore[call-overload]
    assert state.parameters["w"].data is data  # materialized once

    # the mapping outlives the state while a view exists
    del state, mapped, mf, chain
    gc.collect()
    assert data.tolist() == values.tolist()


def test_mmap_false_reads_into_private_memory(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "z.ckpt"
    CheckpointState({"w": np.arange(4, dtype=np.float32)}).save(path)
    data = ortckpt.load(path, mmap=False).parameters["w"].data
    assert not data.flags.writeable
    owners = [b for b in _base_chain(data) if isinstance(b, _native.MappedFile)]
    assert owners and not any(b.mapped for b in owners)
    assert data.tolist() == [0, 1, 2, 3]


def test_load_bytes_zero_copy_and_private_copy() -> None:
    blob = CheckpointState({"w": np.arange(4, dtype=np.float32)}).to_bytes()
    data = ortckpt.load_bytes(blob).parameters["w"].data
    assert any(b is blob for b in _base_chain(data))

    view = memoryview(blob)
    data = ortckpt.load_bytes(view).parameters["w"].data
    assert np.shares_memory(data, np.frombuffer(blob, dtype=np.uint8))
    assert not data.flags.writeable

    # a writable buffer is copied first: mutating it afterwards cannot change the state
    ba = bytearray(blob)
    state = ortckpt.load_bytes(ba)
    w = state.parameters["w"].data.copy()
    ba[:] = bytes(len(ba))
    assert state.parameters["w"].data.tolist() == w.tolist()
    assert not state.parameters["w"].data.flags.writeable
    writable_view = memoryview(bytearray(blob))
    state = ortckpt.load_bytes(writable_view)
    writable_view[:] = bytes(len(blob))
    assert state.parameters["w"].data.tolist() == [0, 1, 2, 3]

    # numpy arrays and multi-byte formats are accepted as buffers too
    arr = np.frombuffer(blob, dtype=np.uint8)
    assert ortckpt.load_bytes(arr).parameters["w"].data.tolist() == [0, 1, 2, 3]  # type: ignore[arg-type]


def test_misaligned_buffer_gives_aligned_readonly_copy() -> None:
    values = np.array([1.5, -2.0, 3.25], dtype=np.float64)
    blob = CheckpointState({"w": values}).to_bytes()
    shifted = memoryview(b"\x00" + blob)[1:]  # read-only, every tensor now misaligned for float64
    data = ortckpt.load_bytes(shifted).parameters["w"].data
    assert data.flags.aligned
    assert not data.flags.writeable
    assert data.tolist() == values.tolist()


def test_save_over_mapped_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "same.ckpt"
    CheckpointState({"w": np.arange(4, dtype=np.float32)}, properties={"epoch": 1}).save(path)
    state = ortckpt.load(path)
    old_view = state.parameters["w"].data
    state.properties["epoch"] = 2
    state.parameters["b"] = np.ones(2, np.int8)
    state.save(path)  # atomic rename while the old file is still mapped
    assert old_view.tolist() == [0, 1, 2, 3]
    # the unmodified tensor was written from the old mapping, and saving again still works
    state.save(path)
    again = ortckpt.load(path)
    assert again.properties["epoch"] == 2
    assert again.parameters["w"].data.tolist() == [0, 1, 2, 3]
    assert again.parameters["b"].data.tolist() == [1, 1]
    assert sorted(os.listdir(tmp_path)) == ["same.ckpt"]  # no temporary files left behind


@pytest.mark.skipif(sys.platform != "linux", reason="RSS accounting of mapped pages is Linux-specific")
def test_load_reads_no_tensor_bytes(tmp_path: pathlib.Path) -> None:
    psutil = pytest.importorskip("psutil")
    path = tmp_path / "big.ckpt"
    n = 32 * 1024 * 1024  # 128 MiB of float32
    big = np.ones(n, dtype=np.float32)
    CheckpointState({"big": big}).save(path)
    del big
    gc.collect()
    proc = psutil.Process()
    before = proc.memory_info().rss
    state = ortckpt.load(path)
    param = state.parameters["big"]
    assert param.shape == (n,)
    data = param.data  # a view: still nothing read
    after_load = proc.memory_info().rss
    assert after_load - before < 16 * 1024 * 1024
    assert float(data[::4096].sum()) == n / 4096  # touch one value per page
    after_touch = proc.memory_info().rss
    assert after_touch - before > 64 * 1024 * 1024  # sanity: the measure does see mapped pages


# -- errors ------------------------------------------------------------------------------------------


def test_missing_and_bad_files(tmp_path: pathlib.Path) -> None:
    for mmap in (True, False):
        with pytest.raises(FileNotFoundError):
            ortckpt.load(tmp_path / "missing.ckpt", mmap=mmap)
        with pytest.raises(IsADirectoryError):
            ortckpt.load(tmp_path, mmap=mmap)
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"this is not a checkpoint at all" * 4)
    with pytest.raises(InvalidCheckpointError, match=re.escape("garbage.ckpt")):
        ortckpt.load(garbage)
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    with pytest.raises(InvalidCheckpointError):
        ortckpt.load(empty)
    with pytest.raises(InvalidCheckpointError, match="<bytes>"):
        ortckpt.load_bytes(b"")
    with pytest.raises(TypeError):
        ortckpt.load_bytes("not bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ortckpt.save("not a state", tmp_path / "x.ckpt")  # type: ignore[arg-type]


def test_truncated_and_flipped_files_raise_checkpoint_errors(sample_state: CheckpointState) -> None:
    blob = sample_state.to_bytes()
    for cut in (4, 8, 16, len(blob) // 2, len(blob) - 1):
        with pytest.raises(CheckpointError):
            ortckpt.load_bytes(blob[:cut])
    rng = np.random.default_rng(0)
    for _ in range(200):
        corrupt = bytearray(blob)
        pos = int(rng.integers(0, len(blob)))
        corrupt[pos] ^= 1 << int(rng.integers(0, 8))
        try:
            state = ortckpt.load_bytes(corrupt)
        except CheckpointError:
            continue
        # a flip inside tensor bytes or other unchecked content still yields a usable state
        for param in state.parameters.values():
            try:
                param.data  # noqa: B018
            except TensorDataError as exc:  # e.g. a dim of an empty tensor became huge
                assert "too large for a numpy array" in str(exc)
        state.to_bytes()


def test_save_errors_leave_no_file(tmp_path: pathlib.Path) -> None:
    missing_dir = tmp_path / "nope" / "x.ckpt"
    with pytest.raises(FileNotFoundError):
        CheckpointState({"w": np.zeros(1)}).save(missing_dir)


# -- external data -----------------------------------------------------------------------------------


def _external_state() -> CheckpointState:
    return CheckpointState(
        {"w": np.arange(64, dtype=np.float32).reshape(8, 8), "tiny": np.ones(3, np.int8)},
        frozen={"b": np.arange(-20, 0, dtype=np.int64)},
    )


def test_external_data_round_trip(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "ext.ckpt"
    original = _external_state()
    ortckpt.save(original, path, external_data_threshold=100)
    ext = pathlib.Path(ortckpt.external_data_path(path))
    assert ext.name == "ext.ckpt.data" and ext.stat().st_size >= 64 * 4 + 20 * 8
    assert path.stat().st_size < 64 * 4 + 20 * 8, "tensor bytes should live in the external file"
    for mmap in (True, False):
        state = ortckpt.load(path, mmap=mmap)
        assert state.has_external_data
        for name, p in original.parameters.items():
            assert state.parameters[name].data.tobytes() == p.data.tobytes()
            assert state.parameters[name].dtype == p.dtype and state.parameters[name].shape == p.shape
            assert state.parameters[name].trainable == p.trainable
        assert "external data" in repr(state)
    state = ortckpt.load_bytes(path.read_bytes(), external_data=ext.read_bytes())
    assert state.parameters["b"].data.tolist() == list(range(-20, 0))
    # A state loaded from an external checkpoint stays external when saved again (as in ORT).
    again = tmp_path / "again.ckpt"
    ortckpt.save(state, again)
    assert ortckpt.load(again).has_external_data


def test_external_data_errors_name_both_files(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "ext.ckpt"
    ortckpt.save(_external_state(), path, external_data_threshold=0)
    ext = pathlib.Path(ortckpt.external_data_path(path))
    content = ext.read_bytes()
    ext.write_bytes(content[:-1])
    with pytest.raises(ExternalDataError, match=r"past the end of the external data file") as info:
        ortckpt.load(path)
    assert "ext.ckpt" in str(info.value)
    ext.unlink()
    with pytest.raises(ExternalDataError, match=re.escape("ext.ckpt.data")) as info:
        ortckpt.load(path)
    assert str(path) in str(info.value)
    with pytest.raises(ExternalDataError, match="external_data"):
        ortckpt.load_bytes(path.read_bytes())
    with pytest.raises(ExternalDataError, match="past the end"):
        ortckpt.load_bytes(path.read_bytes(), external_data=content[:10])


def test_error_hierarchy_reexported() -> None:
    from ortckpt import compat, errors

    # ORT's type, the server state's (read in Python), and the ONNX models' (never raised by the
    # core); AggregationError is the core's: it decides when a round fails
    python_defined = {"CompatError", "ServerStateError", "ModelError", "RemoteSourceError"}
    for name in errors.__all__:
        if name in python_defined:
            assert getattr(errors, name).__module__ == "ortckpt.errors"
            continue
        assert getattr(errors, name) is getattr(_native, name) is getattr(ortckpt, name)
        assert issubclass(getattr(errors, name), ValueError)
    assert errors.AggregationError is ortckpt.AggregationError
    assert issubclass(errors.AggregationError, errors.CheckpointError)
    assert errors.ModelError is ortckpt.ModelError and issubclass(errors.ModelError, errors.CheckpointError)
    assert errors.CompatError is compat.CompatError and issubclass(errors.CompatError, RuntimeError)
    assert errors.ServerStateError is ortckpt.ServerStateError
    assert issubclass(errors.ServerStateError, errors.CheckpointError)
    assert errors.RemoteSourceError is ortckpt.RemoteSourceError
    assert issubclass(errors.RemoteSourceError, errors.CheckpointError)
    assert ortckpt.__version__ and ortckpt.__version__ != "0+unknown"


def test_empty_tensor_with_huge_dim() -> None:
    """[0, 2**61, 8] has no elements, so it is valid, but numpy cannot make an array of that shape."""
    blob = _native.serialize_checkpoint(
        {
            "is_nominal": False,
            "trainable": [("odd", 1, [0, 2**61, 8], b""), ("ok", 1, [2], np.ones(2, np.float32).tobytes())],
            "frozen": [],
            "optimizer_groups": [],
            "properties": [],
        }
    )
    state = ortckpt.load_bytes(blob)
    odd = state.parameters["odd"]
    assert odd.shape == (0, 2**61, 8) and odd.nbytes == 0 and odd.size == 0
    with pytest.raises(TensorDataError, match=r"'odd'.*too large for a numpy array"):
        odd.data  # noqa: B018
    assert ortckpt.load_bytes(state.to_bytes()).parameters["odd"].shape == (0, 2**61, 8)


def test_more_dims_than_numpy_supports() -> None:
    blob = _native.serialize_checkpoint(
        {
            "is_nominal": False,
            "trainable": [("deep", 1, [1] * 65, b"\0" * 4), ("deep.s", 8, [1] * 65, ["x"])],
            "frozen": [],
            "optimizer_groups": [],
            "properties": [],
        }
    )
    state = ortckpt.load_bytes(blob)
    for name in ("deep", "deep.s"):
        param = state.parameters[name]
        assert param.shape == (1,) * 65 and param.ndim == 65
        with pytest.raises(TensorDataError, match=rf"'{re.escape(name)}'.*65 dims"):
            param.data  # noqa: B018
    assert ortckpt.load_bytes(state.to_bytes()).parameters["deep"].shape == (1,) * 65


def test_negative_zero_floats_keep_their_sign() -> None:
    state = CheckpointState({"w": np.zeros(1, np.float32)}, properties={"z": -0.0})
    state.optimizer = {"group0": OptimizerGroup(step=1, initial_learning_rate=-0.0)}
    again = ortckpt.load_bytes(ortckpt.serialize(state))
    assert math.copysign(1.0, again.properties["z"]) == -1.0
    assert again.optimizer is not None
    assert math.copysign(1.0, again.optimizer["group0"].initial_learning_rate) == -1.0


def test_save_validates_the_threshold_like_save_tensor_protos(tmp_path: pathlib.Path) -> None:
    state = CheckpointState({"w": np.ones(64, np.float32)})  # 256 bytes: external when over
    with pytest.raises(ValueError, match="must not be negative"):
        ortckpt.save(state, tmp_path / "a.ckpt", external_data_threshold=-1)
    with pytest.raises(TypeError, match="must be an int"):
        ortckpt.save(state, tmp_path / "a.ckpt", external_data_threshold=1.5)  # type: ignore[arg-type]
    ortckpt.save(state, tmp_path / "a.ckpt", external_data_threshold=np.int64(0))
    assert ortckpt.load(tmp_path / "a.ckpt").has_external_data
    assert not (tmp_path / "b.ckpt").exists()
