"""Checkpoints behind fsspec URLs (``s3://``, ``gs://``, ``http(s)://``, ``memory://``, ...).

Local paths keep the memory-mapped ``ortckpt.io.load``. A URL is read lazily: the core's paged
input parses the structure from the blocks it reaches, fetched by range requests (runs of blocks
in one read; a read of more than ``_PART`` bytes split into parts fetched a few at a time), and
each tensor's bytes are fetched when first used (``_RangeReader``). With ``mmap=False`` its bytes
are read whole (at most ``max_bytes`` of them) and handed to ``ortckpt.load_bytes``. Either way
the core validates them like any file. fsspec is imported only when a URL is used (the
``ortckpt[remote]`` extra).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _native
from ._paths import StrPath
from ._persist import open_index
from ._types import CheckpointSource
from .errors import CheckpointChangedError, CheckpointError, RemoteSourceError
from .errors import SourceTooLargeError as SourceTooLargeError  # (its home before errors.py)
from .io import external_data_path, load_bytes

if TYPE_CHECKING:
    from .state import CheckpointState


StorageOptions = Mapping[str, Any] | None

_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
_COPY_CHUNK = 8 << 20
# Bytes fetched at a time by a lazy remote load (runs of blocks a read needs go in one request):
# the structure of a checkpoint written by ortckpt is usually one block; a tensor's bytes cost
# at most one block more than they are.
_BLOCK = 256 << 10
# A read of more than ``_PART`` bytes (a large tensor) on an asynchronous file system (HTTP, S3,
# GCS, Azure) is split into parts of at most ``_PART`` bytes, ``_IN_FLIGHT`` of them requested at
# a time on fsspec's event loop; smaller reads are one request.
_PART = 4 << 20
_IN_FLIGHT = 4
# A remote request of a lazy read must be answered within this many seconds, plus one per MiB it
# carries (``ORTCKPT_REMOTE_TIMEOUT`` replaces the first figure; a read split into parts is one
# deadline for all of them, as for its bytes in one request): a server that stalls, or trickles a
# reply, is a ``RemoteSourceError``, never a hang. fsspec's asynchronous file systems (HTTP, S3,
# GCS, Azure) are cancelled when it passes; the backends' own timeouts still apply.
_TIMEOUT = 60.0
_SECONDS_PER_MIB = 1.0
# The fields of fsspec's ``info()`` that change when an object is replaced (``size`` too).
_IDENTITY_FIELDS = ("ETag", "etag", "VersionId", "version_id", "generation", "LastModified", "Last-Modified")


# fsspec's schemes for the local file system: their paths are opened by ortckpt itself (regular
# files only, never blocking; outputs through the one atomic replace), never through fsspec.
_LOCAL_SCHEMES = ("file", "local")


def is_url(path: object) -> bool:
    """True for ``scheme://...`` strings other than ``file://`` and ``local://`` (local paths)."""
    if not isinstance(path, str):
        return False
    match = _URL.match(path)
    return match is not None and match.group(1).lower() not in _LOCAL_SCHEMES


def local_path(path: StrPath) -> str:
    """A local path as a ``str`` (``file://`` or ``local://`` stripped)."""
    text = os.fsdecode(os.fspath(path))
    match = _URL.match(text)
    if match is not None and match.group(1).lower() in _LOCAL_SCHEMES:
        return text[match.end() :]
    return text


def _filesystem(url: str, storage_options: StorageOptions) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError:
        raise ImportError(
            f"reading or writing {url} needs fsspec (and its backend, e.g. s3fs for s3://): "
            "pip install 'ortckpt[remote]'"
        ) from None
    fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    return fs, path


def _timeout() -> float:
    """The base deadline of a remote request, in seconds (``ORTCKPT_REMOTE_TIMEOUT``, checked)."""
    text = os.environ.get("ORTCKPT_REMOTE_TIMEOUT")
    if text is None:
        return _TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"ORTCKPT_REMOTE_TIMEOUT must be a positive number of seconds; got {text!r}")
    return seconds


