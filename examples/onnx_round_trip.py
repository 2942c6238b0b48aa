"""ONNX model -> checkpoint -> ONNX model: what ORT's generate_artifacts and
LoadCheckpointToModel do, without onnxruntime-training. Needs the onnx package."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import ortckpt

# A one-layer model: Y = X @ W + b
w = np.arange(12, dtype=np.float32).reshape(4, 3)
b = np.zeros(3, np.float32)
graph = helper.make_graph(
    [helper.make_node("MatMul", ["X", "W"], ["XW"]), helper.make_node("Add", ["XW", "b"], ["Y"])],
    "linear",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 3])],
    [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
)

with tempfile.TemporaryDirectory() as tmp:
    model_path = Path(tmp) / "linear.onnx"
    ckpt_path = Path(tmp) / "linear.ckpt"
    onnx.save(helper.make_model(graph), model_path)

    # the checkpoint generate_artifacts would write, with only W trainable
    ortckpt.save_from_onnx(model_path, ckpt_path, trainable=["W"])
    state = ortckpt.load(ckpt_path)
    print(state)

    # "training": update W, then write the trained values back into the model
    state.parameters["W"].data = state.parameters["W"].data + 1.0
    ortckpt.save(state, ckpt_path)
    trained = ortckpt.load_into_model(ckpt_path, model_path)
    got = {init.name: numpy_helper.to_array(init) for init in trained.graph.initializer}
    assert np.array_equal(got["W"], w + 1.0) and np.array_equal(got["b"], b)
    print("trained W:", got["W"].ravel().tolist())
