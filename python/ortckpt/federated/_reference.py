"""The reference of a round: the structure every upload must match (``ModelSpec``, as the core's
``AggregationLayout``), the default size limit it implies, and the global state built around
the aggregate's values (frozen parameters, properties and optimizer steps come from it).

Rounding: every value is converted exactly to float64 (complex128 for complex dtypes), multiplied
by its weight and added in float64 in the order the engine visits the sources; the mean is
divided once and rounded to the parameter's dtype (round to nearest even). Engines that add in
another order (Dask's tree) therefore agree with each other to one unit in the last place of the
parameter's dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _dtypes, _native
from .._optimizer import momentum_tensors
from ..errors import AggregationError
from ..state import CheckpointState, OptimizerGroup, Parameter
from ._server_state import GROUP as SERVER_GROUP

#: dtypes whose values are averaged: real floats (bfloat16/float8 included) and complex
_REAL = frozenset(
    {
        _dtypes.FLOAT,
        _dtypes.FLOAT16,
        _dtypes.DOUBLE,
        _dtypes.BFLOAT16,
        _dtypes.FLOAT8E4M3FN,
        _dtypes.FLOAT8E4M3FNUZ,
        _dtypes.FLOAT8E5M2,
        _dtypes.FLOAT8E5M2FNUZ,
    }
)
_COMPLEX = frozenset({_dtypes.COMPLEX64, _dtypes.COMPLEX128})
_SLACK = 1 << 20  # bytes allowed beyond the tensors for the flatbuffer structure and properties


class Rejected(ValueError):
    """Why an upload (or a reference) cannot be averaged: ``kind`` (a short code) and a message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ModelSpec:
    """What every upload must match: the reference's parameters and (optionally) momentums."""

    params: dict[str, tuple[bool, int, tuple[int, ...]]]  # name -> (trainable, data type, shape)
    momentums: dict[tuple[str, str, str], tuple[int, tuple[int, ...]]]  # (group, param, momentum)
    include_optimizer_state: bool

    @property
    def averaged(self) -> list[str]:
        return [n for n, (trainable, _, _) in self.params.items() if trainable]


def _type(code: int) -> str:
    return _dtypes.type_name(code)


def spec_of(state: CheckpointState, include_optimizer_state: bool) -> ModelSpec:
    """The structure of a reference state; ``Rejected`` (a ValueError) when it cannot be averaged."""
    if state.is_nominal:
        raise Rejected("nominal", "the checkpoint is nominal (names and types only, no values)")
    params = {}
    for name, p in state.parameters.items():
        if p.trainable and p.data_type not in _REAL | _COMPLEX:
            raise Rejected(
                "dtype",
                f"parameter {name!r} is trainable but {_type(p.data_type)}: only floating-point "
                "parameters can be averaged (mark it frozen)",
            )
        params[name] = (p.trainable, p.data_type, tuple(p.shape))
    momentums: dict[tuple[str, str, str], tuple[int, tuple[int, ...]]] = {}
    if include_optimizer_state:
        if state.optimizer is None:
            raise Rejected(
                "optimizer", "include_optimizer_state=True but the checkpoint has no optimizer state"
            )
        for group_name, group in _device_groups(state):
            for param, moms in group.states.items():
                # the stored dtype and shape, never the values (a reference indexed lazily
                # reads its momentums once, with the other uploads)
                for momentum, tensor in momentum_tensors(moms):
                    code = tensor.data_type
                    if code not in _REAL | _COMPLEX:
                        raise Rejected(
                            "optimizer",
                            f"momentum {param}/{momentum} is {_type(code)}: it cannot be averaged",
                        )
                    momentums[(group_name, param, momentum)] = (code, tuple(tensor.shape))
    return ModelSpec(params, momentums, include_optimizer_state)


def _device_groups(state: CheckpointState) -> list[tuple[str, OptimizerGroup]]:
    """The devices' optimizer groups (the server's own group, the server optimizer's state, is
    never averaged: docs/federated.md)."""
    return [(k, g) for k, g in (state.optimizer or {}).items() if k != SERVER_GROUP]


def layout_of(spec: ModelSpec) -> _native.AggregationLayout:
    """The native form of ``spec`` (built once per process that aggregates: it does not pickle)."""
    params = [(n, t, code, list(shape)) for n, (t, code, shape) in spec.params.items()]
    moms = [(g, p, m, code, list(shape)) for (g, p, m), (code, shape) in spec.momentums.items()]
    return _native.AggregationLayout(params, moms)


def default_limit(reference: CheckpointState) -> int:
    """4x the reference's tensor bytes (room for optimizer state: AdamW keeps 2 momentums per
    parameter) plus 1 MiB for the file's structure and properties."""
    tensors = sum(p.nbytes for p in reference.parameters.values())
    if reference.optimizer is not None:
        for group in reference.optimizer.values():
            tensors += sum(t.nbytes for moms in group.states.values() for _, t in momentum_tensors(moms))
    return 4 * tensors + _SLACK


def slim(state: CheckpointState) -> CheckpointState:
    """What a round keeps of its reference: the frozen parameters (copied out of the upload's
    memory, which can then be freed), the properties and the optimizer groups' steps and learning
    rates; the averaged tensors' dtypes and shapes are the spec's. A round whose reference is a
    3 GB upload holds its frozen parameters, not 3 GB."""
    params = [
        Parameter(name, np.array(p.data, copy=True), trainable=False)
        for name, p in state.parameters.items()
        if not p.trainable
    ]
    optimizer = None
    if state.optimizer is not None:
        optimizer = {
            g: OptimizerGroup(group.step, group.initial_learning_rate, {})
            for g, group in state.optimizer.items()
        }
    return CheckpointState(params, properties=dict(state.properties), optimizer=optimizer)


