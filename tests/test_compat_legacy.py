"""The ORT 1.15 checkpoint folder: ortckpt reads what ORT 1.15.1 wrote (tests/data/ort115, made by
scripts/make_ort115_fixtures.py with manifests of ORT's own view), and refuses malformed folders
with its own exceptions."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import ortckpt
from tests.helpers.pbseq import pbseq as pbseq_of
from tests.helpers.pbseq import varint

pytest.importorskip("onnx")

DATA = Path(__file__).parent / "data" / "ort115"
FIXTURES = sorted(p.stem for p in DATA.glob("*.json"))


def sha(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def check_against_manifest(state: ortckpt.CheckpointState, manifest: dict) -> None:
    params = {name: p for name, p in state.parameters.items()}
    assert sorted(params) == sorted(manifest["parameters"])
    for name, want in manifest["parameters"].items():
        p = params[name]
        assert p.trainable == want["trainable"], name
        assert p.dtype.name == want["dtype"], name
        assert list(p.shape) == want["shape"], name
        assert sha(p.data) == want["sha256"], name
    assert dict(state.properties) == manifest["properties"]
    if manifest["optimizer"] is None:
        assert state.optimizer is None
        return
    assert state.optimizer is not None
    assert sorted(state.optimizer) == sorted(manifest["optimizer"])
    for group_name, want_group in manifest["optimizer"].items():
        group = state.optimizer[group_name]
        assert group.step == want_group["step"]
        assert group.initial_learning_rate == want_group["initial_learning_rate"]
        got = {param: {m: sha(group.states[param][m]) for m in group.states[param]} for param in group.states}
        assert got == want_group["momentums"]


@pytest.mark.parametrize("name", FIXTURES)
def test_reads_what_ort_115_wrote(name: str) -> None:
    manifest = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    state = ortckpt.load(DATA / name)
    assert state.version == 0
    check_against_manifest(state, manifest)


@pytest.mark.parametrize("version", [1, 2])
def test_folder_converts_to_a_file(tmp_path: Path, version: int) -> None:
    manifest = json.loads((DATA / "adamw_trained.json").read_text(encoding="utf-8"))
    out = tmp_path / "converted.ckpt"
    ortckpt.save(ortckpt.load(DATA / "adamw_trained"), out, format_version=version)
    state = ortckpt.load(out)
    assert state.version == version
    check_against_manifest(state, manifest)


def test_cli_inspects_and_converts_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ortckpt.cli import main

    assert main(["inspect", str(DATA / "adamw_trained")]) == 0
    text = capsys.readouterr().out
    assert "ORT 1.15 checkpoint folder" in text and "fc1.weight" in text and "group0" in text
    out = tmp_path / "v1.ckpt"
    assert (
        main(
            [
                "convert",
                str(DATA / "adamw_trained"),
                str(out),
                "--format-version",
                "1",
                "--include-optimizer-state",
            ]
        )
        == 0
    )
    assert ortckpt.load(out).version == 1
    assert main(["diff", str(DATA / "adamw_trained"), str(out)]) == 0


# -- malformed folders ---------------------------------------------------------------------------


def pbseq(*messages: bytes) -> bytes:
    return pbseq_of(list(messages))


def proto(name: str, arr: np.ndarray) -> bytes:
    from onnx import numpy_helper

    return bytes(numpy_helper.from_array(arr, name).SerializeToString())


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of an ORT-written folder with optimizer state, to break."""
    dest = tmp_path / "ckpt"
    shutil.copytree(DATA / "adamw_trained", dest)
    return dest


TRAIN = "paramtrain_tensors.pbseq"


def write(folder: Path, name: str, data: bytes) -> None:
    (folder / name).write_bytes(data)


