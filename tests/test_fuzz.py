"""Mutation fuzzing of valid checkpoints through ``load_bytes`` (and, for a sample, ``load``).

Seeds: every ORT-written file (corpus + tests/data), a checkpoint ortckpt writes with every dtype,
strings, optimizer state and properties, and hand-built files with external data and nominal
tensors (the raw builder of tests.helpers.raw_flatbuffer). Mutations: bit flips, byte and 32-bit word
overwrites (offsets and lengths are 32-bit words), insertions, deletions, truncations, and splices
within a file and between two files.

For every mutant: loading raises one of our exceptions (never a panic, never another exception),
or it loads, and then every parameter's ``.data``, every momentum, every property and every repr
can be read with nothing but our exceptions escaping; and what loaded survives ``serialize`` +
``load_bytes`` unchanged.

Budget: about 20 s in all (two hypothesis tests plus a seeded loop of 5,000 mutations).
"""

from __future__ import annotations

import base64
import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ortckpt
from ortckpt import CheckpointError, CheckpointState, OptimizerGroup
from tests.helpers import raw_flatbuffer as fb
from tests.helpers.checks import check_ours, touch_state
from tests.helpers.paths import ort_written_files

# ==================================================================================================
# Seeds
# ==================================================================================================


def _rich_state() -> CheckpointState:
    rng = np.random.default_rng(5)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    return CheckpointState(
        {
            "a.f32": w,
            "b.u8": np.arange(20, dtype=np.uint8).reshape(4, 5),
            "c.str": np.array([["héllo", ""], ["a\x00b", "日本"]], dtype=object),
            "d.bf16": np.arange(6, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(2, 3),
            "e.c128": np.array([1 + 2j, np.nan], dtype=np.complex128),
            "f.scalar": np.array(-7, dtype=np.int64),
            "g.empty": np.zeros((0, 3), dtype=np.float64),
            "h.f8": np.arange(7, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
        },
        frozen={"z.bool": np.array([True, False]), "z.f16": np.array([1.5, -0.0], dtype=np.float16)},
        properties={"epoch": 3, "loss": 0.125, "note": "ŝ ✓", "big": -(2**63)},
        optimizer={
            "group0": OptimizerGroup(
                step=7,
                initial_learning_rate=1e-3,
                states={
                    "a.f32": {"momentum0": w * 0.5, "momentum1": w * w},
                    "b.u8": {"momentum0": np.ones(1)},
                },
            ),
            "other": OptimizerGroup(step=2**40, initial_learning_rate=0.5),
        },
    )


def _seeds() -> list[tuple[str, bytes, bytes | None]]:
    """(name, checkpoint bytes, external data bytes or None)."""
    seeds: list[tuple[str, bytes, bytes | None]] = [
        (p.name, p.read_bytes(), None) for p in ort_written_files()
    ]
    seeds.append(("rich", ortckpt.serialize(_rich_state()), None))
    t = fb.tensor
    ext = fb.build(
        fb.checkpoint(
            [t("w", [2, 3], fb.FLOAT, external_offset=0), t("s", [2], fb.STRING, strings=["a", "bc"])],
            [t("b", [3], fb.DOUBLE, external_offset=24), fb.f32("inline", [2])],
            external=True,
            groups=[fb.group("group0", 1, 0.1, [("w", [t("m0", [2, 3], fb.FLOAT, external_offset=48)])])],
            ints=[("epoch", 1)],
        )
    )
    seeds.append(("external", ext, bytes(range(80))))
    nominal = fb.build(
        fb.checkpoint(
            [fb.tensor("w", [], fb.FLOAT, b"", dims_align=4), fb.tensor("s", [], fb.STRING, strings=[])],
            [fb.tensor("b", [4, 2], fb.INT64, dims_align=4)],
            nominal=True,
        )
    )
    seeds.append(("nominal", nominal, None))
    seeds.append(("empty", fb.build(fb.checkpoint(module=False, strings=[("k", "v")])), None))
    for _, data, ext_data in seeds:  # every seed is valid
        touch_state(ortckpt.load_bytes(data, external_data=ext_data))
    return seeds


SEEDS = _seeds()

# ==================================================================================================
# Mutations
# ==================================================================================================

#: Words that make interesting offsets and lengths.
WORDS = [0, 1, 2, 3, 4, 7, 8, 0xFF, 0x100, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFC, 0x3FFFFFFF]

Op = tuple[Any, ...]


def apply(data: bytes, ops: list[Op]) -> bytes:
    """Applies mutation ops; positions are taken modulo the current length, so any int works."""
    buf = bytearray(data)
    for op in ops:
        kind, n = op[0], len(buf)
        if kind == "flip" and n:
            buf[op[1] % n] ^= 1 << (op[2] % 8)
        elif kind == "byte" and n:
            buf[op[1] % n] = op[2] % 256
        elif kind == "word" and n >= 4:
            at = op[1] % (n - 3)
            if op[3]:
                at -= at % 4  # most offsets and lengths are 4-aligned
            struct.pack_into("<I", buf, at, op[2] % 2**32)
        elif kind == "add" and n >= 4:  # nudge a word: a uoffset or length off by a little
            at = (op[1] % (n - 3)) & ~3
            (word,) = struct.unpack_from("<I", buf, at)
            struct.pack_into("<I", buf, at, (word + op[2]) % 2**32)
        elif kind == "insert":
            at = op[1] % (n + 1)
            buf[at:at] = op[2]
        elif kind == "delete" and n:
            at = op[1] % n
            del buf[at : at + op[2]]
        elif kind == "truncate":
            del buf[op[1] % (n + 1) :]
        elif kind == "copy" and n:  # duplicate a region of the file elsewhere in it
            src, length, dst = op[1] % n, op[2], op[3] % n
            chunk = bytes(buf[src : src + length])
            buf[dst : dst + len(chunk)] = chunk
        elif kind == "splice":  # bytes from another seed, replacing or inserted
            other = SEEDS[op[1] % len(SEEDS)][1]
            src = op[2] % len(other)
            chunk = other[src : src + op[3]]
            at = op[4] % (n + 1)
            buf[at : at + (len(chunk) if op[5] else 0)] = chunk
        elif kind == "crossover":  # head of this file + tail of another
            other = SEEDS[op[1] % len(SEEDS)][1]
            buf = buf[: op[2] % (n + 1)] + other[op[3] % (len(other) + 1) :]
    return bytes(buf)


# -- hypothesis strategies ---------------------------------------------------------------------------

_pos = st.integers(0, 2**20)
OPS = st.one_of(
    st.tuples(st.just("flip"), _pos, st.integers(0, 7)),
    st.tuples(st.just("byte"), _pos, st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]) | st.integers(0, 255)),
    st.tuples(st.just("word"), _pos, st.sampled_from(WORDS) | st.integers(0, 2**32 - 1), st.booleans()),
    st.tuples(st.just("add"), _pos, st.integers(-16, 16)),
    st.tuples(st.just("insert"), _pos, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), _pos, st.integers(1, 32)),
    st.tuples(st.just("truncate"), _pos),
    st.tuples(st.just("copy"), _pos, st.integers(1, 64), _pos),
)
SPLICES = st.one_of(
    st.tuples(st.just("splice"), _pos, _pos, st.integers(1, 256), _pos, st.booleans()),
    st.tuples(st.just("crossover"), _pos, _pos, _pos),
)

