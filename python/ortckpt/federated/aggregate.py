"""Validated aggregation of device checkpoints: ``average`` (a loop over ``ortckpt.Round``).

Each upload is checked against a reference (names, trainable flags, dtypes, shapes, finite values,
a size limit, a usable weight) and either counted or rejected and reported; a bad upload never
raises and never reaches the aggregate. Plain FedAvg adds uploads into float64 sums one at a time,
so memory is O(one model) whatever their number. ``engine=dask_client`` spreads the same work over
a Dask cluster. See docs/federated.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from .._paths import StrPath
from .._progress import progress as progress_bar
from .._types import CheckpointSource
from ..errors import AggregationError
from ._privacy import AdaptiveClipping, PrivacyAccountant
from ._reports import AggregationReport, SourceReport
from ._round import DEFAULT_CHUNK_BYTES, Round, _label
from ._server_opt import ServerOptimizer
from ._uploads import Item, weight_problem

#: One upload: a local path or fsspec URL, the checkpoint's bytes, or a loaded state.
Source = CheckpointSource

__all__ = ["AggregationError", "AggregationReport", "Round", "SourceReport", "average"]


def _items(sources: Iterable[Source] | Mapping[str, Source], weights: Any) -> Iterator[Item]:
    """(index, client label, source, weight rule, staleness) for every upload, checking explicit
    weights."""
    if isinstance(sources, (str, bytes, os.PathLike)) or type(sources).__name__ == "CheckpointState":
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
        yield index, label if label is not None else _label(index, src), src, rule, 0
    if given is not None and next(given, None) is not None:
        raise ValueError("more weights than sources")


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
    server_optimizer: ServerOptimizer | None = None,
    adaptive_clipping: AdaptiveClipping | None = None,
    privacy: PrivacyAccountant | None = None,
) -> AggregationReport:
    """Weighted average (FedAvg) of device checkpoints, validated upload by upload.

    ``sources``: paths or fsspec URLs (read into private memory or streamed from the file, never
    memory-mapped: another program cannot change what is read), checkpoint bytes (untrusted
    uploads) or states; a list, any iterable (a generator is consumed once, one upload at a time),
    or a mapping client id -> source (the ids name the uploads in the report).

    Each upload is checked against ``reference`` (default: the first upload that loads and has
    finite values): same parameter names, trainable flags, dtypes and shapes, finite values (and
    the same momentums when ``include_optimizer_state``), at most ``max_bytes`` bytes (default:
    4x the reference's tensor bytes + 1 MiB; local files are checked by size before they are read,
    URLs before download). A failing upload is rejected with a reason in the report; it never raises
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

    ``engine``: None runs here; a ``dask.distributed.Client`` runs the round on the cluster's
    workers, every method and option (paths must then be readable by the workers: shared storage
    or URLs; docs/federated.md, "Aggregating on a cluster"). ``progress`` shows a bar on a
    terminal.

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
    them at a time (the median and trimmed mean hold the values as the files
    store them, and over at most 32 uploads need less: each core reads and reduces about 1 MiB of
    them at a time). The report's sources then carry
    diagnostics (``norm``, ``clipped``, ``distance``, ``krum_score``, ``selected``).

    Server state (with ``relative_to``): ``server_optimizer`` (``ortckpt.FedAdam(...)`` etc.),
    ``adaptive_clipping`` and ``privacy``, as ``ortckpt.Round`` takes them: the state is read from
    ``relative_to``'s checkpoint and the new one written into the result (``report.server`` says
    what the round did).
    """
    rnd = Round(
        reference,
        method=method,
        include_optimizer_state=include_optimizer_state,
        max_bytes=max_bytes,
        storage_options=storage_options,
        trim=trim,
        byzantine=byzantine,
        keep=keep,
        relative_to=relative_to,
        clip_norm=clip_norm,
        noise_multiplier=noise_multiplier,
        seed=seed,
        chunk_bytes=chunk_bytes,
        server_optimizer=server_optimizer,
        adaptive_clipping=adaptive_clipping,
        privacy=privacy,
    )
    items = _items(sources, weights)
    total = len(sources) if isinstance(sources, (Sequence, Mapping)) else None
    if engine is not None:
        from ._dask import average_on_dask

        return average_on_dask(engine, rnd, list(items), out, progress)
    bar = progress_bar(items, enabled=progress, desc="averaging", total=total, unit="upload")
    rnd._extend(bar, ahead=max(1, min(4, os.cpu_count() or 1)))
    return rnd.result(out)
