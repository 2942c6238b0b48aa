"""A file of another kind given to any reader or command: the error says what the file is and which
function or command reads it (the rule is the core's, rust/core/src/sniff.rs; its unit tests cover
each kind's bytes). Every reader of the Python API and every command of the CLI is tried with the
kinds it may meet by mistake: an ONNX model, a safetensors file, an npz archive, another zip, a
PyTorch file (zip and legacy pickle), an ORT adapter where a checkpoint is expected, and a
checkpoint where an adapter, an npz, a safetensors file or an ONNX model is expected.

The checkpoints, models and adapter are the ones ORT wrote (tests/data/artifacts); the npz and
safetensors files are written by numpy and ortckpt; the PyTorch files are built with the layout
torch.save writes (torch is not a test dependency): a zip whose first member is
``<archive>/data.pkl``, and a pickle (protocol 2) starting with torch's legacy magic number.
"""

from __future__ import annotations

import pickle
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ortckpt
from ortckpt import compat
from ortckpt.cli import main
from tests.helpers.paths import DATA

ART = DATA / "artifacts"
CKPT = ART / "trained.ckpt"
MODEL = ART / "model.onnx"
TRAINING_MODEL = ART / "training_model.onnx"
EVAL_MODEL = ART / "eval_model.onnx"
ADAPTER = ART / "lora.onnx_adapter"

