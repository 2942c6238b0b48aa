"""The command line as a new user meets it: argument order, clean errors, sizes, sort order, usage,
suggestions, ``--dry-run``, ``--json`` on every command, colour and completion (issue 11)."""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, OptimizerGroup
from ortckpt.cli import main
from ortckpt.cli._format import human_size, natural_sorted
from ortckpt.cli._style import Style, use_color

DATA = pathlib.Path(__file__).resolve().parent / "data"
ORT_OPTIM = DATA / "mlp_adamw_with_optimizer.ckpt"  # written by ORT 1.19.2: group0 + 4 properties
WRITING = (
    "from-onnx",
    "to-onnx",
    "set-property",
    "strip-optimizer",
    "convert",
    "strip-values",
    "export-adapter",
    "to-buffer",
    "from-buffer",
)


def _strict_json(text: str) -> Any:
    def reject(token: str) -> None:
        raise AssertionError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=reject)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _copy(src: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    dest.write_bytes(src.read_bytes())
    return dest


def _model(tmp_path: pathlib.Path) -> pathlib.Path:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    values = {
        "fc1.weight": np.ones((4, 8), np.float32),
        "fc1.bias": np.zeros(8, np.float32),
        "fc2.weight": np.ones((8, 3), np.float32),
        "fc2.bias": np.zeros(3, np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["X", "fc1.weight"], ["h0"]),
        helper.make_node("Add", ["h0", "fc1.bias"], ["h1"]),
        helper.make_node("MatMul", ["h1", "fc2.weight"], ["h2"]),
        helper.make_node("Add", ["h2", "fc2.bias"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(v, k) for k, v in values.items()],
    )
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph), path)
    return path


# -- from-onnx --trainable before MODEL OUT --------------------------------------------------------


@pytest.mark.parametrize(
    "order",
    [
        ["--trainable", "fc1.weight", "fc2.bias", "{model}", "{out}"],
        ["{model}", "--trainable", "fc1.weight", "fc2.bias", "{out}"],
        ["{model}", "{out}", "--trainable", "fc1.weight", "fc2.bias"],
        ["--trainable", "fc1.weight", "--trainable", "fc2.bias", "{model}", "{out}"],
    ],
    ids=["before", "between", "after", "repeated"],
)
def test_from_onnx_trainable_in_any_position(
    order: list[str], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _model(tmp_path)
    out = tmp_path / "out.ckpt"
    argv = ["from-onnx", *(a.format(model=model, out=out) for a in order)]
    code, stdout, err = _run(argv, capsys)
    assert (code, err) == (0, ""), err
    assert stdout.startswith(f"wrote {out}: 2 trainable + 2 frozen parameters")
    state = ortckpt.load(out)
    assert sorted(state.trainable_parameters) == ["fc1.weight", "fc2.bias"]


def test_from_onnx_trainable_needs_model_and_out(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _model(tmp_path)
    code, out, err = _run(["from-onnx", "--trainable", "fc1.weight", str(model)], capsys)
    assert code == 2 and out == ""
    assert err.startswith("usage: ortckpt from-onnx ")
    assert err.splitlines()[-1] == "ortckpt: error: the following arguments are required: MODEL OUT"
    assert not list(tmp_path.glob("*.ckpt"))


# -- set-property: leading zeros -------------------------------------------------------------------


def test_set_property_leading_zeros_refused_with_hint(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _copy(ORT_OPTIM, tmp_path / "x.ckpt")
    before = path.read_bytes()
    code, out, err = _run(["set-property", str(path), "run_id=0042"], capsys)
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and line.startswith("ortckpt: error: run_id=0042")
    assert "--type str" in line and "--type int" in line
    assert path.read_bytes() == before
    assert _run(["set-property", str(path), "run_id=0042", "--type", "str"], capsys)[0] == 0
    assert ortckpt.load(path).properties["run_id"] == "0042"
    assert _run(["set-property", str(path), "run_id=0042", "--type", "int"], capsys)[0] == 0
    assert ortckpt.load(path).properties["run_id"] == 42


# -- one clean line for a missing file -------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "{missing}"],
        ["inspect", "--json", "{missing}"],
        ["diff", str(ORT_OPTIM), "{missing}"],
        ["set-property", "{missing}", "a=1"],
        ["strip-optimizer", "{missing}"],
    ],
    ids=["inspect", "inspect-json", "diff", "set-property", "strip-optimizer"],
)
def test_missing_file_one_clean_line(
    argv: list[str], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope.ckpt")
    code, out, err = _run([a.format(missing=missing) for a in argv], capsys)
    assert code == 2 and out == ""
    assert err == f"ortckpt: error: {missing}: No such file or directory\n"


# -- sizes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (64 << 20, "64.0 MiB"),
        (3 << 30, "3.0 GiB"),
    ],
)
def test_human_size(nbytes: int, text: str) -> None:
    assert human_size(nbytes) == text


