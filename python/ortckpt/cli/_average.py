"""``ortckpt average``: validated federated averaging of device checkpoints."""

from __future__ import annotations

import argparse
import os
from typing import TextIO


def run_average(args: argparse.Namespace, out: TextIO) -> int:
    from .._remote import expand
    from ..aggregate import AggregationError, average  # imported on use: the other commands start faster

    dest = os.fsdecode(args.out)
    sources = [url for s in args.sources for url in expand(os.fsdecode(s))]
    try:
        report = average(
            sources,
            dest,
            weights=args.weights_property,
            reference=args.reference,
            include_optimizer_state=args.include_optimizer_state,
            max_bytes=args.max_bytes,
            progress=True,  # a bar on a terminal only
        )
    except AggregationError as exc:
        print(exc.report.summary(), file=out)
        print("nothing written: no upload could be averaged", file=out)
        return 2
    print(report.summary(), file=out)
    return 0
