"""``average(..., engine=client)``: the same checks and sums on a Dask ``distributed`` cluster.

Uploads are split into batches (about four per worker thread); each batch is one task that loads,
checks and sums its uploads with ``_fedavg.visit_batch`` where the worker runs (paths must be on
storage the workers share, or URLs). The partial sums are then added in a tree of
``merge_batches`` tasks (``FAN_IN`` at a time), so no node ever holds more than ``FAN_IN`` partial
sums, and only the final one travels back to the client.
"""

from __future__ import annotations

import math
from typing import Any

from ._fedavg import ModelSpec, PartialSum, SourceReport, merge_batches, visit_batch
from ._progress import progress as progress_bar

FAN_IN = 4
BATCHES_PER_THREAD = 4


def _threads(client: Any) -> int:
    try:
        workers = client.scheduler_info()["workers"]
        return max(1, sum(int(w.get("nthreads", 1)) for w in workers.values()))
    except (KeyError, AttributeError, TypeError):
        return 1


def average_on_dask(
    client: Any,
    items: list[tuple[int, str, Any, float | str | None]],
    spec: ModelSpec,
    max_bytes: int | None,
    storage_options: Any,
    show_progress: bool,
) -> tuple[PartialSum, list[SourceReport]]:
    if not hasattr(client, "map") or not hasattr(client, "submit"):
        raise TypeError(f"engine must be a dask.distributed.Client, got {type(client).__name__}")
    if not items:
        return PartialSum(), []
    size = max(1, math.ceil(len(items) / (_threads(client) * BATCHES_PER_THREAD)))
    batches = [items[i : i + size] for i in range(0, len(items), size)]
    futures = client.map(
        visit_batch, batches, spec=spec, max_bytes=max_bytes, storage_options=storage_options, pure=False
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
    acc, reports = futures[0].result()
    return acc, list(reports)
