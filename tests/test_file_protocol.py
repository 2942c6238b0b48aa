"""The file protocol's smaller promises: files rewritten in place under a mapping are detected,
``mmap=False`` loads are private, and paths (empty, 255-byte names, non-UTF-8 bytes, symlinks)
and stale external data files are handled."""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointChangedError, CheckpointError, CheckpointState, TensorDataError

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Unix file semantics")


def state(value: float) -> CheckpointState:
    return CheckpointState(
        {"a": np.full(256, value, dtype=np.float32), "b": np.full(64, value, dtype=np.float64)},
        properties={"value": value},
    )


def rewrite_in_place(path: Path, data: bytes, truncate: bool) -> None:
    """What ORT 1.19.2's save_checkpoint does to an existing file: write over it, no rename."""
    # Timestamps move in kernel ticks; let one pass so the change is visible (see docs/format.md).
    time.sleep(0.03)
    with open(path, "wb" if truncate else "r+b") as f:
        f.write(data)


@pytest.mark.parametrize("truncate", [False, True], ids=["same-size-overwrite", "truncate-rewrite"])
@pytest.mark.parametrize("external", [False, True], ids=["inline", "external"])
def test_rewrite_under_mapping_is_detected(tmp_path: Path, truncate: bool, external: bool) -> None:
    path = tmp_path / "m.ckpt"
    threshold = 0 if external else None
    ortckpt.save(state(1.0), path, external_data_threshold=threshold)
    mapped = ortckpt.load(path)
    private = ortckpt.load(path, mmap=False)
    # the new content has the same layout (same size), different values
    other = tmp_path / "other.ckpt"
    ortckpt.save(state(2.0), other, external_data_threshold=threshold)
    target = Path(str(path) + ".data") if external else path
    rewrite_in_place(target, Path(str(other) + ".data" if external else other).read_bytes(), truncate)

    with pytest.raises(CheckpointChangedError) as info:
        _ = mapped.parameters["a"].data
    message = str(info.value)
    assert str(target) in message and "mmap=False" in message and "modified" in message
    assert isinstance(info.value, CheckpointError)
    # saving a state whose source changed would write the wrong values: refused the same way
    with pytest.raises(CheckpointChangedError):
        ortckpt.save(mapped, tmp_path / "copy.ckpt")
    # a private load is unaffected
    assert private.parameters["a"].data.tolist() == [1.0] * 256
    assert private.parameters["b"].data.tolist() == [1.0] * 64
    # loading again sees the new content
    assert ortckpt.load(path).parameters["a"].data.tolist() == [2.0] * 256


def test_mmap_false_survives_truncation(tmp_path: Path) -> None:
    path = tmp_path / "m.ckpt"
    ortckpt.save(state(3.0), path, external_data_threshold=0)
    private = ortckpt.load(path, mmap=False)
    for f in (path, Path(str(path) + ".data")):
        with open(f, "wb"):
            pass  # truncated to 0 bytes: a mapping would SIGBUS
    assert private.parameters["a"].data.tolist() == [3.0] * 256
    assert private.parameters["b"].data.tolist() == [3.0] * 64
    assert private.properties["value"] == 3.0


def test_empty_path_is_a_path_error() -> None:
    for call in (lambda: ortckpt.save(state(1.0), ""), lambda: ortckpt.load("")):
        with pytest.raises((OSError, ValueError)) as info:
            call()
        assert not isinstance(info.value, TensorDataError)
        assert isinstance(info.value, FileNotFoundError), repr(info.value)


def test_255_byte_file_name(tmp_path: Path) -> None:
    path = tmp_path / ("n" * 250 + ".ckpt")
    assert len(path.name.encode()) == 255
    ortckpt.save(state(1.0), path)
    ortckpt.save(state(2.0), path)  # over an existing one: backup and journal names fit too
    assert ortckpt.load(path).parameters["a"].data.tolist() == [2.0] * 256
    assert os.listdir(tmp_path) == [path.name]


