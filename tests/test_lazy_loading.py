"""``ortckpt.load`` memory-maps the file and reads nothing but the flatbuffer structure: tensor
values are read-only, zero-copy views into the mapping, and pages are only touched when used.

The memory measurements run in fresh subprocesses (so RSS is clean) and include controls showing
that the measurement does see memory when it is used: touching a whole tensor, and loading the same
file with ``mmap=False``. The >= 1 GiB test is marked ``slow``; a 128 MiB version always runs.

Note: RSS grows by about 2 MiB per tensor on load even though no tensor byte is read: the verifier
reads each ``raw_data`` length prefix, which sits just before the data, and the kernel maps the
whole (large) page-cache folio around it. Hence few, big tensors here.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, OptimizerGroup
from ortckpt._native import MappedFile
from tests.helpers.paths import corpus_files, fixture_files

MIB = 2**20

# ==================================================================================================
# Zero-copy, read-only views
# ==================================================================================================


def mapping_of(arr: np.ndarray[Any, Any]) -> MappedFile | None:
    """The memory-mapping ``MappedFile`` at the end of ``arr``'s ``.base`` chain, if any."""
    obj: Any = arr
    while obj is not None:
        if isinstance(obj, MappedFile) and obj.mapped:
            return obj
        # numpy < 1.23's frombuffer keeps a memoryview of the exporter as the array's base
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
    return None


def assert_view_into_mapping(arr: np.ndarray[Any, Any], file_bytes: bytes, what: str) -> None:
    """``arr`` is a read-only view whose memory lies inside the mapping of the file, at the place
    where the file holds exactly its bytes."""
    mf = mapping_of(arr)
    assert mf is not None, f"{what}: .base chain does not reach a MappedFile"
    whole = np.frombuffer(cast(Any, mf), dtype=np.uint8)
    start = whole.ctypes.data
    assert len(mf) == len(file_bytes) == whole.nbytes
    addr = arr.ctypes.data
    assert start <= addr and addr + arr.nbytes <= start + len(mf), f"{what}: not inside the mapping"
    assert np.shares_memory(arr, whole), what
    offset = addr - start
    assert file_bytes[offset : offset + arr.nbytes] == arr.tobytes(), what
    assert not arr.flags.writeable and not arr.flags.owndata, what


def assert_read_only(arr: np.ndarray[Any, Any], what: str) -> None:
    assert not arr.flags.writeable, what
    with pytest.raises(ValueError):
        arr.flags.writeable = True
    if arr.size:
        with pytest.raises(ValueError, match="read-only"):
            arr.reshape(-1)[0] = arr.reshape(-1)[0]
    with pytest.raises(ValueError, match="read-only"):
        arr[...] = np.zeros_like(arr)


def _state_with_every_numeric_dtype() -> CheckpointState:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    arrays: dict[str, np.ndarray[Any, Any]] = {
        "f32": w,
        "f64": rng.standard_normal(5),
        "f16": np.array([1.5, -2.0, 3.25], dtype=np.float16),
        "bf16": np.arange(7, dtype=np.uint16).view(ml_dtypes.bfloat16),
        "u8": np.arange(13, dtype=np.uint8),
        "i16": np.arange(-3, 4, dtype=np.int16),
        "i64": np.array([-(2**63), 2**63 - 1], dtype=np.int64),
        "u64": np.array([2**64 - 1], dtype=np.uint64),
        "c128": np.array([[1 + 2j, 3 - 4j]], dtype=np.complex128),
        "bool": np.array([True, False, True]),
        "f8": np.arange(9, dtype=np.uint8).view(ml_dtypes.float8_e5m2),
        "scalar": np.array(2.5, dtype=np.float64),
    }
    return CheckpointState(
        {k: v for k, v in arrays.items() if k != "u8"},
        frozen={"u8": arrays["u8"]},
        optimizer={"group0": OptimizerGroup(3, 1e-3, {"f32": {"momentum0": w * 2, "momentum1": w * w}})},
    )


def test_loaded_values_are_read_only_zero_copy_views(tmp_path: Path) -> None:
    path = tmp_path / "dtypes.ckpt"
    original = _state_with_every_numeric_dtype()
    ortckpt.save(original, path)
    file_bytes = path.read_bytes()
    state = ortckpt.load(path)
    for name, param in state.parameters.items():
        arr = param.data
        assert param.data is arr, f"{name}: .data is cached (the same view each time)"
        assert_view_into_mapping(arr, file_bytes, name)
        assert_read_only(arr, name)
        np.testing.assert_array_equal(arr, original.parameters[name].data)
    assert state.optimizer is not None
    for momentum, arr in state.optimizer["group0"].states["f32"].items():
        assert_view_into_mapping(arr, file_bytes, momentum)
        assert_read_only(arr, momentum)
    # every view shares one mapping
    maps = {id(mapping_of(p.data)) for p in state.parameters.values()}
    assert len(maps) == 1


ORT_FILES = fixture_files("mlp_*.ckpt") + corpus_files()


