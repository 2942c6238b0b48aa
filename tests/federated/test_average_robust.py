"""The robust methods and update hygiene of ``average`` against Flower as the oracle: on the same
uploads (hostile ones included: scaled up, sign-flipped, near-duplicates) each method equals
``flwr.server.strategy.aggregate``'s function, and clipping equals Flower's fixed clipping, within
the documented rounding (float64 throughout, one rounding to the parameter's dtype)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState
from ortckpt.cli import main

flower = pytest.importorskip(
    "flwr.server.strategy.aggregate", reason="flwr (requirements-dev.txt) is not installed"
)
flower_dp = pytest.importorskip(
    "flwr.supercore.differential_privacy", reason="this flwr has no fixed clipping"
)

SHAPES = {"fc.weight": (12, 9), "fc.bias": (9,), "head": (3, 3, 2)}
N = 12
F = 2  # byzantine uploads tolerated (Bulyan: N >= 4F + 3)


def fleet(seed: int = 0) -> tuple[list[CheckpointState], CheckpointState]:
    """N uploads around a global model: honest ones, one scaled up, one sign-flipped, and two
    near-duplicates of an honest one; each with its sample count as property ``n``."""
    rng = np.random.default_rng(seed)
    base = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    uploads = []
    for i in range(N):
        params = {k: (v + 0.1 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in base.items()}
        if i == 3:
            params = {k: (v * 100).astype(np.float32) for k, v in params.items()}  # scaled up
        if i == 5:
            params = {k: -v for k, v in params.items()}  # sign-flipped
        if i in (7, 8):
            params = {
                k: (v + 1e-6 * (i - 6) * np.ones_like(v)).astype(np.float32)
                for k, v in uploads[6].trainable_parameters.items()
                for v in [v.data]
            }
        uploads.append(CheckpointState(params, frozen={"ids": np.arange(4)}, properties={"n": i + 1}))
    return uploads, CheckpointState(base, frozen={"ids": np.arange(4)}, properties={"n": 1})


def as_flower(states: list[CheckpointState]) -> list[tuple[list[np.ndarray], int]]:
    """Flower's input: each upload's trainable layers widened exactly to float64, its sample count."""
    return [
        ([np.asarray(s.parameters[k].data, np.float64) for k in SHAPES], int(s.properties["n"]))
        for s in states
    ]


def assert_close(report: ortckpt.AggregationReport, want: list[np.ndarray], exact: bool) -> None:
    """Ours (float64, rounded once to float32) against Flower's float64 rounded the same way: equal
    bit for bit when both compute the same float64 operations (median, Krum's pick), else within one
    float32 unit in the last place (sums in another order: trimmed mean, means)."""
    for k, w in zip(SHAPES, want, strict=True):
        got = report.state.parameters[k].data
        expect = np.asarray(w).astype(np.float32)
        assert got.shape == expect.shape
        if exact:
            np.testing.assert_array_equal(got, expect, err_msg=k)
        else:
            ulp = np.spacing(np.abs(expect))
            assert np.all(np.abs(got.astype(np.float64) - expect) <= ulp), k


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 2048])  # one chunk per tensor / many chunks
def test_each_method_equals_flower(chunk_bytes: int):
    uploads, _ = fleet()
    results = as_flower(uploads)
    run = lambda **kw: ortckpt.average(uploads, weights="n", chunk_bytes=chunk_bytes, **kw)  # noqa: E731
    assert_close(run(method="median"), flower.aggregate_median(results), exact=True)
    for trim in (0.1, 0.2, 0.25, 0.3):  # int(trim * 12) = 1, 2, 3, 3: Flower's rounding down
        assert_close(
            run(method="trimmed_mean", trim=trim), flower.aggregate_trimmed_avg(results, trim), exact=True
        )
    krum = run(method="krum", byzantine=F)
    assert_close(krum, flower.aggregate_krum(results, F, 0), exact=True)
    for keep in (1, 4, N - F):
        multi = run(method="multi_krum", byzantine=F, keep=keep)
        assert_close(multi, flower.aggregate_krum(results, F, keep), exact=False)
        assert sum(bool(s.selected) for s in multi.sources) == keep
    bulyan = run(method="bulyan", byzantine=F)
    assert_close(
        bulyan, flower.aggregate_bulyan(list(results), F, flower.aggregate_krum, to_keep=0), exact=False
    )
    plain = ortckpt.average(uploads, weights="n")
    assert_close(plain, flower.aggregate(results), exact=False)
    assert_close(run(method="fedavg", clip_norm=1e9), flower.aggregate(results), exact=False)


@pytest.mark.parametrize("count", [33, 64, 201])
def test_many_uploads_equal_flower(tmp_path: Path, count: int):
    """Past the sorting networks (more than 32 uploads) the median and trimmed mean select by
    counting (rust/core/src/aggregate/select.rs): the same values as Flower's on uploads read
    from files, with hostile uploads, repeated values (a frozen-looking tensor, exact
    duplicates) and signed zeros among them."""
    rng = np.random.default_rng(count)
    base = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    paths: list[Path] = []
    made: list[dict[str, np.ndarray]] = []
    for i in range(count):
        params = {k: (v + 0.1 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in base.items()}
        if i % 7 == 3:
            params = {k: v * 1000 for k, v in params.items()}  # scaled up
        if i % 11 == 5:
            params = {k: -v for k, v in params.items()}  # sign-flipped
        params["fc.bias"] = base["fc.bias"].copy()  # every upload the same: constant columns
        params["head"][0] = np.float32(0.0) if i % 2 else np.float32(-0.0)
        if i % 5 == 0 and made:
            params = {k: v.copy() for k, v in made[-1].items()}  # an exact duplicate's values
        made.append(params)
        path = tmp_path / f"dev{i:03d}.ckpt"
        ortckpt.save(CheckpointState(params, properties={"n": i + 1}), path)
        paths.append(path)
    results = [
        ([np.asarray(s.parameters[k].data, np.float64) for k in SHAPES], int(s.properties["n"]))
        for s in (ortckpt.load(p) for p in paths)
    ]
    median = ortckpt.average(paths, method="median")
    assert not median.rejected
    assert_close(median, flower.aggregate_median(results), exact=True)
    for trim in (0.0, 0.1, 0.3):
        got = ortckpt.average(paths, method="trimmed_mean", trim=trim)
        assert_close(got, flower.aggregate_trimmed_avg(results, trim), exact=False)


def test_krum_scores_and_the_hostile_uploads_in_the_report():
    uploads, _ = fleet()
    report = ortckpt.average(uploads, method="krum", byzantine=F)
    scores = [s.krum_score for s in report.sources]
    assert all(isinstance(x, float) for x in scores)
    # Flower's scores, recomputed: the scaled-up and sign-flipped uploads score worst
    flat = [np.concatenate([a.ravel() for a in layers]) for layers, _ in as_flower(uploads)]
    d = np.array([[np.sum((a - b) ** 2) for b in flat] for a in flat])
    want = [np.sum(d[i, np.argsort(d[i])[1 : N - F - 2 + 1]]) for i in range(N)]
    np.testing.assert_allclose(scores, want, rtol=1e-9)
    worst = sorted(range(N), key=lambda i: -scores[i])[:2]
    assert set(worst) == {3, 5}
    assert not report.sources[3].selected and not report.sources[5].selected
    norms = [s.norm for s in report.sources]
    assert int(np.argmax(norms)) == 3
    distances = [s.distance for s in report.sources]
    assert int(np.argmax(distances)) == 3 and distances[int(np.argmin(scores))] == 0.0


def test_clipping_equals_flowers_fixed_clipping():
    uploads, global_state = fleet()
    clip = 0.5
    flower_results = []
    global_layers = [np.asarray(global_state.parameters[k].data, np.float64) for k in SHAPES]
    for layers, n in as_flower(uploads):
        flower_dp.compute_clip_model_update(layers, global_layers, clip)
        flower_results.append((layers, n))
    want = flower.aggregate(flower_results)
    report = ortckpt.average(uploads, weights="n", relative_to=global_state, clip_norm=clip)
    assert_close(report, want, exact=False)
    assert all(s.clipped for s in report.sources)  # every update is longer than 0.5
    deltas = [
        np.sqrt(sum(np.sum((layers[j] - global_layers[j]) ** 2) for j in range(len(SHAPES))))
        for layers, _ in as_flower(uploads)
    ]
    np.testing.assert_allclose([s.norm for s in report.sources], deltas, rtol=1e-12)
    loose = ortckpt.average(uploads, weights="n", relative_to=global_state, clip_norm=1e6)
    assert not any(s.clipped for s in loose.sources)
    # robust methods on clipped updates: the median of Flower's clipped models
    med = ortckpt.average(uploads, method="median", relative_to=global_state, clip_norm=clip)
    assert_close(med, flower.aggregate_median(flower_results), exact=False)


def test_central_noise_is_seeded_and_scaled():
    uploads, global_state = fleet()
    kw: dict[str, Any] = {"relative_to": global_state, "clip_norm": 0.5}
    clean = ortckpt.average(uploads, **kw).state.parameters["fc.weight"].data.astype(np.float64)
    noisy = [
        ortckpt.average(uploads, noise_multiplier=4.0, seed=s, **kw).state.parameters["fc.weight"].data
        for s in (1, 1, 2)
    ]
    np.testing.assert_array_equal(noisy[0], noisy[1])
    assert not np.array_equal(noisy[0], noisy[2])
    std = 4.0 * 0.5 / N  # Flower's compute_stdv: noise_multiplier * clip_norm / clients
    spread = np.std(noisy[0].astype(np.float64) - clean)
    assert 0.6 * std < spread < 1.4 * std


def test_caller_mistakes_and_rejections_on_the_streamed_path():
    uploads, _ = fleet()
    with pytest.raises(ValueError, match="method must be one of"):
        ortckpt.average(uploads, method="mean")
    with pytest.raises(ValueError, match="trim"):
        ortckpt.average(uploads, method="trimmed_mean", trim=0.5)
    with pytest.raises(ValueError, match="4 \\* byzantine \\+ 3"):
        ortckpt.average(uploads[:6], method="bulyan", byzantine=1)
    with pytest.raises(ValueError, match="noise_multiplier needs clip_norm"):
        ortckpt.average(uploads, noise_multiplier=1.0)
    bad = CheckpointState({k: np.full(s, np.nan, np.float32) for k, s in SHAPES.items()}, properties={"n": 1})
    sources = {"bad-first": bad.to_bytes(), **{f"d{i}": u for i, u in enumerate(uploads)}, "junk": b"junk"}
    report = ortckpt.average(sources, method="median")
    assert [(r.client, r.kind) for r in report.rejected] == [
        ("bad-first", "non-finite"),
        ("junk", "unreadable"),
    ]
    assert report.reference == "d0" and report.method == "median"
    assert_close(report, flower.aggregate_median(as_flower(uploads)), exact=True)


def test_cli_method_and_json_diagnostics(tmp_path: Path, capsys):
    uploads, global_state = fleet()
    paths = []
    for i, u in enumerate(uploads):
        paths.append(str(tmp_path / f"d{i}.ckpt"))
        ortckpt.save(u, paths[-1])
    ortckpt.save(global_state, tmp_path / "global.ckpt")
    out = str(tmp_path / "new.ckpt")
    args = ["average", out, *paths, "--method", "krum", "--byzantine", str(F), "--json"]
    assert main([*args, "--relative-to", str(tmp_path / "global.ckpt"), "--clip-norm", "100"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["method"] == "krum" and data["accepted"] == N
    rows = data["sources"]
    assert all({"norm", "clipped", "distance", "krum_score", "selected"} <= set(r) for r in rows)
    assert sum(r["selected"] for r in rows) == 1 and not rows[3]["selected"]