def test_inline_save_removes_stale_external_data(tmp_path: Path) -> None:
    path = tmp_path / "m.ckpt"
    ortckpt.save(state(1.0), path, external_data_threshold=0)
    assert (tmp_path / "m.ckpt.data").exists()
    loaded = ortckpt.load(path)
    assert loaded.has_external_data
    ortckpt.save(loaded, path, external_data_threshold=ortckpt.DEFAULT_EXTERNAL_DATA_THRESHOLD)
    assert os.listdir(tmp_path) == ["m.ckpt"]
    again = ortckpt.load(path)
    assert not again.has_external_data and again.parameters["a"].data.tolist() == [1.0] * 256
    # the earlier load keeps its (now unlinked) files mapped and valid
    assert loaded.parameters["b"].data.tolist() == [1.0] * 64


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external"])
def test_non_utf8_bytes_path(tmp_path: Path, external: bool) -> None:
    path = os.fsencode(tmp_path) + b"/ck\xff\xfe.ckpt"
    ortckpt.save(state(5.0), path, external_data_threshold=0 if external else None)
    for name in (path, os.fsdecode(path)):  # bytes, and str with surrogate escapes
        loaded = ortckpt.load(name)
        assert loaded.parameters["a"].data.tolist() == [5.0] * 256
        assert ortckpt.load(name, mmap=False).has_external_data == external
    assert ortckpt.external_data_path(path) == os.fsdecode(path + b".data")
    assert os.path.exists(path + b".data") == external
    assert ortckpt.recover(path) == "clean"


def test_symlink_target_and_permissions_are_kept(tmp_path: Path) -> None:
    real = tmp_path / "real.ckpt"
    ortckpt.save(state(1.0), real)
    os.chmod(real, 0o600)
    link = tmp_path / "link.ckpt"
    link.symlink_to("real.ckpt")
    ortckpt.save(state(2.0), link)
    assert link.is_symlink()
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o600
    assert ortckpt.load(real).parameters["a"].data.tolist() == [2.0] * 256
    assert sorted(os.listdir(tmp_path)) == ["link.ckpt", "real.ckpt"]


def test_recover_on_clean_and_missing_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "m.ckpt"
    assert ortckpt.recover(path) == "clean"  # nothing there at all
    ortckpt.save(state(1.0), path, external_data_threshold=0)
    assert ortckpt.recover(path) == "clean"
    # helper files of other checkpoints (another hash) are not this checkpoint's to remove
    leftover = tmp_path / ".ortckpt-0000000000000000.1-1.tmp"  # another checkpoint's: untouched
    leftover.touch()
    assert ortckpt.recover(path) == "clean"
    assert leftover.exists()


class _Stop(Exception):
    pass


def test_ctrl_c_interrupts_a_private_read(tmp_path: Path) -> None:
    """``load(mmap=False)`` reads in chunks and checks for signals between them: a SIGINT (here
    with a handler raising ``_Stop``) ends a long read with the handler's exception."""
    big = tmp_path / "big.ckpt"
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # sparse: reads as zeros without using disk
    stop = threading.Event()
    fired: list[bool] = []

    def interrupt() -> None:
        stop.wait(0.02)  # the main thread is inside load's read by then (it lasts far longer)
        while not stop.wait(0.001):
            os.kill(os.getpid(), signal.SIGINT)

    def handler(signum: int, frame: types.FrameType | None) -> None:
        if not fired:  # once: later signals of the burst are ignored
            fired.append(True)
            raise _Stop

    previous = signal.signal(signal.SIGINT, handler)
    sender = threading.Thread(target=interrupt)
    caught: _Stop | None = None
    try:
        sender.start()
        try:
            ortckpt.load(big, mmap=False)
        except _Stop as exc:
            caught = exc
        stop.set()
        sender.join()
        time.sleep(0.05)  # let signals still in flight reach the (now inert) handler
    finally:
        stop.set()
        signal.signal(signal.SIGINT, previous)
    assert caught is not None
    frames = []
    tb = caught.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    # raised through the native read (_native.load_checkpoint inside _persist.open_index), not
    # between bytecodes
    assert frames[-2:] == ["open_index", "handler"], frames


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_atomic_file_commits_whole_files_with_one_permission_rule(tmp_path: Path) -> None:
    """``_atomic.atomic_file``: a real, seekable file object; the destination changes only on a
    clean exit; new files get 0666 & ~umask, a replaced file keeps its permission bits; no
    temporary file is left either way."""
    from ortckpt._atomic import atomic_file, atomic_path

    out = tmp_path / "out.bin"
    with atomic_file(out) as f:
        f.write(b"hello world")
        f.seek(0)
        f.write(b"H")
        assert not out.exists()
    assert out.read_bytes() == b"Hello world"
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o666 & ~_umask()
    os.chmod(out, 0o600)
    with pytest.raises(RuntimeError), atomic_file(out) as f:
        f.write(b"partial")
        raise RuntimeError
    assert out.read_bytes() == b"Hello world"
    with atomic_path(out) as p:  # for by-path writers (safetensors)
        Path(p).write_bytes(b"by path")
    assert out.read_bytes() == b"by path"
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert os.listdir(tmp_path) == ["out.bin"]
    with pytest.raises(OSError) as info, atomic_file(tmp_path / ("n" * 256)):
        pass
    assert info.value.errno == errno.ENAMETOOLONG
    assert os.listdir(tmp_path) == ["out.bin"]