@pytest.mark.parametrize("path", ORT_FILES, ids=lambda p: p.stem)
def test_ort_written_float32_values_are_zero_copy(path: Path) -> None:
    """ORT puts raw_data on (at least) 4-byte boundaries, enough for float32: no copies."""
    state = ortckpt.load(path)
    if state.is_nominal:
        pytest.skip("nominal: no values")
    file_bytes = path.read_bytes()
    for name, param in state.parameters.items():
        assert param.dtype == np.float32
        assert_view_into_mapping(param.data, file_bytes, name)
    for group in (state.optimizer or {}).values():
        for pname, momentums in group.states.items():
            for mname, arr in momentums.items():
                assert_view_into_mapping(arr, file_bytes, f"{pname}/{mname}")


def test_load_without_mmap_gives_read_only_arrays(tmp_path: Path) -> None:
    path = tmp_path / "dtypes.ckpt"
    ortckpt.save(_state_with_every_numeric_dtype(), path)
    state = ortckpt.load(path, mmap=False)
    for name, param in state.parameters.items():
        assert mapping_of(param.data) is None, name
        assert_read_only(param.data, name)


def test_views_outlive_the_state_and_survive_saving_over_the_file(tmp_path: Path) -> None:
    """A view keeps the mapping alive after the state is gone, and ``save`` replaces the file by
    rename, so a live mapping keeps showing the old values."""
    path = tmp_path / "ckpt"
    ortckpt.save(CheckpointState({"w": np.arange(1000, dtype=np.float32)}), path)
    state = ortckpt.load(path)
    view = state.parameters["w"].data
    del state
    gc.collect()
    np.testing.assert_array_equal(view, np.arange(1000, dtype=np.float32))

    reloaded = ortckpt.load(path)
    reloaded.parameters["w"] = np.full(1000, 7, dtype=np.float32)
    ortckpt.save(reloaded, path)  # over the file `view` maps
    np.testing.assert_array_equal(view, np.arange(1000, dtype=np.float32))
    np.testing.assert_array_equal(ortckpt.load(path).parameters["w"].data, np.full(1000, 7, dtype=np.float32))


def test_unaligned_values_are_copied_not_misread(tmp_path: Path) -> None:
    """A float64 tensor on a 4-byte (not 8-byte) boundary, as a foreign writer may produce: the
    values must be right, read-only, and (when misaligned) a private aligned copy."""
    import struct

    values = [1.5, -2.25, 1e300]
    for pad in (0, 4):
        # a minimal checkpoint: root -> module state -> [tensor] with raw_data at offset 52 + pad
        raw = struct.pack("<3d", *values)
        data = _tiny_checkpoint(raw, pad)
        path = tmp_path / f"pad{pad}.ckpt"
        path.write_bytes(data)
        arr = ortckpt.load(path).parameters["d"].data
        assert arr.tolist() == values and not arr.flags.writeable
        assert arr.ctypes.data % 8 == 0
        offset = data.index(raw)
        assert offset % 8 == pad
        # aligned: a view into the mapping; misaligned: a private aligned copy
        assert (mapping_of(arr) is not None) == (pad == 0)


def _tiny_checkpoint(raw: bytes, pad: int) -> bytes:
    """A checkpoint with one DOUBLE tensor "d" (dims [3]) whose raw_data starts at ``pad`` plus a
    fixed offset, built by hand."""
    import struct

    buf = bytearray()

    def u32(v: int) -> None:
        buf.extend(struct.pack("<I", v))

    # header
    u32(0)
    buf.extend(b"ODTC")
    # Checkpoint vtable (version, module_state) + table
    vt = len(buf)
    buf.extend(struct.pack("<HHHH", 8, 12, 4, 8))
    root = len(buf)
    buf.extend(struct.pack("<i", root - vt))
    buf.extend(struct.pack("<i", 2))  # version
    ms_ref = len(buf)
    u32(0)
    struct.pack_into("<I", buf, 0, root)
    # ModuleState vtable (requires_grad_params) + table
    vt = len(buf)
    buf.extend(struct.pack("<HHH", 6, 8, 4))
    buf.extend(b"\0\0")
    ms = len(buf)
    struct.pack_into("<I", buf, ms_ref, ms - ms_ref)
    buf.extend(struct.pack("<i", ms - vt))
    vec_ref = len(buf)
    u32(0)
    # vector of one tensor
    vec = len(buf)
    struct.pack_into("<I", buf, vec_ref, vec - vec_ref)
    u32(1)
    t_ref = len(buf)
    u32(0)
    # Tensor vtable (name, -, dims, data_type, raw_data) + table
    vt = len(buf)
    buf.extend(struct.pack("<HHHHHHH", 14, 20, 4, 0, 8, 12, 16))
    buf.extend(b"\0\0")
    t = len(buf)
    struct.pack_into("<I", buf, t_ref, t - t_ref)
    buf.extend(struct.pack("<i", t - vt))
    name_ref = len(buf)
    u32(0)
    dims_ref = len(buf)
    u32(0)
    buf.extend(struct.pack("<i", 11))  # DOUBLE
    raw_ref = len(buf)
    u32(0)
    # name
    struct.pack_into("<I", buf, name_ref, len(buf) - name_ref)
    u32(1)
    buf.extend(b"d\0\0\0")
    # dims: the int64 elements on an 8-byte boundary
    while (len(buf) + 4) % 8:
        buf.extend(b"\0")
    struct.pack_into("<I", buf, dims_ref, len(buf) - dims_ref)
    u32(1)
    buf.extend(struct.pack("<q", 3))
    # raw_data: elements at 8k + pad
    while (len(buf) + 4) % 8 != pad:
        buf.extend(b"\0")
    struct.pack_into("<I", buf, raw_ref, len(buf) - raw_ref)
    u32(len(raw))
    buf.extend(raw)
    return bytes(buf)


