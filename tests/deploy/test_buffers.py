"""Device parameter buffers without ORT: ``parameters_to_buffer`` / ``parameters_from_buffer`` and
the ``to-buffer`` / ``from-buffer`` commands, on hand-made training graphs (the inputs are what
ORT's rule reads; tests/ort/test_ort_buffers.py checks the rule against ORT 1.19.2 itself).

Covered: graph-input order (not name or file order), ``trainable_only``, parameters outside the
graph, round trips, the reference left untouched, every refusal (length, dtype, model/checkpoint
mismatch, nominal states, non-float parameters, bad files) naming what is wrong, and the buffer
file read safely (FIFO, oversize, truncated, truncated after reading, rewritten in place while
read).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointError, CheckpointState, ConversionError, OptimizerGroup, TensorDataError
from ortckpt.cli import main

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

Arr = np.ndarray[Any, Any]
RNG = np.random.default_rng(5)
GRAD = "_grad.accumulation.buffer"


def _inputs(spec: list[tuple[str, int, list[Any]]]) -> list[Any]:
    return [helper.make_tensor_value_info(name, elem, dims) for name, elem, dims in spec]


def _model(path: pathlib.Path, spec: list[tuple[str, int, list[Any]]], initializers: list[Any] = ()) -> str:
    """A training graph's interface: ``spec`` are its inputs (name, ONNX type, dims), in order."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["loss"])],
        "training",
        _inputs(spec),
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        list(initializers),
    )
    onnx.save(helper.make_model(graph), path)
    return str(path)


F = TensorProto.FLOAT


def _values() -> dict[str, Arr]:
    return {
        "a.weight": RNG.standard_normal((2, 3)).astype(np.float32),
        "b": RNG.standard_normal(4).astype(np.float32),
        "m.frozen": RNG.standard_normal(5).astype(np.float32),
        "s": np.array(1.25, np.float32),
        "outside": RNG.standard_normal(3).astype(np.float32),
        "table": np.arange(6, dtype=np.int64),
    }


@pytest.fixture
def state() -> CheckpointState:
    v = _values()
    st = CheckpointState(
        {k: v[k] for k in ("a.weight", "b", "s", "outside")},
        frozen={k: v[k] for k in ("m.frozen", "table")},
        properties={"epoch": 3, "note": "x"},
        optimizer={"group0": OptimizerGroup(step=7, initial_learning_rate=1e-3)},
    )
    st.parameters["b"].doc_string = "bias"
    return st


# graph order differs from name order and from trainable-then-frozen order; "outside" and "table"
# are checkpoint parameters that are not graph inputs
ORDER = ["b", "m.frozen", "s", "a.weight"]


@pytest.fixture
def model(tmp_path: pathlib.Path) -> str:
    return _model(
        tmp_path / "training_model.onnx",
        [
            ("x", F, ["batch", 3]),
            ("b", F, [4]),
            ("m.frozen", F, [5]),
            ("s", F, []),
            ("a.weight", F, [2, 3]),
            ("b" + GRAD, F, [4]),
            ("s_grad", F, []),
            ("a.weight" + GRAD, F, [2, 3]),
            ("outside.other", F, [3]),
            ("lazy_reset_grad", TensorProto.BOOL, [1]),
        ],
    )


def _concat(st: CheckpointState, names: list[str]) -> Arr:
    return np.concatenate([st.parameters[n].data.reshape(-1) for n in names]).astype(np.float32)


def _same(a: Arr, b: Arr) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# -- order and content ------------------------------------------------------------------------------


def test_buffer_is_graph_input_order(state: CheckpointState, model: str) -> None:
    everything = ortckpt.parameters_to_buffer(state, model, trainable_only=False)
    assert _same(everything, _concat(state, ORDER))
    trainable = ortckpt.parameters_to_buffer(state, model)  # trainable_only=True by default
    assert _same(trainable, _concat(state, [n for n in ORDER if n != "m.frozen"]))
    assert everything.flags.writeable and everything.dtype == np.dtype("<f4")


def test_state_given_as_path(state: CheckpointState, model: str, tmp_path: pathlib.Path) -> None:
    ckpt = tmp_path / "s.ckpt"
    ortckpt.save(state, ckpt)
    assert _same(ortckpt.parameters_to_buffer(ckpt, model), ortckpt.parameters_to_buffer(state, model))


