"""ORT adapter files (``ortckpt.to_adapter`` / ``from_adapter``, ``ortckpt export-adapter``,
``ortckpt inspect`` of ``.onnx_adapter``) without ORT: round trips, selection, the rules ORT
applies, and malformed or hostile input (every truncation, byte changes, special files), which must
raise ortckpt's exceptions (or OSError for the OS) only. Proof against the real onnxruntime is in
tests/ort/test_ort_adapters.py; the core's own tests and the ``adapter_bytes`` fuzz target attack
the reader further.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import ortckpt
import ortckpt.deploy.adapters
from ortckpt import CheckpointError, DuplicateNameError, InvalidCheckpointError, TensorDataError

ARRAYS = {
    "layer10.lora_A": np.arange(12, dtype=np.float32).reshape(3, 4),
    "layer2.lora_B": np.linspace(-1, 1, 8).astype(np.float16).reshape(4, 2),
    "base.weight": np.full((2, 2), 3, dtype=np.int64),
    "empty": np.zeros((0, 5), dtype=np.float64),
}


def _state() -> ortckpt.CheckpointState:
    return ortckpt.CheckpointState(ARRAYS, properties={"epoch": 3})


def _same(state: ortckpt.CheckpointState, arrays: dict[str, np.ndarray]) -> None:
    got = state.to_numpy()
    assert set(got) == set(arrays)
    for name, expected in arrays.items():
        assert got[name].dtype == expected.dtype and got[name].shape == expected.shape, name
        assert got[name].tobytes() == expected.tobytes(), name


def test_round_trip_from_a_state_and_from_a_saved_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "a.onnx_adapter"
    assert ortckpt.to_adapter(_state(), out, adapter_version=5, model_version=-2) == sorted(ARRAYS)
    back = ortckpt.from_adapter(out)
    _same(back, ARRAYS)
    assert dict(back.properties) == {"adapter_version": 5, "model_version": -2}
    assert all(p.trainable for p in back.parameters.values())
    # From a checkpoint file, versions carried by the properties from_adapter set.
    ortckpt.save(back, tmp_path / "c.ckpt")
    ortckpt.to_adapter(tmp_path / "c.ckpt", tmp_path / "b.onnx_adapter")
    assert (tmp_path / "b.onnx_adapter").read_bytes() == out.read_bytes()
    # From the file's bytes: the same state.
    _same(ortckpt.from_adapter(out.read_bytes()), ARRAYS)


def test_selection_by_glob_or_names(tmp_path: Path) -> None:
    out = tmp_path / "a.onnx_adapter"
    assert ortckpt.to_adapter(_state(), out, parameters="*lora*") == ["layer10.lora_A", "layer2.lora_B"]
    assert set(ortckpt.from_adapter(out).parameters) == {"layer10.lora_A", "layer2.lora_B"}
    assert ortckpt.to_adapter(_state(), out, parameters=["empty", "base.weight"]) == ["empty", "base.weight"]
    with pytest.raises(ValueError, match="no parameter matches"):
        ortckpt.to_adapter(_state(), out, parameters="nothing*")
    with pytest.raises(ValueError, match="no parameter 'missing'"):
        ortckpt.to_adapter(_state(), out, parameters=["missing"])
    with pytest.raises(ValueError, match="int32"):
        ortckpt.to_adapter(_state(), out, adapter_version=2**31)


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.array(1.5, dtype=np.float32), "scalar"),
        (np.array([True, False]), "bool"),
        (np.array([1 + 2j], dtype=np.complex64), "complex"),
        (np.array(["a"], dtype=object), "strings"),
    ],
)
def test_what_ort_refuses_is_refused_and_nothing_is_written(
    tmp_path: Path, array: np.ndarray, message: str
) -> None:
    out = tmp_path / "a.onnx_adapter"
    with pytest.raises(TensorDataError, match=message) as info:
        ortckpt.to_adapter(ortckpt.CheckpointState({"x": array}), out)
    assert info.value.tensor == "x"
    assert not out.exists() and os.listdir(tmp_path) == []


def test_a_nominal_checkpoint_has_no_values() -> None:
    nominal = ortckpt.to_nominal(_state())
    with pytest.raises(ValueError, match="nominal"):
        ortckpt.to_adapter(nominal, "unused.onnx_adapter")


def _expect_ours(data: bytes) -> None:
    """``from_adapter`` on ``data``, then every parameter's values (lazy: made when used),
    succeed or raise a CheckpointError; anything else (a PanicException, IndexError, numpy's
    ValueError) fails the test."""
    try:
        state = ortckpt.from_adapter(data)
        for param in state.parameters.values():
            assert param.data.nbytes == param.nbytes
    except CheckpointError:
        return
    except BaseException as e:  # a PanicException is not an Exception
        pytest.fail(f"{type(e).__name__} instead of a CheckpointError: {e}")


def test_every_truncation_and_byte_change_raises_ours(tmp_path: Path) -> None:
    ortckpt.to_adapter(_state(), tmp_path / "a.onnx_adapter")
    data = (tmp_path / "a.onnx_adapter").read_bytes()
    for n in range(len(data)):
        _expect_ours(data[:n])
    rng = np.random.default_rng(7)
    for at in range(len(data)):
        for value in {0, 0xFF, 0x80, data[at] ^ 1, int(rng.integers(256))}:
            changed = bytearray(data)
            changed[at] = value
            _expect_ours(bytes(changed))


def test_specific_malformations_name_the_problem(tmp_path: Path) -> None:
    ortckpt.to_adapter(ortckpt.CheckpointState({"w": np.ones(2, np.float32)}), tmp_path / "a.onnx_adapter")
    data = bytearray((tmp_path / "a.onnx_adapter").read_bytes())
    with pytest.raises(InvalidCheckpointError, match="not an ORT adapter file"):
        ortckpt.from_adapter(b"\0" * 4)
    # A checkpoint is not an adapter, and the message says what it is (tests/test_file_kinds.py).
    ortckpt.save(_state(), tmp_path / "c.ckpt")
    with pytest.raises(
        InvalidCheckpointError, match=r"not an ORT adapter file .*: it is an ORT training checkpoint"
    ):
        ortckpt.from_adapter(tmp_path / "c.ckpt")
    # The values' length prefix (4 bytes before the last 8 bytes of values) no longer matches.
    data[-12:-8] = (4).to_bytes(4, "little")
    with pytest.raises(TensorDataError, match="needs 8 bytes") as info:
        ortckpt.from_adapter(bytes(data))
    assert info.value.tensor == "w"


def test_ort_written_layout_duplicate_names_are_refused() -> None:
    # Two parameters named alike: patch the second name of a file with "wa" and "wb".
    state = ortckpt.CheckpointState({"wa": np.ones(1, np.float32), "wb": np.ones(1, np.float32)})
    data = ortckpt.deploy.adapters._serialize(state, None, None, None)[0]
    twice = data.replace(b"wb\0", b"wa\0")
    with pytest.raises(DuplicateNameError):
        ortckpt.from_adapter(twice)


def test_special_files_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.onnx_adapter"
    os.mkfifo(fifo)
    result: list[BaseException] = []

    def read() -> None:
        try:
            ortckpt.from_adapter(fifo)
        except BaseException as e:
            result.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "from_adapter blocked on a FIFO"
    assert isinstance(result[0], OSError) and "FIFO" in str(result[0]), result
    with pytest.raises(OSError, match="directory"):
        ortckpt.from_adapter(tmp_path)
    with pytest.raises(OSError):
        ortckpt.from_adapter(tmp_path / "missing.onnx_adapter")


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ortckpt", *argv], capture_output=True, text=True)


def test_cli_export_and_inspect(tmp_path: Path) -> None:
    ortckpt.save(_state(), tmp_path / "m.ckpt")
    out = tmp_path / "u.onnx_adapter"
    dry = _cli("export-adapter", str(tmp_path / "m.ckpt"), str(out), "--parameters", "*lora*", "-n", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["parameters"] == ["layer10.lora_A", "layer2.lora_B"] and not out.exists()
    done = _cli(
        "export-adapter",
        str(tmp_path / "m.ckpt"),
        str(out),
        "--parameters",
        "*lora*",
        "--adapter-version",
        "4",
    )
    assert done.returncode == 0 and "ORT adapter of 2 parameters" in done.stdout, done.stderr
    shown = _cli("inspect", str(out), "--json", "--values", "2")
    report = json.loads(shown.stdout)
    assert (report["format"], report["adapter_version"], report["model_version"]) == ("onnx_adapter", 4, 0)
    assert [p["name"] for p in report["parameters"]] == ["layer2.lora_B", "layer10.lora_A"]
    assert report["parameters"][1]["values"] == [0.0, 1.0]
    text = _cli("inspect", str(out))
    assert (
        "ORT adapter, adapter_version 4" in text.stdout and "layer10.lora_A  float32  [3, 4]" in text.stdout
    )
    bad = _cli("export-adapter", str(tmp_path / "m.ckpt"), str(out), "--parameters", "none*")
    assert bad.returncode == 2 and "no parameter matches" in bad.stderr and "Traceback" not in bad.stderr
    out.write_bytes(b"TORT" * 3)
    broken = _cli("inspect", str(out))
    assert broken.returncode == 2 and "corrupt ORT adapter" in broken.stderr, broken.stderr
