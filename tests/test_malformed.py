"""Malformed input must raise one of ortckpt's own exceptions: never a crash, a PanicException, a
bare ``ValueError``/``IndexError`` from numpy or Python, or an unbounded allocation.

Specific malformations are crafted with the raw flatbuffer builder of ``tests.helpers.raw_flatbuffer``
(the schema is rust/core/schema/*.fbs). It writes objects front to back (a table, then what it
refers to), so it can express things ORT's writer never would: missing fields, shared sub-objects,
misaligned vectors, and length prefixes patched after the fact. ``test_fuzz.py`` uses the same
builder and ``tests.helpers.checks.touch_state``.

Every failure is checked through ``expect_error``, which catches ``BaseException`` (pyo3's
``PanicException`` is not an ``Exception``) and asserts the exact class family."""

from __future__ import annotations

import errno
import json
import os
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import (
    CheckpointError,
    DuplicateNameError,
    ExternalDataError,
    InvalidCheckpointError,
    Parameter,
    TensorDataError,
    UnsupportedVersionError,
)
from tests.helpers.checks import (
    expect_error,
    load_or_error,
    load_or_error_call,
    touch_state,
)
from tests.helpers.paths import REPO, ort_written_files
from tests.helpers.raw_flatbuffer import (
    COMPLEX128,
    DOUBLE,
    F32,
    FLOAT,
    I32,
    I64,
    INT64,
    STRING,
    UINT8,
    Bytes,
    I64s,
    Repeat,
    Str,
    Table,
    Vec,
    build,
    build_with_labels,
    checkpoint,
    f32,
    group,
    patch_u32,
    tensor,
    valid_file,
)

SAMPLE_FILES = ort_written_files()
SAMPLE_IDS = [f"{p.parent.name}/{p.stem}" for p in SAMPLE_FILES]

# ==================================================================================================
# The builder itself (so the malformation tests below change exactly one thing)
# ==================================================================================================


def test_builder_makes_valid_checkpoints() -> None:
    state = ortckpt.load_bytes(valid_file())
    assert state.version == 2 and not state.is_nominal and not state.has_external_data
    assert list(state.trainable_parameters) == ["s", "w"]
    assert list(state.frozen_parameters) == ["b"]
    np.testing.assert_array_equal(state.parameters["w"].data, np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(state.parameters["b"].data, [10, 11, 12])
    assert state.parameters["s"].data.tolist() == ["a", "héllo"]
    assert state.optimizer is not None
    g = state.optimizer["group0"]
    assert (g.step, g.initial_learning_rate) == (3, 0.5)
    np.testing.assert_array_equal(
        g.states["w"]["momentum0"], np.arange(-1, 5, dtype=np.float32).reshape(2, 3)
    )
    assert dict(state.properties) == {"epoch": 3, "loss": 0.25, "note": "x"}
    touch_state(state)

    # external data, nominal state, ORT's 4-aligned dims, version 1
    ext = build(checkpoint([tensor("e", [2], DOUBLE, external_offset=8)], external=True))
    loaded = ortckpt.load_bytes(ext, external_data=struct.pack("<3d", 0.0, 1.5, -2.5))
    np.testing.assert_array_equal(loaded.parameters["e"].data, [1.5, -2.5])
    nominal = ortckpt.load_bytes(build(checkpoint([tensor("n", [4, 2], INT64, dims_align=4)], nominal=True)))
    assert nominal.is_nominal and nominal.parameters["n"].is_nominal
    assert ortckpt.load_bytes(build(checkpoint([f32("w", [1])], version=1))).version == 1


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=SAMPLE_IDS)
def test_builder_reproduces_sample_files(path: Path) -> None:
    """Rebuilding each ORT-written file's content with the builder gives the same state."""
    state = ortckpt.load(path)

    def t(name: str, p: Parameter) -> Table:
        if p.is_nominal:
            return tensor(name, list(p.shape) or None, p.data_type)
        arr = p.data
        if p.data_type == STRING:
            return tensor(name, list(arr.shape), STRING, strings=[str(s) for s in arr.reshape(-1)])
        return tensor(name, list(arr.shape), p.data_type, np.ascontiguousarray(arr).tobytes())

    groups = None
    if state.optimizer is not None:
        groups = []
        for gname, g in state.optimizer.items():
            states: list[tuple[str | None, list[Table]]] = []
            for pname, ms in g.states.items():
                states.append((pname, [t(m, Parameter(m, ms[m])) for m in ms]))
            groups.append(group(gname, g.step, g.initial_learning_rate, states))
    props = state.properties.items()
    rebuilt = checkpoint(
        [t(n, p) for n, p in state.trainable_parameters.items()],
        [t(n, p) for n, p in state.frozen_parameters.items()],
        nominal=state.is_nominal,
        groups=groups,
        ints=[(k, v) for k, v in props if isinstance(v, int)],
        floats=[(k, v) for k, v in props if isinstance(v, float)],
        strings=[(k, v) for k, v in props if isinstance(v, str)],
    )
    again = ortckpt.load_bytes(build(rebuilt))
    assert touch_state(again)[1:] == touch_state(state)[1:]


# ==================================================================================================
# Truncation, empty input, wrong identifier, not a file
# ==================================================================================================


