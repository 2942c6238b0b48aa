"""Validated federated averaging (FedAvg) of device checkpoints: ``average``.

Each upload is checked against a reference (names, trainable flags, dtypes, shapes, finite values,
a size limit, a usable weight) and either added to a float64 running sum or rejected and reported;
a bad upload never raises and never reaches the sum. Uploads are visited one at a time, so memory
is O(one model) whatever their number. ``engine=dask_client`` spreads the same work over a Dask
cluster. See docs/federated.md.
"""

from __future__ import annotations

import collections
import functools
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _native
from ._fedavg import (
    ModelSpec,
    PartialSum,
    Rejected,
    SourceReport,
    identity,
    layout_of,
    local_file,
    open_upload,
    prefetched,
    refusal,
    rejection,
    spec_of,
    visit,
    visit_files,
    weight_problem,
)
from ._progress import progress as progress_bar
from ._robust import DEFAULT_CHUNK_BYTES, Member, Options, integer_option
from ._sources import local_output
from ._types import CheckpointSource, StrPath
from .errors import AggregationError
from .io import load_bytes, save
from .state import CheckpointState, OptimizerGroup, Parameter

#: One upload: a local path or fsspec URL, the checkpoint's bytes, or a loaded state.
Source = CheckpointSource

__all__ = ["AggregationError", "AggregationReport", "SourceReport", "average"]

#: local files per native call (the core reads them a few at a time; this only bounds how far a
#: generator of sources is read ahead and how often the progress bar moves)
_FILES_PER_CALL = 64
_MAX_BYTES = (1 << 64) - 1  # the core's limit on sizes (u64)
_SLACK = 1 << 20  # bytes allowed beyond the tensors for the flatbuffer structure and properties


@dataclass
class AggregationReport:
    """What ``average`` did: one ``SourceReport`` per upload, in input order, and the result."""

    output: str | None
    reference: str
    sources: list[SourceReport]
    total_weight: float
    state: CheckpointState
    engine: str
    method: str = "fedavg"

    @property
    def accepted(self) -> list[SourceReport]:
        return [s for s in self.sources if s.accepted]

    @property
    def rejected(self) -> list[SourceReport]:
        return [s for s in self.sources if not s.accepted]

    def summary(self) -> str:
        """A plain-text table: counts, then every rejected upload with its reason."""
        lines = [
            f"accepted {len(self.accepted)} of {len(self.sources)} uploads "
            f"(total weight {self.total_weight:g}; reference {self.reference})"
        ]
        rejected = self.rejected
        if rejected:
            # at least as wide as the headers, so that short client names still line up
            width = max(len("client"), *(len(s.client) for s in rejected))
            kind_width = max(len("problem"), *(len(s.kind or "") for s in rejected))
            lines.append(f"rejected {len(rejected)}:")
            lines.append(f"  {'client':<{width}}  {'problem':<{kind_width}}  reason")
            for s in rejected:
                lines.append(f"  {s.client:<{width}}  {s.kind or '':<{kind_width}}  {s.reason}")
        if self.output is not None:
            lines.append(f"wrote {self.output}")
        return "\n".join(lines)


def _label(index: int, src: object) -> str:
    if isinstance(src, (str, os.PathLike)):
        return os.fsdecode(os.fspath(src))
    if isinstance(src, CheckpointState):
        return src.source if src.source not in (None, "<bytes>") else f"state #{index}"
    return f"upload #{index}"


