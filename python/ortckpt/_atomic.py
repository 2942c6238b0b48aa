"""Atomic replacement of an output file written by a third-party writer (safetensors, zipfile)."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from typing import BinaryIO


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """A temporary path next to ``path``; renamed over ``path`` (after fsync) when the block ends
    without error, removed otherwise. Readers never see a half-written file."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        # mkstemp makes the file private (0600); give it the mode a new file (or the old one) has
        os.chmod(tmp, os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o666 & ~_umask())
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[BinaryIO]:
    """A binary file object on a new temporary file beside ``path``; it replaces ``path`` (after
    fsync) when the block ends without error and is removed otherwise. Only an absent or regular
    ``path`` is replaced (a FIFO, device or directory is refused). Interim stand-in for the core's
    atomic output (door-save), same signature."""
    import stat

    with contextlib.suppress(FileNotFoundError):
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "it is not a regular file; ortckpt only replaces regular files", path)
    with atomic_path(path) as tmp, open(tmp, "r+b") as f:
        yield f
        f.flush()
