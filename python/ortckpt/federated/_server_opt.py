"""Server optimizers (Reddi et al., "Adaptive Federated Optimization", 2021) as Flower 1.42
defines them (``flwr.serverapp.strategy.FedAvgM`` / ``FedAdagrad`` / ``FedAdam`` / ``FedYogi``):
the same parameters, defaults and update rules, applied to the aggregated update
``delta = aggregate - global`` of any aggregation method.

Each optimizer is a frozen, validated description (its hyperparameters); ``step`` is one server
round on one tensor, in float64: ``step(x, agg, moments, t)`` with ``x`` the global model's
values, ``agg`` the round's aggregate (``delta = agg - x``), ``moments`` the tensor's state from
the previous rounds (empty in the first) and ``t`` the server round being made (1 for the
first). It returns the new values (float64; the caller rounds them once to the tensor's dtype)
and the new moments (float64).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

Array = np.ndarray[Any, np.dtype[np.float64]]

#: momentum names of the server's optimizer group (ORT's AdamW names its first and second moments
#: the same way): m_t (FedAvgM's momentum vector) and v_t
FIRST, SECOND = "momentum0", "momentum1"


def _finite(name: str, value: Any, *, low: float, high: float | None = None, open_low: bool = False) -> float:
    """A float option in [low, high) (or (low, high) with ``open_low``); ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number; got {value!r}")
    number = float(value)
    above = number > low if open_low else number >= low
    if not (math.isfinite(number) and above and (high is None or number < high)):
        low_side = f"{'>' if open_low else '>='} {low:g}"
        rule = f"{low_side} and < {high:g}" if high is not None else low_side
        raise ValueError(f"{name} must be a finite number {rule}; got {value!r}")
    return number


@dataclass(frozen=True)
class ServerOptimizer:
    """What every server optimizer has: a ``name`` (saved in the checkpoint) and its options."""

    name: ClassVar[str] = ""

    def options(self) -> dict[str, float]:
        """The hyperparameters, as saved in the checkpoint (property ``ortckpt.server.optimizer_options``)."""
        return {k: float(v) for k, v in asdict(self).items()}

    @property
    def learning_rate(self) -> float:
        """The server learning rate (the group's initial learning rate in the checkpoint)."""
        raise NotImplementedError

    def moments(self) -> tuple[str, ...]:
        """The momentum names this optimizer keeps per parameter."""
        raise NotImplementedError

    def step(self, x: Array, agg: Array, moments: dict[str, Array], t: int) -> tuple[Array, dict[str, Array]]:
        raise NotImplementedError


@dataclass(frozen=True)
class FedAvgM(ServerOptimizer):
    """FedAvg with server momentum (Hsu et al. 2019), as Flower's ``FedAvgM``: the pseudo-gradient
    ``g = global - aggregate``; with ``server_momentum`` > 0, ``m = g`` in the first round and
    ``m = server_momentum * m + g`` after; the new model ``global - server_learning_rate * m``
    (``g`` without momentum). With Flower's defaults (1.0, 0.0) it is plain aggregation."""

    name: ClassVar[str] = "fedavgm"
    server_learning_rate: float = 1.0
    server_momentum: float = 0.0

    def __post_init__(self) -> None:
        _finite("server_learning_rate", self.server_learning_rate, low=0.0, open_low=True)
        _finite("server_momentum", self.server_momentum, low=0.0, high=1.0)

    @property
    def learning_rate(self) -> float:
        return self.server_learning_rate

    def moments(self) -> tuple[str, ...]:
        return (FIRST,) if self.server_momentum > 0.0 else ()

    def step(self, x: Array, agg: Array, moments: dict[str, Array], t: int) -> tuple[Array, dict[str, Array]]:
        if self.server_momentum == 0.0 and self.server_learning_rate == 1.0:
            return agg, {}  # Flower's server_opt is off: the aggregate as it is
        g = x - agg
        if self.server_momentum > 0.0:
            g = g if FIRST not in moments else self.server_momentum * moments[FIRST] + g
            moments = {FIRST: g}
        return x - self.server_learning_rate * g, moments