def _wanted(spec: ModelSpec) -> list[tuple[str, np.dtype[Any], tuple[int, ...]]]:
    """Per slot (the core's order: trainable parameters, then momentums): a label, its dtype, its shape."""
    wanted = [
        (repr(name), _dtypes.to_numpy(code), shape)
        for name, (trainable, code, shape) in spec.params.items()
        if trainable
    ]
    for (group, param, m), (code, shape) in spec.momentums.items():
        wanted.append((f"momentum '{group}/{param}/{m}'", _dtypes.to_numpy(code), shape))
    return wanted


def _rounded(
    values: list[Any], wanted: list[tuple[str, np.dtype[Any], tuple[int, ...]]], divisor: float
) -> list[Any]:
    """Each slot's float64 values rounded once to its dtype, slot by slot, each slot's float64
    array dropped from ``values`` once rounded (so a 3 GB model never holds its 6 GB of float64
    values and its rounded copy at once). The results of one dtype share one allocation (numpy
    asks for huge pages above 4 MiB: 512x fewer page faults than one array per small tensor); they
    are read-only views of a base that owns its data, so a state keeps them without a copy.
    ``AggregationError`` names a tensor whose values pass its dtype's range."""
    # a slot that is not float64 came divided and rounded to float32 by the core (FedAvg's and a
    # plain median's or trimmed mean's float32 and complex64 slots: their float32 lanes), in
    # memory nothing else holds: it is kept as it is (and checked as the others are)
    done = [values[slot].dtype != np.float64 for slot in range(len(wanted))]
    sizes: dict[np.dtype[Any], int] = {}
    for (_, dtype, shape), rounded in zip(wanted, done):
        if not rounded:
            sizes[dtype] = sizes.get(dtype, 0) + math.prod(shape)
    flats = {dtype: np.empty(size, dtype) for dtype, size in sizes.items()}
    used = dict.fromkeys(flats, 0)
    out: list[Any] = []
    for slot, (label, dtype, shape) in enumerate(wanted):
        part = values[slot]
        values[slot] = None  # dropped as soon as it is rounded
        if done[slot]:
            view = part.view(dtype).reshape(shape)
        else:
            view = _rounded_into(flats[dtype], used, part, dtype, shape, divisor)
        # a slot the core rounded is checked unless the core checked it as it wrote it: FedAvg's
        # sums may hold a Dask worker's partial sums, finite in float64 but not a mean of checked
        # values (their mean may pass float32's range)
        if not (done[slot] and _checked_finite(part)) and not np.isfinite(view).all():
            raise AggregationError(
                f"the aggregate of {label} is not finite in {dtype.name}: the uploads are finite, but "
                f"their aggregate (an update added to the global model, noise) passes {dtype.name}'s range"
            )
        out.append(view)
    for array in [*flats.values(), *out]:
        array.flags.writeable = False
    return out


def _checked_finite(part: Any) -> bool:
    """Whether the core checked every value of ``part`` (a view of a round's rounded values)
    finite as it wrote them: the ``finite`` of the buffer owning its memory."""
    owner = part
    while isinstance(owner, np.ndarray):
        owner = owner.base
    return getattr(owner, "finite", False) is True


def _rounded_into(
    flat: Any,
    used: dict[np.dtype[Any], int],
    part: Any,
    dtype: np.dtype[Any],
    shape: tuple[int, ...],
    divisor: float,
) -> Any:
    """``part / divisor`` rounded once to ``dtype`` into the next ``shape`` values of ``flat``
    (``used[dtype]``: how many are taken), as a view of them."""
    count = math.prod(shape)
    if dtype.kind == "c":
        part = part.view(np.complex128)
    at = used[dtype]
    used[dtype] = at + count
    view = flat[at : at + count].reshape(shape)
    with np.errstate(over="ignore", invalid="ignore"):
        # one pass: the float64 quotient, then one rounding to the dtype (as
        # ``(part / divisor).astype(dtype)``, without a float64 temporary); a divisor of 1
        # (the robust methods) changes no value, so only the rounding is done
        if divisor == 1.0:
            np.copyto(view, part.reshape(shape), casting="unsafe")
        else:
            np.divide(part.reshape(shape), divisor, out=view, casting="unsafe")
    return view


def result_state(
    reference: CheckpointState, spec: ModelSpec, values: list[Any], divisor: float = 1.0
) -> CheckpointState:
    """The global state: the aggregate's values (one float64 array per slot, in slot order: each
    is dropped from the list once rounded) rounded to each tensor's dtype, around the reference's
    frozen parameters, properties and optimizer groups. Each value is divided by ``divisor``
    first (FedAvg's sums by the total weight), in the same pass."""
    means = iter(_rounded(values, _wanted(spec), divisor))
    params: list[Parameter] = []
    for name, (is_trainable, _, _) in spec.params.items():
        params.append(
            Parameter(name, next(means), trainable=True) if is_trainable else reference.parameters[name]
        )
    optimizer = None
    if spec.include_optimizer_state:
        # the momentums in the spec's order (the slots'), grouped by group and parameter again
        states: dict[str, dict[str, dict[str, Any]]] = {}
        for group_name, param, m in spec.momentums:
            states.setdefault(group_name, {}).setdefault(param, {})[m] = next(means)
        optimizer = {
            group_name: OptimizerGroup(group.step, group.initial_learning_rate, states.get(group_name, {}))
            for group_name, group in _device_groups(reference)
        }
    return CheckpointState(params, properties=reference.properties, optimizer=optimizer)
