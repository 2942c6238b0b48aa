"""TensorProtos built by hand from numpy arrays, and a model holding them (for the ONNX tests, ours
and ORT's).

Import this module after ``pytest.importorskip("onnx")``: it needs onnx.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto, helper

from ortckpt import _dtypes

Arr = np.ndarray[Any, Any]


def data_type_of(arr: Arr) -> int:
    """The ONNX data type of an array's dtype."""
    return _dtypes.from_numpy(arr.dtype, "t")


def header(name: str, arr: Arr) -> TensorProto:
    """A TensorProto with the name, data type and dims of ``arr``, and no values."""
    t = TensorProto()
    t.name = name
    t.data_type = data_type_of(arr)
    t.dims.extend(int(d) for d in arr.shape)
    return t


def raw_proto(name: str, arr: Arr) -> TensorProto:
    """``header`` with the values as raw_data (string_data for strings)."""
    t = header(name, arr)
    if arr.dtype == object:
        t.string_data.extend(s.encode("utf-8") for s in arr.reshape(-1))
    else:
        t.raw_data = np.ascontiguousarray(arr).tobytes()
    return t


def make_model(initializers: list[TensorProto]) -> ModelProto:
    """A small valid model (IR 10, opset 21: what ORT 1.19.2 reads) holding the initializers."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y], initializer=initializers
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])
