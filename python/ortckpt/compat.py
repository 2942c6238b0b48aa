"""A drop-in for ``onnxruntime.training.api``'s ``CheckpointState`` (ORT 1.19.2), on ortckpt.

Code written against ORT's Python checkpoint API runs unchanged::

    from ortckpt.compat import CheckpointState      # instead of onnxruntime.training.api

    state = CheckpointState.load_checkpoint("checkpoint")
    for name, param in state.parameters:            # (name, Parameter) pairs, sorted by name
        print(name, param.requires_grad, param.data.shape)
    state.parameters["fc1.weight"] = new_weights    # copied into the existing parameter
    state.parameters["fc1.bias"].data[:] = 0        # .data is the state's own writable buffer
    state.properties["epoch"] = 5                   # ORT's coercions: True -> 1, b"x" -> "x", ...
    CheckpointState.save_checkpoint(state, "checkpoint", include_optimizer_state=False)

Every behaviour a program can observe was taken from ORT 1.19.2 and is checked against it by
tests/ort/test_compat_parity.py, which runs the same test functions on both. The differences, all
where ORT fails or crashes, are listed in docs/compat.md: no training session is ever needed
(ORT refuses ``parameters[name] = array`` without one, and crashes on ``Parameter.data = array``),
``repr(state.parameters)`` works, ``Parameter.copy_from`` exists, and load/save failures are
``RuntimeError`` subclasses that also say which ortckpt error caused them.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import io as _io
from . import state as _state
from ._paths import StrPath
from ._scalars import INT64_MAX, INT64_MIN, PropertyValue
from .errors import CheckpointError, CompatError

__all__ = ["CheckpointState", "CompatError", "Parameter", "Parameters", "Properties"]


def _check_key(name: object, what: str) -> str:
    # pybind11 converts str and bytes to std::string and refuses everything else with TypeError
    if isinstance(name, bytes):
        try:
            return name.decode("utf-8")
        except UnicodeDecodeError:
            raise TypeError(f"{what}: incompatible function arguments (name {name!r} is not UTF-8)") from None
    if not isinstance(name, str):
        raise TypeError(
            f"{what}: incompatible function arguments (name must be str, got {type(name).__name__})"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise TypeError(
            f"{what}: incompatible function arguments (name {name!r} is not valid Unicode)"
        ) from None
    return name


class Parameter:
    """One model parameter, as ``onnxruntime.training.api.checkpoint_state.Parameter``.

    ``data`` is the state's own writable buffer: writing into it changes the state (as in ORT).
    """

    def __init__(self, state: CheckpointState, name: str) -> None:
        self._compat_state = state
        self._name = name

    @property
    def name(self) -> str:
        """The name of the parameter."""
        return self._name

    @property
    def data(self) -> NDArray[Any]:
        """The values: the state's writable array (the same buffer on every access)."""
        return self._compat_state._buffer(self._name)

    @data.setter
    def data(self, value: NDArray[Any]) -> None:
        self._compat_state._copy_into(self._name, value)

    @property
    def grad(self) -> NDArray[Any] | None:
        """The gradient: always None, as in ORT without a training session."""
        return None

    @property
    def requires_grad(self) -> bool:
        """Whether the parameter is trainable."""
        return self._compat_state._state.parameters[self._name].trainable

    def copy_from(self, value: NDArray[Any]) -> None:
        """Copy ``value`` into the parameter (same as assigning ``data``; an ortckpt addition)."""
        self._compat_state._copy_into(self._name, value)

    def __repr__(self) -> str:
        return f"Parameter(name={self.name}, requires_grad={self.requires_grad})"


