"""FedAvg over large models streams each upload's values through a small buffer instead of
reading the upload whole (``rust/core/src/aggregate/stream.rs``). ``ORTCKPT_STREAM_MIN_BYTES``
moves the threshold, so the same small uploads go both ways here: verdicts, reasons and results
must be identical, bit for bit, whatever the uploads hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, OptimizerGroup
from tests.helpers.io_counts import bytes_read, float32_uploads

EVERYTHING = "0"  # stream every model
NOTHING = str(1 << 62)  # stream none


def upload(seed: int, **changes: Any) -> CheckpointState:
    rng = np.random.default_rng(seed)
    params: dict[str, Any] = {
        "w": rng.standard_normal((300, 257)).astype(np.float32),  # several pieces of 32 Ki lanes
        "h": rng.standard_normal(1000).astype(np.float16),
        "b": rng.standard_normal(77).astype(ml_dtypes.bfloat16),
        "c": (rng.standard_normal(50) + 1j * rng.standard_normal(50)).astype(np.complex64),
        "d": rng.standard_normal(9),
    }
    params.update(changes)
    states = {"w": {"momentum0": rng.standard_normal((300, 257)).astype(np.float32)}}
    return CheckpointState(
        params,
        frozen={"table": np.arange(5, dtype=np.int64)},
        properties={"samples": seed + 1},
        optimizer={"g": OptimizerGroup(step=seed, initial_learning_rate=0.1, states=states)},
    )


def write_fleet(folder: Path) -> list[str]:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((300, 257)).astype(np.float32)
    nan_late = w.copy()
    nan_late[-1, -1] = np.nan  # in the last piece of the first tensor
    fleet: dict[str, CheckpointState] = {
        "a": upload(1),
        "b": upload(2),
        "nan-late": upload(3, w=nan_late),
        "inf-half": upload(4, h=np.full(1000, np.inf, np.float16)),
        "c": upload(5),
        "huge": upload(6, d=np.full(9, 1.5e307)),  # x weight 7: finite
        "huge-too": upload(7, d=np.full(9, 1.5e307)),  # x weight 8, added: beyond float64
        "shape": upload(8, b=np.zeros(78, ml_dtypes.bfloat16)),
        "d": upload(9),
    }
    paths = []
    for i, (name, state) in enumerate(fleet.items()):
        path = folder / f"{name}.ckpt"
        # every other upload keeps its values in an external data file
        ortckpt.save(state, path, external_data_threshold=0 if i % 2 else None)
        paths.append(str(path))
    paths.insert(3, paths[0])  # the same upload twice
    paths.append(str(folder / "never-uploaded.ckpt"))
    (folder / "garbage.ckpt").write_bytes(b"ODTC" * 100)
    paths.append(str(folder / "garbage.ckpt"))
    return paths


def round_with(monkeypatch: pytest.MonkeyPatch, threshold: str, paths: list[str]) -> Any:
    monkeypatch.setenv("ORTCKPT_STREAM_MIN_BYTES", threshold)
    return ortckpt.average(
        paths, reference=paths[0], weights="samples", include_optimizer_state=True, method="fedavg"
    )


@pytest.mark.parametrize("copy_max", [None, "0"], ids=["sums-copied", "sums-never-copied"])
def test_streamed_rounds_equal_rounds_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy_max: str | None
):
    """``copy_max`` "0": sums too large to copy (``ORTCKPT_STREAM_COPY_MAX_BYTES``), as a
    GPT-2-Large round's: the first group is undone by zeroing, later ones checked first."""
    if copy_max is not None:
        monkeypatch.setenv("ORTCKPT_STREAM_COPY_MAX_BYTES", copy_max)
    paths = write_fleet(tmp_path)
    streamed = round_with(monkeypatch, EVERYTHING, paths)
    whole = round_with(monkeypatch, NOTHING, paths)
    verdicts = [(r.client, r.kind, r.reason, r.weight) for r in streamed.sources]
    assert verdicts == [(r.client, r.kind, r.reason, r.weight) for r in whole.sources]
    kinds = {Path(r.client).stem: r.kind for r in streamed.rejected}
    assert kinds == {
        "a": "duplicate",
        "nan-late": "non-finite",
        "inf-half": "non-finite",
        "huge-too": "overflow",
        "shape": "shape",
        "never-uploaded": "unreadable",
        "garbage": "unreadable",
    }, kinds
    assert [Path(r.client).stem for r in streamed.accepted] == ["a", "b", "c", "huge", "d"]
    for name, p in whole.state.parameters.items():
        got = streamed.state.parameters[name].data
        assert got.tobytes() == p.data.tobytes(), name
    mom = streamed.state.optimizer["g"].states["w"]["momentum0"]
    assert mom.tobytes() == whole.state.optimizer["g"].states["w"]["momentum0"].tobytes()
    # and the values are the weighted mean of the accepted uploads (weights: samples = seed + 1)
    accepted = {1: upload(1), 2: upload(2), 5: upload(5), 6: upload(6, d=np.full(9, 1.5e307)), 9: upload(9)}
    weights = np.array([s + 1 for s in accepted], np.float64)
    stack = np.stack([s.parameters["w"].data.astype(np.float64) for s in accepted.values()])
    want = (np.tensordot(weights, stack, 1) / weights.sum()).astype(np.float32)
    np.testing.assert_allclose(streamed.state.parameters["w"].data, want, rtol=1e-6)


