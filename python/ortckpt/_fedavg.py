"""The pieces of validated averaging shared by every engine: the reference's structure, reading an
upload (into private memory, within the size limit), and the float64 partial sums the native
kernel adds into (all picklable, so Dask can ship them).

The checks and sums run in the Rust core (``ortckpt_core::aggregate``): the upload's index is
checked against the reference's layout, every value is checked finite (and the sums checked not to
overflow), then ``weight * value`` is added into float64 sums, with the GIL released.

Rounding: every value is converted exactly to float64 (complex128 for complex dtypes), multiplied by
its weight and added in float64 in the order the engine visits the sources; the sum is divided by
the total weight once and rounded to the parameter's dtype (round to nearest even). Engines that add
in another order (Dask's tree) therefore agree with each other to one unit in the last place of the
parameter's dtype.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _dtypes, _native
from .io import BYTES_SOURCE, load
from .state import CheckpointState

#: dtypes whose values are averaged: real floats (bfloat16/float8 included) and complex
_REAL = frozenset(
    {
        _dtypes.FLOAT,
        _dtypes.FLOAT16,
        _dtypes.DOUBLE,
        _dtypes.BFLOAT16,
        _dtypes.FLOAT8E4M3FN,
        _dtypes.FLOAT8E4M3FNUZ,
        _dtypes.FLOAT8E5M2,
        _dtypes.FLOAT8E5M2FNUZ,
    }
)
_COMPLEX = frozenset({_dtypes.COMPLEX64, _dtypes.COMPLEX128})


class Rejected(ValueError):
    """Why an upload (or a reference) cannot be averaged: ``kind`` (a short code) and a message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


Key = str  # parameter name, or _flat_layout.momentum_key(...) for momentums


@dataclass(frozen=True)
class ModelSpec:
    """What every upload must match: the reference's parameters and (optionally) momentums."""

    params: dict[str, tuple[bool, int, tuple[int, ...]]]  # name -> (trainable, data type, shape)
    momentums: dict[tuple[str, str, str], tuple[int, tuple[int, ...]]]  # (group, param, momentum)
    include_optimizer_state: bool

    @property
    def averaged(self) -> list[str]:
        return [n for n, (trainable, _, _) in self.params.items() if trainable]


def _type(code: int) -> str:
    return _dtypes.type_name(code)


def spec_of(state: CheckpointState, include_optimizer_state: bool) -> ModelSpec:
    """The structure of a reference state; ``Rejected`` (a ValueError) when it cannot be averaged."""
    if state.is_nominal:
        raise Rejected("nominal", "the checkpoint is nominal (names and types only, no values)")
    params = {}
    for name, p in state.parameters.items():
        if p.trainable and p.data_type not in _REAL | _COMPLEX:
            raise Rejected(
                "dtype",
                f"parameter {name!r} is trainable but {_type(p.data_type)}: only floating-point "
                "parameters can be averaged (mark it frozen)",
            )
        params[name] = (p.trainable, p.data_type, tuple(p.shape))
    momentums: dict[tuple[str, str, str], tuple[int, tuple[int, ...]]] = {}
    if include_optimizer_state:
        if state.optimizer is None:
            raise Rejected(
                "optimizer", "include_optimizer_state=True but the checkpoint has no optimizer state"
            )
        for group_name, group in state.optimizer.items():
            for param, moms in group.states.items():
                for momentum, array in moms.items():
                    code = _dtypes.from_numpy(array.dtype, momentum)
                    if code not in _REAL | _COMPLEX:
                        raise Rejected(
                            "optimizer",
                            f"momentum {param}/{momentum} is {_type(code)}: it cannot be averaged",
                        )
                    momentums[(group_name, param, momentum)] = (code, tuple(array.shape))
    return ModelSpec(params, momentums, include_optimizer_state)


def layout_of(spec: ModelSpec) -> _native.AggregationLayout:
    """The native form of ``spec`` (built once per process that aggregates: it does not pickle)."""
    params = [(n, t, code, list(shape)) for n, (t, code, shape) in spec.params.items()]
    moms = [(g, p, m, code, list(shape)) for (g, p, m), (code, shape) in spec.momentums.items()]
    return _native.AggregationLayout(params, moms)


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


