"""Writes the crafted seeds of the ``legacy_folder`` fuzz target (fuzz/seeds/legacy_folder): .pbseq
files with what ORT 1.15 never writes but the decoder accepts — values in typed fields of every
kind, strings, unpacked and packed repeated fields, skipped fields, a group's properties. The real
ORT 1.15 files (tests/data/ort115) are added to the corpus by scripts/fuzz.sh.

    python scripts/make_legacy_fuzz_seeds.py
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.pbseq import field, pbseq, tensor, varint  # noqa: E402


def seeds() -> dict[str, bytes]:
    typed = [
        tensor(b"f", 1, [2], extra=field(4, struct.pack("<2f", 1.5, -2))),
        tensor(b"i8", 3, [2], extra=field(5, varint(300) + varint(2**64 - 1))),
        tensor(b"h", 10, [1], extra=field(5, varint(0x3C00))),
        tensor(b"b", 9, [3], extra=field(5, varint(0) + varint(2) + varint(1))),
        tensor(b"d", 11, [1], extra=field(10, struct.pack("<d", 3.25))),
        tensor(b"u32", 12, [1], extra=field(11, varint(2**33 + 5))),
        tensor(b"i64", 7, [2], extra=field(7, varint(5) + varint(2**64 - 3))),
        tensor(b"c64", 14, [1], extra=field(4, struct.pack("<2f", 1, 2))),
    ]
    unpacked_floats = b"".join(varint(4 << 3 | 5) + struct.pack("<f", v) for v in (1, 2))
    packed_dims = field(1, varint(1) + varint(2)) + varint(2 << 3) + varint(2)
    other = [
        tensor(b"s", 8, [2], extra=field(6, b"ab") + field(6, "é".encode())),
        tensor(b"unpacked", 1, [2], extra=unpacked_floats),
        packed_dims + field(8, b"packed_dims") + field(9, b"\1\2"),
        tensor(b"skip", 1, [0], extra=field(12, b"doc") + field(16, b"meta") + varint(99 << 3) + varint(7)),
    ]
    properties = [
        tensor(b"builtin.initial_learning_rate", 1, [], extra=field(4, struct.pack("<f", 0.001))),
        tensor(b"builtin.step", 7, [], extra=field(7, varint(12))),
    ]
    return {
        "typed_fields.pbseq": pbseq(typed),
        "strings_and_unpacked.pbseq": pbseq(other),
        "properties.pbseq": pbseq(properties),
    }


def main() -> None:
    out = REPO / "fuzz" / "seeds" / "legacy_folder"
    out.mkdir(parents=True, exist_ok=True)
    for name, data in seeds().items():
        (out / name).write_bytes(data)
        print(out / name, len(data))


if __name__ == "__main__":
    main()