@dataclass(frozen=True)
class _FedOpt(ServerOptimizer):
    """Flower's ``FedOpt`` family: ``m = beta_1 * m + (1 - beta_1) * delta`` (m starts at 0), a
    second moment ``v`` (each subclass's rule, v starts at 0), and the new model
    ``global + eta * m / (sqrt(v) + tau)``. ``eta_l`` (the devices' learning rate) is recorded,
    never used by the server, as in Flower."""

    eta: float = 1e-1
    eta_l: float = 1e-1
    beta_1: float = 0.0
    beta_2: float = 0.0
    tau: float = 1e-3

    def __post_init__(self) -> None:
        _finite("eta", self.eta, low=0.0, open_low=True)
        _finite("eta_l", self.eta_l, low=0.0)
        _finite("beta_1", self.beta_1, low=0.0, high=1.0)
        _finite("beta_2", self.beta_2, low=0.0, high=1.0)
        _finite("tau", self.tau, low=0.0, open_low=True)

    @property
    def learning_rate(self) -> float:
        return self.eta

    def moments(self) -> tuple[str, ...]:
        return (FIRST, SECOND)

    def _second(self, v: Array, delta: Array) -> Array:
        raise NotImplementedError

    def _rate(self, t: int) -> float:
        return self.eta

    def step(self, x: Array, agg: Array, moments: dict[str, Array], t: int) -> tuple[Array, dict[str, Array]]:
        delta = agg - x
        m = moments.get(FIRST)
        m = (1.0 - self.beta_1) * delta if m is None else self.beta_1 * m + (1.0 - self.beta_1) * delta
        v = moments.get(SECOND)
        v = self._second(np.zeros_like(delta) if v is None else v, delta)
        return x + self._rate(t) * m / (np.sqrt(v) + self.tau), {FIRST: m, SECOND: v}


@dataclass(frozen=True)
class FedAdagrad(_FedOpt):
    """Flower's ``FedAdagrad``: ``m = delta``, ``v = v + delta**2``."""

    name: ClassVar[str] = "fedadagrad"
    beta_1: float = field(default=0.0, init=False)
    beta_2: float = field(default=0.0, init=False)

    def options(self) -> dict[str, float]:
        return {"eta": self.eta, "eta_l": self.eta_l, "tau": self.tau}

    def _second(self, v: Array, delta: Array) -> Array:
        return v + delta**2


@dataclass(frozen=True)
class FedAdam(_FedOpt):
    """Flower's ``FedAdam``: ``v = beta_2 * v + (1 - beta_2) * delta**2`` and the bias-corrected
    rate ``eta * sqrt(1 - beta_2 ** (t + 1)) / (1 - beta_1 ** (t + 1))`` in round t (Flower's
    exponent is the server round + 1, where Adam's paper has the step)."""

    name: ClassVar[str] = "fedadam"
    beta_1: float = 0.9
    beta_2: float = 0.99

    def _second(self, v: Array, delta: Array) -> Array:
        return self.beta_2 * v + (1.0 - self.beta_2) * delta**2

    def _rate(self, t: int) -> float:
        return float(self.eta * math.sqrt(1.0 - self.beta_2 ** (t + 1.0)) / (1.0 - self.beta_1 ** (t + 1.0)))


@dataclass(frozen=True)
class FedYogi(_FedOpt):
    """Flower's ``FedYogi``: ``v = v - (1 - beta_2) * delta**2 * sign(v - delta**2)``."""

    name: ClassVar[str] = "fedyogi"
    eta: float = 1e-2
    eta_l: float = 0.0316
    beta_1: float = 0.9
    beta_2: float = 0.99

    def _second(self, v: Array, delta: Array) -> Array:
        square = delta**2
        return v - (1.0 - self.beta_2) * square * np.sign(v - square)


OPTIMIZERS: dict[str, type[ServerOptimizer]] = {
    cls.name: cls for cls in (FedAvgM, FedAdagrad, FedAdam, FedYogi)
}


def optimizer_from(name: str, options: dict[str, Any]) -> ServerOptimizer:
    """The optimizer ``name`` with ``options`` (ValueError for an unknown name or option)."""
    cls = OPTIMIZERS.get(name)
    if cls is None:
        raise ValueError(f"server optimizer must be one of {', '.join(OPTIMIZERS)}; got {name!r}")
    try:
        return cls(**options)
    except TypeError as exc:  # an option the optimizer does not have
        raise ValueError(f"server optimizer {name}: {exc}") from None
