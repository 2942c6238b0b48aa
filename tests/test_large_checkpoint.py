"""A checkpoint over 2 GiB: written with external data and read back, with bounded memory.

Runs in a fresh subprocess so its memory use is its own. Memory is measured as anonymous resident
memory (``RssAnon``), sampled while the work runs: pages of memory-mapped files are reclaimable
page cache and say nothing about copies, while any copy of tensor data would show up as anonymous
memory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

GIB = 1 << 30

CHILD = textwrap.dedent(
    """
    import json, sys, threading, time
    from pathlib import Path
    import numpy as np
    import ortckpt

    def rss_anon():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
        return 0

    peak = {"value": 0}
    stop = threading.Event()
    def sample():
        while not stop.is_set():
            peak["value"] = max(peak["value"], rss_anon())
            time.sleep(0.005)

    path = Path(sys.argv[1])
    count, elements = int(sys.argv[2]), int(sys.argv[3])
    # One read-only 256 MiB block reused for every tensor: read-only arrays are kept without a copy.
    block = np.arange(elements, dtype=np.float32)
    block.flags.writeable = False
    baseline = rss_anon()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    state = ortckpt.CheckpointState({f"w{i:02d}": block for i in range(count)})
    state.properties["note"] = "big"
    ortckpt.save(state, path)
    del state
    save_peak = peak["value"] - baseline
    peak["value"] = 0

    loaded = ortckpt.load(path)
    ok = loaded.has_external_data and len(loaded.parameters) == count
    for p in loaded.parameters.values():
        data = p.data
        ok = ok and data.shape == (elements,) and not data.flags.writeable
        for start in range(0, elements, 1 << 24):
            ok = ok and bool(np.array_equal(data[start:start + (1 << 24)], block[start:start + (1 << 24)]))
    load_peak = peak["value"] - baseline
    stop.set()
    print(json.dumps({"ok": bool(ok), "save_peak": save_peak, "load_peak": load_peak,
                      "property": loaded.properties["note"]}))
    """
)


@pytest.mark.slow
def test_checkpoint_over_2_gib_round_trips_with_bounded_memory(tmp_path: Path) -> None:
    count, elements = 9, 64 << 20  # 9 x 256 MiB = 2.25 GiB
    total = count * elements * 4
    if shutil.disk_usage(tmp_path).free < total * 2:
        pytest.skip("not enough free disk for a 2.25 GiB checkpoint")
    path = tmp_path / "big.ckpt"
    try:
        result = subprocess.run(
            [sys.executable, "-c", CHILD, str(path), str(count), str(elements)],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout.strip().splitlines()[-1])
        assert report["ok"] and report["property"] == "big"
        external = Path(str(path) + ".data")
        assert external.stat().st_size >= total > 2 * GIB
        assert path.stat().st_size < 64 * 1024, "the flatbuffer must stay small; data goes external"
        # Far below the 2.25 GiB of tensor data: no tensor is copied on save or on load.
        assert report["save_peak"] < 256 << 20, report
        assert report["load_peak"] < 256 << 20, report
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)
