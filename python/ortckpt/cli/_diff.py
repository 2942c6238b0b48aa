"""``ortckpt diff``: the differences between two checkpoints, as a JSON-ready report."""

from __future__ import annotations

import argparse
import json
import math
import os
from typing import TYPE_CHECKING, TextIO

from .. import _dtypes
from .._optimizer import momentum_tensor
from .._parameter import tensor_of
from ..io import load
from ..state import CheckpointState, Parameter
from ._compare import EXACT, Tolerance, compare_values
from ._diff_text import print_diff
from ._format import JsonValue, json_float, natural_sorted

if TYPE_CHECKING:
    from .._scalars import PropertyValue
    from .._tensor import Tensor


class _Stop(Exception):
    """Raised at the first difference when only the exit status is wanted."""


class _Counter:
    def __init__(self, stop_at_first: bool) -> None:
        self.count = 0
        self._stop = stop_at_first

    def hit(self) -> None:
        self.count += 1
        if self._stop:
            raise _Stop


def _pair(a: JsonValue, b: JsonValue) -> dict[str, JsonValue]:
    return {"a": a, "b": b}


def _shape(tensor: Tensor) -> list[int] | None:
    return None if tensor.is_nominal else list(tensor.shape)


def _tensor_changes(
    ta: Tensor, tb: Tensor, name: str, tol: Tolerance, counter: _Counter, entry: dict[str, JsonValue]
) -> None:
    """Add the nominal/dtype/shape/values differences of two tensors to ``entry``."""
    if ta.is_nominal != tb.is_nominal:
        entry["nominal"] = _pair(ta.is_nominal, tb.is_nominal)
        counter.hit()
    if ta.data_type != tb.data_type:
        entry["dtype"] = _pair(_dtypes.type_name(ta.data_type), _dtypes.type_name(tb.data_type))
        counter.hit()
    if ta.is_nominal or tb.is_nominal:
        return
    if ta.shape != tb.shape:
        entry["shape"] = _pair(list(ta.shape), list(tb.shape))
        counter.hit()
    if "dtype" in entry or "shape" in entry:
        return
    values = compare_values(ta, tb, name, tol)
    if values is not None:
        entry["values"] = values
        counter.hit()


def _param_entry(param: Parameter) -> dict[str, JsonValue]:
    tensor = tensor_of(param)
    return {
        "name": param.name,
        "trainable": param.trainable,
        "dtype": _dtypes.type_name(tensor.data_type),
        "shape": _shape(tensor),
    }


def _diff_parameters(
    a: CheckpointState, b: CheckpointState, tol: Tolerance, counter: _Counter
) -> dict[str, JsonValue]:
    pa, pb = a.parameters, b.parameters
    only_a: list[JsonValue] = []
    only_b: list[JsonValue] = []
    changed: list[JsonValue] = []
    for name in natural_sorted(set(pa) | set(pb)):
        if name not in pb:
            only_a.append(_param_entry(pa[name]))
            counter.hit()
        elif name not in pa:
            only_b.append(_param_entry(pb[name]))
            counter.hit()
        else:
            x, y = pa[name], pb[name]
            entry: dict[str, JsonValue] = {"name": name}
            if x.trainable != y.trainable:
                entry["trainable"] = _pair(x.trainable, y.trainable)
                counter.hit()
            _tensor_changes(tensor_of(x), tensor_of(y), name, tol, counter, entry)
            if len(entry) > 1:
                changed.append(entry)
    return {"only_in_a": only_a, "only_in_b": only_b, "changed": changed}


def _same_float(x: float, y: float) -> bool:
    return x == y or (math.isnan(x) and math.isnan(y))