def _items(
    sources: Iterable[Source] | Mapping[str, Source], weights: Any
) -> Iterator[tuple[int, str, Source, float | str | None]]:
    """(index, client label, source, weight rule) for every upload, checking explicit weights."""
    if isinstance(sources, (str, bytes, os.PathLike, CheckpointState)):
        raise TypeError("sources must be a list (or mapping client -> source) of uploads, not a single one")
    pairs: Iterable[tuple[str | None, Source]]
    if isinstance(sources, Mapping):
        pairs = ((str(k), v) for k, v in sources.items())
    else:
        pairs = ((None, v) for v in sources)
    given: Iterator[Any] | None = None
    if isinstance(weights, Mapping):
        if not isinstance(sources, Mapping):
            raise TypeError("weights can be a mapping only when sources is a mapping client -> source")
        missing = sorted(set(sources) - set(weights))
        if missing:
            raise ValueError(f"no weight for client {missing[0]!r}")
        given = iter([weights[k] for k in sources])
    elif weights is not None and not isinstance(weights, str):
        given = iter(weights)
    for index, (label, src) in enumerate(pairs):
        rule: float | str | None = weights if isinstance(weights, str) or weights is None else None
        if given is not None:
            try:
                value = next(given)
            except StopIteration:
                raise ValueError(f"fewer weights than sources ({index})") from None
            problem = weight_problem(value)
            if problem is not None:
                raise ValueError(f"weight {value!r} of source {index} {problem}")
            rule = float(value)
        yield index, label if label is not None else _label(index, src), src, rule
    if given is not None and next(given, None) is not None:
        raise ValueError("more weights than sources")


def _default_limit(reference: CheckpointState) -> int:
    """4x the reference's tensor bytes (room for optimizer state: AdamW keeps 2 momentums per
    parameter) plus 1 MiB for the file's structure and properties."""
    tensors = sum(p.nbytes for p in reference.parameters.values())
    if reference.optimizer is not None:
        for group in reference.optimizer.values():
            tensors += sum(int(a.nbytes) for moms in group.states.values() for a in moms.values())
    return 4 * tensors + _SLACK


def _result(reference: CheckpointState, spec: ModelSpec, acc: PartialSum) -> CheckpointState:
    # every mean first, in one call (their arrays share allocations), then the state around them
    trainable = [name for name, (is_trainable, _, _) in spec.params.items() if is_trainable]
    wanted = [
        (slot, reference.parameters[name].dtype, spec.params[name][2]) for slot, name in enumerate(trainable)
    ]
    moms: list[tuple[str, str, str]] = []
    if spec.include_optimizer_state:
        assert reference.optimizer is not None
        first = len(wanted)
        slots = {key: first + i for i, key in enumerate(spec.momentums)}
        for group_name, group in reference.optimizer.items():
            for param, states in group.states.items():
                for m, arr in states.items():
                    moms.append((group_name, param, m))
                    wanted.append((slots[(group_name, param, m)], arr.dtype, tuple(arr.shape)))
    means = iter(acc.means(wanted))
    params: list[Parameter] = []
    for name, (is_trainable, _, _) in spec.params.items():
        params.append(
            Parameter(name, next(means), trainable=True) if is_trainable else reference.parameters[name]
        )
    optimizer = None
    if spec.include_optimizer_state:
        assert reference.optimizer is not None
        averaged = dict(zip(moms, means, strict=True))
        optimizer = {
            group_name: OptimizerGroup(
                group.step,
                group.initial_learning_rate,
                {
                    param: {m: averaged[(group_name, param, m)] for m in states}
                    for param, states in group.states.items()
                },
            )
            for group_name, group in reference.optimizer.items()
        }
    return CheckpointState(params, properties=reference.properties, optimizer=optimizer)


def _state_of(upload: _native.Upload) -> CheckpointState:
    """The state over an upload's private bytes (no copy)."""
    return load_bytes(upload.checkpoint, external_data=upload.external)


def _shippable(src: Source) -> Source:
    """A form of ``src`` that pickles: bytes for states and buffers, paths as they are."""
    if isinstance(src, CheckpointState):
        return src.to_bytes(include_optimizer_state=True)
    if isinstance(src, (bytearray, memoryview)):
        return bytes(src)
    return src


_Item = tuple[int, str, Source, float | str | None]
_FileItem = tuple[int, str, str, float | str | None]  # an item whose source is a local path


