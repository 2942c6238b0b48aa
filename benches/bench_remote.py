#!/usr/bin/env python3
"""Bytes and requests of remote reads, counted at the server (issue 34).

Not a test: nothing here asserts. nginx (from Debian) serves the files on 127.0.0.1, started and
stopped here (the tests' helper, ``tests/helpers/http_servers.py``); its access log gives every
reply's status and body bytes, so what each row fetched is counted where it was sent. Rows, side
by side in one run, medians of the times over ``--repeats``:

* ``ortckpt lazy: open + inspect``: ``ortckpt.load(url)`` and every parameter's name, dtype and
  shape, and the properties (the structure's blocks only);
* ``ortckpt lazy: + one tensor``: the same, then one tensor's values (the middle one);
* ``fsspec whole download``: ``fsspec.open(url).read()`` of the checkpoint (what a reader that
  needs the bytes first does; ``load(url, mmap=False)``);
* ``safetensors by range: header + one tensor``: the same model converted (``to_safetensors``),
  read as the Hugging Face hub reads it remotely: the 8-byte header length, the JSON header, then
  the tensor's range (fsspec ``cat_file``);
* the same rows for the checkpoint saved with its values in ``<url>.data``;
* ``average over N remote uploads``: ``ortckpt.average`` of N URLs: its body bytes against the
  uploads' sizes (each byte fetched once is 1.00x).

A second table times one large tensor's read (``--large-mib``, after its checkpoint was opened)
through the tests' fault proxy in front of nginx, which answers each request after
``--latency-ms`` and sends each reply at ``--rate-mib`` MiB/s (one connection's throughput to an
object store): as one range request (what the lazy reader did before), in 4 MiB parts one at a
time, and in 4 MiB parts four in flight (what it does: ``_sources._PART``, ``_IN_FLIGHT``).

Goal (issue 34): opening and inspecting the 1 GiB checkpoint of 1,000 tensors, and reading one
tensor of it, fetch at most the structure's blocks + that tensor + 1 MiB in a bounded number of
requests; a round over 100 remote uploads fetches each byte once.

    .venv/bin/python benches/bench_remote.py                 # 1 GiB of 1,000 tensors; 100 uploads
    .venv/bin/python benches/bench_remote.py --mib 64 --uploads 10 --repeats 1     # quick
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import ortckpt
from ortckpt import _sources

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# the tests' nginx: one way to start it
from tests.helpers import http_servers

MiB = 1 << 20


def model(mib: int, tensors: int) -> ortckpt.CheckpointState:
    """``tensors`` float32 tensors of ``mib`` MiB in all (distinct values: nothing compresses)."""
    each = mib * MiB // tensors // 4
    rng = np.random.default_rng(0)
    return ortckpt.CheckpointState(
        {f"layer{i:04d}.weight": rng.standard_normal(each, np.float32) for i in range(tensors)},
        properties={"round": 7, "samples": 1000},
    )


def counted(server: http_servers.Nginx, uri: str, work: Callable[[], Any]) -> tuple[float, int, int, int]:
    """Seconds, GET requests, HEAD requests and body bytes of ``work()`` for files under ``uri``."""
    server.clear()
    start = time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    replies = [r for r in server.replies() if r[1].startswith(uri)]
    gets = sum(1 for r in replies if r[0] == "GET")
    heads = sum(1 for r in replies if r[0] == "HEAD")
    return seconds, gets, heads, sum(r[3] for r in replies)


def inspect(url: str) -> None:
    state = ortckpt.load(url)
    for _, p in state.parameters.items():
        _ = (p.data_type, p.shape)
    _ = dict(state.properties)


def one_tensor(url: str, name: str) -> None:
    state = ortckpt.load(url)
    for _, p in state.parameters.items():
        _ = (p.data_type, p.shape)
    _ = float(state.parameters[name].data.sum())


def whole(url: str) -> None:
    import fsspec

    with fsspec.open(url, "rb") as f:
        f.read()


def safetensors_by_range(url: str, name: str) -> None:
    """The hub's remote read of a safetensors file: header length, header, one tensor's range."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    n = int.from_bytes(fs.cat_file(path, start=0, end=8), "little")
    header = json.loads(fs.cat_file(path, start=8, end=8 + n))
    begin, end = header[name]["data_offsets"]
    data = fs.cat_file(path, start=8 + n + begin, end=8 + n + end)
    _ = float(np.frombuffer(data, np.float32).sum())


@contextlib.contextmanager
def fetching(part: int, in_flight: int) -> Iterator[None]:
    """The lazy reader's part size and requests in flight set for the block's duration."""
    saved = _sources._PART, _sources._IN_FLIGHT
    _sources._PART, _sources._IN_FLIGHT = part, in_flight
    try:
        yield
    finally:
        _sources._PART, _sources._IN_FLIGHT = saved


