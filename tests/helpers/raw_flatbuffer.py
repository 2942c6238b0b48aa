"""A tiny flatbuffer builder for crafted checkpoints, valid and deliberately malformed.

The schema is rust/core/schema/*.fbs. The builder writes objects front to back (a table, then what
it refers to), so it can express things ORT's writer never would: missing fields, shared
sub-objects (``Repeat``), misaligned vectors (``I64s(align=4)``, ``Bytes(align=...)``), strings
without their NUL terminator, and length prefixes patched after the fact (``build_with_labels`` +
``patch_u32``).

Why not the ``flatbuffers`` package's ``Builder``: it writes back to front and always aligns and
terminates what it writes (that is its job), so the malformations above, which are what the tests
need, cannot be expressed with it. This is the one raw builder of the Python suite; the Rust twin
is ``rust/core/src/test_support``.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any


@dataclass
class I32:
    value: int


@dataclass
class I64:
    value: int


@dataclass
class F32:
    value: float


@dataclass
class Bool:
    value: bool


@dataclass
class Str:
    value: str | bytes
    label: str | None = None
    terminate: bool = True  # False omits the NUL terminator flatbuffers requires


@dataclass
class Bytes:
    """``[uint8]`` whose first element lands on an ``align``-byte boundary of the buffer."""

    value: bytes
    align: int = 16
    label: str | None = None


@dataclass
class I64s:
    """``[int64]``; ``align=4`` puts the elements on a 4- (not 8-) byte boundary, as ORT sometimes does."""

    values: list[int]
    align: int = 8
    label: str | None = None


@dataclass
class Vec:
    """A vector of offsets to tables or strings."""

    items: list[Any]
    label: str | None = None


@dataclass
class Repeat:
    """A vector of ``count`` offsets that all point to the single object ``item``."""

    item: Any
    count: int
    label: str | None = None


@dataclass
class Table:
    fields: dict[int, Any] = field(default_factory=dict)
    label: str | None = None


Value = I32 | I64 | F32 | Bool | Str | Bytes | I64s | Vec | Repeat | Table
_SCALARS: dict[type, tuple[str, int]] = {I32: ("<i", 4), I64: ("<q", 8), F32: ("<f", 4), Bool: ("<?", 1)}


class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()
        self.labels: dict[str, int] = {}

    def pad(self, align: int, extra: int = 0) -> None:
        while (len(self.buf) + extra) % align:
            self.buf.append(0)

    def uoffset(self, at: int, target: int) -> None:
        assert target > at, "uoffsets point forward"
        struct.pack_into("<I", self.buf, at, target - at)

    def write(self, obj: Value) -> int:
        """Appends ``obj``; returns the position a uoffset to it must point at."""
        if isinstance(obj, Table):
            pos = self._table(obj)
        elif isinstance(obj, Str):
            raw = obj.value.encode("utf-8") if isinstance(obj.value, str) else obj.value
            self.pad(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(raw)) + raw + (b"\0" if obj.terminate else b"")
        elif isinstance(obj, Bytes):
            self.pad(obj.align, 4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj.value)) + obj.value
        elif isinstance(obj, I64s):
            self.pad(obj.align, 4)
            if obj.align == 4 and (len(self.buf) + 4) % 8 == 0:
                self.buf += b"\0" * 4
            pos = len(self.buf)
            self.buf += struct.pack(f"<I{len(obj.values)}q", len(obj.values), *obj.values)
        elif isinstance(obj, Vec):
            self.pad(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj.items)) + b"\0" * (4 * len(obj.items))
            for i, item in enumerate(obj.items):
                self.uoffset(pos + 4 + 4 * i, self.write(item))
        elif isinstance(obj, Repeat):
            self.pad(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", obj.count) + b"\0" * (4 * obj.count)
            target = self.write(obj.item)
            for i in range(obj.count):
                struct.pack_into("<I", self.buf, pos + 4 + 4 * i, target - (pos + 4 + 4 * i))
        else:
            raise TypeError(f"cannot write {obj!r} out of line")
        if obj.label is not None:
            self.labels[obj.label] = pos
        return pos

    def _table(self, t: Table) -> int:
        slots = sorted(t.fields)
        nslots = slots[-1] + 1 if slots else 0
        self.pad(2)
        vtable = len(self.buf)
        self.buf += b"\0" * (4 + 2 * nslots)
        self.pad(8)
        pos = len(self.buf)
        self.buf += b"\0" * 4  # soffset to the vtable, patched below
        children: list[tuple[int, Value]] = []
        for slot in slots:
            value = t.fields[slot]
            fmt, size = _SCALARS.get(type(value), ("<I", 4))
            self.pad(size)
            struct.pack_into("<H", self.buf, vtable + 4 + 2 * slot, len(self.buf) - pos)
            if type(value) in _SCALARS:
                self.buf += struct.pack(fmt, value.value)
            else:
                children.append((len(self.buf), value))
                self.buf += b"\0" * 4
        struct.pack_into("<HH", self.buf, vtable, 4 + 2 * nslots, len(self.buf) - pos)
        struct.pack_into("<i", self.buf, pos, pos - vtable)
        for at, child in children:
            self.uoffset(at, self.write(child))
        return pos


def build_with_labels(root: Table, identifier: bytes = b"ODTC") -> tuple[bytes, dict[str, int]]:
    """The flatbuffer bytes and the positions of every labelled object (its length prefix for
    vectors and strings, its start for tables)."""
    w = _Writer()
    w.buf += b"\0\0\0\0" + identifier
    w.uoffset(0, w.write(root))
    return bytes(w.buf), w.labels


def build(root: Table, identifier: bytes = b"ODTC") -> bytes:
    return build_with_labels(root, identifier)[0]


# -- the checkpoint schema --------------------------------------------------------------------------

FLOAT, UINT8, INT64, STRING, DOUBLE, COMPLEX128 = 1, 2, 7, 8, 11, 15


def tensor(
    name: str | None,
    dims: list[int] | None = None,
    data_type: int | None = FLOAT,
    raw: bytes | None = None,
    strings: list[str] | None = None,
    external_offset: int | None = None,
    *,
    label: str | None = None,
    dims_align: int = 8,
) -> Table:
    """A ``Tensor`` table; ``None`` leaves a field out."""
    fields: dict[int, Any] = {}
    if name is not None:
        fields[0] = Str(name, label=label and f"{label}.name")
    if dims is not None:
        fields[2] = I64s(list(dims), align=dims_align, label=label and f"{label}.dims")
    if data_type is not None:
        fields[3] = I32(data_type)
    if raw is not None:
        fields[4] = Bytes(raw, label=label and f"{label}.raw")
    if strings is not None:
        fields[5] = Vec([Str(s) for s in strings], label=label and f"{label}.strings")
    if external_offset is not None:
        fields[6] = I64(external_offset)
    return Table(fields, label=label)


def f32(name: str, dims: list[int], *, label: str | None = None, start: float = 0.0) -> Table:
    """A float32 tensor holding start, start + 1, ..."""
    count = math.prod(dims)
    return tensor(
        name, dims, FLOAT, struct.pack(f"<{count}f", *(start + i for i in range(count))), label=label
    )


def group(name: str | None, step: int, lr: float, states: list[tuple[str | None, list[Table]]]) -> Table:
    state_tables = []
    for param, momentums in states:
        fields: dict[int, Any] = {1: Vec(momentums)}
        if param is not None:
            fields[0] = Str(param)
        state_tables.append(Table(fields))
    fields = {1: I64(step), 2: F32(lr), 3: Vec(state_tables)}
    if name is not None:
        fields[0] = Str(name)
    return Table(fields)


def checkpoint(
    trainable: list[Table] | Repeat | None = None,
    frozen: list[Table] | None = None,
    *,
    version: int | None = 2,
    nominal: bool | None = None,
    external: bool | None = None,
    groups: list[Table] | None = None,
    ints: list[tuple[str | None, int]] | None = None,
    floats: list[tuple[str | None, float]] | None = None,
    strings: list[tuple[str | None, str | None]] | None = None,
    module: bool = True,
) -> Table:
    """A ``Checkpoint`` table; ``None`` leaves a field out."""
    ms: dict[int, Any] = {}
    if trainable is not None:
        ms[0] = trainable if isinstance(trainable, Repeat) else Vec(trainable, label="trainable")
    if frozen is not None:
        ms[1] = Vec(frozen, label="frozen")
    if nominal is not None:
        ms[2] = Bool(nominal)
    if external is not None:
        ms[3] = Bool(external)
    root: dict[int, Any] = {}
    if version is not None:
        root[0] = I32(version)
    if module:
        root[1] = Table(ms, label="module_state")
    if groups is not None:
        root[2] = Vec(groups)

    def prop(name: str | Str | None, value: Any) -> Table:
        fields: dict[int, Any] = {}
        if name is not None:
            fields[0] = name if isinstance(name, Str) else Str(name)
        if value is not None:
            fields[1] = value
        return Table(fields)

    bag: dict[int, Any] = {}
    if ints is not None:
        bag[0] = Vec([prop(k, I64(v)) for k, v in ints])
    if floats is not None:
        bag[1] = Vec([prop(k, F32(v)) for k, v in floats])
    if strings is not None:
        bag[2] = Vec([prop(k, v if v is None or isinstance(v, Str) else Str(v)) for k, v in strings])
    if bag:
        root[3] = Table(bag)
    return Table(root)


def valid_file(**overrides: Any) -> bytes:
    """A small valid checkpoint with every kind of content; keyword arguments replace parts of it."""
    parts: dict[str, Any] = {
        "trainable": [f32("w", [2, 3]), tensor("s", [2], STRING, strings=["a", "héllo"])],
        "frozen": [f32("b", [3], start=10)],
        "groups": [group("group0", 3, 0.5, [("w", [f32("momentum0", [2, 3], start=-1)])])],
        "ints": [("epoch", 3)],
        "floats": [("loss", 0.25)],
        "strings": [("note", "x")],
    }
    parts.update(overrides)
    return build(checkpoint(**parts))


def patch_u32(data: bytes, at: int, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into("<I", out, at, value)
    return bytes(out)
