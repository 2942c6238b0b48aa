"""Bytes that change while ortckpt reads them: only ortckpt's exceptions or complete states.

A checkpoint file is mapped by ``ortckpt.load`` while another thread, or another process through
a shared writable mapping, flips bytes of it (mostly structural bytes: names, offsets, lengths,
vtables). Each load then touches everything the state holds. Allowed outcomes per load: a state
whose every accessor works, or a ``CheckpointError`` subclass (or ``OSError``). A process abort,
a ``PanicException``, any other exception type, or a hang fails the test. The race runs in a child
process so an abort is observed instead of killing pytest.

``ORTCKPT_RACE_SECONDS`` sets the duration of each race (default 3 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ortckpt

RACE_SECONDS = float(os.environ.get("ORTCKPT_RACE_SECONDS", "4"))


def _structured_state() -> ortckpt.CheckpointState:
    """Many small tensors, strings, optimizer state and properties: most bytes are structure."""
    rng = np.random.default_rng(7)
    params = {f"layer{i}.w": rng.standard_normal((2, 2)).astype(np.float32) for i in range(40)}
    params["tokens"] = np.array(["a", "bé", "ccc"], dtype=object)
    frozen = {f"frozen{i}": np.arange(i + 1, dtype=np.int64) for i in range(10)}
    states = {
        name: {"momentum0": np.zeros_like(v), "momentum1": np.ones_like(v)}
        for name, v in params.items()
        if name != "tokens"
    }
    return ortckpt.CheckpointState(
        params,
        frozen=frozen,
        properties={"epoch": 3, "loss": 0.5, "note": "héllo"},
        optimizer={"group0": ortckpt.OptimizerGroup(step=3, initial_learning_rate=1e-3, states=states)},
    )


CHILD = textwrap.dedent(
    r"""
    import json, mmap, multiprocessing, os, random, sys, threading, time
    import ortckpt

    path, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    pristine = open(path, "rb").read()
    positions = json.loads(sys.argv[4])  # structural byte positions of the pristine file

    def flipper(stop_at):
        rng = random.Random(1)
        with open(path, "r+b") as f:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE)
            while time.monotonic() < stop_at:
                for _ in range(8):
                    p = rng.choice(positions)
                    m[p] = rng.randrange(256)
                for _ in range(8):  # mostly-valid bytes keep the parser going deep
                    p = rng.choice(positions)
                    m[p] = pristine[p]
            m[:] = pristine
            m.close()

    def touch(state):
        for name, p in state.parameters.items():
            (p.name, p.trainable, p.shape, p.dtype, p.nbytes, p.is_nominal)
            if not p.is_nominal:
                p.data.sum() if p.dtype != object else list(p.data.flat)
        for key, value in state.properties.items():
            (key, value)
        if state.optimizer:
            for group in state.optimizer.values():
                (group.step, group.initial_learning_rate)
                for momentums in group.states.values():
                    for arr in momentums.values():
                        arr.sum()
        repr(state)

    stop_at = time.monotonic() + seconds
    if mode == "thread":
        worker = threading.Thread(target=flipper, args=(stop_at,))
    else:
        worker = multiprocessing.get_context("fork").Process(target=flipper, args=(stop_at,))
    worker.start()
    counts = {"ok": 0}
    while time.monotonic() < stop_at:
        try:
            touch(ortckpt.load(path))
            counts["ok"] += 1
        except (ortckpt.CheckpointError, OSError) as exc:
            kind = type(exc).__name__
            counts[kind] = counts.get(kind, 0) + 1
    worker.join()
    print(json.dumps(counts))
    """
)


def _structural_positions(data: bytes) -> list[int]:
    """Every byte position outside tensor values (raw data ranges come from the index)."""
    state = ortckpt.load_bytes(data)
    mask = np.ones(len(data), dtype=bool)
    base = np.frombuffer(data, dtype=np.uint8)
    base_addr = base.ctypes.data
    arrays = [p.data for p in state.parameters.values() if p.dtype != object]
    if state.optimizer:
        arrays += [a for g in state.optimizer.values() for m in g.states.values() for a in m.values()]
    for arr in arrays:
        start = arr.ctypes.data - base_addr
        if 0 <= start < len(data):
            mask[start : start + arr.nbytes] = False
    return [int(i) for i in np.flatnonzero(mask)]


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_bytes_changing_during_load_give_errors_or_states(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "race.ckpt"
    ortckpt.save(_structured_state(), path)
    data = path.read_bytes()
    positions = _structural_positions(data)
    assert len(positions) > len(data) // 2, "the race should mostly hit structure"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), mode, str(RACE_SECONDS), json.dumps(positions)],
        capture_output=True,
        text=True,
        timeout=RACE_SECONDS * 10 + 60,
    )
    assert proc.returncode == 0, f"child died with {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert "PanicException" not in proc.stderr and "panicked" not in proc.stderr, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    loads = sum(counts.values())
    assert loads >= 20, counts
    # The race must really have produced broken reads, not only clean ones.
    assert loads - counts["ok"] > 0, counts


def test_readonly_views_of_mutable_memory_are_copied() -> None:
    data = _structured_state().to_bytes()
    base = bytearray(data)
    view = memoryview(base).toreadonly()
    array = np.frombuffer(base, dtype=np.uint8)
    array.flags.writeable = False
    for source in (view, array):
        state = ortckpt.load_bytes(source)
        before = state.parameters["layer0.w"].data.copy()
        base[:] = bytes(len(base))  # zero the caller's memory after loading
        assert np.array_equal(state.parameters["layer0.w"].data, before)
        base[:] = data
