"""Fuzz target: hostile eval models given to ``export_for_inference`` (and its CLI's dry run).

Seeds: the eval model of the tests (MatMul, Add, Mul, a loss), models of one node of many
operators (the ones whose onnx shape inference crashed among them), a model with an external
initializer. Each case mutates a seed structurally (operators, empty or unknown input names,
attributes, dims negative or huge, data types, raw data sizes, external data entries, undeclared
outputs) and then its bytes (flips, truncations, splices), and exports outputs named from the
model. The oracle (``_harness.ours``): no crash, only ortckpt's exceptions; a model that is
written is an ONNX model again.

    python fuzz/python/export_models.py SECONDS SEED [ARTIFACTS]
"""

from __future__ import annotations

import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np
import onnx
from _harness import run
from onnx import TensorProto, helper, numpy_helper

import ortckpt
from ortckpt.deploy._export import plan_export
from ortckpt.formats._onnx_write import write_model

WORK = Path(tempfile.mkdtemp(prefix="ortckpt-fuzz-export-"))
OPS = [
    "MatMul", "Add", "Mul", "Relu", "Tanh", "Softmax", "Gemm", "Cast", "Identity", "Transpose",
    "Reshape", "Concat", "GatherND", "EyeLike", "RegexFullMatch", "Shape", "Sum", "Where", "If",
]  # fmt: skip
ML_OPS = ["DictVectorizer", "LabelEncoder", "TreeEnsembleClassifier"]
W = np.arange(6, dtype=np.float32).reshape(3, 2)


def _vi(name: str, elem: int, shape: list[Any]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _seeds() -> list[onnx.ModelProto]:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["y"]),
        helper.make_node("Mul", ["y", "c"], ["z"]),
        helper.make_node("ReduceMean", ["z"], ["loss"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "seed",
        [
            _vi("x", TensorProto.FLOAT, ["batch", 3]),
            _vi("w", TensorProto.FLOAT, [3, 2]),
            _vi("b", TensorProto.FLOAT, [2]),
        ],
        [_vi("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array([0.5, 2.0], np.float32), "c")],
    )
    models = [helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])]
    for op in OPS + ML_OPS:
        domain = "ai.onnx.ml" if op in ML_OPS else ""
        node = helper.make_node(op, ["x", "w"], ["out"], domain=domain)
        g = helper.make_graph(
            [node, helper.make_node("Identity", ["w"], ["wout"])],
            op,
            [_vi("x", TensorProto.FLOAT, [2, 3]), _vi("w", TensorProto.FLOAT, [3, 2])],
            [_vi("wout", TensorProto.FLOAT, [3, 2])],
        )
        opsets = [helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 3)]
        models.append(helper.make_model(g, opset_imports=opsets))
    ext = onnx.ModelProto()
    ext.CopyFrom(models[0])
    c = ext.graph.initializer[0]
    c.ClearField("raw_data")
    c.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "c.bin"), ("offset", "0"), ("length", "8")):
        entry = c.external_data.add()
        entry.key, entry.value = key, value
    models.append(ext)
    return models


SEEDS = _seeds()
(WORK / "c.bin").write_bytes(np.array([0.5, 2.0], np.float32).tobytes())
(WORK / "outside.bin").write_bytes(b"\x00" * 8)
CKPT = WORK / "t.ckpt"
ortckpt.save(ortckpt.CheckpointState({"w": W}, frozen={"b": np.ones(2, np.float32)}), CKPT)
NAMES = ["", "x", "w", "b", "c", "y", "xw", "out", "loss", "z", "missing", "\x00", "a" * 300]
LOCATIONS = ["c.bin", "../outside.bin", "/etc/passwd", "", ".", "sub/../c.bin", "\udcff", "c.bin\x00x"]
TYPES = [0, 1, 7, 8, 10, 16, 21, 22, 25, 27, 99, 999, -1]
DIMS = [0, 1, 2, 3, -1, -(2**62), 2**62, 2**63 - 1]


def _mutate(model: onnx.ModelProto, rng: random.Random) -> None:
    g = model.graph
    for _ in range(rng.randint(1, 4)):
        what = rng.randrange(9)
        if what == 0 and g.node:
            node = rng.choice(g.node)
            node.op_type = rng.choice(OPS + ML_OPS)
        elif what == 1 and g.node:
            node = rng.choice(g.node)
            if node.input:
                node.input[rng.randrange(len(node.input))] = rng.choice(NAMES)
        elif what == 2 and g.node:
            node = rng.choice(g.node)
            node.attribute.append(
                helper.make_attribute(
                    rng.choice(["axis", "to", "perm", "transB"]), rng.choice([0, 1, -7, 99])
                )
            )
        elif what == 3 and g.initializer:
            t = rng.choice(g.initializer)
            del t.dims[:]
            t.dims.extend(rng.choice(DIMS) for _ in range(rng.randint(0, 3)))
        elif what == 4 and g.initializer:
            rng.choice(g.initializer).data_type = rng.choice(TYPES)
        elif what == 5 and g.initializer:
            t = rng.choice(g.initializer)
            if t.data_location != TensorProto.EXTERNAL:
                t.raw_data = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 7, 8, 9, 64])))
        elif what == 6 and g.initializer:
            t = rng.choice(g.initializer)
            if t.external_data:
                t.external_data[0].value = (
                    rng.choice(LOCATIONS).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                )
        elif what == 7:
            vi = (
                rng.choice([*g.value_info, *g.input, *g.output])
                if (g.value_info or g.input or g.output)
                else None
            )
            if vi is not None and vi.type.HasField("tensor_type"):
                vi.type.tensor_type.elem_type = rng.choice(TYPES)
        elif what == 8:
            g.node.append(
                helper.make_node(rng.choice(OPS), [rng.choice(NAMES), rng.choice(NAMES)], [rng.choice(NAMES)])
            )


def _bytes_mutation(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice([0, 0, 0, 1, 2, 5])):
        if not buf:
            break
        kind = rng.randrange(4)
        at = rng.randrange(len(buf))
        if kind == 0:
            buf[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            buf[at] = rng.choice([0, 0xFF, 0x80, 0x7F])
        elif kind == 2:
            del buf[at:]
        else:
            other = rng.choice(SEEDS).SerializeToString()
            start = rng.randrange(len(other))
            buf[at:at] = other[start : start + rng.randint(1, 64)]
    return bytes(buf)


def case(rng: random.Random) -> tuple[bytes, Callable[[], Any]]:
    model = onnx.ModelProto()
    model.CopyFrom(rng.choice(SEEDS))
    _mutate(model, rng)
    data = _bytes_mutation(model.SerializeToString(), rng)
    path = WORK / "eval.onnx"
    path.write_bytes(data)
    names = sorted({n for node in model.graph.node for n in node.output} | {"wout", "loss", "y", "xw"})
    outputs = rng.sample(names, min(len(names), rng.randint(1, 2))) if names else ["y"]

    def call() -> None:
        plan = plan_export(path, CKPT, outputs)
        if rng.random() < 0.3:
            out = WORK / "out.onnx"
            write_model(plan.model, plan.initializers, str(out), limit=rng.choice([256, 4096, 2**31 - 1]))
            onnx.load_model_from_string(out.read_bytes())  # an ONNX model again (parsing only)

    return data, call


if __name__ == "__main__":
    run("export_models", case)
