"""The conversions attacked as an adversary (or a careless user) would: every malformed npz or
safetensors file gives a ``ConversionError`` naming the file (never TypeError, OverflowError,
RecursionError or numpy's ValueError), ``ortckpt convert`` never prints a traceback, special files
are neither read nor replaced, member names are kept exactly or refused, an archive's member count
costs no file descriptors, and a conversion never drops the optimizer state unless told to."""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, ConversionError, OptimizerGroup
from ortckpt.cli import main
from ortckpt.formats.conversions import load_source
from tests.helpers.paths import REPO

ROOT = REPO


def _npy(descr: object, shape: object, data: bytes = b"", fortran: object = False) -> bytes:
    header = f"{{'descr': {descr!r}, 'fortran_order': {fortran!r}, 'shape': {shape!r}, }}"
    body = header.encode("latin-1") + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body + data


def _npz(path: Path, members: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _flat_layout(doc: object) -> bytes:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    return _npy("|u1", (len(text.encode()),), text.encode())


def _safetensors(path: Path, header: object, data: bytes = b"", raw_header: bytes | None = None) -> Path:
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


LAYOUT = {"format": "ortckpt-layout/1"}
F4 = _npy("<f4", (2,), bytes(8))

# name -> (members of an .npz archive, a fragment of the message)
BAD_NPZ: dict[str, tuple[dict[str, bytes], str]] = {
    "object array": ({"o.npy": _npy("|O", (1,), bytes(8))}, "unpickling"),
    "structured dtype": ({"s.npy": _npy([("a", "<f4")], (1,), bytes(4))}, "not a string"),
    "big endian": ({"b.npy": _npy(">f4", (2,), bytes(8))}, "little-endian"),
    "shape overflows": ({"h.npy": _npy("<f8", (2**40, 2**40), b"")}, "overflows"),
    "negative dim": ({"n.npy": _npy("<f4", (-2,), bytes(8))}, "bad 'shape'"),
    "float dim": ({"n.npy": _npy("<f4", (2.0,), bytes(8))}, "bad 'shape'"),
    "short data": ({"w.npy": _npy("<f4", (3,), bytes(8))}, "truncated"),
    "trailing data": ({"w.npy": _npy("<f4", (1,), bytes(8))}, "trailing"),
    "no magic": ({"w.npy": b"\x00" * 64}, "magic"),
    "npy version 9": ({"w.npy": b"\x93NUMPY\x09\x00" + bytes(60)}, "version 9.0"),
    "huge header": ({"w.npy": b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**31) + bytes(8)}, "header"),
    "not .npy": ({"w.txt": F4}, "not a .npy array"),
    "directory": ({"d/": b""}, "not a .npy array"),
    "unicode without layout": ({"u.npy": _npy("<U2", (1,), bytes(8))}, "does not mark"),
    "layout not json": ({"w.npy": F4, "__ortckpt__.npy": _flat_layout("{nope")}, "not valid JSON"),
    "layout nested": ({"w.npy": F4, "__ortckpt__.npy": _flat_layout("[" * 100_000)}, "not valid JSON"),
    "layout not uint8": ({"w.npy": F4, "__ortckpt__.npy": _npy("<f4", (1,), bytes(4))}, "1-D uint8"),
    "layout not utf-8": ({"w.npy": F4, "__ortckpt__.npy": _npy("|u1", (2,), b"\xff\xfe")}, "not UTF-8"),
    "layout wrong format": ({"w.npy": F4, "__ortckpt__.npy": _flat_layout({"format": 7})}, "unknown format"),
    "layout huge step": (
        {
            "w.npy": F4,
            "__ortckpt__.npy": _flat_layout(
                {**LAYOUT, "optimizer": [{"name": "g", "step": 10**30, "initial_learning_rate": "00000000"}]}
            ),
        },
        "64-bit integer",
    ),
    "layout float step": (
        {
            "w.npy": F4,
            "__ortckpt__.npy": _flat_layout(
                {**LAYOUT, "optimizer": [{"name": "g", "step": 1e308, "initial_learning_rate": "00000000"}]}
            ),
        },
        "64-bit integer",
    ),
    "layout group name": (
        {
            "w.npy": F4,
            "__ortckpt__.npy": _flat_layout(
                {**LAYOUT, "optimizer": [{"name": 5, "initial_learning_rate": "0"}]}
            ),
        },
        "expected a string",
    ),
    "layout property list": (
        {"w.npy": F4, "__ortckpt__.npy": _flat_layout({**LAYOUT, "properties": [["p", "int", [1]]]})},
        "64-bit integer",
    ),
    "layout property short": (
        {"w.npy": F4, "__ortckpt__.npy": _flat_layout({**LAYOUT, "properties": [["p"]]})},
        "not [name, type, value]",
    ),
    "layout frozen int": (
        {"w.npy": F4, "__ortckpt__.npy": _flat_layout({**LAYOUT, "frozen": [3]})},
        "expected a string",
    ),
    "layout dtype unknown": (
        {"w.npy": F4, "__ortckpt__.npy": _flat_layout({**LAYOUT, "dtypes": {"w": "float128"}})},
        "unknown stored dtype",
    ),
    "layout dtype not raw": (
        {"w.npy": F4, "__ortckpt__.npy": _flat_layout({**LAYOUT, "dtypes": {"w": "bfloat16"}})},
        "stored as uint16",
    ),
    "missing momentum": (
        {
            "w.npy": F4,
            "__ortckpt__.npy": _flat_layout(
                {
                    **LAYOUT,
                    "optimizer": [
                        {"name": "g", "initial_learning_rate": "00000000", "states": [["w", [["m", "nope"]]]]}
                    ],
                }
            ),
        },
        "momentum tensor 'nope' is missing",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_NPZ))