def _truncation_lengths(n: int) -> list[int]:
    head = list(range(min(n, 400)))
    tail = list(range(400, n, max(1, (n - 400) // 64))) if n > 400 else []
    return sorted(set(head + tail + list(range(max(0, n - 40), n))))


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=SAMPLE_IDS)
def test_truncated_bytes(path: Path) -> None:
    """Every prefix fails with our error, except prefixes that only drop trailing padding, which must
    load to exactly the same content as the whole file."""
    data = path.read_bytes()
    full = touch_state(ortckpt.load_bytes(data))
    loaded_at = []
    for length in _truncation_lengths(len(data)):
        result = load_or_error(data[:length])
        if isinstance(result, CheckpointError):
            if length < 8:
                assert isinstance(result, InvalidCheckpointError), (length, result)
                assert "too short" in str(result)
            continue
        loaded_at.append(length)
        assert data[length:] == bytes(len(data) - length), f"prefix of {length} bytes dropped data but loaded"
        assert touch_state(result) == full, length
    assert all(length > len(data) - 8 for length in loaded_at), loaded_at


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "read"])
@pytest.mark.parametrize(
    "name", ["mlp_adamw_with_optimizer.ckpt", "dtypes.ckpt", "many_tensors.ckpt", "mlp_nominal.ckpt"]
)
def test_truncated_files(tmp_path: Path, name: str, mmap: bool) -> None:
    data = (REPO / "tests" / "data" / name).read_bytes()
    for length in sorted({0, 1, 4, 7, 8, 9, 16, 40, 100, 250, len(data) // 2, len(data) - 8}):
        target = tmp_path / f"cut_{length}.ckpt"
        target.write_bytes(data[:length])
        exc = expect_error(ortckpt.load, target, mmap=mmap, expected=InvalidCheckpointError)
        assert str(target) in str(exc), (length, str(exc))


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "read"])
def test_empty_file(tmp_path: Path, mmap: bool) -> None:
    target = tmp_path / "empty.ckpt"
    target.write_bytes(b"")
    exc = expect_error(ortckpt.load, target, mmap=mmap, expected=InvalidCheckpointError)
    assert str(target) in str(exc) and "too short" in str(exc)


@pytest.mark.parametrize("empty", [b"", bytearray(), memoryview(b""), np.zeros(0, np.uint8)], ids=repr)
def test_empty_buffers(empty: Any) -> None:
    exc = expect_error(ortckpt.load_bytes, empty, expected=InvalidCheckpointError)
    assert "<bytes>" in str(exc)


@pytest.mark.parametrize("identifier", [b"ODTX", b"\0\0\0\0", b"ORTM", b"odtc", b"\xff\xfe\xfd\xfc"])
@pytest.mark.parametrize("path", SAMPLE_FILES[:3] + SAMPLE_FILES[-3:], ids=SAMPLE_IDS[:3] + SAMPLE_IDS[-3:])
def test_wrong_identifier(path: Path, identifier: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[4:8] = identifier
    exc = expect_error(ortckpt.load_bytes, bytes(data), expected=InvalidCheckpointError)
    if identifier == b"ORTM":  # the identifier of ORT format models: the message names the kind
        assert "not an ORT training checkpoint: it is an ORT format model" in str(exc)
    else:
        assert "identifier" in str(exc) and "ODTC" in str(exc)


def test_builder_file_with_wrong_identifier() -> None:
    exc = expect_error(ortckpt.load_bytes, build(checkpoint([f32("w", [1])]), b"ORTX"))
    assert isinstance(exc, InvalidCheckpointError) and "ORTX" in str(exc)


@pytest.mark.parametrize(
    "data",
    [
        b"\0" * 8,
        b"\x08\0\0\0ODTC",
        b"\x04\0\0\0ODTC\0\0\0\0",
        b"\xff\xff\xff\xffODTC" + b"\0" * 64,
        b"\x0c\0\0\0ODTC" + b"\xff" * 32,
        b'{"version": 2}\n',
        b"PK\x03\x04" + b"\0" * 100,
        bytes(range(256)) * 4,
    ],
    ids=lambda d: d[:12].hex(),
)
def test_not_a_checkpoint(data: bytes) -> None:
    expect_error(ortckpt.load_bytes, data, expected=InvalidCheckpointError)


@pytest.mark.parametrize(
    "data", [b"\0\0\0\0ODTC", b"\0\0\0\0ODTC" + b"\0" * 32, b"\x04\0\0\0ODTC" + b"\0" * 32]
)
def test_degenerate_root_table(data: bytes) -> None:
    """A root table whose vtable is all zeros has no fields at all: no version (0), so our error
    (InvalidCheckpointError or UnsupportedVersionError for version 0)."""
    exc = expect_error(ortckpt.load_bytes, data)
    assert isinstance(exc, (InvalidCheckpointError, UnsupportedVersionError)), exc


def test_json_manifest_is_not_a_checkpoint() -> None:
    path = REPO / "tests" / "data" / "mlp_nominal.json"
    exc = expect_error(ortckpt.load, path, expected=InvalidCheckpointError)
    assert str(path) in str(exc)


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "read"])
def test_directory_is_an_os_error(tmp_path: Path, mmap: bool) -> None:
    exc = expect_error(ortckpt.load, tmp_path, mmap=mmap, expected=IsADirectoryError)
    assert not isinstance(exc, CheckpointError)
    assert isinstance(exc, OSError)
    assert exc.errno == errno.EISDIR, exc.errno
    assert exc.filename == str(tmp_path), exc.filename


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "read"])
def test_missing_file_is_an_os_error(tmp_path: Path, mmap: bool) -> None:
    target = tmp_path / "nope.ckpt"
    exc = expect_error(ortckpt.load, target, mmap=mmap, expected=FileNotFoundError)
    assert isinstance(exc, FileNotFoundError) and not isinstance(exc, CheckpointError)
    assert exc.errno == errno.ENOENT and exc.filename == str(target)


