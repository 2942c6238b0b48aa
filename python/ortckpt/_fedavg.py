"""The pieces of validated averaging shared by every engine: the reference's structure, the checks
an upload must pass, and the float64 partial sums (all picklable, so Dask can ship them).

Rounding: every value is converted exactly to float64 (complex128 for complex dtypes), multiplied by
its weight and added in float64 in the order the engine visits the sources; the sum is divided by
the total weight once and rounded to the parameter's dtype (round to nearest even). Engines that add
in another order (Dask's tree) therefore agree with each other to one unit in the last place of the
parameter's dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _dtypes
from ._remote import open_state
from .state import CheckpointState

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
_CHUNK = 1 << 22  # elements converted to float64 at a time: bounds the temporary memory


class Rejected(ValueError):
    """Why an upload (or a reference) cannot be averaged: ``kind`` (a short code) and a message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


Key = str  # parameter name, or _layout.momentum_key(...) for momentums


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
        for group_name, group in state.optimizer.items():
            for param, moms in group.states.items():
                for momentum, array in moms.items():
                    code = _dtypes.from_numpy(array.dtype, momentum)
                    if code not in _REAL | _COMPLEX:
                        raise Rejected(
                            "optimizer",
                            f"momentum {param}/{momentum} is {_type(code)}: it cannot be averaged",
                        )
                    momentums[(group_name, param, momentum)] = (code, tuple(array.shape))
    return ModelSpec(params, momentums, include_optimizer_state)


def _finite(array: np.ndarray[Any, Any]) -> bool:
    flat = array.reshape(-1)
    for start in range(0, flat.size, _CHUNK):
        chunk = flat[start : start + _CHUNK]
        if chunk.dtype.kind not in "fc":  # bfloat16 / float8: through float64
            chunk = chunk.astype(np.float64)
        if not np.isfinite(chunk).all():
            return False
    return True


def _momentum(state: CheckpointState, key: tuple[str, str, str]) -> np.ndarray[Any, Any] | None:
    group, param, momentum = key
    if state.optimizer is None or group not in state.optimizer:
        return None
    moms = state.optimizer[group].states.get(param)
    if moms is None or momentum not in moms:
        return None
    array: np.ndarray[Any, Any] = moms[momentum]
    return array


def check(state: CheckpointState, spec: ModelSpec) -> None:
    """Raise ``Rejected`` unless ``state`` matches the reference structure with finite values."""
    if state.is_nominal:
        raise Rejected("nominal", "the checkpoint is nominal (names and types only, no values)")
    names = set(state.parameters)
    missing = sorted(set(spec.params) - names)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise Rejected("missing-parameter", f"parameter {missing[0]!r} is missing{more}")
    extra = sorted(names - set(spec.params))
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise Rejected("extra-parameter", f"parameter {extra[0]!r} is not in the reference{more}")
    for name, (trainable, code, shape) in spec.params.items():
        p = state.parameters[name]
        if p.trainable != trainable:
            want = "trainable" if trainable else "frozen"
            raise Rejected("trainable-flag", f"parameter {name!r} should be {want}, as in the reference")
        if p.data_type != code:
            raise Rejected(
                "dtype", f"parameter {name!r} is {_type(p.data_type)}; the reference has {_type(code)}"
            )
        if tuple(p.shape) != shape:
            raise Rejected(
                "shape", f"parameter {name!r} has shape {tuple(p.shape)}; the reference has {shape}"
            )
    for key, (code, shape) in spec.momentums.items():
        array = _momentum(state, key)
        label = "/".join(key)
        if array is None:
            raise Rejected("optimizer", f"momentum {label!r} is missing")
        if array.dtype != _dtypes.to_numpy(code) or tuple(array.shape) != shape:
            raise Rejected(
                "optimizer",
                f"momentum {label!r} is {array.dtype}{list(array.shape)}; the reference has "
                f"{_type(code)}{list(shape)}",
            )
    for name in spec.averaged:
        if not _finite(state.parameters[name].data):
            raise Rejected("non-finite", f"parameter {name!r} holds NaN or infinite values")
    for key in spec.momentums:
        array = _momentum(state, key)
        assert array is not None
        if not _finite(array):
            raise Rejected("non-finite", f"momentum {'/'.join(key)!r} holds NaN or infinite values")