def test_model_given_as_modelproto(state: CheckpointState, model: str) -> None:
    proto = onnx.load(model)
    assert _same(ortckpt.parameters_to_buffer(state, proto), ortckpt.parameters_to_buffer(state, model))


@pytest.mark.parametrize("trainable_only", [True, False])
def test_round_trip_and_new_values(state: CheckpointState, model: str, trainable_only: bool) -> None:
    before = {n: p.data.copy() for n, p in state.parameters.items()}
    buf = ortckpt.parameters_to_buffer(state, model, trainable_only=trainable_only)
    same = ortckpt.parameters_from_buffer(buf, state, model, trainable_only=trainable_only)
    for name, p in state.parameters.items():
        assert _same(same.parameters[name].data, p.data), name
    new = RNG.standard_normal(buf.size).astype(np.float32)
    new[0] = np.nan  # values travel bit for bit, NaN included
    out = ortckpt.parameters_from_buffer(new, state, model, trainable_only=trainable_only)
    names = [n for n in ORDER if trainable_only is False or n != "m.frozen"]
    assert _same(_concat(out, names), new)
    assert _same(ortckpt.parameters_to_buffer(out, model, trainable_only=trainable_only), new)
    # not in the buffer: kept from the reference
    kept = ["outside", "table"] + (["m.frozen"] if trainable_only else [])
    for name in kept:
        assert _same(out.parameters[name].data, state.parameters[name].data), name
    # everything else of the reference kept; the reference unchanged
    assert {n: p.trainable for n, p in out.parameters.items()} == {
        n: p.trainable for n, p in state.parameters.items()
    }
    assert out.parameters["b"].doc_string == "bias"
    assert dict(out.properties) == {"epoch": 3, "note": "x"}
    assert out.optimizer is not None and out.optimizer["group0"].step == 7
    for name, data in before.items():
        assert _same(state.parameters[name].data, data), name
    # the new state does not share the caller's buffer
    new[1:] = 0
    assert not np.all(_concat(out, names)[1:] == 0)


def test_buffer_forms(state: CheckpointState, model: str, tmp_path: pathlib.Path) -> None:
    buf = ortckpt.parameters_to_buffer(state, model)
    want = ortckpt.parameters_from_buffer(buf, state, model)
    path = tmp_path / "buf.bin"
    buf.tofile(path)
    forms: list[Any] = [
        buf.tobytes(),
        bytearray(buf.tobytes()),
        memoryview(buf.tobytes()),
        buf.astype(">f4"),  # float32 in the other byte order: same values
        buf.reshape(1, -1),  # any shape: its elements in C order
        path,
        str(path),
    ]
    for form in forms:
        got = ortckpt.parameters_from_buffer(form, state, model)
        for name, p in want.parameters.items():
            assert _same(got.parameters[name].data, p.data), (type(form), name)


def test_nominal_reference_takes_shapes_from_the_model(tmp_path: pathlib.Path) -> None:
    v = _values()
    full = CheckpointState({"a.weight": v["a.weight"], "b": v["b"]}, frozen={"m.frozen": v["m.frozen"]})
    nominal = ortckpt.to_nominal(full)
    model = _model(
        tmp_path / "m.onnx",
        [
            ("a.weight", F, [2, 3]),
            ("m.frozen", F, [5]),
            ("b", F, [4]),
            ("a.weight" + GRAD, F, [2, 3]),
            ("b" + GRAD, F, [4]),
        ],
    )
    buf = ortckpt.parameters_to_buffer(full, model, trainable_only=False)
    out = ortckpt.parameters_from_buffer(buf, nominal, model, trainable_only=False)
    assert not out.is_nominal
    for name, p in full.parameters.items():
        assert _same(out.parameters[name].data, p.data), name
        assert out.parameters[name].trainable == p.trainable
    with pytest.raises(CheckpointError, match="trainable_only=False"):
        ortckpt.parameters_from_buffer(buf, nominal, model)
    with pytest.raises(CheckpointError, match="nominal"):
        ortckpt.parameters_to_buffer(nominal, model)
    # a nominal parameter the model does not have cannot get values
    extra = {"extra": np.zeros(2, np.float32)}
    more = ortckpt.to_nominal(
        CheckpointState(full.trainable_parameters, frozen={**full.frozen_parameters, **extra})
    )
    with pytest.raises(ConversionError, match="'extra'"):
        ortckpt.parameters_from_buffer(buf, more, model, trainable_only=False)


