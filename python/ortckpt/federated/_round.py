"""``ortckpt.Round``: one aggregation round that takes uploads as they arrive.

Each ``add`` checks one upload against the reference (names, trainable flags, dtypes, shapes,
finite values, the size limit, a usable weight, not seen before) and answers at once with its
``SourceReport``; plain FedAvg adds it into float64 sums there and then, so memory stays one model
whatever the number of uploads. The robust methods and update hygiene keep each accepted upload
(its files held open, or its bytes) and read them again, chunk by chunk, in ``result``. Every rule
is the core's (``ortckpt_core::aggregate::Round``); this module turns sources into what it takes
and its verdicts into reports. See docs/federated.md.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .. import _native
from .._legacy import not_a_folder
from .._paths import StrPath
from .._sources import load as load_source
from .._sources import local_output, open_state
from .._types import CheckpointSource
from ..errors import AggregationError
from ..io import load_bytes, save
from ..state import CheckpointState
from ._privacy import AdaptiveClipping, PrivacyAccountant
from ._reference import ModelSpec, default_limit, layout_of, result_state, slim, spec_of
from ._reports import AggregationReport, SourceReport
from ._server_opt import ServerOptimizer
from ._server_round import ServerRound
from ._server_state import GROUP, PREFIX, strip_server_state, with_server_state
from ._uploads import (
    Copied,
    Folder,
    Item,
    Payload,
    local_file,
    open_upload,
    prefetched,
    read_source,
    rejection,
)

METHODS = ("fedavg", "median", "trimmed_mean", "krum", "multi_krum", "bulyan")
#: float64 bytes of one chunk across all uploads (the ``chunk_bytes`` knob's default)
DEFAULT_CHUNK_BYTES = 64 << 20
#: local files per native call (the core checks a window of them on every core at once)
FILES_PER_CALL = 64

__all__ = ["DEFAULT_CHUNK_BYTES", "METHODS", "Round"]


def _label(index: int, src: object) -> str:
    if isinstance(src, (str, os.PathLike)):
        return os.fsdecode(os.fspath(src))
    if isinstance(src, CheckpointState):
        return src.source if src.source not in (None, "<bytes>") else f"state #{index}"
    return f"upload #{index}"


def _whole(
    name: str, value: Any, *, minimum: int = 0, maximum: int = 2**63 - 1, optional: bool = True
) -> int | None:
    """A whole-number option, checked (never a bool, a float, a negative number, or one past
    what the core counts in: 64 bits)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValueError(f"{name} must be a whole number in [{minimum}, {maximum}]; got {value!r}")
    return value