# -- the oracle --------------------------------------------------------------------------------------

OUR_LOAD_ERRORS = (
    ortckpt.InvalidCheckpointError,
    ortckpt.UnsupportedVersionError,
    ortckpt.TensorDataError,
    ortckpt.DuplicateNameError,
    ortckpt.ExternalDataError,
)


_NEG_ZERO, _ZERO = struct.pack("<f", -0.0), struct.pack("<f", 0.0)


def _comparable(summary: tuple[Any, ...]) -> tuple[Any, ...]:
    """A touch_state summary without what saving changes: the version (always 2), the external data
    flag (saves are inline), the file order of properties (saves sort them), and the sign of a zero
    float property or learning rate (the writer, like ORT's, omits scalars equal to their default,
    and -0.0 == 0.0: a -0.0 comes back as 0.0)."""
    _version, nominal, _external, params, groups, props = summary

    def zero(packed: bytes) -> bytes:
        return _ZERO if packed == _NEG_ZERO else packed

    groups = groups and [(name, step, zero(lr), states) for name, step, lr, states in groups]
    props = [(k, kind, zero(v) if kind == "float" else v) for k, kind, v in props]
    return (nominal, params, groups, tuple(sorted(props)))


def check(data: bytes, external: bytes | None, describe: Callable[[], str]) -> str:
    """Runs the oracle on one input; returns what happened (for statistics)."""
    try:
        state = ortckpt.load_bytes(data, external_data=external)
    except BaseException as exc:
        try:
            check_ours(exc)
            assert isinstance(exc, OUR_LOAD_ERRORS), f"loading raised the base class: {exc}"
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{describe()}") from exc
        return type(exc).__name__
    try:
        summary = touch_state(state)
        try:
            saved = ortckpt.serialize(state)
        except CheckpointError as exc:  # ours; e.g. values in a state flagged nominal
            check_ours(exc)
            return "loaded, not saved"
        again = ortckpt.load_bytes(saved)
        assert _comparable(touch_state(again)) == _comparable(summary), "serialize + load changed the state"
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise AssertionError(
            f"loaded, then {type(exc).__module__}.{type(exc).__qualname__}: {exc}\n{describe()}"
        ) from exc
    return "loaded"