def test_inspect_human_sizes_text_exact_bytes_json(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.ckpt"
    CheckpointState({"big": np.zeros(1 << 18, np.float32), "small": np.zeros(3, np.float32)}).save(path)
    code, out, _ = _run(["inspect", str(path)], capsys)
    assert code == 0
    assert "big    trainable  float32  [262144]  1.0 MiB" in out
    assert "small  trainable  float32  [3]       12 B" in out
    assert f", {human_size(path.stat().st_size)}\n" in out.splitlines(keepends=True)[0]
    doc = _strict_json(_run(["inspect", "--json", str(path)], capsys)[1])
    assert {p["name"]: p["nbytes"] for p in doc["parameters"]} == {"big": 1 << 20, "small": 12}
    assert doc["file_size"] == doc["total_size"] == path.stat().st_size
    assert doc["external_data_path"] is None and doc["external_data_size"] is None


def test_inspect_total_size_includes_external_data(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ext.ckpt"
    ortckpt.save(CheckpointState({"w": np.ones(4096, np.float32)}), path, external_data_threshold=0)
    ext = pathlib.Path(ortckpt.external_data_path(path))
    assert ext.is_file()
    total = path.stat().st_size + ext.stat().st_size
    doc = _strict_json(_run(["inspect", "--json", str(path)], capsys)[1])
    assert doc["external_data_path"] == str(ext)
    assert (doc["file_size"], doc["external_data_size"], doc["total_size"]) == (
        path.stat().st_size,
        ext.stat().st_size,
        total,
    )
    first = _run(["inspect", str(path)], capsys)[1].splitlines()[0]
    assert first.endswith(
        f"{human_size(path.stat().st_size)} + {human_size(ext.stat().st_size)} external data"
        f" = {human_size(total)} total"
    )


# -- natural sort ----------------------------------------------------------------------------------


def test_natural_sorted() -> None:
    names = ["layer10", "layer2", "layer1", "layer0", "a01", "a1", "b", "layer1.bias"]
    assert natural_sorted(names) == ["a01", "a1", "b", "layer0", "layer1", "layer1.bias", "layer2", "layer10"]


def test_inspect_and_diff_sort_names_naturally(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = ["layer0", "layer1", "layer2", "layer10"]
    a, b = tmp_path / "a.ckpt", tmp_path / "b.ckpt"
    CheckpointState({n: np.zeros(2, np.float32) for n in names}, properties={"p10": 1, "p9": 2}).save(a)
    CheckpointState({n: np.ones(2, np.float32) for n in names}, properties={"p10": 3, "p9": 4}).save(b)
    out = _run(["inspect", str(a)], capsys)[1]
    rows = [line.split()[0] for line in out.splitlines() if line.startswith("  layer")]
    assert rows == names
    assert out.index("p9 = 2") < out.index("p10 = 1")
    doc = _strict_json(_run(["inspect", "--json", str(a)], capsys)[1])
    assert [p["name"] for p in doc["parameters"]] == names and list(doc["properties"]) == ["p9", "p10"]
    diff = _strict_json(_run(["diff", "--json", str(a), str(b)], capsys)[1])
    assert [c["name"] for c in diff["parameters"]["changed"]] == names
    assert [c["name"] for c in diff["properties"]["changed"]] == ["p9", "p10"]


# -- usage and suggestions -------------------------------------------------------------------------


def test_command_error_prints_that_commands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["inspect", "a", "b"], capsys)
    assert code == 2 and out == ""
    assert err.startswith("usage: ortckpt inspect ")
    assert err.rstrip().endswith("ortckpt inspect: error: unrecognized arguments: b")
    code, _, err = _run(["diff", "a"], capsys)
    assert code == 2 and err.startswith("usage: ortckpt diff ")


@pytest.mark.parametrize(
    ("typed", "suggestion"),
    [
        ("inpsect", "inspect"),
        ("dif", "diff"),
        ("strip-optimiser", "strip-optimizer"),
        ("from_onnx", "from-onnx"),
    ],
)
def test_did_you_mean(typed: str, suggestion: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run([typed, "x.ckpt"], capsys)
    assert code == 2 and out == ""
    assert err.startswith("usage: ortckpt ")
    assert err.rstrip().endswith(f"ortckpt: error: unknown command {typed!r}; did you mean {suggestion!r}?")


def test_unknown_command_without_close_match_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["zzzzzz"], capsys)
    assert code == 2
    assert "unknown command 'zzzzzz' (commands: inspect, diff, from-onnx" in err


# -- --dry-run leaves files untouched --------------------------------------------------------------


def _snapshot(folder: pathlib.Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def _dry_argv(command: str, tmp_path: pathlib.Path) -> list[str]:
    ckpt = _copy(ORT_OPTIM, tmp_path / "in.ckpt")
    if command == "from-onnx":
        return ["from-onnx", str(_model(tmp_path)), str(tmp_path / "new.ckpt"), "--trainable", "fc1.weight"]
    if command == "to-onnx":
        trained = tmp_path / "trained.ckpt"
        CheckpointState({"fc1.bias": np.full(8, 2, np.float32)}).save(trained)
        return ["to-onnx", str(trained), str(_model(tmp_path)), str(tmp_path / "new.onnx")]
    if command == "set-property":
        return ["set-property", str(ckpt), "epoch=9", "--delete", "note"]
    if command == "convert":
        return ["convert", str(ckpt), str(tmp_path / "new.npz"), "--include-optimizer-state"]
    if command == "strip-values":
        return ["strip-values", str(ckpt), str(tmp_path / "nominal.ckpt")]
    if command == "export-adapter":
        return ["export-adapter", str(ckpt), str(tmp_path / "new.onnx_adapter"), "--parameters", "fc1.*"]
    if command in ("to-buffer", "from-buffer"):
        return _buffer_argv(command, ckpt, tmp_path)
    return ["strip-optimizer", str(ckpt)]


def _buffer_argv(command: str, ckpt: pathlib.Path, tmp_path: pathlib.Path) -> list[str]:
    """to-buffer / from-buffer with a training graph made for ``ckpt``: every parameter an input,
    a gradient input for each trainable one (the interface generate_artifacts gives it)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    state = ortckpt.load(ckpt)
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, p.shape) for n, p in state.parameters.items()
    ]
    inputs += [
        helper.make_tensor_value_info(f"{n}_grad.accumulation.buffer", TensorProto.FLOAT, p.shape)
        for n, p in state.trainable_parameters.items()
    ]
    loss = helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])
    graph = helper.make_graph([helper.make_node("Identity", [inputs[0].name], ["loss"])], "t", inputs, [loss])
    model = tmp_path / "training_model.onnx"
    onnx.save(helper.make_model(graph), model)
    if command == "to-buffer":
        return ["to-buffer", str(ckpt), "--training-model", str(model), "-o", str(tmp_path / "p.bin")]
    buf = tmp_path / "up.bin"
    ortckpt.parameters_to_buffer(state, model).tofile(buf)
    return [
        "from-buffer",
        str(buf),
        "--reference",
        str(ckpt),
        "--training-model",
        str(model),
        "-o",
        str(ckpt),
    ]


@pytest.mark.parametrize("command", WRITING)
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_dry_run_writes_nothing(
    command: str, as_json: bool, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _dry_argv(command, tmp_path)
    before = _snapshot(tmp_path)
    code, out, err = _run([*argv, "--dry-run", *(["--json"] if as_json else [])], capsys)
    assert (code, err) == (0, ""), err
    assert _snapshot(tmp_path) == before  # no file created, changed or even touched
    if as_json:
        doc = _strict_json(out)
        assert doc["dry_run"] is True and doc["files"] and all(f["size"] is None for f in doc["files"])
    else:
        assert out.startswith("would ") or " would " in out
    # the same command without --dry-run does write
    assert main(argv) == 0
    capsys.readouterr()
    assert _snapshot(tmp_path) != before


def test_dry_run_still_checks_everything(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _copy(ORT_OPTIM, tmp_path / "in.ckpt")
    code, _, err = _run(["set-property", str(ckpt), "--delete", "nope", "--dry-run"], capsys)
    assert code == 2 and "no property 'nope'" in err
    model = _model(tmp_path)
    code, _, err = _run(
        ["from-onnx", str(model), str(tmp_path / "o.ckpt"), "--trainable", "zz", "--dry-run"], capsys
    )
    assert code == 2 and "'zz'" in err and not (tmp_path / "o.ckpt").exists()


# -- --json on every command -----------------------------------------------------------------------


def test_every_command_has_json(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ortckpt.cli._parser import build_parser

    parser = build_parser()
    for name, command in parser.commands.items():
        options = {o for action in command._actions for o in action.option_strings}
        assert "--json" in options, name
        assert ("--dry-run" in options) == (name in WRITING), name


@pytest.mark.parametrize("command", WRITING)
def test_writing_commands_json_report(
    command: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _dry_argv(command, tmp_path)
    code, out, err = _run([*argv, "--json"], capsys)
    assert (code, err) == (0, ""), err
    doc = _strict_json(out)
    assert doc["dry_run"] is False
    for entry in doc["files"]:
        assert entry["size"] == os.path.getsize(entry["path"])
    if command == "set-property":
        assert doc["set"] == {"epoch": {"value": 9, "type": "int"}} and doc["deleted"] == ["note"]
    elif command == "strip-optimizer":
        assert doc["removed_groups"] == 1 and doc["files"][0]["size"] < doc["size_before"]
    elif command == "from-onnx":
        assert (doc["trainable"], doc["frozen"], doc["external_data"]) == (1, 3, False)
    elif command == "convert":
        assert (doc["output_format"], doc["parameters"], doc["format_version"]) == ("npz", 4, None)
    elif command == "strip-values":
        assert doc["parameters"] == 4 and ortckpt.load(doc["output"]).is_nominal
    elif command == "export-adapter":
        assert (
            doc["parameters"] == ["fc1.bias", "fc1.weight"]
            and len(ortckpt.from_adapter(doc["output"]).parameters) == 2
        )
    elif command == "to-buffer":
        assert doc["trainable_only"] is True and doc["files"][0]["size"] == 4 * doc["values"]
    elif command == "from-buffer":
        assert doc["trainable_only"] is True and ortckpt.load(doc["output"]).optimizer is not None
    else:
        assert (doc["replaced"], doc["initializers"], doc["external_data"]) == (1, 4, False)


# -- colour ----------------------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_tty_and_never_with_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    from ortckpt.cli._diff import diff_states
    from ortckpt.cli._diff_text import print_diff

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    a = CheckpointState({"w": np.zeros(2, np.float32)})
    b = CheckpointState({"w": np.ones(2, np.float32)})
    report = diff_states(a, b)
    tty, pipe = _Tty(), io.StringIO()
    print_diff(report, tty)
    print_diff(report, pipe)
    assert "\033[33m  ~ w: 2 of 2 values differ" in tty.getvalue()
    assert "\033[" not in pipe.getvalue()
    assert [line for line in pipe.getvalue().splitlines()] == [
        line.replace("\033[33m", "").replace("\033[1m", "").replace("\033[0m", "")
        for line in tty.getvalue().splitlines()
    ]
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(_Tty())
    plain = _Tty()
    print_diff(report, plain)
    assert "\033[" not in plain.getvalue()
    monkeypatch.setenv("NO_COLOR", "")  # empty: not set, per no-color.org
    assert use_color(_Tty())
    monkeypatch.setenv("TERM", "dumb")
    assert not use_color(_Tty())
    assert Style(False)("x", "red") == "x" and Style(True)("x", "red") == "\033[31mx\033[0m"


def test_no_colour_in_pipes_end_to_end(tmp_path: pathlib.Path) -> None:
    b = _copy(ORT_OPTIM, tmp_path / "b.ckpt")
    ortckpt.CheckpointState.load_checkpoint(str(b))
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    subprocess.run([sys.executable, "-m", "ortckpt", "set-property", str(b), "epoch=7"], check=True, env=env)
    proc = subprocess.run(
        [sys.executable, "-m", "ortckpt", "diff", str(ORT_OPTIM), str(b)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 1 and "~ epoch: 3 (int) -> 7 (int)" in proc.stdout
    assert "\033[" not in proc.stdout + proc.stderr


# -- completion and start-up -----------------------------------------------------------------------


def test_shell_completion_with_argcomplete(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("argcomplete")
    out = tmp_path / "completions"
    line = "ortckpt strip"  # two commands start so
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }
    proc = subprocess.run([sys.executable, "-m", "ortckpt"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().split() == ["strip-optimizer", "strip-values"]
    line = "ortckpt set-property x.ckpt --ty"
    env.update(COMP_LINE=line, COMP_POINT=str(len(line)))
    subprocess.run([sys.executable, "-m", "ortckpt"], env=env, capture_output=True, text=True, check=True)
    assert out.read_text().split() == ["--type"]


def test_startup_imports_only_what_help_needs() -> None:
    """``ortckpt --help`` imports no command module, no onnx, no argcomplete."""
    code = (
        "import sys\n"
        "from ortckpt.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['--help']) == 0\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('ortckpt.cli.', 'onnx', 'argcomplete')))\n"
        "print(' '.join(loaded))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert set(proc.stdout.split()) <= {
        "ortckpt.cli._errors",
        "ortckpt.cli._output",
        "ortckpt.cli._format",
        "ortckpt.cli._parser",
    }, proc.stdout


def test_version_is_not_importlib_and_does_not_leak() -> None:
    assert not hasattr(ortckpt, "version")
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, ortckpt; print('importlib.metadata' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == "False"


def test_dry_run_json_for_optimizer_free_in_place(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.ckpt"
    CheckpointState(
        {"w": np.zeros(2, np.float32)},
        optimizer={"g": OptimizerGroup(step=1, initial_learning_rate=0.1, states={"w": {"m": np.zeros(2)}})},
    ).save(path)
    doc = _strict_json(_run(["strip-optimizer", str(path), "--json", "--dry-run"], capsys)[1])
    assert doc["removed_groups"] == 1 and doc["dry_run"] is True
    assert ortckpt.load(path).optimizer is not None


def test_cli_package_exports_main_only() -> None:
    """The commands' helpers stay in their private modules: ``ortckpt.cli`` is ``main``."""
    import ortckpt.cli

    assert ortckpt.cli.__all__ == ["main"]
    for name in ("diff_states", "parse_property", "to_json", "print_text", "Tolerance", "EXACT"):
        assert not hasattr(ortckpt.cli, name), name


# -- issue 21: honest output details ------------------------------------------------------------------


def _external_ckpt(path: pathlib.Path) -> pathlib.Path:
    ortckpt.save(CheckpointState({"w": np.ones((8, 8), np.float32)}), path, external_data_threshold=0)
    assert pathlib.Path(ortckpt.external_data_path(path)).exists()
    return path


def test_convert_format_1_of_external_data_says_what_to_do(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _external_ckpt(tmp_path / "ext.ckpt")
    out = tmp_path / "v1.ckpt"
    code, _, err = _run(["convert", str(src), str(out), "--format-version", "1"], capsys)
    assert code == 2 and not out.exists()
    line = err.strip()
    assert "\n" not in line and "raise the threshold" not in line  # no option the CLI lacks
    assert "format version 1" in line and "--format-version 2" in line
    assert "external_data_threshold=ortckpt.DEFAULT_EXTERNAL_DATA_THRESHOLD" in line
    # the advice works: the data fit inline, and version 1 holds them
    state = ortckpt.load(src)
    ortckpt.save(
        state, out, format_version=1, external_data_threshold=ortckpt.DEFAULT_EXTERNAL_DATA_THRESHOLD
    )
    assert ortckpt.load(out).version == 1 and not ortckpt.load(out).has_external_data


@pytest.mark.parametrize("name", ["model.pt", "model.PTH", "model.onnx"])
@pytest.mark.parametrize("dry", [False, True], ids=["write", "dry-run"])
def test_convert_refuses_names_of_other_formats(
    name: str, dry: bool, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / name
    code, stdout, err = _run(["convert", str(ORT_OPTIM), str(out), *(["-n"] if dry else [])], capsys)
    assert code == 2 and not out.exists() and stdout == ""
    assert "convert writes an ORT checkpoint" in err and ".ckpt" in err
    assert ("to-onnx" if name.endswith(".onnx") else "to_torch") in err


def test_inspect_json_keeps_property_types(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.ckpt"
    props = {"f": float("nan"), "s": "nan", "i": float("-inf"), "n": 3, "x": 0.5}
    CheckpointState({"w": np.zeros(1, np.float32)}, properties=props).save(path)
    code, out, _ = _run(["inspect", "--json", str(path)], capsys)
    assert code == 0
    assert _strict_json(out)["properties"] == {
        "f": {"type": "float", "value": "NaN"},
        "i": {"type": "float", "value": "-Infinity"},
        "n": {"type": "int", "value": 3},
        "s": {"type": "str", "value": "nan"},
        "x": {"type": "float", "value": 0.5},
    }
    # each value reads back as what was stored, by its type
    back = {
        k: float(v["value"]) if v["type"] == "float" else v["value"]
        for k, v in _strict_json(out)["properties"].items()
    }
    assert np.isnan(back["f"]) and back["s"] == "nan" and back["i"] == float("-inf")


@pytest.mark.parametrize("out_name", ["missing/out.ckpt", "missing/out.safetensors", "missing/out.npz"])
def test_missing_output_directory_is_named(
    out_name: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if out_name.endswith(".safetensors"):
        pytest.importorskip("safetensors")
    out = tmp_path / out_name
    code, _, err = _run(["convert", str(ORT_OPTIM), str(out)], capsys)
    assert code == 2
    line = err.strip()
    assert "does not exist" in line and "missing" in line and str(out) in line
    assert ".tmp" not in line and ".ortckpt-" not in line


def test_missing_directory_error_from_save(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "missing" / "x.ckpt"
    with pytest.raises(FileNotFoundError) as info:
        ortckpt.save(CheckpointState({"w": np.zeros(1)}), target)
    text = str(info.value)
    assert f"directory {tmp_path / 'missing'} does not exist" in text and ".tmp" not in text


def test_one_long_name_does_not_pad_every_row(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long_name = "encoder." + "x" * 990 + ".weight"
    path = tmp_path / "long.ckpt"
    CheckpointState({long_name: np.zeros(2, np.float32), "w": np.zeros(3, np.float32)}).save(path)
    code, out, _ = _run(["inspect", str(path)], capsys)
    assert code == 0
    rows = [line for line in out.splitlines() if "trainable" in line and "(" not in line]
    assert len(rows) == 2 and max(len(r) for r in rows) < 110
    assert any(r.strip().startswith("encoder.") and ".weight " in r and "…" in r for r in rows)
    assert "--json prints them whole" in out
    code, out, _ = _run(["inspect", "--json", str(path)], capsys)
    assert long_name in [p["name"] for p in _strict_json(out)["parameters"]]


def test_average_summary_aligned_with_short_client_names(tmp_path: pathlib.Path) -> None:
    base = tmp_path / "base.ckpt"
    CheckpointState({"w": np.zeros(3, np.float32)}).save(base)
    good = CheckpointState({"w": np.ones(3, np.float32)})
    bad = CheckpointState({"w": np.ones(4, np.float32)})
    report = ortckpt.average({"a": good, "b": bad, "c": b"junk"}, tmp_path / "out.ckpt", reference=base)
    lines = report.summary().splitlines()
    header = next(i for i, line in enumerate(lines) if line.strip().startswith("client"))
    table = lines[header : header + 1 + len(report.rejected)]
    assert len(report.rejected) == 2
    # every column starts at the same offset in the header and in each row
    reason_at = table[0].index("reason")
    problem_at = table[0].index("problem")
    for row in table[1:]:
        assert row[problem_at - 2 : problem_at] == "  " and row[problem_at] != " ", table
        assert row[reason_at - 2 : reason_at] == "  " and row[reason_at] != " ", table
