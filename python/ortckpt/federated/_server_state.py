"""The server's state between rounds, kept in the global checkpoint it saves each round.

* optimizer group ``ortckpt.server``: ``step`` = the server rounds applied, the initial learning
  rate = the optimizer's (server) learning rate (informational: float32), and per trainable
  parameter the optimizer's moments as float64 tensors: ``momentum0`` (m_t; FedAvgM's momentum
  vector) and ``momentum1`` (v_t);
* properties (strings where a value is a float: ORT stores float properties as float32, which
  would not resume exactly; floats are written as Python's shortest round-trip ``repr``):

  ========================================  ============================================
  ``ortckpt.server.round`` (int)             server rounds applied
  ``ortckpt.server.optimizer``               ``fedavgm`` / ``fedadagrad`` / ``fedadam`` / ``fedyogi``
  ``ortckpt.server.optimizer_options``       its hyperparameters (JSON)
  ``ortckpt.server.clipping``                adaptive clipping's settings (JSON)
  ``ortckpt.server.clipping_norm``           the clipping norm of the next round
  ``ortckpt.server.privacy``                 the accountant's settings and rounds (JSON)
  ``ortckpt.server.epsilon``                 ε spent so far at the accountant's δ
  ========================================  ============================================

``server_state(checkpoint)`` reads it (checked against the checkpoint's model: a state that does
not match raises ``ServerStateError``), ``strip_server_state`` removes it (what devices get),
``with_server_state`` writes it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ServerStateError
from ..state import CheckpointState, OptimizerGroup
from ._privacy import AdaptiveClipping, PrivacyAccountant
from ._server_opt import ServerOptimizer, optimizer_from

GROUP = "ortckpt.server"
PREFIX = "ortckpt.server."
ROUND = PREFIX + "round"
OPTIMIZER = PREFIX + "optimizer"
OPTIMIZER_OPTIONS = PREFIX + "optimizer_options"
CLIPPING = PREFIX + "clipping"
CLIPPING_NORM = PREFIX + "clipping_norm"
PRIVACY = PREFIX + "privacy"
EPSILON = PREFIX + "epsilon"

Ledger = list[tuple[float, float, int]]


@dataclass
class ServerState:
    """What a server carries from round to round (``server_state(checkpoint)``)."""

    round: int = 0
    optimizer: ServerOptimizer | None = None
    moments: dict[str, dict[str, np.ndarray[Any, Any]]] = field(default_factory=dict)
    clipping: AdaptiveClipping | None = None
    clipping_norm: float | None = None
    privacy: PrivacyAccountant | None = None
    ledger: Ledger = field(default_factory=list)
    epsilon: float | None = None

    @property
    def empty(self) -> bool:
        return self.round == 0 and self.optimizer is None and self.clipping is None and self.privacy is None


def _bad(source: str, what: str) -> ServerStateError:
    return ServerStateError(
        f"{source}: the server state in the checkpoint is unusable: {what} (start the run again from a "
        "checkpoint without it: ortckpt.strip_server_state)"
    )


def _text(props: Any, name: str, source: str) -> str | None:
    if name not in props:
        return None
    value = props[name]
    if not isinstance(value, str):
        raise _bad(source, f"property {name!r} is {type(value).__name__}, not a string")
    return value


def _json(props: Any, name: str, source: str) -> dict[str, Any] | None:
    text = _text(props, name, source)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        raise _bad(source, f"property {name!r} is not JSON") from None
    if not isinstance(value, dict):
        raise _bad(source, f"property {name!r} is not a JSON object")
    return value


def _float(props: Any, name: str, source: str, *, positive: bool = False) -> float | None:
    text = _text(props, name, source)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise _bad(source, f"property {name!r} is not a number: {text[:40]!r}") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise _bad(source, f"property {name!r} is {value!r}")
    return value


def _described(make: Any, options: dict[str, Any] | None, name: str, source: str) -> Any:
    if options is None:
        return None
    try:
        return make(**options)
    except (TypeError, ValueError) as exc:
        raise _bad(source, f"property {name!r}: {exc}") from None


def _ledger(raw: Any, source: str) -> Ledger:
    ledger: Ledger = []
    if not isinstance(raw, list):
        raise _bad(source, f"the rounds in {PRIVACY!r} are not a list")
    for entry in raw:
        ok = isinstance(entry, list) and len(entry) == 3
        ok = ok and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in entry[:2])
        ok = ok and isinstance(entry[2], int) and not isinstance(entry[2], bool) and entry[2] > 0
        ok = ok and 0 < entry[0] <= 1 and 0 < entry[1] < math.inf
        if not ok:
            raise _bad(source, f"a round in {PRIVACY!r} is {entry!r}")
        rate, z, count = entry
        ledger.append((float(rate), float(z), count))
    return ledger


def _moments(state: CheckpointState, optimizer: ServerOptimizer | None, step: int, source: str) -> Any:
    group = state.optimizer.get(GROUP) if state.optimizer is not None else None
    if optimizer is None:
        if group is not None:
            raise _bad(source, f"optimizer group {GROUP!r} without property {OPTIMIZER!r}")
        return {}
    if group is None:
        raise _bad(source, f"property {OPTIMIZER!r} without optimizer group {GROUP!r}")
    if group.step != step:
        raise _bad(source, f"group {GROUP!r} has step {group.step}, property {ROUND!r} says {step}")
    trainable = {n: p for n, p in state.parameters.items() if p.trainable}
    moments: dict[str, dict[str, np.ndarray[Any, Any]]] = {}
    for name, states in group.states.items():
        param = trainable.get(name)
        if param is None:
            raise _bad(source, f"moments for {name!r}, which is not a trainable parameter of the model")
        kept = dict(states)
        unknown = set(kept) - set(optimizer.moments())
        if unknown:
            raise _bad(source, f"{optimizer.name} keeps no momentum {sorted(unknown)[0]!r} ({name!r})")
        for momentum, array in kept.items():
            if array.dtype != np.float64 or tuple(array.shape) != tuple(param.shape):
                raise _bad(
                    source,
                    f"momentum {name}/{momentum} is {array.dtype}{list(array.shape)}, the parameter is "
                    f"{list(param.shape)} (float64 expected)",
                )
            if not np.isfinite(array).all():
                raise _bad(source, f"momentum {name}/{momentum} is not finite")
        moments[name] = kept
    if moments and set(moments) != set(trainable):
        missing = sorted(set(trainable) - set(moments))[0]
        raise _bad(source, f"no moments for trainable parameter {missing!r}")
    return moments


def server_state(checkpoint: CheckpointState) -> ServerState:
    """The server state a global checkpoint carries (an empty one when it has none)."""
    source = checkpoint.source or "the global checkpoint"
    props = checkpoint.properties
    step = props.get(ROUND, 0)
    if not isinstance(step, int) or step < 0:
        raise _bad(source, f"property {ROUND!r} is {step!r}")
    name = _text(props, OPTIMIZER, source)
    options = _json(props, OPTIMIZER_OPTIONS, source)
    optimizer = None
    if name is not None or options is not None:
        try:
            optimizer = optimizer_from(name or "", options or {})
        except ValueError as exc:
            raise _bad(source, str(exc)) from None
    clipping = _described(AdaptiveClipping, _json(props, CLIPPING, source), CLIPPING, source)
    norm = _float(props, CLIPPING_NORM, source, positive=True)
    if (clipping is None) != (norm is None):
        raise _bad(source, f"{CLIPPING!r} and {CLIPPING_NORM!r} go together")
    privacy_raw = _json(props, PRIVACY, source)
    privacy, ledger = None, []
    if privacy_raw is not None:
        rounds = privacy_raw.pop("rounds", [])
        privacy = _described(PrivacyAccountant, privacy_raw, PRIVACY, source)
        ledger = _ledger(rounds, source)
    epsilon = _float(props, EPSILON, source)
    if sum(count for *_, count in ledger) > step:
        raise _bad(source, f"more rounds accounted than the {step} applied")
    moments = _moments(checkpoint, optimizer, step, source)
    return ServerState(step, optimizer, moments, clipping, norm, privacy, ledger, epsilon)


def strip_server_state(checkpoint: CheckpointState) -> CheckpointState:
    """``checkpoint`` without the server's state (group ``ortckpt.server``, ``ortckpt.server.*``
    properties): what devices get. The other groups and properties stay; tensors are shared."""
    groups = {k: g for k, g in (checkpoint.optimizer or {}).items() if k != GROUP}
    props = {k: v for k, v in checkpoint.properties.items() if not k.startswith(PREFIX)}
    return CheckpointState(list(checkpoint.parameters.values()), properties=props, optimizer=groups or None)


def with_server_state(checkpoint: CheckpointState, server: ServerState) -> CheckpointState:
    """``checkpoint`` (without server state) with ``server`` written into it."""
    base = strip_server_state(checkpoint)
    props = dict(base.properties)
    props[ROUND] = server.round
    groups = dict(base.optimizer or {})
    if server.optimizer is not None:
        props[OPTIMIZER] = server.optimizer.name
        props[OPTIMIZER_OPTIONS] = json.dumps(server.optimizer.options(), sort_keys=True)
        groups[GROUP] = OptimizerGroup(server.round, server.optimizer.learning_rate, server.moments)
    if server.clipping is not None and server.clipping_norm is not None:
        props[CLIPPING] = json.dumps(server.clipping.options(), sort_keys=True)
        props[CLIPPING_NORM] = repr(server.clipping_norm)
    if server.privacy is not None:
        record = {**server.privacy.options(), "rounds": [list(r) for r in server.ledger]}
        props[PRIVACY] = json.dumps(record, sort_keys=True)
        if server.epsilon is not None:
            props[EPSILON] = repr(server.epsilon)
    return CheckpointState(list(base.parameters.values()), properties=props, optimizer=groups or None)
