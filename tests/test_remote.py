"""fsspec URLs for load, convert and average: against a real S3-compatible server (moto's standalone
server, started on loopback by these tests) and fsspec's ``memory://`` file system."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, SourceTooLargeError
from ortckpt.cli import main

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from tests.helpers import http_servers  # noqa: E402

BUCKET = "fleet-uploads"


def device(i: int) -> CheckpointState:
    rng = np.random.default_rng(i)
    return CheckpointState(
        {"w": rng.standard_normal((16, 8)).astype(np.float32), "b": np.full(8, i, np.float32)},
        frozen={"ids": np.arange(5, dtype=np.int64)},
        properties={"samples": i + 1},
    )


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    """storage_options for a fresh S3 server on 127.0.0.1 with one bucket; stopped afterwards."""
    with http_servers.moto_s3(BUCKET) as options:
        yield options


def put(url: str, data: bytes, options: dict[str, Any] | None = None) -> None:
    with fsspec.open(url, "wb", **(options or {})) as f:
        f.write(data)


def get(url: str, options: dict[str, Any] | None = None) -> bytes:
    with fsspec.open(url, "rb", **(options or {})) as f:
        data: bytes = f.read()
        return data


def test_load_from_s3(s3: dict[str, Any], assert_same_state):
    state = device(1)
    url = f"s3://{BUCKET}/load/device1.ckpt"
    put(url, state.to_bytes(), s3)
    assert_same_state(state, ortckpt.load(url, storage_options=s3))
    # untrusted bytes go through the core: garbage is a CheckpointError naming the URL
    put(f"s3://{BUCKET}/load/garbage.ckpt", b"\x00" * 100, s3)
    with pytest.raises(ortckpt.CheckpointError, match=f"s3://{BUCKET}/load/garbage.ckpt"):
        ortckpt.load(f"s3://{BUCKET}/load/garbage.ckpt", storage_options=s3)
    # the size limit is checked before the download
    with pytest.raises(SourceTooLargeError, match="size limit of 100 bytes"):
        ortckpt.load(url, storage_options=s3, max_bytes=100)
    with pytest.raises(FileNotFoundError):
        ortckpt.load(f"s3://{BUCKET}/load/absent.ckpt", storage_options=s3)


def test_external_data_over_s3(s3: dict[str, Any], tmp_path: Path, assert_same_state):
    state = device(2)
    local = tmp_path / "ext.ckpt"
    ortckpt.save(state, local, external_data_threshold=0)
    url = f"s3://{BUCKET}/ext/ext.ckpt"
    put(url, local.read_bytes(), s3)
    put(url + ".data", Path(ortckpt.external_data_path(local)).read_bytes(), s3)
    loaded = ortckpt.load(url, storage_options=s3)
    assert loaded.has_external_data
    assert_same_state(state, loaded)


def test_convert_through_s3(s3: dict[str, Any], tmp_path: Path, assert_same_state):
    state = device(3)
    src = f"s3://{BUCKET}/convert/device3.ckpt"
    put(src, state.to_bytes(), s3)
    ortckpt.convert(src, f"s3://{BUCKET}/convert/device3.safetensors", storage_options=s3)
    ortckpt.convert(f"s3://{BUCKET}/convert/device3.safetensors", tmp_path / "d3.npz", storage_options=s3)
    ortckpt.convert(tmp_path / "d3.npz", f"s3://{BUCKET}/convert/back.ckpt", storage_options=s3)
    assert_same_state(state, ortckpt.load_bytes(get(f"s3://{BUCKET}/convert/back.ckpt", s3)))
    assert_same_state(state, ortckpt.from_npz(tmp_path / "d3.npz"))
    assert_same_state(
        state, ortckpt.from_safetensors(f"s3://{BUCKET}/convert/device3.safetensors", storage_options=s3)
    )


def test_average_from_s3(s3: dict[str, Any], tmp_path: Path):
    prefix = f"s3://{BUCKET}/round-{uuid.uuid4().hex[:8]}"
    urls = []
    local_paths = []
    for i in range(6):
        urls.append(f"{prefix}/device{i}.ckpt")
        put(urls[-1], device(i).to_bytes(), s3)
        local_paths.append(tmp_path / f"device{i}.ckpt")
        ortckpt.save(device(i), local_paths[-1])
    put(f"{prefix}/garbage.ckpt", b"PK\x03\x04 not a checkpoint", s3)
    put(f"{prefix}/huge.ckpt", device(0).to_bytes() + b"\x00" * (4 << 20), s3)
    sources = [*urls, f"{prefix}/garbage.ckpt", f"{prefix}/huge.ckpt", f"{prefix}/never-uploaded.ckpt"]
    report = ortckpt.average(sources, f"{prefix}/global.ckpt", weights="samples", storage_options=s3)
    assert [r.kind for r in report.rejected] == ["unreadable", "too-large", "unreadable"]
    assert "never-uploaded" in report.rejected[-1].reason
    local = ortckpt.average(local_paths, weights="samples")
    remote = ortckpt.load_bytes(get(f"{prefix}/global.ckpt", s3))
    for name in ("w", "b", "ids"):
        assert remote.parameters[name].data.tobytes() == local.state.parameters[name].data.tobytes(), name


def test_memory_urls(tmp_path: Path, assert_same_state, capsys):
    fs = fsspec.filesystem("memory")
    root = f"memory://ortckpt-{uuid.uuid4().hex[:8]}"
    try:
        for i in range(4):
            put(f"{root}/device{i}.ckpt", device(i).to_bytes())
        put(f"{root}/bad.ckpt", b"")
        assert_same_state(device(2), ortckpt.load(f"{root}/device2.ckpt"))
        sources = [f"{root}/device{i}.ckpt" for i in range(4)] + [f"{root}/bad.ckpt"]
        report = ortckpt.average(sources, f"{root}/global.ckpt", weights=[1, 2, 3, 4, 5])
        assert [r.accepted for r in report.sources] == [True, True, True, True, False]
        assert main(["convert", f"{root}/global.ckpt", f"{root}/global.npz"]) == 0
        assert main(["average", f"{root}/cli.ckpt", *sources]) == 0
        assert "accepted 4 of 5" in capsys.readouterr().out
        # remote glob patterns are expanded (the shell only expands local ones)
        assert main(["average", f"{root}/glob.ckpt", f"{root}/dev*.ckpt", f"{root}/none*.ckpt"]) == 0
        text = capsys.readouterr().out
        assert "accepted 4 of 5" in text and "none*.ckpt" in text
        averaged = ortckpt.from_npz(f"{root}/global.npz")
        assert_same_state(report.state, averaged)
    finally:
        fs.rm(root.replace("memory://", "/"), recursive=True)


def test_dask_workers_read_from_s3(s3: dict[str, Any]):
    pytest.importorskip("distributed")
    from tests.helpers.dask_cluster import loopback_client

    prefix = f"s3://{BUCKET}/dask-{uuid.uuid4().hex[:8]}"
    urls = [f"{prefix}/device{i}.ckpt" for i in range(12)]
    for i, url in enumerate(urls):
        put(url, device(i).to_bytes(), s3)
    put(f"{prefix}/bad.ckpt", b"\x00" * 64, s3)
    sources = [*urls, f"{prefix}/bad.ckpt"]
    local = ortckpt.average(sources, weights="samples", storage_options=s3)
    with loopback_client(n_workers=2, threads_per_worker=1) as client:
        report = ortckpt.average(
            sources, f"{prefix}/global.ckpt", weights="samples", storage_options=s3, engine=client
        )
    assert [r.kind for r in report.sources] == [r.kind for r in local.sources] == [None] * 12 + ["unreadable"]
    remote = ortckpt.load(f"{prefix}/global.ckpt", storage_options=s3)
    for name in ("w", "b"):
        x, y = remote.parameters[name].data, local.state.parameters[name].data
        assert np.all(np.abs(x.astype(np.float64) - y) <= np.spacing(np.abs(y))), name
