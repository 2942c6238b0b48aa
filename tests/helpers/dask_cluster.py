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
    127.0.0.1 only (no dashboard): the real scheduler and transport, nothing off the machine."""
    with (
        distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            processes=False,
            protocol="tcp://",
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
