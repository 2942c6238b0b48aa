"""Lazy ``gs://`` loads (gcsfs) against a real GCS JSON API server on 127.0.0.1, started and
stopped here: gcp-storage-emulator (PyPI), alone or behind the fault proxy of
tests/helpers/http_servers.py. The S3 tests of tests/test_remote_lazy.py, for GCS.

gcsfs's default file system for ``gs://`` (``ExtendedGcsFileSystem``) asks each bucket's storage
layout of the Storage Control API over gRPC (TLS, at ``endpoint_url``'s host and port) before it
reads or writes; an HTTP emulator cannot answer, so each call waits for gcsfs's retries of that
question (``retry_timeout``: 60 s) and the answer, unknown, is not kept. The tests use gcsfs's
plain ``GCSFileSystem`` (what ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` gives), and one test the
default with ``retry_timeout=0.1``."""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointChangedError, RemoteSourceError, SourceTooLargeError
from tests.helpers import http_servers
from tests.helpers.checks import promptly
from tests.test_remote_lazy import IN_FLIGHT, PART, corpus, large_state, one_large, read_padded

fsspec = pytest.importorskip("fsspec")

MiB = 1 << 20
BUCKET = "lazy"
#: gcsfs reads this when it is imported: ``false`` makes ``gs://`` its plain ``GCSFileSystem``
PLAIN = "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"


@pytest.fixture(scope="module")
def gcs() -> Iterator[dict[str, Any]]:
    """storage_options reaching the emulator (no credentials: ``token="anon"``); ``gs://`` is
    gcsfs's plain file system here and in the processes the tests start."""
    gcsfs = pytest.importorskip("gcsfs", reason="gcsfs is not installed: the gs:// tests need it")
    pytest.importorskip(
        "gcp_storage_emulator.server",
        reason="gcp-storage-emulator is not installed (pip install gcp-storage-emulator)",
    )
    saved = os.environ.get(PLAIN)
    before = fsspec.get_filesystem_class("gs")
    try:
        os.environ[PLAIN] = "false"  # for the processes started by the tests
        # here gcsfs was imported already (the variable is read then): its class, named
        fsspec.register_implementation("gs", gcsfs.core.GCSFileSystem, clobber=True)
        with http_servers.gcs_emulator(BUCKET) as url:
            yield {"endpoint_url": url, "token": "anon"}
    finally:
        fsspec.register_implementation("gs", before, clobber=True)
        if saved is None:
            os.environ.pop(PLAIN, None)
        else:
            os.environ[PLAIN] = saved


def put(options: dict[str, Any], name: str, data: bytes) -> str:
    """``data`` stored as ``name`` in the bucket (straight to the emulator); its URL."""
    with warnings.catch_warnings():  # aiohttp's advice on gcsfs's upload of a large bytes body
        warnings.filterwarnings("ignore", "Sending a large body", ResourceWarning)
        fsspec.filesystem("gs", **options).pipe_file(f"{BUCKET}/{name}", data)
    return f"gs://{BUCKET}/{name}"


@contextlib.contextmanager
def gcs_proxied(gcs: dict[str, Any], **faults: Any) -> Iterator[tuple[dict[str, Any], http_servers.Faults]]:
    """storage_options reaching the emulator through a fault proxy (gcsfs sends every request to
    ``endpoint_url``), and the proxy's faults. The proxy counts GETs, and gcsfs's ``info()`` is a
    GET too (of the object's metadata)."""
    proxy = http_servers.Faults(**faults)
    with http_servers.fault_proxy(gcs["endpoint_url"], proxy) as base:
        yield {**gcs, "endpoint_url": base}, proxy


def test_gcs_load_equals_local_load(gcs: dict[str, Any], assert_same_state):
    for path in corpus():
        url = put(gcs, f"corpus/{path.name}", path.read_bytes())
        assert_same_state(ortckpt.load(path), ortckpt.load(url, storage_options=gcs))
        assert_same_state(ortckpt.load(path), ortckpt.load(url, mmap=False, storage_options=gcs))