def _diff_optimizer(
    a: CheckpointState, b: CheckpointState, tol: Tolerance, counter: _Counter
) -> dict[str, JsonValue]:
    ga = a.optimizer if a.optimizer is not None else {}
    gb = b.optimizer if b.optimizer is not None else {}
    only_a: list[JsonValue] = []
    only_b: list[JsonValue] = []
    changed: list[JsonValue] = []
    for group_name in natural_sorted(set(ga) | set(gb)):
        if group_name not in gb:
            only_a.append(group_name)
            counter.hit()
            continue
        if group_name not in ga:
            only_b.append(group_name)
            counter.hit()
            continue
        x, y = ga[group_name], gb[group_name]
        entry: dict[str, JsonValue] = {"name": group_name}
        if x.step != y.step:
            entry["step"] = _pair(x.step, y.step)
            counter.hit()
        if not _same_float(x.initial_learning_rate, y.initial_learning_rate):
            entry["initial_learning_rate"] = _pair(
                json_float(x.initial_learning_rate), json_float(y.initial_learning_rate)
            )
            counter.hit()
        states_a: list[JsonValue] = []
        states_b: list[JsonValue] = []
        mom_a: list[JsonValue] = []
        mom_b: list[JsonValue] = []
        mom_changed: list[JsonValue] = []
        for param in natural_sorted(set(x.states) | set(y.states)):
            if param not in y.states:
                states_a.append(param)
                counter.hit()
                continue
            if param not in x.states:
                states_b.append(param)
                counter.hit()
                continue
            ma, mb = x.states[param], y.states[param]
            for momentum in natural_sorted(set(ma) | set(mb)):
                if momentum not in mb or momentum not in ma:
                    tensor = momentum_tensor(ma if momentum in ma else mb, momentum)
                    item = {
                        "parameter": param,
                        "momentum": momentum,
                        "dtype": _dtypes.type_name(tensor.data_type),
                        "shape": _shape(tensor),
                    }
                    (mom_a if momentum in ma else mom_b).append(item)
                    counter.hit()
                    continue
                change: dict[str, JsonValue] = {"parameter": param, "momentum": momentum}
                label = f"{group_name}/{param}/{momentum}"
                _tensor_changes(
                    momentum_tensor(ma, momentum), momentum_tensor(mb, momentum), label, tol, counter, change
                )
                if len(change) > 2:
                    mom_changed.append(change)
        if states_a or states_b:
            entry["states"] = {"only_in_a": states_a, "only_in_b": states_b}
        if mom_a or mom_b or mom_changed:
            entry["momentums"] = {"only_in_a": mom_a, "only_in_b": mom_b, "changed": mom_changed}
        if len(entry) > 1:
            changed.append(entry)
    return {"only_in_a": only_a, "only_in_b": only_b, "changed": changed}


def _property_entry(name: str, value: PropertyValue) -> dict[str, JsonValue]:
    shown = json_float(value) if isinstance(value, float) else value
    return {"name": name, "value": shown, "type": type(value).__name__}


def _same_property(x: PropertyValue, y: PropertyValue) -> bool:
    if type(x) is not type(y):
        return False
    if isinstance(x, float) and isinstance(y, float):
        return _same_float(x, y)
    return x == y


def _diff_properties(a: CheckpointState, b: CheckpointState, counter: _Counter) -> dict[str, JsonValue]:
    pa, pb = a.properties, b.properties
    removed: list[JsonValue] = []
    added: list[JsonValue] = []
    changed: list[JsonValue] = []
    for name in natural_sorted(set(pa) | set(pb)):
        if name not in pb:
            removed.append(_property_entry(name, pa[name]))
            counter.hit()
        elif name not in pa:
            added.append(_property_entry(name, pb[name]))
            counter.hit()
        elif not _same_property(pa[name], pb[name]):
            x, y = _property_entry(name, pa[name]), _property_entry(name, pb[name])
            del x["name"], y["name"]
            changed.append({"name": name, "a": x, "b": y})
            counter.hit()
    return {"removed": removed, "added": added, "changed": changed}


def _side(state: CheckpointState, path: str) -> dict[str, JsonValue]:
    return {
        "path": path,
        "version": state.version,
        "is_nominal": state.is_nominal,
        "has_external_data": state.has_external_data,
    }


def diff_states(
    a: CheckpointState,
    b: CheckpointState,
    *,
    tolerance: Tolerance = EXACT,
    paths: tuple[str, str] = ("A", "B"),
    stop_at_first: bool = False,
) -> dict[str, JsonValue]:
    """The differences between two states, as ``ortckpt diff --json`` prints them.

    With ``stop_at_first`` the comparison stops at the first difference (``differences`` is then 1).
    """
    counter = _Counter(stop_at_first)
    report: dict[str, JsonValue] = {
        "a": _side(a, paths[0]),
        "b": _side(b, paths[1]),
        "identical": True,
        "differences": 0,
        "exact": tolerance.exact,
        "rtol": tolerance.rtol,
        "atol": tolerance.atol,
        "nominal": None,
    }
    try:
        if a.is_nominal != b.is_nominal:
            report["nominal"] = _pair(a.is_nominal, b.is_nominal)
            counter.hit()
        report["parameters"] = _diff_parameters(a, b, tolerance, counter)
        report["optimizer"] = _diff_optimizer(a, b, tolerance, counter)
        report["properties"] = _diff_properties(a, b, counter)
    except _Stop:
        pass
    report["differences"] = counter.count
    report["identical"] = counter.count == 0
    return report


def run_diff(args: argparse.Namespace, out: TextIO) -> int:
    path_a, path_b = os.fsdecode(args.a), os.fsdecode(args.b)
    exact = args.rtol is None and args.atol is None
    tolerance = Tolerance(rtol=args.rtol or 0.0, atol=args.atol or 0.0, exact=exact)
    a = load(path_a)
    b = load(path_b)
    report = diff_states(a, b, tolerance=tolerance, paths=(path_a, path_b), stop_at_first=args.quiet)
    if args.quiet:
        pass
    elif args.json:
        json.dump(report, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        print_diff(report, out)
    return 0 if report["identical"] else 1
