"""Conversions: safetensors, npz and state dicts both ways (bit-exact round trips), to_nominal, the
``convert`` / ``strip-values`` commands, and the errors for what a format cannot hold."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import zipfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, ConversionError
from ortckpt.cli import main

safetensors = pytest.importorskip("safetensors")
from safetensors.numpy import save_file  # noqa: E402

SAFETENSORS_CANNOT = {"h.string", "o.complex128", "w.scalar_str", "z.empty_str"}


def without(state: CheckpointState, names: set[str]) -> CheckpointState:
    """``state`` minus some parameters (and their momentums)."""
    return CheckpointState(
        [p for n, p in state.parameters.items() if n not in names],
        properties=state.properties,
        optimizer=state.optimizer,
    )


# -- round trips -------------------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", [False, True])
def test_npz_round_trip_every_dtype(
    tmp_path: Path, sample_state: CheckpointState, assert_same_state, optimizer: bool
):
    out = tmp_path / "s.npz"
    ortckpt.to_npz(sample_state, out, include_optimizer_state=optimizer)
    back = ortckpt.from_npz(out)
    assert_same_state(sample_state, back, optimizer=optimizer)
    if not optimizer:
        assert back.optimizer is None
    # and through a checkpoint file again: nothing lost
    ortckpt.save(back, tmp_path / "s.ckpt")
    assert_same_state(sample_state, ortckpt.load(tmp_path / "s.ckpt"), optimizer=optimizer)


@pytest.mark.parametrize("optimizer", [False, True])
def test_safetensors_round_trip(
    tmp_path: Path, sample_state: CheckpointState, assert_same_state, optimizer: bool
):
    state = without(sample_state, SAFETENSORS_CANNOT)
    out = tmp_path / "s.safetensors"
    ortckpt.to_safetensors(state, out, include_optimizer_state=optimizer)
    back = ortckpt.from_safetensors(out)
    assert_same_state(state, back, optimizer=optimizer)
    # the file is a plain safetensors file other tools read: names and the momentum keys
    from safetensors import safe_open

    with safe_open(str(out), framework="np") as f:
        keys = set(f.keys())
        layout = json.loads(f.metadata()["ortckpt"])
        assert np.array_equal(f.get_tensor("a.float32"), state.parameters["a.float32"].data, equal_nan=True)
    assert set(state.parameters) <= keys
    momentum = "__optimizer__/group0/a.float32/momentum0"
    assert (momentum in keys) == optimizer
    assert sorted(layout["frozen"]) == sorted(state.frozen_parameters)


def test_safetensors_tensors_view_the_private_copy(tmp_path: Path):
    """Tensors are read-only views of the file's bytes read into private memory by the core: no
    copy per tensor, and no mapping another program's truncation could turn into SIGBUS."""
    out = tmp_path / "m.safetensors"
    save_file({"w": np.arange(1024, dtype=np.float32)}, str(out))
    state = ortckpt.from_safetensors(out)
    data = state.parameters["w"].data
    assert not data.flags.writeable
    base: Any = data
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, ortckpt._native.MappedFile) and not base.mapped, (
        "the tensor should be a view of the file's private bytes, not a copy or a mapping"
    )


def test_bf16_fp8_bit_exact_both_formats(tmp_path: Path, raw):
    arrays = {
        "bf16": np.arange(2**16, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(256, 256),
        "e4m3fn": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
        "e4m3fnuz": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fnuz),
        "e5m2": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2),
        "e5m2fnuz": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2fnuz),
    }
    state = CheckpointState(arrays)
    for name in ("x.safetensors", "x.npz"):
        if name.endswith(".npz"):
            ortckpt.to_npz(state, tmp_path / name)
            back = ortckpt.from_npz(tmp_path / name)
        else:
            ortckpt.to_safetensors(state, tmp_path / name)
            back = ortckpt.from_safetensors(tmp_path / name)
        for key, value in arrays.items():
            got = back.parameters[key].data
            assert got.dtype == value.dtype, (name, key)
            assert raw(got) == raw(value), (name, key)  # every bit pattern, NaNs included


