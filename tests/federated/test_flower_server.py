"""``OrtFedOpt``: OrtFedAvg with a server optimizer whose state rides in the global checkpoint; a
strategy made again from a saved global checkpoint goes on as if it had never stopped."""

from __future__ import annotations

import pytest

import ortckpt
from tests.helpers.server_rounds import initial_model, trained, updates

pytest.importorskip("flwr.serverapp.strategy", reason="needs flwr (ortckpt[flower])")
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from ortckpt.flower import OrtFedOpt, checkpoint_bytes, checkpoint_record, to_arrayrecord
from tests.federated.test_flower import _reply

OPTIMIZER = ortckpt.FedAdam(eta=0.05)


def _round(strategy: OrtFedOpt, t: int) -> None:
    payload = strategy._adopt(to_arrayrecord(strategy.global_state), ConfigRecord())
    start = ortckpt.load_bytes(checkpoint_bytes(payload))  # what a device gets
    assert start.optimizer is None and not any(k.startswith("ortckpt.server") for k in start.properties)
    replies = [
        _reply(
            i + 1,
            RecordDict(
                {
                    "arrays": checkpoint_record(ortckpt.serialize(trained(start, u, 10))),
                    "metrics": MetricRecord({"num-examples": 10 * (i + 1)}),
                }
            ),
        )
        for i, u in enumerate(updates(t))
    ]
    replies.append(
        _reply(
            9,
            RecordDict({"arrays": checkpoint_record(b"junk"), "metrics": MetricRecord({"num-examples": 1})}),
        )
    )
    arrays, _ = strategy.aggregate_train(t, replies)
    assert arrays is not None and [r.kind for r in strategy.round_reports[t].rejected] == ["unreadable"]


def test_a_restarted_strategy_resumes_exactly() -> None:
    straight = OrtFedOpt(initial_model(), server_optimizer=OPTIMIZER)
    for t in (1, 2, 3):
        _round(straight, t)
    assert straight.server_round == 3

    first = OrtFedOpt(initial_model(), server_optimizer=OPTIMIZER)
    for t in (1, 2):
        _round(first, t)
    saved = ortckpt.serialize(first.round_reports[2].state)  # what on_round's caller saves
    again = OrtFedOpt(saved, server_optimizer=OPTIMIZER)
    assert again.server_round == 2
    _round(again, 3)
    assert ortckpt.serialize(again.global_state) == ortckpt.serialize(straight.global_state)
    state = ortckpt.server_state(again.global_state)
    assert state.round == 3 and state.optimizer == OPTIMIZER


def test_options_the_strategy_sets_and_states_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="relative_to"):
        OrtFedOpt(initial_model(), average_options={"relative_to": initial_model()})
    broken = ortckpt.load_bytes(ortckpt.serialize(initial_model()))
    broken.properties["ortckpt.server.optimizer"] = "fedadam"
    with pytest.raises(ortckpt.ServerStateError):
        OrtFedOpt(broken, server_optimizer=OPTIMIZER)