@pytest.mark.parametrize(
    ("data", "error", "words"),
    [
        (b"", ortckpt.InvalidCheckpointError, "ends inside the message count"),
        (varint(5) + varint(1) + b"x", ortckpt.InvalidCheckpointError, "declares 5 messages"),
        (varint(1) + varint(100) + b"abc", ortckpt.InvalidCheckpointError, "needs 100 bytes"),
        (varint(1) + varint(2**31), ortckpt.InvalidCheckpointError, "larger than ORT allows"),
        (varint(2**40), ortckpt.InvalidCheckpointError, "larger than ORT allows"),
        (b"\x80" * 11, ortckpt.InvalidCheckpointError, "longer than 10 bytes"),
        (b"\xff" * 11, ortckpt.InvalidCheckpointError, "does not fit in 64 bits"),
        (
            pbseq(proto("w", np.zeros(2, np.float32))) + b"\x00",
            ortckpt.InvalidCheckpointError,
            "follow the last",
        ),
        (pbseq(b"\xff\xff\xff\xff"), ortckpt.InvalidCheckpointError, "message 0 ends inside the field key"),
        (pbseq(b"\x00\x00"), ortckpt.InvalidCheckpointError, "not a serialized onnx.TensorProto"),
        (pbseq(b""), ortckpt.InvalidCheckpointError, "name of message 0 is missing"),
    ],
)
def test_bad_framing_and_garbage(folder: Path, data: bytes, error: type[Exception], words: str) -> None:
    write(folder, TRAIN, data)
    with pytest.raises(error, match=words) as info:
        ortckpt.load(folder)
    assert TRAIN in str(info.value)


def test_truncated_file(folder: Path) -> None:
    data = (folder / TRAIN).read_bytes()
    write(folder, TRAIN, data[:-5])
    with pytest.raises(ortckpt.InvalidCheckpointError, match="truncated"):
        ortckpt.load(folder)


def test_bad_tensors(folder: Path) -> None:
    from onnx import numpy_helper

    t = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    t.dims[:] = [5]  # 20 bytes needed, 16 present
    write(folder, TRAIN, pbseq(t.SerializeToString()))
    with pytest.raises(ortckpt.TensorDataError, match='"w": shape'):
        _ = ortckpt.load(folder).parameters["w"].data
    t.dims[:] = [-4]
    write(folder, TRAIN, pbseq(t.SerializeToString()))
    with pytest.raises(ortckpt.TensorDataError, match="negative"):
        ortckpt.load(folder)
    t.dims[:] = [4]
    t.data_location = 1
    write(folder, TRAIN, pbseq(t.SerializeToString()))
    with pytest.raises(ortckpt.ExternalDataError, match="inline"):
        ortckpt.load(folder)


def test_duplicates(folder: Path) -> None:
    shutil.copy(folder / TRAIN, folder / "paramtrain_copy.pbseq")
    with pytest.raises(ortckpt.DuplicateNameError, match=r"fc1\.bias"):
        ortckpt.load(folder)
    os.unlink(folder / "paramtrain_copy.pbseq")
    shutil.copy(folder / "custom_properties.pbseq", folder / "custom_again.pbseq")
    with pytest.raises(ortckpt.DuplicateNameError, match="property"):
        ortckpt.load(folder)


def test_optimizer_files(folder: Path) -> None:
    os.unlink(folder / "optim_group0_properties.pbseq")
    with pytest.raises(ortckpt.InvalidCheckpointError, match=r"no optim_group0_properties\.pbseq"):
        ortckpt.load(folder)
    write(folder, "optim_group0_properties.pbseq", pbseq(proto("builtin.step", np.array(3, np.int64))))
    with pytest.raises(ortckpt.InvalidCheckpointError, match=r"builtin\.initial_learning_rate"):
        ortckpt.load(folder)
    write(folder, "optim_a_b_c_tensors.pbseq", pbseq())
    with pytest.raises(ortckpt.InvalidCheckpointError, match=r"optim_a_b_c_tensors\.pbseq.* not an optim"):
        ortckpt.load(folder)


def test_bad_properties(folder: Path) -> None:
    write(folder, "custom_properties.pbseq", pbseq(proto("p", np.zeros(2, np.float32))))
    with pytest.raises(ortckpt.InvalidCheckpointError, match="2 values"):
        ortckpt.load(folder)
    write(folder, "custom_properties.pbseq", pbseq(proto("p", np.array(1, np.int32))))
    with pytest.raises(ortckpt.InvalidCheckpointError, match="INT32"):
        ortckpt.load(folder)


