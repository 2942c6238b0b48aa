"""What a flat tensor file (safetensors, npz) needs besides its tensors to hold a whole checkpoint.

A checkpoint is a set of named tensors plus trainable flags, optimizer groups (step, learning rate,
momentum tensors) and properties. The formats ortckpt converts to keep tensors under keys; the rest
goes into one JSON document, the *layout* (safetensors metadata key ``"ortckpt"``, npz member
``"__ortckpt__"``)::

    {"format": "ortckpt-layout/1",
     "frozen": [name, ...],                        # every other parameter is trainable
     "dtypes": {key: "bfloat16", ...},             # npz only: tensors stored as raw unsigned views
     "properties": [[name, "int" | "float" | "str", value], ...],   # float: float32 bits, 8 hex digits
     "optimizer": [{"name": group, "step": int, "initial_learning_rate": float32 bits,
                    "states": [[param, [[momentum, key], ...]], ...]}, ...]}

Momentum tensors are stored under the keys ``__optimizer__/<group>/<parameter>/<momentum>``
(``momentum_key``); a parameter name beginning with ``__optimizer__/`` is refused so keys never
collide. Floats are stored as their float32 bit patterns, as ORT stores them, so a round trip is
bit-exact (NaN payloads and -0.0 included).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _dtypes
from ..errors import CheckpointError, ConversionError
from ..state import CheckpointState, OptimizerGroup

FORMAT = "ortckpt-layout/1"
SAFETENSORS_KEY = "ortckpt"
NPZ_KEY = "__ortckpt__"
OPTIMIZER_PREFIX = "__optimizer__/"


def momentum_key(group: str, param: str, momentum: str) -> str:
    """The tensor key of an optimizer momentum in converted files."""
    return f"{OPTIMIZER_PREFIX}{group}/{param}/{momentum}"


def _f32_bits(value: float) -> str:
    return f"{int(np.array(value, np.float32).view(np.uint32)):08x}"


def _from_bits(text: object, what: str) -> float:
    if not isinstance(text, str) or len(text) != 8:
        raise ConversionError(f"{what}: expected 8 hex digits of float32 bits, got {text!r}")
    try:
        return float(np.array(int(text, 16), np.uint32).view(np.float32))
    except ValueError:
        raise ConversionError(f"{what}: expected 8 hex digits of float32 bits, got {text!r}") from None


@dataclass
class Layout:
    """The non-tensor part of a checkpoint, and where its momentum tensors are."""

    frozen: list[str] = field(default_factory=list)
    properties: list[tuple[str, object]] = field(default_factory=list)
    # group name -> (step, lr, [(param, [(momentum, key)])])
    optimizer: list[tuple[str, int, float, list[tuple[str, list[tuple[str, str]]]]]] = field(
        default_factory=list
    )
    dtypes: dict[str, str] = field(default_factory=dict)

    def momentum_keys(self) -> list[str]:
        return [key for _, _, _, states in self.optimizer for _, moms in states for _, key in moms]


def tensors_of(state: CheckpointState, include_optimizer_state: bool) -> tuple[list[tuple[str, Any]], Layout]:
    """(key, array-provider) pairs in file order and the layout. Array providers are Parameters or
    (group, param, momentum) triples resolved lazily by ``array_of``, so only one tensor at a time
    needs to be materialized."""
    if state.is_nominal:
        raise ConversionError(
            f"{state.source or 'the state'} is nominal: it has no values to convert "
            "(load the values from the ONNX model instead)"
        )
    layout = Layout()
    items: list[tuple[str, Any]] = []
    for name, param in state.parameters.items():
        if name.startswith(OPTIMIZER_PREFIX) or name == NPZ_KEY:
            raise ConversionError(f"parameter {name!r}: this name is reserved by ortckpt's converted files")
        items.append((name, param))
        if not param.trainable:
            layout.frozen.append(name)
    layout.properties = list(state.properties.items())
    if include_optimizer_state and state.optimizer is not None:
        for group_name, group in state.optimizer.items():
            states: list[tuple[str, list[tuple[str, str]]]] = []
            for param_name, momentums in group.states.items():
                moms: list[tuple[str, str]] = []
                for momentum in momentums:
                    key = momentum_key(group_name, param_name, momentum)
                    items.append((key, (group_name, param_name, momentum)))
                    moms.append((momentum, key))
                states.append((param_name, moms))
            layout.optimizer.append((group_name, group.step, group.initial_learning_rate, states))
    return items, layout


def array_of(state: CheckpointState, provider: Any) -> np.ndarray[Any, Any]:
    if isinstance(provider, tuple):
        group, param, momentum = provider
        assert state.optimizer is not None
        array: np.ndarray[Any, Any] = state.optimizer[group].states[param][momentum]
        return array
    data: np.ndarray[Any, Any] = provider.data
    return data


def _property(name: str, value: object) -> list[object]:
    if isinstance(value, float):
        return [name, "float", _f32_bits(value)]
    return [name, "int" if isinstance(value, int) else "str", value]


def encode(layout: Layout) -> str:
    doc = {
        "format": FORMAT,
        "frozen": layout.frozen,
        "dtypes": layout.dtypes,
        "properties": [_property(name, value) for name, value in layout.properties],
        "optimizer": [
            {"name": g, "step": step, "initial_learning_rate": _f32_bits(lr), "states": states}
            for g, step, lr, states in layout.optimizer
        ],
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConversionError(f"{what}: expected a list, got {type(value).__name__}")
    return value


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ConversionError(f"{what}: expected a string, got {type(value).__name__}")
    return value


_INT64 = range(-(1 << 63), 1 << 63)


def _int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value not in _INT64:
        raise ConversionError(f"{what}: expected a 64-bit integer, got {value!r:.80}")
    return value


def _pair(value: object, what: str) -> tuple[Any, Any]:
    items = _list(value, what)
    if len(items) != 2:
        raise ConversionError(f"{what}: expected a pair, got {len(items)} items")
    return items[0], items[1]


def _property_of(entry: object, where: str) -> tuple[str, object]:
    items = _list(entry, f"{where} property")
    if len(items) != 3:
        raise ConversionError(f"{where}: a property is not [name, type, value]")
    name = _str(items[0], f"{where} property name")
    kind, value = items[1], items[2]
    what = f"{where} property {name!r}"
    if kind == "float":
        return name, _from_bits(value, what)
    if kind == "int":
        return name, _int(value, what)
    if kind == "str":
        return name, _str(value, what)
    raise ConversionError(f"{where}: property {name!r} has unknown type {kind!r}")


def _group_of(group: object, where: str) -> tuple[str, int, float, list[tuple[str, list[tuple[str, str]]]]]:
    if not isinstance(group, dict):
        raise ConversionError(f"{where}: optimizer group must be an object")
    name = _str(group.get("name"), f"{where} optimizer group name")
    what = f"{where} optimizer group {name!r}"
    lr = _from_bits(group.get("initial_learning_rate"), f"{what} learning rate")
    step = _int(group.get("step", 0), f"{what} step")
    states = []
    for entry in _list(group.get("states", []), f"{what} states"):
        param, moms = _pair(entry, f"{what} state")
        param = _str(param, f"{what} parameter name")
        pairs = [_pair(m, f"{what} momentum") for m in _list(moms, f"{what} momentums")]
        states.append((param, [(_str(m, f"{what} momentum"), _str(k, f"{what} key")) for m, k in pairs]))
    return name, step, lr, states


def decode(text: str, source: str) -> Layout:
    """Parse a layout, refusing anything malformed with a ``ConversionError`` naming ``source``."""
    where = f"{source}: ortckpt layout"
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConversionError(f"{where} is not valid JSON: {type(exc).__name__}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConversionError(f"{where}: unknown format (expected {FORMAT!r})")
    layout = Layout()
    layout.frozen = [_str(n, f"{where} frozen") for n in _list(doc.get("frozen", []), f"{where} frozen")]
    dtypes = doc.get("dtypes", {})
    if not isinstance(dtypes, dict):
        raise ConversionError(f"{where}: dtypes must be an object")
    layout.dtypes = {k: _str(v, f"{where} dtype of {k!r}") for k, v in dtypes.items()}
    layout.properties = [
        _property_of(e, where) for e in _list(doc.get("properties", []), f"{where} properties")
    ]
    layout.optimizer = [_group_of(g, where) for g in _list(doc.get("optimizer", []), f"{where} optimizer")]
    return layout


def build_state(
    source: str,
    tensors: Mapping[str, np.ndarray[Any, Any]],
    layout: Layout | None,
    trainable: object,
) -> CheckpointState:
    """A ``CheckpointState`` from a file's tensors (read-only arrays are kept without a copy).

    Without a layout every tensor is a parameter. ``trainable`` (an iterable of names) overrides
    the flags; when both are absent every floating-point tensor is trainable and the rest frozen
    (as ``save_from_onnx`` decides).
    """
    momentum_keys = set(layout.momentum_keys()) if layout is not None else set()
    params = {k: v for k, v in tensors.items() if k not in momentum_keys}
    if trainable is not None:
        if isinstance(trainable, str):
            trainable = [trainable]
        wanted = set(trainable)  # type: ignore[call-overload]
        unknown = sorted(wanted - params.keys())
        if unknown:
            raise ConversionError(f"{source}: no tensor {unknown[0]!r} to make trainable")
        flags = {name: name in wanted for name in params}
    elif layout is not None:
        unknown = sorted(set(layout.frozen) - params.keys())
        if unknown:
            raise ConversionError(
                f"{source}: layout names frozen parameter {unknown[0]!r} but it has no tensor"
            )
        frozen = set(layout.frozen)
        flags = {name: name not in frozen for name in params}
    else:
        flags = {name: _is_float(arr) for name, arr in params.items()}
    optimizer: dict[str, OptimizerGroup] | None = None
    if layout is not None and layout.optimizer:
        optimizer = {}
        for group, step, lr, states in layout.optimizer:
            moms: dict[str, dict[str, Any]] = {}
            for param, entries in states:
                moms[param] = {}
                for momentum, key in entries:
                    if key not in tensors:
                        raise ConversionError(f"{source}: momentum tensor {key!r} is missing")
                    moms[param][momentum] = tensors[key]
            with _refused(source):
                optimizer[group] = OptimizerGroup(step=step, initial_learning_rate=lr, states=moms)
    properties = layout.properties if layout is not None else []
    with _refused(source):
        return CheckpointState(
            {n: a for n, a in params.items() if flags[n]},
            frozen={n: a for n, a in params.items() if not flags[n]},
            properties=properties,
            optimizer=optimizer,
        )


@contextlib.contextmanager
def _refused(source: str) -> Iterator[None]:
    """What the state refuses of a file's content (a dtype, shape or property it cannot hold) as a
    ``ConversionError`` naming the file."""
    try:
        yield
    except ConversionError:
        raise
    except (CheckpointError, TypeError, ValueError, OverflowError) as exc:
        raise ConversionError(f"{source}: {exc}") from None


def _is_float(array: np.ndarray[Any, Any]) -> bool:
    if array.dtype.kind == "f":
        return True
    return _dtypes.is_ml_dtype(_dtypes.from_name(array.dtype.name))