def _describe(data: bytes, external: bytes | None, origin: str) -> Callable[[], str]:
    def describe() -> str:
        ext = "" if external is None else f", external_data=base64 {base64.b64encode(external).decode()}"
        return f"input ({origin}, {len(data)} bytes{ext}): base64 {base64.b64encode(data).decode()}"

    return describe


# ==================================================================================================
# Tests
# ==================================================================================================


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, len(SEEDS) - 1), ops=st.lists(OPS, min_size=1, max_size=6), ext=st.booleans())
def test_mutations(seed: int, ops: list[Op], ext: bool) -> None:
    name, data, external = SEEDS[seed]
    mutant = apply(data, ops)
    external = external if ext else None
    check(mutant, external, _describe(mutant, external, f"{name} + {ops}"))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, len(SEEDS) - 1),
    ops=st.lists(SPLICES, min_size=1, max_size=3),
    more=st.lists(OPS, max_size=2),
)
def test_splices(seed: int, ops: list[Op], more: list[Op]) -> None:
    name, data, external = SEEDS[seed]
    mutant = apply(data, ops + more)
    check(mutant, external, _describe(mutant, external, f"{name} + {ops + more}"))


def _random_op(rng: random.Random) -> Op:
    pos = rng.randrange(2**20)
    kind = rng.choice(
        ["flip", "flip", "byte", "word", "add", "insert", "delete", "truncate", "copy", "splice"]
    )
    if kind == "flip":
        return (kind, pos, rng.randrange(8))
    if kind == "byte":
        return (kind, pos, rng.randrange(256))
    if kind == "word":
        return (
            kind,
            pos,
            rng.choice(WORDS) if rng.random() < 0.5 else rng.randrange(2**32),
            rng.random() < 0.7,
        )
    if kind == "add":
        return (kind, pos, rng.randint(-16, 16))
    if kind == "insert":
        return (kind, pos, rng.randbytes(rng.randint(1, 16)))
    if kind == "delete":
        return (kind, pos, rng.randint(1, 32))
    if kind == "truncate":
        return (kind, pos)
    if kind == "copy":
        return (kind, pos, rng.randint(1, 64), rng.randrange(2**20))
    return (
        kind,
        rng.randrange(len(SEEDS)),
        rng.randrange(2**20),
        rng.randint(1, 256),
        pos,
        rng.random() < 0.5,
    )


