"""Rounds over remote uploads (issue 34): a URL upload is copied once, a block at a time, through
the lazy loads' range reader (range requests, deadlines, lengths and Content-Range checked, the
object's identity compared after every request) into a private temporary file that the core reads
as it reads a local upload. Against real servers on 127.0.0.1, started and stopped here: nginx
(its access log counts the body bytes of every reply), moto's S3 server, and the fault proxy
(tests/helpers/http_servers.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState
from tests.helpers import http_servers

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")  # fsspec's HTTP file system

MiB = 1 << 20
#: the bytes of one copy request of a round's remote upload (``_sources._COPY_BLOCK``)
BLOCK = 4 * MiB


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[http_servers.Nginx]:
    if http_servers.nginx_binary() is None:
        pytest.skip("nginx is not installed (apt-get install -y nginx-light): the HTTP tests need it")
    root = tmp_path_factory.mktemp("www")
    with http_servers.nginx(root, tmp_path_factory.mktemp("nginx")) as server:
        yield server


def device(i: int, lanes: int = 3 * MiB // 2, tensors: int = 3, pad: int = 0) -> CheckpointState:
    """A device's upload: ``tensors`` float32 tensors of ``lanes`` values (6 MiB each by default:
    an upload larger than two copy blocks, a model the core streams), a bias, a frozen tensor and
    its sample count (and a frozen ``pad`` of ``pad`` float32 zeros)."""
    rng = np.random.default_rng(i)
    params = {f"w{t}": rng.standard_normal(lanes).astype(np.float32) for t in range(tensors)}
    params["b"] = np.full(8, i, np.float32)
    return CheckpointState(
        params, frozen={"ids": np.arange(5, dtype=np.int64), **pad_of(pad)}, properties={"samples": i + 1}
    )


def pad_of(n: int) -> dict[str, np.ndarray]:
    return {"pad": np.zeros(n, np.float32)} if n else {}


def write_uploads(folder: Path) -> tuple[list[str], int]:
    """Good and hostile uploads in ``folder``: their names in round order (a duplicate and a
    missing one among them) and the ``max_bytes`` the round runs with."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(4):
        ortckpt.save(device(i), folder / f"d{i}.ckpt")
        names.append(f"d{i}.ckpt")
    nan = device(7)
    values = nan.parameters["w2"].data.copy()
    values[-1] = np.nan  # in the last block: found after most of the upload was read
    nan.parameters["w2"] = values
    ortckpt.save(nan, folder / "nan.ckpt")
    shaped = device(8)
    shaped.parameters["w1"] = np.zeros(10, np.float32)
    ortckpt.save(shaped, folder / "shape.ckpt")
    (folder / "garbage.ckpt").write_bytes(b"PK\x03\x04 not a checkpoint" * 1000)
    ortckpt.save(device(9, pad=2 * MiB), folder / "big.ckpt")
    limit = (folder / "d0.ckpt").stat().st_size + MiB
    assert (folder / "big.ckpt").stat().st_size > limit
    names += ["nan.ckpt", "d1.ckpt", "shape.ckpt", "garbage.ckpt", "big.ckpt", "absent.ckpt", "d2.ckpt"]
    return names, limit


def kinds(report: ortckpt.AggregationReport) -> list[tuple[bool, str | None, float | None]]:
    return [(r.accepted, r.kind, r.weight) for r in report.sources]


def same_values(a: CheckpointState, b: CheckpointState) -> None:
    assert sorted(a.parameters) == sorted(b.parameters)
    for name, p in a.parameters.items():
        assert p.data.tobytes() == b.parameters[name].data.tobytes(), name
    assert sorted(a.frozen_parameters) == sorted(b.frozen_parameters)
    assert a.properties == b.properties


