"""Fuzz target: hostile Flower records and replies.

Seeds: the ArrayRecords ortckpt makes of a checkpoint with every numeric dtype (named tensors),
a whole checkpoint's bytes in a record, a parameter buffer, and the MetricRecords of a reply.
Each case mutates an ``Array``'s fields (dtype, shape: negative, huge, 65 dims; stype), its
``.npy`` bytes (header text: keys, literals, lengths; values: flips, truncations) and the weight,
then decodes it (``from_arrayrecord`` with and without a reference, ``checkpoint_bytes``,
``buffer_values``) and gives a round of such replies to ``OrtFedAvg.aggregate_train`` for a
random method. The oracle: the decoders raise only ortckpt's exceptions; ``aggregate_train``
raises nothing, answers ``(None, None)`` or an aggregate, and reports every reply once, accepted
or rejected with a kind.

    python fuzz/python/flower_records.py SECONDS SEED [ARTIFACTS]
"""

from __future__ import annotations

import logging
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import ml_dtypes
import numpy as np
from _harness import run
from flwr.app import Array, ArrayRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.app.message.message import make_message
from flwr.app.metadata import Metadata

import ortckpt
from ortckpt import flower as F

logging.getLogger("flwr").setLevel(logging.CRITICAL)  # every rejection is logged as a warning

RNG = np.random.default_rng(3)
BASE = ortckpt.CheckpointState(
    {"w": RNG.standard_normal((4, 3)).astype(np.float32), "b": np.zeros(3, np.float32)},
    frozen={"h": np.arange(4, dtype=ml_dtypes.bfloat16), "i": np.arange(3, dtype=np.int64)},
    properties={"samples": 5},
)
RECORDS = [
    F.to_arrayrecord(BASE),
    F.to_arrayrecord(BASE, trainable_only=True),
    F.checkpoint_record(BASE.to_bytes()),
    F.buffer_record(np.arange(12, dtype=np.float32)),
]
DTYPES = ["float32", "float64", "bfloat16", "int64", "bool", "string", "complex64", "object", "<f4", ""]
HEADERS = [
    b"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }",
    b"{[1]: 2}",
    b"{'descr': '<f4', 'fortran_order': True, 'shape': (0, 4611686018427387904, 8), }",
    b"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }",
    b"{'descr': '<f4', 'fortran_order': False, 'shape': " + repr((1,) * 65).encode() + b", }",
    b"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }",
    b"{'descr': '<f4', 'fortran_order': 0, 'shape': (4, 3), 'x': 1}",
    b"{'descr': '<f4', 'fortran_order': False, 'shape': (9" + b"9" * 5000 + b",), }",
]
METHODS = [("fedavg", {}), ("median", {}), ("trimmed_mean", {}), ("krum", {"byzantine": 1}),
           ("multi_krum", {"byzantine": 1}), ("bulyan", {"byzantine": 1})]  # fmt: skip
WEIGHTS: list[object] = [1, 10, 0, -3, 1e308, float("nan"), float("inf"), 2**64, 1e-30, "x", [1, 2]]


def _npy(header: bytes) -> bytes:
    header += b" " * ((16 - (10 + len(header) + 1) % 16) % 16) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header


def _mutate_array(array: Array, rng: random.Random) -> Array:
    dtype, shape, stype, data = array.dtype, tuple(array.shape), array.stype, bytes(array.data)
    for _ in range(rng.randint(1, 3)):
        what = rng.randrange(6)
        if what == 0:
            dtype = rng.choice(DTYPES)
        elif what == 1:
            shape = tuple(
                rng.choice([0, 1, 3, 4, 2**62, 2**63 - 1]) for _ in range(rng.choice([0, 1, 2, 3, 65]))
            )
        elif what == 2:
            stype = rng.choice(["numpy.ndarray", "torch", ""])
        elif what == 3:
            data = _npy(rng.choice(HEADERS)) + data[rng.randrange(len(data) + 1) :]
        elif what == 4 and data:
            at = rng.randrange(len(data))
            data = data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :]
        else:
            data = data[: rng.randrange(len(data) + 1)]
    return Array(dtype=dtype, shape=shape, stype=stype, data=data)


def _record(rng: random.Random) -> ArrayRecord:
    seed = rng.choice(RECORDS) if rng.random() < 0.3 else RECORDS[rng.randrange(3)]
    items = {k: v for k, v in seed.items()}
    if items and rng.random() < 0.5:
        key = rng.choice(list(items))
        items[key] = _mutate_array(items[key], rng)
    if rng.random() < 0.1:
        items["extra"] = Array(np.zeros(2, np.float32))
    return ArrayRecord(items)


def _reply(node: int, content: RecordDict) -> Message:
    metadata = Metadata(
        run_id=1, message_id=f"m{node}", src_node_id=node, dst_node_id=0, reply_to_message_id="q",
        group_id="1", created_at=time.time(), ttl=600.0, message_type=MessageType.TRAIN,
    )  # fmt: skip
    return make_message(metadata, content, None)


def case(rng: random.Random) -> tuple[bytes, Callable[[], Any]]:
    records = [_record(rng) for _ in range(rng.randint(1, 6))]
    weights = [rng.choice(WEIGHTS) if rng.random() < 0.3 else rng.randint(1, 100) for _ in records]
    method, options = rng.choice(METHODS)
    saved = repr(
        (method, weights, [[(k, a.dtype, a.shape, a.stype, a.data) for k, a in r.items()] for r in records])
    )

    def call() -> None:
        record = records[0]
        for decode in (
            lambda: F.from_arrayrecord(record, BASE),
            lambda: F.from_arrayrecord(record),
            lambda: F.checkpoint_bytes(record),
            lambda: F.buffer_values(record),
        ):
            try:
                decode()
            except ortckpt.CheckpointError:
                pass
        replies = []
        for node, (r, w) in enumerate(zip(records, weights, strict=True), start=1):
            metrics = (
                MetricRecord({"num-examples": w})
                if isinstance(w, (int, float)) and not isinstance(w, bool) and abs(w) < 2**63
                else MetricRecord({"loss": 1.0})
            )
            replies.append(_reply(node, RecordDict({"arrays": r, "metrics": metrics})))
        strategy = F.OrtFedAvg(BASE, method=method, average_options=options)
        arrays, _ = strategy.aggregate_train(1, replies)
        report = strategy.round_reports[1]
        seen = sorted([*report.accepted, *(r.client for r in report.rejected)])
        assert seen == sorted(f"node {n}" for n in range(1, len(replies) + 1)), (seen, report)
        assert all(r.kind for r in report.rejected), report
        assert (arrays is None) == (report.failure is not None), report
        if arrays is not None:
            state = F.from_arrayrecord(arrays, BASE)
            for p in state.trainable_parameters.values():
                assert np.isfinite(p.data).all(), "a non-finite aggregate"

    return saved.encode("utf-8", "backslashreplace"), call


if __name__ == "__main__":
    run("flower_records", case)