# ==================================================================================================
# Flipped bytes in the header and the root vtable
# ==================================================================================================


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=SAMPLE_IDS)
def test_header_and_vtable_bit_flips(path: Path) -> None:
    data = path.read_bytes()
    root = struct.unpack_from("<I", data, 0)[0]
    vtable = root - struct.unpack_from("<i", data, root)[0]
    vtable_len = struct.unpack_from("<H", data, vtable)[0]
    # Checkpoint.module_state (slot 1; absent from files of states without parameters)
    slot = struct.unpack_from("<H", data, vtable + 6)[0] if vtable_len > 6 else 0
    pointers = [*range(4), *range(root, root + 4)] + ([*range(root + slot, root + slot + 4)] if slot else [])

    def flipped(pos: int, bit: int) -> bytes:
        out = bytearray(data)
        out[pos] ^= 1 << bit
        return bytes(out)

    # the identifier: always "not a checkpoint"
    for pos in range(4, 8):
        for bit in range(8):
            exc = expect_error(ortckpt.load_bytes, flipped(pos, bit), expected=InvalidCheckpointError)
            assert "identifier" in str(exc)
    # the root offset, the root table's vtable offset and the offset to the module state: our error,
    # or (when the flip lands on something that verifies, e.g. a table whose first field is 1 or 2)
    # a state that can be read completely
    for pos in pointers:
        for bit in range(8):
            result = load_or_error(flipped(pos, bit))
            if not isinstance(result, CheckpointError):
                touch_state(result)
    # the root vtable (its sizes and field offsets): our error or a fully readable state
    failures = 0
    for pos in range(vtable, vtable + vtable_len):
        for bit in range(8):
            result = load_or_error(flipped(pos, bit))
            if isinstance(result, CheckpointError):
                failures += 1
            else:
                touch_state(result)
    assert failures > 0


# ==================================================================================================
# Tensor data inconsistencies (named in the message)
# ==================================================================================================


def _where(t: Table, where: str) -> dict[str, Any]:
    """Puts tensor ``t`` among the trainable or frozen parameters, or as a momentum."""
    if where == "trainable":
        return {"trainable": [f32("w", [2, 3]), t]}
    if where == "frozen":
        return {"frozen": [f32("b", [3]), t]}
    return {"groups": [group("group0", 3, 0.5, [("w", [f32("momentum0", [2, 3]), t])])]}


WHERE = ["trainable", "frozen", "momentum"]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    ("dims", "data_type", "nbytes"),
    [([2, 3], FLOAT, 20), ([2, 3], FLOAT, 28), ([2, 3], FLOAT, 0), ([], FLOAT, 0), ([0], FLOAT, 4),
     ([5], INT64, 39), ([1], COMPLEX128, 8), ([3], UINT8, 4)],
)  # fmt: skip
def test_raw_data_length_mismatch(where: str, dims: list[int], data_type: int, nbytes: int) -> None:
    t = tensor("bad.tensor", dims, data_type, b"\x01" * nbytes)
    exc = expect_error(ortckpt.load_bytes, valid_file(**_where(t, where)), expected=TensorDataError)
    assert "bad.tensor" in str(exc) and str(nbytes) in str(exc), str(exc)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    ("dims", "data_type"),
    [([2**62], FLOAT), ([2**62], UINT8), ([2**63 - 1], UINT8), ([2**32, 2**32], FLOAT),
     ([2**31, 2**31, 4], FLOAT), ([2**63 - 1, 2], COMPLEX128), ([2**62, 2**62, 0], FLOAT)],
)  # fmt: skip
def test_huge_dims(where: str, dims: list[int], data_type: int) -> None:
    t = tensor("huge", dims, data_type, b"\0" * 16)
    exc = expect_error(ortckpt.load_bytes, valid_file(**_where(t, where)), expected=TensorDataError)
    assert "huge" in str(exc)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("dims", [[-1], [2, -3], [-(2**63)], [0, -1], [-1, -1]])
def test_negative_dims(where: str, dims: list[int]) -> None:
    t = tensor("neg", dims, FLOAT, b"\0" * 4)
    exc = expect_error(ortckpt.load_bytes, valid_file(**_where(t, where)), expected=TensorDataError)
    assert "neg" in str(exc) and "negative" in str(exc)


@pytest.mark.parametrize("dims", [[-1], [3, -2], [2**62, 2**62]])
def test_bad_dims_in_nominal_checkpoint(dims: list[int]) -> None:
    data = build(checkpoint([tensor("w", [2, 3])], [tensor("nom", dims, DOUBLE)], nominal=True))
    exc = expect_error(ortckpt.load_bytes, data, expected=TensorDataError)
    assert "nom" in str(exc)


def test_huge_dims_in_nominal_checkpoint_are_only_metadata() -> None:
    data = build(checkpoint([tensor("w", [2**62, 2])], nominal=True))
    p = ortckpt.load_bytes(data).parameters["w"]
    assert p.is_nominal and p.shape == (2**62, 2) and p.size == 2**63 and p.nbytes == 0
    expect_error(lambda: p.data)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "dims", [[0, 2**62], [2**62, 0], [2**31, 2**31, 0], [0, 2**63 - 1], [0] * 10 + [2**40] * 3]
)
def test_empty_tensor_with_huge_dims(where: str, dims: list[int]) -> None:
    """Zero elements, zero bytes of data: loading may accept it, but then ``.data`` must give an
    empty array of that shape or raise our error, not numpy's "array is too big" ValueError."""
    data = valid_file(**_where(tensor("empty", dims, FLOAT, b""), where))
    state = load_or_error(data)
    if isinstance(state, CheckpointError):
        assert isinstance(state, TensorDataError) and "empty" in str(state)
        return
    if where == "momentum":
        assert state.optimizer is not None
        get = lambda: state.optimizer["group0"].states["w"]["empty"]  # noqa: E731
    else:
        get = lambda: state.parameters["empty"].data  # noqa: E731
    arr = load_or_error_call(get)
    if isinstance(arr, CheckpointError):
        assert isinstance(arr, TensorDataError) and "empty" in str(arr)
    else:
        assert arr.shape == tuple(dims) and arr.size == 0


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    ("ndim", "data_type"), [(33, FLOAT), (65, FLOAT), (65, STRING), (200, UINT8), (65, INT64)]
)
def test_more_dims_than_numpy_supports(where: str, ndim: int, data_type: int) -> None:
    """ONNX has no limit on rank but numpy stops at 32 (numpy 1) or 64 (numpy 2) dims: such a tensor
    must fail with our error (at load or on ``.data``), not numpy's ValueError."""
    if data_type == STRING:
        t = tensor("deep", [1] * ndim, STRING, strings=["x"])
    else:
        size = {FLOAT: 4, UINT8: 1, INT64: 8}[data_type]
        t = tensor("deep", [1] * ndim, data_type, b"\0" * size)
    state = load_or_error(valid_file(**_where(t, where)))
    if isinstance(state, CheckpointError):
        assert isinstance(state, TensorDataError) and "deep" in str(state)
        return
    if where == "momentum":
        assert state.optimizer is not None
        momentums = state.optimizer["group0"].states["w"]
        arr_or_exc: Any = load_or_error_call(lambda: momentums["deep"])
    else:
        arr_or_exc = load_or_error_call(lambda: state.parameters["deep"].data)
    if isinstance(arr_or_exc, CheckpointError):
        assert "deep" in str(arr_or_exc)
    else:
        assert arr_or_exc.shape == (1,) * ndim


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("code", [0, 21, 22, -1, 255, 2**31 - 1, -(2**31)])
def test_unknown_data_type(where: str, code: int) -> None:
    t = tensor("odd.type", [1], code, b"\0" * 4)
    exc = expect_error(ortckpt.load_bytes, valid_file(**_where(t, where)), expected=TensorDataError)
    assert "odd.type" in str(exc) and str(code) in str(exc)