# -- refusals ---------------------------------------------------------------------------------------


def test_wrong_length_says_what_is_needed(state: CheckpointState, model: str) -> None:
    n_train = ortckpt.parameters_to_buffer(state, model).size
    n_all = ortckpt.parameters_to_buffer(state, model, trainable_only=False).size
    with pytest.raises(TensorDataError, match=f"holds {n_train + 1} float32 values .* needs {n_train}"):
        ortckpt.parameters_from_buffer(np.zeros(n_train + 1, np.float32), state, model)
    with pytest.raises(TensorDataError, match="trainable_only=False: pass that"):
        ortckpt.parameters_from_buffer(np.zeros(n_all, np.float32), state, model)
    with pytest.raises(TensorDataError, match="trainable_only=True: pass that"):
        ortckpt.parameters_from_buffer(np.zeros(n_train, np.float32), state, model, trainable_only=False)
    with pytest.raises(TensorDataError, match="not a whole number of float32"):
        ortckpt.parameters_from_buffer(b"\0" * (4 * n_train + 2), state, model)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.uint32])
def test_wrong_dtype(state: CheckpointState, model: str, dtype: Any) -> None:
    n = ortckpt.parameters_to_buffer(state, model).size
    with pytest.raises(TensorDataError, match="float32"):
        ortckpt.parameters_from_buffer(np.zeros(n, dtype), state, model)


def _mismatch(tmp_path: pathlib.Path, spec: list[tuple[str, int, list[Any]]]) -> str:
    return _model(tmp_path / "other.onnx", spec)


def test_model_that_is_not_the_checkpoints(state: CheckpointState, tmp_path: pathlib.Path) -> None:
    cases: list[tuple[list[tuple[str, int, list[Any]]], str]] = [
        ([("x", F, [3]), ("y", F, [3])], "none of its 2 graph inputs"),
        # the eval (or inference) model: parameters without gradient inputs
        ([("x", F, [3]), ("b", F, [4]), ("a.weight", F, [2, 3])], "'b' is trainable in the checkpoint"),
        ([("b", F, [4]), ("b" + GRAD, F, [4]), ("gone" + GRAD, F, [2])], "parameter 'gone'"),
        ([("m.frozen", F, [5]), ("m.frozen" + GRAD, F, [5])], "'m.frozen' is frozen in the checkpoint"),
        ([("b", F, [2, 2]), ("b" + GRAD, F, [2, 2])], r"'b' has shape \[4\] in the checkpoint but \[2, 2\]"),
        ([("b", F, ["n"]), ("b" + GRAD, F, ["n"])], "'b' has no fixed shape"),
        ([("b", TensorProto.DOUBLE, [4]), ("b" + GRAD, F, [4])], "'b' is float64 in the model"),
    ]
    for spec, message in cases:
        path = _mismatch(tmp_path, spec)
        with pytest.raises(ConversionError, match=message):
            ortckpt.parameters_to_buffer(state, path)
        with pytest.raises(ConversionError, match=message):
            ortckpt.parameters_from_buffer(np.zeros(4, np.float32), state, path)


def test_non_float_parameters_only_when_included(state: CheckpointState, tmp_path: pathlib.Path) -> None:
    # ORT's buffers are float32; a frozen int64 parameter is fine as long as it is left out
    path = _mismatch(tmp_path, [("b", F, [4]), ("table", TensorProto.INT64, [6]), ("b" + GRAD, F, [4])])
    assert _same(ortckpt.parameters_to_buffer(state, path), state.parameters["b"].data)
    with pytest.raises(ConversionError, match=r"'table' is int64 .* float32 parameters only"):
        ortckpt.parameters_to_buffer(state, path, trainable_only=False)