def test_seeded_random_mutations(tmp_path: Path) -> None:
    """5,000 reproducible mutants; every 100th also goes through ``load`` from a file (memory-mapped
    and read), which must agree with ``load_bytes``."""
    rng = random.Random(20240519)
    outcomes: dict[str, int] = {}
    for i in range(5000):
        name, data, external = SEEDS[rng.randrange(len(SEEDS))]
        ops = [_random_op(rng) for _ in range(rng.randint(1, 4))]
        mutant = apply(data, ops)
        external = external if rng.random() < 0.8 else None
        describe = _describe(mutant, external, f"iteration {i}: {name} + {ops}")
        outcome = check(mutant, external, describe)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if i % 100 == 0:
            _check_file_agrees(tmp_path, mutant, external, outcome, describe)
    # the mutations must exercise both sides: rejections of several kinds, and loads
    assert outcomes.get("loaded", 0) >= 100, outcomes
    assert outcomes.get("InvalidCheckpointError", 0) >= 1000, outcomes
    assert outcomes.get("TensorDataError", 0) >= 20, outcomes
    assert outcomes.get("UnsupportedVersionError", 0) >= 5, outcomes


def _check_file_agrees(
    tmp_path: Path, data: bytes, external: bytes | None, outcome: str, describe: Callable[[], str]
) -> None:
    target = tmp_path / "mutant.ckpt"
    target.write_bytes(data)
    sidecar = tmp_path / "mutant.ckpt.data"
    if external is not None:
        sidecar.write_bytes(external)
    elif sidecar.exists():
        sidecar.unlink()
    for mmap in (True, False):
        try:
            state = ortckpt.load(target, mmap=mmap)
            if mmap and outcome != "loaded":
                # A mapped load compares stored tensor lengths on first use (docs/guarantees.md):
                # then the error comes when the values are read, here by serializing every tensor.
                state.to_bytes()
        except BaseException as exc:
            check_ours(exc)
            assert type(exc).__name__ == outcome, (
                f"load(mmap={mmap}) raised {exc!r}, load_bytes: {outcome}\n{describe()}"
            )
            if outcome != "ExternalDataError" or "missing" not in str(exc):
                assert str(target) in str(exc), f"{exc} does not name the file"
            continue
        assert outcome == "loaded", f"load(mmap={mmap}) loaded, load_bytes: {outcome}\n{describe()}"
        expected = touch_state(ortckpt.load_bytes(data, external_data=external))
        assert touch_state(state)[1:] == expected[1:], describe()
        del state


FLIP_SEEDS = ["rich", "external", "nominal", "empty", "mlp_adamw_with_optimizer.ckpt", "dtypes.ckpt"]


@pytest.mark.parametrize("name", FLIP_SEEDS)
def test_every_bit_flip_of_the_first_256_bytes(name: str) -> None:
    """Exhaustive single-bit flips of the head of a few structurally different seeds (the header,
    root and module tables, vtables, offsets, small vectors; test_malformed.py covers the header of
    every ORT-written file)."""
    _, data, external = next(s for s in SEEDS if s[0] == name)
    for pos in range(min(len(data), 256)):
        for bit in range(8):
            mutant = apply(data, [("flip", pos, bit)])
            check(mutant, external, _describe(mutant, external, f"{name} bit {bit} of byte {pos}"))


# ==================================================================================================
# The Python fuzz targets (fuzz/python/): hostile eval models and Flower records, each in its own
# process (a crash of native code is a signal there), a short run with fixed seeds, as CI's short
# fuzz run (scripts/fuzz.sh) runs them with random ones.
# ==================================================================================================


@pytest.mark.parametrize(
    ("target", "needs"), [("export_models", "onnx"), ("flower_records", "flwr.app")], ids=["export", "flower"]
)
@pytest.mark.parametrize("seed", [1, 2])
def test_python_fuzz_targets_find_no_crash_and_no_foreign_exception(
    target: str, needs: str, seed: int, tmp_path: Path
) -> None:
    import subprocess
    import sys

    pytest.importorskip(needs)
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, str(repo / "fuzz" / "python" / f"{target}.py"), "5", str(seed), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    current = tmp_path / f"{target}-current"
    reproducer = current.read_bytes()[:2000] if current.exists() else b""
    assert done.returncode == 0, (done.returncode, done.stdout[-3000:], done.stderr[-3000:], reproducer)
    assert "no crash, only our exceptions" in done.stdout
