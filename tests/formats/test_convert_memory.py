"""``ortckpt convert`` streams: converting a 64 MiB checkpoint to safetensors and to npz does not
copy the model into anonymous memory; reading safetensors (or npz) holds one copy of the input file,
read into private memory, and no more. Writing an ORT checkpoint goes through ``ortckpt.save``,
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
        # a copy of the model would be 64 MiB; one tensor is 2 MiB. Writing an ORT checkpoint may
        # hold one (save's own use); reading safetensors or npz holds exactly one: the input read
        # into private memory (no mapping another program's truncation could SIGBUS), tensors
        # viewed in it without a copy each.
        one_copy = out.endswith(".ckpt") or out == "model.npz"
        bound = model + model // 4 if one_copy else model // 4
        assert grown < bound, f"{out}: anonymous memory grew by {grown / MIB:.1f} MiB"
    a, b = ortckpt.load(tmp_path / "model.ckpt"), ortckpt.load(tmp_path / "back.ckpt")
    assert list(a.parameters) == list(b.parameters)
    for name in a.parameters:
        assert a.parameters[name].data.tobytes() == b.parameters[name].data.tobytes()


# -- npz: decompression bombs and the memory of compressed members ----------------------------------

NPZ_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    import ortckpt

    def status(key):
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith(key + ":")).split()[1]) * 1024

    # room for 512 MiB more than what the interpreter holds now: a 1 GiB inflation cannot fit
    limit = status("VmSize") + (512 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    before = status("VmRSS")
    try:
        state = ortckpt.from_npz(sys.argv[1])
        result = {"ok": sum(p.data.nbytes for p in state.parameters.values())}
    except ortckpt.ConversionError as exc:
        result = {"refused": str(exc)}
    result["grown"] = status("VmHWM") - before  # peak resident set, anonymous or not
    print(json.dumps(result))
    """
)


def _npz_child(path: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", NPZ_SCRIPT, str(path)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def _deflated_zeros(path: Path, size: int) -> Path:
    """An archive of one deflated uint8 member of ``size`` zeros (streamed: no ``size`` buffer)."""
    import zipfile

    header = np.lib.format.header_data_from_array_1_0(np.zeros(0, np.uint8))
    header["shape"] = (size,)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        with zf.open("zeros.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, header)
            chunk = bytes(8 * MIB)
            for _ in range(size // len(chunk)):
                member.write(chunk)
    return path


def test_npz_bomb_is_refused_within_the_address_space_limit(tmp_path: Path):
    bomb = _deflated_zeros(tmp_path / "bomb.npz", 1 << 30)
    assert bomb.stat().st_size < 2 * MIB  # about 1 MiB of deflate for 1 GiB of zeros
    result = _npz_child(bomb)
    assert "over the budget" in str(result.get("refused")), result
    assert int(result["grown"]) < 64 * MIB, result  # type: ignore[call-overload]


def test_npz_reading_stays_within_a_small_multiple_of_the_input(tmp_path: Path):
    rng = np.random.default_rng(1)
    arrays = {f"t{i}": rng.standard_normal(MIB // 4, dtype=np.float32) for i in range(16)}  # 16 MiB
    np.savez_compressed(tmp_path / "c.npz", **arrays)
    np.savez(tmp_path / "s.npz", **arrays)
    size = (tmp_path / "c.npz").stat().st_size
    compressed = _npz_child(tmp_path / "c.npz")
    assert compressed.get("ok") == 16 * MIB, compressed
    # the inflated members (16 MiB) plus one member's copy: well under 3x the archive
    assert int(compressed["grown"]) < 3 * size, compressed  # type: ignore[call-overload]
    stored = _npz_child(tmp_path / "s.npz")
    assert stored.get("ok") == 16 * MIB, stored
    assert int(stored["grown"]) < 3 * size, stored  # type: ignore[call-overload]
