"""``OrtFedAvg``: Flower's Message-API FedAvg for ONNX Runtime devices.

Flower's own ``FedAvg.aggregate_train`` first checks that every reply has the same ArrayRecord
keys and a weight, and raises (ending the round) if one does not; one bad device stops everyone.
Here every reply is decoded on its own (a whole checkpoint's bytes, or named tensors), validated
by ``ortckpt.average`` against the round's global checkpoint, and a bad reply is dropped and
reported while the others are aggregated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from logging import WARNING
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from flwr.supercore import log

from ..._sources import open_state
from ..._types import CheckpointSource
from ...deploy._buffers import parameters_from_buffer, parameters_to_buffer
from ...errors import AggregationError, CheckpointError, TensorDataError
from ...formats.conversions import to_nominal
from ...io import serialize
from ...state import CheckpointState
from .._uploads import weight_problem
from ..aggregate import AggregationReport, average
from ._records import (
    BUFFER_KEY,
    CHECKPOINT_KEY,
    buffer_record,
    buffer_values,
    checkpoint_bytes,
    checkpoint_record,
    from_arrayrecord,
    to_arrayrecord,
)

#: What the server sends devices each round (``OrtFedAvg(payload=...)``).
PAYLOADS = ("checkpoint", "checkpoint-v1", "nominal+buffer", "arrays")
#: The ConfigRecord key telling devices which payload the round's ArrayRecord holds.
PAYLOAD_CONFIG_KEY = "ortckpt-payload"


@dataclass
class Rejection:
    """A reply left out of a round: its node, what was wrong (``kind``) and why."""

    node_id: int
    client: str
    kind: str
    reason: str


@dataclass
class RoundReport:
    """What ``OrtFedAvg.aggregate_train`` did in one round."""

    server_round: int
    accepted: list[str] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    aggregation: AggregationReport | None = None
    #: why the round gave no aggregate (None when it gave one): no reply accepted, fewer accepted
    #: than the method needs, or an aggregate that overflows; the global model then stays
    failure: str | None = None

    @property
    def state(self) -> CheckpointState | None:
        """The round's aggregate (None when no reply was accepted)."""
        return self.aggregation.state if self.aggregation is not None else None


def _client(msg: Message, index: int, seen: set[str]) -> str:
    """A reply's name in reports: its node, and its position when the node replied twice."""
    client = f"node {msg.metadata.src_node_id}"
    if client in seen:
        client = f"{client} (reply #{index})"
    seen.add(client)
    return client