@pytest.mark.parametrize("code", [0, 21, -5])
def test_unknown_data_type_in_nominal_checkpoint(code: int) -> None:
    data = build(checkpoint([tensor("w", None, FLOAT), tensor("odd.type", None, code)], nominal=True))
    exc = expect_error(ortckpt.load_bytes, data, expected=TensorDataError)
    assert "odd.type" in str(exc)


def test_missing_data_type_is_undefined() -> None:
    """A Tensor without ``data_type`` has the schema default, UNDEFINED (0): not a usable type."""
    exc = expect_error(ortckpt.load_bytes, valid_file(frozen=[tensor("untyped", [1], None, b"\0" * 4)]))
    assert isinstance(exc, TensorDataError) and "untyped" in str(exc)


@pytest.mark.parametrize(
    ("t", "fragment"),
    [
        (tensor("str.t", [1], STRING, raw=b"abc"), "raw_data"),
        (tensor("str.t", [3], STRING, strings=["a", "b"]), "3"),
        (tensor("str.t", [1], STRING, strings=["a", "b"]), "2"),
        (tensor("str.t", [2], STRING), "2"),
        (tensor("str.t", [1], FLOAT, raw=b"\0" * 4, strings=["a"]), "string_data"),
        (tensor("str.t", [1], STRING, strings=["a"], external_offset=0), "external"),
    ],
    ids=["string-with-raw", "too-few-strings", "too-many-strings", "no-strings", "numeric-with-strings",
         "external-strings"],
)  # fmt: skip
def test_string_tensor_inconsistencies(t: Table, fragment: str) -> None:
    exc = expect_error(ortckpt.load_bytes, valid_file(frozen=[t]), expected=TensorDataError)
    assert "str.t" in str(exc) and fragment in str(exc), str(exc)


# ==================================================================================================
# External data
# ==================================================================================================


def _ext(t: Table, flag: bool | None = True) -> bytes:
    return build(checkpoint([f32("w", [2]), t], external=flag))


def _x(dims: list[int], offset: int, raw: bytes | None = None) -> Table:
    return tensor("ext.x", dims, FLOAT, raw, external_offset=offset)


@pytest.mark.parametrize(
    ("data", "external", "expected", "fragment"),
    [
        (_ext(_x([2], -2)), b"\0" * 64, ExternalDataError, "-2"),
        (_ext(_x([2], -(2**63))), b"\0" * 64, ExternalDataError, "offset"),
        (_ext(_x([2], 0), flag=False), b"\0" * 64, ExternalDataError, "flag"),
        (_ext(_x([2], 0), flag=None), b"\0" * 64, ExternalDataError, "flag"),
        (_ext(_x([2], 2**63 - 4)), b"\0" * 64, ExternalDataError, "offset"),
        (_ext(_x([2], 60)), b"\0" * 64, ExternalDataError, "64"),
        (_ext(_x([2**40], 0)), b"\0" * 64, ExternalDataError, "64"),
        (_ext(_x([2], 0, b"\0" * 8)), b"\0" * 8, TensorDataError, "external"),
        (_ext(_x([2**62], 0)), b"\0" * 64, TensorDataError, "large"),
        (_ext(_x([-2], 0)), b"\0" * 64, TensorDataError, "negative"),
    ],
    ids=["offset-minus-2", "offset-min", "flag-false", "flag-missing", "offset-overflow", "past-end",
         "huge-dims", "inline-and-external", "size-overflow", "negative-dim"],
)  # fmt: skip
def test_external_data_errors(
    data: bytes, external: bytes | None, expected: type[CheckpointError], fragment: str
) -> None:
    exc = expect_error(ortckpt.load_bytes, data, external_data=external, expected=expected)
    assert "ext.x" in str(exc) and fragment in str(exc) and "<bytes>" in str(exc), str(exc)


@pytest.mark.parametrize(
    ("offsets", "momentum", "overlap"),
    [((0, 8), False, True), ((8, 0), False, True), ((0, 15), False, True), ((0, 16), False, False),
     ((0, 0), True, True), ((0, 16), True, False)],
)  # fmt: skip
def test_overlapping_external_ranges(offsets: tuple[int, int], momentum: bool, overlap: bool) -> None:
    """Two 16-byte tensors (the second one a momentum or a parameter) in one external file."""
    first = tensor("ext.a", [4], FLOAT, external_offset=offsets[0])
    other = tensor("ext.b", [4], FLOAT, external_offset=offsets[1])
    if momentum:
        data = build(checkpoint([first], external=True, groups=[group("g", 1, 0.1, [("ext.a", [other])])]))
    else:
        data = build(checkpoint([first], [other], external=True))
    if not overlap:
        touch_state(ortckpt.load_bytes(data, external_data=bytes(64)))
        return
    exc = expect_error(ortckpt.load_bytes, data, external_data=bytes(64), expected=ExternalDataError)
    assert "ext.a" in str(exc) and "ext.b" in str(exc), str(exc)


