"""Special files: saving never replaces a device node, FIFO or socket, and loading (the checkpoint,
its external data file, ONNX models, the CLI) refuses them promptly instead of blocking.

Every operation that could hang runs with a timeout, so a regression fails instead of hanging."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointError, CheckpointState
from tests.helpers import checks

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Unix special files")

TIMEOUT = 20.0


def state() -> CheckpointState:
    return CheckpointState({"w": np.arange(100, dtype=np.float32)}, properties={"x": 1})


def promptly(fn: Callable[[], Any], timeout: float = TIMEOUT) -> BaseException | None:
    """``checks.promptly`` with this module's timeout."""
    return checks.promptly(fn, timeout)


def assert_refused(fn: Callable[[], Any], word: str | None = None) -> OSError:
    exc = promptly(fn)
    assert isinstance(exc, OSError) and not isinstance(exc, CheckpointError), repr(exc)
    if word is not None:
        assert word in str(exc), str(exc)
    return exc


def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.ckpt"
    os.mkfifo(path)
    return path


def test_save_refuses_fifo_and_leaves_it(tmp_path: Path) -> None:
    path = fifo(tmp_path)
    assert_refused(lambda: ortckpt.save(state(), path), "FIFO")
    assert stat.S_ISFIFO(os.lstat(path).st_mode)
    assert os.listdir(tmp_path) == ["pipe.ckpt"], "a temporary file was left behind"
    # also through a symlink, and when the FIFO sits where the external data file goes
    link = tmp_path / "link.ckpt"
    link.symlink_to(path)
    assert_refused(lambda: ortckpt.save(state(), link), "FIFO")
    data_fifo = tmp_path / "other.ckpt.data"
    os.mkfifo(data_fifo)
    assert_refused(lambda: ortckpt.save(state(), tmp_path / "other.ckpt", external_data_threshold=0))
    assert_refused(lambda: ortckpt.save(state(), tmp_path / "other.ckpt"))  # would remove a stale .data
    assert stat.S_ISFIFO(os.lstat(data_fifo).st_mode)


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "read"])
def test_load_refuses_fifo_without_blocking(tmp_path: Path, mmap: bool) -> None:
    path = fifo(tmp_path)
    assert_refused(lambda: ortckpt.load(path, mmap=mmap), "FIFO")
    # a regular checkpoint whose external data file is a FIFO
    real = tmp_path / "real.ckpt"
    ortckpt.save(state(), real, external_data_threshold=0)
    os.remove(tmp_path / "real.ckpt.data")
    os.mkfifo(tmp_path / "real.ckpt.data")
    assert_refused(lambda: ortckpt.load(real, mmap=mmap), "FIFO")


def test_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sock.ckpt"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        assert_refused(lambda: ortckpt.save(state(), path), "socket")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        assert_refused(lambda: ortckpt.load(path))
    finally:
        server.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")
def test_device_node_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "null"
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a private /dev/null
    before = os.lstat(path)
    assert_refused(lambda: ortckpt.save(state(), path), "character device")
    after = os.lstat(path)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
    assert_refused(lambda: ortckpt.load(path), "character device")
    assert os.listdir(tmp_path) == ["null"]


def test_cli_inspect_fifo_fails_promptly(tmp_path: Path) -> None:
    path = fifo(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "ortckpt", "inspect", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result
    assert "FIFO" in result.stderr and "Traceback" not in result.stderr


def test_save_from_onnx_refuses_fifo_model(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    model = fifo(tmp_path)
    assert_refused(lambda: ortckpt.save_from_onnx(model, tmp_path / "out.ckpt"), "FIFO")
    assert not (tmp_path / "out.ckpt").exists()


def test_directory_target_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "d"
    target.mkdir()
    exc = assert_refused(lambda: ortckpt.save(state(), target))
    assert isinstance(exc, IsADirectoryError)
    assert isinstance(assert_refused(lambda: ortckpt.load(target)), IsADirectoryError)


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_atomic_file_refuses_special_destinations(tmp_path: Path, kind: str) -> None:
    """The atomic output every non-checkpoint writer uses (npz, safetensors) refuses the same
    destinations a save does, before writing anything."""
    from ortckpt._atomic import atomic_file

    target = {"fifo": fifo(tmp_path), "directory": tmp_path, "device": Path("/dev/null")}[kind]
    before = sorted(os.listdir(tmp_path))

    def write() -> None:
        with atomic_file(target) as f:
            f.write(b"x")

    exc = assert_refused(write)
    assert (
        isinstance(exc, IsADirectoryError)
        if kind == "directory"
        else "device" in str(exc) or "FIFO" in str(exc)
    )
    assert sorted(os.listdir(tmp_path)) == before
    if kind == "fifo":
        assert stat.S_ISFIFO(os.lstat(target).st_mode)
