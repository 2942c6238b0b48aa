"""``OrtFedOpt``: ``OrtFedAvg`` with a server that keeps state in its global checkpoint — a
server optimizer (FedAvgM, FedAdagrad, FedAdam, FedYogi), adaptive clipping, privacy accounting —
so that a ServerApp restarted from the last saved global checkpoint resumes the run exactly."""

from __future__ import annotations

from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord

from ..._sources import open_state
from ..._types import CheckpointSource
from ...io import serialize
from ...state import CheckpointState
from .._privacy import AdaptiveClipping, PrivacyAccountant
from .._server_opt import ServerOptimizer
from .._server_state import server_state, strip_server_state, with_server_state
from ._strategy import OrtFedAvg

_OWN = ("relative_to", "server_optimizer", "adaptive_clipping", "privacy")


class OrtFedOpt(OrtFedAvg):
    """``OrtFedAvg`` whose rounds step the global model with ``server_optimizer`` (an
    ``ortckpt.FedAdam(...)`` etc.; None: the aggregate as it is), clip with ``adaptive_clipping``
    and account the privacy spent with ``privacy`` (``ortckpt.AdaptiveClipping`` /
    ``ortckpt.PrivacyAccountant``; noise and seed go in ``average_options``, e.g.
    ``{"noise_multiplier": 1.0, "seed": 7}``), for any ``method``.

    ``initial`` is where the run starts: a checkpoint without server state (a new run), or the
    global checkpoint a previous ServerApp saved (``on_round``'s ``report.state``, which carries the
    state): the run goes on from the round it holds (``ortckpt.server_state(initial).round``;
    Flower numbers the rounds of ``start`` from 1 again, the state does not). Devices get the
    global checkpoint without the server's state (``ortckpt.strip_server_state``: ORT 1.19.2
    trains the same with it, but saves it back into their uploads). The other arguments are
    ``OrtFedAvg``'s.
    """

    def __init__(
        self,
        initial: CheckpointSource,
        *,
        server_optimizer: ServerOptimizer | None = None,
        adaptive_clipping: AdaptiveClipping | None = None,
        privacy: PrivacyAccountant | None = None,
        **ortfedavg_options: Any,
    ) -> None:
        super().__init__(initial, **ortfedavg_options)
        for reserved in _OWN:
            if reserved in self.average_options:
                raise ValueError(f"average_options cannot set {reserved!r}: OrtFedOpt sets it")
        self.server_options: dict[str, Any] = {
            "server_optimizer": server_optimizer,
            "adaptive_clipping": adaptive_clipping,
            "privacy": privacy,
        }
        self._options = dict(self.average_options)
        # a private copy with the server state (OrtFedAvg keeps no optimizer state)
        self.global_state = open_state(serialize(open_state(initial), include_optimizer_state=True))
        server_state(self.global_state)  # a malformed saved state fails here, not in round 1

    def payload_record(self, state: CheckpointState | None = None) -> ArrayRecord:
        """OrtFedAvg's payload of the global checkpoint without the server's state."""
        return super().payload_record(strip_server_state(self.global_state if state is None else state))

    def _adopt(self, arrays: ArrayRecord, config: ConfigRecord) -> ArrayRecord:
        """The round's global model is the arrays Flower passes, with the state the server keeps."""
        kept = server_state(self.global_state)
        record = super()._adopt(arrays, config)
        self.global_state = with_server_state(self.global_state, kept)
        return record

    def aggregate_train(
        self, server_round: int, replies: Any
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """OrtFedAvg's validation and aggregation, relative to the global model, with the server
        state: the new global checkpoint (``global_state``, ``on_round``'s report) carries it."""
        self.average_options = {**self._options, "relative_to": self.global_state, **self.server_options}
        try:
            return super().aggregate_train(server_round, replies)
        finally:
            self.average_options = dict(self._options)

    @property
    def server_round(self) -> int:
        """The server rounds the global checkpoint holds (over every ServerApp of the run)."""
        return server_state(self.global_state).round