def weight_of(state: CheckpointState, weight: float | str | None) -> float:
    """The upload's weight: a given number, its property ``weight`` (by name), or 1."""
    if weight is None:
        return 1.0
    if isinstance(weight, str):
        value = state.properties.get(weight)
        if value is None:
            raise Rejected("weight", f"property {weight!r} (the weight) is missing")
        if isinstance(value, str) or not (math.isfinite(value) and value > 0):
            raise Rejected("weight", f"property {weight!r} = {value!r} is not a positive number")
        return float(value)
    return float(weight)


@dataclass
class PartialSum:
    """The sum of weight * values in float64 (complex128) per averaged tensor, and of the weights."""

    sums: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    total_weight: float = 0.0
    count: int = 0

    def _add(self, key: str, array: np.ndarray[Any, Any], weight: float) -> None:
        acc = self.sums.get(key)
        if acc is None:
            kind = np.complex128 if array.dtype.kind == "c" else np.float64
            acc = self.sums[key] = np.zeros(array.shape, kind)
        flat_acc = acc.reshape(-1)
        flat = array.reshape(-1)
        for start in range(0, flat.size, _CHUNK):
            part = flat[start : start + _CHUNK].astype(flat_acc.dtype)
            part *= weight
            flat_acc[start : start + _CHUNK] += part

    def add(self, state: CheckpointState, spec: ModelSpec, weight: float) -> None:
        for name in spec.averaged:
            self._add(name, state.parameters[name].data, weight)
        for key in spec.momentums:
            array = _momentum(state, key)
            assert array is not None
            self._add("\0".join(key), array, weight)
        self.total_weight += weight
        self.count += 1

    def merge(self, other: PartialSum) -> PartialSum:
        for key, value in other.sums.items():
            acc = self.sums.get(key)
            if acc is None:
                self.sums[key] = value
            else:
                acc += value
        self.total_weight += other.total_weight
        self.count += other.count
        return self

    def mean(self, key: str, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = (self.sums[key] / self.total_weight).astype(dtype)
        return out

    def momentum_mean(self, key: tuple[str, str, str], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        return self.mean("\0".join(key), dtype)


@dataclass(frozen=True)
class SourceReport:
    """The verdict on one upload: accepted with a weight, or rejected with a reason."""

    index: int
    client: str
    accepted: bool
    weight: float | None = None
    kind: str | None = None  # rejection kind: "unreadable", "too-large", "dtype", ... (docs/federated.md)
    reason: str | None = None


def visit(
    index: int,
    client: str,
    src: Any,
    weight: float | str | None,
    spec: ModelSpec,
    max_bytes: int | None,
    storage_options: Any,
    acc: PartialSum,
) -> SourceReport:
    """Load, check and (when it passes) add one upload to ``acc``. Never raises for a bad upload:
    whatever is wrong with it is returned as a rejection."""
    try:
        state = open_state(src, max_bytes=max_bytes, storage_options=storage_options)
        check(state, spec)
        w = weight_of(state, weight)
        acc.add(state, spec, w)
    except Exception as exc:  # garbage, truncated, unreachable: this upload only, never the round
        return rejection(index, client, exc)
    return SourceReport(index, client, True, weight=w)


def rejection(index: int, client: str, exc: Exception) -> SourceReport:
    """The report of an upload that failed with ``exc``."""
    from ._remote import SourceTooLargeError

    if isinstance(exc, Rejected):
        return SourceReport(index, client, False, kind=exc.kind, reason=str(exc))
    reason = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, SourceTooLargeError):
        return SourceReport(index, client, False, kind="too-large", reason=reason)
    return SourceReport(index, client, False, kind="unreadable", reason=f"{type(exc).__name__}: {reason}")


def visit_batch(
    batch: list[tuple[int, str, Any, float | str | None]],
    spec: ModelSpec,
    max_bytes: int | None,
    storage_options: Any,
) -> tuple[PartialSum, list[SourceReport]]:
    """One Dask task: the partial sum and verdicts of a batch of uploads."""
    acc = PartialSum()
    reports = [visit(i, c, s, w, spec, max_bytes, storage_options, acc) for i, c, s, w in batch]
    return acc, reports


def merge_batches(*parts: tuple[PartialSum, list[SourceReport]]) -> tuple[PartialSum, list[SourceReport]]:
    """One node of the reduction tree."""
    acc = PartialSum()
    reports: list[SourceReport] = []
    for part, part_reports in parts:
        acc.merge(part)
        reports.extend(part_reports)
    return acc, reports