def test_fedavg_over_urls_equals_the_round_over_local_files(served: http_servers.Nginx):
    """A FedAvg round over URL uploads (hostile ones among them) gives the local round's verdicts
    and aggregate bit for bit; the server sent each upload's bytes once, in ranged replies of at
    most one copy block (never an upload whole in one reply), and nothing of the upload past
    ``max_bytes``."""
    sub = f"fedavg-{uuid.uuid4().hex[:8]}"
    names, limit = write_uploads(served.root / sub)
    urls = [f"{served.url}/{sub}/{n}" for n in names]
    local = [served.root / sub / n for n in names]
    served.clear()
    remote = ortckpt.average(urls, weights="samples", max_bytes=limit)
    here = ortckpt.average(local, weights="samples", max_bytes=limit)
    assert kinds(remote) == kinds(here)
    assert [k for _, k, _ in kinds(remote)] == [
        None, None, None, None, "non-finite", "duplicate", "shape", "unreadable", "too-large",
        "unreadable", "duplicate",
    ]  # fmt: skip
    assert "absent.ckpt" in (remote.sources[9].reason or "")
    assert "d1.ckpt" in (remote.sources[5].reason or "")  # the duplicate names the first
    same_values(remote.state, here.state)
    gets = [(uri, status, sent) for method, uri, status, sent in served.replies() if method == "GET"]
    for name in names:
        uri = f"/{sub}/{name}"
        size = (served.root / sub / name).stat().st_size if name != "absent.ckpt" else 0
        fetched = served.body_bytes(uri)
        if name == "big.ckpt":
            assert fetched == 0, "an upload past max_bytes is refused before a byte is fetched"
        elif name in ("d1.ckpt", "d2.ckpt"):  # given twice: copied twice, counted once
            assert fetched == 2 * size, (name, fetched, size)
        elif name != "absent.ckpt":
            assert fetched == size, (name, fetched, size)
    for uri, status, sent in gets:
        if uri.endswith(".ckpt") and status != 404:
            assert status == 206 and sent <= BLOCK, (uri, status, sent)


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    """storage_options for a fresh moto S3 server on 127.0.0.1 (stopped afterwards)."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    with http_servers.moto_s3() as options:
        yield options


def _range_lengths(ranges: list[str]) -> list[int]:
    out = []
    for spec in ranges:
        found = re.fullmatch(r"bytes=(\d+)-(\d+)", spec)
        if found is not None:
            out.append(int(found[2]) - int(found[1]) + 1)
    return out


@pytest.mark.parametrize("method", ["median", "krum"])
def test_a_robust_round_over_s3_equals_the_local_round(s3: dict[str, Any], tmp_path: Path, method: str):
    """A robust round over S3 uploads (moto, through the counting proxy): the local round's
    verdicts and aggregate bit for bit. The robust methods read every kept upload several times
    (checks, norms, distances, the reduction); each is fetched once even so, in ranges of at most
    one block, and kept in its private copy (not in memory) until the round ends."""
    names, limit = write_uploads(tmp_path / "up")
    names = [n for n in names if n != "absent.ckpt"]  # (S3's missing object: test_remote.py)
    bucket = f"robust-{uuid.uuid4().hex[:8]}"
    fs = fsspec.filesystem("s3", **s3)
    fs.mkdir(bucket)
    for name in set(names):
        fs.put_file(str(tmp_path / "up" / name), f"{bucket}/{name}")
    faults = http_servers.Faults()
    with http_servers.fault_proxy(s3["endpoint_url"], faults) as proxy:
        options = {**s3, "endpoint_url": proxy}
        urls = [f"s3://{bucket}/{n}" for n in names]
        remote = ortckpt.average(
            urls, method=method, byzantine=1, weights="samples", max_bytes=limit, storage_options=options
        )
        lengths = _range_lengths(faults.ranges)
    here = ortckpt.average(
        [tmp_path / "up" / n for n in names], method=method, byzantine=1, weights="samples", max_bytes=limit
    )
    assert kinds(remote) == kinds(here)
    assert sum(1 for r in remote.sources if r.accepted) == 4
    same_values(remote.state, here.state)
    fetched = [n for n in names if n != "big.ckpt"]  # refused before a byte was fetched
    assert sum(lengths) == sum((tmp_path / "up" / n).stat().st_size for n in fetched)
    assert max(lengths) <= BLOCK, max(lengths)


@pytest.fixture()
def proxied(served: http_servers.Nginx) -> Iterator[tuple[str, str, http_servers.Faults]]:
    """Four uploads behind the fault proxy: ``(proxy URL, folder, faults)``."""
    sub = f"proxied-{uuid.uuid4().hex[:8]}"
    (served.root / sub).mkdir()
    for i in range(4):
        ortckpt.save(device(i), served.root / sub / f"d{i}.ckpt")
    faults = http_servers.Faults()
    with http_servers.fault_proxy(served.url, faults) as url:
        yield url, sub, faults


def test_an_upload_replaced_while_copied_is_its_rejection(
    served: http_servers.Nginx, proxied: tuple[str, str, http_servers.Faults]
):
    """An object whose ETag changes between the requests that copy it: that upload's rejection
    (``CheckpointChangedError``, kind ``unreadable``), never its values mixed from two versions;
    the round goes on with the others, whose aggregate is the local round's."""
    url, sub, faults = proxied
    rnd = ortckpt.Round()
    reports = [rnd.add(f"{url}/{sub}/d{i}.ckpt", weight="samples") for i in range(2)]
    start = faults.gets

    def replace_during(number: int) -> None:
        if number == start + 1:  # d2's first request: every reply from now on has another ETag
            faults.after = start

    faults.mode, faults.after, faults.on_get = "etag-change", 10**9, replace_during
    reports.append(rnd.add(f"{url}/{sub}/d2.ckpt", weight="samples"))
    faults.mode, faults.on_get = "pass", None
    reports.append(rnd.add(f"{url}/{sub}/d3.ckpt", weight="samples"))
    assert [r.kind for r in reports] == [None, None, "unreadable", None]
    assert "CheckpointChangedError" in (reports[2].reason or "")
    assert "replaced while it was being read" in (reports[2].reason or "")
    here = ortckpt.average([served.root / sub / f"d{i}.ckpt" for i in (0, 1, 3)], weights="samples")
    same_values(rnd.result().state, here.state)