def test_state_dict_round_trip(sample_state: CheckpointState, raw):
    d = ortckpt.to_state_dict(sample_state, include_optimizer_state=True)
    assert "__optimizer__/group0/a.float32/momentum1" in d
    plain = {k: v for k, v in d.items() if not k.startswith("__optimizer__/")}
    assert list(plain) == list(sample_state.parameters)
    back = ortckpt.from_state_dict(plain, trainable=list(sample_state.trainable_parameters))
    for name, p in sample_state.parameters.items():
        q = back.parameters[name]
        assert (q.trainable, q.dtype, q.shape) == (p.trainable, p.dtype, p.shape), name
        assert raw(q.data) == raw(p.data), name
    # default flags: floating-point tensors trainable (bfloat16/float8 included), the rest frozen
    default = ortckpt.from_state_dict(plain, properties={"epoch": 2})
    assert default.parameters["p.bfloat16"].trainable and default.parameters["a.float32"].trainable
    assert not default.parameters["g.int64"].trainable and not default.parameters["h.string"].trainable
    assert default.properties["epoch"] == 2


def test_to_torch():
    torch = pytest.importorskip("torch")
    state = CheckpointState(
        {
            "w": np.arange(6, dtype=np.float32).reshape(2, 3),
            "b": np.arange(4, dtype=np.uint16).view(ml_dtypes.bfloat16),
        }
    )
    tensors = ortckpt.to_torch(state)
    assert tensors["w"].dtype == torch.float32 and tensors["w"].shape == (2, 3)
    assert tensors["b"].dtype == torch.bfloat16
    back = ortckpt.from_state_dict(tensors)
    assert back.parameters["b"].data.view(np.uint16).tolist() == [0, 1, 2, 3]


# -- foreign files ---------------------------------------------------------------------------------


def test_foreign_safetensors_and_npz(tmp_path: Path):
    arrays = {"fc.weight": np.ones((2, 3), np.float32), "steps": np.array([3], np.int64)}
    save_file(arrays, str(tmp_path / "hf.safetensors"))
    np.savez(tmp_path / "plain.npz", **arrays)
    np.savez_compressed(tmp_path / "small.npz", **arrays)
    for state in (
        ortckpt.from_safetensors(tmp_path / "hf.safetensors"),
        ortckpt.from_npz(tmp_path / "plain.npz"),
        ortckpt.from_npz(tmp_path / "small.npz"),  # compressed members are read, not mapped
    ):
        assert list(state.trainable_parameters) == ["fc.weight"]
        assert list(state.frozen_parameters) == ["steps"]
        assert state.parameters["steps"].data.tolist() == [3]
    chosen = ortckpt.from_safetensors(tmp_path / "hf.safetensors", trainable=["steps"])
    assert list(chosen.trainable_parameters) == ["steps"]
    with pytest.raises(ConversionError, match="no tensor 'nope'"):
        ortckpt.from_npz(tmp_path / "plain.npz", trainable=["nope"])


def test_fortran_order_npz(tmp_path: Path):
    a = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    np.savez(tmp_path / "f.npz", a=a)
    assert np.array_equal(ortckpt.from_npz(tmp_path / "f.npz").parameters["a"].data, a)


# -- what a format cannot hold, and malformed input ---------------------------------------------------


def test_safetensors_refuses_strings_and_complex128(tmp_path: Path):
    out = tmp_path / "x.safetensors"
    with pytest.raises(ConversionError, match=r"'s'.*string.*safetensors cannot hold it.*\.npz"):
        ortckpt.to_safetensors(CheckpointState(frozen={"s": np.array(["a"], dtype=object)}), out)
    with pytest.raises(ConversionError, match=r"'c'.*complex128"):
        ortckpt.to_safetensors(CheckpointState({"c": np.zeros(2, np.complex128)}), out)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary file left behind


