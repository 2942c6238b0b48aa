"""``average(..., engine=client)``: the same checks and aggregate on a Dask ``distributed`` cluster.

Paths must be on storage the workers share, or URLs. Uploads are split into batches (about four
per worker thread), each batch one task.

Plain FedAvg: each task runs a round of its own over its batch and sends back its partial sums;
these are added in a tree of ``merge_partials`` tasks (``FAN_IN`` at a time), so no node ever
holds more than ``FAN_IN`` of them, and only the final one travels back to the client, whose
round absorbs it.

Every other method and update hygiene: each task checks its batch (a screening round: every
check but the overflow rule) and sends back where each accepted upload's values are (a file's
path and version, or the bytes) with its largest magnitudes; the client's round admits them in
upload order (duplicates, the overflow rule). Then the model's lanes are split into ranges, and
each pass is one task per range that reads its lanes of every upload with ``pread`` (a file must
still be the version checked): the updates' norms (clipping), their pairwise distances (Krum's
family: the partial matrices are added), then the aggregate of the range. The client adds the
partial results and assembles the ranges. When an upload could overflow FedAvg's sums (values
near float64's limit), only the exact sums can tell, and the whole round is run again by the
local engine on one worker (the same verdicts and result as ``engine=None``).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from .. import _native
from .._paths import StrPath
from .._progress import progress as progress_bar
from ..state import CheckpointState
from ._reference import ModelSpec, layout_of
from ._reports import AggregationReport, SourceReport
from ._round import Round
from ._uploads import Item, Payload, local_file, read_source, rejection

FAN_IN = 4
BATCHES_PER_THREAD = 4

Partial = tuple[Any, Any, float, int]


def _threads(client: Any) -> int:
    try:
        workers = client.scheduler_info()["workers"]
        return max(1, sum(int(w.get("nthreads", 1)) for w in workers.values()))
    except (KeyError, AttributeError, TypeError):
        return 1


def _shippable(src: Any) -> Any:
    """A form of ``src`` that pickles: bytes for states and buffers, paths as they are."""
    if isinstance(src, CheckpointState):
        return src.to_bytes(include_optimizer_state=True)
    if isinstance(src, (bytearray, memoryview)):
        return bytes(src)
    return src


def _local_key(src: Any) -> Any:
    """What tells one upload given twice before shipping: a local file by its resolved path,
    anything else as it is (bytes by content)."""
    path = local_file(src)
    return os.path.realpath(path) if path is not None else src if isinstance(src, (str, bytes)) else None


def fedavg_batch(
    batch: list[Item], spec: ModelSpec, max_bytes: int | None, storage_options: Any
) -> tuple[Partial, list[SourceReport]]:
    """One Dask task: a round of its own over a batch of uploads; its partial sums and verdicts."""
    native = _native.Round(layout_of(spec), "fedavg", max_bytes=max_bytes)
    reports = []
    for index, client, src, rule, staleness in batch:
        given = None if isinstance(rule, str) or rule is None else float(rule)
        prop = rule if isinstance(rule, str) else None
        path = local_file(src)
        try:
            if path is not None:
                verdict = native.add_files([path], [given], prop, [client], [staleness])[0]
            else:
                p: Payload = read_source(src, max_bytes, storage_options)
                verdict = native.add_bytes(
                    p.data, p.external, given, prop, client, p.identity, staleness, p.source
                )
        except Exception as exc:  # this upload only, never the round
            reports.append(rejection(index, client, exc))
            continue
        if verdict.accepted:
            reports.append(SourceReport(index, client, True, weight=verdict.weight))
        else:
            reports.append(SourceReport(index, client, False, kind=verdict.kind, reason=verdict.message))
    return native.take_partial(), reports


def _aligned(partial: Partial) -> Partial:
    """The arrays of a partial as the native merge reads them: C-contiguous and aligned (Dask's
    transport may hand arrays over at any offset of its frames)."""
    sums, bounds, total, count = partial
    need: list[Any] = ["C", "A"]
    return np.require(sums, np.float64, need), np.require(bounds, np.float64, need), total, count


def merge_batches(*parts: tuple[Partial, list[SourceReport]]) -> tuple[Partial, list[SourceReport]]:
    """One node of the reduction tree."""
    merged, reports = parts[0]
    reports = list(reports)
    for partial, more in parts[1:]:
        merged = _native.merge_partials(_aligned(merged), _aligned(partial))
        reports.extend(more)
    return merged, reports


def average_on_dask(
    client: Any, rnd: Round, items: list[Item], out: StrPath | None, show_progress: bool
) -> AggregationReport:
    if not hasattr(client, "map") or not hasattr(client, "submit"):
        raise TypeError(f"engine must be a dask.distributed.Client, got {type(client).__name__}")
    if not rnd._plain():
        return _robust_on_dask(client, rnd, items, out, show_progress)
    pending = list(items)
    while rnd._native is None and pending:  # the reference: the first upload that passes, here
        rnd._add_one(pending.pop(0), None)
    if rnd._native is None or rnd._spec is None:
        return rnd.result(out, engine="dask")
    # the workers check every upload again but the reference's; duplicates are found here
    shipped: list[Item] = []
    seen = {_local_key(s): c for _, c, s, _, _ in items[: len(items) - len(pending)]}
    for index, label, src, rule, staleness in pending:
        src = _shippable(src)
        key = _local_key(src)
        if key is not None and key in seen:
            first = seen[key]
            rnd._reports.append(
                SourceReport(
                    index,
                    label,
                    False,
                    kind="duplicate",
                    reason=f"the same upload as {first!r} (counted once)",
                )
            )
            continue
        if key is not None:
            seen[key] = label
        shipped.append((index, label, src, rule, staleness))
    if shipped:
        size = max(1, math.ceil(len(shipped) / (_threads(client) * BATCHES_PER_THREAD)))
        batches = [shipped[i : i + size] for i in range(0, len(shipped), size)]
        futures = client.map(
            fedavg_batch,
            batches,
            spec=rnd._spec,
            max_bytes=rnd._limit,
            storage_options=rnd._storage,
            pure=False,
        )
        if show_progress:
            from distributed import as_completed

            done: Any = as_completed(futures)  # type: ignore[no-untyped-call]
            for _ in progress_bar(done, enabled=True, desc="averaging", total=len(futures), unit="batch"):
                pass
        while len(futures) > 1:
            futures = [
                client.submit(merge_batches, *futures[i : i + FAN_IN], pure=False)
                for i in range(0, len(futures), FAN_IN)
            ]
        partial, reports = futures[0].result()
        rnd._native.absorb(_aligned(partial))
        for r in reports:
            if r.accepted:
                rnd._accepted.append(len(rnd._reports))
            rnd._reports.append(r)
    return rnd.result(out, engine="dask")


#: lanes of the model per range task at most (the task's output: 8 bytes a lane)
RANGE_LANES = 4 << 20


def screen_batch(
    batch: list[Item],
    spec: ModelSpec,
    method: str,
    options: dict[str, Any],
    max_bytes: int | None,
    storage_options: Any,
) -> list[tuple[int, str, SourceReport | None, Any]]:
    """One Dask task of a robust round: every upload of the batch checked (not admitted: the
    client's round does that, in upload order). Per upload: its rejection, or what the client
    needs to admit it and the range tasks to read it."""
    native = _native.Round(layout_of(spec), method, max_bytes=max_bytes, screening=True, **options)
    accepted: list[tuple[int, str]] = []
    out: list[tuple[int, str, SourceReport | None, Any]] = []
    for index, client, src, rule, staleness in batch:
        given = None if isinstance(rule, str) or rule is None else float(rule)
        prop = rule if isinstance(rule, str) else None
        path = local_file(src)
        try:
            if path is not None:
                verdict = native.add_files([path], [given], prop, [client], [staleness])[0]
            else:
                p: Payload = read_source(src, max_bytes, storage_options)
                if p.read is not None:
                    verdict = native.add_read(p.read, given, prop, client, staleness)
                else:
                    verdict = native.add_bytes(
                        p.data, p.external, given, prop, client, p.identity, staleness, p.source
                    )
        except Exception as exc:  # this upload only, never the round
            out.append((index, client, rejection(index, client, exc), None))
            continue
        if verdict.accepted:
            accepted.append((index, client))
        else:
            out.append(
                (
                    index,
                    client,
                    SourceReport(index, client, False, kind=verdict.kind, reason=verdict.message),
                    None,
                )
            )
    for (index, client), portable in zip(accepted, native.take_portables(), strict=True):
        out.append((index, client, None, portable))
    return out


def range_task(
    spec: ModelSpec,
    portables: list[Any],
    base: Any,
    span: tuple[int, int],
    chunk_bytes: int,
    kind: str,
    scale: list[float] | None = None,
    plan: Any = None,
) -> Any:
    """One pass over lanes ``span`` of every admitted upload (see the module note)."""
    return _native.range_pass(
        layout_of(spec), portables, base, span[0], span[1], chunk_bytes, kind, scale, plan
    )


def local_round(rnd_args: dict[str, Any], items: list[Item], out_state: bool = True) -> tuple[Any, ...]:
    """The whole round by the local engine, on one worker: the verdicts and the aggregate."""
    rnd = Round(**rnd_args)
    rnd._extend(iter(items), ahead=1)
    report = rnd.result()
    return (
        report.sources,
        report.total_weight,
        report.state.to_bytes(include_optimizer_state=True),
        report.reference,
        report.server,
    )


def _spans(total: int, pieces: int) -> list[tuple[int, int]]:
    size = max(1, math.ceil(total / max(1, pieces)))
    return [(start, min(total, start + size)) for start in range(0, total, size)]


def _robust_on_dask(
    client: Any, rnd: Round, items: list[Item], out: StrPath | None, show_progress: bool
) -> AggregationReport:
    pending = list(items)
    while rnd._native is None and pending:  # the reference: the first upload that passes, here
        rnd._add_one(pending.pop(0), None)
    if rnd._native is None or rnd._spec is None or rnd._reference is None:
        return rnd.result(out, engine="dask")
    # the workers check every upload, the reference's too: the client's round starts afresh
    tried = len(items) - len(pending)
    if rnd._reports and rnd._reports[-1].accepted:
        rnd._reports.pop()
        pending.insert(0, items[tried - 1])
    rnd._accepted = []
    rnd._start(rnd._reference, rnd._spec, rnd.reference_label, rnd._limit)
    assert rnd._native is not None
    native = rnd._native
    shipped = [(i, c, _shippable(s), r, a) for i, c, s, r, a in pending]
    threads = _threads(client)
    size = max(1, math.ceil(len(shipped) / (threads * BATCHES_PER_THREAD))) if shipped else 1
    batches = [shipped[i : i + size] for i in range(0, len(shipped), size)]
    futures = client.map(
        screen_batch,
        batches,
        spec=rnd._spec,
        method=rnd.method,
        options=rnd._core_options,
        max_bytes=rnd._limit,
        storage_options=rnd._storage,
        pure=False,
    )
    if show_progress:
        from distributed import as_completed

        done: Any = as_completed(futures)  # type: ignore[no-untyped-call]
        for _ in progress_bar(done, enabled=True, desc="checking", total=len(futures), unit="batch"):
            pass
    screened = sorted((entry for part in client.gather(futures) for entry in part), key=lambda e: e[0])
    for position, (index, label, report, portable) in enumerate(screened):
        if report is not None:
            rnd._reports.append(report)
            continue
        verdict = native.admit(portable)
        if verdict is None:  # only the exact sums can tell: the local engine, on one worker
            return _exact_on_one_worker(client, rnd, items, out)
        rnd._report(index, label, verdict, 0)
        del position
    if not rnd._accepted:
        return rnd.result(out, engine="dask")
    portables, base = native.portables()
    lanes = sum(layout_of(rnd._spec).slot_lanes())
    spans = _spans(lanes, max(2 * threads, math.ceil(lanes / RANGE_LANES)))
    shared = client.scatter([portables, base], broadcast=True)
    chunk = rnd._options["chunk_bytes"]

    def run(kind: str, **extra: Any) -> list[Any]:
        tasks = [
            client.submit(range_task, rnd._spec, shared[0], shared[1], span, chunk, kind, pure=False, **extra)
            for span in spans
        ]
        return list(client.gather(tasks))

    if base is not None:  # updates that leave float64 are left out before anything else
        parts = run("overflows")
        first = [min((p[i] for p in parts if p[i] is not None), default=None) for i in range(len(portables))]
        dropped = native.drop_remote(first)
        if dropped:
            rnd._drop(dropped)
            if not rnd._accepted:
                return rnd.result(out, engine="dask")
            portables, base = native.portables()
            shared = client.scatter([portables, base], broadcast=True)
    n = len(portables)
    need_norms, need_distances = native.passes_needed()
    squares = np.zeros(n)
    if need_norms:
        squares = np.sum(run("squares"), axis=0)
    scale = native.clip_scale(list(map(float, squares)))
    d = np.zeros(0)
    if need_distances:
        parts = run("distances", scale=scale)
        d = np.sum([p[0] for p in parts], axis=0)
        if not need_norms:
            squares = np.sum([p[1] for p in parts], axis=0)
    plan, scores = native.plan(scale, list(map(float, d)))
    parts = run("reduce", plan=plan)
    values = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
    gaps = np.sum([p[1] for p in parts], axis=0)
    if not plan[8]:  # the last pass summed the squares
        squares = np.sum([p[2] for p in parts], axis=0)
    return rnd._finish(
        lambda: native.finish_remote(
            list(map(float, values)), list(map(float, gaps)), list(map(float, squares)), plan, scores
        ),
        out,
        "dask",
    )


def _exact_on_one_worker(
    client: Any, rnd: Round, items: list[Item], out: StrPath | None
) -> AggregationReport:
    """The round by the local engine on one worker (an upload could overflow FedAvg's sums)."""
    args = {
        "reference": None if rnd._given_reference is None else _shippable(rnd._given_reference),
        "method": rnd.method,
        "include_optimizer_state": rnd._include,
        "max_bytes": rnd._max_bytes,
        "storage_options": rnd._storage,
        "relative_to": None if rnd._relative_to is None else _shippable(rnd._relative_to),
        **dict(zip(("server_optimizer", "adaptive_clipping", "privacy"), rnd._server_args, strict=True)),
        **rnd._options,
    }
    shipped = [(i, c, _shippable(s), r, a) for i, c, s, r, a in items]
    sources, total_weight, state_bytes, reference, server = client.submit(
        local_round, args, shipped, pure=False
    ).result()
    from ..io import load_bytes
    from ..io import save as save_state

    state = load_bytes(state_bytes)
    written = None
    if out is not None:
        from .._sources import local_output

        written = os.fsdecode(os.fspath(out))
        with local_output(out, rnd._storage) as path:
            save_state(state, path, include_optimizer_state=True)
    rnd._done = True
    return AggregationReport(
        written, reference, list(sources), total_weight, state, "dask", rnd.method, server
    )
