"""Writing an ONNX model whose initializer values are streamed from buffers (a checkpoint's
memory-mapped tensors), so a model of many gigabytes is never held in memory twice.

The model file is framed by hand: protobuf parses a message's fields in any order and a
length-delimited field is just its key, its length and its bytes, so each initializer is written
as its TensorProto without values followed by the ``raw_data`` field whose bytes come straight from
the buffer. Models over protobuf's 2 GiB limit keep every tensor of 1 KiB or more in
``<model>.data`` instead (ONNX external data, the fields set by ``onnx.external_data_helper``;
offsets aligned to 4 KiB so readers can map them). Both files are written through the core's
staged output (``_atomic.atomic_path``): each is replaced whole or not at all, and neither before
both are written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

from .. import _atomic

if TYPE_CHECKING:
    import onnx
    from typing_extensions import Buffer

#: The largest model protobuf can parse (and onnx.load / ONNX Runtime read) as one message.
ONNX_SIZE_LIMIT = 2**31 - 1
#: Tensors smaller than this stay in the model file when the data goes external (onnx's default).
EXTERNAL_THRESHOLD = 1024
#: External tensors start at multiples of this (a page), so readers can memory-map them.
ALIGNMENT = 4096
_CHUNK = 16 << 20

# Field numbers (onnx.proto): ModelProto.graph, GraphProto.initializer, TensorProto.raw_data.
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_RAW_DATA = 9


@dataclass
class Initializer:
    """One initializer to write: ``proto`` holds every field but the values when ``values`` is
    given (a function returning its ``nbytes`` little-endian bytes, called just before they are
    written, so a checkpoint tensor is checked against its file then), and the whole tensor (say,
    string_data) when it is None."""

    proto: onnx.TensorProto
    nbytes: int = 0
    values: Callable[[], Buffer] | None = None

    @classmethod
    def of(cls, proto: onnx.TensorProto, data: Buffer) -> Initializer:
        """An initializer whose values are the bytes of ``data``, already at hand."""
        return cls(proto, _bytes_of(data).nbytes, lambda: data)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field: int, length: int) -> bytes:
    """The key (wire type 2: length-delimited) and length of a field of ``length`` bytes."""
    return _varint(field << 3 | 2) + _varint(length)


@dataclass
class _Frame:
    """One initializer as written: its header bytes and, after them, its values (in the model as
    its raw_data field; ``external``: in the data file at ``offset``)."""

    header: bytes
    init: Initializer
    external: bool
    offset: int = 0

    def size(self) -> int:
        """Bytes of the GraphProto.initializer field in the model file."""
        body = len(self.header) + self._tail_size()
        return len(_key(_GRAPH_INITIALIZER, body)) + body

    def _tail_size(self) -> int:
        if self.init.values is None or self.external:
            return 0
        return len(_key(_TENSOR_RAW_DATA, self.init.nbytes)) + self.init.nbytes

    def write(self, f: BinaryIO) -> None:
        f.write(_key(_GRAPH_INITIALIZER, len(self.header) + self._tail_size()))
        f.write(self.header)
        if self.init.values is not None and not self.external:
            f.write(_key(_TENSOR_RAW_DATA, self.init.nbytes))
            self.write_values(f)

    def write_values(self, f: BinaryIO) -> None:
        assert self.init.values is not None
        data = _bytes_of(self.init.values())
        if data.nbytes != self.init.nbytes:  # the frame's length is written already
            raise ValueError(
                f"tensor {self.init.proto.name!r}: {data.nbytes} bytes, expected {self.init.nbytes}"
            )
        for start in range(0, data.nbytes, _CHUNK):
            f.write(data[start : start + _CHUNK])


def _bytes_of(data: Buffer) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _frames(initializers: list[Initializer], location: str | None) -> list[_Frame]:
    """The frames of ``initializers``; with a ``location``, tensors of EXTERNAL_THRESHOLD bytes or
    more get external data references at aligned offsets of that file."""
    import onnx.external_data_helper

    frames = []
    offset = 0
    for init in initializers:
        external = location is not None and init.values is not None and init.nbytes >= EXTERNAL_THRESHOLD
        proto = init.proto
        if external:
            assert location is not None
            offset = -(-offset // ALIGNMENT) * ALIGNMENT
            proto = type(init.proto)()
            proto.CopyFrom(init.proto)
            proto.raw_data = b""  # the helper refuses a tensor without raw_data; cleared below
            onnx.external_data_helper.set_external_data(proto, location, offset, init.nbytes)
            proto.ClearField("raw_data")
        frames.append(_Frame(proto.SerializeToString(), init, external, offset))
        if external:
            offset += init.nbytes
    return frames


def _heads(model: onnx.ModelProto) -> tuple[bytes, bytes]:
    """(the model without its graph, the graph without its initializers), serialized."""
    head = type(model)()
    head.CopyFrom(model)
    head.ClearField("graph")
    graph = type(model.graph)()
    graph.CopyFrom(model.graph)
    graph.ClearField("initializer")
    return head.SerializeToString(), graph.SerializeToString()


def _model_size(head: bytes, graph_head: bytes, frames: list[_Frame]) -> tuple[int, int]:
    """(size of the model file, size of its GraphProto)."""
    graph = len(graph_head) + sum(frame.size() for frame in frames)
    return len(head) + len(_key(_MODEL_GRAPH, graph)) + graph, graph


def _write_data(frames: list[_Frame], f: BinaryIO) -> None:
    for frame in frames:
        if frame.external:
            f.seek(frame.offset)  # past the end: the gap reads as zeros
            frame.write_values(f)


def data_path(path: str) -> str:
    """Where ``write_model`` puts the external data of the model ``path``: ``<path>.data``."""
    return path + ".data"


def plan_external(
    model: onnx.ModelProto, initializers: list[Initializer], *, limit: int = ONNX_SIZE_LIMIT
) -> bool:
    """Whether ``write_model`` will need external data for this model (it does not fit protobuf's
    2 GiB as one file)."""
    head, graph_head = _heads(model)
    return _model_size(head, graph_head, _frames(initializers, None))[0] > limit


def write_model(
    model: onnx.ModelProto, initializers: list[Initializer], path: str, *, limit: int = ONNX_SIZE_LIMIT
) -> bool:
    """Write ``model`` (whose graph has no initializers) with ``initializers`` appended to its
    graph to ``path``, atomically; returns True when the model needed external data, then written
    to ``<path>.data`` (location relative to the model's directory), which is replaced first.
    ``limit``: the largest model file written whole (tests lower it to exercise external data)."""
    if len(model.graph.initializer):
        raise ValueError("write_model takes the initializers separately")
    head, graph_head = _heads(model)
    frames = _frames(initializers, None)
    size, graph_size = _model_size(head, graph_head, frames)
    external = size > limit
    # Both files are written in full before either replaces anything (the core's staged output:
    # the data file is renamed first, then the model; the companion under the rule of a
    # checkpoint's .data: replaced as a name, never followed).
    suffix = data_path("")
    with _atomic.atomic_path(path, [suffix] if external else []) as staged:
        if external:
            # the location is the companion's name beside the model (the staged file has the
            # model's final name, after the caller's own symlinks)
            frames = _frames(initializers, os.path.basename(staged) + suffix)
            size, graph_size = _model_size(head, graph_head, frames)
            if size > limit:
                raise ValueError(
                    f"{path}: the model's graph alone (nodes, small tensors) is {size} bytes with its "
                    "tensor data external, more than the 2 GiB ONNX allows in one file"
                )
            with open(staged + suffix, "xb") as f:
                _write_data(frames, f)
        with open(staged, "xb") as f:
            f.write(head)
            f.write(_key(_MODEL_GRAPH, graph_size))
            f.write(graph_head)
            for frame in frames:
                frame.write(f)
    return external


def full_protos(initializers: list[Initializer]) -> Iterator[onnx.TensorProto]:
    """The complete TensorProtos of ``initializers`` (values in raw_data), one at a time."""
    for init in initializers:
        if init.values is None:
            yield init.proto
            continue
        proto = type(init.proto)()
        proto.CopyFrom(init.proto)
        proto.raw_data = bytes(_bytes_of(init.values()))
        yield proto