def test_malformed_npz_raises_conversion_error(tmp_path: Path, case: str):
    members, fragment = BAD_NPZ[case]
    path = _npz(tmp_path / "bad.npz", members)
    with pytest.raises(ConversionError, match=str(tmp_path / "bad.npz")) as info:
        ortckpt.from_npz(path)
    assert fragment in str(info.value)
    assert isinstance(info.value, ortckpt.CheckpointError)


def _entry(dtype: object = "F32", shape: object = (2,), offsets: object = (0, 8)) -> dict[str, object]:
    return {
        "dtype": dtype,
        "shape": list(shape) if isinstance(shape, tuple) else shape,
        "data_offsets": offsets,
    }


_DUPLICATE = (
    b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
    b'"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'
)

BAD_SAFETENSORS: dict[str, tuple[dict[str, Any], bytes, bytes | None, str]] = {
    "empty": ({}, b"", b"", "not a valid safetensors file"),
    "header too long": ({}, b"", b"{" + b" " * 10, ""),
    "not json": ({}, b"", b"{nope", "not UTF-8 JSON"),
    "nested": ({}, b"", b"[" * 100_000, "not a JSON object"),
    "nested in an entry": ({}, b"", b'{"w":' + b"[" * 100_000, "expected an entry"),
    "not utf-8": ({}, b"", b'{"\xff": 1}', "not UTF-8 JSON"),
    "a list": ({}, b"", b"[]", "not a JSON object"),
    "entry not a dict": ({"w": 5}, bytes(8), None, "expected an entry {dtype, shape, data_offsets}"),
    "dtype not a string": ({"w": _entry(dtype=3)}, bytes(8), None, "expected a dtype name"),
    "unknown dtype": ({"w": _entry(dtype="F128")}, bytes(8), None, "cannot hold"),
    "negative dim": ({"w": _entry(shape=(-2,))}, bytes(8), None, "non-negative integers"),
    "bool dim": ({"w": _entry(shape=[True, True])}, bytes(8), None, "non-negative integers"),
    "float dim": ({"w": _entry(shape=[2.0])}, bytes(8), None, "non-negative integers"),
    "huge dims": ({"w": _entry(shape=(2**62, 2**62), offsets=(0, 8))}, bytes(8), None, "holds 8 bytes"),
    "string shape": ({"w": _entry(shape="ab")}, bytes(8), None, "non-negative integers"),
    "offsets reversed": ({"w": _entry(offsets=(8, 0))}, bytes(8), None, "data_offsets"),
    "offsets past end": ({"w": _entry(offsets=(0, 80))}, bytes(8), None, "data_offsets"),
    "offsets floats": ({"w": _entry(offsets=(0.0, 8.0))}, bytes(8), None, "data_offsets"),
    "offsets huge": ({"w": _entry(offsets=(0, 10**30))}, bytes(8), None, "data_offsets"),
    "overlap": ({"a": _entry(), "b": _entry()}, bytes(8), None, "overlap or gap"),
    "unknown entry key": ({"w": {**_entry(), "extra": 1}}, bytes(8), None, "unknown key"),
    "33 dims": ({"w": _entry(shape=[1] * 33, offsets=(0, 4))}, bytes(4), None, "more than 32 dimensions"),
    "duplicate name": ({}, bytes(8), _DUPLICATE, "appears twice"),
    "duplicate metadata key": ({}, b"", b'{"__metadata__": {"k": "1", "k": "2"}}', "appears twice"),
    "gap": ({"w": _entry(offsets=(0, 8))}, bytes(16), None, "truncated or padded"),
    "metadata not strings": ({"__metadata__": {"ortckpt": 5}}, b"", None, "__metadata__"),
    "layout not json": ({"__metadata__": {"ortckpt": "{"}}, b"", None, "not valid JSON"),
    "layout huge int": (
        {"__metadata__": {"ortckpt": json.dumps({**LAYOUT, "properties": [["p", "int", 2**70]]})}},
        b"",
        None,
        "64-bit integer",
    ),
    "layout lr not bits": (
        {
            "__metadata__": {
                "ortckpt": json.dumps(
                    {**LAYOUT, "optimizer": [{"name": "g", "initial_learning_rate": "zzzzzzzz"}]}
                )
            }
        },
        b"",
        None,
        "float32 bits",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SAFETENSORS))