def test_max_bytes_refuses_an_upload_and_its_data_before_a_byte_is_fetched(
    served: http_servers.Nginx, tmp_path: Path
):
    """``max_bytes`` over a remote upload whose checkpoint fits and whose ``.data`` does not:
    ``too-large`` (naming the ``.data``), and the server sent nothing of either file."""
    sub = f"limit-{uuid.uuid4().hex[:8]}"
    (served.root / sub).mkdir()
    ortckpt.save(device(0), served.root / sub / "d0.ckpt")
    ortckpt.save(device(1, pad=MiB), tmp_path / "ext.ckpt", external_data_threshold=0)
    shutil.copy(tmp_path / "ext.ckpt", served.root / sub / "ext.ckpt")
    shutil.copy(ortckpt.external_data_path(tmp_path / "ext.ckpt"), served.root / sub / "ext.ckpt.data")
    limit = (served.root / sub / "d0.ckpt").stat().st_size + 1024
    assert (served.root / sub / "ext.ckpt").stat().st_size < limit
    served.clear()
    report = ortckpt.average([f"{served.url}/{sub}/d0.ckpt", f"{served.url}/{sub}/ext.ckpt"], max_bytes=limit)
    assert [r.kind for r in report.sources] == [None, "too-large"]
    assert "ext.ckpt.data" in (report.sources[1].reason or "")
    assert served.body_bytes(f"/{sub}/ext.ckpt") == 0
    assert served.body_bytes(f"/{sub}/ext.ckpt.data") == 0
    # within the limit, the checkpoint and its .data are both copied, once
    served.clear()
    both = ortckpt.average([f"{served.url}/{sub}/ext.ckpt"])
    assert [r.kind for r in both.sources] == [None]
    same_values(both.state, ortckpt.average([tmp_path / "ext.ckpt"]).state)
    for name in ("ext.ckpt", "ext.ckpt.data"):
        assert served.body_bytes(f"/{sub}/{name}") == (served.root / sub / name).stat().st_size


#: the large uploads: 16 tensors of 4 MiB, 64 MiB of float32 each
LARGE_LANES, LARGE_TENSORS = MiB, 16

