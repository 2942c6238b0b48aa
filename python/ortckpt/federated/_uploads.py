"""Reading one upload for a round, whatever its form: a local checkpoint file (left to the core,
which reads it into private memory or streams it), a local ORT 1.15 folder, an fsspec URL, a
checkpoint's bytes, or a state. A round copies a URL (and its ``.data``) once, block by block
through the lazy loads' range reader, into a private temporary file that the core then reads as
it reads local files (``Copied``), and a folder is left to the core's folder reader (``Folder``);
``read_source`` reads a URL whole and a folder into a checkpoint's bytes, for the callers that
need bytes (a Dask task's upload, a round's ``relative_to``). At most ``max_bytes`` bytes are read
from any of them; a bad upload becomes a rejection of its own, never the round's failure.
"""

from __future__ import annotations

import numbers
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _native
from .._sources import SourceTooLargeError, copy_to, read_url_pair, resolve
from .._sources import load as load_source
from ._reference import Rejected
from ._reports import SourceReport

if TYPE_CHECKING:
    import tempfile


def weight_problem(value: object) -> str | None:
    """Why ``value`` cannot be an upload's weight (a phrase completing "weight ..."), or None.
    The rule is the core's (``_native.weight_problem``: a finite number in [2^-64, 2^64], the
    bound that keeps a round's total weight finite), applied here to numbers given in Python: a
    string, a bool or an integer beyond float64 is no weight either."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return "is not a number"
    try:
        as_float = float(value)
    except OverflowError:  # an integer beyond float64: beyond the largest weight too
        return _native.weight_problem(sys.float_info.max)
    return _native.weight_problem(as_float)


@dataclass(frozen=True)
class Payload:
    """An upload's bytes as the round takes them, and what tells it apart from the others."""

    data: Any  # bytes, or a read-only view of private memory (_native.UploadBytes)
    external: Any  # the same, for its external data; None without
    identity: (
        tuple[int, int] | str | None
    )  # (device, inode) of a file; a URL or folder; None: the bytes' hash
    source: str  # how messages name it
    read: Any = None  # a local file's _native.ReadUpload (its files still open), else None


def local_file(src: Any) -> str | None:
    """The path of ``src`` when it is a local checkpoint file (not a URL, bytes, state or folder):
    those go to the core's file readers."""
    try:
        kind, value = resolve(src)
    except TypeError:  # no source at all: read_source's error is its rejection
        return None
    return value if kind == "file" else None


def read_source(src: Any, max_bytes: int | None, storage_options: Any) -> Payload:
    """The bytes of one upload (never a shared mapping: a truncation by another process cannot
    crash the server), at most ``max_bytes`` read. Raises ``Rejected`` (too large) or the reader's
    error."""
    kind, value = resolve(src)
    if kind == "state":
        return Payload(value.to_bytes(include_optimizer_state=True), None, None, "<state>")
    if kind == "bytes":
        return Payload(value if isinstance(value, bytes) else bytes(value), None, None, "<bytes>")
    if kind == "url":
        data, external = read_url_pair(value, max_bytes=max_bytes, storage_options=storage_options)
        return Payload(data, external, value, value)
    if kind == "folder":  # an ORT 1.15 folder: the core's reader measures its files first
        state = load_source(value, max_bytes=max_bytes)
        return Payload(state.to_bytes(include_optimizer_state=True), None, value, value)
    try:
        read = _native.read_upload(value, max_bytes)
    except SourceTooLargeError as exc:
        raise Rejected("too-large", str(exc)) from None
    return Payload(read.checkpoint, read.external, read.identity, value, read)


@dataclass
class Copied:
    """A remote upload copied once into a private temporary directory (``copy_to``): the core
    reads ``path`` as a local file (streamed when the model is large, as every local upload), under
    the identity ``url``. ``close`` deletes the copy; a round that keeps the upload (the robust
    methods) holds its files open, so the space is freed when the round ends."""

    path: str
    url: str
    scratch: tempfile.TemporaryDirectory[str]

    def close(self) -> None:
        self.scratch.cleanup()