def _folder_size(folder: str) -> int:
    """Bytes of the regular files an ORT 1.15 checkpoint folder reader may read (symlinks not
    followed: what they lead to is counted by ``os.stat`` of the entry, as the reader opens it)."""
    total = 0
    for entry in os.scandir(folder):
        try:
            if entry.is_file():
                total += entry.stat().st_size
        except OSError:
            continue
    return total


def _too_large(name: str, size: int, limit: int) -> Rejected:
    return Rejected(
        "too-large",
        f"{name}: {size} bytes exceed the size limit of {limit} bytes (raise max_bytes if it is legitimate)",
    )


def open_upload(src: Any, max_bytes: int | None, storage_options: Any) -> _native.Upload:
    """One upload read into private memory (never a shared mapping: a truncation by another
    process cannot crash the server) and indexed; at most ``max_bytes`` bytes are read, whatever
    the source (files and their ``.data``, folders, URLs, bytes, states). Raises ``Rejected``
    (too large) or the reader's error."""
    from ._sources import data_url, is_url, local_path, read_url

    if isinstance(src, CheckpointState):
        src = src.to_bytes(include_optimizer_state=True)
    if isinstance(src, (bytes, bytearray, memoryview)):
        size = memoryview(src).nbytes
        if max_bytes is not None and size > max_bytes:
            raise Rejected("too-large", f"upload of {size} bytes exceeds the size limit of {max_bytes} bytes")
        return _native.Upload.from_bytes(bytes(src), BYTES_SOURCE)
    if is_url(src):
        url = str(src)
        data = read_url(url, max_bytes=max_bytes, storage_options=storage_options)
        external = None
        ext_url = data_url(url)
        fs_exists = _url_exists(ext_url, storage_options)
        if fs_exists:
            left = None if max_bytes is None else max_bytes - len(data)
            external = read_url(ext_url, max_bytes=left, storage_options=storage_options)
        return _native.Upload.from_bytes(data, url, external)
    name = local_path(src)
    if os.path.isdir(name):  # an ORT 1.15 folder: measured first, then read by the legacy reader
        size = _folder_size(name)
        if max_bytes is not None and size > max_bytes:
            raise _too_large(name, size, max_bytes)
        return _native.Upload.from_bytes(load(name).to_bytes(include_optimizer_state=True), name)
    found = _native.Upload.read(name, max_bytes)
    if isinstance(found, tuple):
        raise Rejected(*found)
    return found


def _url_exists(url: str, storage_options: Any) -> bool:
    from ._sources import _exists

    return _exists(url, storage_options)


def identity(src: Any, upload: _native.Upload | None = None) -> tuple[Any, ...] | None:
    """What tells the same upload given twice: the file (device, inode) for local files, the URL
    for URLs, the content's BLAKE2 digest for bytes and states."""
    if upload is not None and upload.identity is not None:
        return ("file", *upload.identity)
    if isinstance(src, CheckpointState):
        src = src.to_bytes(include_optimizer_state=True)
    if isinstance(src, (bytes, bytearray, memoryview)):
        return ("content", hashlib.blake2b(src, digest_size=16).digest())
    if isinstance(src, (str, os.PathLike)):
        return ("path", os.fsdecode(os.fspath(src)))
    return None


def slot_arrays(lanes: list[int], fill: float | None) -> list[np.ndarray[Any, Any]]:
    """One float64 array per slot of ``lanes`` lanes, all views of one allocation (numpy asks for
    huge pages above 4 MiB, so a model of many small tensors takes 512x fewer page faults); filled
    with ``fill`` now, or left for the caller to write (``None``)."""
    flat = np.empty(sum(lanes), np.float64) if fill is None else np.full(sum(lanes), fill)
    ends = np.cumsum(lanes).tolist() if lanes else []
    return [flat[end - n : end] for n, end in zip(lanes, ends, strict=True)]