class OrtFedAvg(FedAvg):
    """Flower's ``FedAvg`` (Message API) whose clients are ONNX Runtime devices.

    ``initial``: the checkpoint training starts from (a state, bytes or path); it is the first
    round's reference and the template of every round's checkpoint (trainable flags, frozen
    parameters, properties). ``initial_arrays()`` gives the ``ArrayRecord`` to pass to
    ``start(initial_arrays=...)``; the arrays ``start`` passes around are the global model's named
    tensors (``to_arrayrecord``), so ``evaluate_fn`` and ``Result.arrays`` work as with FedAvg.

    Each round the devices get, under ``arrayrecord_key``: ``payload="checkpoint"`` the global
    checkpoint's bytes (``checkpoint_record``, for ``CheckpointState.load_checkpoint`` on the
    device), ``"checkpoint-v1"`` the same as a format-version-1 file (ORT 1.16-1.17 devices),
    ``"nominal+buffer"`` the nominal checkpoint (structure, no values) and every parameter as one
    flat float32 buffer (``buffer_record``; the device loads the nominal checkpoint and calls
    ``Module.copy_buffer_to_parameters(buffer, trainable_only=False)``; needs ``training_model``),
    or ``"arrays"`` named tensors; the ConfigRecord's ``"ortckpt-payload"`` says which.

    Replies carry, under ``arrayrecord_key``, a checkpoint (``checkpoint_record``), a flat
    parameter buffer (``buffer_record`` of ``Module.get_contiguous_parameters()``, trainable only
    or all parameters, told apart by length; needs ``training_model``, the ``training_model.onnx``
    of ``generate_artifacts``) or named tensors (``to_arrayrecord``, frozen parameters optional),
    and a ``MetricRecord`` with the weight under ``weighted_by_key`` (``to_metricrecord``).

    Every reply is decoded and checked against the round's global checkpoint by
    ``ortckpt.average(method=method, **average_options)`` (any method: fedavg, median,
    trimmed_mean, krum, multi_krum, bulyan; options such as ``clip_norm`` or ``byzantine``). A
    reply that fails (malformed, not a checkpoint, other names, dtypes or shapes, NaN/inf, no
    usable weight, a Flower error) is left out and reported in ``round_reports[server_round]`` and
    the log, never ending the round. A round that gives no aggregate (no reply accepted, fewer
    than the method needs, an aggregate that overflows) returns ``(None, None)`` with a warning,
    as Flower's own strategies do when they cannot aggregate; ``RoundReport.failure`` says why
    and the global model stays. The options are checked here, when the strategy is built.
    Evaluation replies without exactly one MetricRecord holding a
    usable weight are dropped the same way (``evaluate_reports``). ``on_round`` is called with
    each ``RoundReport``. The other arguments are FedAvg's.
    """

    def __init__(
        self,
        initial: CheckpointSource,
        *,
        method: str = "fedavg",
        average_options: Mapping[str, Any] | None = None,
        payload: str = "checkpoint",
        training_model: Any = None,
        on_round: Callable[[RoundReport], None] | None = None,
        **fedavg_options: Any,
    ) -> None:
        super().__init__(**fedavg_options)
        if payload not in PAYLOADS:
            raise ValueError(f"payload must be one of {', '.join(PAYLOADS)}, not {payload!r}")
        options = dict(average_options or {})
        for reserved in ("sources", "out", "weights", "reference"):
            if reserved in options:
                raise ValueError(f"average_options cannot set {reserved!r}: the strategy sets it")
        try:  # every option checked now, not in every round (an empty round checks them all)
            average([], method=method, **options)
        except AggregationError:
            pass  # valid options: only the empty round failed
        self.method = method
        self.average_options = options
        if payload == "nominal+buffer" and training_model is None:
            raise ValueError("payload 'nominal+buffer' needs training_model (the training_model.onnx)")
        self.payload = payload
        self.training_model = training_model
        self.on_round = on_round
        # a private copy: a mapped file changed during training cannot change the template
        self.global_state: CheckpointState = open_state(
            serialize(open_state(initial), include_optimizer_state=False)
        )
        self.round_reports: dict[int, RoundReport] = {}
        self.evaluate_reports: dict[int, RoundReport] = {}

    # -- what the devices get ---------------------------------------------------------------------

    def initial_arrays(self) -> ArrayRecord:
        """The global model's named tensors, for ``start(initial_arrays=...)``."""
        return to_arrayrecord(self.global_state)

    def payload_record(self, state: CheckpointState | None = None) -> ArrayRecord:
        """The ArrayRecord devices get for ``state`` (default: the global checkpoint)."""
        state = self.global_state if state is None else state
        if self.payload == "arrays":
            return to_arrayrecord(state)
        if self.payload == "nominal+buffer":
            nominal = serialize(to_nominal(state), include_optimizer_state=False)
            return buffer_record(
                parameters_to_buffer(state, self.training_model, trainable_only=False), nominal
            )
        version = 1 if self.payload == "checkpoint-v1" else 2
        return checkpoint_record(serialize(state, include_optimizer_state=False, format_version=version))

    def nominal_checkpoint(self) -> bytes:
        """The global checkpoint's structure without values (``ortckpt.to_nominal``)."""
        return serialize(to_nominal(self.global_state), include_optimizer_state=False)

    def _adopt(self, arrays: ArrayRecord, config: ConfigRecord) -> ArrayRecord:
        """The payload for the global model ``arrays``: start() hands back the arrays it got from
        aggregate_train (or the initial ones), the model this round starts from."""
        self.global_state = from_arrayrecord(arrays, self.global_state)
        config[PAYLOAD_CONFIG_KEY] = self.payload
        return self.payload_record()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """FedAvg's sampling, with the round's payload (``payload``) in the messages."""
        return super().configure_train(server_round, self._adopt(arrays, config), config, grid)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """FedAvg's sampling, with the global model as the round's payload."""
        return super().configure_evaluate(server_round, self._adopt(arrays, config), config, grid)

    # -- what comes back --------------------------------------------------------------------------

    def _decode(self, content: RecordDict) -> CheckpointState | bytes:
        record = content.array_records.get(self.arrayrecord_key)
        if record is None:
            raise CheckpointError(f"the reply has no ArrayRecord {self.arrayrecord_key!r}")
        if CHECKPOINT_KEY in record:
            return checkpoint_bytes(record)
        if BUFFER_KEY in record:
            return self._from_buffer(record)
        return from_arrayrecord(record, self.global_state)

    def _from_buffer(self, record: ArrayRecord) -> CheckpointState:
        if self.training_model is None:
            raise CheckpointError(
                "a parameter buffer arrived, but the strategy has no training_model to decode it"
            )
        values = buffer_values(record)
        try:  # trainable parameters only (ORT's copy_buffer_to_parameters default), or all of them
            return parameters_from_buffer(values, self.global_state, self.training_model, trainable_only=True)
        except TensorDataError as first:
            try:
                return parameters_from_buffer(
                    values, self.global_state, self.training_model, trainable_only=False
                )
            except TensorDataError:
                raise first from None

    def _weight(self, content: RecordDict) -> float:
        for metrics in content.metric_records.values():
            if self.weighted_by_key in metrics:
                value = metrics[self.weighted_by_key]
                problem = weight_problem(value)
                if problem is not None:
                    raise ValueError(f"weight {self.weighted_by_key!r} = {value!r} {problem}")
                return float(value)  # type: ignore[arg-type]  # a real number: weight_problem said so
        raise ValueError(f"the reply has no MetricRecord with the weight {self.weighted_by_key!r}")

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Decode and validate every reply, drop and report the bad ones, aggregate the rest."""
        report = RoundReport(server_round)
        sources: dict[str, CheckpointState | bytes] = {}
        weights: dict[str, float] = {}
        contents: dict[str, RecordDict] = {}
        nodes: dict[str, int] = {}
        seen: set[str] = set()
        for index, msg in enumerate(replies):
            client, node = _client(msg, index, seen), msg.metadata.src_node_id
            if msg.has_error():
                report.rejected.append(Rejection(node, client, "error", str(msg.error.reason)))
                continue
            try:
                source = self._decode(msg.content)
            except (CheckpointError, ValueError, TypeError) as exc:
                report.rejected.append(Rejection(node, client, "malformed", str(exc)))
                continue
            try:
                weight = self._weight(msg.content)
            except ValueError as exc:
                report.rejected.append(Rejection(node, client, "weight", str(exc)))
                continue
            sources[client], weights[client], contents[client], nodes[client] = (
                source,
                weight,
                msg.content,
                node,
            )
        try:
            aggregation = average(
                sources,
                weights=weights,
                reference=self.global_state,
                method=self.method,
                **self.average_options,
            )
        except AggregationError as exc:
            # no aggregate this round, as Flower's own strategies answer when they cannot
            # aggregate (Bulyan with too few replies): (None, None), a warning, the run goes on
            aggregation = exc.report
            report.failure = str(exc).split(":\n", 1)[0]
        for s in aggregation.sources:
            if s.accepted:
                report.accepted.append(s.client)
            else:
                report.rejected.append(
                    Rejection(nodes[s.client], s.client, s.kind or "rejected", s.reason or "")
                )
        self.round_reports[server_round] = report
        for r in report.rejected:
            log(WARNING, "round %s: reply of %s rejected (%s): %s", server_round, r.client, r.kind, r.reason)
        if report.failure is not None:
            log(WARNING, "round %s: no aggregate, the global model stays: %s", server_round, report.failure)
            if self.on_round is not None:
                self.on_round(report)
            return None, None
        report.aggregation = aggregation
        self.global_state = aggregation.state
        if self.on_round is not None:
            self.on_round(report)
        metrics = self._metrics(
            self.train_metrics_aggr_fn, [contents[c] for c in report.accepted], server_round
        )
        return to_arrayrecord(self.global_state), metrics

    def _metrics(
        self,
        aggregate: Callable[[list[RecordDict], str], MetricRecord],
        contents: list[RecordDict],
        server_round: int,
    ) -> MetricRecord | None:
        """FedAvg's metric aggregation; metrics that do not add up (lists of other lengths, the weight
        in a second MetricRecord) lose the round its metrics, never its model."""
        try:
            return aggregate(contents, self.weighted_by_key)
        except (ValueError, TypeError, KeyError) as exc:
            log(WARNING, "round %s: the replies' metrics could not be aggregated: %s", server_round, exc)
            return None

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """FedAvg's weighted mean of the evaluation metrics over the replies with exactly one
        MetricRecord holding a usable weight; the others are dropped and reported in
        ``evaluate_reports[server_round]`` (Flower's own FedAvg ends the round on them)."""
        report = RoundReport(server_round)
        good: list[RecordDict] = []
        seen: set[str] = set()
        for index, msg in enumerate(replies):
            client, node = _client(msg, index, seen), msg.metadata.src_node_id
            if msg.has_error():
                report.rejected.append(Rejection(node, client, "error", str(msg.error.reason)))
                continue
            if len(msg.content.metric_records) != 1:
                reason = f"{len(msg.content.metric_records)} MetricRecords where FedAvg reads exactly one"
                report.rejected.append(Rejection(node, client, "malformed", reason))
                continue
            try:
                self._weight(msg.content)
            except ValueError as exc:
                report.rejected.append(Rejection(node, client, "weight", str(exc)))
                continue
            report.accepted.append(client)
            good.append(msg.content)
        self.evaluate_reports[server_round] = report
        for r in report.rejected:
            log(
                WARNING,
                "round %s: evaluation reply of %s rejected (%s): %s",
                server_round,
                r.client,
                r.kind,
                r.reason,
            )
        return self._metrics(self.evaluate_metrics_aggr_fn, good, server_round) if good else None
