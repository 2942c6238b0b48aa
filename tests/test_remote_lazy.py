"""Lazy remote loads (``ortckpt.load(url)``): the structure parsed through the core's paged input
from range requests, each tensor fetched when first used. Against real servers on 127.0.0.1,
started and stopped here: nginx (from Debian) serving the fixtures with ranges and ETags, moto's
S3 server, and a fault proxy in front of either (tests/helpers/http_servers.py)."""

from __future__ import annotations

import contextlib
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
from ortckpt import CheckpointChangedError, CheckpointState, RemoteSourceError, SourceTooLargeError
from tests.helpers import http_servers
from tests.helpers.checks import promptly
from tests.helpers.paths import corpus_files, fixture_files

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")  # fsspec's HTTP file system

MiB = 1 << 20


def corpus() -> list[Path]:
    return corpus_files() + fixture_files()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[http_servers.Nginx]:
    if http_servers.nginx_binary() is None:
        pytest.skip("nginx is not installed (apt-get install -y nginx-light): the HTTP tests need it")
    root = tmp_path_factory.mktemp("www")
    for path in corpus():
        shutil.copy(path, root / path.name)
    with http_servers.nginx(root, tmp_path_factory.mktemp("nginx")) as server:
        yield server


def large_state(n: int = 16, each: int = 2 * MiB) -> CheckpointState:
    return CheckpointState(
        {f"t{i:02d}": np.full(each // 4, i, np.float32) for i in range(n)}, properties={"round": 7}
    )


@pytest.mark.parametrize("path", corpus(), ids=lambda p: p.name)
def test_http_load_equals_local_load(served: http_servers.Nginx, path: Path, assert_same_state):
    remote = ortckpt.load(f"{served.url}/{path.name}")
    assert_same_state(ortckpt.load(path), remote)
    assert_same_state(ortckpt.load(path), ortckpt.load(f"{served.url}/{path.name}", mmap=False))


def test_one_tensor_fetches_the_structure_and_that_tensor(served: http_servers.Nginx, assert_same_state):
    state = large_state()
    ortckpt.save(state, served.root / "large.ckpt")
    size = (served.root / "large.ckpt").stat().st_size
    served.clear()
    remote = ortckpt.load(f"{served.url}/large.ckpt")
    structure = served.body_bytes("/large.ckpt")
    assert structure <= MiB, f"{structure} bytes fetched to index a {size}-byte checkpoint"
    assert sorted(remote.parameters) == sorted(state.parameters)
    assert remote.properties["round"] == 7
    one = remote.parameters["t05"].data
    assert np.array_equal(one, state.parameters["t05"].data)
    fetched = served.body_bytes("/large.ckpt")
    assert fetched <= structure + one.nbytes + MiB, f"{fetched} bytes fetched of {size} for one tensor"
    # every request a range: 206 replies only (HEADs aside)
    gets = [(uri, status) for method, uri, status, _ in served.replies() if method == "GET"]
    assert all(status == 206 for uri, status in gets if uri.endswith("/large.ckpt")), gets
    # the rest, on demand, equals the local file
    assert_same_state(state, remote)
    assert served.body_bytes("/large.ckpt") < size + 2 * MiB


def test_all_parameters_in_a_few_requests(served: http_servers.Nginx):
    state = large_state(64, 64 << 10)
    ortckpt.save(state, served.root / "many.ckpt")
    served.clear()
    arrays = ortckpt.load(f"{served.url}/many.ckpt").to_numpy()
    assert all(np.array_equal(arrays[k], v.data) for k, v in state.parameters.items())
    gets = [r for r in served.replies() if r[0] == "GET" and r[1].endswith("/many.ckpt")]
    # the structure, then neighbouring tensors fetched together (not one request per tensor)
    assert len(gets) <= 4, gets


def test_external_data_is_fetched_per_tensor(served: http_servers.Nginx, tmp_path: Path, assert_same_state):
    state = large_state(8)
    local = tmp_path / "ext.ckpt"
    ortckpt.save(state, local, external_data_threshold=0)
    shutil.copy(local, served.root / "ext.ckpt")
    shutil.copy(ortckpt.external_data_path(local), served.root / "ext.ckpt.data")
    served.clear()
    remote = ortckpt.load(f"{served.url}/ext.ckpt")
    assert remote.has_external_data
    assert served.body_bytes("/ext.ckpt.data") == 0
    assert np.array_equal(remote.parameters["t03"].data, state.parameters["t03"].data)
    assert served.body_bytes("/ext.ckpt.data") <= 2 * MiB + MiB
    assert_same_state(state, remote)


def test_max_bytes_bounds_the_bytes_fetched(served: http_servers.Nginx):
    ortckpt.save(large_state(), served.root / "limit.ckpt")
    url = f"{served.url}/limit.ckpt"
    # opening and one tensor fit in 4 MiB of a 32 MiB checkpoint; the whole state does not
    remote = ortckpt.load(url, max_bytes=4 * MiB)
    assert remote.parameters["t01"].data[0] == 1
    with pytest.raises(SourceTooLargeError, match="size limit of 4194304 bytes"):
        remote.to_numpy()
    with pytest.raises(SourceTooLargeError, match="size limit of 100 bytes"):
        ortckpt.load(url, max_bytes=100)
    # a whole read checks the size first
    with pytest.raises(SourceTooLargeError, match="size limit"):
        ortckpt.load(url, max_bytes=4 * MiB, mmap=False)


def test_missing_object(served: http_servers.Nginx):
    with pytest.raises(FileNotFoundError):
        ortckpt.load(f"{served.url}/absent.ckpt")


def test_garbage_is_a_checkpoint_error_naming_the_url(served: http_servers.Nginx):
    (served.root / "garbage.ckpt").write_bytes(b"\x00" * 100)
    with pytest.raises(ortckpt.CheckpointError, match=r"garbage\.ckpt"):
        ortckpt.load(f"{served.url}/garbage.ckpt")


@pytest.fixture()
def faulty(served: http_servers.Nginx) -> Iterator[tuple[str, http_servers.Faults]]:
    name = f"fault-{uuid.uuid4().hex[:8]}.ckpt"
    ortckpt.save(large_state(8), served.root / name)
    faults = http_servers.Faults()
    with http_servers.fault_proxy(served.url, faults) as url:
        yield f"{url}/{name}", faults


def test_a_server_ignoring_range_is_our_error(faulty: tuple[str, http_servers.Faults]):
    url, faults = faulty
    faults.mode = "ignore-range"
    with pytest.raises(RemoteSourceError, match="ignores Range"):
        ortckpt.load(url).to_numpy()
    # a whole read does not need ranges
    assert ortckpt.load(url, mmap=False).parameters["t02"].data[0] == 2


def test_a_reply_of_another_range_is_our_error(faulty: tuple[str, http_servers.Faults]):
    """A 206 of the right length for other bytes than asked (its Content-Range says which): our
    error, never those values, whether while the structure is read or a tensor."""
    url, faults = faulty
    faults.mode = "other-range"
    with pytest.raises(RemoteSourceError, match="Content-Range"):
        ortckpt.load(url).to_numpy()
    faults.mode = "pass"
    remote = ortckpt.load(url)
    faults.mode = "other-range"
    with pytest.raises(RemoteSourceError, match="Content-Range") as info:
        _ = remote.parameters["t05"].data
    assert url in str(info.value)


@pytest.mark.parametrize("mode", ["truncate", "close-early"])
def test_a_short_reply_is_our_error(faulty: tuple[str, http_servers.Faults], mode: str):
    url, faults = faulty
    faults.mode = mode
    with pytest.raises((CheckpointChangedError, RemoteSourceError)) as info:
        ortckpt.load(url).to_numpy()
    assert url in str(info.value)


def test_a_reply_far_larger_than_asked_is_cut_where_it_passes_the_range(
    faulty: tuple[str, http_servers.Faults],
):
    """A server answering a 256 KiB range with 256 MiB more (206, announced): the reply is read as
    a stream and cut one byte past the range, so the load fails with our error holding a few
    blocks, never the reply (measured in a fresh interpreter: its peak resident set grows by less
    than 32 MiB)."""
    url, faults = faulty
    faults.mode = "oversize"
    script = textwrap.dedent(
        """
        import sys, ortckpt
        def peak():
            with open("/proc/self/status") as f:
                return int(next(l for l in f if l.startswith("VmHWM:")).split()[1]) * 1024
        before = peak()
        try:
            ortckpt.load(sys.argv[1])
        except ortckpt.RemoteSourceError as exc:
            print(peak() - before, str(exc).replace(chr(10), " "))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script, url], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    growth, message = proc.stdout.strip().split(" ", 1)
    assert "the server sent more" in message and url in message
    assert int(growth) < 32 * MiB, (int(growth) / MiB, http_servers.OVERSIZE / MiB)


def test_a_reply_padded_past_what_was_asked_is_refused_unread(faulty: tuple[str, http_servers.Faults]):
    """Replies padded far beyond the object (206, announced): a round's URL upload, copied by
    range requests, is rejected (``unreadable``: the server sent more than asked, each reply cut
    one byte past its range); a whole read within ``max_bytes`` (one request, its reply cut one
    byte past the limit) is ``SourceTooLargeError``, read no further; the same upload served as it
    is passes."""
    url, faults = faulty
    good = ortckpt.average([url], max_bytes=64 * MiB)
    assert [r.kind for r in good.sources] == [None]
    faults.mode = "oversize"
    with pytest.raises(ortckpt.AggregationError) as refused:
        ortckpt.average([url], max_bytes=64 * MiB)
    (only,) = refused.value.report.sources
    assert only.kind == "unreadable" and "the server sent more" in (only.reason or ""), only
    with pytest.raises(SourceTooLargeError, match="more than 67108864"):
        ortckpt.load(url, mmap=False, max_bytes=64 * MiB)


@pytest.mark.parametrize("after", [0, 1], ids=["structure", "tensor"])
def test_a_stalled_server_is_our_error_within_the_deadline(
    faulty: tuple[str, http_servers.Faults], monkeypatch: pytest.MonkeyPatch, after: int
):
    """A server that reads the request and never answers (while the structure is read, or a
    tensor): ``RemoteSourceError`` once the deadline passes (``ORTCKPT_REMOTE_TIMEOUT`` seconds
    plus one per MiB asked), never a hang; a deadline that is not a positive number is refused."""
    url, faults = faulty
    monkeypatch.setenv("ORTCKPT_REMOTE_TIMEOUT", "1")
    faults.mode, faults.after = "stall", after
    raised = promptly(lambda: ortckpt.load(url).to_numpy(), timeout=20)
    assert isinstance(raised, RemoteSourceError), raised
    assert url in str(raised) and "did not answer within" in str(raised)
    faults.released.set()
    for bad in ("0", "-1", "nan", "inf", "soon"):
        monkeypatch.setenv("ORTCKPT_REMOTE_TIMEOUT", bad)
        with pytest.raises(ValueError, match="ORTCKPT_REMOTE_TIMEOUT"):
            ortckpt.load(url)


def test_an_object_replaced_mid_read_is_a_changed_checkpoint(faulty: tuple[str, http_servers.Faults]):
    url, faults = faulty
    faults.mode, faults.after = "etag-change", 10**9
    remote = ortckpt.load(url)  # the structure, before the change
    assert remote.parameters["t00"].data[0] == 0
    faults.after = faults.gets  # every later reply: another ETag
    with pytest.raises(CheckpointChangedError, match="replaced while it was being read"):
        _ = remote.parameters["t04"].data


def test_replaced_on_the_server_between_requests(served: http_servers.Nginx):
    path = served.root / "replaced.ckpt"
    ortckpt.save(large_state(4), path)
    remote = ortckpt.load(f"{served.url}/replaced.ckpt")
    assert remote.parameters["t00"].data[0] == 0
    state = large_state(4)
    state.parameters["t01"] = np.full(MiB // 2, 9, np.float32)
    ortckpt.save(state, path)
    os.utime(path, (1, 1))  # another mtime, hence another ETag, whatever the size
    with pytest.raises(CheckpointChangedError, match=r"replaced\.ckpt"):
        _ = remote.parameters["t01"].data


# --- large reads: parts fetched a few at a time (issue 34) ---------------------------------------

#: the bytes of one range request of a large read (``_sources._PART``) and how many are in flight
PART = 4 * MiB
IN_FLIGHT = 4


def one_large(mib: int, fill: int = 0) -> CheckpointState:
    """A checkpoint whose tensor ``big`` holds ``mib`` MiB of distinct float32 values (a part
    mixed in from another version would not pass unnoticed), and a small one."""
    big = np.arange(mib * MiB // 4, dtype=np.float32) + fill
    return CheckpointState({"big": big, "small": np.full(10, fill, np.float32)}, properties={"round": fill})


@contextlib.contextmanager
def proxied(
    served: http_servers.Nginx, state: CheckpointState, **faults: Any
) -> Iterator[tuple[str, http_servers.Faults, int]]:
    """``state`` served by nginx behind a fault proxy: its URL through the proxy, the proxy's
    faults (``faults`` set after the structure is read) and how many GETs reading the structure
    took (a load made here; a load of the URL makes the same requests in the same order)."""
    name = f"parallel-{uuid.uuid4().hex[:8]}.ckpt"
    ortckpt.save(state, served.root / name)
    proxy = http_servers.Faults()
    with http_servers.fault_proxy(served.url, proxy) as base:
        ortckpt.load(f"{base}/{name}")
        structure = proxy.gets
        proxy.reset_counts()
        for key, value in faults.items():
            setattr(proxy, key, value)
        yield f"{base}/{name}", proxy, structure


def test_a_large_tensor_is_fetched_in_parts_a_few_at_a_time(served: http_servers.Nginx):
    """A 24 MiB tensor behind a server answering each request after 0.2 s: fetched by range
    requests of at most 4 MiB, up to four in flight (counted at the proxy), each answered with
    206 and its part (counted at nginx), the object's identity checked once after all of them
    (one HEAD); the values are the local file's."""
    state = one_large(24)
    with proxied(served, state, delay=0.2) as (url, faults, _):
        remote = ortckpt.load(url)
        faults.reset_counts()
        served.clear()
        values = remote.parameters["big"].data
    assert np.array_equal(values, state.parameters["big"].data)
    replies = [r for r in served.replies() if url.endswith(r[1])]
    gets = [(status, sent) for method, _, status, sent in replies if method == "GET"]
    assert len(gets) >= 24 * MiB // PART, gets
    assert all(status == 206 and sent <= PART for status, sent in gets), gets
    # the tensor's bytes that the structure's block did not hold, once
    assert values.nbytes - MiB <= sum(sent for _, sent in gets) <= values.nbytes + MiB
    assert [r[0] for r in replies].count("HEAD") == 1, replies
    assert 2 <= faults.peak <= IN_FLIGHT, faults.peak


@pytest.mark.parametrize("mode", ["truncate", "close-early"])
def test_a_short_part_is_our_error(served: http_servers.Nginx, mode: str):
    """The second part of a large read cut short (a shorter 206, or a connection closed early):
    our error naming the URL, never values with a hole."""
    with proxied(served, one_large(12)) as (url, faults, structure):
        remote = ortckpt.load(url)
        faults.mode, faults.after, faults.times = mode, structure + 1, 1
        with pytest.raises((CheckpointChangedError, RemoteSourceError)) as info:
            _ = remote.parameters["big"].data
        assert len(faults.ranges) >= 2, faults.ranges
    assert url in str(info.value)
    if mode == "truncate":
        found = re.search(r"asked for (\d+) bytes at offset \d+, the server sent (\d+)", str(info.value))
        assert found is not None and int(found[2]) < int(found[1]) <= PART, str(info.value)


# Run in a fresh interpreter (argv: URL, storage options as JSON, tensor name): loads the URL,
# then reads the tensor; prints the growth of the peak resident set while it was read and the
# RemoteSourceError it raised.
READ_ONE_TENSOR = textwrap.dedent(
    """
    import json, sys, ortckpt
    def peak():
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith("VmHWM:")).split()[1]) * 1024
    state = ortckpt.load(sys.argv[1], storage_options=json.loads(sys.argv[2]))
    before = peak()
    try:
        state.parameters[sys.argv[3]].data
    except ortckpt.RemoteSourceError as exc:
        print(peak() - before, str(exc).replace(chr(10), " "))
    """
)


def read_padded(url: str, options: dict[str, Any] | None = None) -> tuple[int, str]:
    """The peak growth and the message of ``READ_ONE_TENSOR`` reading ``big`` at ``url``."""
    args = [sys.executable, "-c", READ_ONE_TENSOR, url, json.dumps(options), "big"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip(), f"no RemoteSourceError: {proc.stderr[-2000:]}"
    growth, message = proc.stdout.strip().split(" ", 1)
    return int(growth), message


def test_a_padded_part_is_cut_where_it_passes_its_range(served: http_servers.Nginx):
    """The second part of a 12 MiB read answered with 256 MiB more (206, announced): our error
    naming that part, the other parts cancelled, and the reading process holding the read's
    parts, never the padding (its peak grows by less than 32 MiB)."""
    with proxied(served, one_large(12)) as (url, faults, structure):
        faults.mode, faults.after, faults.times = "oversize", structure + 1, 1
        growth, message = read_padded(url)
        assert len(faults.ranges) >= 2, faults.ranges
    found = re.search(r"asked for (\d+) bytes at offset \d+, the server sent more", message)
    assert found is not None and url in message, message
    assert int(found[1]) <= PART
    assert growth < 32 * MiB, (growth / MiB, http_servers.OVERSIZE / MiB)


def test_a_stalled_part_is_the_deadline_error(served: http_servers.Nginx, monkeypatch: pytest.MonkeyPatch):
    """One part of an 8 MiB read never answered while the others are: ``RemoteSourceError`` when
    the read's deadline passes (``ORTCKPT_REMOTE_TIMEOUT`` + 1 s per MiB: 9 s), never a hang."""
    monkeypatch.setenv("ORTCKPT_REMOTE_TIMEOUT", "1")
    with proxied(served, one_large(8)) as (url, faults, structure):
        remote = ortckpt.load(url)
        served.clear()
        faults.mode, faults.after, faults.times = "stall", structure + 1, 1
        raised = promptly(lambda: remote.parameters["big"].data, timeout=30)
        faults.released.set()
        assert len(faults.ranges) >= 2, faults.ranges
    assert isinstance(raised, RemoteSourceError), raised
    assert url in str(raised) and re.search(r"did not answer within \d+ s", str(raised)), raised
    # the parts that were answered, were (in flight together with the stalled one)
    assert any(method == "GET" and status == 206 for method, _, status, _ in served.replies())


def test_an_object_replaced_during_a_parallel_read_is_a_changed_checkpoint(served: http_servers.Nginx):
    """The object replaced on the server (other values, same size) when the second part of a
    large read is asked for: the parts mix two versions, and the identity check after the read
    says so (``CheckpointChangedError``); no value is handed over."""
    state = one_large(12)
    with proxied(served, state) as (url, faults, structure):
        path = served.root / url.rsplit("/", 1)[1]
        remote = ortckpt.load(url)

        def replace(number: int) -> None:
            if number == structure + 2:
                ortckpt.save(one_large(12, fill=1), path)
                os.utime(path, (1, 1))  # another mtime, hence another ETag

        faults.on_get = replace
        with pytest.raises(CheckpointChangedError, match="replaced while it was being read"):
            _ = remote.parameters["big"].data
        assert len(faults.ranges) >= 2, faults.ranges


# --- S3 (moto's standalone server) ---------------------------------------------------------------


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    with http_servers.moto_s3("lazy") as options:
        yield options


def test_s3_load_equals_local_load(s3: dict[str, Any], assert_same_state):
    fs = fsspec.filesystem("s3", **s3)
    for path in corpus():
        fs.pipe_file(f"lazy/corpus/{path.name}", path.read_bytes())
        assert_same_state(
            ortckpt.load(path), ortckpt.load(f"s3://lazy/corpus/{path.name}", storage_options=s3)
        )


@contextlib.contextmanager
def s3_proxied(s3: dict[str, Any], **faults: Any) -> Iterator[tuple[dict[str, Any], http_servers.Faults]]:
    """storage_options reaching the S3 server through a fault proxy (moto checks no signature, so
    the proxy's address in them is enough), and the proxy's faults."""
    proxy = http_servers.Faults(**faults)
    with http_servers.fault_proxy(s3["endpoint_url"], proxy) as base:
        yield {**s3, "endpoint_url": base}, proxy


def test_s3_one_tensor_and_replacement(s3: dict[str, Any]):
    fs = fsspec.filesystem("s3", **s3)
    state = large_state()
    data = state.to_bytes()
    fs.pipe_file("lazy/large.ckpt", data)
    # the body bytes counted at a proxy in front of the server (moto keeps no access log)
    with s3_proxied(s3) as (options, faults):
        remote = ortckpt.load("s3://lazy/large.ckpt", storage_options=options)
        structure = faults.body_bytes
        assert 0 < structure <= MiB
        one = remote.parameters["t09"].data
        assert np.array_equal(one, state.parameters["t09"].data)
        fetched = faults.body_bytes
        assert fetched <= structure + one.nbytes + MiB, f"{fetched} of {len(data)} bytes fetched"
        # replaced between requests: another ETag
        other = large_state()
        other.parameters["t03"] = np.full(MiB // 2, -1, np.float32)
        fs.pipe_file("lazy/large.ckpt", other.to_bytes())
        with pytest.raises(CheckpointChangedError, match=r"s3://lazy/large\.ckpt"):
            _ = remote.parameters["t03"].data


def test_s3_a_large_tensor_is_fetched_in_parts_a_few_at_a_time(s3: dict[str, Any]):
    """As over HTTP: a 24 MiB tensor by ranged GetObjects of at most 4 MiB, up to four in flight
    (counted at a proxy delaying each reply by 0.2 s); the values are the local file's."""
    state = one_large(24)
    fsspec.filesystem("s3", **s3).pipe_file("lazy/parallel.ckpt", state.to_bytes())
    with s3_proxied(s3, delay=0.2) as (options, faults):
        remote = ortckpt.load("s3://lazy/parallel.ckpt", storage_options=options)
        faults.reset_counts()
        values = remote.parameters["big"].data
    assert np.array_equal(values, state.parameters["big"].data)
    spans = [re.fullmatch(r"bytes=(\d+)-(\d+)", r) for r in faults.ranges]
    sizes = [int(m[2]) - int(m[1]) + 1 for m in spans if m is not None]
    assert len(sizes) == len(faults.ranges) >= 24 * MiB // PART, faults.ranges
    assert max(sizes) <= PART and values.nbytes - MiB <= sum(sizes) <= values.nbytes + MiB
    assert 2 <= faults.peak <= IN_FLIGHT, faults.peak


@pytest.mark.parametrize(("mib", "part"), [(2, 1), (12, 2)], ids=["one-request", "one-part"])
def test_s3_a_padded_reply_is_cut_where_it_passes_its_range(s3: dict[str, Any], mib: int, part: int):
    """A ranged GetObject answered with 256 MiB more than asked (206, announced; the tensor's only
    request, or the second part of a large read): aiobotocore's streaming body is read in pieces
    and cut one byte past the range (s3fs's ``cat_file`` reads it whole: the process grew by
    more than 256 MiB), so the read is our error and the process grows by less than 32 MiB."""
    name = f"lazy/padded-{mib}.ckpt"
    fsspec.filesystem("s3", **s3).pipe_file(name, one_large(mib).to_bytes())
    with s3_proxied(s3) as (options, faults):
        ortckpt.load(f"s3://{name}", storage_options=options)
        structure = faults.gets
        faults.reset_counts()
        faults.mode, faults.after, faults.times = "oversize", structure + part - 1, 1
        growth, message = read_padded(f"s3://{name}", options)
        assert len(faults.ranges) >= part, faults.ranges
    assert "the server sent more" in message and f"s3://{name}" in message, message
    assert growth < 32 * MiB, (growth / MiB, http_servers.OVERSIZE / MiB)


def test_s3_a_reply_of_another_range_is_our_error(s3: dict[str, Any]):
    """A ranged GetObject answered with other bytes of the same length (its ContentRange says
    which), for a single request and for the parts of a large read: our error, never those
    values."""
    fsspec.filesystem("s3", **s3).pipe_file("lazy/moved.ckpt", one_large(12).to_bytes())
    with s3_proxied(s3) as (options, faults):
        remote = ortckpt.load("s3://lazy/moved.ckpt", storage_options=options)
        faults.mode = "other-range"
        with pytest.raises(RemoteSourceError, match="Content-Range") as info:
            _ = remote.parameters["big"].data
        assert "s3://lazy/moved.ckpt" in str(info.value)
        with pytest.raises(RemoteSourceError, match="Content-Range"):
            ortckpt.load("s3://lazy/moved.ckpt", storage_options=options)


def test_s3_a_reply_padded_past_what_was_asked_is_refused_unread(s3: dict[str, Any]):
    """As over HTTP: a round's S3 upload is copied by ranged GetObjects, each body cut one byte
    past its range, so replies padded far beyond the object are the upload's rejection
    (``unreadable``), read no further; a whole read within ``max_bytes`` (one ranged GetObject cut
    one byte past the limit) is ``SourceTooLargeError``; the same upload served as it is passes."""
    fsspec.filesystem("s3", **s3).pipe_file("lazy/upload.ckpt", large_state(2).to_bytes())
    with s3_proxied(s3) as (options, faults):
        url = "s3://lazy/upload.ckpt"
        good = ortckpt.average([url], max_bytes=64 * MiB, storage_options=options)
        assert [r.kind for r in good.sources] == [None]
        faults.reset_counts()
        faults.mode = "oversize"
        with pytest.raises(ortckpt.AggregationError) as refused:
            ortckpt.average([url], max_bytes=64 * MiB, storage_options=options)
        assert faults.body_bytes <= 64 * MiB + MiB  # the padding was never read whole
        with pytest.raises(SourceTooLargeError, match="more than 67108864"):
            ortckpt.load(url, mmap=False, max_bytes=64 * MiB, storage_options=options)
    (only,) = refused.value.report.sources
    assert only.kind == "unreadable" and "the server sent more" in (only.reason or ""), only


# --- the binding's source: a Python read(offset, length) -> bytes --------------------------------


def test_a_misbehaving_read_function_is_our_error_never_a_panic():
    from ortckpt import _native

    data = large_state(4, 64 << 10).to_bytes()

    def index(read: Any) -> Any:
        return _native.index_paged(read, len(data), "mem://x.ckpt", 4096)

    good = index(lambda o, n: data[o : o + n])
    assert CheckpointState._from_index(good).parameters["t02"].data[0] == 2
    with pytest.raises(CheckpointChangedError, match=r"asked for 4096 bytes at offset 0, got 10"):
        index(lambda o, n: data[o : o + 10])
    with pytest.raises(CheckpointChangedError, match=r"got 8192"):
        index(lambda o, n: data[o : o + n] * 2)
    with pytest.raises(TypeError, match="not bytes"):
        index(lambda o, n: "text")
    with pytest.raises(ZeroDivisionError):  # the function's own exception, as it is
        index(lambda o, n: 1 // 0)
    # failing later, at a tensor's first use
    spent = False

    def until_spent(o: int, n: int) -> bytes:
        if spent:
            raise SourceTooLargeError("budget spent")
        return data[o : o + n]

    state = CheckpointState._from_index(_native.index_paged(until_spent, len(data), "mem://y.ckpt", 4096))
    spent = True
    with pytest.raises(SourceTooLargeError, match="budget spent"):
        state.to_numpy()
    spent = False  # a failed fill is not remembered: the next use fetches again
    assert state.parameters["t03"].data[0] == 3