# ==================================================================================================
# Memory: loading touches only the structure
# ==================================================================================================

_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import ortckpt

    path, count, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    n = mib * 2**20 // 4
    state = ortckpt.CheckpointState(frozen={"small": np.arange(12, dtype=np.float32).reshape(3, 4)},
                                    properties={"epoch": 1})
    for i in range(count):
        chunk = np.arange(n, dtype=np.float32)   # exact small integers at the start
        chunk += i
        state.parameters[f"big{i}"] = chunk      # the state keeps its own copy
        del chunk
    ortckpt.save(state, path)
    """
)

_PROBE = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import ortckpt
    from ortckpt._native import MappedFile

    def rss_mib():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    path, warmup, big_name, index = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    ortckpt.load(warmup).parameters["small"].data  # load every module lazily imported on the way
    out = {}
    r0 = rss_mib()
    state = ortckpt.load(path)
    out["after_load"] = rss_mib() - r0
    small = state.parameters["small"].data
    out["small_ok"] = small.tolist() == np.arange(12, dtype=np.float32).reshape(3, 4).tolist()
    big = state.parameters[big_name].data
    obj = big
    while obj is not None and not isinstance(obj, MappedFile):
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)  # numpy < 1.23
    whole = np.frombuffer(obj, dtype=np.uint8)
    start, length = whole.ctypes.data, len(obj)
    out["zero_copy"] = start <= big.ctypes.data and big.ctypes.data + big.nbytes <= start + length
    out["read_only"] = not big.flags.writeable
    out["head_ok"] = big[:1024].tolist() == [float(i + index) for i in range(1024)]
    out["after_small_read"] = rss_mib() - r0
    # controls: the measurement sees pages when they are used
    before = rss_mib()
    big.sum(dtype=np.float64)  # touches every page of one tensor
    out["touch_one_tensor"] = rss_mib() - before
    del state, small, big, obj, whole
    before = rss_mib()
    state = ortckpt.load(path, mmap=False)
    out["load_without_mmap"] = rss_mib() - before
    print(json.dumps(out))
    """
)


def _run(script: str, *args: str, timeout: float) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout


def _check_lazy(tmp_path: Path, count: int, tensor_mib: int, min_size: int) -> dict[str, Any]:
    free = shutil.disk_usage(tmp_path).free
    if free < 3 * count * tensor_mib * MIB:
        pytest.skip(f"not enough space in {tmp_path}: {free / MIB:.0f} MiB free")
    path = tmp_path / "big.ckpt"
    warmup = tmp_path / "warmup.ckpt"
    try:
        ortckpt.save(CheckpointState(frozen={"small": np.zeros((3, 4), np.float32)}), warmup)
        _run(_WRITER, str(path), str(count), str(tensor_mib), timeout=600)
        size = path.stat().st_size
        assert size >= min_size, size
        index = count // 2
        report: dict[str, Any] = json.loads(
            _run(_PROBE, str(path), str(warmup), f"big{index}", str(index), timeout=600)
        )
    finally:
        for p in (path, warmup):
            if p.exists():
                p.unlink()
    size_mib = size / MIB
    report["file_mib"] = size_mib
    print(f"lazy loading of a {size_mib:.0f} MiB checkpoint: {report}")
    assert report["small_ok"] and report["head_ok"], report
    assert report["zero_copy"] and report["read_only"], report
    # loading and reading one small tensor and the head of a big one: a tiny fraction of the file
    assert report["after_load"] < 0.10 * size_mib, report
    assert report["after_small_read"] < 0.10 * size_mib, report
    # the controls: touching one whole tensor shows up, and so does reading the file without mmap
    assert report["touch_one_tensor"] > 0.8 * tensor_mib, report
    assert report["load_without_mmap"] > 0.9 * size_mib, report
    return report


needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="measures RSS via /proc")


@needs_proc
def test_lazy_loading_128_mib(tmp_path: Path) -> None:
    _check_lazy(tmp_path, count=2, tensor_mib=64, min_size=128 * MIB)


@needs_proc
@pytest.mark.slow
def test_lazy_loading_over_1_gib(tmp_path: Path) -> None:
    """8 float32 tensors of 128 MiB each (a file over 1 GiB): loading it and reading one small
    tensor grows RSS by far less than 10% of the file."""
    report = _check_lazy(tmp_path, count=8, tensor_mib=128, min_size=2**30)
    assert report["after_small_read"] < 64, report  # MiB; in practice well under 1