#: For each kind: (words naming it, words naming what reads it), both in the message.
SAYS = {
    "onnx": ("an ONNX model", "`ortckpt from-onnx"),
    "safetensors": ("a safetensors file", "ortckpt.from_safetensors"),
    "npz": ("a numpy .npz archive", "ortckpt.from_npz"),
    "zip": ("a zip archive that is not an .npz", "ortckpt.from_npz"),
    "torch": ("a PyTorch file", "torch.load(path, weights_only=True)"),
    "pickle": ("a Python pickle", "never unpickles"),
    "adapter": ("an ORT adapter file", "ortckpt.from_adapter"),
    "checkpoint": ("an ORT training checkpoint", "ortckpt.load"),
}
#: What a checkpoint reader may be handed instead of a checkpoint.
NOT_CHECKPOINTS = ["onnx", "safetensors", "npz", "zip", "torch", "pickle", "adapter"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One file of each kind."""
    tmp = tmp_path_factory.mktemp("kinds")
    made = {"onnx": MODEL, "adapter": ADAPTER, "checkpoint": CKPT}
    made["safetensors"] = tmp / "weights.safetensors"
    ortckpt.to_safetensors(CKPT, made["safetensors"])
    made["npz"] = tmp / "weights.npz"
    np.savez(made["npz"], w=np.ones(3, np.float32))
    made["zip"] = tmp / "notes.zip"
    with zipfile.ZipFile(made["zip"], "w") as z:
        z.writestr("notes.txt", "not arrays")
    made["torch"] = tmp / "model.pt"
    with zipfile.ZipFile(made["torch"], "w") as z:
        z.writestr("model/data.pkl", pickle.dumps({"w": 1}, protocol=2))
        z.writestr("model/byteorder", "little")
        z.writestr("model/version", "3\n")
    made["pickle"] = tmp / "legacy.pt"
    made["pickle"].write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps({"w": 1}))
    return made


def says(kind: str, message: str, file: Path) -> None:
    what, reader = SAYS[kind]
    assert str(file) in message, message
    assert what in message and reader in message, message


def raised(call: Callable[[], object]) -> str:
    with pytest.raises((ortckpt.CheckpointError, compat.CompatError)) as info:
        call()
    return str(info.value)


# -- the Python API ------------------------------------------------------------------------------


CHECKPOINT_READERS: dict[str, Callable[[Path], object]] = {
    "load": ortckpt.load,
    "load(mmap=False)": lambda p: ortckpt.load(p, mmap=False),
    "load_bytes": lambda p: ortckpt.load_bytes(p.read_bytes()),
    "compat.CheckpointState.load_checkpoint": compat.CheckpointState.load_checkpoint,
    "to_safetensors": lambda p: ortckpt.to_safetensors(p, p.with_name("never.safetensors")),
    "to_adapter": lambda p: ortckpt.to_adapter(p, p.with_name("never.onnx_adapter")),
    "to_nominal": ortckpt.to_nominal,
    "load_into_model (checkpoint)": lambda p: ortckpt.load_into_model(p, MODEL),
    "export_for_inference (checkpoint)": lambda p: ortckpt.export_for_inference(EVAL_MODEL, p, ["output"]),
    "parameters_to_buffer (checkpoint)": lambda p: ortckpt.parameters_to_buffer(p, TRAINING_MODEL),
}


@pytest.mark.parametrize("reader", CHECKPOINT_READERS)
@pytest.mark.parametrize("kind", NOT_CHECKPOINTS)
def test_checkpoint_readers_name_the_kind(files: dict[str, Path], reader: str, kind: str) -> None:
    file = files[kind]
    message = raised(lambda: CHECKPOINT_READERS[reader](file))
    says(kind, message, Path("<bytes>") if reader == "load_bytes" else file)


def test_average_names_the_kind_of_a_rejected_upload(files: dict[str, Path]) -> None:
    uploads = [files[kind] for kind in NOT_CHECKPOINTS] + sorted((ART / "uploads").glob("*.ckpt"))
    report = ortckpt.average(uploads, None, reference=ART / "checkpoint")
    reasons = {rejection.client: rejection.reason for rejection in report.rejected}
    for kind in NOT_CHECKPOINTS:
        says(kind, reasons[str(files[kind])], files[kind])
    assert len(report.accepted) == 3


@pytest.mark.parametrize("kind", ["checkpoint", "onnx", "safetensors", "npz"])
def test_from_adapter_names_the_kind(files: dict[str, Path], kind: str) -> None:
    says(kind, raised(lambda: ortckpt.from_adapter(files[kind])), files[kind])


@pytest.mark.parametrize("kind", ["checkpoint", "onnx", "safetensors", "torch", "pickle", "adapter"])
def test_from_npz_names_the_kind(files: dict[str, Path], kind: str) -> None:
    says(kind, raised(lambda: ortckpt.from_npz(files[kind])), files[kind])


@pytest.mark.parametrize("kind", ["checkpoint", "onnx", "npz", "zip", "torch", "pickle", "adapter"])
def test_from_safetensors_names_the_kind(files: dict[str, Path], kind: str) -> None:
    says(kind, raised(lambda: ortckpt.from_safetensors(files[kind])), files[kind])


ONNX_READERS: dict[str, Callable[[Path], object]] = {
    "save_from_onnx": lambda p: ortckpt.save_from_onnx(p, p.with_name("never.ckpt")),
    "load_into_model (model)": lambda p: ortckpt.load_into_model(CKPT, p),
    "export_for_inference (eval model)": lambda p: ortckpt.export_for_inference(p, CKPT, ["output"]),
    "parameters_to_buffer (training model)": lambda p: ortckpt.parameters_to_buffer(CKPT, p),
}


@pytest.mark.parametrize("reader", ONNX_READERS)
@pytest.mark.parametrize("kind", ["checkpoint", "safetensors", "npz", "adapter"])
def test_onnx_readers_name_the_kind(files: dict[str, Path], reader: str, kind: str) -> None:
    says(kind, raised(lambda: ONNX_READERS[reader](files[kind])), files[kind])


def test_onnx_reader_refuses_unknown_bytes_with_our_error(tmp_path: Path) -> None:
    """Bytes no rule recognizes and protobuf cannot parse: a ConversionError, not protobuf's own."""
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff" * 64)
    with pytest.raises(ortckpt.ConversionError, match="not an ONNX model"):
        ortckpt.save_from_onnx(junk, tmp_path / "never.ckpt")


# -- the command line ----------------------------------------------------------------------------


def cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


def checkpoint_commands(file: Path, out: Path) -> dict[str, list[str]]:
    """Every command that reads a checkpoint, with ``file`` where the checkpoint goes."""
    f, o = str(file), str(out)
    return {
        "inspect": ["inspect", f],
        "diff (first)": ["diff", f, str(CKPT)],
        "diff (second)": ["diff", str(CKPT), f],
        "to-onnx": ["to-onnx", f, str(MODEL), o + ".onnx"],
        "set-property": ["set-property", f, "epoch=2", "--dry-run"],
        "strip-optimizer": ["strip-optimizer", f, o + ".ckpt"],
        "convert": ["convert", f, o + ".safetensors"],
        "strip-values": ["strip-values", f, o + ".ckpt"],
        "export-inference": ["export-inference", str(EVAL_MODEL), f, o + ".onnx", "--output", "output"],
        "export-adapter": ["export-adapter", f, o + ".onnx_adapter"],
        "to-buffer": ["to-buffer", f, "--training-model", str(TRAINING_MODEL), "-o", o + ".bin"],
        "from-buffer": ["from-buffer", f, "--reference", f, "--training-model", str(TRAINING_MODEL), "-o", o],
    }


COMMANDS = list(checkpoint_commands(Path("f"), Path("o")))


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", ["onnx", "safetensors", "npz", "torch", "pickle"])
def test_checkpoint_commands_name_the_kind(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, kind: str
) -> None:
    # named as a checkpoint (`convert` would otherwise pick its reader by the extension)
    file = Path(shutil.copy(files[kind], tmp_path / "input.ckpt"))
    argv = checkpoint_commands(file, tmp_path / "out")[command]
    if command == "from-buffer":  # the buffer is any bytes; the reference is the checkpoint read
        argv[1] = str(tmp_path / "upload.bin")
        (tmp_path / "upload.bin").write_bytes(np.zeros(4, np.float32).tobytes())
    says(kind, cli_error(argv, capsys), file)
    assert not list(tmp_path.glob("out*")), "nothing written"


def test_average_command_names_the_kind(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uploads = [str(p) for p in sorted((ART / "uploads").glob("*.ckpt"))]
    assert main(["average", str(tmp_path / "global.ckpt"), str(files["onnx"]), *uploads]) == 0
    says("onnx", capsys.readouterr().out, files["onnx"])


def test_inspect_reads_an_adapter_by_its_content(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    renamed = shutil.copy(files["adapter"], tmp_path / "lora.bin")
    assert main(["inspect", str(renamed)]) == 0
    assert "ORT adapter" in capsys.readouterr().out
    fake = shutil.copy(files["checkpoint"], tmp_path / "not.onnx_adapter")
    says("checkpoint", cli_error(["inspect", str(fake)], capsys), Path(fake))


@pytest.mark.parametrize("kind", ["checkpoint", "safetensors", "npz", "adapter"])
def test_onnx_commands_name_the_kind(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    f, o = str(files[kind]), str(tmp_path / "out")
    for argv in (
        ["from-onnx", f, o + ".ckpt"],
        ["from-onnx", f, o + ".ckpt", "--dry-run"],
        ["to-onnx", str(CKPT), f, o + ".onnx"],
        ["export-inference", f, str(CKPT), o + ".onnx", "--output", "output"],
        ["to-buffer", str(CKPT), "--training-model", f, "-o", o + ".bin"],
    ):
        says(kind, cli_error(argv, capsys), files[kind])


@pytest.mark.parametrize(
    ("suffix", "kind"),
    [(".npz", "checkpoint"), (".npz", "torch"), (".safetensors", "checkpoint"), (".safetensors", "onnx")],
)
def test_convert_reads_by_extension_and_names_the_kind(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str, kind: str
) -> None:
    """`convert` picks its reader by extension: a file named .npz or .safetensors that is something
    else is named by that reader."""
    misnamed = Path(shutil.copy(files[kind], tmp_path / f"input{suffix}"))
    says(kind, cli_error(["convert", str(misnamed), str(tmp_path / "out.ckpt")], capsys), misnamed)