def test_odd_names_round_trip(tmp_path: Path):
    names = ["", "a/b", "日本", "..x", " sp ", "x.npy", "a..b"]
    state = CheckpointState({n: np.full(2, i, np.float32) for i, n in enumerate(names)})
    ortckpt.to_npz(state, tmp_path / "n.npz")
    ortckpt.to_safetensors(state, tmp_path / "n.safetensors")
    for back in (ortckpt.from_npz(tmp_path / "n.npz"), ortckpt.from_safetensors(tmp_path / "n.safetensors")):
        assert {n: p.data.tolist() for n, p in back.parameters.items()} == {
            n: [float(i)] * 2 for i, n in enumerate(names)
        }
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "n.npz",
        "n.safetensors",
    ]  # nothing written elsewhere
    nul = CheckpointState({"x\x00y": np.zeros(1, np.float32)})
    with pytest.raises(ConversionError, match="NUL"):
        ortckpt.to_npz(nul, tmp_path / "nul.npz")
    ortckpt.to_safetensors(nul, tmp_path / "nul.safetensors")
    assert list(ortckpt.from_safetensors(tmp_path / "nul.safetensors").parameters) == ["x\x00y"]


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("../../outside/evil", "'..' component"),
        ("a/../../b", "'..' component"),
        ("/abs/path", "absolute path"),
        ("a\\..\\b", "backslash"),
        ("C:evil", "drive letter"),
    ],
)
def test_npz_member_names_a_zip_tool_would_extract_elsewhere_are_refused(
    tmp_path: Path, name: str, problem: str
):
    """A device-supplied tensor name became the member name unchanged: ``to_npz`` wrote members a
    zip tool extracts outside its folder (zip-slip). Refused both ways now (the core's rule);
    safetensors, whose names are not paths, keeps them."""
    import zipfile

    state = CheckpointState({name: np.zeros(2, np.float32)})
    with pytest.raises(ConversionError, match=problem) as info:
        ortckpt.to_npz(state, tmp_path / "x.npz")
    assert repr(name) in str(info.value) and "safetensors" in str(info.value)
    assert not (tmp_path / "x.npz").exists()
    with zipfile.ZipFile(tmp_path / "hostile.npz", "w") as z:  # written by another tool
        buffer = io.BytesIO()
        np.save(buffer, np.zeros(2, np.float32))
        z.writestr(name + ".npy", buffer.getvalue())
    with pytest.raises(ConversionError, match="would not extract it inside its folder"):
        ortckpt.from_npz(tmp_path / "hostile.npz")
    ortckpt.to_safetensors(state, tmp_path / "x.safetensors")
    assert list(ortckpt.from_safetensors(tmp_path / "x.safetensors").parameters) == [name]


def test_npz_refuses_trailing_nul_strings(tmp_path: Path):
    state = CheckpointState(frozen={"s": np.array(["ok", "bad\x00"], dtype=object)})
    with pytest.raises(ConversionError, match="ending in NUL"):
        ortckpt.to_npz(state, tmp_path / "x.npz")


def test_nominal_and_reserved_names_refused(tmp_path: Path, sample_state: CheckpointState):
    with pytest.raises(ConversionError, match="nominal"):
        ortckpt.to_npz(ortckpt.to_nominal(sample_state), tmp_path / "n.npz")
    reserved = CheckpointState({"__optimizer__/g/p/m": np.zeros(1, np.float32)})
    with pytest.raises(ConversionError, match="reserved"):
        ortckpt.to_safetensors(reserved, tmp_path / "r.safetensors")


