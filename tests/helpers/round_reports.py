"""Comparing rounds: every field of each upload's report, and a hook run when a round is asked
for its result (after every upload was added, before anything is read again)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ortckpt
from ortckpt.federated import _round as round_module

REPORT_FIELDS = (
    "client",
    "accepted",
    "kind",
    "reason",
    "weight",
    "norm",
    "clipped",
    "distance",
    "krum_score",
    "selected",
)


def report_rows(report: ortckpt.AggregationReport) -> list[tuple[Any, ...]]:
    """Each upload's report, every field."""
    return [tuple(getattr(r, f) for f in REPORT_FIELDS) for r in report.sources]


def before_result(monkeypatch: pytest.MonkeyPatch, hook: Callable[[], None]) -> None:
    """``hook()`` runs whenever a ``Round`` (``average``'s too) is asked for its result."""
    result = round_module.Round.result

    def hooked(self: Any, *args: Any, **kwargs: Any) -> Any:
        hook()
        return result(self, *args, **kwargs)

    monkeypatch.setattr(round_module.Round, "result", hooked)
