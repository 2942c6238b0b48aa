"""What a round says: one ``SourceReport`` per upload, and the ``AggregationReport`` of the round."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..state import CheckpointState
    from ._server_round import ServerReport


@dataclass(frozen=True)
class SourceReport:
    """The verdict on one upload: accepted with a weight, or rejected with a reason."""

    index: int
    client: str
    accepted: bool
    weight: float | None = None
    kind: str | None = None  # rejection kind: "unreadable", "too-large", "dtype", ... (docs/federated.md)
    reason: str | None = None
    # diagnostics of the robust methods and update hygiene (None on the plain FedAvg path)
    norm: float | None = None  # L2 norm of the update (of the values, without relative_to), before clipping
    clipped: bool | None = None  # scaled down to clip_norm
    distance: float | None = None  # L2 distance of the (clipped) update to the aggregate, before noise
    krum_score: float | None = None  # krum / multi_krum / bulyan: sum of the n - f - 2 smallest distances
    selected: bool | None = None  # krum / multi_krum / bulyan: among the uploads the method kept
    staleness: int | None = None  # global-model versions the upload is behind (Round.add's staleness)


@dataclass
class AggregationReport:
    """What a round did: one ``SourceReport`` per upload, in input order, and the result."""

    output: str | None
    reference: str
    sources: list[SourceReport]
    total_weight: float
    state: CheckpointState
    engine: str
    method: str = "fedavg"
    server: ServerReport | None = None  # rounds with server state: optimizer, clipping norm, privacy

    @property
    def accepted(self) -> list[SourceReport]:
        return [s for s in self.sources if s.accepted]

    @property
    def rejected(self) -> list[SourceReport]:
        return [s for s in self.sources if not s.accepted]

    def summary(self) -> str:
        """A plain-text table: counts, then every rejected upload with its reason."""
        lines = [
            f"accepted {len(self.accepted)} of {len(self.sources)} uploads "
            f"(total weight {self.total_weight:g}; reference {self.reference})"
        ]
        rejected = self.rejected
        if rejected:
            # at least as wide as the headers, so that short client names still line up
            width = max(len("client"), *(len(s.client) for s in rejected))
            kind_width = max(len("problem"), *(len(s.kind or "") for s in rejected))
            lines.append(f"rejected {len(rejected)}:")
            lines.append(f"  {'client':<{width}}  {'problem':<{kind_width}}  reason")
            for s in rejected:
                lines.append(f"  {s.client:<{width}}  {s.kind or '':<{kind_width}}  {s.reason}")
        if self.server is not None:
            lines.append(self.server.summary())
        if self.output is not None:
            lines.append(f"wrote {self.output}")
        return "\n".join(lines)
