"""ortckpt.compat without ORT: what the parity suite (tests/ort/test_compat_parity.py) cannot see,
the link to the wrapped ortckpt state, and the differences docs/compat.md lists."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ortckpt
from ortckpt.compat import CheckpointState, CompatError

DATA = Path(__file__).parent / "data"


def test_writes_reach_the_wrapped_state_and_the_file(tmp_path: Path) -> None:
    state = CheckpointState.load_checkpoint(DATA / "mlp_adamw_with_optimizer.ckpt")
    before = state.parameters["fc1.weight"].data.copy()
    state.parameters["fc1.weight"].data[0, 0] = 42.0
    state.parameters["fc2.bias"] = np.ones(3, np.float32)
    state.parameters["fc1.bias"].copy_from(np.zeros(8, np.float32))
    inner = state.ortckpt_state
    assert inner.parameters["fc1.weight"].data[0, 0] == 42.0
    assert np.array_equal(inner.parameters["fc1.weight"].data[1:], before[1:])
    assert np.array_equal(inner.parameters["fc2.bias"].data, np.ones(3, np.float32))
    out = tmp_path / "out.ckpt"
    CheckpointState.save_checkpoint(state, out, include_optimizer_state=True)
    again = ortckpt.load(out)
    assert again.parameters["fc1.weight"].data[0, 0] == 42.0
    assert not again.parameters["fc1.bias"].data.any()
    assert again.optimizer is not None and again.optimizer["group0"].step > 0
    CheckpointState.save_checkpoint(state, out)  # ORT's default: no optimizer state
    assert ortckpt.load(out).optimizer is None


def test_errors_are_runtime_errors_with_a_cause(tmp_path: Path) -> None:
    with pytest.raises(CompatError) as info:
        CheckpointState.load_checkpoint(tmp_path / "missing.ckpt")
    assert isinstance(info.value, RuntimeError) and isinstance(info.value.__cause__, FileNotFoundError)
    (tmp_path / "bad.ckpt").write_bytes(b"\x00" * 32)
    with pytest.raises(RuntimeError) as info2:
        CheckpointState.load_checkpoint(tmp_path / "bad.ckpt")
    assert isinstance(info2.value.__cause__, ortckpt.InvalidCheckpointError)
    state = CheckpointState.load_checkpoint(DATA / "mlp_adamw_with_optimizer.ckpt")
    with pytest.raises(RuntimeError, match="shape mismatch"):
        state.parameters["fc1.bias"] = np.zeros(3, np.float32)
    with pytest.raises(RuntimeError, match="type mismatch"):
        state.parameters["fc1.bias"].data = np.zeros(8, np.float64)
    with pytest.raises(UnicodeDecodeError):
        state.properties["p"] = b"\xff"


def test_reads_old_releases() -> None:
    pytest.importorskip("onnx")
    folder = CheckpointState.load_checkpoint(DATA / "ort115" / "adamw_trained")
    assert [name for name, _ in folder.parameters] == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    assert dict(folder.properties) == {"best": 0.25, "epoch": 3, "note": "héllo"}


def test_repr_works() -> None:
    state = CheckpointState.load_checkpoint(DATA / "mlp_adamw_with_optimizer.ckpt")
    assert repr(state.parameters) == "['fc1.bias', 'fc1.weight', 'fc2.bias', 'fc2.weight']"
    state.properties["zz"] = 1
    state.properties["aa"] = 2
    names = repr(state.properties)
    assert names == repr(sorted(name for name, _ in state.properties)) and "'aa'" in names