class _LocalFiles:
    """``prefetched``'s ``skip`` for local checkpoint files, remembering each answer (in item
    order) so the loop over its items takes the path without asking the file system again."""

    def __init__(self) -> None:
        self.found: collections.deque[str | None] = collections.deque()

    def skip(self, src: Any) -> bool:
        path = local_file(src)
        self.found.append(path)
        return path is not None

    def path(self) -> str | None:
        """The local path of the item just yielded (None: another kind of source)."""
        return self.found.popleft()


class _Run:
    """The state of one ``average`` call: the reference, the running sum and the verdicts."""

    def __init__(self, include_optimizer_state: bool, max_bytes: int | None, opts: Any) -> None:
        self.include = include_optimizer_state
        self.max_bytes = max_bytes
        self.opts = opts
        self.reference: CheckpointState | None = None
        self.spec: ModelSpec | None = None
        self.layout: _native.AggregationLayout | None = None
        self.label = "none"
        self.limit = max_bytes
        self.acc = PartialSum()
        self.reports: list[SourceReport] = []
        self.seen: dict[tuple[Any, ...], str] = {}
        self.total_weight: float | None = None  # set by the streamed methods (acc then holds means)

    def set_reference(self, state: CheckpointState, spec: ModelSpec, label: str) -> None:
        self.reference, self.spec, self.label = state, spec, label
        self.layout = layout_of(spec)
        if self.max_bytes is None:
            self.limit = _default_limit(state)

    def _try_reference(self, item: _Item) -> bool:
        """Make the upload the reference if it can be one: it loads, can be averaged, passes its
        own checks and has a weight (its sum is kept); else report why not."""
        index, client, src, rule = item
        try:
            upload = open_upload(src, self.limit, self.opts)
            state = _state_of(upload)
            spec = spec_of(state, self.include)
            layout = layout_of(spec)
            acc = PartialSum()
            weight = acc.add(upload, layout, rule)
        except Exception as exc:  # a bad upload cannot be the reference; the next one is tried
            self.reports.append(rejection(index, client, exc))
            return False
        self.set_reference(state, spec, client)
        self.acc = acc
        key = identity(src, upload)
        if key is not None:
            self.seen[key] = client
        self.reports.append(SourceReport(index, client, True, weight=weight))
        return True

    def here(self, items: Iterable[_Item]) -> None:
        """One upload at a time in this process (a generator is consumed once)."""
        items = iter(items)
        for item in items:
            if self.spec is not None:
                items = itertools.chain([item], items)
                break
            # no reference given: the first upload that loads and passes its own checks
            self._try_reference(item)
        else:
            return
        assert self.layout is not None
        layout = self.layout
        files: list[tuple[int, str, str, float | str | None]] = []  # local files: one native call

        def flush() -> None:
            if files:
                self.reports.extend(visit_files(files, layout, self.limit, self.acc, self.seen))
                files.clear()

        local = _LocalFiles()
        for (index, client, src, rule), opened in prefetched(items, self.limit, self.opts, local.skip):
            path = local.path()
            if path is not None:
                files.append((index, client, path, rule))
                if len(files) >= _FILES_PER_CALL:
                    flush()
                continue
            flush()
            report = visit(
                index, client, src, rule, layout, self.limit, self.opts, self.acc, self.seen, _read(opened)
            )
            self.reports.append(report)
        flush()

    def collect(self, items: Iterable[_Item], chunk_bytes: int) -> list[Member]:
        """Check every upload as the FedAvg kernel does (the same verdicts; the sums are made only
        if an overflow is possible: see ``PartialSum.check``) and keep a reader of each accepted
        one, for the streamed methods."""
        from ._robust import fedavg_sums

        members: list[Member] = []

        def check(item: _Item, opened: Callable[[], _native.Upload]) -> None:
            index, client, src, rule = item
            try:
                upload = opened()
                if self.spec is None:
                    state = _state_of(upload)
                    self.set_reference(state, spec_of(state, self.include), client)
                    self.acc = PartialSum()
                assert self.layout is not None
                key = identity(src, upload)
                if key is not None and key in self.seen:
                    raise _duplicate(self.seen[key])
                lanes = self.layout.slot_lanes()
                weight = self.acc.check(
                    upload, self.layout, rule, functools.partial(fedavg_sums, members, lanes, chunk_bytes)
                )
                if key is not None:
                    self.seen[key] = client
                where = upload.locate(self.layout)
                assert not isinstance(where, tuple)  # the kernel checked the same structure
                members.append(Member(index, client, weight, upload.reader(), where))
                del upload  # its bytes go back to the pool before the next upload is read
            except Exception as exc:  # this upload only, never the round
                if not members and self.reference is not None and self.label == client:
                    self.reference = self.spec = self.layout = None  # it cannot be the reference
                    self.label, self.limit = "none", self.max_bytes
                self.reports.append(rejection(index, client, exc))

        items = iter(items)
        for item in items:  # one at a time until an upload is accepted (it sets the size limit)
            check(item, functools.partial(open_upload, item[2], self.limit, self.opts))
            if members:
                break
        # then local files in batches, each checked in one native call on every core; other
        # sources read ahead, one per core, while the one before them is checked
        files: list[_FileItem] = []

        def flush() -> None:
            pending = files[:]
            files.clear()
            while pending:
                if self.acc.sums:  # FedAvg's sums exist (see PartialSum.check): one by one
                    item = pending.pop(0)
                    check(item, functools.partial(open_upload, item[2], self.limit, self.opts))
                    continue
                pending = pending[self._check_files(pending, members) :]
                if pending:  # the batch stopped before an upload that could overflow the sums
                    item = pending.pop(0)
                    check(item, functools.partial(open_upload, item[2], self.limit, self.opts))

        local = _LocalFiles()
        ahead = max(1, min(4, os.cpu_count() or 1))
        for item, opened in prefetched(items, self.limit, self.opts, local.skip, ahead=ahead):
            path = local.path()
            if path is not None:
                files.append((item[0], item[1], path, item[3]))
                if len(files) >= _FILES_PER_CALL:
                    flush()
                continue
            flush()
            check(item, _read(opened))
        flush()
        return members

    def _check_files(self, batch: list[_FileItem], members: list[Member]) -> int:
        """``collect``'s checks for local files, in one native call (``_native.check_files``: the
        same verdicts as one by one); returns how many of ``batch`` it decided (fewer when it
        stopped before an upload whose sums could overflow)."""
        assert self.layout is not None
        slots = len(self.layout.slot_lanes())
        if len(self.acc.bounds) != slots:
            self.acc.bounds = np.zeros(slots, np.float64)
        given = [None if isinstance(r, str) or r is None else float(r) for _, _, _, r in batch]
        prop = next((r for _, _, _, r in batch if isinstance(r, str)), None)
        known = [(k[1], k[2]) for k in self.seen if k[0] == "file"]
        paths = [path for _, _, path, _ in batch]
        verdicts = _native.check_files(paths, given, prop, self.layout, self.acc.bounds, self.limit, known)
        for (index, client, _, _), (verdict, held) in zip(batch, verdicts, strict=False):
            report = refusal(index, client, verdict, self.seen)
            if report is None and held is None:  # accepted without a reader: never, but reported
                report = rejection(index, client, RuntimeError("the native check kept no reader"))
            if report is not None:
                self.reports.append(report)
            elif held is not None:
                reader, where = held
                self.acc.total_weight += verdict[1]
                self.acc.count += 1
                members.append(Member(index, client, verdict[1], reader, where))
        return len(verdicts)

    def on_dask(self, client: Any, items: list[_Item], show_progress: bool) -> None:
        from ._dask import average_on_dask

        for item in items if self.spec is None else []:
            if self._try_reference(item):
                break
        if self.spec is not None:
            # the workers check every upload again, the one tried as reference included; states
            # and buffers travel as bytes. Duplicates are found here, before shipping.
            self.reports, shipped = [], []
            seen: dict[tuple[Any, ...], str] = {}
            for i, c, s, r in items:
                src = _shippable(s)
                key = identity(_local_key(src))
                if key is not None and key in seen:
                    dup = rejection(i, c, _duplicate(seen[key]))
                    self.reports.append(dup)
                    continue
                if key is not None:
                    seen[key] = c
                shipped.append((i, c, src, r))
            self.acc, reports = average_on_dask(
                client, shipped, self.spec, self.limit, self.opts, show_progress
            )
            self.reports.extend(reports)


