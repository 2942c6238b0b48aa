"""Loads never mix two saves: a saver thread and a saver process write two distinguishable states
(with external data) to one path alternately while loader threads and a loader process load it
for a few seconds (``ORTCKPT_CONCURRENCY_SECONDS``, default 3). Every load must be one complete
state, value by value; concurrent saves must never corrupt each other."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="uses fork")

SECONDS = float(os.environ.get("ORTCKPT_CONCURRENCY_SECONDS", "3"))


def make_state(tag: int) -> CheckpointState:
    return CheckpointState(
        {"w": np.full(2000, tag, dtype=np.float32), "small": np.array([tag], dtype=np.int32)},
        frozen={"f": np.arange(500, dtype=np.int64) * tag},
        properties={"tag": tag},
    )


STATES = {1: make_state(1), 2: make_state(2)}


def classify(path: Path, mmap: bool) -> str:
    """ "1"/"2" for a complete state, "mixed" otherwise, or the error's class name."""
    try:
        state = ortckpt.load(path, mmap=mmap)
        tag = state.properties["tag"]
        ok = (
            tag in STATES
            and bool(np.all(state.parameters["w"].data == tag))
            and state.parameters["small"].data.tolist() == [tag]
            and state.parameters["f"].data.tobytes() == STATES[int(tag)].parameters["f"].data.tobytes()
        )
        return str(tag) if ok else "mixed"
    except (ortckpt.CheckpointError, OSError) as exc:
        return type(exc).__name__


def saver_loop(path: Path, first: int, deadline: float, counts: Counter[str]) -> None:
    tag = first
    while time.monotonic() < deadline:
        ortckpt.save(STATES[tag], path, external_data_threshold=0)
        counts["saves"] += 1
        tag = 3 - tag


def loader_loop(path: Path, deadline: float, counts: Counter[str]) -> None:
    i = 0
    while time.monotonic() < deadline:
        counts[classify(path, mmap=i % 2 == 0)] += 1
        i += 1


def fork_worker(target: str, path: Path, deadline: float) -> tuple[int, int]:
    """A process running the saver or loader loop; reports its counts as JSON through a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_end)
        counts: Counter[str] = Counter()
        try:
            if target == "saver":
                saver_loop(path, 2, deadline, counts)
            else:
                loader_loop(path, deadline, counts)
        except BaseException as exc:
            counts[f"crashed: {exc!r}"] += 1
        os.write(write_end, json.dumps(counts).encode())
        os._exit(0)
    os.close(write_end)
    return pid, read_end


def collect(pid: int, read_end: int) -> Counter[str]:
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    return Counter(json.loads(b"".join(chunks)))


def test_concurrent_saves_and_loads_never_mix(tmp_path: Path) -> None:
    path = tmp_path / "shared.ckpt"
    ortckpt.save(STATES[1], path, external_data_threshold=0)
    deadline = time.monotonic() + SECONDS
    # processes first: forking while our threads run could copy a lock held by one of them
    procs = [fork_worker("saver", path, deadline), fork_worker("loader", path, deadline)]
    thread_counts = [Counter[str]() for _ in range(4)]
    threads = [threading.Thread(target=saver_loop, args=(path, 1, deadline, thread_counts[0]))]
    threads += [threading.Thread(target=loader_loop, args=(path, deadline, c)) for c in thread_counts[1:]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total: Counter[str] = Counter()
    for c in thread_counts:
        total.update(c)
    for pid, read_end in procs:
        total.update(collect(pid, read_end))
    print(dict(total))
    assert total["saves"] > 10, total
    loads = total["1"] + total["2"]
    assert loads > 50, total
    assert total["1"] > 0 and total["2"] > 0, total
    # every load gave one complete state: no mix, no error, no crash of any worker
    assert set(total) == {"saves", "1", "2"}, total
    final = ortckpt.load(path)
    assert classify(path, mmap=True) in ("1", "2")
    assert final.has_external_data
    assert sorted(os.listdir(tmp_path)) == ["shared.ckpt", "shared.ckpt.data"]
