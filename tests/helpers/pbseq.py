"""ORT 1.15 ``.pbseq`` files and ``onnx.TensorProto`` messages written byte by byte (no ``onnx``
needed), to make exactly the (malformed) folder files a test needs."""

from __future__ import annotations


def varint(value: int) -> bytes:
    """A protobuf base-128 varint."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value == 0:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def tensor(
    name: bytes, data_type: int, dims: list[int], raw: bytes | None = None, extra: bytes = b""
) -> bytes:
    """A serialized onnx.TensorProto: dims (1), data_type (2), name (8), ``extra``, raw_data (9)."""
    out = b"".join(varint(1 << 3) + varint(d) for d in dims)
    out += varint(2 << 3) + varint(data_type) + field(8, name) + extra
    if raw is not None:
        out += field(9, raw)
    return out


def pbseq(messages: list[bytes]) -> bytes:
    """A .pbseq file: the message count, then each message's size and bytes."""
    return varint(len(messages)) + b"".join(varint(len(m)) + m for m in messages)