@dataclass
class PartialSum:
    """The sum of weight * values in float64 per averaged tensor ("slot": trainable parameters,
    then momentums; complex values as real/imaginary pairs), a bound on each sum's magnitude (see
    the kernel), and the sum of the weights."""

    sums: list[np.ndarray[Any, Any]] = field(default_factory=list)
    bounds: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0))
    total_weight: float = 0.0
    count: int = 0

    def ensure(self, layout: _native.AggregationLayout) -> None:
        if not self.sums:
            # Written (not np.zeros' lazily mapped zero pages) here, on one thread: a first write
            # by the kernel's threads to a shared zero page is a copy-on-write fault with a TLB
            # shootdown to every core, which was half the time of a round of large uploads.
            self.sums = slot_arrays(layout.slot_lanes(), 0.0)
            self.bounds = np.zeros(len(self.sums), np.float64)

    def add(
        self, upload: _native.Upload, layout: _native.AggregationLayout, weight: float | str | None
    ) -> float:
        """Check ``upload`` and add it (native kernel); ``Rejected`` when it is not averaged."""
        self.ensure(layout)
        given = None if isinstance(weight, str) or weight is None else float(weight)
        prop = weight if isinstance(weight, str) else None
        outcome = _native.accumulate(upload, layout, self.sums, self.bounds, given, prop)
        if isinstance(outcome, tuple):
            raise Rejected(*outcome)
        self.total_weight += outcome
        self.count += 1
        return outcome

    def check(
        self,
        upload: _native.Upload,
        layout: _native.AggregationLayout,
        weight: float | str | None,
        make_sums: Callable[[], list[np.ndarray[Any, Any]]],
    ) -> float:
        """``add``'s checks and verdicts without the addition, for callers that do not use the
        sums (the robust methods): only the bounds are kept while no sum can overflow; when one
        could, ``make_sums()`` gives the exact sums of what was accepted so far and every upload
        from then on is ``add``-ed, so the ``overflow`` verdicts are FedAvg's."""
        if self.sums:
            return self.add(upload, layout, weight)
        slots = len(layout.slot_lanes())
        if len(self.bounds) != slots:
            self.bounds = np.zeros(slots, np.float64)
        given = None if isinstance(weight, str) or weight is None else float(weight)
        prop = weight if isinstance(weight, str) else None
        outcome = _native.check_upload(upload, layout, self.bounds, given, prop)
        if isinstance(outcome, tuple):
            raise Rejected(*outcome)
        if outcome is None:  # a bound would become infinite: only the sums can tell
            self.sums = make_sums()
            return self.add(upload, layout, weight)
        self.total_weight += outcome
        self.count += 1
        return outcome

    def merge(self, other: PartialSum) -> PartialSum:
        if not self.sums:
            self.sums, self.bounds = other.sums, other.bounds
        elif other.sums:
            for acc, value in zip(self.sums, other.sums, strict=True):
                acc += value
                if not np.isfinite(acc).all():
                    raise OverflowError("the partial sums of two batches overflow float64 when added")
            self.bounds = self.bounds + other.bounds
        self.total_weight += other.total_weight
        self.count += other.count
        return self

    def means(self, wanted: list[tuple[int, np.dtype[Any], tuple[int, ...]]]) -> list[np.ndarray[Any, Any]]:
        """The mean of each ``(slot, dtype, shape)``: divided straight into the result's dtype (the
        same rounding as ``(total / w).astype(dtype)``: a float64 quotient, then one cast) without
        a float64 temporary the size of the sums. The results of one dtype share one allocation
        (numpy asks for huge pages above 4 MiB: 512x fewer page faults than one array per small
        tensor); they are views, read-only like their base, which owns its data, so a state keeps
        them without a copy."""
        sizes: dict[np.dtype[Any], int] = {}
        for _, dtype, shape in wanted:
            sizes[dtype] = sizes.get(dtype, 0) + math.prod(shape)
        flats = {dtype: np.empty(size, dtype) for dtype, size in sizes.items()}
        used = dict.fromkeys(flats, 0)
        out: list[np.ndarray[Any, Any]] = []
        for slot, dtype, shape in wanted:
            total = self.sums[slot]
            if dtype.kind == "c":
                total = total.view(np.complex128)
            start, count = used[dtype], math.prod(shape)
            used[dtype] = start + count
            view = flats[dtype][start : start + count].reshape(shape)
            with np.errstate(over="ignore", invalid="ignore"):  # checked by the caller (_not_finite)
                np.divide(total.reshape(shape), self.total_weight, out=view, casting="unsafe")
            out.append(view)
        for array in [*flats.values(), *out]:
            array.flags.writeable = False
        return out


