"""Parameters and their first values as ``inspect`` shows them, for checkpoints (``_inspect``) and
ORT adapter files (``_deploy``) alike."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._format import JsonValue, json_float, natural_key

if TYPE_CHECKING:
    from ..state import CheckpointState, Parameter


def head_values(param: Parameter, n: int) -> np.ndarray[Any, Any] | None:
    if n <= 0 or param.is_nominal:
        return None
    return param.data.reshape(-1)[:n]


def json_values(values: np.ndarray[Any, Any]) -> list[JsonValue]:
    kind = values.dtype.kind
    if kind == "O":
        return [str(v) for v in values]
    if kind == "b":
        return [bool(v) for v in values]
    if kind in "iu":
        return [int(v) for v in values]
    if kind == "c":
        return [[json_float(float(v.real)), json_float(float(v.imag))] for v in values]
    return [json_float(float(v)) for v in values.astype(np.float64)]


def text_values(values: np.ndarray[Any, Any], total: int) -> str:
    items = [repr(v) if isinstance(v, str) else str(v) for v in values]
    more = ", ..." if total > len(items) else ""
    return "[" + ", ".join(items) + more + "]"


def parameters_in_order(state: CheckpointState) -> list[Parameter]:
    """The parameters in natural name order (``layer2`` before ``layer10``)."""
    return sorted(state.parameters.values(), key=lambda p: natural_key(p.name))