@pytest.mark.parametrize(
    "options",
    [
        {"method": "median"},
        {"method": "trimmed_mean", "trim": 0.2},
        {"method": "krum", "byzantine": 1},
        {"method": "multi_krum", "byzantine": 1, "keep": 3},
        {"method": "median", "clip_norm": 50.0},
    ],
    ids=["median", "trimmed_mean", "krum", "multi_krum", "median-clipped"],
)
def test_robust_rounds_check_streamed_uploads_as_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
):
    """The robust methods' check of a streamed model reads each upload piece by piece (never
    whole): the same verdicts, diagnostics and result as reading it whole."""
    paths = write_fleet(tmp_path)
    got = []
    for threshold in (EVERYTHING, NOTHING):
        monkeypatch.setenv("ORTCKPT_STREAM_MIN_BYTES", threshold)
        report = ortckpt.average(paths, reference=paths[0], include_optimizer_state=True, **options)
        got.append(report)
    streamed, whole = got
    assert [(r.client, r.kind, r.reason) for r in streamed.sources] == [
        (r.client, r.kind, r.reason) for r in whole.sources
    ]
    assert "non-finite" in {r.kind for r in streamed.rejected}
    for a, b in zip(streamed.accepted, whole.accepted, strict=True):
        assert (a.norm, a.clipped, a.distance, a.krum_score, a.selected) == (
            b.norm,
            b.clipped,
            b.distance,
            b.krum_score,
            b.selected,
        )
    for name, p in whole.state.parameters.items():
        assert streamed.state.parameters[name].data.tobytes() == p.data.tobytes(), name


@pytest.mark.parametrize("copy_max", [None, "0"], ids=["sums-copied", "sums-never-copied"])
def test_a_streamed_round_of_one_group_reads_each_upload_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy_max: str | None
):
    """The first group of a round adds into sums nothing was added into yet: it is read once,
    checked as it is added, whether or not the sums are small enough to copy (a GPT-2-Large
    round of 6 uploads is one pass). The first upload, the reference, is read once too."""
    monkeypatch.setenv("ORTCKPT_STREAM_MIN_BYTES", EVERYTHING)
    if copy_max is not None:
        monkeypatch.setenv("ORTCKPT_STREAM_COPY_MAX_BYTES", copy_max)
    paths, size = float32_uploads(tmp_path, seed=2)
    ortckpt.average(paths[:2])  # what a round imports is read before the count starts
    before = bytes_read()
    report = ortckpt.average(paths)
    read = bytes_read() - before
    assert len(report.accepted) == 5
    assert size <= read < size + (1 << 20), (read, size)