def test_external_data_not_given() -> None:
    exc = expect_error(ortckpt.load_bytes, _ext(_x([2], 0)), expected=ExternalDataError)
    assert "external" in str(exc) and "<bytes>" in str(exc), str(exc)


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "read"])
def test_external_data_file_missing_or_short(tmp_path: Path, mmap: bool) -> None:
    target = tmp_path / "ext.ckpt"
    target.write_bytes(_ext(_x([4], 8)))
    exc = expect_error(ortckpt.load, target, mmap=mmap, expected=ExternalDataError)
    assert str(target) in str(exc) and "ext.ckpt.data" in str(exc)
    sidecar = tmp_path / "ext.ckpt.data"
    sidecar.write_bytes(b"\0" * 23)  # needs 8 + 16
    exc = expect_error(ortckpt.load, target, mmap=mmap, expected=ExternalDataError)
    assert str(target) in str(exc) and "ext.x" in str(exc) and "23" in str(exc)
    sidecar.write_bytes(b"")
    expect_error(ortckpt.load, target, mmap=mmap, expected=ExternalDataError)
    sidecar.write_bytes(struct.pack("<2f4f", 9, 9, 1, 2, 3, 4))
    np.testing.assert_array_equal(ortckpt.load(target, mmap=mmap).parameters["ext.x"].data, [1, 2, 3, 4])


# ==================================================================================================
# Duplicate names, versions, missing fields
# ==================================================================================================


@pytest.mark.parametrize(
    "parts",
    [
        {"trainable": [f32("dup", [1]), f32("dup", [2])]},
        {"trainable": [f32("dup", [1])], "frozen": [f32("dup", [1])]},
        {"frozen": [f32("dup", [1]), f32("x", [1]), f32("dup", [1])]},
        {"trainable": [tensor("dup", None), tensor("dup", None, DOUBLE)], "nominal": True},
        {"groups": [group("g", 1, 0.1, [("w", [f32("dup", [1]), f32("dup", [1])])])]},
        {"groups": [group("g", 1, 0.1, [("dup", [f32("m", [1])]), ("dup", [f32("m", [1])])])]},
        {"groups": [group("dup", 1, 0.1, []), group("dup", 2, 0.2, [])]},
        {"ints": [("dup", 1), ("dup", 2)]},
        {"ints": [("dup", 1)], "floats": [("dup", 1.0)]},
        {"ints": [("x", 1)], "strings": [("dup", "a"), ("dup", "b")]},
        {"floats": [("dup", 1.0)], "strings": [("dup", "a")]},
    ],
    ids=["trainable", "trainable-frozen", "frozen", "nominal", "momentum", "state-param", "group",
         "int-props", "int-float-props", "string-props", "float-string-props"],
)  # fmt: skip
def test_duplicate_names(parts: dict[str, Any]) -> None:
    if parts.get("nominal"):
        data = build(checkpoint(**parts))
    else:
        data = valid_file(**{"ints": None, "floats": None, "strings": None, **parts})
    exc = expect_error(ortckpt.load_bytes, data, expected=DuplicateNameError)
    assert "dup" in str(exc)


def test_unicode_duplicate_names_are_named() -> None:
    exc = expect_error(
        ortckpt.load_bytes,
        valid_file(trainable=[f32("ĉefa.ŝ", [1])], frozen=[f32("ĉefa.ŝ", [2])]),
        expected=DuplicateNameError,
    )
    assert "ĉefa.ŝ" in str(exc)


def test_names_differing_only_in_normalization_are_distinct() -> None:
    """'é' precomposed and decomposed are different byte strings, hence different names."""
    state = ortckpt.load_bytes(valid_file(trainable=[f32("\u00e9", [1])], frozen=[f32("e\u0301", [1])]))
    assert sorted(state.parameters) == sorted(["\u00e9", "e\u0301"])


@pytest.mark.parametrize("version", [0, 3, 4, 100, -1, 2**31 - 1, -(2**31), None])
def test_unsupported_version(version: int | None) -> None:
    exc = expect_error(ortckpt.load_bytes, valid_file(version=version), expected=UnsupportedVersionError)
    assert str(version or 0) in str(exc)


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "read"])
def test_unsupported_version_names_the_file(tmp_path: Path, mmap: bool) -> None:
    target = tmp_path / "future.ckpt"
    target.write_bytes(valid_file(version=3))
    exc = expect_error(ortckpt.load, target, mmap=mmap, expected=UnsupportedVersionError)
    assert str(target) in str(exc) and "3" in str(exc)


@pytest.mark.parametrize(
    "data",
    [
        build(checkpoint([f32("w", [1]), tensor(None, [1], FLOAT, b"\0" * 4)])),
        build(checkpoint([tensor(None, None, FLOAT)], nominal=True)),
        valid_file(groups=[group(None, 1, 0.1, [])]),
        valid_file(groups=[group("g", 1, 0.1, [(None, [f32("m", [1])])])]),
        valid_file(ints=[(None, 1)]),
        valid_file(floats=[(None, 1.0)]),
        valid_file(strings=[(None, "v")]),
        valid_file(strings=[("k", None)]),
    ],
    ids=["tensor-name", "nominal-tensor-name", "group-name", "state-param-name",
         "int-prop-name", "float-prop-name", "string-prop-name", "string-prop-value"],
)  # fmt: skip
def test_missing_required_fields(data: bytes) -> None:
    expect_error(ortckpt.load_bytes, data, expected=InvalidCheckpointError)


