"""Adaptive clipping against Flower's ``DifferentialPrivacyServerSideAdaptiveClipping`` and the
privacy accountant against ``dp-accounting``'s own computation, across rounds and restarts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ortckpt
from ortckpt.federated._privacy import round_seed
from tests.helpers.server_rounds import SHAPES, initial_model, with_update_norms

pytest.importorskip("flwr.serverapp.strategy", reason="needs flwr (the oracle)")
from flwr.app import MetricRecord, RecordDict
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping, FedAvg

from ortckpt.flower import to_arrayrecord
from tests.federated.test_flower import _reply

dp_accounting = pytest.importorskip("dp_accounting", reason="needs dp-accounting (ortckpt[privacy])")

# half of the updates far below any norm the runs reach, half far above: half clipped every round
NORMS = [0.001, 0.002, 50.0, 80.0]


def _flower_round(
    dp: DifferentialPrivacyServerSideAdaptiveClipping,
    t: int,
    start: ortckpt.CheckpointState,
    seed: int,
    norms: list[float] = NORMS,
) -> None:
    dp.current_arrays = to_arrayrecord(start, trainable_only=True)  # what its configure_train does
    replies = [
        _reply(
            i + 1,
            RecordDict(
                {
                    "arrays": to_arrayrecord(u, trainable_only=True),
                    "metrics": MetricRecord({"num-examples": 1}),
                }
            ),
        )
        for i, u in enumerate(with_update_norms(start, norms, seed=t))
    ]
    np.random.seed(round_seed(seed, t, "count", bits=32))  # Flower draws the count's noise first
    dp.aggregate_train(t, replies)


@pytest.mark.parametrize("noise", [0.0, 0.3])
@pytest.mark.parametrize("target", [0.2, 0.5, 0.9])
def test_adaptive_clipping_norms_equal_flowers(noise: float, target: float) -> None:
    """Six rounds; with noise on the count, Flower's numpy draws seeded with the round's count seed."""
    seed = 11
    clipping = ortckpt.AdaptiveClipping(
        4, initial_clipping_norm=1.0, target_quantile=target, clip_norm_lr=0.3
    )
    dp = DifferentialPrivacyServerSideAdaptiveClipping(
        FedAvg(), noise, 4, initial_clipping_norm=1.0, target_clipped_quantile=target, clip_norm_lr=0.3
    )
    glob = initial_model()
    flower_start = initial_model()
    norms = []
    for t in range(1, 7):
        report = ortckpt.average(
            with_update_norms(glob, NORMS, seed=t),
            relative_to=glob,
            adaptive_clipping=clipping,
            noise_multiplier=noise or None,
            seed=seed,
        )
        assert report.server is not None
        assert report.server.unclipped == 2
        if noise:  # the model's noise multiplier: Flower's compute_adaptive_noise_params
            assert report.server.noise_multiplier == dp.noise_multiplier
        _flower_round(dp, t, flower_start, seed)
        assert report.server.next_clipping_norm == dp.clipping_norm, t  # bit for bit
        norms.append(dp.clipping_norm)
        glob = report.state
        assert ortckpt.server_state(glob).clipping_norm == dp.clipping_norm
    assert len(set(norms)) == 6 or target == 0.5  # the norm moved every round (unless at the target)


@pytest.mark.parametrize("noise", [0.0, 0.3])
@pytest.mark.parametrize("target", [0.2, 0.5, 0.9])
def test_counting_the_clipped_updates_reproduces_a_flower_run(noise: float, target: float) -> None:
    """``count="clipped"``: Flower 1.42's rule, bit for bit over six rounds whatever share of the
    updates is clipped (norms 1..4 from a norm of 0.5: every round but the first clips some)."""
    seed, norms = 5, [1.0, 2.0, 3.0, 4.0]
    clipping = ortckpt.AdaptiveClipping(
        4, initial_clipping_norm=0.5, target_quantile=target, clip_norm_lr=0.3, count="clipped"
    )
    dp = DifferentialPrivacyServerSideAdaptiveClipping(
        FedAvg(), noise, 4, initial_clipping_norm=0.5, target_clipped_quantile=target, clip_norm_lr=0.3
    )
    glob, flower_start = initial_model(), initial_model()
    seen = []
    for t in range(1, 7):
        report = ortckpt.average(
            with_update_norms(glob, norms, seed=t),
            relative_to=glob,
            adaptive_clipping=clipping,
            noise_multiplier=noise or None,
            seed=seed,
        )
        assert report.server is not None
        _flower_round(dp, t, flower_start, seed, norms)
        assert report.server.next_clipping_norm == dp.clipping_norm, t  # bit for bit
        seen.append(report.server.unclipped)
        glob = report.state
    assert any(u != 2 for u in seen), seen  # not only the half-clipped case, where both rules agree
    with pytest.raises(ValueError, match="count must be"):
        ortckpt.AdaptiveClipping(4, count="both")


def test_the_norm_moves_to_the_target_quantile_where_flowers_moves_away() -> None:
    """Updates of norms 1, 2, 3, 4 and a target of 0.5: the norm settles between 2 and 3 (half the
    updates unclipped); Flower 1.42 counts the clipped ones, and its norm runs away from them."""
    clipping = ortckpt.AdaptiveClipping(4, initial_clipping_norm=0.5, target_quantile=0.5, clip_norm_lr=0.5)
    dp = DifferentialPrivacyServerSideAdaptiveClipping(
        FedAvg(), 0.0, 4, initial_clipping_norm=0.5, clip_norm_lr=0.5
    )
    glob = initial_model()
    for t in range(1, 16):
        report = ortckpt.average(
            with_update_norms(glob, [1.0, 2.0, 3.0, 4.0], seed=t),
            relative_to=glob,
            adaptive_clipping=clipping,
        )
        glob = report.state
        _flower_round(dp, t, initial_model(), 0, [1.0, 2.0, 3.0, 4.0])
    norm = ortckpt.server_state(glob).clipping_norm
    assert norm is not None and 1.8 < norm < 3.2, norm
    assert dp.clipping_norm < 0.05, dp.clipping_norm  # exp(-0.25) a round, down from 0.5


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_epsilon_equals_dp_accountings_own_and_resumes_across_restarts(
    accountant: str, tmp_path: Path
) -> None:
    privacy = ortckpt.PrivacyAccountant(delta=1e-5, sampling_rate=0.05, accountant=accountant)
    glob_path = tmp_path / "global.ckpt"
    ortckpt.save(initial_model(), glob_path)
    z = 1.1
    for t in range(1, 5):  # every round a separate call from the file: a restart each time
        glob = ortckpt.load(glob_path)
        uploads = with_update_norms(glob, [0.5, 1.5, 2.5, 3.5], seed=t)
        report = ortckpt.average(
            uploads,
            tmp_path / "next.ckpt",
            relative_to=glob_path,
            clip_norm=1.0,
            noise_multiplier=z,
            seed=3,
            privacy=privacy,
        )
        (tmp_path / "next.ckpt").replace(glob_path)
        own = dp_accounting.rdp.RdpAccountant() if accountant == "rdp" else dp_accounting.pld.PLDAccountant()
        own.compose(dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.GaussianDpEvent(z)), t)
        assert report.server is not None and report.server.epsilon == own.get_epsilon(1e-5)
        assert report.server.delta == 1e-5
        saved = ortckpt.server_state(ortckpt.load(glob_path))
        assert saved.epsilon == report.server.epsilon and saved.ledger == [(0.05, z, t)] and saved.round == t


def test_adaptive_clipping_accounts_the_noise_asked_for() -> None:
    """With adaptive clipping the model gets z_eff > z, the count the rest: the round spends z."""
    privacy = ortckpt.PrivacyAccountant(delta=1e-6)
    report = ortckpt.average(
        with_update_norms(initial_model(), [0.5, 1.5, 2.5, 3.5], seed=1),
        relative_to=initial_model(),
        adaptive_clipping=ortckpt.AdaptiveClipping(40),
        noise_multiplier=0.8,
        seed=1,
        privacy=privacy,
    )
    assert report.server is not None
    own = dp_accounting.rdp.RdpAccountant()
    own.compose(dp_accounting.GaussianDpEvent(0.8), 1)
    assert report.server.epsilon == own.get_epsilon(1e-6)
    assert report.server.noise_multiplier is not None and report.server.noise_multiplier > 0.8


def test_seeded_rounds_draw_other_noise_every_round_and_the_same_on_a_rerun() -> None:
    glob = initial_model()
    uploads = with_update_norms(glob, [0.5, 1.5, 2.5, 3.5], seed=1)
    kw = {
        "relative_to": glob,
        "clip_norm": 1.0,
        "noise_multiplier": 0.5,
        "seed": 9,
        "server_optimizer": ortckpt.FedAvgM(),
    }
    first = ortckpt.average(uploads, **kw).state
    again = ortckpt.average(uploads, **kw).state
    assert ortckpt.serialize(first) == ortckpt.serialize(again)
    later = ortckpt.average(
        with_update_norms(first, [0.5, 1.5, 2.5, 3.5], seed=1), **{**kw, "relative_to": first}
    ).state
    noise_1 = first.parameters["fc.weight"].data - glob.parameters["fc.weight"].data
    noise_2 = later.parameters["fc.weight"].data - first.parameters["fc.weight"].data
    assert not np.allclose(noise_1, noise_2)
    assert set(SHAPES) <= set(later.parameters)