GROWTH_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np, ortckpt

    def status(key):
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith(key + ":")).split()[1]) * 1024

    urls = sys.argv[1:]
    import fsspec  # the HTTP file system's imports and first connection, before the count
    fsspec.filesystem("http").info(urls[0])
    rnd = ortckpt.Round()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident set starts again from here
    before = status("VmRSS")
    kinds = [rnd.add(u, weight="samples").kind for u in urls]
    peak = status("VmHWM")
    mean = rnd.result().state.parameters["t03"].data[0]
    print(json.dumps({"kinds": kinds, "growth": peak - before, "mean": float(mean)}))
    """
)


@pytest.fixture(scope="module")
def large(served: http_servers.Nginx) -> tuple[str, int]:
    """Three 64 MiB uploads served by nginx: their folder and the size of one."""
    sub = f"large-{uuid.uuid4().hex[:8]}"
    (served.root / sub).mkdir()
    for i in range(3):
        state = CheckpointState(
            {f"t{t:02d}": np.full(LARGE_LANES, i + t, np.float32) for t in range(LARGE_TENSORS)},
            properties={"samples": i + 1},
        )
        ortckpt.save(state, served.root / sub / f"u{i}.ckpt")
    return sub, (served.root / sub / "u0.ckpt").stat().st_size


def growth_beyond_sums(urls: list[str]) -> int:
    """How far a fresh interpreter's peak resident set grows past the round's float64 sums while
    ``urls`` are added to a round (reset before the first, read after the last), the round's
    verdicts and result checked. ``ORTCKPT_STREAM_COPY_MAX_BYTES=0``: the core checks each upload
    before adding it instead of copying the sums aside, as it does for models whose sums pass 512
    MiB, so that the sums are the round's only model-sized memory."""
    env = {**os.environ, "ORTCKPT_STREAM_COPY_MAX_BYTES": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", GROWTH_SCRIPT, *urls], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["kinds"] == [None, None, None]
    assert out["mean"] == pytest.approx((1 * 3 + 2 * 4 + 3 * 5) / 6)
    growth: int = out["growth"] - LARGE_LANES * LARGE_TENSORS * 8
    return growth


def test_a_round_over_large_remote_uploads_never_holds_one(
    served: http_servers.Nginx, large: tuple[str, int]
):
    """Three 64 MiB uploads added to a round from URLs: the process grows by its float64 sums and a
    few copy blocks, far below one upload (reading each upload whole, as the round did before,
    cost the sums plus 190 MiB)."""
    sub, size = large
    beyond = growth_beyond_sums([f"{served.url}/{sub}/u{i}.ckpt" for i in range(3)])
    assert beyond < size // 3, (beyond / MiB, size / MiB)


def test_a_reference_given_as_a_url_is_read_lazily(served: http_servers.Nginx):
    """``Round(reference=url)``: the round keeps the reference's structure, frozen tensors and
    properties, so only those are fetched (the lazy load's blocks), never its averaged values;
    the round's verdicts and aggregate are those of the same reference given as a local path."""
    sub = f"reference-{uuid.uuid4().hex[:8]}"
    (served.root / sub).mkdir()
    for i in range(3):
        ortckpt.save(device(i), served.root / sub / f"d{i}.ckpt")
    size = (served.root / sub / "d0.ckpt").stat().st_size
    uploads = [served.root / sub / f"d{i}.ckpt" for i in (1, 2)]
    served.clear()
    remote = ortckpt.Round(f"{served.url}/{sub}/d0.ckpt")
    fetched = served.body_bytes(f"/{sub}/d0.ckpt")
    assert fetched <= MiB, f"{fetched} bytes of a {size}-byte reference fetched"
    local = ortckpt.Round(served.root / sub / "d0.ckpt")
    for rnd in (remote, local):
        for path in uploads:
            assert rnd.add(path, weight="samples").accepted
    same_values(remote.result().state, local.result().state)


def test_a_store_that_reports_no_size_is_copied_as_a_stream_within_max_bytes(
    served: http_servers.Nginx, proxied: tuple[str, str, http_servers.Faults], large: tuple[str, int]
):
    """A server that reports no sizes (no Content-Length, ``Range`` ignored): a round's uploads
    cannot be copied by range, so each is read as one stream into its copy, a block at a time
    (a process adding three 64 MiB uploads grows by its sums and a few blocks, where reading each
    whole held it); the round equals the local one, and ``max_bytes`` refuses an upload once more
    bytes than it allows have come (``too-large``)."""
    url, sub, faults = proxied
    faults.mode = "unsized"
    urls = [f"{url}/{sub}/d{i}.ckpt" for i in range(3)]
    assert fsspec.filesystem("http").info(urls[0]).get("size") is None  # the store tells no size
    remote = ortckpt.average(urls, weights="samples")
    here = ortckpt.average([served.root / sub / f"d{i}.ckpt" for i in range(3)], weights="samples")
    assert kinds(remote) == kinds(here) and [k for _, k, _ in kinds(here)] == [None, None, None]
    same_values(remote.state, here.state)
    big, upload = large  # read as streams, a block at a time: never an upload whole
    beyond = growth_beyond_sums([f"{url}/{big}/u{i}.ckpt" for i in range(3)])
    assert beyond < upload // 3, (beyond / MiB, upload / MiB)
    size = (served.root / sub / "d1.ckpt").stat().st_size
    limited = ortckpt.Round(max_bytes=size - 1)
    verdict = limited.add(urls[1])  # (not urls[0] with "d0" replaced: the folder's name may hold "d0")
    reason = limited.reports[0].reason or ""
    assert verdict.kind == "too-large", reason
    assert f"more than {size - 1}" in reason and "d1.ckpt" in reason


def test_a_missing_remote_upload_says_what_the_server_answered(served: http_servers.Nginx):
    """fsspec's HTTP file system raises ``FileNotFoundError(url)`` for any failed request; the
    report names the URL and what was behind it (here the server's 404), which the error alone
    does not."""
    rnd = ortckpt.Round()
    missing = f"{served.url}/nowhere-{uuid.uuid4().hex[:8]}/d0.ckpt"
    assert rnd.add(missing).kind == "unreadable"
    reason = rnd.reports[0].reason or ""
    assert reason.startswith(f"FileNotFoundError: {missing} (from ") and "404" in reason, reason