def test_gcs_one_tensor_and_replacement(gcs: dict[str, Any]):
    state = large_state()
    data = state.to_bytes()
    url = put(gcs, "large.ckpt", data)
    # the body bytes counted at a proxy in front of the server (the emulator keeps no access log)
    with gcs_proxied(gcs) as (options, faults):
        remote = ortckpt.load(url, storage_options=options)
        structure = faults.body_bytes
        assert 0 < structure <= MiB
        one = remote.parameters["t09"].data
        assert np.array_equal(one, state.parameters["t09"].data)
        fetched = faults.body_bytes
        assert fetched <= structure + one.nbytes + MiB, f"{fetched} of {len(data)} bytes fetched"
        ranged = [r for r in faults.ranges if r]
        assert ranged and all(re.fullmatch(r"bytes=\d+-\d+", r) for r in ranged), faults.ranges
        # replaced between requests: another generation
        other = large_state()
        other.parameters["t03"] = np.full(MiB // 2, -1, np.float32)
        put(gcs, "large.ckpt", other.to_bytes())
        with pytest.raises(CheckpointChangedError, match=r"gs://lazy/large\.ckpt"):
            _ = remote.parameters["t03"].data


def test_gcs_a_large_tensor_is_fetched_in_parts_a_few_at_a_time(gcs: dict[str, Any]):
    """As over S3: a 24 MiB tensor by ranged GETs of at most 4 MiB, up to four in flight (counted
    at a proxy delaying each reply by 0.2 s); the values are the local file's."""
    state = one_large(24)
    url = put(gcs, "parallel.ckpt", state.to_bytes())
    with gcs_proxied(gcs, delay=0.2) as (options, faults):
        remote = ortckpt.load(url, storage_options=options)
        faults.wait_idle()  # gcsfs's info() lists beside its GET and leaves the listing running
        faults.reset_counts()
        values = remote.parameters["big"].data
    assert np.array_equal(values, state.parameters["big"].data)
    spans = [re.fullmatch(r"bytes=(\d+)-(\d+)", r) for r in faults.ranges if r]
    sizes = [int(m[2]) - int(m[1]) + 1 for m in spans if m is not None]
    assert len(sizes) >= 24 * MiB // PART, faults.ranges
    assert max(sizes) <= PART and values.nbytes - MiB <= sum(sizes) <= values.nbytes + MiB
    # the parts, then the identity check (gcsfs's metadata GETs, no Range) once after all of them
    ranged = len(sizes)
    assert faults.ranges[ranged:] and not any(faults.ranges[ranged:]), faults.ranges
    assert 2 <= faults.peak <= IN_FLIGHT, faults.peak


@pytest.mark.parametrize(("mib", "part"), [(2, 1), (12, 2)], ids=["one-request", "one-part"])
def test_gcs_a_padded_reply_is_cut_where_it_passes_its_range(gcs: dict[str, Any], mib: int, part: int):
    """A ranged GET answered with 256 MiB more than asked (206, announced; the tensor's only
    request, or the second part of a large read): the reply is read as a stream and cut one byte
    past the range (gcsfs's ``cat_file`` reads it whole), so the read is our error and the
    reading process grows by less than 32 MiB."""
    url = put(gcs, f"padded-{mib}.ckpt", one_large(mib).to_bytes())
    with gcs_proxied(gcs) as (options, faults):
        ortckpt.load(url, storage_options=options)
        structure = faults.ranged_gets  # a load's metadata GETs vary with gcsfs's caches; these do not
        faults.reset_counts()
        faults.ranged_only = True
        faults.mode, faults.after, faults.times = "oversize", structure + part - 1, 1
        growth, message = read_padded(url, options)
        assert len([r for r in faults.ranges if r]) >= part, faults.ranges
    assert "the server sent more" in message and url in message, message
    assert growth < 32 * MiB, (growth / MiB, http_servers.OVERSIZE / MiB)


def test_gcs_a_reply_of_another_range_is_our_error(gcs: dict[str, Any]):
    """A ranged GET answered with other bytes of the same length (its Content-Range says which),
    for the parts of a large read and while the structure is read: our error, never those
    values."""
    url = put(gcs, "moved.ckpt", one_large(12).to_bytes())
    with gcs_proxied(gcs) as (options, faults):
        remote = ortckpt.load(url, storage_options=options)
        faults.mode = "other-range"
        with pytest.raises(RemoteSourceError, match="Content-Range") as info:
            _ = remote.parameters["big"].data
        assert url in str(info.value)
        with pytest.raises(RemoteSourceError, match="Content-Range"):
            ortckpt.load(url, storage_options=options)


def test_gcs_a_short_reply_is_our_error(gcs: dict[str, Any]):
    """A ranged GET answered with half the bytes asked (a shorter 206): our error naming the URL,
    for one request and for a part of a large read."""
    url = put(gcs, "short.ckpt", one_large(12).to_bytes())
    with gcs_proxied(gcs) as (options, faults):
        remote = ortckpt.load(url, storage_options=options)
        faults.mode = "truncate"
        for name in ("small", "big"):
            with pytest.raises(CheckpointChangedError, match=r"the server sent \d+") as info:
                _ = remote.parameters[name].data
            assert url in str(info.value)


def test_gcs_a_stalled_server_is_our_error_within_the_deadline(
    gcs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
):
    """A server that reads a range request and never answers: ``RemoteSourceError`` once the
    deadline passes, never a hang (gcsfs's own timeout is none by default)."""
    url = put(gcs, "stalled.ckpt", large_state(4).to_bytes())
    monkeypatch.setenv("ORTCKPT_REMOTE_TIMEOUT", "1")
    with gcs_proxied(gcs) as (options, faults):
        remote = ortckpt.load(url, storage_options=options)
        faults.mode, faults.after = "stall", faults.gets
        raised = promptly(lambda: remote.parameters["t02"].data, timeout=20)
        faults.released.set()
    assert isinstance(raised, RemoteSourceError), raised
    assert url in str(raised) and "did not answer within" in str(raised)


def test_gcs_a_reply_padded_past_what_was_asked_is_refused_unread(gcs: dict[str, Any]):
    """As over S3: a round's GCS upload is copied by ranged GETs, each body cut one byte past its
    range, so replies padded far beyond the object are the upload's rejection (``unreadable``),
    read no further; a whole read within ``max_bytes`` (one ranged GET cut one byte past the limit)
    is ``SourceTooLargeError``; the same upload served as it is passes."""
    url = put(gcs, "upload.ckpt", large_state(2).to_bytes())
    with gcs_proxied(gcs) as (options, faults):
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


def test_gcs_default_file_system_reads_are_capped_too(gcs: dict[str, Any]):
    """gcsfs's default ``gs://`` file system (``ExtendedGcsFileSystem``) routes a read by the
    bucket's storage layout, as gcsfs's ``cat_file`` does: a bucket that is not zonal (here: one
    whose layout the emulator cannot tell, asked for 0.1 s) is read by the capped ranged GET,
    so a padded reply is our error and its padding is not read (counted at the proxy)."""
    from gcsfs.extended_gcsfs import ExtendedGcsFileSystem

    url = put(gcs, "default.ckpt", one_large(2).to_bytes())
    fsspec.register_implementation("gs", ExtendedGcsFileSystem, clobber=True)
    try:
        with gcs_proxied(gcs) as (options, faults):
            options = {**options, "retry_timeout": 0.1, "retry_initial": 0.05, "retry_maximum": 0.05}
            remote = ortckpt.load(url, storage_options=options)
            assert isinstance(fsspec.filesystem("gs", **options), ExtendedGcsFileSystem)
            faults.reset_counts()
            faults.mode = "oversize"
            with pytest.raises(RemoteSourceError, match="the server sent more") as info:
                _ = remote.parameters["big"].data
            assert faults.body_bytes < 64 * MiB, faults.body_bytes
    finally:
        fsspec.register_implementation("gs", __import__("gcsfs").core.GCSFileSystem, clobber=True)
    assert url in str(info.value)


def test_gcs_missing_object(gcs: dict[str, Any]):
    with pytest.raises(FileNotFoundError):
        ortckpt.load(f"gs://{BUCKET}/absent.ckpt", storage_options=gcs)
    with pytest.raises(FileNotFoundError):
        ortckpt.load(f"gs://{BUCKET}/absent.ckpt", mmap=False, max_bytes=MiB, storage_options=gcs)