@dataclass(frozen=True)
class SourceReport:
    """The verdict on one upload: accepted with a weight, or rejected with a reason."""

    index: int
    client: str
    accepted: bool
    weight: float | None = None
    kind: str | None = None  # rejection kind: "unreadable", "too-large", "dtype", ... (docs/federated.md)
    reason: str | None = None
    # diagnostics of the robust methods and update hygiene (None on the plain FedAvg path)
    norm: float | None = None  # L2 norm of the update (of the values, without relative_to), before clipping
    clipped: bool | None = None  # scaled down to clip_norm
    distance: float | None = None  # L2 distance of the (clipped) update to the aggregate
    krum_score: float | None = None  # krum / multi_krum / bulyan: sum of the n - f - 2 smallest distances
    selected: bool | None = None  # krum / multi_krum / bulyan: among the uploads the method kept


def visit(
    index: int,
    client: str,
    src: Any,
    weight: float | str | None,
    layout: _native.AggregationLayout,
    max_bytes: int | None,
    storage_options: Any,
    acc: PartialSum,
    seen: dict[tuple[Any, ...], str] | None = None,
    opened: Callable[[], _native.Upload] | None = None,
) -> SourceReport:
    """Read, check and (when it passes) add one upload to ``acc``. Never raises for a bad upload:
    whatever is wrong with it is returned as a rejection. ``seen`` (identity -> client) rejects
    the same upload given twice (kind ``duplicate``). ``opened`` gives the upload already being
    read (see ``prefetched``)."""
    try:
        upload = opened() if opened is not None else open_upload(src, max_bytes, storage_options)
        if seen is not None:
            key = identity(src, upload)
            if key is not None:
                first = seen.get(key)
                if first is not None:
                    raise Rejected("duplicate", f"the same upload as {first!r} (counted once)")
                seen[key] = client
        w = acc.add(upload, layout, weight)
    except Exception as exc:  # garbage, truncated, unreachable: this upload only, never the round
        return rejection(index, client, exc)
    return SourceReport(index, client, True, weight=w)


def local_file(src: Any) -> str | None:
    """The path of ``src`` when it is a local checkpoint file (not a URL, bytes, state or folder):
    those go to the native round (``visit_files``)."""
    from ._sources import is_url, local_path

    if not isinstance(src, (str, os.PathLike)) or is_url(src):
        return None
    name = local_path(src)
    return None if os.path.isdir(name) else name


def visit_files(
    batch: list[tuple[int, str, str, float | str | None]],
    layout: _native.AggregationLayout,
    max_bytes: int | None,
    acc: PartialSum,
    seen: dict[tuple[Any, ...], str],
) -> list[SourceReport]:
    """``visit`` for a batch of local files ``(index, client, path, weight rule)`` in one native
    call (``_native.add_files``: the loop over uploads, reads, checks and sums without the GIL):
    the same checks, order of additions, verdicts and messages as ``visit`` one by one."""
    acc.ensure(layout)
    given = [None if isinstance(r, str) or r is None else float(r) for _, _, _, r in batch]
    prop = next((r for _, _, _, r in batch if isinstance(r, str)), None)
    known = [(k[1], k[2]) for k in seen if k[0] == "file"]
    verdicts = _native.add_files(
        [p for _, _, p, _ in batch], given, prop, layout, acc.sums, acc.bounds, max_bytes, known
    )
    reports = []
    for (index, client, _, _), verdict in zip(batch, verdicts, strict=True):
        report = refusal(index, client, verdict, seen)
        if report is None:
            acc.total_weight += verdict[1]
            acc.count += 1
            report = SourceReport(index, client, True, weight=verdict[1])
        reports.append(report)
    return reports


