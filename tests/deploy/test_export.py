"""``export_for_inference`` and ``ortckpt export-inference`` without ORT: what is kept and dropped,
every data type through the streamed writer, external data, subgraphs, the errors (each naming the
file, the value and the remedy) and the CLI. The rules themselves are checked against ORT 1.19.2's
``export_model_for_inferencing`` in tests/ort/test_ort_export.py; models are run here by onnx's
reference evaluator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointError, TensorDataError
from ortckpt.cli import main
from ortckpt.deploy._export import plan_export
from ortckpt.formats._onnx_write import ALIGNMENT, write_model

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from tests.helpers.checks import promptly  # noqa: E402

RNG = np.random.default_rng(19)
W = RNG.standard_normal((3, 2)).astype(np.float32)
B = RNG.standard_normal(2).astype(np.float32)
C = np.array([0.5, -2.0], np.float32)


def _vi(name: str, elem: int, shape: list[Any]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _eval_model(
    path: Path, *, w_shape: list[Any] | None = None, c_external: str | None = None, c_input: bool = False
) -> Path:
    """An eval model as generate_artifacts lays one out: y = (x·w + b) * c, loss = mean((y -
    target)^2); inputs x, target, then the parameters w, b; c is a constant initializer."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["lin"]),
        helper.make_node("Mul", ["lin", "c"], ["y"]),
        helper.make_node("Sub", ["y", "target"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
    ]
    c = numpy_helper.from_array(C, "c")
    if c_external is not None:
        (path.parent / "c.bin").write_bytes(C.tobytes())
        c.ClearField("raw_data")
        c.data_location = TensorProto.EXTERNAL
        for key, value in (("location", c_external), ("offset", "0"), ("length", "8")):
            entry = c.external_data.add()
            entry.key, entry.value = key, value
    graph = helper.make_graph(
        nodes,
        "linear",
        [
            _vi("x", TensorProto.FLOAT, ["batch", 3]),
            _vi("target", TensorProto.FLOAT, ["batch", 2]),
            _vi("w", TensorProto.FLOAT, w_shape or [3, 2]),
            _vi("b", TensorProto.FLOAT, [2]),
            *([_vi("c", TensorProto.FLOAT, [2])] if c_input else []),
        ],
        [_vi("loss", TensorProto.FLOAT, []), _vi("y", TensorProto.FLOAT, ["batch", 2])],
        [c],
        value_info=[_vi("lin", TensorProto.FLOAT, ["batch", 2]), _vi("sq", TensorProto.FLOAT, ["batch", 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    model.metadata_props.add(key="origin", value="test")
    path.write_bytes(model.SerializeToString())
    return path


def _ckpt(path: Path, **params: Any) -> Path:
    arrays = {"w": W, "b": B, "unrelated": np.ones(4, np.int32)}
    arrays.update(params)
    frozen = {k: v for k, v in arrays.items() if k != "w" and v is not None}
    ortckpt.save(
        ortckpt.CheckpointState({"w": arrays["w"]} if arrays["w"] is not None else {}, frozen=frozen), path
    )
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return _eval_model(tmp_path / "eval_model.onnx"), _ckpt(tmp_path / "trained.ckpt")


def _run(model: onnx.ModelProto, **feeds: Any) -> list[Any]:
    return list(ReferenceEvaluator(model).run(None, feeds))


def test_only_what_the_outputs_need_is_kept(files: tuple[Path, Path], tmp_path: Path) -> None:
    eval_model, ckpt = files
    out = tmp_path / "model.onnx"
    assert ortckpt.export_for_inference(eval_model, ckpt, ["y"], out) == [str(out)]
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    g = model.graph
    assert [v.name for v in g.input] == ["x"]  # target (used by the loss only) is gone
    assert [o.name for o in g.output] == ["y"]
    assert [n.op_type for n in g.node] == ["MatMul", "Add", "Mul"]
    assert [t.name for t in g.initializer] == ["c", "w", "b"]  # own first, then parameters
    for t, expected in zip(g.initializer, (C, W, B)):
        assert t.HasField("raw_data") and not t.doc_string
        assert numpy_helper.to_array(t).tobytes() == expected.tobytes()
    assert [v.name for v in g.value_info] == ["lin"]  # "sq" belonged to the loss
    assert (model.ir_version, model.metadata_props[0].value, g.name) == (9, "test", "linear")
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(model, x=x)[0], (x @ W + B) * C, rtol=1e-6)


def test_outputs_in_the_order_given_and_the_loss_keeps_its_labels(files: tuple[Path, Path]) -> None:
    eval_model, ckpt = files
    model = ortckpt.export_for_inference(eval_model, ckpt, ["y", "loss", "lin"])
    assert [o.name for o in model.graph.output] == ["y", "loss", "lin"]
    assert model.graph.output[2].type.tensor_type.elem_type == TensorProto.FLOAT  # from value_info
    assert [v.name for v in model.graph.input] == ["x", "target"]
    x, t = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal((2, 2)).astype(np.float32)
    y, loss, _ = _run(model, x=x, target=t)
    np.testing.assert_allclose(loss, np.mean((y - t) ** 2), rtol=1e-6)
    # an intermediate value without a declared type: derived from the declared ones (x, w)
    typed = ortckpt.export_for_inference(eval_model, ckpt, ["xw"]).graph.output[0]
    assert typed == _vi("xw", TensorProto.FLOAT, ["batch", 2])


@pytest.mark.parametrize(
    ("node", "inputs", "expected"),
    [
        (("MatMul", ["a", "b"]), [["batch", 1, 4], [3, 4, 5]], [3, 1, 5]),
        (("MatMul", ["a", "v"]), [["n", 4], [4]], ["n"]),
        (("Add", ["a", "b"]), [["batch", 1], [3]], ["batch", 3]),
        (("Mul", ["a", "b"]), [["n", 1], ["m", 1]], [None, 1]),
        (("Sum", ["a", "b", "c"]), [[2, 1], [1, 3], ["k", 2, 1]], ["k", 2, 3]),
        (("Relu", ["a"]), [["batch", 0]], ["batch", 0]),
        (("Gemm", ["a", "b"]), [[4, "k"], [5, "k"]], [4, 5]),
    ],
)
def test_undeclared_output_types_are_derived(
    node: tuple[str, list[str]], inputs: list[Any], expected: Any
) -> None:
    """As ONNX's inference functions derive them (multidirectional broadcasting, numpy's matmul)."""
    from ortckpt.deploy._export_types import Deriver, value_info

    op, names = node
    declared = [_vi(n, TensorProto.FLOAT, shape) for n, shape in zip(["a", "b", "c"], inputs)]
    if "v" in names:
        declared = [declared[0], _vi("v", TensorProto.FLOAT, inputs[1])]
    attrs = {"transB": 1} if op == "Gemm" else {}
    graph = helper.make_graph([helper.make_node(op, names, ["out"], **attrs)], "g", declared, [])
    typed = value_info("out", Deriver(graph).type_of("out"))
    assert typed == _vi("out", TensorProto.FLOAT, expected)


def test_output_types_that_cannot_be_derived_are_refused_by_name(tmp_path: Path) -> None:
    model = onnx.load(_eval_model(tmp_path / "e.onnx"))
    model.graph.node.append(helper.make_node("Transpose", ["xw"], ["t"]))
    model.graph.node.append(helper.make_node("Cast", ["t"], ["c16"], to=TensorProto.FLOAT16))
    model.graph.node.append(helper.make_node("Add", ["x", "w"], ["bad"]))  # [batch, 3] + [3, 2]
    (tmp_path / "e.onnx").write_bytes(model.SerializeToString())
    ckpt = _ckpt(tmp_path / "t.ckpt")
    for name, why in (
        ("t", "produced by a Transpose node"),
        ("c16", "Transpose"),
        ("bad", "do not broadcast"),
    ):
        with pytest.raises(ortckpt.ModelError, match=f"output {name!r}") as info:
            ortckpt.export_for_inference(tmp_path / "e.onnx", ckpt, [name])
        assert why in str(info.value)


def test_returned_model_is_the_written_one(files: tuple[Path, Path], tmp_path: Path) -> None:
    eval_model, ckpt = files
    returned = ortckpt.export_for_inference(eval_model, ckpt, ["loss", "y"])
    ortckpt.export_for_inference(eval_model, ckpt, ["loss", "y"], tmp_path / "m.onnx")
    written = onnx.load(tmp_path / "m.onnx")
    assert written.SerializeToString(deterministic=True) == returned.SerializeToString(deterministic=True)
    # from a ModelProto and a loaded state too
    again = ortckpt.export_for_inference(onnx.load(eval_model), ortckpt.load(ckpt), ["loss", "y"])
    assert again.SerializeToString(deterministic=True) == returned.SerializeToString(deterministic=True)


def test_external_data_over_the_limit(files: tuple[Path, Path], tmp_path: Path) -> None:
    """The writer's 2 GiB decision, at a lower limit: tensors of 1 KiB or more go to OUT.data at
    aligned offsets, smaller ones stay in the model; onnx loads the pair as the in-memory model."""
    eval_model = _eval_model(tmp_path / "wide.onnx", w_shape=[3, "n"])
    w = RNG.standard_normal((3, 700)).astype(np.float32)
    ckpt = _ckpt(tmp_path / "wide.ckpt", w=w, unrelated=None)
    plan = plan_export(eval_model, ckpt, ["y"])
    out = tmp_path / "model.onnx"
    assert write_model(plan.model, plan.initializers, str(out), limit=4096)
    stored = onnx.load(out, load_external_data=False)
    where = {
        t.name: {e.key: e.value for e in t.external_data} for t in stored.graph.initializer if t.external_data
    }
    assert list(where) == ["w"] and where["w"]["location"] == "model.onnx.data"  # c, b: 8 bytes each
    assert int(where["w"]["offset"]) % ALIGNMENT == 0 and int(where["w"]["length"]) == w.nbytes
    loaded = onnx.load(out)
    expected = ortckpt.export_for_inference(eval_model, ckpt, ["y"])
    assert {t.name: numpy_helper.to_array(t).tobytes() for t in loaded.graph.initializer} == {
        t.name: numpy_helper.to_array(t).tobytes() for t in expected.graph.initializer
    }
    # fits: one file again, and a stale OUT.data is left alone (nothing refers to it)
    assert not write_model(plan.model, plan.initializers, str(out))
    assert onnx.load(out).SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True
    )


DTYPED = {
    "f16": np.array([[1.5, -0.0], [np.inf, 65504]], np.float16),
    "bf16": np.array([1.0, -3.5], ml_dtypes.bfloat16),
    "f64": np.array(np.pi),
    "i8": np.array([-128, 127], np.int8),
    "u64": np.array([2**64 - 1], np.uint64),
    "flag": np.array([True, False, True]),
    "empty": np.zeros((0, 3), np.float32),
    "words": np.array(["héllo", "", "🚀"]),
}


def test_every_data_type_streams_bit_exact(tmp_path: Path) -> None:
    """Parameters exported as outputs themselves: the values the file holds are the checkpoint's."""
    inputs = [_vi("x", TensorProto.FLOAT, [1])]
    state = ortckpt.CheckpointState(DTYPED)
    for name, p in state.parameters.items():
        inputs.append(_vi(name, p.data_type, list(p.shape)))
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["x_out"])],
        "types",
        inputs,
        [_vi("x_out", TensorProto.FLOAT, [1])],
    )
    helper_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    (tmp_path / "types.onnx").write_bytes(helper_model.SerializeToString())
    ortckpt.save(state, tmp_path / "types.ckpt")
    names = ["x_out", *DTYPED]
    ortckpt.export_for_inference(
        tmp_path / "types.onnx", tmp_path / "types.ckpt", names, tmp_path / "out.onnx"
    )
    model = onnx.load(tmp_path / "out.onnx")
    onnx.checker.check_model(model)
    assert [o.name for o in model.graph.output] == names
    got = {t.name: t for t in model.graph.initializer}
    for name, expected in DTYPED.items():
        t = got[name]
        assert list(t.dims) == list(expected.shape), name
        if name == "words":
            assert [s.decode() for s in t.string_data] == list(expected)
        else:
            assert t.raw_data == expected.tobytes(), name