def _within_deadline(
    fs: Any,
    url: str,
    name: str,
    *args: Any,
    nbytes: int = 0,
    coroutine: Callable[..., Awaitable[Any]] | None = None,
    **kwargs: Any,
) -> Any:
    """``fs.<name>(*args, **kwargs)`` (or ``coroutine(*args, **kwargs)`` in its place, on an
    asynchronous file system), cancelled (``RemoteSourceError``) when it takes longer than the
    deadline for ``nbytes`` bytes; synchronous file systems (memory, local) run as they are."""
    deadline = _timeout() + _SECONDS_PER_MIB * nbytes / (1 << 20)
    if not getattr(fs, "async_impl", False):
        return getattr(fs, name)(*args, **kwargs)
    from fsspec.asyn import sync
    from fsspec.exceptions import FSTimeoutError

    try:
        return sync(fs.loop, coroutine or getattr(fs, "_" + name), *args, timeout=deadline, **kwargs)
    except FSTimeoutError:
        raise RemoteSourceError(
            f"{url}: the server did not answer within {deadline:.0f} s ({name}"
            f"{f' of {nbytes} bytes' if nbytes else ''}): it stalls; try again later (ORTCKPT_REMOTE_TIMEOUT "
            "sets the deadline)"
        ) from None


def _is_http(fs: Any) -> bool:
    """fsspec's HTTP file system (aiohttp), whose range requests ``_http_range`` makes."""
    try:
        from fsspec.implementations.http import HTTPFileSystem
    except ImportError:  # no aiohttp: no HTTP file system either
        return False
    return isinstance(fs, HTTPFileSystem)


def _is_s3(fs: Any) -> bool:
    """s3fs's file system (aiobotocore), whose range requests ``_s3_range`` makes (s3fs is imported
    when one exists: it is not imported here)."""
    s3fs = sys.modules.get("s3fs")
    return s3fs is not None and isinstance(fs, s3fs.S3FileSystem)


async def _read_capped(read: Callable[[int], Awaitable[bytes]], cap: int) -> bytes:
    """At most ``cap`` bytes of a reply's body, read in pieces of at most 1 MiB with ``read(n)``
    (a stream's): never more than ``cap`` bytes held, however long the body is."""
    out = bytearray()
    while len(out) < cap:
        chunk = await read(min(1 << 20, cap - len(out)))
        if not chunk:
            break
        out += chunk
    return bytes(out)


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


def _check_content_range(url: str, header: str | None, start: int, end: int) -> None:
    """A 206 reply's ``Content-Range`` must be the range asked (``start..end``), or its part that
    the object holds (the same start, ending at the object's last byte): a server that answers
    another range (of the right length or not) is our error, never values read from elsewhere."""
    found = _CONTENT_RANGE.fullmatch((header or "").strip())
    if found is not None:
        first, last = int(found[1]), int(found[2])
        total = None if found[3] == "*" else int(found[3])
        if first == start and (last == end - 1 or (total is not None and last == total - 1 < end - 1)):
            return
    raise RemoteSourceError(
        f"{url}: asked for bytes {start}-{end - 1}, the server answered with Content-Range {header!r}: "
        "it does not serve byte ranges as asked; load it with mmap=False to read it whole"
    )


async def _http_range(fs: Any, path: str, start: int, end: int) -> bytes:
    """Bytes ``start..end`` of ``path`` by one range request on ``fs``'s aiohttp session, the
    reply read as a stream and cut after ``end - start + 1`` bytes: a server that ignores the range
    (or sends a body larger than asked) costs one byte more than asked, never its whole reply in
    memory (fsspec's ``cat_file`` reads the reply whole, then the length is checked)."""
    session = await fs.set_session()
    kwargs = dict(fs.kwargs)
    headers = dict(kwargs.pop("headers", None) or {})
    headers["Range"] = f"bytes={start}-{end - 1}"
    url = fs.encode_url(path)
    async with session.get(url, headers=headers, **kwargs) as reply:
        fs._raise_not_found_for_status(reply, path)
        if reply.status == 206:
            _check_content_range(url, reply.headers.get("Content-Range"), start, end)
        return await _read_capped(reply.content.read, end - start + 1)