def test_malformed_safetensors_raises_conversion_error(tmp_path: Path, case: str):
    header, data, raw_header, fragment = BAD_SAFETENSORS[case]
    path = tmp_path / "bad.safetensors"
    if case == "empty":
        path.write_bytes(b"")
    elif case == "header too long":
        path.write_bytes(struct.pack("<Q", 2**63) + raw_header)  # type: ignore[operator]
    else:
        _safetensors(path, header, data, raw_header)
    with pytest.raises(ConversionError, match=str(path)) as info:
        ortckpt.from_safetensors(path)
    assert fragment in str(info.value)


def test_cli_convert_never_prints_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    inputs = [_npz(tmp_path / f"n{i}.npz", members) for i, (members, _) in enumerate(BAD_NPZ.values())]
    for i, (header, data, raw_header, _) in enumerate(BAD_SAFETENSORS.values()):
        if raw_header is None:
            inputs.append(_safetensors(tmp_path / f"s{i}.safetensors", header, data))
    (tmp_path / "garbage.npz").write_bytes(os.urandom(300))
    inputs.append(tmp_path / "garbage.npz")
    for src in inputs:
        assert main(["convert", str(src), str(tmp_path / "out.ckpt")]) == 2, src
        err = capsys.readouterr().err
        assert err.startswith("ortckpt: error: ") and err.count("\n") == 1, err
        assert str(src) in err
    assert not (tmp_path / "out.ckpt").exists()
    # and as a program: one line on stderr, exit status 2
    proc = subprocess.run(
        [sys.executable, "-m", "ortckpt", "convert", str(inputs[0]), str(tmp_path / "o.npz")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


# -- member names -------------------------------------------------------------------------------------


def _patched(path: Path, old: bytes, new: bytes) -> Path:
    data = path.read_bytes()
    assert data.count(old) == 2  # the local header and the central directory
    path.write_bytes(data.replace(old, new))
    return path


@pytest.mark.parametrize(
    "name, raw",
    [
        ("abcd.npy", b"\xf4\x90\x80\x80"),  # U+110000 (above U+10FFFF), no UTF-8 flag
        ("\u00f1bc.npy", b"\xf4\x90\x80\x80"),  # the same with the UTF-8 flag set
        ("abcd.npy", b"\xed\xa0\x80a"),  # a surrogate
        ("abcd.npy", b"\x80abc"),  # CP437 without the UTF-8 flag: would be renamed silently
    ],
)
def test_member_names_are_exact_utf8_or_refused(tmp_path: Path, name: str, raw: bytes):
    path = _npz(tmp_path / "n.npz", {name: F4})
    old = name[: -len(".npy")].encode()
    _patched(path, old, raw)
    with pytest.raises(ConversionError, match="not valid UTF-8"):
        ortckpt.from_npz(path)


def test_duplicate_member_names_are_refused(tmp_path: Path):
    path = _npz(tmp_path / "d.npz", {"a.npy": F4, "b.npy": _npy("<f4", (2,), b"\x01" * 8)})
    _patched(path, b"b.npy", b"a.npy")
    with pytest.raises(ConversionError, match="appears twice"):
        ortckpt.from_npz(path)


def test_non_ascii_names_round_trip(tmp_path: Path):
    names = ["\U0010ffff", "\u00e9t\u00e9", "\U0001f600/x"]
    state = CheckpointState({n: np.full(2, i, np.float32) for i, n in enumerate(names)})
    ortckpt.to_npz(state, tmp_path / "u.npz")
    back = ortckpt.from_npz(tmp_path / "u.npz")
    assert {n: p.data.tolist() for n, p in back.parameters.items()} == {
        n: [float(i)] * 2 for i, n in enumerate(names)
    }


# -- file descriptors ---------------------------------------------------------------------------------


def test_many_members_need_no_descriptor_each(tmp_path: Path):
    state = CheckpointState({f"t{i}": np.full(3, i, np.float32) for i in range(2000)})
    ortckpt.to_npz(state, tmp_path / "many.npz")
    code = (
        "import resource, sys, ortckpt\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))\n"
        "s = ortckpt.from_npz(sys.argv[1])\n"
        "assert len(s.parameters) == 2000 and s.parameters['t1999'].data.tolist() == [1999.0] * 3\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "many.npz")], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


# -- special files ------------------------------------------------------------------------------------


def _reads_within(code: str, path: Path, seconds: float = 60) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` (with ``path`` as sys.argv[1]) in a child limited to 1 GiB of address space:
    a hang is a timeout, a read of /dev/zero runs out of memory."""
    prelude = "import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code, str(path)], capture_output=True, text=True, timeout=seconds
    )


@pytest.mark.parametrize(
    "call",
    [
        "ortckpt.from_npz(sys.argv[1])",
        "ortckpt.from_safetensors(sys.argv[1])",
        "ortckpt.load('local://' + sys.argv[1])",
        "ortckpt.from_npz('local://' + sys.argv[1])",
        "ortckpt.convert(sys.argv[1], sys.argv[1] + '.ckpt')",
    ],
)
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_special_inputs_are_refused_without_reading(tmp_path: Path, call: str, special: str):
    if special == "fifo":
        path = tmp_path / "in.npz"
        os.mkfifo(path)
        if "safetensors" in call:
            path = path.rename(tmp_path / "in.safetensors")
    else:
        path = Path(special)
    code = f"import ortckpt\ntry:\n    {call}\nexcept OSError as exc:\n    print('refused:', exc)\n"
    proc = _reads_within(code, path)
    assert proc.returncode == 0 and "refused:" in proc.stdout, proc.stderr[-2000:]
    assert "regular file" in proc.stdout


def _writers(tmp_path: Path) -> dict[str, Callable[[str], None]]:
    state = CheckpointState({"w": np.arange(4, dtype=np.float32)})
    ortckpt.save(state, tmp_path / "src.ckpt")
    src = str(tmp_path / "src.ckpt")
    return {
        "to_npz": lambda out: ortckpt.to_npz(state, out),
        "to_safetensors": lambda out: ortckpt.to_safetensors(state, out),
        "convert npz": lambda out: ortckpt.convert(src, out),
        "convert safetensors": lambda out: ortckpt.convert(src, out),
    }


@pytest.mark.parametrize("local", ["", "local://", "file://"])
@pytest.mark.parametrize("writer", ["to_npz", "to_safetensors", "convert npz", "convert safetensors"])
def test_writers_refuse_fifo_and_device_targets(tmp_path: Path, writer: str, local: str):
    ext = ".safetensors" if "safetensors" in writer else ".npz"
    fifo = tmp_path / f"fifo{ext}"
    os.mkfifo(fifo)
    targets = [fifo]
    if os.geteuid() == 0:
        device = tmp_path / f"null{ext}"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
        targets.append(device)
    write = _writers(tmp_path)[writer]
    for target in targets:
        kind = stat.S_IFMT(os.lstat(target).st_mode)
        with pytest.raises(OSError, match="regular file"):
            write(local + str(target))
        assert stat.S_IFMT(os.lstat(target).st_mode) == kind, f"{target} was replaced"
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == sorted(["src.ckpt", *(t.name for t in targets)])


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_every_writer_gives_new_files_one_mode(tmp_path: Path, umask: int):
    writers = _writers(tmp_path)
    old = os.umask(umask)
    try:
        for i, (name, write) in enumerate(writers.items()):
            out = tmp_path / f"new{i}{'.safetensors' if 'safetensors' in name else '.npz'}"
            write(str(out))
            assert stat.S_IMODE(os.stat(out).st_mode) == 0o666 & ~umask, name
            os.chmod(out, 0o604)
            write(str(out))  # a replaced file keeps its mode
            assert stat.S_IMODE(os.stat(out).st_mode) == 0o604, name
    finally:
        os.umask(old)


# -- no silent data loss ---------------------------------------------------------------------------------


@pytest.fixture
def trained() -> CheckpointState:
    w = np.arange(50_000, dtype=np.float32)
    return CheckpointState(
        {"w": w},
        frozen={"n": np.arange(3, dtype=np.int64)},
        properties={"epoch": 3},
        optimizer={
            "g": OptimizerGroup(
                step=7, initial_learning_rate=0.5, states={"w": {"momentum0": w + 1, "momentum1": w + 2}}
            )
        },
    )


def test_convert_in_place_keeps_the_optimizer(tmp_path: Path, trained: CheckpointState, assert_same_state):
    path = tmp_path / "x.ckpt"
    ortckpt.save(trained, path)
    size = os.path.getsize(path)
    assert main(["convert", str(path), str(path)]) == 0
    assert os.path.getsize(path) == size
    assert_same_state(trained, ortckpt.load(path))
    ortckpt.convert(path, path)
    assert_same_state(trained, ortckpt.load(path))
    for flat in (tmp_path / "x.npz", tmp_path / "x.safetensors"):
        ortckpt.convert(path, flat)
        size = os.path.getsize(flat)
        assert main(["convert", str(flat), str(flat)]) == 0  # the mapped input replaced atomically
        assert os.path.getsize(flat) == size
        assert_same_state(trained, load_source(str(flat)))


@pytest.mark.parametrize("ext", [".npz", ".safetensors"])
def test_flat_files_keep_the_optimizer_by_default(
    tmp_path: Path, trained: CheckpointState, assert_same_state, ext: str
):
    ortckpt.save(trained, tmp_path / "a.ckpt")
    assert main(["convert", str(tmp_path / "a.ckpt"), str(tmp_path / f"b{ext}")]) == 0
    assert main(["convert", str(tmp_path / f"b{ext}"), str(tmp_path / "c.ckpt")]) == 0
    assert_same_state(trained, ortckpt.load(tmp_path / "c.ckpt"))
    ortckpt.to_npz(trained, tmp_path / "d.npz")
    assert ortckpt.from_npz(tmp_path / "d.npz").optimizer is not None
    # dropped only when asked
    assert main(["convert", str(tmp_path / f"b{ext}"), str(tmp_path / "e.ckpt"), "--drop-optimizer"]) == 0
    assert ortckpt.load(tmp_path / "e.ckpt").optimizer is None
    ortckpt.convert(tmp_path / "a.ckpt", tmp_path / f"f{ext}", include_optimizer_state=False)
    assert load_source(str(tmp_path / f"f{ext}")).optimizer is None
    assert main(["convert", "x.ckpt", "y.ckpt", "--drop-optimizer", "--include-optimizer-state"]) == 2


@pytest.mark.parametrize("ext", [".npz", ".safetensors"])
def test_flat_file_truncated_after_reading_cannot_kill_the_process(tmp_path: Path, ext: str) -> None:
    """npz archives and safetensors files are read into private memory by the core, never mapped:
    another program truncating the file while its arrays are in use changes nothing (a mapping
    would die with SIGBUS). Run in a subprocess, so a signal would show as its exit status."""
    path = tmp_path / f"m{ext}"
    if ext == ".npz":
        np.savez(path, w=np.arange(1 << 16, dtype=np.float32), v=np.ones(1 << 16, dtype=np.float64))
    else:
        state = CheckpointState(
            {"w": np.arange(1 << 16, dtype=np.float32), "v": np.ones(1 << 16, np.float64)}
        )
        ortckpt.to_safetensors(state, path)
    reader = "from_npz" if ext == ".npz" else "from_safetensors"
    script = (
        "import os, sys, numpy as np, ortckpt\n"
        f"state = ortckpt.{reader}(sys.argv[1])\n"
        "os.truncate(sys.argv[1], 0)\n"
        "w = state.parameters['w'].data\n"
        "assert np.array_equal(w, np.arange(1 << 16, dtype=np.float32))\n"
        "assert float(state.parameters['v'].data.sum()) == float(1 << 16)\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr)


# Reads a safetensors file over and over while another process truncates it and writes it back in
# place (what an in-place writer does); prints how many reads gave the exact values and how many
# raised each error class.
_TRUNCATION_RACE = """
import collections, json, sys, time
import numpy as np, ortckpt
path, expected_sum = sys.argv[1], float(sys.argv[2])
outcomes = collections.Counter()
deadline = time.monotonic() + 2.0
while time.monotonic() < deadline or len(outcomes) < 2:
    try:
        state = ortckpt.from_safetensors(path)
    except (ortckpt.CheckpointError, OSError) as exc:
        outcomes[type(exc).__name__] += 1
    else:
        assert float(state.parameters["w"].data.sum(dtype=np.float64)) == expected_sum
        outcomes["ok"] += 1
    if time.monotonic() > deadline + 20:
        break
print(json.dumps(outcomes))
"""

_TRUNCATOR = """
import os, sys, time
path = sys.argv[1]
with open(path, "rb") as f:
    good = f.read()
while True:
    os.truncate(path, len(good) // 3)
    time.sleep(0.002)
    with open(path, "r+b") as f:
        f.write(good)
    time.sleep(0.002)
"""


def test_safetensors_truncated_while_being_read_never_kills_the_process(tmp_path: Path) -> None:
    """Another process truncates the file and writes it back in place while it is read, again and
    again: every read gives the exact values or raises an ortckpt error (the core notices the
    size or time change, or the header finds the file short) — never a signal, never wrong values."""
    path = tmp_path / "race.safetensors"
    w = np.arange(4 << 20, dtype=np.float32)  # 16 MiB: each read takes a few chunks
    ortckpt.to_safetensors(CheckpointState({"w": w}), path)
    truncator = subprocess.Popen([sys.executable, "-c", _TRUNCATOR, str(path)])
    try:
        done = subprocess.run(
            [sys.executable, "-c", _TRUNCATION_RACE, str(path), repr(float(w.sum(dtype=np.float64)))],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        truncator.kill()
        truncator.wait()
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    outcomes = json.loads(done.stdout)
    print(outcomes)
    assert set(outcomes) <= {"ok", "CheckpointChangedError", "ConversionError"}, outcomes
    assert len(outcomes) >= 2, f"the race never hit both outcomes: {outcomes}"