def test_initializers_are_not_inputs(state: CheckpointState, tmp_path: pathlib.Path) -> None:
    """ORT's graph inputs leave out those with an initializer of the same name."""
    init = onnx.numpy_helper.from_array(np.zeros(5, np.float32), "m.frozen")
    path = _model(tmp_path / "i.onnx", [("b", F, [4]), ("m.frozen", F, [5]), ("b" + GRAD, F, [4])], [init])
    assert _same(ortckpt.parameters_to_buffer(state, path, trainable_only=False), state.parameters["b"].data)


def test_bad_model_files(state: CheckpointState, tmp_path: pathlib.Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xff\xff\xff not a protobuf")
    with pytest.raises(ConversionError, match="not an ONNX model"):
        ortckpt.parameters_to_buffer(state, junk)
    with pytest.raises(FileNotFoundError):
        ortckpt.parameters_to_buffer(state, tmp_path / "missing.onnx")
    fifo = tmp_path / "fifo.onnx"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        ortckpt.parameters_to_buffer(state, fifo)  # refused, never a hang
    with pytest.raises(TypeError):
        ortckpt.parameters_to_buffer(state, 42)  # type: ignore[arg-type]


def test_buffer_files_are_not_trusted(state: CheckpointState, model: str, tmp_path: pathlib.Path) -> None:
    n_train = ortckpt.parameters_to_buffer(state, model).size
    n_all = ortckpt.parameters_to_buffer(state, model, trainable_only=False).size
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:  # a sparse 1 TiB file: refused from its size, never read
        f.truncate(1 << 40)
    with pytest.raises(TensorDataError, match=f"larger than the {4 * n_train} bytes"):
        ortckpt.parameters_from_buffer(big, state, model)
    short = tmp_path / "short.bin"
    short.write_bytes(b"\0" * (4 * n_train - 4))
    with pytest.raises(TensorDataError, match=f"holds {n_train - 1} float32 values"):
        ortckpt.parameters_from_buffer(short, state, model)
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\0" * (4 * n_train + 1))
    with pytest.raises(TensorDataError, match="not a whole number"):
        ortckpt.parameters_from_buffer(odd, state, model)
    # a file of the other mode's size gets the hint, not "too large"
    other = tmp_path / "other.bin"
    other.write_bytes(b"\0" * (4 * n_all))
    with pytest.raises(TensorDataError, match="trainable_only=False: pass that"):
        ortckpt.parameters_from_buffer(other, state, model)
    fifo = tmp_path / "fifo.bin"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        ortckpt.parameters_from_buffer(fifo, state, model)
    with pytest.raises(IsADirectoryError):
        ortckpt.parameters_from_buffer(tmp_path, state, model)


def test_buffer_file_is_read_into_memory(state: CheckpointState, model: str, tmp_path: pathlib.Path) -> None:
    """Truncating the file after the read cannot reach the new state (no mapping: no SIGBUS)."""
    path = tmp_path / "buf.bin"
    buf = RNG.standard_normal(ortckpt.parameters_to_buffer(state, model).size).astype(np.float32)
    buf.tofile(path)
    out = ortckpt.parameters_from_buffer(path, state, model)
    os.truncate(path, 0)
    assert _same(ortckpt.parameters_to_buffer(out, model), buf)


# -- the commands -----------------------------------------------------------------------------------


def test_cli_to_buffer(state: CheckpointState, model: str, tmp_path: pathlib.Path, capsys: Any) -> None:
    ckpt = tmp_path / "g.ckpt"
    ortckpt.save(state, ckpt)
    out = tmp_path / "p.bin"
    assert main(["to-buffer", str(ckpt), "--training-model", model, "-o", str(out)]) == 0
    assert out.read_bytes() == ortckpt.parameters_to_buffer(state, model).astype("<f4").tobytes()
    assert "wrote" in capsys.readouterr().out
    every = tmp_path / "all.bin"
    argv = ["to-buffer", str(ckpt), "--training-model", model, "--all-parameters", "-o", str(every), "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    want = ortckpt.parameters_to_buffer(state, model, trainable_only=False)
    assert report["values"] == want.size and report["trainable_only"] is False
    assert report["files"] == [{"path": str(every), "size": 4 * want.size}]
    assert np.array_equal(np.fromfile(every, "<f4"), want)
    dry = tmp_path / "dry.bin"
    assert main(["to-buffer", str(ckpt), "--training-model", model, "-o", str(dry), "-n"]) == 0
    assert not dry.exists()


def test_cli_from_buffer(state: CheckpointState, model: str, tmp_path: pathlib.Path, capsys: Any) -> None:
    ckpt = tmp_path / "g.ckpt"
    ortckpt.save(state, ckpt)
    n = ortckpt.parameters_to_buffer(state, model, trainable_only=False).size
    values = RNG.standard_normal(n).astype(np.float32)
    buf = tmp_path / "up.bin"
    values.tofile(buf)
    out = tmp_path / "device.ckpt"
    argv = ["from-buffer", str(buf), "--reference", str(ckpt), "--training-model", model, "-o", str(out)]
    assert main([*argv, "--all-parameters"]) == 0
    got = ortckpt.load(out)
    want = ortckpt.parameters_from_buffer(values, state, model, trainable_only=False)
    for name, p in want.parameters.items():
        assert _same(got.parameters[name].data, p.data), name
    assert dict(got.properties) == dict(state.properties)
    capsys.readouterr()
    # without --all-parameters the buffer is too long: exit 2, one line naming the sizes and remedy
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "trainable_only=False: pass that" in err


def test_cli_errors_are_one_line(state: CheckpointState, model: str, tmp_path: pathlib.Path) -> None:
    ckpt = tmp_path / "g.ckpt"
    ortckpt.save(state, ckpt)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    runs = [
        ["from-buffer", str(fifo), "--reference", str(ckpt), "--training-model", model, "-o", "x.ckpt"],
        ["to-buffer", str(ckpt), "--training-model", str(fifo), "-o", "x.bin"],
        ["to-buffer", str(ckpt), "-o", "x.bin"],  # --training-model is required
    ]
    for argv in runs:
        proc = subprocess.run(
            [sys.executable, "-m", "ortckpt", *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 2, (argv, proc.stderr)
        assert "Traceback" not in proc.stderr and "error:" in proc.stderr
    assert not (tmp_path / "x.ckpt").exists() and not (tmp_path / "x.bin").exists()


RACE = """
import os, sys, threading, time
import numpy as np
import ortckpt
from ortckpt import CheckpointError

path, model = sys.argv[1], sys.argv[2]
state = ortckpt.CheckpointState({"w": np.zeros((1000, 1000), np.float32)})
versions = [np.full(1_000_000, v, "<f4").tobytes() for v in (1.0, 2.0)]
stop = threading.Event()

def rewrite_in_place():  # truncate, then write in pieces: readers see every size in between
    i = 0
    while not stop.is_set():
        with open(path, "r+b") as f:
            f.truncate(0)
            data = versions[i % 2]
            for k in range(0, len(data), 1 << 19):
                f.write(data[k : k + (1 << 19)])
        i += 1
        time.sleep(0.002)  # whole files for a moment too

t = threading.Thread(target=rewrite_in_place)
t.start()
outcomes = {"state": 0, "refused": 0}
try:
    for _ in range(150):
        try:
            out = ortckpt.parameters_from_buffer(path, state, model)
        except CheckpointError:
            outcomes["refused"] += 1
            continue
        values = np.unique(out.parameters["w"].data)
        assert set(values.tolist()) <= {1.0, 2.0}, values
        outcomes["state"] += 1
finally:
    stop.set()
    t.join()
print(outcomes)
"""


def test_buffer_file_rewritten_while_read(tmp_path: pathlib.Path) -> None:
    """Another program truncating and rewriting the buffer file in place while it is read: every
    read gives a state of values that were in the file, or a CheckpointError; never a signal."""
    model = _model(tmp_path / "m.onnx", [("w", F, [1000, 1000]), ("w" + GRAD, F, [1000, 1000])])
    path = tmp_path / "buf.bin"
    np.full(1_000_000, 1.0, "<f4").tofile(path)
    proc = subprocess.run(
        [sys.executable, "-c", RACE, str(path), model],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcomes = eval(proc.stdout.strip().splitlines()[-1])
    assert outcomes["state"] + outcomes["refused"] == 150
