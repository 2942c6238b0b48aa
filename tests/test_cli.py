"""The ``ortckpt`` command-line tool."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, OptimizerGroup
from ortckpt.cli import main


def _strict_json(text: str) -> Any:
    def reject(token: str) -> None:
        raise AssertionError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=reject)


@pytest.fixture
def saved(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "saved.ckpt"
    CheckpointState(
        {
            "w": np.array([[1.5, np.nan], [np.inf, -0.0]], dtype=np.float32),
            "bf": np.array([1, 2, 3], dtype=ml_dtypes.bfloat16),
            "c": np.array([1 + 2j], dtype=np.complex64),
            "s": np.array(["héllo", "x"], dtype=object),
            "flag": np.array([True, False]),
            "big": np.arange(100, dtype=np.int64),
            "scalar": np.array(7, dtype=np.uint8),
        },
        frozen={"frozen.b": np.zeros(3, np.float64)},
        properties={"epoch": 4, "loss": 0.1, "note": "✓", "weird": float("nan")},
        optimizer={
            "g0": OptimizerGroup(step=9, initial_learning_rate=0.01, states={"w": {"m0": np.zeros((2, 2))}})
        },
    ).save(path)
    return path


def test_inspect_text(saved: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "version 2" in out
    assert "parameters: 8 (7 trainable, 1 frozen)" in out
    for needle in ["w ", "float32", "[2, 2]", "bfloat16", "complex64", "string", "frozen.b", "frozen"]:
        assert needle in out, needle
    assert "g0: step 9, initial_learning_rate 0.01" in out
    assert "w: m0 float64 [2, 2]" in out
    assert "epoch = 4  (int)" in out and "loss = 0.1  (float)" in out and "note = '✓'  (str)" in out
    assert "values:" not in out


def test_inspect_values(saved: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(saved), "--values", "3"]) == 0
    out = capsys.readouterr().out
    assert "values: [0, 1, 2, ...]" in out  # big: truncated
    assert "values: [1.5, nan, inf, ...]" in out
    assert "values: ['héllo', 'x']" in out
    assert "values: [7]" in out


def test_inspect_json(saved: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(saved), "--json", "--values", "4"]) == 0
    doc = _strict_json(capsys.readouterr().out)
    assert doc["version"] == 2 and doc["is_nominal"] is False and doc["has_external_data"] is False
    assert doc["file_size"] == saved.stat().st_size
    params = {p["name"]: p for p in doc["parameters"]}
    assert [p["name"] for p in doc["parameters"]] == sorted(params)
    assert params["w"] == {
        "name": "w",
        "trainable": True,
        "data_type": 1,
        "dtype": "float32",
        "shape": [2, 2],
        "nbytes": 16,
        "values": [1.5, "nan", "inf", -0.0],
    }
    assert params["frozen.b"]["trainable"] is False
    assert params["bf"]["values"] == [1.0, 2.0, 3.0] and params["bf"]["data_type"] == 16
    assert params["c"]["values"] == [[1.0, 2.0]]
    assert params["s"]["values"] == ["héllo", "x"]
    assert params["flag"]["values"] == [True, False]
    assert params["big"]["values"] == [0, 1, 2, 3]
    assert params["scalar"]["shape"] == [] and params["scalar"]["values"] == [7]
    assert doc["optimizer"] == [
        {
            "name": "g0",
            "step": 9,
            "initial_learning_rate": float(np.float32(0.01)),
            "states": {"w": {"m0": {"data_type": 11, "dtype": "float64", "shape": [2, 2], "nbytes": 32}}},
        }
    ]
    assert doc["properties"] == {"epoch": 4, "loss": float(np.float32(0.1)), "note": "✓", "weird": "nan"}


def test_inspect_json_without_values(saved: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--json", str(saved)]) == 0
    doc = _strict_json(capsys.readouterr().out)
    assert all("values" not in p for p in doc["parameters"])


def test_inspect_corpus(corpus_case: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = json.loads(corpus_case.with_suffix(".json").read_text(encoding="utf-8"))
    assert main(["inspect", str(corpus_case), "--values", "2"]) == 0
    text = capsys.readouterr().out
    for t in manifest["requires_grad_params"] + manifest["frozen_params"]:
        assert t["name"] in text

    assert main(["inspect", str(corpus_case), "--json", "--values", "2"]) == 0
    doc = _strict_json(capsys.readouterr().out)
    assert doc["is_nominal"] is manifest["is_nominal_state"]
    assert doc["file_size"] == manifest["size"]
    expected = {t["name"]: (t, True) for t in manifest["requires_grad_params"]}
    expected.update({t["name"]: (t, False) for t in manifest["frozen_params"]})
    assert [p["name"] for p in doc["parameters"]] == sorted(expected)
    for p in doc["parameters"]:
        t, trainable = expected[p["name"]]
        assert p["trainable"] is trainable
        assert (
            p["data_type"] == t["data_type"] and p["shape"] == t["dims"] and p["nbytes"] == t["raw_data_len"]
        )
        if manifest["is_nominal_state"]:
            assert "values" not in p
        else:
            assert p["values"] == t["values"][:2]
    groups = manifest["optimizer_groups"]
    if groups:
        assert [g["name"] for g in doc["optimizer"]] == [g["group_name"] for g in groups]
        assert doc["optimizer"][0]["step"] == groups[0]["step"]
        assert doc["optimizer"][0]["initial_learning_rate"] == groups[0]["initial_learning_rate"]
    else:
        assert doc["optimizer"] is None
    props = manifest["properties"] or {"ints": [], "floats": [], "strings": []}
    assert doc["properties"] == {k: v for kind in ("ints", "floats", "strings") for k, v in props[kind]}


def test_nominal_inspect(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nominal.ckpt"
    path.write_bytes(
        ortckpt._native.serialize_checkpoint(
            {
                "is_nominal": True,
                "trainable": [("w", 1, [], None)],
                "frozen": [],
                "optimizer_groups": [],
                "properties": [],
            }
        )
    )
    assert main(["inspect", str(path), "--values", "5"]) == 0
    out = capsys.readouterr().out
    assert "nominal: yes" in out and "nominal" in out.split("parameters:")[1]
    assert main(["inspect", str(path), "--json", "--values", "5"]) == 0
    doc = _strict_json(capsys.readouterr().out)
    assert doc["is_nominal"] is True and "values" not in doc["parameters"][0]


@pytest.mark.parametrize("content", [b"", b"garbage" * 20, None], ids=["empty", "garbage", "truncated"])
def test_bad_file_exits_2_with_one_line(
    content: bytes | None, tmp_path: pathlib.Path, saved: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.ckpt"
    path.write_bytes(saved.read_bytes()[:40] if content is None else content)
    assert main(["inspect", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("ortckpt: error: ") and "bad.ckpt" in lines[0]
    assert "Traceback" not in captured.err


def test_missing_file_and_directory_exit_2(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(tmp_path / "nope.ckpt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.ckpt" in err
    assert main(["inspect", "--json", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("ortckpt: error: ")


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["inspect"]) == 2
    assert main(["inspect", "x", "--values", "-1"]) == 2
    assert main(["frobnicate"]) == 2
    capsys.readouterr()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ortckpt {ortckpt.__version__}"


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "inspect" in capsys.readouterr().out


def test_python_dash_m(saved: pathlib.Path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "ortckpt", "inspect", str(saved), "--json"], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    assert _strict_json(ok.stdout)["version"] == 2
    bad = subprocess.run(
        [sys.executable, "-m", "ortckpt", "inspect", "/nonexistent/x.ckpt"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("ortckpt: error: ") and "Traceback" not in bad.stderr