def _number(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number; got {value!r}")
    return float(value)


class Round:
    """One aggregation round: ``add`` uploads as they arrive, then ``result()``.

    ``reference``: what every upload must match (a path, URL, bytes or state); default: the first
    upload that loads and passes its own checks. The options are ``average``'s (``method``,
    ``trim``, ``byzantine``, ``keep``, ``relative_to``, ``clip_norm``, ``noise_multiplier``,
    ``seed``, ``chunk_bytes``, ``include_optimizer_state``, ``max_bytes``, ``storage_options``),
    each checked here. Staleness (asynchronous FL, as FedBuff defines it): an upload trained from a
    global model ``s`` versions old weighs ``weight * (1 + s) ** -staleness_exponent`` (default
    0.5: ``1 / sqrt(1 + s)``); one older than ``max_staleness`` is rejected (kind ``stale``).

    Server state (docs/federated.md, "Server optimizers and resuming a server"): with
    ``relative_to`` the global model the round starts from, ``server_optimizer`` (``FedAvgM``,
    ``FedAdagrad``, ``FedAdam``, ``FedYogi``) steps the global model by the aggregated update,
    ``adaptive_clipping`` (``AdaptiveClipping``) sets the clipping norm, ``privacy``
    (``PrivacyAccountant``) counts the privacy spent; each reads its state from ``relative_to``'s
    checkpoint and ``result()`` writes the new state into the global checkpoint it returns.
    """

    def __init__(
        self,
        reference: CheckpointSource | None = None,
        *,
        method: str = "fedavg",
        include_optimizer_state: bool = False,
        max_bytes: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        trim: float = 0.1,
        byzantine: int = 0,
        keep: int | None = None,
        relative_to: CheckpointSource | None = None,
        clip_norm: float | None = None,
        noise_multiplier: float | None = None,
        seed: int | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        staleness_exponent: float = 0.5,
        max_staleness: int | None = None,
        server_optimizer: ServerOptimizer | None = None,
        adaptive_clipping: AdaptiveClipping | None = None,
        privacy: PrivacyAccountant | None = None,
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
        self.method = method
        self._options: dict[str, Any] = {
            "trim": _number("trim", trim),
            "byzantine": _whole("byzantine", byzantine, optional=False),
            "keep": _whole("keep", keep, minimum=1),
            "clip_norm": _number("clip_norm", clip_norm),
            "noise_multiplier": _number("noise_multiplier", noise_multiplier),
            "seed": _whole("seed", seed, maximum=2**64 - 1),
            "chunk_bytes": _whole("chunk_bytes", chunk_bytes, minimum=8, optional=False),
            "staleness_exponent": _number("staleness_exponent", staleness_exponent),
            "max_staleness": _whole("max_staleness", max_staleness),
        }
        self._max_bytes = _whole("max_bytes", max_bytes, minimum=1)
        self._include = include_optimizer_state
        self._storage = dict(storage_options) if storage_options is not None else None
        self._relative_to = relative_to
        self._server_args = (server_optimizer, adaptive_clipping, privacy)
        self._server: ServerRound | None = None
        self._base: Payload | None = None  # the global model's bytes, read once, when state is kept
        if any(a is not None for a in self._server_args):
            self._server = self._server_round()
        elif relative_to is not None:
            self._refuse_lost_state(relative_to)
        # the options the core runs with (adaptive clipping's norm, the round's seed)
        self._core_options = self._options if self._server is None else self._server.core_options
        # every option is checked by the core now, not when the first upload arrives
        _native.Round(_native.AggregationLayout([], []), method, **self._core_options)
        self._given_reference = reference
        self._limit = self._max_bytes
        self._native: _native.Round | None = None
        self._reference: CheckpointState | None = None
        self._spec: ModelSpec | None = None
        self.reference_label = "none"
        self._reports: list[SourceReport] = []
        self._accepted: list[int] = []  # positions in _reports, in the order the round accepted them
        self._count = 0
        self._done = False
        self._deferred: list[tuple[int, str, str, Any, int]] = []  # see _try_local_reference
        if reference is not None:
            path = local_file(reference)
            if path is not None:  # its structure only (the round keeps none of its values)
                state = CheckpointState._from_index(_native.index_upload(path))
            else:  # a URL lazily: its structure's blocks and its frozen tensors, what slim keeps
                state = open_state(reference, storage_options=self._storage)
            is_bytes = isinstance(reference, (bytes, bytearray, memoryview))
            self._start(
                state,
                spec_of(state, include_optimizer_state),
                "<bytes>" if is_bytes else _label(-1, reference),
            )

    # -- the server state ------------------------------------------------------------------------

    def _server_round(self) -> ServerRound:
        if self._relative_to is None:
            raise ValueError(
                "server_optimizer, adaptive_clipping and privacy need relative_to: the global model "
                "the round starts from, whose checkpoint carries the server's state"
            )
        self._base = read_source(self._relative_to, None, self._storage)
        state = load_bytes(self._base.data, external_data=self._base.external)
        return ServerRound(state, *self._server_args, self._options)

    def _refuse_lost_state(self, relative_to: CheckpointSource) -> None:
        """A round without server options must not drop the state its global model carries."""
        props = open_state(relative_to, storage_options=self._storage).properties
        if any(k.startswith(PREFIX) for k in props):
            what = props.get(PREFIX + "optimizer", "adaptive clipping or privacy accounting")
            raise ValueError(
                f"relative_to carries a server state ({what}, round {props.get(PREFIX + 'round')}): pass "
                "the same server_optimizer / adaptive_clipping / privacy to continue the run, or "
                "relative_to=ortckpt.strip_server_state(global) to leave it"
            )

    # -- the reference ---------------------------------------------------------------------------

    def _start(self, state: CheckpointState, spec: ModelSpec, label: str, limit: int | None = None) -> None:
        """Starts the native round over ``state``'s structure (and the global model of
        ``relative_to``); the round keeps only what the result needs of ``state`` (``slim``).
        ``limit``: the size limit (default: ``max_bytes``, else one derived from ``state``)."""
        if limit is not None:
            self._limit = limit
        elif self._max_bytes is None:
            self._limit = default_limit(state)
        native = _native.Round(layout_of(spec), self.method, max_bytes=self._limit, **self._core_options)
        if self._base is not None:
            native.set_base_bytes(self._base.data, self._base.external)
        elif self._relative_to is not None:
            base = self._relative_to
            path = local_file(base)
            if path is not None:
                native.set_base_file(path)
            else:
                payload = read_source(base, None, self._storage)
                native.set_base_bytes(payload.data, payload.external)
        self._native, self._reference, self._spec, self.reference_label = native, slim(state), spec, label

    def _begin(self, index: int, client: str, opened: Callable[[], CheckpointState]) -> SourceReport | None:
        """Starts the round over the upload ``opened()`` gives (none of its state is kept but
        what ``slim`` copies); its rejection when it cannot be the reference (the next one is
        tried)."""
        try:
            state = opened()
            self._start(state, spec_of(state, self._include), client)
        except Exception as exc:
            report = rejection(index, client, exc)
            self._reports.append(report)
            return report
        return None

    def _counted(self, report: SourceReport) -> SourceReport:
        """The reference's own verdict: failing its own checks (a NaN, a bad weight), it is not
        the reference."""
        if not report.accepted:
            self._forget_reference()
        return report

    def _try_reference(
        self, index: int, client: str, held: list[Payload], rule: Any, staleness: int
    ) -> SourceReport:
        """The first upload that loads and passes its own checks becomes the reference (here:
        bytes, a URL, a folder, or a local file read for the methods that keep their uploads).
        ``held`` holds the one payload (taken out of it here, so that no caller's frame keeps
        the bytes alive)."""
        payload = held.pop()
        refused = self._begin(index, client, lambda: load_bytes(payload.data, external_data=payload.external))
        if refused is not None:
            return refused
        return self._counted(self._add_payload(index, client, payload, rule, staleness))

    def _try_local_reference(self, entry: tuple[int, str, str, Any, int], defer: bool) -> SourceReport | None:
        """The reference when it is a local file: only its structure is read here (the spec, the
        frozen parameters, the properties: ``_native.index_upload``, the core's file rules,
        ``pread`` into private memory); its values are read when it is counted as every other file
        is, from its path: streamed for a large model, so the round never holds an upload whole
        (plain FedAvg: never an upload and the sums at once, a 3 GB model: 6 GB of sums, not 9;
        the robust methods: no model-sized buffer held for the whole round, at the cost of
        reading the reference's values twice, once to check them and once in the sweep). With
        ``defer`` (plain FedAvg) it is not counted here but queued (``_deferred``) to be counted
        with the files after it, in one pass over the sums; ``_extend`` starts again without it
        if it fails its checks there."""
        index, client, path, _, _ = entry
        limit = self._limit
        refused = self._begin(
            index, client, lambda: CheckpointState._from_index(_native.index_upload(path, limit))
        )
        if refused is not None:
            return refused
        if defer:
            self._deferred.append(entry)
            return None
        return self._counted(self._add_files([entry])[0])

    def _try_copied_reference(
        self, index: int, client: str, copied: Copied, rule: Any, staleness: int
    ) -> SourceReport:
        """The reference when the first upload that loads is a URL: its structure read from its
        local copy (as a local file's, ``_native.index_upload``), then counted from it."""
        limit = self._limit
        refused = self._begin(
            index, client, lambda: CheckpointState._from_index(_native.index_upload(copied.path, limit))
        )
        if refused is not None:
            return refused
        return self._counted(self._add_copied(index, client, copied, rule, staleness))

    def _add_folder(self, index: int, client: str, path: str, rule: Any, staleness: int) -> SourceReport:
        """An ORT 1.15 folder, read by the core's folder reader (``add_folder``: its index and
        values taken as they are); when it is the first upload, the reference's structure is read
        from it first (``load``: the same reader)."""
        if self._native is None:
            limit = self._limit
            refused = self._begin(index, client, lambda: load_source(path, max_bytes=limit))
            if refused is not None:
                return refused
            return self._counted(self._add_folder(index, client, path, rule, staleness))
        given, prop = self._rule(rule)
        verdict = self._native.add_folder(path, given, prop, client, path, staleness)
        if verdict is None:
            report = rejection(index, client, not_a_folder(path))
            self._reports.append(report)
            return report
        return self._report(index, client, verdict, staleness)

    def _forget_reference(self) -> None:
        """Back to "no reference yet" (the reference failed its own checks)."""
        self._native, self._reference, self._spec, self.reference_label = None, None, None, "none"
        self._limit = self._max_bytes

    def _without_reference(self, start: int, rest: list[tuple[int, str, str, Any, int]]) -> None:
        """The deferred reference (the report at ``start``) failed its checks in the pass that
        counted it with the files after it (``rest``): those were checked against an upload that
        is not the reference. Their verdicts are dropped (its rejection stays) and they go
        again, the first to pass becoming the reference."""
        del self._reports[start + 1 :]
        self._accepted = [at for at in self._accepted if at < start]
        self._forget_reference()
        while rest and self._native is None:
            self._add_one(rest.pop(0), None)
        if rest:
            self._add_files(rest)

    def _plain(self) -> bool:
        """Plain FedAvg: each upload added into the sums as it comes, none kept."""
        o = self._options
        return (
            self.method == "fedavg"
            and o["clip_norm"] is None
            and o["noise_multiplier"] is None
            and self._relative_to is None
        )

    # -- adding uploads --------------------------------------------------------------------------

    @staticmethod
    def _rule(weight: Any) -> tuple[float | None, str | None]:
        if isinstance(weight, str):
            return None, weight
        if weight is None:
            return None, None
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise TypeError(f"weight must be a number or a property name; got {type(weight).__name__}")
        return float(weight), None

    def _report(self, index: int, client: str, verdict: _native.RoundVerdict, staleness: int) -> SourceReport:
        age = staleness or None
        if verdict.accepted:
            report = SourceReport(index, client, True, weight=verdict.weight, staleness=age)
            self._accepted.append(len(self._reports))
        else:
            report = SourceReport(
                index, client, False, kind=verdict.kind, reason=verdict.message, staleness=age
            )
        self._reports.append(report)
        return report

    def _add_payload(
        self, index: int, client: str, payload: Payload, rule: Any, staleness: int
    ) -> SourceReport:
        assert self._native is not None
        given, prop = self._rule(rule)
        if payload.read is not None:
            verdict = self._native.add_read(payload.read, given, prop, client, staleness)
        else:
            verdict = self._native.add_bytes(
                payload.data,
                payload.external,
                given,
                prop,
                client,
                payload.identity,
                staleness,
                payload.source,
            )
        return self._report(index, client, verdict, staleness)

    def _add_copied(self, index: int, client: str, copied: Copied, rule: Any, staleness: int) -> SourceReport:
        """A URL's upload from its local copy, by the core's file readers, under the URL's
        identity (``add_file_named``)."""
        assert self._native is not None
        given, prop = self._rule(rule)
        verdict = self._native.add_file_named(copied.path, given, prop, client, copied.url, staleness)
        return self._report(index, client, verdict, staleness)

    def _add_files(
        self, batch: list[tuple[int, str, str, Any, int]], defer: bool = False
    ) -> list[SourceReport]:
        """Local files, checked in one native call on every core (the same verdicts as one by one).
        ``defer``: for ``_extend`` (``average``), the robust methods check each value when
        ``result()`` first reads it, the uploads read once; a bad upload's report then becomes its
        rejection there (``_drop``), the same kind and reason as when checked at once."""
        assert self._native is not None
        props = {r for _, _, _, r, _ in batch if isinstance(r, str)}
        prop = next(iter(props)) if len(props) == 1 else None
        if len(props) > 1:  # one property per native call: split the batch
            reports: list[SourceReport] = []
            for item in batch:
                reports.extend(self._add_files([item], defer))
            return reports
        given = [None if isinstance(r, str) or r is None else self._rule(r)[0] for _, _, _, r, _ in batch]
        verdicts = self._native.add_files(
            [p for _, _, p, _, _ in batch],
            given,
            prop,
            [c for _, c, _, _, _ in batch],
            [s for *_, s in batch],
            defer,
        )
        return [self._report(i, c, v, s) for (i, c, _, _, s), v in zip(batch, verdicts, strict=True)]

    def _check_open(self) -> None:
        if self._done:
            raise ValueError("this round has given its result; start a new Round")

    def add(
        self,
        source: CheckpointSource,
        weight: float | str | None = None,
        *,
        client: str | None = None,
        staleness: int = 0,
    ) -> SourceReport:
        """Checks one upload and counts it when it passes: its ``SourceReport``, at once.

        ``weight``: a number (e.g. the device's sample count), the name of a property of the
        upload that holds it, or None (1). ``client`` names it in the report (default: its path,
        or its position). ``staleness``: how many global-model versions old it is. A bad upload
        never raises: it is rejected with a kind and a reason (docs/federated.md).
        """
        self._check_open()
        index = self._count
        self._count += 1
        label = client if client is not None else _label(index, source)
        age = _whole("staleness", staleness, optional=False)
        assert age is not None
        report = self._add_one((index, label, source, weight, age), None)
        assert report is not None  # only _extend defers
        return report

    def _add_one(self, item: Item, read: Any, defer: bool = False) -> SourceReport | None:
        index, client, src, rule, staleness = item
        path = local_file(src) if read is None else None
        if path is not None and self._native is not None:
            return self._add_files([(index, client, path, rule, staleness)])[0]
        if path is not None:  # the first local file: its structure read, not its values
            return self._try_local_reference((index, client, path, rule, staleness), defer and self._plain())
        try:
            payload = read() if read is not None else open_upload(src, self._limit, self._storage)
        except Exception as exc:  # garbage, unreachable, too large: this upload only, never the round
            report = rejection(index, client, exc)
            self._reports.append(report)
            return report
        if isinstance(payload, Folder):
            return self._add_folder(index, client, payload.path, rule, staleness)
        if isinstance(payload, Copied):
            try:
                if self._native is None:
                    return self._try_copied_reference(index, client, payload, rule, staleness)
                return self._add_copied(index, client, payload, rule, staleness)
            finally:  # the core holds the files it keeps open; the directory goes
                payload.close()
        if self._native is None:
            held = [payload]
            del payload  # the reference's reading lets the bytes go before it counts the upload
            return self._try_reference(index, client, held, rule, staleness)
        return self._add_payload(index, client, payload, rule, staleness)

    def _extend(self, items: Iterable[Item], ahead: int) -> None:
        """``add`` for many uploads: local files in batches checked on every core, other sources
        read ``ahead`` at a time on other threads while the one before them is checked."""
        items = iter(items)
        for item in items:  # one at a time until the reference is known
            if self._native is not None:
                items = itertools.chain([item], items)
                break
            self._count = max(self._count, item[0] + 1)
            self._add_one(item, None, defer=True)
        # the reference, when it is a local file, is counted with the files after it
        batch: list[tuple[int, str, str, Any, int]] = self._deferred
        self._deferred = []
        reference_pending = bool(batch)

        def flush() -> None:
            nonlocal reference_pending
            if not batch:
                return
            start = len(self._reports)
            # a pending reference is plain FedAvg's, which never defers (its sums need every value)
            reports = self._add_files(batch, defer=not reference_pending)
            if reference_pending and not reports[0].accepted:
                self._without_reference(start, batch[1:])
            reference_pending = False
            batch.clear()

        found: list[str | None] = []

        def skip(src: Any) -> bool:
            found.append(local_file(src))
            return found[-1] is not None

        for item, read in prefetched(items, self._limit, self._storage, skip, ahead=ahead):
            self._count = max(self._count, item[0] + 1)
            path = found.pop(0)
            if path is not None:
                batch.append((item[0], item[1], path, item[3], item[4]))
                if len(batch) >= FILES_PER_CALL:
                    flush()
                continue
            flush()
            self._add_one(item, read)
        flush()

    # -- the result ------------------------------------------------------------------------------

    @property
    def reports(self) -> list[SourceReport]:
        """The verdicts so far, in the order the uploads were added."""
        return list(self._reports)

    @property
    def accepted(self) -> int:
        """How many uploads were accepted so far."""
        return len(self._accepted)

    @property
    def total_weight(self) -> float:
        """The sum of the accepted uploads' weights so far."""
        return 0.0 if self._native is None else self._native.total_weight

    def _failure(self, message: str, engine: str) -> AggregationError:
        report = AggregationReport(
            None,
            self.reference_label,
            sorted(self._reports, key=lambda r: r.index),
            sum(self._reports[p].weight or 0.0 for p in self._accepted),
            CheckpointState(),
            engine,
            self.method,
        )
        error = AggregationError(f"{message}:\n{report.summary()}")
        error.report = report
        return error

    def result(self, out: StrPath | None = None, *, engine: str = "local") -> AggregationReport:
        """The aggregate (the round ends): an ``AggregationReport`` whose ``.state`` is the global
        model, written to ``out`` (a path or URL; atomic for local paths) when given.
        ``AggregationError`` (with ``.report``) when there is none: no upload accepted, fewer than
        the method needs, or an aggregate that is not finite."""
        self._check_open()
        self._done = True
        if self._native is None or self._reference is None or self._spec is None or not self._accepted:
            raise self._failure(f"no upload could be averaged (all {len(self._reports)} rejected)", engine)
        native = self._native
        # a server optimizer steps on float64 means; otherwise float32 slots may come rounded
        float32 = self._server is None
        return self._finish(lambda: native.finish(float32=float32), out, engine)

    def _drop(self, dropped: list[tuple[int, str, str]]) -> None:
        """Uploads accepted when they came and left out at the end, by their place in the order of
        acceptance: their reports become rejections. An update against ``relative_to`` that
        leaves float64, or an upload whose values were checked only when the result read them
        (``_add_files(defer=True)``) and hold one that is not finite."""
        gone = set()
        for place, kind, message in dropped:
            position = self._accepted[place]
            r = self._reports[position]
            self._reports[position] = SourceReport(
                r.index, r.client, False, kind=kind, reason=message, staleness=r.staleness
            )
            gone.add(position)
        self._accepted = [p for p in self._accepted if p not in gone]

    def _finish(self, finish: Any, out: StrPath | None, engine: str) -> AggregationReport:
        """The report of the round: ``finish()`` gives the native aggregate ``(values, divisor,
        total weight, count, members, dropped)``."""
        assert self._reference is not None and self._spec is not None
        self._done = True
        server = None
        try:
            values, divisor, total_weight, _, members, dropped = finish()
            self._drop(dropped)
            if self._server is not None:
                if divisor != 1.0:  # the optimizer steps on the means
                    for part in values:
                        part /= divisor
                    divisor = 1.0
                values, kept, server = self._server.apply(values, self._spec, members)
            state = result_state(self._reference, self._spec, values, divisor)
        except AggregationError as exc:
            self._drop(getattr(exc, "dropped", []))  # left out before it failed: rejections even so
            if not self._accepted:  # every upload rejected in the end: as result() says it
                raise self._failure(
                    f"no upload could be averaged (all {len(self._reports)} rejected)", engine
                ) from None
            raise self._failure(f"no aggregate: {exc}", engine) from None
        if self._server is not None:
            state = with_server_state(state, kept)
        elif any(k.startswith(PREFIX) for k in state.properties):  # a reference's stale server state
            state = strip_server_state(state)
        for position, (_, _, norm, clipped, distance, krum_score, selected) in zip(self._accepted, members):
            r = self._reports[position]
            self._reports[position] = SourceReport(
                r.index,
                r.client,
                True,
                weight=r.weight,
                norm=norm,
                clipped=clipped,
                distance=distance,
                krum_score=krum_score,
                selected=selected,
                staleness=r.staleness,
            )
        written: str | None = None
        if out is not None:
            written = os.fsdecode(os.fspath(out))
            keep = self._include or (state.optimizer is not None and GROUP in state.optimizer)
            with local_output(out, self._storage) as path:
                save(state, path, include_optimizer_state=keep)
        reports = sorted(self._reports, key=lambda r: r.index)
        return AggregationReport(
            written, self.reference_label, reports, total_weight, state, engine, self.method, server
        )