async def _s3_range(fs: Any, path: str, start: int, end: int) -> bytes:
    """Bytes ``start..end`` of ``path`` by one ``GetObject`` with a ``Range`` on ``fs`` (s3fs's
    ``_call_s3``, the async side of its public ``call_s3``: its credentials, request options,
    retries of the request and error translation), the body (aiobotocore's streaming body) read in
    pieces and cut after ``end - start + 1`` bytes (s3fs's ``cat_file`` reads it whole)."""
    bucket, key, version = fs.split_path(path)
    reply = await fs._call_s3(
        "get_object",
        Bucket=bucket,
        Key=key,
        Range=f"bytes={start}-{end - 1}",
        **({"VersionId": version} if version else {}),
    )
    body = reply["Body"]
    try:
        if "ContentRange" in reply:  # a ranged answer (S3 always gives it for a range)
            _check_content_range(f"s3://{bucket}/{key}", reply["ContentRange"], start, end)
        return await _read_capped(body.read, end - start + 1)
    finally:
        body.close()


def _is_gcs(fs: Any) -> bool:
    """gcsfs's file system (aiohttp on the JSON API), whose range requests ``_gcs_range`` makes:
    ``gcsfs.core.GCSFileSystem`` or its subclass ``ExtendedGcsFileSystem`` (what ``gs://`` gives
    by default; gcsfs is imported when one exists: it is not imported here)."""
    core = sys.modules.get("gcsfs.core")
    return core is not None and isinstance(fs, core.GCSFileSystem)


# At most this much of an error reply's body is read, for gcsfs to name the error from it.
_ERROR_BODY = 64 << 10


async def _gcs_get(fs: Any, path: str, start: int, end: int) -> bytes:
    """One ranged media GET of ``path`` on gcsfs's aiohttp session, as gcsfs's own ``_request``
    makes it (its URL, credentials, ``userProject`` and timeout), the reply read as a stream and
    cut after ``end - start + 1`` bytes; an error reply is translated by gcsfs
    (``validate_response``: ``FileNotFoundError`` for 404, its retriable ``HttpError`` for 5xx)."""
    from gcsfs.retry import validate_response

    await fs._set_session()
    headers = fs._get_headers({"Range": f"bytes={start}-{end - 1}"})
    async with fs.session.get(
        fs.url(path), params=fs._get_params({}), headers=headers, timeout=fs.requests_timeout
    ) as reply:
        if reply.status >= 400:
            validate_response(reply.status, await _read_capped(reply.content.read, _ERROR_BODY), path)
        if reply.status == 206:
            _check_content_range(f"gs://{path}", reply.headers.get("Content-Range"), start, end)
        return await _read_capped(reply.content.read, end - start + 1)


async def _gcs_range(fs: Any, path: str, start: int, end: int) -> bytes:
    """Bytes ``start..end`` of ``path`` on gcsfs, routed as gcsfs's own ``_cat_file`` routes them:
    an object of a zonal bucket (``ExtendedGcsFileSystem`` asks the bucket's layout, once per
    bucket) by gcsfs's gRPC reader, which writes into a buffer of the length asked (untested: no
    emulator serves zonal buckets); any other by one
    ranged GET read with a cap (``_gcs_get``, with gcsfs's retries of a failed request: gcsfs's
    ``_cat_file`` reads the reply whole)."""
    from gcsfs.retry import retry_request

    is_zonal = getattr(fs, "_is_zonal_bucket", None)
    if is_zonal is not None and await is_zonal(fs.split_path(path)[0]):
        return await _any_range(fs, path, start, end)
    data: bytes = await retry_request(retries=fs.retries)(_gcs_get)(fs, path, start, end)
    return data


async def _any_range(fs: Any, path: str, start: int, end: int) -> bytes:
    """Bytes ``start..end`` of ``path`` by the file system's own range request (``_cat_file``:
    Azure, ...; its reply is read whole before its length is checked)."""
    return bytes(await fs._cat_file(path, start=start, end=end))


def _range_request(fs: Any) -> Callable[[Any, str, int, int], Awaitable[bytes]]:
    """The coroutine making one range request on an asynchronous file system: capped over HTTP,
    S3 and GCS (at most one byte more than asked is held), the backend's own elsewhere."""
    if _is_http(fs):
        return _http_range
    if _is_s3(fs):
        return _s3_range
    if _is_gcs(fs):
        return _gcs_range
    return _any_range


def _fetch_range(fs: Any, url: str, path: str, start: int, end: int) -> bytes:
    """Bytes ``start..end`` of ``path`` by one request within its deadline; over HTTP, S3 and GCS
    read with a cap (``_http_range``, ``_s3_range``, ``_gcs_range``: at most one byte more than
    asked is ever held)."""
    if getattr(fs, "async_impl", False):
        data: bytes = _within_deadline(
            fs, url, "cat_file", fs, path, start, end, nbytes=end - start, coroutine=_range_request(fs)
        )
        return data
    return bytes(fs.cat_file(path, start=start, end=end))


