"""A real Dask cluster for the tests, started and stopped by each test that needs one.

Import it after ``pytest.importorskip("distributed")``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import distributed


@contextmanager
def loopback_client(n_workers: int, threads_per_worker: int) -> Iterator[distributed.Client]:
    """A client of a ``distributed.LocalCluster`` whose workers run in this process and talk TCP on
    127.0.0.1 only: the real scheduler and transport, nothing off the machine. The scheduler's
    HTTP server takes a free loopback port (with no address it would take 8787, and fail when
    another cluster on the machine holds it)."""
    with (
        distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            processes=False,
            protocol="tcp://",
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@contextmanager
def process_cluster(
    n_workers: int, threads_per_worker: int = 1, memory_limit: str | int = 0
) -> Iterator[distributed.Client]:
    """A client of a ``distributed.LocalCluster`` of worker *processes* on 127.0.0.1 (what a
    cluster of machines is, short of the network): every upload descriptor and partial result
    crosses a process boundary, pickled, as it would between machines."""
    with (
        distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            processes=True,
            protocol="tcp://",
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            memory_limit=memory_limit,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
