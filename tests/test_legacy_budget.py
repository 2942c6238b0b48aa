"""An ORT 1.15 checkpoint folder is read like any untrusted input: memory stays within a small
multiple of the files (measured in a subprocess, and under an address-space limit), special files
and bad names give ortckpt's errors, and every truncation or mutation of a real folder gives a
``CheckpointError`` — never a hang, an abort, ``UnicodeEncodeError`` or ``TypeError``.

The files are written byte by byte (tests/helpers/pbseq.py, no ``onnx`` needed), and the loader
itself does not need ``onnx`` either (tested below).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ortckpt
from tests.helpers.pbseq import field, pbseq, tensor, varint

DATA = Path(__file__).parent / "data" / "ort115"
TRAIN = "paramtrain_tensors.pbseq"
MIB = 1 << 20


def folder_with(tmp_path: Path, files: dict[str | bytes, bytes]) -> Path:
    folder = tmp_path / "ckpt"
    folder.mkdir(parents=True)
    for name, data in files.items():
        path = os.path.join(os.fsencode(folder), os.fsencode(name))
        with open(path, "wb") as f:
            f.write(data)
    return folder


FLOAT, INT64 = 1, 7


# -- memory ----------------------------------------------------------------------------------------

MEASURE = textwrap.dedent(
    """
    import json, resource, sys
    import ortckpt

    def status(key):
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith(key)).split()[1]) * 1024

    folder, limit = sys.argv[1], int(sys.argv[2])
    ortckpt.load(sys.argv[3])  # a small folder first: every code path is loaded before measuring
    if limit:
        # the address space in use plus `limit`: the load must fit in it or fail with our error
        room = status("VmSize:") + limit
        resource.setrlimit(resource.RLIMIT_AS, (room, room))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak resident set (VmHWM) to the current one
    before = status("VmRSS:")
    try:
        state = ortckpt.load(folder)
        outcome = "loaded %d parameters" % len(state.parameters)
    except ortckpt.CheckpointError as e:
        outcome = "%s: %s" % (type(e).__name__, str(e)[-300:])
    print(json.dumps({"grown": status("VmHWM:") - before, "outcome": outcome}))
    """
)


def measure(folder: Path, limit: int = 0) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE, str(folder), str(limit), str(DATA / "adamw_trained")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # a crash (abort under the limit, MemoryError, signal) is the bug this file is about
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def many_tiny_tensors(size: int) -> bytes:
    """About `size` bytes of the smallest tensors: empty FLOAT tensors with unique names."""
    messages = []
    total = 0
    i = 0
    while total < size:
        m = tensor(b"%x" % i, FLOAT, [0])
        messages.append(m)
        total += len(m) + 1
        i += 1
    return pbseq(messages)


def typed_bomb(size: int) -> bytes:
    """One INT64 tensor of `size` zeros in packed int64_data: one byte each in the file, eight in
    memory."""
    values = field(7, b"\x00" * size)
    return pbseq([tensor(b"w", INT64, [size], extra=values)])


def one_big_tensor(size: int) -> bytes:
    return pbseq([tensor(b"w", FLOAT, [size // 4], b"\x01" * (size // 4 * 4))])


needs_proc = pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc (VmHWM, clear_refs)"
)


@needs_proc
@pytest.mark.parametrize(
    ("make", "loads"),
    [(many_tiny_tensors, False), (typed_bomb, False), (one_big_tensor, True)],
    ids=["many-tiny-tensors", "typed-int64-bomb", "one-big-tensor"],
)
def test_memory_is_a_small_multiple_of_the_files(tmp_path: Path, make, loads: bool) -> None:
    # 32 MiB: before, 16 MiB of tiny messages cost +1.9 GiB (one range object per message)
    data = make(32 * MIB)
    folder = folder_with(tmp_path, {TRAIN: data})
    result = measure(folder)
    grown = int(result["grown"])  # type: ignore[call-overload]
    print(
        f"{make.__name__}: {len(data) / MIB:.0f} MiB, peak grew by {grown / MIB:.0f} MiB: {result['outcome']}"
    )
    assert str(result["outcome"]).startswith("loaded" if loads else "InvalidCheckpointError"), result
    assert grown <= 4 * len(data) + 16 * MIB, (
        f"peak grew by {grown / MIB:.0f} MiB for {len(data) / MIB:.0f} MiB"
    )


@needs_proc
def test_a_32_mib_file_under_an_address_space_limit_gives_our_error(tmp_path: Path) -> None:
    # before: a 32 MiB file of tiny messages aborted the process under a 2 GiB limit
    folder = folder_with(tmp_path, {TRAIN: many_tiny_tensors(32 * MIB)})
    result = measure(folder, limit=512 * MIB)
    assert str(result["outcome"]).startswith("InvalidCheckpointError"), result
    assert "memory per byte" in str(result["outcome"])


def test_lengths_are_checked_before_anything_is_allocated(tmp_path: Path) -> None:
    # a count and sizes up to 2**31 - 1 that the file cannot hold: refused at once, nothing sized by them
    for data, words in [
        (varint(2**31 - 1), "declares 2147483647 messages"),
        (varint(1) + varint(2**31 - 1), "needs 2147483647 bytes"),
        (pbseq([varint(9 << 3 | 2) + varint(2**31 - 1)]), "raw_data needs 2147483647 bytes"),
        (pbseq([varint(6 << 3 | 2) + varint(2**31 - 1)]), "string needs 2147483647 bytes"),
    ]:
        folder = folder_with(tmp_path / str(len(list(tmp_path.iterdir()))), {TRAIN: data})
        with pytest.raises(ortckpt.InvalidCheckpointError, match=words):
            ortckpt.load(folder)


# -- special files, names -------------------------------------------------------------------------

HANG = textwrap.dedent(
    """
    import sys, ortckpt
    try:
        ortckpt.load(sys.argv[1])
    except OSError as e:
        print("OSError", e)
    """
)


def test_a_fifo_in_the_folder_is_refused_without_blocking(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    shutil.copytree(DATA / "adamw_trained", folder)
    os.unlink(folder / TRAIN)
    os.mkfifo(folder / TRAIN)
    # in a subprocess with a timeout: a reader that opens the FIFO blocks forever
    proc = subprocess.run(
        [sys.executable, "-c", HANG, str(folder)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "OSError" in proc.stdout and "FIFO" in proc.stdout and TRAIN in proc.stdout, proc.stdout
    # a FIFO whose name is not part of a checkpoint is never looked at, as ORT skips it
    os.unlink(folder / TRAIN)
    shutil.copy(DATA / "adamw_trained" / TRAIN, folder / TRAIN)
    os.mkfifo(folder / "notes")
    assert ortckpt.load(folder).parameters["fc1.bias"].trainable


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root (CAP_MKNOD)")
def test_a_device_node_in_the_folder_is_refused(tmp_path: Path) -> None:
    import stat

    folder = tmp_path / "ckpt"
    shutil.copytree(DATA / "adamw_params_only", folder)
    os.unlink(folder / TRAIN)
    try:
        os.mknod(folder / TRAIN, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
    except PermissionError:
        pytest.skip("mknod not permitted here (no CAP_MKNOD in this container)")
    with pytest.raises(OSError, match="character device"):
        ortckpt.load(folder)


def test_a_symlink_to_a_device_leads_out_of_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    shutil.copytree(DATA / "adamw_params_only", folder)
    os.unlink(folder / TRAIN)
    os.symlink("/dev/zero", folder / TRAIN)
    with pytest.raises(ortckpt.InvalidCheckpointError, match="leading out"):
        ortckpt.load(folder)


def test_a_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    good = (DATA / "adamw_params_only" / TRAIN).read_bytes()
    # before: UnicodeEncodeError
    folder = folder_with(tmp_path, {b"paramtrain_\xff.pbseq": good})
    with pytest.raises(ortckpt.InvalidCheckpointError, match=r"not valid UTF-8.*paramtrain_") as info:
        ortckpt.load(folder)
    assert info.value.source == str(folder)
    # a name that is no checkpoint file's is skipped, whatever its bytes
    os.rename(os.path.join(os.fsencode(folder), b"paramtrain_\xff.pbseq"), folder / TRAIN)
    with open(os.path.join(os.fsencode(folder), b"notes\xff"), "wb") as f:
        f.write(b"x")
    assert "fc1.bias" in ortckpt.load(folder).parameters


def test_a_tensor_name_that_is_not_utf8(tmp_path: Path) -> None:
    # before: the load succeeded and any use of the state raised TypeError
    data = pbseq([tensor(b"w\xff", FLOAT, [1], b"\0\0\0\0")])
    folder = folder_with(tmp_path, {TRAIN: data})
    with pytest.raises(ortckpt.InvalidCheckpointError, match=rf"{TRAIN}: message 0 .* not valid UTF-8"):
        ortckpt.load(folder)
    # a string value that is not UTF-8 is refused too (strings are text)
    prop = tensor(b"p", 8, [], extra=field(6, b"\xff"))
    folder = folder_with(tmp_path / "2", {TRAIN: pbseq([]), "custom_properties.pbseq": pbseq([prop])})
    with pytest.raises(ortckpt.TensorDataError, match="not valid UTF-8"):
        ortckpt.load(folder)


# -- truncation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "adamw_trained").iterdir()))
def test_every_truncation_of_a_real_file_is_refused(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "ckpt"
    shutil.copytree(DATA / "adamw_trained", folder)
    data = (DATA / "adamw_trained" / name).read_bytes()
    for cut in range(len(data)):
        (folder / name).write_bytes(data[:cut])
        with pytest.raises(ortckpt.CheckpointError) as info:
            ortckpt.load(folder)
        assert name in str(info.value), (cut, info.value)


# -- onnx is not needed -----------------------------------------------------------------------------

NO_ONNX = textwrap.dedent(
    """
    import sys
    sys.modules["onnx"] = None  # any import of onnx fails
    import ortckpt
    state = ortckpt.load(sys.argv[1])
    print(sorted(state.parameters), state.optimizer["group0"].step)
    """
)


def test_reading_a_folder_does_not_need_onnx() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", NO_ONNX, str(DATA / "adamw_trained")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "fc1.bias" in proc.stdout


def test_typed_fields_decode_as_ort_unpacks_them(tmp_path: Path) -> None:
    # values in typed fields instead of raw_data: floats bit-exact, narrow ints wrapped, bools any
    # non-zero, float16 bit patterns (ORT refuses patterns above 0xFFFF)
    nan = struct.unpack("<I", struct.pack("<f", float("nan")))[0] | 1
    floats = field(4, struct.pack("<3I", 0x3F800000, nan, 0x80000000))
    int8 = field(5, b"".join(varint(v) for v in (300, 127, 2**64 - 1)))  # 300 -> 44, -1 (10-byte varint)
    bools = field(5, b"".join(varint(v) for v in (0, 2, 7)))
    half = field(5, varint(0x3C00))
    messages = [
        tensor(b"f", FLOAT, [3], extra=floats),
        tensor(b"i8", 3, [3], extra=int8),
        tensor(b"b", 9, [3], extra=bools),
        tensor(b"h", 10, [1], extra=half),
    ]
    state = ortckpt.load(folder_with(tmp_path, {TRAIN: pbseq(messages)}))
    p = state.parameters
    assert p["f"].data.view(np.uint32).tolist() == [0x3F800000, nan, 0x80000000]
    assert p["i8"].data.tolist() == [44, 127, -1]
    assert p["b"].data.tolist() == [False, True, True]
    assert p["h"].data.tolist() == [1.0]
    bad = tensor(b"h", 10, [1], extra=field(5, varint(0x10000)))
    with pytest.raises(ortckpt.TensorDataError, match="not a bit pattern"):
        ortckpt.load(folder_with(tmp_path / "2", {TRAIN: pbseq([bad])}))
    both = tensor(b"w", FLOAT, [1], b"\0\0\0\0", extra=field(4, b"\0\0\0\0"))
    with pytest.raises(ortckpt.TensorDataError, match="more than one place"):
        ortckpt.load(folder_with(tmp_path / "3", {TRAIN: pbseq([both])}))


FEW_DESCRIPTORS = textwrap.dedent(
    """
    import resource, sys, ortckpt
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    print(len(ortckpt.load(sys.argv[1]).parameters))
    """
)


def test_a_folder_of_many_files_holds_one_descriptor_at_a_time(tmp_path: Path) -> None:
    # each file is opened when it is read and closed after: 300 files under a limit of 64 descriptors
    files = {
        f"paramtrain_{i:03d}.pbseq": pbseq([tensor(b"w%d" % i, FLOAT, [1], b"\0\0\0\0")]) for i in range(300)
    }
    folder = folder_with(tmp_path, files)
    proc = subprocess.run(
        [sys.executable, "-c", FEW_DESCRIPTORS, str(folder)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["300"]