class _WrongLength(Exception):
    """A range request answered with another number of bytes than asked (``got``: at most one
    more than asked, the reply being cut there)."""

    def __init__(self, start: int, length: int, got: int) -> None:
        super().__init__(start, length, got)
        self.start, self.length, self.got = start, length, got


def _parts(offset: int, length: int) -> list[tuple[int, int]]:
    """``offset..offset + length`` as ranges of at most ``_PART`` bytes, of nearly equal sizes."""
    count = max(1, -(-length // _PART))
    size = max(1, -(-length // count))
    end = offset + length
    return [(start, min(start + size, end)) for start in range(offset, end, size)]


async def _fetch_parts(fs: Any, path: str, parts: list[tuple[int, int]]) -> list[bytes]:
    """The bytes of each range of ``parts``, by range requests made ``_IN_FLIGHT`` at a time on
    the file system's event loop, each checked for its length (``_WrongLength``); the first
    failure cancels the requests still running or waiting."""
    import asyncio

    request = _range_request(fs)
    gate = asyncio.Semaphore(_IN_FLIGHT)

    async def part(start: int, end: int) -> bytes:
        async with gate:
            data = await request(fs, path, start, end)
        if len(data) != end - start:
            raise _WrongLength(start, end - start, len(data))
        return data

    tasks = [asyncio.ensure_future(part(start, end)) for start, end in parts]
    try:
        return list(await asyncio.gather(*tasks))
    finally:  # on a failure, the others are cancelled and their connections closed
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _size(fs: Any, path: str) -> int | None:
    try:
        size = fs.size(path)
    except (OSError, NotImplementedError, ValueError):
        return None
    return size if isinstance(size, int) else None


def _too_large(url: str, size: int | str, limit: int) -> SourceTooLargeError:
    return SourceTooLargeError(
        f"{url}: {size} bytes exceed the size limit of {limit} bytes (raise max_bytes if it is legitimate)"
    )


def read_url(url: str, *, max_bytes: int | None = None, storage_options: StorageOptions = None) -> bytes:
    """The bytes at ``url``; ``SourceTooLargeError`` past ``max_bytes`` (never reads more than
    ``max_bytes + 1`` bytes, whatever the server claims)."""
    fs, path = _filesystem(url, storage_options)
    if max_bytes is not None:
        size = _size(fs, path)
        if size is not None and size > max_bytes:
            raise _too_large(url, size, max_bytes)
        if (_is_http(fs) and size != 0) or ((_is_s3(fs) or _is_gcs(fs)) and size):
            # one request, within the deadline, its reply cut past max_bytes (an empty object
            # has no byte range to ask for, and an S3 or GCS object whose size is unknown is
            # missing: both read as below, which names what is wrong)
            data = _fetch_range(fs, url, path, 0, max_bytes + 1)
            if len(data) > max_bytes:
                raise _too_large(url, f"more than {max_bytes}", max_bytes)
            return data
    with fs.open(path, "rb") as f:
        data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise _too_large(url, f"more than {max_bytes}", max_bytes)
    return bytes(data)


def data_url(url: str) -> str:
    """The URL of the external data file of the checkpoint at ``url``: ``.data`` appended to the
    checkpoint's own path. In a chained URL (``zip://a.ckpt::file:///x/arch.zip``) that is the
    first link, the file itself (``zip://a.ckpt.data::...``), never the archive holding it."""
    head, sep, rest = url.partition("::")
    return external_data_path(head) + sep + rest


def _exists(url: str, storage_options: StorageOptions) -> bool:
    fs, path = _filesystem(url, storage_options)
    try:
        return bool(fs.exists(path))
    except OSError:
        return False


def _named(exc: CheckpointError, url: str) -> CheckpointError:
    """The same error class with the URL instead of ``<bytes>`` in the message."""
    text = str(exc).replace("<bytes>", url)
    return type(exc)(text if url in text else f"{url}: {text}")


class _Budget:
    """The bytes a lazy load may still fetch (``max_bytes``), shared by a checkpoint and its
    ``.data`` file."""

    def __init__(self, url: str, max_bytes: int | None) -> None:
        self.url = url
        self.max_bytes = max_bytes
        self.fetched = 0

    def take(self, n: int) -> None:
        if self.max_bytes is not None and self.fetched + n > self.max_bytes:
            raise _too_large(self.url, f"more than {self.max_bytes}", self.max_bytes)
        self.fetched += n


def _identity(info: Mapping[str, Any]) -> tuple[object, ...]:
    return (info.get("size"), *(info.get(k) for k in _IDENTITY_FIELDS))


class _RangeReader:
    """``read(offset, length) -> bytes`` of one object, for the core's paged input: each call is
    one range request, or, past ``_PART`` bytes on an asynchronous file system, parts requested
    ``_IN_FLIGHT`` at a time within one deadline; it is counted against the budget and answered
    with exactly ``length`` bytes (each part with its own) or our error. The object's identity
    (size, ETag, version) is compared with the one it had when opened after every call (once for
    all its parts), so a replaced object is never mixed in."""

    def __init__(self, fs: Any, path: str, url: str, info: Mapping[str, Any], budget: _Budget) -> None:
        self.fs = fs
        self.path = path
        self.url = url
        self.identity = _identity(info)
        self.budget = budget

    def _check_unchanged(self) -> None:
        with contextlib.suppress(AttributeError, TypeError):
            self.fs.invalidate_cache(self.path)
        try:
            now = _identity(_within_deadline(self.fs, self.url, "info", self.path))
        except FileNotFoundError:
            raise CheckpointChangedError(
                f"{self.url} was deleted while it was being read; load it again"
            ) from None
        if now != self.identity:
            raise CheckpointChangedError(
                f"{self.url} was replaced while it was being read (size/ETag/version was "
                f"{self.identity}, now {now}); load it again"
            )

    def _fetch(self, offset: int, length: int) -> bytes:
        """The bytes, by one request or (a large read on an asynchronous file system) in parts."""
        if length <= _PART or not getattr(self.fs, "async_impl", False):
            data = _fetch_range(self.fs, self.url, self.path, offset, offset + length)
            if len(data) != length:
                raise _WrongLength(offset, length, len(data))
            return data
        parts: list[bytes] = _within_deadline(
            self.fs,
            self.url,
            "cat_file",
            self.fs,
            self.path,
            _parts(offset, length),
            nbytes=length,
            coroutine=_fetch_parts,
        )
        return b"".join(parts)

    def __call__(self, offset: int, length: int) -> bytes:
        self.budget.take(length)
        try:
            data = self._fetch(offset, length)
        except _WrongLength as wrong:
            self._check_unchanged()
            if wrong.got > wrong.length:
                raise RemoteSourceError(
                    f"{self.url}: asked for {wrong.length} bytes at offset {wrong.start}, the server sent "
                    "more: it ignores Range requests (or pads its reply); load it with mmap=False to read "
                    "it whole"
                ) from None
            raise CheckpointChangedError(
                f"{self.url}: asked for {wrong.length} bytes at offset {wrong.start}, the server sent "
                f"{wrong.got}: the object is shorter than when it was opened; load it again"
            ) from None
        except FileNotFoundError:
            self._check_unchanged()
            raise
        except RemoteSourceError:  # a stalled server: asking it again would stall again
            raise
        except Exception as exc:
            self._check_unchanged()
            raise RemoteSourceError(
                f"{self.url}: reading bytes {offset}..{offset + length} failed "
                f"({type(exc).__name__}: {exc}); load it again, or with mmap=False to read it whole"
            ) from exc
        self._check_unchanged()
        return data


def _open_lazy(fs: Any, path: str, url: str, budget: _Budget) -> tuple[_RangeReader, int] | None:
    """The range reader of the object at ``path`` and its size; None when the store does not
    report its size (it cannot be read by range)."""
    info = _within_deadline(fs, url, "info", path)
    if info.get("type", "file") != "file":
        raise IsADirectoryError(f"{url} is not a file")
    size = info.get("size")
    if not isinstance(size, int) or size < 0:
        return None
    return _RangeReader(fs, path, url, info, budget), size


_Opened = tuple[_RangeReader, int] | None


def _open_pair(url: str, storage_options: StorageOptions, budget: _Budget) -> tuple[_Opened, _Opened, bool]:
    """The range readers of the checkpoint at ``url`` and of its ``.data`` with their sizes, as
    ``_open_lazy`` gives them (None: a size the store does not report), and whether the ``.data``
    exists."""
    fs, path = _filesystem(url, storage_options)
    opened = _open_lazy(fs, path, url, budget)
    ext_url = data_url(url)
    ext_fs, ext_path = _filesystem(ext_url, storage_options)
    try:
        return opened, _open_lazy(ext_fs, ext_path, ext_url, budget), True
    except (FileNotFoundError, IsADirectoryError):
        return opened, None, False


def load_lazy(
    url: str, *, max_bytes: int | None = None, storage_options: StorageOptions = None
) -> CheckpointState:
    """The checkpoint at an fsspec URL, read lazily: the structure is parsed from the blocks it
    lies in (range requests), each tensor's bytes are fetched when first used, and ``max_bytes``
    bounds the bytes fetched (the checkpoint's and its ``.data`` file's together)."""
    from .state import CheckpointState

    opened, ext_opened, has_ext = _open_pair(url, storage_options, _Budget(url, max_bytes))
    if opened is None or (has_ext and ext_opened is None):
        # a size the store does not report: read whole, as with mmap=False
        return load_url(url, max_bytes=max_bytes, storage_options=storage_options)
    read, size = opened
    ext_read, ext_size = ext_opened if ext_opened is not None else (None, 0)
    index = _native.index_paged(read, size, url, _BLOCK, ext_read, ext_size, data_url(url))
    return CheckpointState._from_index(index)


# Bytes a remote round upload is copied at a time (``copy_to``: one range request of the range
# reader, not split into parts): what copying one upload holds in memory. A round keeps several
# requests in flight by copying its next uploads while one is counted (``_uploads.prefetched``).
_COPY_BLOCK = _PART


def _copy_ranges(read: _RangeReader, size: int, dst: str) -> None:
    """The ``size`` bytes ``read`` gives, in order, into the new file ``dst``: ``_COPY_BLOCK``
    bytes held at a time, each byte fetched once."""
    with open(dst, "xb") as out:
        for offset in range(0, size, _COPY_BLOCK):
            out.write(read(offset, min(_COPY_BLOCK, size - offset)))


# Bytes asked of a stream at a time (``_copy_stream``): its reader gathers them from the
# connection's smaller pieces and joins them, holding twice as much for a moment.
_STREAM_PIECE = 1 << 20


def _copy_stream(fs: Any, path: str, dst: str, budget: _Budget) -> None:
    """The object at ``path`` (whose size the store does not report) read as a stream into the
    new file ``dst``, ``_STREAM_PIECE`` bytes at a time, refused past the budget."""
    with fs.open(path, "rb") as src, open(dst, "xb") as out:
        while chunk := src.read(_STREAM_PIECE):
            budget.take(len(chunk))
            out.write(chunk)


def copy_to(
    url: str, directory: str, *, max_bytes: int | None = None, storage_options: StorageOptions = None
) -> str:
    """Copies the checkpoint at ``url`` (and ``<url>.data``, when there is one) into
    ``directory`` through the lazy loads' door (``_open_lazy``, ``_RangeReader``: range requests,
    the deadlines, the replies' lengths and Content-Range checked, the object's identity compared
    after every request), a block at a time: each byte is fetched once and the process
    never holds the object whole. The copy's path (its ``.data`` beside it, where the core's file
    readers find it). ``SourceTooLargeError`` before a byte is fetched when the sizes pass
    ``max_bytes`` (the checkpoint's and its ``.data``'s together), ``CheckpointChangedError`` when
    the object is replaced while it is copied."""
    budget = _Budget(url, max_bytes)
    opened, ext_opened, has_ext = _open_pair(url, storage_options, budget)
    fs, path = _filesystem(url, storage_options)
    ext_url = data_url(url)
    size = 0 if opened is None else opened[1]
    if max_bytes is not None:  # as a whole read words it: the checkpoint first, then what is left
        if size > max_bytes:
            raise _too_large(url, size, max_bytes)
        if ext_opened is not None and ext_opened[1] > max_bytes - size:
            raise _too_large(ext_url, ext_opened[1], max_bytes - size)
    local = os.path.join(directory, "upload.ckpt")
    if opened is None:
        _copy_stream(fs, path, local, budget)
    else:
        _copy_ranges(*opened, local)
    if ext_opened is not None:
        _copy_ranges(*ext_opened, external_data_path(local))
    elif has_ext:  # a .data whose size the store does not report
        budget.url = ext_url  # what its refusal names
        _copy_stream(*_filesystem(ext_url, storage_options), external_data_path(local), budget)
    return local


def read_url_pair(
    url: str, *, max_bytes: int | None = None, storage_options: StorageOptions = None
) -> tuple[bytes, bytes | None]:
    """The bytes of the checkpoint at an fsspec URL and of its ``<url>.data`` (None without one),
    each read whole, ``max_bytes`` bounding both together (the checkpoint first, then what is
    left for its ``.data``)."""
    data = read_url(url, max_bytes=max_bytes, storage_options=storage_options)
    ext_url = data_url(url)  # in a chained URL, beside the file, not the archive
    external = None
    if _exists(ext_url, storage_options):
        left = None if max_bytes is None else max_bytes - len(data)
        external = read_url(ext_url, max_bytes=left, storage_options=storage_options)
    return data, external


def load_url(
    url: str, *, max_bytes: int | None = None, storage_options: StorageOptions = None
) -> CheckpointState:
    """Load the checkpoint at an fsspec URL (and its ``<url>.data`` external data file, if any),
    reading both whole."""
    data, external = read_url_pair(url, max_bytes=max_bytes, storage_options=storage_options)
    try:
        return load_bytes(data, external_data=external)
    except CheckpointError as exc:
        raise _named(exc, url) from exc


def load(
    path: StrPath,
    *,
    mmap: bool = True,
    max_bytes: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> CheckpointState:
    """Load a checkpoint from a local path or an fsspec URL.

    Local paths (and ``file://`` URLs) are memory-mapped as by ``ortckpt.io.load`` (``mmap=False``
    reads them into memory). Any other ``scheme://`` URL (``s3://``, ``gs://``, ``http(s)://``,
    ``memory://``, ...) is read through fsspec (``pip install 'ortckpt[remote]'``, plus the
    scheme's backend such as ``s3fs``) with ``storage_options`` passed to the file system; its
    bytes are validated by the core like any file.

    A URL is read lazily (``mmap=True``, the default): the checkpoint's structure is parsed from
    the blocks it lies in, fetched by range requests, and each tensor's bytes (in the checkpoint
    or in ``<url>.data``) are fetched when its ``.data`` is first used (more than 4 MiB: in
    parts, four requests at a time). An object replaced between requests (size, ETag or version
    changed) raises ``CheckpointChangedError``; a server that ignores ``Range`` or sends more or
    fewer bytes than asked raises ``RemoteSourceError`` (or ``CheckpointChangedError`` when the
    object became shorter), one that stalls ``RemoteSourceError`` past the deadline
    (``ORTCKPT_REMOTE_TIMEOUT``: 60 s by default, plus 1 s per MiB asked). ``mmap=False`` reads the
    object (and its ``.data``) whole before returning.

    ``max_bytes`` refuses larger inputs (``SourceTooLargeError``): locally the core measures what
    it opened, the checkpoint with the ``.data`` it pairs it with (beside a link's target when
    that is where it is) or an ORT 1.15 folder's checkpoint files, before reading a byte; a
    whole URL read's size is checked first too; a lazy URL's limit applies to the bytes fetched,
    so a large remote checkpoint can be opened and a few tensors read within it.
    """
    if is_url(path):
        if mmap:
            return load_lazy(str(path), max_bytes=max_bytes, storage_options=storage_options)
        return load_url(str(path), max_bytes=max_bytes, storage_options=storage_options)
    from .state import CheckpointState

    # the core measures the files it opened (the checkpoint with the .data it pairs it with, or a
    # folder's checkpoint files) against max_bytes before reading a byte
    return CheckpointState._from_index(open_index(local_path(path), mmap, max_bytes))


class Resolved(NamedTuple):
    """What a source is, by ``resolve``'s rule: ``kind`` one of ``"state"`` (``value``: the
    state), ``"bytes"`` (a ``bytes``, ``bytearray`` or ``memoryview``), ``"url"`` (the URL, a
    ``str``), ``"folder"`` (an ORT 1.15 checkpoint folder's local path) or ``"file"`` (a local
    checkpoint file's path, ``file://`` and ``local://`` stripped)."""

    kind: str
    value: Any


def resolve(src: Any) -> Resolved:
    """The one rule every reader of sources follows (``open_state``, a round's uploads): a state,
    a checkpoint's bytes, an fsspec URL (any ``scheme://`` but ``file://`` and ``local://``), or a
    local path: a directory is an ORT 1.15 folder, anything else a checkpoint file (an object that
    is no path raises ``os.fspath``'s ``TypeError``)."""
    from .state import CheckpointState

    if isinstance(src, CheckpointState):
        return Resolved("state", src)
    if isinstance(src, (bytes, bytearray, memoryview)):
        return Resolved("bytes", src)
    if is_url(src):
        return Resolved("url", str(src))
    name = local_path(src)
    return Resolved("folder" if os.path.isdir(name) else "file", name)


def open_state(
    src: CheckpointSource,
    *,
    max_bytes: int | None = None,
    storage_options: StorageOptions = None,
) -> CheckpointState:
    """A state from what callers of the server-side functions pass: a state (as it is), a
    checkpoint's bytes, or a local path / fsspec URL (as ``load``: memory-mapped when local).
    Bytes are validated by the core like any file; ``max_bytes`` applies to them too."""
    kind, value = resolve(src)
    if kind == "state":
        state: CheckpointState = value
        return state
    if kind == "bytes":
        size = memoryview(value).nbytes
        if max_bytes is not None and size > max_bytes:
            raise SourceTooLargeError(f"upload of {size} bytes exceeds the size limit of {max_bytes} bytes")
        return load_bytes(value)
    return load(value, max_bytes=max_bytes, storage_options=storage_options)


def expand(url: str, storage_options: StorageOptions = None) -> list[str]:
    """The URLs matching a glob pattern URL (``s3://bucket/round7/*.ckpt``), sorted; a URL without
    ``*?[`` (or matching nothing) as it is. The shell expands local patterns, not remote ones."""
    if not is_url(url) or not any(c in url for c in "*?["):
        return [url]
    fs, path = _filesystem(url, storage_options)
    found = sorted(fs.glob(path))
    return [str(fs.unstrip_protocol(p)) for p in found] or [url]


@contextlib.contextmanager
def _staging(url: str, storage_options: StorageOptions, default_name: str) -> Iterator[tuple[Any, str, str]]:
    """``(filesystem, remote path, local path)`` for a URL: the local path is in a temporary
    directory removed when the block ends."""
    import tempfile  # URL paths only: `import ortckpt` stays fast (tempfile, shutil: ~7 ms)

    fs, remote = _filesystem(url, storage_options)
    with tempfile.TemporaryDirectory(prefix="ortckpt-") as tmp:
        yield fs, remote, os.path.join(tmp, os.path.basename(remote.rstrip("/")) or default_name)


@contextlib.contextmanager
def local_input(
    path: StrPath, storage_options: StorageOptions = None, max_bytes: int | None = None
) -> Iterator[str]:
    """A local path holding ``path``'s content: the path itself (the core's reader measures the
    file it opens against ``max_bytes``), or a temporary copy of a URL (copied in chunks, so
    memory stays bounded; ``SourceTooLargeError`` past ``max_bytes``: a size the file system
    reports is checked before anything is read, and a copy stops after ``max_bytes + 1`` bytes
    whatever it claimed)."""
    if not is_url(path):
        yield local_path(path)
        return
    url = str(path)
    with _staging(url, storage_options, "input") as (fs, remote, local):
        if max_bytes is not None:
            size = _size(fs, remote)
            if size is not None and size > max_bytes:
                raise _too_large(url, size, max_bytes)
        copied = 0
        with fs.open(remote, "rb") as src, open(local, "xb") as dst:
            while chunk := src.read(_COPY_CHUNK):
                copied += len(chunk)
                if max_bytes is not None and copied > max_bytes:
                    raise _too_large(url, f"more than {max_bytes}", max_bytes)
                dst.write(chunk)
        yield local


@contextlib.contextmanager
def local_output(path: StrPath, storage_options: StorageOptions = None) -> Iterator[str]:
    """A local path to write ``path``'s content to; for a URL, a temporary file uploaded (with its
    ``.data`` external data file, if one was written) when the block ends without error."""
    if not is_url(path):
        yield local_path(path)
        return
    with _staging(str(path), storage_options, "output") as (fs, remote, local):
        yield local
        fs.put_file(local, remote)
        if os.path.exists(external_data_path(local)):
            fs.put_file(external_data_path(local), external_data_path(remote))
