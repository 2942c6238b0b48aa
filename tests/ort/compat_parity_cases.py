"""The parity suite: test functions written against ``onnxruntime.training.api``'s checkpoint API.

Each function takes an ``env`` (see ``Env``) and returns a list of observations; it is run once
against ORT 1.19.2 itself (``compat_parity_runner.py``, in the ORT side venv) and once against
``ortckpt.compat`` (``test_compat_parity.py``), and the two lists must be equal. Observations are
JSON values: what a program can see (values, types, exception classes and KeyError messages).

This module needs only numpy, so that both venvs can import it.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np


class Env(Protocol):
    """What a case gets: ``api`` (a module with ``CheckpointState``), fresh states, scratch paths."""

    api: Any

    def load(self, which: str, session: bool = False) -> Any:
        """A fresh state of checkpoint ``which`` ("params", "optimizer" or "nominal"). ``session``
        attaches an ORT training session (ORT needs one to copy values into a parameter;
        ortckpt.compat never does)."""

    def path(self, name: str) -> str:
        """A scratch file path."""


def norm(value: Any) -> Any:
    """A JSON-comparable form of an observed value."""
    if isinstance(value, np.ndarray):
        return {"dtype": value.dtype.str, "shape": list(value.shape), "values": norm(value.tolist())}
    if isinstance(value, (list, tuple)):
        return [norm(v) for v in value]
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    return {"type": type(value).__name__}


def builtin_class(exc: BaseException) -> str:
    """The nearest builtin exception class (ORT raises RuntimeError; compat may raise a subclass)."""
    for cls in type(exc).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "BaseException"


def attempt(fn: Callable[[], Any]) -> Any:
    try:
        return ["ok", norm(fn())]
    except Exception as exc:  # the class is the observation
        if isinstance(exc, KeyError):
            return ["raises", "KeyError", str(exc)]
        return ["raises", builtin_class(exc)]


# -- parameters ---------------------------------------------------------------------------------


def case_parameters_iterate_as_pairs(env: Env) -> list[Any]:
    state = env.load("params")
    params = state.parameters
    pairs = list(params)
    return [
        [[name, type(p).__name__, p.name, p.requires_grad] for name, p in pairs],
        len(params),
        "fc1.weight" in params,
        "fc2.bias" in params,
        "nope" in params,
        bool(params),
        hasattr(params, "keys"),
        hasattr(params, "items"),
        hasattr(params, "get"),
    ]


def case_parameter_attributes(env: Env) -> list[Any]:
    state = env.load("params")
    out = []
    for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
        p = state.parameters[name]
        out.append([p.name, p.requires_grad, p.grad is None, repr(p), norm(p.data)])
        out.append([p.data.flags.writeable, p.data.flags.c_contiguous])
        out.append(attempt(lambda p=p: setattr(p, "name", "x")))
        out.append(attempt(lambda p=p: setattr(p, "requires_grad", False)))
        out.append(attempt(lambda p=p: setattr(p, "grad", None)))
    p = state.parameters["fc1.bias"]
    p.custom_attribute = 1  # plain Python objects in both
    out.append(p.custom_attribute)
    out.append(state.parameters["fc1.bias"] == state.parameters["fc1.bias"])
    return out


def case_unknown_and_wrongly_typed_names(env: Env) -> list[Any]:
    state = env.load("params")
    params, props = state.parameters, state.properties
    return [
        attempt(lambda: params["nope"]),
        attempt(lambda: params.__setitem__("nope", np.zeros(3, np.float32))),
        attempt(lambda: params[0]),
        attempt(lambda: 0 in params),
        attempt(lambda: props["nope"]),
        attempt(lambda: props[0]),
        attempt(lambda: props.__setitem__(0, 1)),
        attempt(lambda: 0 in props),
    ]


def case_data_is_the_states_buffer(env: Env) -> list[Any]:
    state = env.load("params")
    a = state.parameters["fc1.weight"].data
    b = state.parameters["fc1.weight"].data
    a[0, 0] = 42.0
    a[1] *= 2
    out = [bool(np.shares_memory(a, b)), norm(state.parameters["fc1.weight"].data)]
    path = env.path("inplace.ckpt")
    env.api.CheckpointState.save_checkpoint(state, path)
    again = env.api.CheckpointState.load_checkpoint(path)
    out.append(norm(again.parameters["fc1.weight"].data))
    return out


def case_copy_into_parameters(env: Env) -> list[Any]:
    state = env.load("params", session=True)
    params = state.parameters
    w = params["fc1.weight"].data.copy()
    bias = params["fc2.bias"].data.copy()  # frozen
    out = []
    candidates = {
        "same": w * 2,
        "float64": w.astype(np.float64),
        "int32": w.astype(np.int32),
        "transposed": np.ascontiguousarray(w.T),
        "flat": w.reshape(-1),
        "short": w[:1],
        "scalar": np.float32(1.0),
        "list": w.tolist(),
        "strings": np.array(["a"] * w.size).reshape(w.shape),
        "non_contiguous": np.stack([w * 3, w], axis=1)[:, 0],
        "zero_d": np.array(1.0, np.float32),
    }
    for label, value in candidates.items():
        out.append([label, attempt(lambda value=value: params.__setitem__("fc1.weight", value))])
        out.append(norm(params["fc1.weight"].data))
    for label, value in {"same": w * 5, "float64": w.astype(np.float64), "short": w[:2]}.items():
        p = params["fc1.weight"]
        out.append([label, attempt(lambda p=p, value=value: setattr(p, "data", value))])
        out.append(norm(params["fc1.weight"].data))
    out.append(attempt(lambda: params.__setitem__("fc2.bias", bias + 1)))
    out.append(norm(params["fc2.bias"].data))
    path = env.path("copied.ckpt")
    env.api.CheckpointState.save_checkpoint(state, path)
    again = env.api.CheckpointState.load_checkpoint(path)
    out.append([[name, norm(p.data), p.requires_grad] for name, p in again.parameters])
    return out


def case_nominal_state(env: Env) -> list[Any]:
    state = env.load("nominal")
    params = state.parameters
    out = [len(params), "fc1.weight" in params, "nope" in params]
    out.append(attempt(lambda: list(params)))
    out.append(attempt(lambda: params["fc1.weight"]))
    out.append(attempt(lambda: params.__setitem__("nope", np.zeros(3, np.float32))))
    state.properties["epoch"] = 2
    out.append(list(state.properties))
    return out


def case_nominal_state_refuses_copies(env: Env) -> list[Any]:
    state = env.load("nominal")
    return [attempt(lambda: state.parameters.__setitem__("fc1.bias", np.zeros(8, np.float32)))]


# -- properties ---------------------------------------------------------------------------------

PROPERTY_VALUES: list[tuple[str, Any]] = [
    ("int", 5),
    ("negative", -(2**63)),
    ("int64_max", 2**63 - 1),
    ("above_int64", 2**63),
    ("below_int64", -(2**63) - 1),
    ("huge", 10**400),
    ("true", True),
    ("false", False),
    ("float", 0.1),
    ("float_max", 3.5e38),
    ("float_overflow", 1e300),
    ("inf", float("inf")),
    ("nan", float("nan")),
    ("negative_zero", -0.0),
    ("str", "héllo"),
    ("empty_str", ""),
    ("nul_in_str", "a\x00b"),
    ("surrogate", "\udc80"),
    ("bytes", b"xy"),
    ("np_float32", np.float32(1.5)),
    ("np_float64", np.float64(0.1)),
    ("np_int64", np.int64(3)),
    ("np_uint64_max", np.uint64(2**64 - 1)),
    ("np_bool", np.bool_(True)),
    ("none", None),
    ("list", [1]),
    ("", 1),
]


def case_property_conversions(env: Env) -> list[Any]:
    state = env.load("params")
    props = state.properties
    out = []
    for name, value in PROPERTY_VALUES:
        result = attempt(lambda name=name, value=value: props.__setitem__(name, value))
        stored = attempt(lambda name=name: props[name]) if result[0] == "ok" else None
        out.append([name, result, stored, type(props[name]).__name__ if name in props else None])
    out.append([[name, norm(value)] for name, value in props])
    out.append(len(props))
    path = env.path("properties.ckpt")
    env.api.CheckpointState.save_checkpoint(state, path)
    again = env.api.CheckpointState.load_checkpoint(path)
    # ORT's writer turns a -0.0 property into 0.0 (a flatbuffer default); ortckpt keeps the sign
    # (docs/compat.md)
    out.append([[name, norm(value)] for name, value in again.properties if name != "negative_zero"])
    return out


def case_property_mapping(env: Env) -> list[Any]:
    state = env.load("params")
    props = state.properties
    out: list[Any] = [len(props), list(props)]
    props["b"] = 1
    props["a"] = "x"
    props["c"] = 2.5
    out.append(list(props))  # sorted by name
    props["b"] = "now a string"
    out.append(props["b"])
    props["b"] = 7
    out.append([list(props), len(props), "a" in props, "z" in props])
    out.append(attempt(lambda: props.__delitem__("a")))
    out.append([hasattr(props, "keys"), hasattr(props, "get"), bool(props)])
    return out


# -- loading and saving -------------------------------------------------------------------------


def case_load_and_save_errors(env: Env) -> list[Any]:
    api = env.api
    folder = env.path("not_a_checkpoint")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "notes.txt"), "w") as f:
        f.write("hello")
    garbage = env.path("garbage.ckpt")
    with open(garbage, "wb") as f:
        f.write(b"\x00" * 64)
    state = env.load("params")
    no_dir = os.path.join(env.path("no_dir"), "x.ckpt")
    return [
        attempt(lambda: api.CheckpointState.load_checkpoint(env.path("missing.ckpt"))),
        attempt(lambda: api.CheckpointState.load_checkpoint(folder)),
        attempt(lambda: api.CheckpointState.load_checkpoint(garbage)),
        attempt(lambda: api.CheckpointState.load_checkpoint(123)),
        attempt(lambda: api.CheckpointState(None)),
        attempt(lambda: api.CheckpointState.save_checkpoint(state, no_dir)),
        attempt(lambda: api.CheckpointState.save_checkpoint("not a state", env.path("x.ckpt"))),
    ]


def case_save_and_reload(env: Env) -> list[Any]:
    import pathlib

    api = env.api
    state = env.load("optimizer")
    state.properties["epoch"] = 4
    path = pathlib.Path(env.path("saved.ckpt"))
    out = [attempt(lambda: api.CheckpointState.save_checkpoint(state, path))]
    out.append(attempt(lambda: api.CheckpointState.save_checkpoint(state, str(path) + ".opt", True)))
    for p in (path, str(path) + ".opt"):
        again = api.CheckpointState.load_checkpoint(p)
        out.append([[name, norm(prm.data), prm.requires_grad] for name, prm in again.parameters])
        out.append(list(again.properties))
    return out


CASES: dict[str, Callable[[Env], list[Any]]] = {
    name[len("case_") :]: fn
    for name, fn in sorted(globals().items())
    if name.startswith("case_") and callable(fn)
}
