"""``ortckpt convert`` streams: converting a 64 MiB checkpoint to safetensors and to npz does not
copy the model into anonymous memory. Writing an ORT checkpoint goes through ``ortckpt.save``,
whose own memory use is the core writer's (tested with the writer; a writer that builds the
flatbuffer in memory holds one file's size): conversion must add no copy on top of it.

Measured in a subprocess by sampling its anonymous resident set (RssAnon: file-backed pages of the
memory-mapped inputs are the page cache's, not a copy) every millisecond while each conversion runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ortckpt

pytest.importorskip("safetensors")
if not Path("/proc/self/status").exists():
    pytest.skip("needs Linux's /proc/self/status (RssAnon)", allow_module_level=True)

MIB = 1 << 20
TENSORS, TENSOR_MIB = 32, 2

SCRIPT = textwrap.dedent(
    """
    import json, sys, threading, time
    import ortckpt, ortckpt.conversions, safetensors, ml_dtypes

    def anon():
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith("RssAnon:")).split()[1]) * 1024

    peak = 0
    running = True
    def sample():
        global peak
        while running:
            peak = max(peak, anon())
            time.sleep(0.001)

    folder = sys.argv[1]
    steps = [
        ("model.ckpt", "model.safetensors"),
        ("model.safetensors", "model.npz"),
        ("model.npz", "back.ckpt"),
    ]
    growth = {}
    for src, out in steps:
        before = anon()
        peak = before
        running = True
        thread = threading.Thread(target=sample)
        thread.start()
        ortckpt.convert(f"{folder}/{src}", f"{folder}/{out}")
        running = False
        thread.join()
        growth[out] = max(peak, anon()) - before
    print(json.dumps(growth))
    """
)


def test_convert_does_not_copy_the_model(tmp_path: Path):
    rng = np.random.default_rng(0)
    count = TENSOR_MIB * MIB // 4
    state = ortckpt.CheckpointState(
        {f"layer{i:02d}.weight": rng.standard_normal(count, dtype=np.float32) for i in range(TENSORS)}
    )
    ortckpt.save(state, tmp_path / "model.ckpt")
    del state
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    growth = json.loads(proc.stdout)
    model = TENSORS * TENSOR_MIB * MIB
    for out, grown in growth.items():
        # a copy of the model would be 64 MiB; one tensor is 2 MiB
        bound = model // 4 if not out.endswith(".ckpt") else model + model // 4  # (save's own use)
        assert grown < bound, f"{out}: anonymous memory grew by {grown / MIB:.1f} MiB"
    a, b = ortckpt.load(tmp_path / "model.ckpt"), ortckpt.load(tmp_path / "back.ckpt")
    assert list(a.parameters) == list(b.parameters)
    for name in a.parameters:
        assert a.parameters[name].data.tobytes() == b.parameters[name].data.tobytes()
