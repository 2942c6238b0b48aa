"""ortckpt's native work runs with the GIL released, and threads using it at once get right results.

The module declares itself free-threading safe (``gil_used = false``): every native class is frozen
and every native function works on its arguments alone.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import ortckpt


def _state(seed: int, mib: int = 1) -> ortckpt.CheckpointState:
    rng = np.random.default_rng(seed)
    count = mib * 2**18 // 4
    return ortckpt.CheckpointState(
        {f"w{i}": rng.standard_normal(count).astype(np.float32) for i in range(4)},
        properties={"seed": seed},
    )


def test_save_releases_the_gil(tmp_path: Path) -> None:
    state = _state(0, mib=64)  # 256 MiB: the save (write + fsync) takes a while
    ticks = 0
    stop = threading.Event()

    def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0)

    worker = threading.Thread(target=ticker)
    worker.start()
    try:
        start = time.perf_counter()
        before = ticks
        ortckpt.save(state, tmp_path / "big.ckpt")
        during = ticks - before
        elapsed = time.perf_counter() - start
    finally:
        stop.set()
        worker.join()
    # With the GIL held for the whole save the ticker would stand still (a switch or two at most).
    assert during > 100, f"the ticker ran {during} times during a {elapsed:.2f} s save"


def test_threads_loading_and_saving_different_files_get_their_own_states(tmp_path: Path) -> None:
    def roundtrip(seed: int) -> bool:
        state = _state(seed)
        path = tmp_path / f"s{seed}.ckpt"
        for _ in range(5):
            ortckpt.save(state, path)
            again = ortckpt.load(path)
            if again.properties["seed"] != seed:
                return False
            for name, param in state.parameters.items():
                if not np.array_equal(again.parameters[name].data, param.data):
                    return False
            again_bytes = ortckpt.load_bytes(path.read_bytes())
            if again_bytes.properties["seed"] != seed:
                return False
        return True

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(roundtrip, range(8)))