def test_npz_output_uses_the_permission_rule(tmp_path: Path) -> None:
    out = tmp_path / "m.npz"
    ortckpt.to_npz(state(1.0), out)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o666 & ~_umask()
    os.chmod(out, 0o640)
    ortckpt.to_npz(state(2.0), out)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640
    assert os.listdir(tmp_path) == ["m.npz"]


def test_atomic_path_companions_replace_nothing_until_both_are_written(tmp_path: Path) -> None:
    """``atomic_path(path, [".data"])`` (ONNX models with external data): the model and its data
    file are written in the staging directory; a failure before the end leaves the previous pair
    untouched; on success the data file and the model are both replaced, each keeping its
    permission bits; a companion the writer did not write leaves its old file alone."""
    from ortckpt._atomic import atomic_path

    model, data = tmp_path / "m.onnx", tmp_path / "m.onnx.data"
    model.write_bytes(b"old model")
    data.write_bytes(b"old data")
    os.chmod(data, 0o600)
    with pytest.raises(RuntimeError), atomic_path(model, [".data"]) as staged:
        Path(staged + ".data").write_bytes(b"new data")
        Path(staged).write_bytes(b"new mo")
        raise RuntimeError("the writer failed half-way")
    assert (model.read_bytes(), data.read_bytes()) == (b"old model", b"old data")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]
    with atomic_path(model, [".data"]) as staged:
        Path(staged + ".data").write_bytes(b"new data")
        Path(staged).write_bytes(b"new model")
        assert (model.read_bytes(), data.read_bytes()) == (b"old model", b"old data")
    assert (model.read_bytes(), data.read_bytes()) == (b"new model", b"new data")
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o600
    with atomic_path(model, [".data"]) as staged:  # a model without external data this time
        Path(staged).write_bytes(b"small model")
    assert (model.read_bytes(), data.read_bytes()) == (b"small model", b"new data")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]


def test_atomic_path_refuses_a_special_companion_before_writing(tmp_path: Path) -> None:
    """A FIFO (or directory) planted where the companion goes is refused when the output starts,
    without blocking and before the writer writes anything; a suffix naming another directory is
    refused."""
    from ortckpt._atomic import atomic_path

    model = tmp_path / "m.onnx"
    model.write_bytes(b"old model")
    os.mkfifo(tmp_path / "m.onnx.data")
    with pytest.raises(OSError, match=r"m\.onnx\.data"), atomic_path(model, [".data"]):
        pytest.fail("the writer must not run")
    (tmp_path / "m.onnx.data").unlink()
    (tmp_path / "m.onnx.data").mkdir()
    with pytest.raises(OSError, match=r"m\.onnx\.data"), atomic_path(model, [".data"]):
        pytest.fail("the writer must not run")
    with pytest.raises(OSError, match="companion suffix"), atomic_path(model, ["/../x"]):
        pytest.fail("the writer must not run")
    assert model.read_bytes() == b"old model"
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]
