"""Format version 1 (ORT 1.16-1.17): writing it, and malformed version 1 files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ortckpt

DATA = Path(__file__).parent / "data"


def v1_bytes() -> bytes:
    state = ortckpt.load(DATA / "mlp_adamw_with_optimizer.ckpt")
    return ortckpt.serialize(state, format_version=1)


def test_version_1_is_version_2_with_another_version_number(tmp_path: Path) -> None:
    state = ortckpt.load(DATA / "mlp_adamw_with_optimizer.ckpt")
    v1, v2 = ortckpt.serialize(state, format_version=1), ortckpt.serialize(state)
    assert len(v1) == len(v2) and sum(a != b for a, b in zip(v1, v2)) == 1
    loaded = ortckpt.load_bytes(v1)
    assert loaded.version == 1
    ortckpt.save(loaded, tmp_path / "again.ckpt")  # re-saved as version 2 unless asked
    assert ortckpt.load(tmp_path / "again.ckpt").version == 2


def test_refused_as_version_1(tmp_path: Path) -> None:
    nominal = ortckpt.load(DATA / "mlp_nominal.ckpt")
    with pytest.raises(
        ortckpt.CheckpointError, match="nominal checkpoint cannot be written as format version 1"
    ):
        ortckpt.save(nominal, tmp_path / "n.ckpt", format_version=1)
    assert not (tmp_path / "n.ckpt").exists()
    state = ortckpt.CheckpointState({"w": np.ones(64, np.float32)})
    with pytest.raises(ortckpt.CheckpointError, match=r"format version 1 .*cannot hold external data"):
        ortckpt.save(state, tmp_path / "x.ckpt", format_version=1, external_data_threshold=0)
    for version in (0, 3):
        with pytest.raises(ortckpt.CheckpointError, match=f"format version {version}"):
            ortckpt.serialize(state, format_version=version)


@pytest.mark.parametrize("cut", [0, 4, 8, 12, 40, -200, -9, -1])
def test_truncated_version_1_files(cut: int) -> None:
    data = v1_bytes()
    with pytest.raises(ortckpt.CheckpointError):
        ortckpt.load_bytes(data[:cut])


def test_corrupted_version_1_files() -> None:
    data = v1_bytes()
    rng = np.random.default_rng(1)
    refused = 0
    for _ in range(300):
        broken = bytearray(data)
        for pos in rng.integers(0, len(data), size=3):
            broken[pos] ^= int(rng.integers(1, 256))
        try:
            state = ortckpt.load_bytes(bytes(broken))
            for p in state.parameters.values():
                _ = p.data  # values are checked when used
        except ortckpt.CheckpointError:
            refused += 1
    assert refused > 0  # every outcome is a state or one of our exceptions, never a crash