def large_read(
    server: http_servers.Nginx, url: str, uri: str, part: int, in_flight: int
) -> tuple[float, int]:
    """Seconds and GET requests of reading the tensor ``big`` at ``url`` (opened first)."""
    with fetching(part, in_flight):
        state = ortckpt.load(url)
        server.clear()
        start = time.perf_counter()
        _ = float(state.parameters["big"].data.sum())
        seconds = time.perf_counter() - start
    return seconds, sum(1 for r in server.replies() if r[0] == "GET" and r[1] == uri)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=1024, help="the checkpoint's size (MiB)")
    parser.add_argument("--tensors", type=int, default=1000)
    parser.add_argument("--uploads", type=int, default=100, help="remote uploads in the round")
    parser.add_argument("--upload-mib", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--large-mib", type=int, default=64, help="the large tensor (MiB)")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="the proxy's wait per request")
    parser.add_argument("--rate-mib", type=float, default=64.0, help="the proxy's MiB/s per reply")
    parser.add_argument("--tmpdir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if http_servers.nginx_binary() is None:
        sys.exit("nginx is not installed (apt-get install -y nginx-light; scripts/setup_nginx.sh)")

    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        root = Path(tmp) / "www"
        root.mkdir()
        state = model(args.mib, args.tensors)
        name = f"layer{args.tensors // 2:04d}.weight"
        tensor_bytes = state.parameters[name].nbytes
        ortckpt.save(state, root / "model.ckpt")
        ortckpt.save(state, root / "external.ckpt", external_data_threshold=0)
        ortckpt.to_safetensors(state, root / "model.safetensors")
        del state
        up = model(args.upload_mib, 16)
        (root / "uploads").mkdir()
        for i in range(args.uploads):
            up.properties["samples"] = i + 1
            ortckpt.save(up, root / "uploads" / f"dev{i:03d}.ckpt")
        large = ortckpt.CheckpointState(
            {"big": np.random.default_rng(1).standard_normal(args.large_mib * MiB // 4, np.float32)}
        )
        ortckpt.save(large, root / "large.ckpt")
        del large
        size = (root / "model.ckpt").stat().st_size
        uploads_size = sum(p.stat().st_size for p in (root / "uploads").iterdir())

        with http_servers.nginx(root, Path(tmp) / "nginx") as server:
            base = server.url
            rows: dict[str, tuple[Callable[[], Any], str]] = {
                "ortckpt lazy: open + inspect": (lambda: inspect(f"{base}/model.ckpt"), "/model.ckpt"),
                "ortckpt lazy: + one tensor": (lambda: one_tensor(f"{base}/model.ckpt", name), "/model.ckpt"),
                "fsspec whole download": (lambda: whole(f"{base}/model.ckpt"), "/model.ckpt"),
                "safetensors by range: header + one tensor": (
                    lambda: safetensors_by_range(f"{base}/model.safetensors", name),
                    "/model.safetensors",
                ),
                ".data: open + inspect": (lambda: inspect(f"{base}/external.ckpt"), "/external.ckpt"),
                ".data: + one tensor": (lambda: one_tensor(f"{base}/external.ckpt", name), "/external.ckpt"),
                f"average over {args.uploads} remote uploads": (
                    lambda: ortckpt.average(
                        [f"{base}/uploads/dev{i:03d}.ckpt" for i in range(args.uploads)], weights="samples"
                    ),
                    "/uploads/",
                ),
            }
            results: dict[str, list[tuple[float, int, int, int]]] = {row: [] for row in rows}
            for _ in range(args.repeats):  # interleaved: every row sees the same machine
                for row, (work, uri) in rows.items():
                    results[row].append(counted(server, uri, work))
            faults = http_servers.Faults(delay=args.latency_ms / 1000, rate=args.rate_mib * MiB)
            ways = {
                "one range request (before)": (1 << 62, 1),
                "4 MiB parts, one at a time": (4 * MiB, 1),
                "4 MiB parts, 4 in flight": (4 * MiB, 4),
            }
            timed: dict[str, list[tuple[float, int]]] = {way: [] for way in ways}
            with http_servers.fault_proxy(base, faults) as proxy:
                for _ in range(args.repeats):
                    for way, (part, in_flight) in ways.items():
                        timed[way].append(
                            large_read(server, f"{proxy}/large.ckpt", "/large.ckpt", part, in_flight)
                        )

    print(
        f"checkpoint: {args.tensors} float32 tensors, {size / MiB:.1f} MiB "
        f"(one tensor: {tensor_bytes / MiB:.2f} MiB); "
        f"{args.uploads} uploads of {args.upload_mib} MiB; nginx on 127.0.0.1, {args.repeats} rounds"
    )
    print(f"{'row':<46}{'median s':>10}{'GET':>6}{'HEAD':>6}{'body MiB':>11}{'over tensor':>13}")
    out = {}
    for row, runs in results.items():
        seconds = statistics.median(r[0] for r in runs)
        _, gets, heads, body = runs[-1]  # the counts are the same every round
        if row.startswith("average"):
            extra = f"{body / uploads_size:.2f}x"
        elif "one tensor" in row:
            extra = f"+{(body - tensor_bytes) / MiB:.2f} MiB"
        else:
            extra = ""
        print(f"{row:<46}{seconds:>10.3f}{gets:>6}{heads:>6}{body / MiB:>11.2f}{extra:>13}")
        out[row] = {"seconds": [r[0] for r in runs], "gets": gets, "heads": heads, "body_bytes": body}
    print(
        f"\none {args.large_mib} MiB tensor through a proxy answering after {args.latency_ms:.0f} ms, "
        + (f"at {args.rate_mib:.0f} MiB/s per reply" if args.rate_mib else "replies unthrottled")
        + f"; median of {args.repeats}"
    )
    print(f"{'read':<46}{'median s':>10}{'GET':>6}{'vs one request':>16}")
    first = statistics.median(r[0] for r in next(iter(timed.values())))
    large_out = {}
    for way, runs in timed.items():
        seconds = statistics.median(r[0] for r in runs)
        print(f"{way:<46}{seconds:>10.3f}{runs[-1][1]:>6}{first / seconds:>15.2f}x")
        large_out[way] = {"seconds": [r[0] for r in runs], "gets": runs[-1][1]}
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"size": size, "tensor_bytes": tensor_bytes, "rows": out, "large_tensor": large_out}, indent=2
            )
        )


if __name__ == "__main__":
    main()