def copy_upload(url: str, max_bytes: int | None, storage_options: Any) -> Copied:
    """The upload at ``url`` copied into a new private temporary directory (deleted again when the
    copy fails)."""
    import tempfile  # here: it imports shutil, random and the compressors (~16 ms), and only
    # a remote upload needs it

    scratch = tempfile.TemporaryDirectory(prefix="ortckpt-upload-")
    try:
        path = copy_to(url, scratch.name, max_bytes=max_bytes, storage_options=storage_options)
    except BaseException:
        scratch.cleanup()
        raise
    return Copied(path, url, scratch)


@dataclass(frozen=True)
class Folder:
    """A local ORT 1.15 checkpoint folder, left to the core's folder reader (``Round.add_folder``):
    nothing is read here."""

    path: str


def open_upload(src: Any, max_bytes: int | None, storage_options: Any) -> Payload | Copied | Folder:
    """One upload as a round takes it: a URL copied (``copy_upload``), a folder named for the
    core's folder reader, anything else as ``read_source`` reads it."""
    kind, value = resolve(src)
    if kind == "url":
        return copy_upload(value, max_bytes, storage_options)
    if kind == "folder":
        return Folder(value)
    return read_source(src, max_bytes, storage_options)


def rejection(index: int, client: str, exc: BaseException) -> SourceReport:
    """The report of an upload that failed with ``exc`` (read in Python: a URL, a folder)."""
    if isinstance(exc, Rejected):
        return SourceReport(index, client, False, kind=exc.kind, reason=str(exc))
    reason = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, SourceTooLargeError):
        return SourceReport(index, client, False, kind="too-large", reason=reason)
    return SourceReport(
        index, client, False, kind="unreadable", reason=f"{type(exc).__name__}: {reason}{_cause(exc)}"
    )


def _cause(exc: BaseException) -> str:
    """What an exception raised from another says of it: fsspec's HTTP file system turns any failure
    of a request (a connection reset, a timeout) into ``FileNotFoundError(url)``, which alone names
    the URL but not what went wrong."""
    cause = exc.__cause__
    if cause is None:
        return ""
    text = " ".join(str(cause).split())
    if text and text in " ".join(str(exc).split()):
        return ""  # the message already says it (our errors raised from an OSError quote it)
    return f" (from {type(cause).__name__}: {text})" if text else f" (from {type(cause).__name__})"


Item = tuple[int, str, Any, float | str | None, int]  # index, client, source, weight rule, staleness


class _NotRead:
    """The "future" of an item ``prefetched`` was told to skip: its ``result`` is None."""

    def result(self) -> None:
        return None


def prefetched(
    items: Iterator[Item],
    max_bytes: int | None,
    storage_options: Any,
    skip: Callable[[Any], bool],
    ahead: int = 1,
) -> Iterator[tuple[Item, Callable[[], Payload | Copied | Folder | None]]]:
    """Each item with a function returning its payload (``open_upload``), read ``ahead`` items
    ahead on as many other threads: the next uploads arrive while the current one is used (reads
    release the GIL). At most ``ahead + 1`` uploads are read at a time (URLs: copied to disk, a
    block each in memory). Items whose source ``skip`` accepts are not read (their function
    returns None)."""
    with ThreadPoolExecutor(ahead, thread_name_prefix="ortckpt-read") as pool:
        waiting: deque[tuple[Item, Any]] = deque()
        for item in items:
            future: Any = (
                _NotRead() if skip(item[2]) else pool.submit(open_upload, item[2], max_bytes, storage_options)
            )
            if len(waiting) == ahead:
                first, done = waiting.popleft()
                yield first, done.result
            waiting.append((item, future))
        while waiting:
            first, done = waiting.popleft()
            yield first, done.result