def test_malformed_inputs(tmp_path: Path):
    garbage = tmp_path / "g.safetensors"
    garbage.write_bytes(b"\xff" * 64)
    with pytest.raises(ConversionError, match="not a valid safetensors file"):
        ortckpt.from_safetensors(garbage)
    (tmp_path / "g.npz").write_bytes(b"PK garbage")
    with pytest.raises(ConversionError, match=r"g\.npz: it is not a valid zip archive"):
        ortckpt.from_npz(tmp_path / "g.npz")
    # pickled object arrays are refused, never unpickled
    np.savez(tmp_path / "obj.npz", o=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ConversionError, match="never objects, which would need unpickling"):
        ortckpt.from_npz(tmp_path / "obj.npz")
    # a broken layout
    save_file(
        {"w": np.zeros(2, np.float32)}, str(tmp_path / "l.safetensors"), metadata={"ortckpt": "{not json"}
    )
    with pytest.raises(ConversionError, match="layout is not valid JSON"):
        ortckpt.from_safetensors(tmp_path / "l.safetensors")
    # a truncated npz member
    ortckpt.to_npz(CheckpointState({"w": np.zeros(1000, np.float32)}), tmp_path / "t.npz")
    data = (tmp_path / "t.npz").read_bytes()
    (tmp_path / "t2.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ConversionError):
        ortckpt.from_npz(tmp_path / "t2.npz")


def test_unsupported_safetensors_dtype(tmp_path: Path):
    from safetensors import TensorSpec, serialize_file

    a = np.zeros(4, np.uint8)
    spec = TensorSpec(dtype="float8_e8m0fnu", shape=[4], data_ptr=a.ctypes.data, data_len=4)
    serialize_file({"x": spec}, str(tmp_path / "e8.safetensors"))
    with pytest.raises(ConversionError, match=r"F8_E8M0.*cannot hold"):
        ortckpt.from_safetensors(tmp_path / "e8.safetensors")


# -- to_nominal ----------------------------------------------------------------------------------------


def test_to_nominal(sample_state: CheckpointState):
    nominal = ortckpt.to_nominal(sample_state)
    assert nominal.is_nominal and nominal.optimizer is None
    assert list(nominal.parameters) == list(sample_state.parameters)
    for name, p in sample_state.parameters.items():
        q = nominal.parameters[name]
        assert q.is_nominal and q.trainable == p.trainable and q.data_type == p.data_type
    assert dict(nominal.properties) == dict(sample_state.properties)
    assert not ortckpt.to_nominal(sample_state, keep_properties=False).properties
    again = ortckpt.load_bytes(ortckpt.serialize(nominal))
    assert again.is_nominal and list(again.parameters) == list(sample_state.parameters)


# -- the commands ---------------------------------------------------------------------------------------


def test_cli_convert_chain(tmp_path: Path, sample_state: CheckpointState, assert_same_state, capsys):
    state = without(sample_state, SAFETENSORS_CANNOT)
    ortckpt.save(state, tmp_path / "a.ckpt")
    assert (
        main(
            [
                "convert",
                str(tmp_path / "a.ckpt"),
                str(tmp_path / "b.safetensors"),
                "--include-optimizer-state",
            ]
        )
        == 0
    )
    assert (
        main(
            ["convert", str(tmp_path / "b.safetensors"), str(tmp_path / "c.npz"), "--include-optimizer-state"]
        )
        == 0
    )
    assert (
        main(["convert", str(tmp_path / "c.npz"), str(tmp_path / "d.ckpt"), "--include-optimizer-state"]) == 0
    )
    assert_same_state(state, ortckpt.load(tmp_path / "d.ckpt"))
    assert "wrote" in capsys.readouterr().out
    # flags chosen on the command line
    assert (
        main(["convert", str(tmp_path / "a.ckpt"), str(tmp_path / "e.ckpt"), "--trainable", "g.int64"]) == 0
    )
    assert list(ortckpt.load(tmp_path / "e.ckpt").trainable_parameters) == ["g.int64"]
    # a format that cannot hold a dtype: exit 2 with the reason
    ortckpt.save(sample_state, tmp_path / "s.ckpt")
    assert main(["convert", str(tmp_path / "s.ckpt"), str(tmp_path / "s.safetensors")]) == 2
    assert "safetensors cannot hold it" in capsys.readouterr().err


def test_cli_strip_values(tmp_path: Path, sample_state: CheckpointState):
    ortckpt.save(sample_state, tmp_path / "a.ckpt")
    assert main(["strip-values", str(tmp_path / "a.ckpt"), str(tmp_path / "n.ckpt")]) == 0
    nominal = ortckpt.load(tmp_path / "n.ckpt")
    assert nominal.is_nominal and list(nominal.parameters) == list(sample_state.parameters)
    assert os.path.getsize(tmp_path / "n.ckpt") < 2000


def _run_on_terminal(args: list[str]) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal; return (exit code, what the terminal showed)."""
    main_fd, sub_fd = pty.openpty()
    fcntl.ioctl(sub_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100-column terminal
    # the with block closes the stdout pipe (left open, it is a ResourceWarning)
    with subprocess.Popen(
        [sys.executable, "-m", "ortckpt", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=sub_fd,
    ) as proc:
        os.close(sub_fd)
        shown = b""
        while True:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        proc.wait(timeout=120)
    os.close(main_fd)
    return proc.returncode, shown.decode("utf-8", "replace")


def test_progress_bar_only_on_a_terminal(tmp_path: Path):
    pytest.importorskip("tqdm")
    state = CheckpointState({f"t{i:03d}": np.full(64, i, np.float32) for i in range(300)})
    ortckpt.save(state, tmp_path / "a.ckpt")
    code, shown = _run_on_terminal(["convert", str(tmp_path / "a.ckpt"), str(tmp_path / "a.npz")])
    assert code == 0
    assert "0/300" in shown and "tensor/s" in shown  # tqdm's counter and rate
    proc = subprocess.run(
        [sys.executable, "-m", "ortckpt", "convert", str(tmp_path / "a.ckpt"), str(tmp_path / "b.npz")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stderr == ""  # silent when stderr is not a terminal
    with zipfile.ZipFile(tmp_path / "b.npz") as zf:
        assert len(zf.namelist()) == 301
    # average: a bar over the uploads on a terminal, then the summary table on stdout
    uploads = []
    for i in range(40):
        uploads.append(str(tmp_path / f"dev{i}.ckpt"))
        ortckpt.save(CheckpointState({"w": np.full(4, i, np.float32)}), uploads[-1])
    code, shown = _run_on_terminal(["average", str(tmp_path / "avg.ckpt"), *uploads])
    assert code == 0 and "0/40" in shown and "upload/s" in shown
    proc = subprocess.run(
        [sys.executable, "-m", "ortckpt", "average", str(tmp_path / "avg2.ckpt"), *uploads],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stderr == "" and "accepted 40 of 40 uploads" in proc.stdout


def test_public_names_and_lazy_imports():
    import ortckpt.aggregate
    import ortckpt.cli._average
    import ortckpt.cli._convert
    import ortckpt.conversions  # importing the modules must not shadow the functions

    for name in ("convert", "average", "to_safetensors", "from_npz", "to_nominal", "to_torch"):
        assert callable(getattr(ortckpt, name)) and not isinstance(getattr(ortckpt, name), type(ortckpt)), (
            name
        )
    assert issubclass(ortckpt.ConversionError, ValueError)
    # the optional packages are imported only when used
    code = (
        "import sys, ortckpt, ortckpt.cli; "
        "print(sorted(m for m in ('safetensors', 'fsspec', 'dask', 'distributed', 'tqdm', 's3fs', "
        "'ortckpt.conversions', 'ortckpt.aggregate', 'ortckpt.formats', 'ortckpt.deploy', "
        "'ortckpt.federated') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"
