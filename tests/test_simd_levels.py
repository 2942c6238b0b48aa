"""Every SIMD level gives the same results, bit for bit, and ``ORTCKPT_SIMD`` sets the level.

The core decides its level once per process (``rust/core/src/simd.rs``: the CPU's features capped
by ``ORTCKPT_SIMD``), so each level runs in a fresh interpreter over the same uploads: FedAvg read
whole and streamed (the decoder's scan and scaled addition), median and trimmed mean over few
uploads (the sorting network) and over many (the counting selection, float32 tiles and float64
ones), for float32, float64, float16 and bfloat16 tensors, and columns of signed zeros (equal
values of two bit patterns).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, _native

LEVELS = ["plain", "avx2", "avx512"]
UPLOADS = 40  # past the 32 the sorting networks serve

# Runs in a fresh interpreter: every result's bytes into an npz, and the level in use.
CHILD = r"""
import json, os, sys
import numpy as np
import ortckpt
from ortckpt import _native

folder, out = sys.argv[1], sys.argv[2]
paths = sorted(os.path.join(folder, n) for n in os.listdir(folder))
results = {}
runs = [
    ("fedavg", {}, paths),
    ("median", {}, paths),
    ("median", {}, paths[:12]),
    ("trimmed_mean", {"trim": 0.1}, paths),
    ("trimmed_mean", {"trim": 0.2}, paths[:12]),
]
for method, options, chosen in runs:
    report = ortckpt.average(chosen, method=method, **options)
    for name, param in report.state.parameters.items():
        results[f"{method}-{len(chosen)}-{options}-{name}"] = np.asarray(param.data).view(np.uint8)
os.environ["ORTCKPT_STREAM_MIN_BYTES"] = "0"  # FedAvg again, streamed
report = ortckpt.average(paths)
for name, param in report.state.parameters.items():
    results[f"streamed-{name}"] = np.asarray(param.data).view(np.uint8)
np.savez(out, **results)
print(json.dumps(_native.simd_level()))
"""


@pytest.fixture(scope="module")
def uploads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("uploads")
    rng = np.random.default_rng(30)
    for i in range(UPLOADS):
        values = rng.standard_normal(3001)
        if i % 9 == 4:
            values = values * 1e4  # an outlier upload
        params = {
            "f32": values.astype(np.float32),
            "f64": values[::-1].copy(),
            "f16": (values / 4).astype(np.float16),
            "bf16": values.astype(ml_dtypes.bfloat16),
            "repeated": np.full(257, 0.5 if i % 2 else -0.5, np.float32),
            # equal values of two bit patterns: the levels agree on which one a column keeps
            "zeros": np.where(rng.random(313) < 0.5, -0.0, 0.0).astype(np.float32),
        }
        ortckpt.save(CheckpointState(params), folder / f"dev{i:02d}.ckpt")
    return folder


def _run(uploads: Path, out: Path, level: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("ORTCKPT_SIMD", "ORTCKPT_STREAM_MIN_BYTES")}
    if level is not None:
        env["ORTCKPT_SIMD"] = level
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(uploads), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    level_used: str = json.loads(done.stdout.strip().splitlines()[-1])
    return level_used


def test_every_level_gives_the_same_results_and_the_override_takes_effect(
    uploads: Path, tmp_path: Path
) -> None:
    cpu = _run(uploads, tmp_path / "cpu.npz", None)
    assert cpu in LEVELS
    runs = {"cpu": cpu}
    for level in ("plain", "avx2", "avx512", "no-such-level"):
        runs[level] = _run(uploads, tmp_path / f"{level}.npz", level)
    # an override caps the CPU's level, never raises it; a value naming no level runs the plain loops
    assert runs["plain"] == "plain"
    assert runs["no-such-level"] == "plain"
    assert runs["avx2"] == min("avx2", cpu, key=LEVELS.index)
    assert runs["avx512"] == cpu
    want = np.load(tmp_path / "plain.npz")
    assert len(want.files) == 6 * 6, want.files  # runs x tensors
    for name in ("cpu", "avx2"):
        got = np.load(tmp_path / f"{name}.npz")
        assert got.files == want.files
        for key in want.files:
            assert np.array_equal(got[key], want[key]), f"{key}: {name} ({runs[name]}) differs from plain"


def test_this_process_reports_its_level() -> None:
    level = _native.simd_level()
    assert level in LEVELS
    if os.environ.get("ORTCKPT_SIMD", "").strip() == "plain":
        assert level == "plain"
