"""examples/federated_average.py runs end to end: fleet -> validated average -> ONNX model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ortckpt

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

from tests.helpers.paths import REPO  # noqa: E402

EXAMPLE = REPO / "examples" / "federated_average.py"


def test_federated_example(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--devices", "12", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "accepted 12 of 16 uploads" in proc.stdout
    for name in ("truncated.ckpt", "garbage.ckpt", "diverged.ckpt", "old_app_version.ckpt"):
        assert name in proc.stdout
    assert "inference matches the averaged weights" in proc.stdout
    averaged = ortckpt.load(tmp_path / "global.ckpt")
    model = onnx.load(str(tmp_path / "global.onnx"))
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert sorted(weights) == sorted(averaged.parameters)
    for name, p in averaged.parameters.items():
        assert np.array_equal(weights[name], p.data), name
    assert ortckpt.load(tmp_path / "nominal.ckpt").is_nominal
