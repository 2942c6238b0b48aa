"""Every method and option of ``average`` on a real Dask cluster of three worker processes
(``distributed.LocalCluster`` on 127.0.0.1, started and stopped here) equals the local engine on
the same uploads, hostile ones among them: the same verdicts, kinds and diagnostics, and the same
aggregate — bit for bit, except where clipping scales the updates by their norms (the norms are
sums over the model that the cluster adds range by range, in another order: within rounding)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState

pytest.importorskip("distributed")
from tests.helpers.dask_cluster import process_cluster

N = 14
SHAPES = {"fc.weight": (40, 300), "fc.bias": (40,), "head": (7, 3)}


def write_fleet(folder: Path) -> tuple[list[Any], Path]:
    rng = np.random.default_rng(11)
    base = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    global_path = folder / "global.ckpt"
    ortckpt.save(CheckpointState(base, properties={"n": 1}), global_path)
    sources: list[Any] = []
    for i in range(N):
        values = {k: (v + rng.standard_normal(v.shape) * 0.1).astype(np.float32) for k, v in base.items()}
        if i == 3:  # an attacker far from the others
            values = {k: v + 50.0 for k, v in values.items()}
        path = folder / f"dev{i:02d}.ckpt"
        ortckpt.save(CheckpointState(values, properties={"n": int(rng.integers(1, 50))}), path)
        sources.append(str(path) if i % 4 else CheckpointState(values, properties={"n": 3}).to_bytes())
    nan = {k: np.full(s, np.nan, np.float32) for k, s in SHAPES.items()}
    (folder / "nan.ckpt").write_bytes(CheckpointState(nan, properties={"n": 1}).to_bytes())
    (folder / "garbage.ckpt").write_bytes(b"not a checkpoint at all")
    hostile = [
        str(folder / "nan.ckpt"),
        str(folder / "garbage.ckpt"),
        str(folder / "missing.ckpt"),
        sources[1],
    ]
    return sources[:7] + hostile + sources[7:], global_path


CASES: list[tuple[str, dict[str, Any], bool]] = [  # (id, options, bit-exact)
    ("median", {"method": "median"}, True),
    ("trimmed", {"method": "trimmed_mean", "trim": 0.2}, True),
    ("krum", {"method": "krum", "byzantine": 2}, True),
    ("multi_krum", {"method": "multi_krum", "byzantine": 2, "keep": 5}, True),
    ("bulyan", {"method": "bulyan", "byzantine": 2}, True),
    ("fedavg-relative", {"method": "fedavg", "relative_to": "GLOBAL", "weights": "n"}, True),
    (
        "median-relative-noise",
        {"method": "median", "relative_to": "GLOBAL", "noise_multiplier": 0.5, "clip_norm": 1e9, "seed": 5},
        True,
    ),
    (
        "fedavg-clip-noise",
        {
            "method": "fedavg",
            "relative_to": "GLOBAL",
            "clip_norm": 2.0,
            "noise_multiplier": 1.0,
            "seed": 3,
            "weights": "n",
        },
        False,
    ),
    ("krum-clip", {"method": "krum", "byzantine": 1, "relative_to": "GLOBAL", "clip_norm": 3.0}, False),
]


@pytest.fixture(scope="module")
def cluster():
    with process_cluster(n_workers=3) as client:
        yield client


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_method_on_a_cluster_equals_the_local_engine(
    tmp_path: Path, cluster: Any, case: Any, monkeypatch: pytest.MonkeyPatch
):
    import ortckpt.federated._dask as dask_engine

    def not_here(*args: Any) -> Any:
        raise AssertionError("the round fell back to one worker")

    monkeypatch.setattr(dask_engine, "_exact_on_one_worker", not_here)
    _, options, exact = case
    sources, global_path = write_fleet(tmp_path)
    kw = {k: (str(global_path) if v == "GLOBAL" else v) for k, v in options.items()}
    local = ortckpt.average(sources, **kw)
    remote = ortckpt.average(sources, engine=cluster, chunk_bytes=1 << 16, **kw)
    assert remote.engine == "dask"
    assert [(r.client, r.kind) for r in remote.sources] == [(r.client, r.kind) for r in local.sources]
    kinds = sorted(r.kind or "" for r in local.rejected)
    assert kinds == ["duplicate", "non-finite", "unreadable", "unreadable"], kinds
    assert [r.selected for r in remote.sources] == [r.selected for r in local.sources]
    assert [r.clipped for r in remote.sources] == [r.clipped for r in local.sources]
    for a, b in zip(local.sources, remote.sources):
        for field in ("norm", "distance", "krum_score"):
            x, y = getattr(a, field), getattr(b, field)
            assert (x is None) == (y is None)
            if x is not None:
                assert np.isclose(x, y, rtol=1e-9), (field, a.client, x, y)
    for name in SHAPES:
        x = local.state.parameters[name].data
        y = remote.state.parameters[name].data
        if exact:
            np.testing.assert_array_equal(x, y, err_msg=name)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_file_changed_between_the_check_and_the_passes_fails_the_round(
    tmp_path: Path, cluster: Any, monkeypatch: pytest.MonkeyPatch
):
    """The range tasks open each file again and refuse one that is not the version checked."""
    sources, _ = write_fleet(tmp_path)
    victim = Path(sources[1])
    import ortckpt.federated._dask as dask_engine

    real_spans = dask_engine._spans

    def spans_then_vandal(total: int, pieces: int) -> list[tuple[int, int]]:
        # every upload is checked and admitted by now; the passes have not started: the victim
        # is rewritten in place (same inode, still finite values)
        data = bytearray(victim.read_bytes())
        data[-8:] = bytes(8)
        victim.write_bytes(bytes(data))
        return real_spans(total, pieces)

    monkeypatch.setattr(dask_engine, "_spans", spans_then_vandal)
    with pytest.raises(ortckpt.CheckpointChangedError, match=victim.name):
        ortckpt.average(sources, method="median", engine=cluster)


def test_an_upload_that_could_overflow_runs_the_round_exactly_on_one_worker(tmp_path: Path, cluster: Any):
    huge = np.full(3, 1.5e308, np.float64)
    values = {"a": huge, "b": huge, "c": -huge / 2, "d": huge / 2, "e": np.ones(3)}
    paths = []
    for name, w in values.items():
        paths.append(str(tmp_path / f"{name}.ckpt"))
        ortckpt.save(CheckpointState({"w": w, "v": np.ones(2, np.float32)}), paths[-1])
    local = ortckpt.average(paths, method="median")
    remote = ortckpt.average(paths, method="median", engine=cluster)
    assert [(r.client, r.kind) for r in remote.sources] == [(r.client, r.kind) for r in local.sources]
    assert [r.kind for r in local.sources] == [None, "overflow", None, None, None]
    np.testing.assert_array_equal(local.state.parameters["w"].data, remote.state.parameters["w"].data)
