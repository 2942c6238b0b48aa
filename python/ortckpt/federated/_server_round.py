"""One round of a server that keeps state: the server optimizer, adaptive clipping and the privacy
accountant, around the round's aggregate.

``ServerRound`` is made from the global checkpoint the round starts from (``relative_to``): it
reads the saved state, checks that the round's settings are the ones the state was made with (a
run resumes exactly or not at all), gives the core its clipping norm, noise multiplier and seed for
this round, and after the aggregation turns the aggregate into the new global model and state.

Seeds: with ``seed``, server round t's model noise and count noise come from (seed, t), so a round
run again after a crash draws the same noise; without it, from the operating system.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..state import CheckpointState
from ._privacy import AdaptiveClipping, PrivacyAccountant, add_to_ledger, round_seed
from ._reference import ModelSpec
from ._server_opt import ServerOptimizer
from ._server_state import ServerState, server_state


@dataclass(frozen=True)
class ServerReport:
    """What a round with server state did (``AggregationReport.server``)."""

    round: int  # the server round this one was (1 for the first)
    optimizer: str | None  # the server optimizer's name
    clipping_norm: float | None  # the clipping norm the updates were clipped to
    next_clipping_norm: float | None  # adaptive clipping: the norm of the next round
    unclipped: int | None  # adaptive clipping: the updates whose norm was at most clipping_norm
    noise_multiplier: float | None  # the noise multiplier of the model's noise
    epsilon: float | None  # privacy spent so far (this round included) at delta
    delta: float | None

    def summary(self) -> str:
        parts = [f"server round {self.round}"]
        if self.optimizer is not None:
            parts.append(f"optimizer {self.optimizer}")
        if self.clipping_norm is not None:
            after = f" (next {self.next_clipping_norm:.6g})" if self.next_clipping_norm is not None else ""
            parts.append(f"clipping norm {self.clipping_norm:.6g}{after}")
        if self.epsilon is not None:
            parts.append(f"privacy spent: epsilon {self.epsilon:.6g} at delta {self.delta:g}")
        return "; ".join(parts)


def _mismatch(what: str, saved: Any, given: Any) -> ValueError:
    return ValueError(
        f"the global checkpoint's server state was made with {what} {saved!r}, this round asks for "
        f"{given!r}: pass the same settings to resume the run (or start a new run from "
        "ortckpt.strip_server_state(global))"
    )


def _same(what: str, saved: Any, given: Any) -> None:
    if saved is None and given is None:
        return
    if saved is None:
        return  # a fresh start of this part of the state: nothing saved yet
    if given is None:
        raise _mismatch(what, saved, None)
    if saved != given:
        raise _mismatch(what, saved, given)


class ServerRound:
    """The server state around one round (see the module note)."""

    def __init__(
        self,
        global_state: CheckpointState,
        optimizer: ServerOptimizer | None,
        clipping: AdaptiveClipping | None,
        privacy: PrivacyAccountant | None,
        options: dict[str, Any],
    ) -> None:
        for name, value, cls in (
            ("server_optimizer", optimizer, ServerOptimizer),
            ("adaptive_clipping", clipping, AdaptiveClipping),
            ("privacy", privacy, PrivacyAccountant),
        ):
            if value is not None and not isinstance(value, cls):
                raise TypeError(f"{name} must be an ortckpt.{cls.__name__}, got {type(value).__name__}")
        saved = server_state(global_state)
        if saved.round > 0:
            _same("server optimizer", saved.optimizer, optimizer)
            _same("adaptive clipping", saved.clipping, clipping)
            _same("privacy accountant", saved.privacy, privacy)
        z = options["noise_multiplier"] or 0.0
        if clipping is not None and options["clip_norm"] is not None:
            raise ValueError(
                "clip_norm and adaptive_clipping exclude each other: adaptive clipping sets the norm"
            )
        if privacy is not None and z <= 0:
            raise ValueError("privacy accounting needs noise: give noise_multiplier > 0")
        if optimizer is not None:
            for name, p in global_state.parameters.items():
                if p.trainable and p.data.dtype.kind == "c":
                    raise ValueError(f"server optimizers need real parameters; {name!r} is {p.data.dtype}")
        self.global_state = global_state
        self.saved = saved
        self.optimizer, self.clipping, self.privacy = optimizer, clipping, privacy
        self.round = saved.round + 1
        self.noise_multiplier = z
        self.norm = None if clipping is None else saved.clipping_norm or clipping.initial_clipping_norm
        self.seed = options["seed"]
        core = dict(options)
        if clipping is not None:
            core["clip_norm"] = self.norm
            core["noise_multiplier"] = clipping.model_noise(z) if z > 0 else None
        if self.seed is not None:
            core["seed"] = round_seed(self.seed, self.round, "model")
        self.core_options = core

    def _step(self, values: list[Any], spec: ModelSpec) -> dict[str, Any]:
        """The optimizer's step on the parameters' slots of ``values`` (one float64 array per slot,
        trainable parameters first: in place); the new moments."""
        optimizer = self.optimizer
        assert optimizer is not None
        moments: dict[str, Any] = {}
        for slot, name in enumerate(spec.averaged):
            param = self.global_state.parameters[name]
            x = np.asarray(param.data, dtype=np.float64).reshape(-1)
            saved = {
                k: np.asarray(v, np.float64).reshape(-1) for k, v in self.saved.moments.get(name, {}).items()
            }
            new, kept = optimizer.step(x, values[slot], saved, self.round)
            values[slot][:] = new
            if kept:
                moments[name] = {k: np.ascontiguousarray(v).reshape(param.shape) for k, v in kept.items()}
        return moments

    def apply(
        self, values: list[Any], spec: ModelSpec, members: list[Any]
    ) -> tuple[Any, ServerState, ServerReport]:
        """The new global values (one float64 array per slot, stepped in place), the new server
        state and the report."""
        saved = self.saved
        new = ServerState(round=self.round)
        if self.optimizer is not None:
            new.optimizer, new.moments = self.optimizer, self._step(values, spec)
        unclipped = None
        if self.clipping is not None and self.norm is not None:
            unclipped = sum(1 for m in members if not m[3])
            seed = None if self.seed is None else round_seed(self.seed, self.round, "count", bits=32)
            nxt = self.clipping.next_norm(self.norm, unclipped, len(members), self.noise_multiplier, seed)
            if not (math.isfinite(nxt) and nxt > 0):
                nxt = self.norm  # exp underflow or overflow cannot leave a usable norm: keep it
            new.clipping, new.clipping_norm = self.clipping, nxt
        z = self.noise_multiplier
        if self.privacy is not None:
            new.privacy = self.privacy
            new.ledger = add_to_ledger(saved.ledger, self.privacy.sampling_rate, z)
            new.epsilon = self.privacy.epsilon(new.ledger)
        report = ServerReport(
            self.round,
            None if self.optimizer is None else self.optimizer.name,
            self.norm if self.clipping is not None else self.core_options["clip_norm"],
            new.clipping_norm,
            unclipped,
            self.core_options["noise_multiplier"],
            new.epsilon,
            None if self.privacy is None else self.privacy.delta,
        )
        return values, new, report