def test_subgraph_outer_values_count_as_used(tmp_path: Path) -> None:
    then_graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["t"])], "then", [], [_vi("t", TensorProto.FLOAT, [2])]
    )
    else_graph = helper.make_graph(
        [helper.make_node("Identity", ["v"], ["e"])], "else", [], [_vi("e", TensorProto.FLOAT, [2])]
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["sel"], then_branch=then_graph, else_branch=else_graph)],
        "branches",
        [
            _vi("cond", TensorProto.BOOL, []),
            _vi("w", TensorProto.FLOAT, [2]),
            _vi("v", TensorProto.FLOAT, [2]),
        ],
        [_vi("sel", TensorProto.FLOAT, [2])],
    )
    path = tmp_path / "if.onnx"
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    v = np.array([3.0, 4.0], np.float32)
    ortckpt.save(ortckpt.CheckpointState({"w": B, "v": v}), tmp_path / "if.ckpt")
    model = ortckpt.export_for_inference(path, tmp_path / "if.ckpt", ["sel"])
    assert [t.name for t in model.graph.initializer] == ["w", "v"]
    np.testing.assert_array_equal(_run(model, cond=np.array(False))[0], v)


def test_an_initializer_listed_as_input_stops_being_an_input(tmp_path: Path) -> None:
    """As in ORT: only the inputs that are not initializers are looked at, and set as the inputs."""
    eval_model = _eval_model(tmp_path / "overridable.onnx", c_input=True)
    model = ortckpt.export_for_inference(eval_model, _ckpt(tmp_path / "t.ckpt"), ["y"])
    assert [v.name for v in model.graph.input] == ["x"]
    assert [t.name for t in model.graph.initializer] == ["c", "w", "b"]