@pytest.mark.parametrize("module", [True, False], ids=["empty-module-state", "no-module-state"])
def test_empty_checkpoint_is_valid(module: bool) -> None:
    """ORT writes no module_state table for a state without parameters (tests/data/empty_state.ckpt)
    and loads it as no parameters."""
    state = ortckpt.load_bytes(build(checkpoint(module=module, ints=[("epoch", 1)])))
    assert len(state.parameters) == 0 and state.optimizer is None and dict(state.properties) == {"epoch": 1}
    assert len(ortckpt.load_bytes(build(Table({0: I32(2)}))).parameters) == 0
    exc = expect_error(ortckpt.load_bytes, build(Table({})), expected=UnsupportedVersionError)
    assert "version 0" in str(exc)


# ==================================================================================================
# Lies in the flatbuffer structure
# ==================================================================================================


def _labelled() -> tuple[bytes, dict[str, int]]:
    return build_with_labels(
        checkpoint(
            [
                tensor("w", [2, 2], FLOAT, b"\0" * 16, label="w"),
                tensor("s", [2], STRING, strings=["a", "b"], label="s"),
            ],
            [tensor("b", [2], FLOAT, b"\0" * 8, label="b")],
        )
    )  # fmt: skip


@pytest.mark.parametrize("value", [0x7FFFFFFF, 0xFFFFFFFF, 0x10000, 1 << 28, 0x80000000])
@pytest.mark.parametrize("what", ["w.raw", "w.dims", "w.name", "s.strings", "trainable", "frozen", "b.raw"])
def test_length_prefix_lies(what: str, value: int) -> None:
    """A vector or string claiming more elements than the buffer holds."""
    data, labels = _labelled()
    expect_error(ortckpt.load_bytes, patch_u32(data, labels[what], value), expected=InvalidCheckpointError)


@pytest.mark.parametrize("value", [12, 15, 17, 0])
def test_raw_length_prefix_disagreeing_with_dims(value: int) -> None:
    """A raw_data length that stays inside the buffer but is not what the dims need."""
    data, labels = _labelled()
    exc = expect_error(ortckpt.load_bytes, patch_u32(data, labels["w.raw"], value), expected=TensorDataError)
    assert '"w"' in str(exc) and str(value) in str(exc)


@pytest.mark.parametrize("what", ["w.dims", "w.name", "s.strings", "trainable"])
def test_small_length_prefix_lies_inside_the_buffer(what: str) -> None:
    """Lengths that stay in the buffer but swallow the following bytes: our error, or (when the
    bytes happen to form a valid value) a state that can be read completely."""
    data, labels = _labelled()
    for value in range(0, 24):
        result = load_or_error(patch_u32(data, labels[what], value))
        if not isinstance(result, CheckpointError):
            touch_state(result)


@pytest.mark.parametrize("value", [1, 2, 3, 0x7FFFFFFF, 0xFFFFFFFC, 0x80000000])
@pytest.mark.parametrize("which", ["root", "first-trainable"])
def test_offsets_out_of_range(which: str, value: int) -> None:
    data, labels = _labelled()
    at = 0 if which == "root" else labels["trainable"] + 4
    expect_error(ortckpt.load_bytes, patch_u32(data, at, value), expected=InvalidCheckpointError)


def test_tensor_offset_of_zero_points_at_itself() -> None:
    data, labels = _labelled()
    expect_error(
        ortckpt.load_bytes, patch_u32(data, labels["trainable"] + 4, 0), expected=InvalidCheckpointError
    )


@pytest.mark.parametrize("value", [0, 1, 0x7FFFFFFF, -0x7FFFFFFF, 2, -4])
def test_vtable_offset_out_of_range(value: int) -> None:
    data, labels = _labelled()
    out = bytearray(data)
    struct.pack_into("<i", out, labels["w"], value)
    expect_error(ortckpt.load_bytes, bytes(out), expected=InvalidCheckpointError)


@pytest.mark.parametrize("at_end", [False, True])
def test_unterminated_string(at_end: bool) -> None:
    """A string whose byte after its last character is not NUL (or is past the end of the buffer)."""
    if at_end:
        data = build(checkpoint([Table({3: I32(FLOAT), 0: Str("abc", terminate=False)})], nominal=True))
        expect_error(ortckpt.load_bytes, data, expected=InvalidCheckpointError)
        return
    data, labels = build_with_labels(checkpoint([tensor("abcX", [1], FLOAT, b"\0" * 4, label="t")]))
    assert ortckpt.load_bytes(data).parameters["abcX"].shape == (1,)
    expect_error(ortckpt.load_bytes, patch_u32(data, labels["t.name"], 3), expected=InvalidCheckpointError)


