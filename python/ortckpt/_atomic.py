"""Atomic replacement of an output file written by a third-party writer (safetensors, zipfile)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """A temporary path next to ``path``; renamed over ``path`` (after fsync) when the block ends
    without error, removed otherwise. Readers never see a half-written file."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    except FileNotFoundError:
        if os.path.isdir(directory):
            raise
        # name the missing directory, not the temporary file that could not be made in it
        raise FileNotFoundError(f"cannot write {path}: directory {directory} does not exist") from None
    os.close(fd)
    try:
        # mkstemp makes the file private (0600); give it the mode a new file (or the old one) has
        os.chmod(tmp, os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o644)
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