def test_own_initializers_in_external_data(tmp_path: Path) -> None:
    eval_model = _eval_model(tmp_path / "ext.onnx", c_external="c.bin")
    ckpt = _ckpt(tmp_path / "t.ckpt")
    model = ortckpt.export_for_inference(eval_model, ckpt, ["y"])
    c = model.graph.initializer[0]
    assert c.name == "c" and not c.external_data and numpy_helper.to_array(c).tobytes() == C.tobytes()
    with pytest.raises(ValueError, match="pass it as a path"):
        ortckpt.export_for_inference(onnx.load(eval_model, load_external_data=False), ckpt, ["y"])
    escaping = _eval_model(tmp_path / "escape.onnx", c_external="../c.bin")
    with pytest.raises(ortckpt.ExternalDataError, match=r"c\.bin"):
        ortckpt.export_for_inference(escaping, ckpt, ["y"])


def _error(files: tuple[Path, Path], tmp_path: Path, kind: type[Exception], match: str, **kwargs: Any) -> str:
    eval_model, ckpt = files
    args = {"output_names": ["y"], **kwargs}
    out = tmp_path / "never.onnx"
    with pytest.raises(kind, match=match) as caught:
        ortckpt.export_for_inference(
            args.pop("eval_model", eval_model), args.pop("checkpoint", ckpt), out=out, **args
        )
    assert not out.exists() and not (tmp_path / "never.onnx.data").exists()
    return str(caught.value)