@pytest.mark.parametrize("bad", [b"\xff\xfe", b"a\xc3", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80"])
@pytest.mark.parametrize("where", ["tensor-name", "string-value", "property-name", "property-value", "group"])
def test_invalid_utf8(where: str, bad: bytes) -> None:
    s: Any = Str(bad)
    if where == "tensor-name":
        data = valid_file(frozen=[Table({0: s, 2: I64s([1]), 3: I32(FLOAT), 4: Bytes(b"\0" * 4)})])
    elif where == "string-value":
        data = valid_file(frozen=[Table({0: Str("t"), 2: I64s([1]), 3: I32(STRING), 5: Vec([s])})])
    elif where == "property-name":
        data = valid_file(strings=[(s, "v")])
    elif where == "property-value":
        data = valid_file(strings=[("k", s)])
    else:
        data = valid_file(groups=[Table({0: s, 1: I64(1), 2: F32(0.1), 3: Vec([])})])
    expect_error(ortckpt.load_bytes, data, expected=InvalidCheckpointError)


def _field_position(data: bytes, table: int, slot: int) -> tuple[int, int]:
    """(where the vtable entry for ``slot`` is, the field's position)."""
    vtable = table - struct.unpack_from("<i", data, table)[0]
    entry = vtable + 4 + 2 * slot
    return entry, table + struct.unpack_from("<H", data, entry)[0]


def test_misaligned_int64_field() -> None:
    """The vtable places ``external_data_offset`` (int64) on a 4-byte, not 8-byte, boundary."""
    data, labels = build_with_labels(
        checkpoint([tensor("w", [1], FLOAT, b"\0" * 4, external_offset=-1, label="w")])
    )
    entry, pos = _field_position(data, labels["w"], 6)
    assert pos % 8 == 0
    out = bytearray(data)
    struct.pack_into("<H", out, entry, pos - labels["w"] - 4)
    expect_error(ortckpt.load_bytes, bytes(out), expected=InvalidCheckpointError)


@pytest.mark.parametrize("shift", [1, 2, 3])
@pytest.mark.parametrize("what", ["dims", "raw", "name"])
def test_misaligned_vector(what: str, shift: int) -> None:
    """A uoffset that makes a vector's or string's length prefix not 4-byte aligned."""
    data, labels = _labelled()
    slot = {"name": 0, "dims": 2, "raw": 4}[what]
    _, pos = _field_position(data, labels["w"], slot)
    off = struct.unpack_from("<I", data, pos)[0]
    expect_error(ortckpt.load_bytes, patch_u32(data, pos, off + shift), expected=InvalidCheckpointError)


@pytest.mark.parametrize("count", [1_000, 50_000])
def test_shared_subobjects_do_not_amplify(count: int) -> None:
    """One tensor table with a 4 KiB name referenced ``count`` times. Indexing it would copy the name
    ``count`` times: it is rejected (apparent size) or reported as duplicates, never expanded."""
    data = build(checkpoint(Repeat(tensor("n" * 4096, [1], FLOAT, b"\0" * 4), count)))
    exc = expect_error(ortckpt.load_bytes, data)
    assert isinstance(exc, (InvalidCheckpointError, DuplicateNameError)), exc


# ==================================================================================================
# Whatever loads can be saved again
# ==================================================================================================


@pytest.mark.parametrize(
    "data",
    [
        # ORT re-saving a nominal state writes 1-element scalars with uninitialized bytes and keeps
        # is_nominal_state (docs/format.md section 3)
        build(checkpoint([tensor("w", [], FLOAT, bytes(4))], [tensor("b", [], 7, bytes(8))], nominal=True)),
        build(checkpoint([tensor("w", [2], FLOAT, b"\0" * 8), tensor("n", None, FLOAT)], nominal=True)),
    ],
    ids=["ort-nominal-resave", "mixed"],
)  # fmt: skip
def test_nominal_flag_with_values_loads_consistently(data: bytes) -> None:
    """A nominal-flagged file whose tensors carry raw_data: our error at load, or a state that
    ``serialize`` accepts (not one that loads and then cannot be saved)."""
    state = load_or_error(data)
    if isinstance(state, CheckpointError):
        return
    touch_state(state)
    saved = load_or_error_call(lambda: ortckpt.serialize(state))
    assert not isinstance(saved, CheckpointError), (
        f"loaded (is_nominal={state.is_nominal}) but cannot be saved: {saved}"
    )
    again = ortckpt.load_bytes(saved)
    assert sorted(again.parameters) == sorted(state.parameters)


# ==================================================================================================
# Error messages name the tensor and the file
# ==================================================================================================

NAMED_CASES: dict[str, tuple[bytes, type[CheckpointError], str]] = {
    "length": (valid_file(frozen=[tensor("fc9.w", [2], FLOAT, b"\0" * 7)]), TensorDataError, "fc9.w"),
    "dims": (valid_file(frozen=[tensor("fc9.w", [-2], FLOAT, b"")]), TensorDataError, "fc9.w"),
    "overflow": (valid_file(frozen=[tensor("fc9.w", [2**62], FLOAT, b"")]), TensorDataError, "fc9.w"),
    "dtype": (valid_file(frozen=[tensor("fc9.w", [1], 99, b"\0")]), TensorDataError, "fc9.w"),
    "momentum": (
        valid_file(groups=[group("g", 1, 0.1, [("w", [tensor("momentum7", [3], FLOAT, b"")])])]),
        TensorDataError,
        "momentum7",
    ),
    "dup": (valid_file(frozen=[f32("ŝ.w", [1]), f32("ŝ.w", [1])]), DuplicateNameError, "ŝ.w"),
    "string": (valid_file(frozen=[tensor("lbl", [3], STRING, strings=["x"])]), TensorDataError, "lbl"),
    "external": (_ext(tensor("ext.w", [4], FLOAT, external_offset=-7)), ExternalDataError, "ext.w"),
    "no-external": (_ext(tensor("ext.w", [4], FLOAT, external_offset=0)), ExternalDataError, "ext.ckpt.data"),
}  # fmt: skip


#: Cases a memory-mapped load leaves for the tensor's first use: its stored length sits beside its
#: values, so loading compares it only when the values are used (docs/guarantees.md).
CHECKED_ON_FIRST_USE_WITH_MMAP = {"length", "momentum"}


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "read"])
@pytest.mark.parametrize("case", list(NAMED_CASES))
def test_messages_name_tensor_and_path(tmp_path: Path, case: str, mmap: bool) -> None:
    data, expected, name = NAMED_CASES[case]
    target = tmp_path / "ext.ckpt"
    target.write_bytes(data)
    if mmap and case in CHECKED_ON_FIRST_USE_WITH_MMAP:
        state = ortckpt.load(target)
        uses: list[Callable[[], object]] = [state.to_bytes]
        if name in state.parameters:
            uses += [lambda: state.parameters[name].data, state.to_numpy]
        for use in uses:
            exc = expect_error(use, expected=expected)
            assert name in str(exc) and str(target) in str(exc), str(exc)
    else:
        exc = expect_error(ortckpt.load, target, mmap=mmap, expected=expected)
    assert name in str(exc), str(exc)
    assert str(target) in str(exc), str(exc)
    exc = expect_error(ortckpt.load_bytes, data, expected=expected)
    assert "<bytes>" in str(exc), str(exc)


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "read"])
def test_nominal_checkpoint_with_valueless_momentums(tmp_path: Path, mmap: bool) -> None:
    """Momentums without values in a nominal checkpoint (the native index accepts them as nominal
    tensors): either they load as nominal (``.data`` raises our error) or loading raises our error
    naming the file and the momentum."""
    data = build(
        checkpoint(
            [tensor("w", None)], nominal=True, groups=[group("g", 1, 0.1, [("w", [tensor("m0", None)])])]
        )
    )
    target = tmp_path / "nominal.ckpt"
    target.write_bytes(data)
    try:
        state = ortckpt.load(target, mmap=mmap)
    except BaseException as exc:
        assert isinstance(exc, CheckpointError), f"{type(exc).__name__}: {exc}"
        assert "m0" in str(exc) and str(target) in str(exc), str(exc)
    else:
        assert state.optimizer is not None
        expect_error(lambda: state.optimizer["g"].states["w"]["m0"])  # type: ignore[index]