FileVerdict = tuple[str, float, str, str, Exception | None, tuple[int, int] | None]


def refusal(
    index: int, client: str, verdict: FileVerdict, seen: dict[tuple[Any, ...], str]
) -> SourceReport | None:
    """The report of a native file verdict (``add_files`` / ``check_files``) that refuses the
    upload, or None when it was accepted; ``seen`` (identity -> client) gets the identity of
    every upload read (a repeat is a duplicate of the first, named)."""
    status, _, kind, message, error, ident = verdict
    key = None if ident is None else ("file", *ident)
    if status == "duplicate" and key is not None:
        first = seen.get(key, "an earlier upload")
        return rejection(index, client, Rejected("duplicate", f"the same upload as {first!r} (counted once)"))
    if key is not None:
        seen[key] = client
    if status in ("added", "accepted"):
        return None
    if status == "rejected":
        return SourceReport(index, client, False, kind=kind, reason=message)
    return rejection(index, client, error if error is not None else RuntimeError(message))


class _NotRead:
    """The "future" of an item ``prefetched`` was told to skip: its ``result`` is None."""

    def result(self) -> None:
        return None


def prefetched(
    items: Iterator[tuple[int, str, Any, float | str | None]],
    max_bytes: int | None,
    storage_options: Any,
    skip: Callable[[Any], bool] | None = None,
    ahead: int = 1,
) -> Iterator[tuple[tuple[int, str, Any, float | str | None], Callable[[], _native.Upload | None]]]:
    """Each item with a function returning its upload, read ``ahead`` items ahead on as many other
    threads: the next uploads' bytes arrive while the current one is used (the reads and the
    kernel release the GIL). At most ``ahead + 1`` uploads are in memory at a time. Items whose
    source ``skip`` accepts are not read (their function returns None)."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(ahead, thread_name_prefix="ortckpt-read") as pool:
        waiting: deque[tuple[tuple[int, str, Any, float | str | None], Any]] = deque()
        for item in items:
            if skip is not None and skip(item[2]):
                future: Any = _NotRead()
            else:
                future = pool.submit(open_upload, item[2], max_bytes, storage_options)
            if len(waiting) == ahead:
                first, done = waiting.popleft()
                yield first, done.result
            waiting.append((item, future))
        while waiting:
            first, done = waiting.popleft()
            yield first, done.result


def rejection(index: int, client: str, exc: Exception) -> SourceReport:
    """The report of an upload that failed with ``exc``."""
    from ._sources import SourceTooLargeError

    if isinstance(exc, Rejected):
        return SourceReport(index, client, False, kind=exc.kind, reason=str(exc))
    reason = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, SourceTooLargeError):
        return SourceReport(index, client, False, kind="too-large", reason=reason)
    return SourceReport(index, client, False, kind="unreadable", reason=f"{type(exc).__name__}: {reason}")


def visit_batch(
    batch: list[tuple[int, str, Any, float | str | None]],
    spec: ModelSpec,
    max_bytes: int | None,
    storage_options: Any,
) -> tuple[PartialSum, list[SourceReport]]:
    """One Dask task: the partial sum and verdicts of a batch of uploads."""
    acc = PartialSum()
    layout = layout_of(spec)
    seen: dict[tuple[Any, ...], str] = {}
    reports = [visit(i, c, s, w, layout, max_bytes, storage_options, acc, seen) for i, c, s, w in batch]
    _native.release_buffers()  # idle read buffers only: a batch on another thread keeps its own
    return acc, reports


def merge_batches(*parts: tuple[PartialSum, list[SourceReport]]) -> tuple[PartialSum, list[SourceReport]]:
    """One node of the reduction tree."""
    acc = PartialSum()
    reports: list[SourceReport] = []
    for part, part_reports in parts:
        acc.merge(part)
        reports.extend(part_reports)
    return acc, reports