class Parameters:
    """The parameters of a state, as ``onnxruntime.training.api.checkpoint_state.Parameters``:
    ``[name]``, ``[name] = array`` (copies into the parameter), ``in``, ``len`` and iteration over
    ``(name, Parameter)`` pairs sorted by name."""

    def __init__(self, state: CheckpointState) -> None:
        self._compat_state = state

    def _names(self) -> list[str]:
        return list(self._compat_state._state.parameters)  # sorted by name, like ORT

    def __getitem__(self, name: str) -> Parameter:
        if name not in self:
            raise KeyError(f"Parameter {name} not found.")
        self._compat_state._require_values("get")
        return Parameter(self._compat_state, name)

    def __setitem__(self, name: str, value: NDArray[Any]) -> None:
        if name not in self:
            raise KeyError(f"Parameter {name} not found.")
        self._compat_state._copy_into(name, value)

    def __contains__(self, name: object) -> bool:
        return _check_key(name, "has_parameter()") in self._compat_state._state.parameters

    def __iter__(self) -> Iterator[tuple[str, Parameter]]:
        for name in self._names():
            self._compat_state._require_values("get")
            yield name, Parameter(self._compat_state, name)

    def __len__(self) -> int:
        return len(self._compat_state._state.parameters)

    def __repr__(self) -> str:
        return repr(self._names())


