"""Central differential privacy across rounds: adaptive clipping (Andrew et al., "Differentially
Private Learning with Adaptive Clipping", 2021, with Flower 1.42's parameters) and the privacy
spent so far (an accountant of the ``dp-accounting`` library, ``pip install 'ortckpt[privacy]'``).

Both are descriptions (frozen, validated); their state between rounds (the current clipping
norm, the rounds accounted) lives in the global checkpoint (``_server_state``).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ._server_opt import _finite

ACCOUNTANTS = ("rdp", "pld")


@dataclass(frozen=True)
class AdaptiveClipping:
    """Server-side adaptive clipping: each round clips every update to the current norm C, then
    moves C towards the ``target_quantile`` of the updates' norms:
    ``C *= exp(-clip_norm_lr * (b - target_quantile))``, ``b`` the share of updates whose norm is
    at most C (unclipped), counted with Gaussian noise of standard deviation
    ``clipped_count_stddev`` (default ``num_sampled_clients / 20``). With a ``noise_multiplier``
    z, the model's noise uses ``z_eff = (z**-2 - (2 * clipped_count_stddev)**-2) ** -0.5``, so that
    the round as a whole is as private as the Gaussian mechanism with z (Flower's
    ``compute_adaptive_noise_params``).

    ``count``: ``"unclipped"`` (the default: Andrew et al., "Differentially Private Learning with
    Adaptive Clipping", NeurIPS 2021: the norm settles where ``target_quantile`` of the updates are
    unclipped) or ``"clipped"``: Flower 1.42's ``DifferentialPrivacyServerSideAdaptiveClipping``,
    which takes the same parameters (``target_clipped_quantile``) but counts the clipped updates in
    the same formula, so that its norm moves away from the target — chosen to reproduce a Flower
    run exactly (the tests compare both against Flower: equal norms bit for bit with
    ``"clipped"`` always, and with ``"unclipped"`` when half the updates are clipped;
    docs/federated.md)."""

    num_sampled_clients: int
    initial_clipping_norm: float = 0.1
    target_quantile: float = 0.5
    clip_norm_lr: float = 0.2
    clipped_count_stddev: float | None = None
    count: str = "unclipped"

    def __post_init__(self) -> None:
        if self.count not in ("unclipped", "clipped"):
            raise ValueError(
                f"count must be 'unclipped' (the paper's rule) or 'clipped' (Flower's); got {self.count!r}"
            )
        n = self.num_sampled_clients
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ValueError(f"num_sampled_clients must be a whole number > 0; got {n!r}")
        _finite("initial_clipping_norm", self.initial_clipping_norm, low=0.0, open_low=True)
        _finite("target_quantile", self.target_quantile, low=0.0, high=math.nextafter(1.0, 2.0))
        _finite("clip_norm_lr", self.clip_norm_lr, low=0.0, open_low=True)
        if self.clipped_count_stddev is not None:
            _finite("clipped_count_stddev", self.clipped_count_stddev, low=0.0)

    def options(self) -> dict[str, Any]:
        return asdict(self)

    def count_stddev(self, noise_multiplier: float) -> float:
        """The standard deviation of the noise on the count (0 without model noise, unless given)."""
        if self.clipped_count_stddev is not None:
            return float(self.clipped_count_stddev)
        return self.num_sampled_clients / 20 if noise_multiplier > 0 else 0.0

    def model_noise(self, noise_multiplier: float) -> float:
        """The noise multiplier of the model's noise, so that the round spends ``noise_multiplier``."""
        if noise_multiplier <= 0:
            return 0.0
        stddev = self.count_stddev(noise_multiplier)
        if noise_multiplier >= 2 * stddev:
            raise ValueError(
                f"noise_multiplier {noise_multiplier!r} needs clipped_count_stddev > "
                f"{noise_multiplier / 2!r} (it is {stddev!r}; by default num_sampled_clients / 20): "
                "raise clipped_count_stddev or num_sampled_clients, or lower the noise"
            )
        return float((noise_multiplier ** (-2) - (2 * stddev) ** (-2)) ** -0.5)

    def next_norm(
        self, norm: float, unclipped: int, total: int, noise_multiplier: float, seed: int | None
    ) -> float:
        """The clipping norm of the next round, from this round's count of unclipped updates (or,
        with ``count="clipped"``, of the clipped ones, as Flower 1.42 counts)."""
        stddev = self.count_stddev(noise_multiplier)
        counted = unclipped if self.count == "unclipped" else total - unclipped
        count = float(np.random.RandomState(seed).normal(counted, stddev)) if stddev > 0 else float(counted)
        return norm * math.exp(-self.clip_norm_lr * (count / float(total) - self.target_quantile))


def round_seed(seed: int, server_round: int, purpose: str, bits: int = 63) -> int:
    """The seed of round ``server_round``'s ``purpose`` ("model" noise or "count" noise) in a run
    seeded with ``seed``: a BLAKE2b hash, so that no two rounds or purposes share a stream."""
    digest = hashlib.blake2b(f"ortckpt:{purpose}:{seed}:{server_round}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> (64 - bits)


@dataclass(frozen=True)
class PrivacyAccountant:
    """The privacy spent so far, as ε at ``delta``: every round with noise is a Gaussian mechanism
    with the round's noise multiplier (with adaptive clipping, the one asked for), Poisson-sampled
    with ``sampling_rate`` (the share of the population a round samples; 1.0: everyone),
    composed by ``dp-accounting``'s ``rdp`` (RdpAccountant) or ``pld`` (PLDAccountant)."""

    delta: float
    sampling_rate: float = 1.0
    accountant: str = "rdp"

    def __post_init__(self) -> None:
        _finite("delta", self.delta, low=0.0, high=1.0, open_low=True)
        _finite("sampling_rate", self.sampling_rate, low=0.0, high=math.nextafter(1.0, 2.0), open_low=True)
        if self.accountant not in ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {', '.join(ACCOUNTANTS)}; got {self.accountant!r}")

    def options(self) -> dict[str, Any]:
        return asdict(self)

    def epsilon(self, ledger: list[tuple[float, float, int]]) -> float:
        """ε spent by the rounds of ``ledger`` (runs of (sampling rate, noise multiplier, rounds))."""
        try:
            import dp_accounting
        except ImportError:
            raise ImportError(
                "privacy accounting needs dp-accounting: pip install 'ortckpt[privacy]'"
            ) from None
        if self.accountant == "rdp":
            acc: Any = dp_accounting.rdp.RdpAccountant()
        else:
            acc = dp_accounting.pld.PLDAccountant()
        for rate, z, count in ledger:
            event: Any = dp_accounting.GaussianDpEvent(z)
            if rate < 1.0:
                event = dp_accounting.PoissonSampledDpEvent(rate, event)
            acc.compose(event, count)
        return float(acc.get_epsilon(self.delta))


def add_to_ledger(
    ledger: list[tuple[float, float, int]], rate: float, z: float
) -> list[tuple[float, float, int]]:
    """``ledger`` with one more round (runs of equal rounds kept as one entry)."""
    if ledger and ledger[-1][:2] == (rate, z):
        return [*ledger[:-1], (rate, z, ledger[-1][2] + 1)]
    return [*ledger, (rate, z, 1)]