# ==================================================================================================
# Memory: hostile inputs never allocate more than the input size
# ==================================================================================================

_MEMORY_PROBE = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    import ortckpt

    def status_mib(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
        raise KeyError(key)

    def start():
        \"\"\"The baseline: current RSS after resetting the peak (VmHWM, Linux >= 4.0), else the
        lifetime peak so far (ru_maxrss, which cannot be reset).\"\"\"
        global resettable
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            resettable = True
            return status_mib("VmRSS")
        except OSError:
            resettable = False
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def peak():
        if resettable:
            return status_mib("VmHWM")
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    mode, cases = sys.argv[1], json.loads(sys.argv[2])
    out = {}
    for name, path in cases.items():
        data = open(path, "rb").read() if mode == "bytes" else None
        before = start()
        outcome = "loaded"
        try:
            state = ortckpt.load_bytes(data) if mode == "bytes" else ortckpt.load(path, mmap=(mode == "mmap"))
            for p in state.parameters.values():
                p.shape, p.size, p.nbytes, repr(p)
                try:
                    p.data
                except ortckpt.CheckpointError as exc:
                    outcome = "data:" + type(exc).__name__
        except BaseException as exc:
            outcome = type(exc).__module__ + "." + type(exc).__name__
        out[name] = {"outcome": outcome, "growth_mib": peak() - before}
        state = data = None
    before = start()
    control = np.ones(128 * 2**20, dtype=np.uint8)  # the probe must see a real 128 MiB allocation
    out["control"] = {"outcome": "loaded", "growth_mib": peak() - before}
    print(json.dumps(out))
    """
)


def _hostile_files(tmp_path: Path) -> dict[str, tuple[Path, set[str]]]:
    """name -> (file, expected outcome)."""
    data, labels = _labelled()
    big = "n" * 4096
    tde, ice, ede = ({f"ortckpt.{e}Error"} for e in ("TensorData", "InvalidCheckpoint", "ExternalData"))
    rejected, nominal = ice | {"ortckpt.DuplicateNameError"}, {"data:CheckpointError"}
    deferred_ice = {"data:InvalidCheckpointError"}
    shared_tensor = Repeat(tensor(big, [1], FLOAT, b"\0" * 4), 100_000)
    shared_string = Table({0: Str("s"), 2: I64s([100_000]), 3: I32(STRING), 5: Repeat(Str(big), 100_000)})
    cases: dict[str, tuple[bytes, set[str]]] = {
        "dims-2^62-uint8": (valid_file(frozen=[tensor("h", [2**62], UINT8, b"\0" * 64)]), tde),
        "dims-2^62-float": (valid_file(frozen=[tensor("h", [2**62], FLOAT, b"\0" * 64)]), tde),
        "dims-2^31x2^31-uint8": (valid_file(frozen=[tensor("h", [2**31, 2**31], UINT8)]), tde),
        # a mapped load compares the stored length when the values are first used
        "raw-length-2^31": (patch_u32(data, labels["w.raw"], 0x7FFFFFF0), ice | deferred_ice),
        "dims-length-2^29": (patch_u32(data, labels["w.dims"], 0x1FFFFFFF), ice),
        "tensor-count-2^30": (patch_u32(data, labels["trainable"], 0x3FFFFFFF), ice),
        "string-count-2^30": (patch_u32(data, labels["s.strings"], 0x3FFFFFFF), ice),
        "external-2^40-floats": (_ext(tensor("h", [2**40], FLOAT, external_offset=0)), ede),
        "shared-tensor-x100k": (build(checkpoint(shared_tensor)), rejected),
        "shared-string-x100k": (valid_file(frozen=[shared_string]), rejected),
        "nominal-2^62": (build(checkpoint([tensor("h", [2**62, 2])], nominal=True)), nominal),
    }  # fmt: skip
    out = {}
    for name, (content, expected) in cases.items():
        path = tmp_path / f"{name}.ckpt"
        path.write_bytes(content)
        (tmp_path / f"{name}.ckpt.data").write_bytes(b"\0" * 64)
        out[name] = (path, expected)
    return out


@pytest.mark.parametrize("mode", ["mmap", "read", "bytes"])
def test_hostile_inputs_do_not_allocate(tmp_path: Path, mode: str) -> None:
    cases = _hostile_files(tmp_path)
    largest = max(path.stat().st_size for path, _ in cases.values())
    assert largest < 2 * 2**20
    proc = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, mode, json.dumps({k: str(p) for k, (p, _) in cases.items()})],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    assert proc.returncode == 0, f"probe crashed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["control"]["growth_mib"] > 100, report["control"]  # the measurement works
    limit_mib = 50
    problems = []
    for name, (_, expected) in cases.items():
        got = report[name]
        if got["outcome"] not in expected:
            problems.append(f"{name}: expected one of {sorted(expected)}, got {got['outcome']}")
        if got["growth_mib"] > limit_mib:
            problems.append(f"{name}: peak RSS grew by {got['growth_mib']:.0f} MiB")
    assert not problems, problems