def test_symlinks_and_special_files(folder: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.pbseq"
    outside.write_bytes((folder / TRAIN).read_bytes())
    os.unlink(folder / TRAIN)
    os.symlink(outside, folder / TRAIN)
    with pytest.raises(ortckpt.InvalidCheckpointError, match="leading out"):
        ortckpt.load(folder)
    os.unlink(folder / TRAIN)
    shutil.copy(outside, folder / ".hidden")  # hidden entries are skipped, as ORT does
    os.symlink(".hidden", folder / TRAIN)  # a link that stays inside the folder is fine
    assert ortckpt.load(folder).parameters["fc1.bias"].trainable
    os.unlink(folder / TRAIN)
    os.symlink("missing", folder / TRAIN)  # dangling, inside
    with pytest.raises(FileNotFoundError):
        ortckpt.load(folder)
    os.unlink(folder / TRAIN)
    os.mkfifo(folder / TRAIN)  # would block a naive reader: refused by the core's open, unopened
    with pytest.raises(OSError, match="FIFO"):
        ortckpt.load(folder)


def test_not_a_checkpoint_folder(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "readme.txt").write_text("hello")
    for folder in (tmp_path, empty):  # likely a wrong path: stays the OS error it always was
        with pytest.raises(IsADirectoryError, match=r"not an ORT 1\.15 checkpoint folder") as info:
            ortckpt.load(folder)
        assert info.value.filename == str(folder)
    with pytest.raises(FileNotFoundError):
        ortckpt.load(tmp_path / "missing")


# -- mutations (hypothesis) ------------------------------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TRAINED = DATA / "adamw_trained"
TRAINED_FILES = sorted(p.name for p in TRAINED.iterdir())

_edit = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(0, 7)),
    st.tuples(st.just("set"), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("delete"), st.integers(0, 10_000), st.integers(1, 16)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.just(0)),
)


def _mutate(data: bytes, edits: list[tuple[str, int, object]]) -> bytes:
    out = bytearray(data)
    for kind, where, arg in edits:
        at = where % (len(out) + 1)
        if kind == "flip" and at < len(out):
            out[at] ^= 1 << int(arg)  # type: ignore[call-overload]
        elif kind == "set" and at < len(out):
            out[at] = int(arg)  # type: ignore[call-overload]
        elif kind == "insert":
            out[at:at] = arg  # type: ignore[assignment]
        elif kind == "delete":
            del out[at : at + int(arg)]  # type: ignore[call-overload]
        elif kind == "truncate":
            del out[at:]
    return bytes(out)


def _messages(data: bytes) -> list[bytes]:
    """The messages of a .pbseq file whose framing the loader accepted (for the onnx cross-check)."""

    def read(pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = data[pos]
            value |= (byte & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if not byte & 0x80:
                return value, pos

    count, pos = read(0)
    out = []
    for _ in range(count):
        size, pos = read(pos)
        out.append(data[pos : pos + size])
        pos += size
    return out


def _use(state: ortckpt.CheckpointState) -> None:
    """Touch everything a loaded state holds."""
    for name, p in state.parameters.items():
        assert isinstance(name, str)
        _ = p.data, p.shape, p.dtype, p.trainable
    for group in (state.optimizer or {}).values():
        for param in group.states:
            for m in group.states[param]:
                _ = group.states[param][m]
    _ = dict(state.properties)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entry=st.sampled_from(TRAINED_FILES), edits=st.lists(_edit, min_size=1, max_size=4))
def test_mutated_files_give_checkpoint_errors_only(
    tmp_path_factory: pytest.TempPathFactory, entry: str, edits: list[tuple[str, int, object]]
) -> None:
    """Any mutation of a real folder's file loads or raises a CheckpointError subclass, nothing
    else; when it loads, onnx reads each of that file's messages as the same tensor."""
    from onnx import TensorProto

    folder = tmp_path_factory.mktemp("mutated")
    for name in TRAINED_FILES:
        shutil.copy(TRAINED / name, folder / name)
    data = _mutate((TRAINED / entry).read_bytes(), edits)
    (folder / entry).write_bytes(data)
    try:
        state = ortckpt.load(folder)
    except ortckpt.CheckpointError as exc:
        assert entry in str(exc) or "duplicate" in str(exc) or "group" in str(exc), exc
        return
    try:
        _use(state)  # values too large for numpy are refused when used, as for any checkpoint
    except ortckpt.TensorDataError as exc:
        assert "too large for a numpy array" in str(exc), exc
    # an independent decoder agrees on every message the loader accepted
    for message in _messages(data):
        proto = TensorProto()
        proto.ParseFromString(message)
        if entry.startswith("param"):
            p = state.parameters[proto.name]
            assert list(p.shape) == list(proto.dims)
            if proto.HasField("raw_data"):
                assert np.ascontiguousarray(p.data).tobytes() == proto.raw_data
