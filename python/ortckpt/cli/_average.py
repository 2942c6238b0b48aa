"""``ortckpt average``: validated federated averaging of device checkpoints."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any, TextIO

from ._format import JsonValue
from ._output import emit

if TYPE_CHECKING:
    from ..federated._server_state import ServerState
    from ..federated.aggregate import AggregationReport

#: each flag's option name, per part of the server state
_OPTIMIZER_FLAGS = ("eta", "eta_l", "beta_1", "beta_2", "tau", "server_learning_rate", "server_momentum")
_CLIPPING_FLAGS = ("initial_clipping_norm", "target_quantile", "clip_norm_lr", "clipped_count_stddev")


def _given(args: argparse.Namespace, names: tuple[str, ...], saved: dict[str, Any]) -> dict[str, Any]:
    """The options given as flags, over those saved (flags omitted keep the saved values)."""
    given = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    return {**saved, **given}


def _server_options(args: argparse.Namespace) -> dict[str, Any]:
    """``server_optimizer``, ``adaptive_clipping`` and ``privacy`` from the flags and GLOBAL's state."""
    from .._sources import open_state
    from ..federated._privacy import AdaptiveClipping, PrivacyAccountant
    from ..federated._server_opt import OPTIMIZERS
    from ..federated._server_state import server_state

    wanted = args.server_optimizer or args.adaptive_clipping is not None or args.dp_delta is not None
    if not wanted:
        return {}
    if args.relative_to is None:
        raise ValueError("--server-optimizer, --adaptive-clipping and --dp-delta need --relative-to GLOBAL")
    saved: ServerState = server_state(open_state(args.relative_to))
    out: dict[str, Any] = {}
    if args.server_optimizer:
        cls = OPTIMIZERS[args.server_optimizer]
        kept = (
            saved.optimizer.options()
            if saved.optimizer is not None and saved.optimizer.name == cls.name
            else {}
        )
        names = tuple(n for n in _OPTIMIZER_FLAGS if n in cls.__dataclass_fields__ and n in cls().options())
        stray = [n for n in _OPTIMIZER_FLAGS if n not in names and getattr(args, n) is not None]
        if stray:
            raise ValueError(f"--{stray[0].replace('_', '-')} is not an option of {cls.name}")
        out["server_optimizer"] = cls(**_given(args, names, kept))
    if args.adaptive_clipping is not None:
        kept = saved.clipping.options() if saved.clipping is not None else {}
        kept.pop("num_sampled_clients", None)
        out["adaptive_clipping"] = AdaptiveClipping(
            args.adaptive_clipping, **_given(args, _CLIPPING_FLAGS, kept)
        )
    if args.dp_delta is not None:
        kept = saved.privacy.options() if saved.privacy is not None else {}
        options = {**kept, "delta": args.dp_delta}
        options.update(
            {
                k: v
                for k, v in (("sampling_rate", args.sampling_rate), ("accountant", args.accountant))
                if v is not None
            }
        )
        out["privacy"] = PrivacyAccountant(**options)
    return out


def _server_json(report: AggregationReport) -> JsonValue:
    s = report.server
    if s is None:
        return None
    return {
        "round": s.round,
        "optimizer": s.optimizer,
        "clipping_norm": s.clipping_norm,
        "next_clipping_norm": s.next_clipping_norm,
        "unclipped": s.unclipped,
        "noise_multiplier": s.noise_multiplier,
        "epsilon": s.epsilon,
        "delta": s.delta,
    }


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
        "server": _server_json(report),
        "sources": sources,
    }


def run_average(args: argparse.Namespace, out: TextIO) -> int:
    from .._sources import expand
    from ..federated.aggregate import (  # imported on use: the other commands start faster
        AggregationError,
        average,
    )

    dest = os.fsdecode(args.out)
    sources = [url for s in args.sources for url in expand(os.fsdecode(s))]
    server = _server_options(args)  # a ValueError (flags that do not fit) is reported by main
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
            **server,
        )
    except AggregationError as exc:
        failed = exc.report
        # no upload accepted, too few for the method, an overflow
        why = str(exc).split(":\n", 1)[0].removeprefix("no aggregate: ")
        lines = [failed.summary(), f"nothing written: {why}"]
        emit(args, out, _report_json(failed, written=False), lines)
        return 2
    emit(args, out, _report_json(report, written=True), [report.summary()])
    return 0
