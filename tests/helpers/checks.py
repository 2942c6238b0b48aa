"""Checks that malformed input only ever raises ortckpt's own exceptions, ``touch_state``, which
reads every piece of a loaded state (used by test_malformed.py and test_fuzz.py), and ``promptly``,
which fails a test whose operation blocks (special files, shared directories)."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import ortckpt
from ortckpt import CheckpointError, CheckpointState

#: The message of the CheckpointError a caught Rust panic becomes (rust/python/src/errors.rs).
PANIC_MARKER = "internal error in ortckpt"


def check_ours(exc: BaseException) -> None:
    """Fails unless ``exc`` is one of our exceptions and not a Rust panic caught at the boundary."""
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    if not isinstance(exc, CheckpointError):
        raise AssertionError(f"{type(exc).__module__}.{type(exc).__qualname__} escaped: {exc}") from exc
    if PANIC_MARKER in str(exc):
        raise AssertionError(f"the native code panicked: {exc}") from exc


def expect_error(
    fn: Callable[..., Any], *args: Any, expected: type[BaseException] = CheckpointError, **kwargs: Any
) -> BaseException:
    """Calls ``fn`` and returns the exception it raised, asserting it is an ``expected`` (and, for
    our exceptions, not a caught Rust panic).

    Catches ``BaseException`` so a pyo3 ``PanicException`` (or a numpy ``ValueError``, a
    ``RecursionError``, ...) fails the test with a clear message instead of escaping as-is.
    """
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        if not isinstance(exc, expected):
            raise AssertionError(
                f"expected {expected.__name__}, got {type(exc).__module__}.{type(exc).__qualname__}: {exc}"
            ) from exc
        if isinstance(exc, CheckpointError):
            check_ours(exc)
        return exc
    raise AssertionError(f"expected {expected.__name__}, but the call returned {result!r}")


def _values(arr: np.ndarray[Any, Any]) -> Any:
    if arr.dtype == np.dtype(object):
        return tuple(str(s) for s in arr.reshape(-1))
    return np.ascontiguousarray(arr).tobytes()


def _array_or_error(get: Callable[[], np.ndarray[Any, Any]], shape: tuple[int, ...] | None) -> Any:
    """The values of a tensor, or the name of the CheckpointError reading them raised."""
    try:
        arr = get()
    except BaseException as exc:
        check_ours(exc)
        return ("error", type(exc).__name__)
    assert isinstance(arr, np.ndarray) and not arr.flags.writeable
    assert shape is None or arr.shape == shape, (arr.shape, shape)
    return (str(arr.dtype), arr.shape, _values(arr))


def touch_state(state: CheckpointState) -> tuple[Any, ...]:
    """Reads every piece of ``state`` (names, flags, dtypes, shapes, every tensor's values, optimizer
    groups, properties, reprs) and returns it as a comparable tuple.

    Reading values may raise our errors (recorded in the result); ``.data`` of nominal parameters
    must. Any other exception propagates: it is the calling test's failure."""
    params: list[tuple[Any, ...]] = []
    for name, p in state.parameters.items():
        assert p.name == name
        meta = (name, p.trainable, p.requires_grad, p.data_type, str(p.dtype), p.shape, p.ndim, p.size)
        repr(p)
        read = partial(getattr, p, "data")
        if p.is_nominal:
            expect_error(read)
            params.append((*meta, "nominal", p.nbytes))
            continue
        params.append((*meta, p.nbytes, _array_or_error(read, p.shape)))
    assert set(state.trainable_parameters) | set(state.frozen_parameters) == set(state.parameters)
    groups = None
    if state.optimizer is not None:
        groups = []
        for gname, g in state.optimizer.items():
            repr(g)
            states = []
            for pname, momentums in g.states.items():
                repr(momentums)
                for mname in momentums:
                    got = _array_or_error(lambda m=momentums, n=mname: m[n], None)  # type: ignore[misc]
                    states.append((pname, mname, got))
            lr = struct.pack("<f", g.initial_learning_rate)  # NaN-safe comparison
            groups.append((gname, g.step, lr, tuple(states)))
    props = []
    for key, value in state.properties.items():
        props.append(
            (key, type(value).__name__, struct.pack("<f", value) if isinstance(value, float) else value)
        )
    repr(state)
    return (state.version, state.is_nominal, state.has_external_data, tuple(params), groups, tuple(props))


def load_or_error(data: bytes, **kwargs: Any) -> CheckpointState | CheckpointError:
    """``load_bytes(data)``: the state, or the ``CheckpointError`` it raised; any other exception
    (including ``PanicException``) fails the calling test."""
    try:
        return ortckpt.load_bytes(data, **kwargs)
    except BaseException as exc:
        try:
            check_ours(exc)
        except AssertionError as failure:
            raise AssertionError(f"{failure} (input {len(data)} bytes: {data[:64].hex()}...)") from exc
        assert isinstance(exc, CheckpointError)
        return exc


def load_or_error_call(fn: Callable[[], Any]) -> Any:
    """``fn()`` or the ``CheckpointError`` it raised; any other exception fails the test."""
    try:
        return fn()
    except BaseException as exc:
        check_ours(exc)
        return exc


def promptly(fn: Callable[[], Any], timeout: float) -> BaseException | None:
    """Run ``fn`` in a daemon thread; its exception (None if it returned). Fails if it is still
    running after ``timeout`` seconds (it blocked)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), f"blocked for more than {timeout} s"
    return outcome[0]
