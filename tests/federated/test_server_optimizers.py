"""Server optimizers (FedAvgM, FedAdagrad, FedAdam, FedYogi) against Flower's own strategies, their
state in the global checkpoint, and what they refuse.

The oracle: Flower 1.42's ``flwr.serverapp.strategy`` classes, driven through ``aggregate_train``
on the same replies for six rounds (``current_arrays`` set as their ``configure_train`` sets it).
Flower computes in the arrays' dtype (float32, and float64 for FedAdam from round 2, where its
bias-corrected rate is a numpy float64) and keeps its global model unrounded; ortckpt computes in
float64 and rounds the global model to float32 every round, as it saves it. The models agree
within a few float32 units in the last place (asserted: 5e-6 absolute on values of order 1;
measured 0.5-1.4e-6).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt.federated._server_state import GROUP, OPTIMIZER_OPTIONS, ROUND
from tests.helpers.server_rounds import SHAPES, initial_model, trained, updates

pytest.importorskip("flwr.serverapp.strategy", reason="needs flwr (the oracle)")
from flwr.app import ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp import strategy as flower

from ortckpt.flower import to_arrayrecord
from tests.federated.test_flower import _reply

ROUNDS = 6
WEIGHTS = [10, 30, 20, 40]
CASES = {
    "fedavgm": (
        ortckpt.FedAvgM(server_learning_rate=0.7, server_momentum=0.9),
        flower.FedAvgM,
        {"server_learning_rate": 0.7, "server_momentum": 0.9},
    ),
    "fedadagrad": (ortckpt.FedAdagrad(eta=0.05, tau=1e-2), flower.FedAdagrad, {"eta": 0.05, "tau": 1e-2}),
    "fedadam": (ortckpt.FedAdam(), flower.FedAdam, {}),
    "fedyogi": (ortckpt.FedYogi(eta=0.03), flower.FedYogi, {"eta": 0.03}),
}


def _flower_round(
    strategy: Any, t: int, current: ArrayRecord, uploads: list[ortckpt.CheckpointState]
) -> ArrayRecord:
    if isinstance(strategy, flower.FedAvgM):
        if strategy.current_arrays is None:  # what FedAvgM.configure_train does
            strategy.current_arrays = current
    else:  # what FedOpt.configure_train does
        strategy.current_arrays = {k: a.numpy() for k, a in current.items()}
    replies = [
        _reply(
            i + 1,
            RecordDict(
                {
                    "arrays": to_arrayrecord(u, trainable_only=True),
                    "metrics": MetricRecord({"num-examples": w}),
                }
            ),
        )
        for i, (u, w) in enumerate(zip(uploads, WEIGHTS, strict=True))
    ]
    arrays, _ = strategy.aggregate_train(t, replies)
    assert arrays is not None
    return arrays


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_optimizer_equals_flowers_over_six_rounds(name: str) -> None:
    ours, flower_cls, flower_options = CASES[name]
    strategy = flower_cls(**flower_options)
    start = initial_model()
    theirs = to_arrayrecord(start, trainable_only=True)
    glob = start
    worst = 0.0
    for t in range(1, ROUNDS + 1):
        ups = updates(t)
        ours_uploads = [trained(glob, u, w) for u, w in zip(ups, WEIGHTS, strict=True)]
        flower_start = ortckpt.CheckpointState(
            {k: theirs[k].numpy().astype(np.float32) for k in SHAPES},
            frozen={"scale": np.ones(3, np.float32)},
        )
        theirs = _flower_round(
            strategy, t, theirs, [trained(flower_start, u, w) for u, w in zip(ups, WEIGHTS, strict=True)]
        )
        report = ortckpt.average(ours_uploads, weights=WEIGHTS, relative_to=glob, server_optimizer=ours)
        glob = report.state
        assert report.server is not None and report.server.round == t and report.server.optimizer == name
        for k in SHAPES:
            diff = np.abs(glob.parameters[k].data.astype(np.float64) - theirs[k].numpy().astype(np.float64))
            worst = max(worst, float(diff.max()))
        # the state: step = rounds, the moments as Flower holds them
        group = glob.optimizer[GROUP]
        assert group.step == t == glob.properties[ROUND]
        assert json.loads(glob.properties[OPTIMIZER_OPTIONS]) == ours.options()
        flower_moments = (
            {"momentum0": dict(zip(theirs.keys(), strategy.momentum_vector, strict=True))}
            if name == "fedavgm"
            else {"momentum0": strategy.m_t, "momentum1": strategy.v_t}
        )
        for momentum, per_param in flower_moments.items():
            for k in SHAPES:
                np.testing.assert_allclose(group.states[k][momentum], per_param[k], rtol=2e-3, atol=1e-6)
    print(f"{name}: largest difference to Flower after {ROUNDS} rounds {worst:.3g}")
    assert worst < 5e-6


def test_the_optimizer_steps_on_any_methods_aggregate() -> None:
    """median + FedAdam: the step Flower's rule makes from the median's aggregate."""
    start = initial_model()
    uploads = [trained(start, u, 10) for u in updates(1, count=5)]
    plain = ortckpt.average(uploads, method="median", relative_to=start).state
    report = ortckpt.average(
        uploads, method="median", relative_to=start, server_optimizer=ortckpt.FedAdam(eta=0.2)
    )
    for k in SHAPES:
        x = start.parameters[k].data.astype(np.float64)
        delta = plain.parameters[k].data.astype(np.float64) - x
        m, v = 0.1 * delta, 0.01 * delta**2
        rate = 0.2 * np.sqrt(1 - 0.99**2) / (1 - 0.9**2)
        expected = x + rate * m / (np.sqrt(v) + 1e-3)
        np.testing.assert_allclose(report.state.parameters[k].data, expected, rtol=1e-6, atol=1e-6)
    assert report.state.parameters["scale"].trainable is False


def test_load_and_one_call_resumes(tmp_path: Any) -> None:
    """The saved global checkpoint is the whole server: two rounds in a row equal a restart from file."""
    opt = ortckpt.FedYogi()
    start = initial_model()
    first = ortckpt.average(
        [trained(start, u, 1) for u in updates(1)],
        tmp_path / "g1.ckpt",
        relative_to=start,
        server_optimizer=opt,
    )
    second = ortckpt.average(
        [trained(first.state, u, 1) for u in updates(2)], relative_to=first.state, server_optimizer=opt
    )
    loaded = ortckpt.load(tmp_path / "g1.ckpt")
    rnd = ortckpt.Round(relative_to=tmp_path / "g1.ckpt", server_optimizer=opt)
    for u in updates(2):
        rnd.add(trained(loaded, u, 1))
    again = rnd.result()
    assert ortckpt.serialize(again.state) == ortckpt.serialize(second.state)
    state = ortckpt.server_state(again.state)
    assert state.round == 2 and state.optimizer == opt and set(state.moments) == set(SHAPES)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ortckpt.FedAdam(eta=float("nan")), "eta"),
        (lambda: ortckpt.FedAdam(eta=-0.1), "eta"),
        (lambda: ortckpt.FedAdam(eta=float("inf")), "eta"),
        (lambda: ortckpt.FedAdam(beta_1=1.0), "beta_1"),
        (lambda: ortckpt.FedAdam(beta_2=-0.01), "beta_2"),
        (lambda: ortckpt.FedYogi(beta_2=float("nan")), "beta_2"),
        (lambda: ortckpt.FedAdagrad(tau=0.0), "tau"),
        (lambda: ortckpt.FedAdam(eta_l=-1.0), "eta_l"),
        (lambda: ortckpt.FedAvgM(server_learning_rate=0.0), "server_learning_rate"),
        (lambda: ortckpt.FedAvgM(server_momentum=1.5), "server_momentum"),
        (lambda: ortckpt.FedAvgM(server_momentum=True), "server_momentum"),
        (lambda: ortckpt.AdaptiveClipping(0), "num_sampled_clients"),
        (lambda: ortckpt.AdaptiveClipping(4, initial_clipping_norm=-1.0), "initial_clipping_norm"),
        (lambda: ortckpt.AdaptiveClipping(4, target_quantile=1.5), "target_quantile"),
        (lambda: ortckpt.AdaptiveClipping(4, clip_norm_lr=float("nan")), "clip_norm_lr"),
        (lambda: ortckpt.AdaptiveClipping(4, clipped_count_stddev=-1.0), "clipped_count_stddev"),
        (lambda: ortckpt.PrivacyAccountant(delta=0.0), "delta"),
        (lambda: ortckpt.PrivacyAccountant(delta=1e-5, sampling_rate=2.0), "sampling_rate"),
        (lambda: ortckpt.PrivacyAccountant(delta=1e-5, accountant="moments"), "accountant"),
    ],
)
def test_hostile_options_are_value_errors(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_rounds_that_cannot_keep_state_are_refused() -> None:
    start = initial_model()
    with pytest.raises(ValueError, match="relative_to"):
        ortckpt.Round(server_optimizer=ortckpt.FedAdam())
    with pytest.raises(TypeError, match=r"FedAdam|ServerOptimizer"):
        ortckpt.Round(relative_to=start, server_optimizer="fedadam")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exclude"):
        ortckpt.Round(relative_to=start, clip_norm=1.0, adaptive_clipping=ortckpt.AdaptiveClipping(4))
    with pytest.raises(ValueError, match="noise"):
        ortckpt.Round(relative_to=start, clip_norm=1.0, privacy=ortckpt.PrivacyAccountant(1e-5))
    with pytest.raises(ValueError, match="clipped_count_stddev"):  # Flower's rule: z < 2 * stddev
        ortckpt.Round(relative_to=start, noise_multiplier=1.0, adaptive_clipping=ortckpt.AdaptiveClipping(4))
    saved = ortckpt.average(
        [trained(start, u, 1) for u in updates(1)], relative_to=start, server_optimizer=ortckpt.FedAdam()
    ).state
    with pytest.raises(ValueError, match="eta"):  # other settings than the state was made with
        ortckpt.Round(relative_to=saved, server_optimizer=ortckpt.FedAdam(eta=0.5))
    with pytest.raises(ValueError, match="FedYogi"):
        ortckpt.Round(relative_to=saved, server_optimizer=ortckpt.FedYogi())
    with pytest.raises(ValueError, match="server state"):  # the state would be lost silently
        ortckpt.Round(relative_to=saved)
    ortckpt.Round(relative_to=ortckpt.strip_server_state(saved))  # ... unless left on purpose


def _saved() -> ortckpt.CheckpointState:
    start = initial_model()
    return ortckpt.average(
        [trained(start, u, 1) for u in updates(1)], relative_to=start, server_optimizer=ortckpt.FedAdam()
    ).state


def _forge(change: Any) -> ortckpt.CheckpointState:
    state = ortckpt.load_bytes(ortckpt.serialize(_saved()))
    change(state)
    return ortckpt.load_bytes(ortckpt.serialize(state))


def _moment(name: str, value: Any) -> Any:
    def change(state: ortckpt.CheckpointState) -> None:
        state.optimizer[GROUP].states[name] = {"momentum0": value, "momentum1": value}

    return change


def _prop(name: str, value: Any) -> Any:
    def change(state: ortckpt.CheckpointState) -> None:
        state.properties[name] = value

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_moment("fc.weight", np.zeros((4, 6))), "momentum fc.weight"),
        (_moment("fc.weight", np.zeros((6, 4), np.float32)), "float64"),
        (_moment("fc.weight", np.full((6, 4), np.nan)), "not finite"),
        (_moment("scale", np.zeros(3)), "not a trainable parameter"),
        (_moment("ghost", np.zeros(3)), "not a trainable parameter"),
        (lambda s: s.optimizer[GROUP].states.pop("fc.bias"), "no moments for trainable parameter"),
        (lambda s: setattr(s.optimizer[GROUP], "step", 7), "step"),
        (lambda s: s.optimizer.pop(GROUP), "without optimizer group"),
        (_prop(ROUND, -3), "round"),
        (_prop(OPTIMIZER_OPTIONS, "{not json"), "JSON"),
        (_prop(OPTIMIZER_OPTIONS, '{"eta": -1}'), "eta"),
        (_prop(OPTIMIZER_OPTIONS, '{"rho": 1}'), "rho"),
        (_prop("ortckpt.server.optimizer", "sgd"), "sgd"),
        (_prop("ortckpt.server.optimizer", 3), "not a string"),
        (_prop("ortckpt.server.clipping_norm", "nan"), "clipping"),
        (_prop("ortckpt.server.epsilon", "-1"), "epsilon"),
        (_prop("ortckpt.server.privacy", '{"delta": 1e-5, "rounds": [[2, 1, 1]]}'), "round"),
        (_prop("ortckpt.server.privacy", '{"delta": 1e-5, "rounds": [[1, 1, 99]]}'), "more rounds"),
    ],
)
def test_a_saved_state_that_does_not_match_is_a_server_state_error(change: Any, message: str) -> None:
    forged = _forge(change)
    with pytest.raises(ortckpt.ServerStateError, match=message):
        ortckpt.server_state(forged)
    with pytest.raises(ortckpt.ServerStateError):
        ortckpt.Round(relative_to=forged, server_optimizer=ortckpt.FedAdam())
    assert isinstance(ortckpt.ServerStateError("x"), ortckpt.CheckpointError)


def test_devices_get_no_server_state_and_uploads_may_carry_it() -> None:
    saved = _saved()
    device = ortckpt.strip_server_state(saved)
    assert device.optimizer is None and not any(k.startswith("ortckpt.server") for k in device.properties)
    assert ortckpt.server_state(device).empty
    # an ORT device that saves its optimizer state sends the server's group back (tests/ort): the
    # round ignores it, and the result carries the server's new state only
    uploads = [trained(saved, u, 1) for u in updates(2)]
    for u in uploads:
        u.optimizer = saved.optimizer
        u.properties.update(saved.properties)
    out = ortckpt.average(
        uploads, relative_to=saved, server_optimizer=ortckpt.FedAdam(), include_optimizer_state=True
    )
    assert out.server is not None and out.server.round == 2
    assert list(out.state.optimizer) == [GROUP] and out.state.optimizer[GROUP].step == 2


def test_complex_parameters_are_refused_by_the_optimizers() -> None:
    state = ortckpt.CheckpointState({"z": np.ones(3, np.complex64)})
    with pytest.raises(ValueError, match="real parameters"):
        ortckpt.Round(relative_to=state, server_optimizer=ortckpt.FedAvgM())