def test_output_errors(files: tuple[Path, Path], tmp_path: Path) -> None:
    msg = _error(files, tmp_path, ValueError, "no value named 'logits'", output_names=["y", "logits"])
    assert str(files[0]) in msg and "['loss', 'y']" in msg
    _error(files, tmp_path, ValueError, "empty", output_names=[])
    _error(files, tmp_path, ValueError, "'y' is given more than once", output_names=["y", "y"])
    _error(files, tmp_path, TypeError, "list of names", output_names="y")
    msg = _error(files, tmp_path, ValueError, "not an ONNX model", eval_model=files[1])
    assert msg.startswith(str(files[1]))


def test_checkpoint_errors(files: tuple[Path, Path], tmp_path: Path) -> None:
    eval_model, ckpt = files
    ortckpt.save(ortckpt.to_nominal(ortckpt.load(ckpt)), tmp_path / "nominal.ckpt")
    _error(files, tmp_path, CheckpointError, "nominal", checkpoint=tmp_path / "nominal.ckpt")

    lacks_b = _ckpt(tmp_path / "lacks_b.ckpt", b=None)
    msg = _error(files, tmp_path, ValueError, "has no parameter 'b'", checkpoint=lacks_b)
    assert str(lacks_b) in msg and str(eval_model) in msg and "user_inputs" in msg
    # named as a user input, b stays an input of the inference model
    model = ortckpt.export_for_inference(eval_model, lacks_b, ["y"], user_inputs=["x", "target", "b"])
    assert [v.name for v in model.graph.input] == ["x", "b"]

    other = tmp_path / "other.ckpt"
    ortckpt.save(ortckpt.CheckpointState({"fc.weight": W}), other)
    _error(files, tmp_path, ValueError, "none of the eval model's inputs", checkpoint=other)

    wrong_type = _ckpt(tmp_path / "f64.ckpt", w=W.astype(np.float64))
    msg = _error(
        files, tmp_path, TensorDataError, "parameter 'w' is float32 in the eval model", checkpoint=wrong_type
    )
    assert "float64" in msg and str(wrong_type) in msg
    wrong_shape = _ckpt(tmp_path / "t.ckpt", w=W.T.copy())
    _error(
        files,
        tmp_path,
        TensorDataError,
        r"'w' has shape \[3, 2\] in the eval model but \[2, 3\]",
        checkpoint=wrong_shape,
    )


