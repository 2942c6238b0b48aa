"""``ortckpt average``: validated federated averaging of device checkpoints."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, TextIO

from ._format import JsonValue
from ._output import emit

if TYPE_CHECKING:
    from ..aggregate import AggregationReport


def _report_json(report: AggregationReport, written: bool) -> dict[str, JsonValue]:
    sources: list[JsonValue] = [
        {
            "client": s.client,
            "accepted": s.accepted,
            "weight": s.weight,
            "kind": s.kind,
            "reason": s.reason,
            "norm": s.norm,
            "clipped": s.clipped,
            "distance": s.distance,
            "krum_score": s.krum_score,
            "selected": s.selected,
        }
        for s in report.sources
    ]
    return {
        "output": report.output if written else None,
        "method": report.method,
        "reference": report.reference,
        "accepted": len(report.accepted),
        "rejected": len(report.rejected),
        "total_weight": report.total_weight,
        "sources": sources,
    }


def run_average(args: argparse.Namespace, out: TextIO) -> int:
    from .._sources import expand
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
            method=args.method,
            trim=args.trim,
            byzantine=args.byzantine,
            keep=args.keep,
            relative_to=args.relative_to,
            clip_norm=args.clip_norm,
            noise_multiplier=args.noise_multiplier,
            seed=args.seed,
            chunk_bytes=args.chunk_bytes,
        )
    except AggregationError as exc:
        failed = exc.report
        why = str(exc).split(":\n", 1)[0]  # no upload accepted, too few for the method, an overflow
        lines = [failed.summary(), f"nothing written: {why}"]
        emit(args, out, _report_json(failed, written=False), lines)
        return 2
    emit(args, out, _report_json(report, written=True), [report.summary()])
    return 0
