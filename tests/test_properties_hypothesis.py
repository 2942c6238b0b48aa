"""Property tests: any state round-trips bit-exactly through save -> load and serialize -> load_bytes."""

from __future__ import annotations

import math
import pathlib
import tempfile
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ortckpt
from ortckpt import CheckpointState, OptimizerGroup, Parameter, _dtypes

Comparer = Callable[..., None]
Arrays = np.ndarray[Any, Any]

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Any Unicode except lone surrogates (not encodable as UTF-8, so never valid names).
names = st.text(st.characters(exclude_categories=["Cs"]), min_size=0, max_size=12)
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
NUMERIC_CODES = sorted(c for c in _dtypes.DATA_TYPES if c not in (_dtypes.STRING, _dtypes.BOOL))


@st.composite
def arrays(draw: st.DrawFn) -> Arrays:
    """An array of any supported dtype: numeric values are random bit patterns (NaN payloads,
    denormals, -0.0 ...), byte order random too."""
    code = draw(st.sampled_from([*NUMERIC_CODES, _dtypes.STRING, _dtypes.BOOL]))
    shape = draw(shapes)
    count = math.prod(shape)
    if code == _dtypes.STRING:
        values = draw(st.lists(st.text(max_size=8), min_size=count, max_size=count))
        out = np.empty(count, dtype=object)
        out[:] = values
        return out.reshape(shape)
    if code == _dtypes.BOOL:
        return draw(hnp.arrays(np.bool_, shape))
    dtype = _dtypes.to_numpy(code)
    raw = draw(st.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize))
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if dtype.itemsize > 1 and draw(st.booleans()):
        # same values, stored big-endian: must be written little-endian
        arr = arr.astype(dtype.newbyteorder(">"))
    return arr


property_values = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(width=32),
    st.text(max_size=10),
)


@st.composite
def optimizer_groups(draw: st.DrawFn, param_names: list[str]) -> dict[str, OptimizerGroup]:
    groups: dict[str, OptimizerGroup] = {}
    for group_name in draw(st.lists(names, max_size=2, unique=True)):
        states: dict[str, dict[str, Arrays]] = {}
        for param_name in draw(st.lists(st.sampled_from(param_names), unique=True)) if param_names else []:
            momentums = draw(st.dictionaries(names, arrays(), max_size=2))
            states[param_name] = momentums
        groups[group_name] = OptimizerGroup(
            step=draw(st.integers(min_value=-(2**63), max_value=2**63 - 1)),
            initial_learning_rate=draw(st.floats(width=32)),
            states=states,
        )
    return groups


@st.composite
def states(draw: st.DrawFn) -> CheckpointState:
    params = draw(st.dictionaries(names, st.tuples(arrays(), st.booleans()), max_size=6))
    props = draw(st.dictionaries(names, property_values, max_size=5))
    optimizer = draw(st.none() | optimizer_groups(sorted(params)))
    return CheckpointState(
        [Parameter(name, arr, trainable=trainable) for name, (arr, trainable) in params.items()],
        properties=props,
        optimizer=optimizer or None,
    )


def _check_equal_to_inputs(state: CheckpointState, loaded: CheckpointState) -> None:
    """Beyond assert_same_state: values compare equal to the (possibly big-endian) inputs."""
    for name, param in state.parameters.items():
        got = loaded.parameters[name].data
        assert got.dtype.byteorder in ("<", "=", "|")
        if got.dtype != np.dtype(object):
            assert got.tobytes() == param.data.astype(param.dtype.newbyteorder("<")).tobytes()


@SETTINGS
@given(state=states())
def test_roundtrip_save_load(state: CheckpointState, assert_same_state: Comparer) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "state.ckpt"
        ortckpt.save(state, path)
        for loaded in (ortckpt.load(path), ortckpt.load(path, mmap=False)):
            assert loaded.version == 2
            assert_same_state(state, loaded)
            _check_equal_to_inputs(state, loaded)
        del loaded


@SETTINGS
@given(state=states())
def test_roundtrip_serialize_load_bytes(state: CheckpointState, assert_same_state: Comparer) -> None:
    blob = ortckpt.serialize(state)
    loaded = ortckpt.load_bytes(blob)
    assert_same_state(state, loaded)
    _check_equal_to_inputs(state, loaded)
    # deterministic, and re-serializing a loaded state (memoryview slices) gives the same bytes
    assert ortckpt.serialize(state) == blob
    assert ortckpt.serialize(loaded) == blob
    # without optimizer state
    no_opt = ortckpt.load_bytes(ortckpt.serialize(state, include_optimizer_state=False))
    assert no_opt.optimizer is None
    assert_same_state(state, no_opt, optimizer=False)


@SETTINGS
@given(arr=arrays())
def test_parameter_data_is_a_faithful_copy(arr: Arrays) -> None:
    param = Parameter("p", arr)
    data = param.data
    assert not data.flags.writeable
    assert data.shape == arr.shape
    if arr.dtype == np.dtype(object):
        assert data.tolist() == arr.tolist()
    else:
        assert data.dtype == arr.dtype.newbyteorder("<")
        assert data.tobytes() == arr.astype(arr.dtype.newbyteorder("<")).tobytes()
    # assigning the same values back is always accepted
    param.data = arr
    if arr.dtype != np.dtype(object):
        assert param.data.tobytes() == data.tobytes()
        if arr.dtype.type is ml_dtypes.bfloat16:
            assert param.data.dtype == np.dtype(ml_dtypes.bfloat16)


@SETTINGS
@given(value=property_values)
def test_property_values_roundtrip_exactly(value: int | float | str) -> None:
    state = CheckpointState(properties={"k": value})
    got = ortckpt.load_bytes(state.to_bytes()).properties["k"]
    assert type(got) is type(value)
    if isinstance(value, float) and math.isnan(value):
        assert isinstance(got, float) and math.isnan(got)
    else:
        assert got == value