def test_symbolic_dims_take_any_size(tmp_path: Path) -> None:
    eval_model = _eval_model(tmp_path / "sym.onnx", w_shape=[3, "n"])
    ckpt = _ckpt(tmp_path / "sym.ckpt", w=np.ones((3, 2), np.float32))
    assert [t.name for t in ortckpt.export_for_inference(eval_model, ckpt, ["y"]).graph.initializer] == [
        "c",
        "w",
        "b",
    ]


def test_user_inputs_errors(files: tuple[Path, Path], tmp_path: Path) -> None:
    _error(files, tmp_path, ValueError, "'image', which is not an input", user_inputs=["image"])
    _error(files, tmp_path, ValueError, "'w', which is a parameter", user_inputs=["x", "w"])
    _error(files, tmp_path, ValueError, "'target' is neither in user_inputs", user_inputs=["x"])


def test_special_destinations_are_refused_without_blocking(files: tuple[Path, Path], tmp_path: Path) -> None:
    eval_model, ckpt = files
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    error = promptly(lambda: ortckpt.export_for_inference(eval_model, ckpt, ["y"], fifo), 10)
    assert isinstance(error, OSError) and "FIFO" in str(error), error
    error = promptly(lambda: ortckpt.export_for_inference(fifo, ckpt, ["y"]), 10)
    assert isinstance(error, OSError), error
    assert isinstance(
        promptly(lambda: ortckpt.export_for_inference(eval_model, ckpt, ["y"], tmp_path), 10), OSError
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval_model.onnx", "pipe.onnx", "trained.ckpt"]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_cli(files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    eval_model, ckpt = files
    out = tmp_path / "model.onnx"
    args = ["export-inference", str(eval_model), str(ckpt), str(out)]
    status, text, err = _cli(capsys, *args, "--output", "y", "-n", "--json")
    assert status == 0, err
    report = json.loads(text)
    assert not out.exists() and report["dry_run"] and report["external_data"] is False
    assert (report["inputs"], report["outputs"], report["parameters"]) == (["x"], ["y"], ["w", "b"])
    status, text, err = _cli(capsys, *args, "--output", "y", "--output", "loss")
    assert status == 0, err
    assert f"wrote {out}: 6 nodes, 2 parameters of {ckpt} as initializers" in text
    assert "inputs:  x, target" in text and "outputs: y, loss" in text
    assert [o.name for o in onnx.load(out).graph.output] == ["y", "loss"]
    status, text, err = _cli(capsys, *args, "--output", "logits")
    assert status == 2 and "no value named 'logits'" in err and "Traceback" not in err
    lacks_b = _ckpt(tmp_path / "lacks_b.ckpt", b=None)
    user = ["export-inference", str(eval_model), str(lacks_b), str(out), "--output", "y"]
    status, text, err = _cli(capsys, *user, "--user-input", "x", "target", "b")
    assert status == 0 and "inputs:  x, b" in text, err
    status, text, err = _cli(capsys, *args)
    assert status == 2 and "--output" in err


MiB = 1 << 20
MEMORY_CHILD = """
import sys, threading, time
import numpy as np
import ortckpt

def anon():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise KeyError("RssAnon")

eval_model, ckpt, out = sys.argv[1:4]
peak, done = [0], threading.Event()

def sample():
    while not done.is_set():
        peak[0] = max(peak[0], anon())
        time.sleep(0.002)

import onnx, onnx.external_data_helper, onnx.shape_inference  # what the export imports
before = anon()
sampler = threading.Thread(target=sample)
sampler.start()
ortckpt.export_for_inference(eval_model, ckpt, ["y"], out)
done.set()
sampler.join()
print(peak[0] - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc/self/status (RssAnon)")
def test_values_are_not_copied_in_memory(tmp_path: Path) -> None:
    """A 256 MiB parameter goes from the checkpoint's mapping to the file without a copy in memory:
    the process's private memory (sampled every 2 ms in a subprocess) grows by far less."""
    n = 256 * MiB // 4
    eval_model = _eval_model(tmp_path / "big.onnx", w_shape=[3, "n"])
    ortckpt.save(
        ortckpt.CheckpointState({"w": np.ones((3, n // 3), np.float32)}, frozen={"b": B}),
        tmp_path / "big.ckpt",
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            MEMORY_CHILD,
            str(eval_model),
            str(tmp_path / "big.ckpt"),
            str(tmp_path / "m.onnx"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    grew = int(proc.stdout.strip().splitlines()[-1])
    assert grew < 48 * MiB, f"exporting 256 MiB of values grew private memory by {grew / MiB:.0f} MiB"
    assert (tmp_path / "m.onnx").stat().st_size > 256 * MiB


def test_a_failed_write_leaves_the_previous_model(files: tuple[Path, Path], tmp_path: Path) -> None:
    """The checkpoint is rewritten in place after it was loaded: its values are checked when they
    are written, the export fails, and the previous model is left whole with no temporary file."""
    eval_model, ckpt = files
    out = tmp_path / "model.onnx"
    out.write_bytes(b"previous")
    state = ortckpt.load(ckpt)
    data = bytearray(ckpt.read_bytes())
    with open(ckpt, "r+b") as f:  # the same bytes but one, in place
        data[-1] ^= 1
        f.write(data)
    with pytest.raises(ortckpt.CheckpointChangedError, match=str(ckpt)):
        ortckpt.export_for_inference(eval_model, state, ["y"], out)
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval_model.onnx", "model.onnx", "trained.ckpt"]