def _float32(value: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def _coerce_property(value: object) -> PropertyValue:
    """ORT's ``add_property(name, Union[int, float, str])`` conversions (pybind11's, in order:
    exact int/float/str first, then converting)."""
    incompatible = TypeError(
        f"add_property(): incompatible function arguments; value must be int, float or str, "
        f"got {type(value).__name__}"
    )
    if isinstance(value, float):  # Python and numpy float64: stored as float32
        return _float32(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            # ORT stores the bytes and fails only when they are read back
            raise UnicodeDecodeError("utf-8", value, 0, len(value), "property value is not UTF-8") from None
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise incompatible from None
        return value
    as_int: int | None = None
    if hasattr(type(value), "__index__"):  # int, bool, numpy integers and bools
        as_int = operator.index(value)  # type: ignore[arg-type]
    elif hasattr(type(value), "__int__"):  # e.g. np.float32: pybind11 truncates it to an int
        try:
            as_int = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError, OverflowError):
            as_int = None
    if as_int is not None and INT64_MIN <= as_int <= INT64_MAX:
        return as_int
    # the float alternative: ints outside int64, objects with __float__
    try:
        as_float = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise incompatible from None
    return _float32(as_float)


class Properties:
    """The user properties of a state, as ``onnxruntime.training.api.checkpoint_state.Properties``:
    ``[name]``, ``[name] = value`` (int, float or str, with ORT's conversions), ``in``, ``len`` and
    iteration over ``(name, value)`` pairs sorted by name. There is no deletion, as in ORT."""

    def __init__(self, state: CheckpointState) -> None:
        self._compat_state = state

    def __getitem__(self, name: str) -> PropertyValue:
        if name not in self:
            raise KeyError(f"Property {name} not found.")
        return self._compat_state._state.properties[_check_key(name, "get_property()")]

    def __setitem__(self, name: str, value: int | float | str) -> None:
        key = _check_key(name, "add_property()")
        self._compat_state._state.properties[key] = _coerce_property(value)

    def __contains__(self, name: object) -> bool:
        return _check_key(name, "has_property()") in self._compat_state._state.properties

    def __iter__(self) -> Iterator[tuple[str, PropertyValue]]:
        props = self._compat_state._state.properties
        for name in sorted(props):
            yield name, props[name]

    def __len__(self) -> int:
        return len(self._compat_state._state.properties)

    def __repr__(self) -> str:
        return repr(sorted(self._compat_state._state.properties))


class CheckpointState:
    """The drop-in for ``onnxruntime.training.api.CheckpointState``.

    Create it with ``CheckpointState.load_checkpoint(path)`` (a checkpoint file of any version, or
    an ORT 1.15 checkpoint folder), or wrap an ``ortckpt.CheckpointState``. ``ortckpt_state`` is the
    wrapped state; its parameters are brought up to date with the writable buffers on ``save_checkpoint``
    and when ``ortckpt_state`` is read.
    """

    def __init__(self, state: _state.CheckpointState) -> None:
        if not isinstance(state, _state.CheckpointState):
            raise TypeError(f"Invalid argument for CheckpointState received {type(state)}")
        self._state = state
        self._buffers: dict[str, NDArray[Any]] = {}
        self._parameters = Parameters(self)
        self._properties = Properties(self)

    @classmethod
    def load_checkpoint(cls, checkpoint_uri: StrPath) -> CheckpointState:
        """Load a checkpoint (complete or nominal). Failures raise ``CompatError`` (a RuntimeError)."""
        path = os.fsdecode(os.fspath(checkpoint_uri))  # TypeError for anything else, as in ORT
        try:
            loaded = _io.load(path)
        except (CheckpointError, OSError) as exc:
            raise CompatError(f"Loading checkpoint from {path} failed: {exc}") from exc
        return cls(loaded)

    @classmethod
    def save_checkpoint(
        cls, state: CheckpointState, checkpoint_uri: StrPath, include_optimizer_state: bool = False
    ) -> None:
        """Save the state (format version 2); the optimizer state only when asked.

        ``include_optimizer_state`` defaults to False because ORT's own ``save_checkpoint`` does
        (``onnxruntime.training.api.CheckpointState.save_checkpoint(state, checkpoint_uri,
        include_optimizer_state=False)``), and code written for ORT relies on it. The native
        ``ortckpt.save`` keeps the optimizer state by default instead: it never drops data it was
        not told to drop.
        """
        state._state  # noqa: B018 - AttributeError for anything but a state, as in ORT
        path = os.fsdecode(os.fspath(checkpoint_uri))
        try:
            _io.save(state.ortckpt_state, path, include_optimizer_state=bool(include_optimizer_state))
        except (CheckpointError, OSError) as exc:
            raise CompatError(f"Failed to save checkpoint to file: {path}: {exc}") from exc

    @property
    def parameters(self) -> Parameters:
        """The model parameters."""
        return self._parameters

    @property
    def properties(self) -> Properties:
        """The user properties."""
        return self._properties

    @property
    def ortckpt_state(self) -> _state.CheckpointState:
        """The wrapped ``ortckpt.CheckpointState``, with every write made through this object."""
        for name, buffer in self._buffers.items():
            param = self._state.parameters[name]
            param.data = buffer  # a copy: later writes to the buffer go through here again
        return self._state

    # -- internals ----------------------------------------------------------------------------

    def _require_values(self, action: str) -> None:
        if self._state.is_nominal:
            verb = "get parameter from" if action == "get" else "copy parameter to"
            raise CompatError(f"Cannot {verb} a nominal state. Please load the parameter states first")

    def _buffer(self, name: str) -> NDArray[Any]:
        buffer = self._buffers.get(name)
        if buffer is None:
            self._require_values("get")
            # the state's own writable copy, handed out on every access (ORT returns a view of
            # the parameter's memory)
            buffer = np.array(self._state.parameters[name].data, copy=True, order="C")
            self._buffers[name] = buffer
        return buffer

    def _copy_into(self, name: str, value: object) -> None:
        self._require_values("copy")
        if not isinstance(value, np.ndarray) or value.dtype.kind in "OUS":
            raise CompatError(
                "Creation of OrtValues is currently only supported from non-string numpy arrays"
            )
        target = self._buffer(name)
        if value.dtype != target.dtype:
            raise CompatError(f"Parameter data type mismatch. Expected: {target.dtype}, Got: {value.dtype}")
        if value.shape != target.shape:
            shape = ",".join(str(d) for d in target.shape)
            got = ",".join(str(d) for d in value.shape)
            raise CompatError(f"Parameter data shape mismatch. Expected: {{{shape}}}, Got: {{{got}}}")
        np.copyto(target, value)
