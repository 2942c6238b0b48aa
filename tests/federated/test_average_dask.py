"""``average(..., engine=client)`` on a real ``distributed.LocalCluster`` (TCP on loopback, in-process
workers, started and stopped here) over a fleet of 1000 generated device checkpoints: the same
verdicts as the local engine and the same result within the documented rounding (one unit in the
last place of each parameter's dtype: the cluster adds the float64 partial sums in another order)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ortckpt

pytest.importorskip("distributed")
from tests.helpers.dask_cluster import loopback_client

FLEET = 1000
BAD = {17: b"garbage", 423: b"", 999: None}  # index -> bytes written instead (None: NaN values)


def write_fleet(folder: Path) -> list[str]:
    rng = np.random.default_rng(3)
    paths = []
    for i in range(FLEET):
        path = folder / f"device{i:04d}.ckpt"
        paths.append(str(path))
        if i in BAD and BAD[i] is not None:
            path.write_bytes(BAD[i])
            continue
        w = rng.standard_normal((8, 4)).astype(np.float32)
        if i in BAD:
            w[0, 0] = np.nan
        state = ortckpt.CheckpointState(
            {"w": w, "b": rng.standard_normal(4).astype(np.float16)},
            frozen={"ids": np.arange(4, dtype=np.int32)},
            properties={"samples": int(rng.integers(1, 100))},
        )
        ortckpt.save(state, path)
    return paths


def test_dask_engine_matches_local(tmp_path: Path):
    paths = write_fleet(tmp_path)
    local = ortckpt.average(paths, tmp_path / "local.ckpt", weights="samples")
    with loopback_client(n_workers=2, threads_per_worker=1) as client:
        report = ortckpt.average(paths, tmp_path / "dask.ckpt", weights="samples", engine=client)
    assert report.engine == "dask" and local.engine == "local"
    assert [(r.index, r.client, r.accepted, r.kind, r.weight) for r in report.sources] == [
        (r.index, r.client, r.accepted, r.kind, r.weight) for r in local.sources
    ]
    assert sorted(r.index for r in report.rejected) == sorted(BAD)
    assert report.total_weight == local.total_weight
    a, b = ortckpt.load(tmp_path / "local.ckpt"), ortckpt.load(tmp_path / "dask.ckpt")
    for name in ("w", "b"):
        x, y = a.parameters[name].data, b.parameters[name].data
        assert x.dtype == y.dtype
        ulp = np.spacing(np.maximum(np.abs(x), np.abs(y)))
        assert np.all(np.abs(x.astype(np.float64) - y.astype(np.float64)) <= ulp), name
    assert a.parameters["ids"].data.tolist() == b.parameters["ids"].data.tolist()
    assert dict(a.properties) == dict(b.properties)


def test_dask_engine_bytes_and_no_reference():
    states = [ortckpt.CheckpointState({"w": np.full(3, i, np.float32)}) for i in range(1, 9)]
    # bytes, a memoryview and states (shipped to the workers as bytes)
    uploads = [b"junk", *(s.to_bytes() for s in states[:6]), memoryview(states[6].to_bytes()), states[7]]
    with loopback_client(n_workers=1, threads_per_worker=2) as client:
        report = ortckpt.average(uploads, engine=client, weights=list(range(1, 10)))
        with pytest.raises(ortckpt.AggregationError):
            ortckpt.average([b"junk", b"more junk"], engine=client)
    assert [r.accepted for r in report.sources] == [False] + [True] * 8
    weights = range(2, 10)
    want = sum(w * v for w, v in zip(weights, range(1, 9))) / sum(weights)
    assert np.allclose(
        report.state.parameters["w"].data, np.float32(want), rtol=0, atol=np.spacing(np.float32(want))
    )