def _read(opened: Callable[[], _native.Upload | None]) -> Callable[[], _native.Upload]:
    """``opened`` of an item ``prefetched`` read (never None then), as ``visit`` takes it."""

    def upload() -> _native.Upload:
        got = opened()
        assert got is not None  # only local files are skipped, and they never get here
        return got

    return upload


def _local_key(src: Source) -> Any:
    """A local path as its resolved path (symlinks to one file name it once); other sources as they are."""
    from ._sources import is_url, local_path

    if isinstance(src, (str, os.PathLike)) and not is_url(src):
        return os.path.realpath(local_path(src))
    return src


def _duplicate(first: str) -> Exception:
    from ._fedavg import Rejected

    return Rejected("duplicate", f"the same upload as {first!r} (counted once)")


def average(
    sources: Iterable[Source] | Mapping[str, Source],
    out: StrPath | None = None,
    *,
    weights: Sequence[float] | Mapping[str, float] | str | None = None,
    reference: Source | None = None,
    include_optimizer_state: bool = False,
    engine: Any = None,
    max_bytes: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool = False,
    method: str = "fedavg",
    trim: float = 0.1,
    byzantine: int = 0,
    keep: int | None = None,
    relative_to: Source | None = None,
    clip_norm: float | None = None,
    noise_multiplier: float | None = None,
    seed: int | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> AggregationReport:
    """Weighted average (FedAvg) of device checkpoints, validated upload by upload.

    ``sources``: paths or fsspec URLs (memory-mapped when local), checkpoint bytes (untrusted
    uploads) or states; a list, any iterable (a generator is consumed once, one upload at a time),
    or a mapping client id -> source (the ids name the uploads in the report).

    Each upload is checked against ``reference`` (default: the first upload that loads and has
    finite values): same parameter names, trainable flags, dtypes and shapes, finite values (and
    the same momentums when ``include_optimizer_state``), at most ``max_bytes`` bytes (default:
    4x the reference's tensor bytes + 1 MiB; local files are checked by size before mapping, URLs
    before download). A failing upload is rejected with a reason in the report; it never raises
    and never reaches the sum.

    ``weights``: None (equal), one number per source (a sequence, or a mapping for mapping
    sources), or a property name whose value in each upload is its weight (e.g. the device's
    sample count). A weight is a finite number in [2^-64, 2^64] (zero is refused; the bound keeps
    the total finite): a given one outside raises ``ValueError``, an upload whose property is
    outside is rejected (kind ``weight``).

    The trainable parameters (and momentums, when ``include_optimizer_state``) of the accepted
    uploads are averaged in float64 and rounded once to their dtype; frozen parameters, properties
    and the optimizer groups' step and learning rate come from the reference. The result is
    written to ``out`` (a path or URL; atomic for local paths) when given, and returned in the
    report as ``report.state``. Nothing is written and ``AggregationError`` (with ``.report``) is
    raised when no upload is accepted, when fewer are accepted than the method needs (named in
    the message), or when the aggregate is not finite in its dtype (finite inputs that overflow
    it): a NaN or infinite model is never returned. Every option is checked on entry
    (``ValueError`` for NaN, inf, negative or out-of-range values; docs/federated.md).

    ``engine``: None runs here; a ``dask.distributed.Client`` maps loading, checks and partial
    sums over the cluster's workers in batches and adds the partial sums in a tree (paths must
    then be readable by the workers: shared storage or URLs). ``progress`` shows a bar on a terminal.

    ``method``: ``"fedavg"`` (the weighted mean), ``"median"`` (coordinate-wise),
    ``"trimmed_mean"`` (``trim`` = share cut at each side, ``int(trim * n)`` values), ``"krum"`` /
    ``"multi_krum"`` (``byzantine`` = f tolerated attackers; MultiKrum averages the ``keep`` best,
    default n - f, by weight) or ``"bulyan"`` (needs n >= 4f + 3), as Flower defines them; median,
    trimmed mean, Krum and Bulyan ignore the weights, as Flower does. Update hygiene:
    ``relative_to`` (the global model the round started from) aggregates the updates
    ``upload - global`` and adds the aggregate back; ``clip_norm`` scales each update down to an L2
    norm of at most c (over all averaged tensors, as Flower's fixed clipping); ``noise_multiplier``
    (with ``clip_norm``) adds Gaussian noise of standard deviation ``noise_multiplier * clip_norm /
    n`` to the aggregate (central DP; ``seed`` makes it reproducible). Any method but plain FedAvg
    streams the uploads chunk by chunk: at most ``chunk_bytes`` of float64 values across all of
    them at a time (local engine only; the median and trimmed mean hold the values as the files
    store them, and over at most 32 uploads need less: each core reads and reduces about 1 MiB of
    them at a time). The report's sources then carry
    diagnostics (``norm``, ``clipped``, ``distance``, ``krum_score``, ``selected``).
    """
    options = Options(method, trim, byzantine, keep, clip_norm, noise_multiplier, seed, chunk_bytes)
    options.check()
    streamed = not options.plain or relative_to is not None
    if streamed and engine is not None:
        raise ValueError("robust methods and update hygiene run on the local engine only (engine=None)")
    opts = dict(storage_options) if storage_options is not None else None
    if max_bytes is not None and not 0 < integer_option("max_bytes", max_bytes) <= _MAX_BYTES:
        raise ValueError(f"max_bytes must be in [1, {_MAX_BYTES}], got {max_bytes}")
    items = _items(sources, weights)
    run = _Run(include_optimizer_state, max_bytes, opts)
    if reference is not None:
        given = _state_of(open_upload(reference, None, opts))
        is_bytes = isinstance(reference, (bytes, bytearray, memoryview))
        run.set_reference(
            given, spec_of(given, include_optimizer_state), "<bytes>" if is_bytes else _label(-1, reference)
        )
    engine_name = "local" if engine is None else "dask"
    try:
        if streamed:
            _streamed(run, items, options, relative_to, opts, progress, sources)
        elif engine is not None:
            run.on_dask(engine, list(items), progress)
        else:
            total = len(sources) if isinstance(sources, (Sequence, Mapping)) else None
            run.here(progress_bar(items, enabled=progress, desc="averaging", total=total, unit="upload"))
    except AggregationError as exc:  # the accepted uploads are too few for the method
        raise _failure(str(exc), run, engine_name, method) from None
    finally:
        _native.release_buffers()  # no upload-sized read buffer outlives the round
    acc, reports, spec, ref_state, ref_label = run.acc, run.reports, run.spec, run.reference, run.label

    if spec is None or ref_state is None or acc.count == 0:
        raise _failure(f"no upload could be averaged (all {len(reports)} rejected)", run, engine_name, method)
    state = _result(ref_state, spec, acc)
    overflow = _not_finite(state, spec)
    if overflow is not None:
        raise _failure(f"the {method} aggregate {overflow}", run, engine_name, method)
    written: str | None = None
    if out is not None:
        written = os.fsdecode(os.fspath(out))
        with local_output(out, opts) as path:
            save(state, path, include_optimizer_state=include_optimizer_state)
    reports.sort(key=lambda r: r.index)
    total_weight = acc.total_weight if run.total_weight is None else run.total_weight
    return AggregationReport(written, ref_label, reports, total_weight, state, engine_name, method)


def _failure(message: str, run: _Run, engine: str, method: str) -> AggregationError:
    """The error of a round that gives no result (nothing is written), with its report."""
    run.reports.sort(key=lambda r: r.index)
    total = sum(r.weight or 0.0 for r in run.reports if r.accepted)
    report = AggregationReport(
        None, run.label or "none", run.reports, total, CheckpointState(), engine, method
    )
    error = AggregationError(f"{message}:\n{report.summary()}")
    error.report = report
    return error


def _not_finite(state: CheckpointState, spec: ModelSpec) -> str | None:
    """What of the averaged tensors is NaN or infinite (in their own dtype), or None. Only finite
    values are accepted, so this is an overflow of finite inputs: a trimmed mean of values near
    float64's limit, a global model plus an update beyond the dtype, noise too large."""
    averaged: list[tuple[str, Any]] = [(n, state.parameters[n].data) for n in spec.averaged]
    if spec.include_optimizer_state and state.optimizer is not None:
        for (group, param, m), _ in spec.momentums.items():
            averaged.append((f"momentum {group}/{param}/{m}", state.optimizer[group].states[param][m]))
    for name, values in averaged:
        if not np.isfinite(np.asarray(values, np.float64 if values.dtype.kind == "V" else None)).all():
            return (
                f"of {name!r} is not finite in {values.dtype}: the uploads are finite, their aggregate "
                "(with relative_to and noise, when given) overflows the dtype"
            )
    return None


def _streamed(
    run: _Run,
    items: Iterator[_Item],
    options: Options,
    relative_to: Source | None,
    opts: Any,
    progress: bool,
    sources: Any,
) -> None:
    """The robust methods and update hygiene: check every upload, then aggregate them streamed."""
    from ._flat_layout import momentum_key
    from ._robust import UpdateOverflow, overflowing
    from ._robust import aggregate as robust_aggregate

    total = len(sources) if isinstance(sources, (Sequence, Mapping)) else None
    bar = progress_bar(items, enabled=progress, desc="checking", total=total, unit="upload")
    members = run.collect(bar, options.chunk_bytes)
    if not members or run.layout is None:
        return
    base = None
    if relative_to is not None:
        upload = open_upload(relative_to, None, opts)
        where = upload.locate(run.layout)
        if isinstance(where, tuple):
            raise ValueError(f"relative_to does not match the reference: {where[1]}")
        base = Member(-1, "relative_to", 1.0, upload.reader(), where)
    lanes = run.layout.slot_lanes()
    try:
        try:
            outcome = robust_aggregate(members, lanes, options, base)
        except UpdateOverflow:
            # an upload whose update leaves float64 (finite values of opposite signs near the
            # limit) is rejected, never aggregated; the round goes on without it
            assert base is not None and run.spec is not None
            found = overflowing(members, lanes, options.chunk_bytes, base)
            names = [*run.spec.averaged, *(momentum_key(*key) for key in run.spec.momentums)]
            for row, slot in found.items():
                m = members[row]
                message = f"its update against relative_to overflows float64 in {names[slot]!r}"
                run.reports.append(rejection(m.index, m.client, Rejected("overflow", message)))
            members = [m for row, m in enumerate(members) if row not in found]
            if not members:
                run.acc = PartialSum()  # nothing accepted: the round fails as such
                return
            outcome = robust_aggregate(members, lanes, options, base)
    finally:
        run.total_weight = sum(m.weight for m in members)
        _accepted(run, members)
    run.acc = PartialSum(outcome.slots, run.acc.bounds, 1.0, len(members))  # the means themselves


def _accepted(run: _Run, members: list[Member]) -> None:
    """The reports of the uploads a streamed method aggregated (or would have: the round may
    still fail as a whole)."""
    for m in members:  # run.reports holds the rejections so far
        run.reports.append(
            SourceReport(
                m.index,
                m.client,
                True,
                weight=m.weight,
                norm=m.norm,
                clipped=m.clipped,
                distance=m.distance,
                krum_score=m.krum_score,
                selected=m.selected,
            )
        )
