"""Bit-exact comparison of arrays, property values and whole states."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ortckpt import CheckpointState, Parameter


def raw_values(arr: np.ndarray[Any, Any]) -> bytes | list[str]:
    """The bit pattern of an array (its strings for object arrays)."""
    if arr.dtype == np.dtype(object):
        return [str(s) for s in arr.reshape(-1)]
    return np.ascontiguousarray(arr).tobytes()


def same_property(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def assert_same_param(a: Parameter, b: Parameter) -> None:
    assert a.name == b.name
    assert a.trainable == b.trainable, a.name
    assert a.data_type == b.data_type, a.name
    assert a.dtype == b.dtype, a.name
    assert a.shape == b.shape, a.name
    assert a.is_nominal == b.is_nominal, a.name
    assert a.nbytes == b.nbytes, a.name
    if not a.is_nominal:
        assert a.data.shape == b.data.shape
        assert raw_values(a.data) == raw_values(b.data), a.name


def assert_same_state(a: CheckpointState, b: CheckpointState, *, optimizer: bool = True) -> None:
    assert a.is_nominal == b.is_nominal
    assert list(a.parameters) == list(b.parameters)
    for name in a.parameters:
        assert_same_param(a.parameters[name], b.parameters[name])
    assert list(a.trainable_parameters) == list(b.trainable_parameters)
    assert list(a.frozen_parameters) == list(b.frozen_parameters)
    assert sorted(a.properties) == sorted(b.properties)
    for key, value in a.properties.items():
        assert same_property(value, b.properties[key]), (key, value, b.properties[key])
    if not optimizer:
        return
    if a.optimizer is None or b.optimizer is None:
        assert a.optimizer is None and b.optimizer is None
        return
    assert list(a.optimizer) == list(b.optimizer)
    for group_name, ga in a.optimizer.items():
        gb = b.optimizer[group_name]
        assert ga.step == gb.step
        assert same_property(ga.initial_learning_rate, gb.initial_learning_rate)
        assert list(ga.states) == list(gb.states)
        for param_name, ma in ga.states.items():
            mb = gb.states[param_name]
            assert list(ma) == list(mb)
            for momentum, arr in ma.items():
                other = mb[momentum]
                assert arr.dtype == other.dtype and arr.shape == other.shape, (param_name, momentum)
                assert raw_values(arr) == raw_values(other), (param_name, momentum)
