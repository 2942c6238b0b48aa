"""The ``ortckpt`` command-line tool."""

from __future__ import annotations

import json
import math
import os
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
    assert doc["properties"] == {
        "epoch": {"type": "int", "value": 4},
        "loss": {"type": "float", "value": float(np.float32(0.1))},
        "note": {"type": "str", "value": "✓"},
        "weird": {"type": "float", "value": "NaN"},
    }


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
    types = {"ints": "int", "floats": "float", "strings": "str"}
    assert doc["properties"] == {
        k: {"type": types[kind], "value": v} for kind in types for k, v in props[kind]
    }


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


# ================================================================================================
# diff, from-onnx, to-onnx, set-property, strip-optimizer
# ================================================================================================

DATA = pathlib.Path(__file__).resolve().parent / "data"
ORT_OPTIM = DATA / "mlp_adamw_with_optimizer.ckpt"  # written by ORT 1.19.2: group0 + 4 properties
ORT_EDITED = DATA / "mlp_adamw_edited.ckpt"  # ORT: fc1.bias replaced, epoch 4, edited_by + scale added
ORT_PARAMS_ONLY = DATA / "mlp_adamw_params_only.ckpt"  # ORT: the ORT_OPTIM state without optimizer
ORT_NOMINAL = DATA / "mlp_nominal.ckpt"
ORT_FRESH = DATA / "mlp_fresh_artifact.ckpt"
MLP_SHAPES = {"fc1.weight": (4, 8), "fc1.bias": (8,), "fc2.weight": (8, 3), "fc2.bias": (3,)}

Arr = np.ndarray[Any, Any]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ortckpt: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _diff_json(a: pathlib.Path, b: pathlib.Path, capsys: pytest.CaptureFixture[str], *opts: str) -> Any:
    code, out, err = _run(["diff", str(a), str(b), "--json", *opts], capsys)
    assert err == ""
    doc = _strict_json(out)
    assert code == (0 if doc["identical"] else 1)
    return doc


def _copy(src: pathlib.Path, tmp_path: pathlib.Path, name: str | None = None) -> pathlib.Path:
    dest = tmp_path / (name or src.name)
    dest.write_bytes(src.read_bytes())
    return dest


# -- diff -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(DATA.glob("*.ckpt")), ids=lambda p: p.stem)
def test_diff_fixture_with_itself_is_identical(
    path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["diff", str(path), str(path)], capsys) == (0, "", "")
    doc = _diff_json(path, path, capsys)
    assert doc["identical"] is True and doc["differences"] == 0 and doc["exact"] is True
    assert doc["parameters"] == {"only_in_a": [], "only_in_b": [], "changed": []}


def test_diff_corpus_with_itself_and_resaved_copy(
    corpus_case: pathlib.Path, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["diff", str(corpus_case), str(corpus_case)], capsys) == (0, "", "")
    resaved = tmp_path / "resaved.ckpt"
    ortckpt.save(ortckpt.load(corpus_case), resaved)  # sorted, realigned: same content
    assert _run(["diff", str(corpus_case), str(resaved)], capsys) == (0, "", "")


def test_diff_ort_fixture_vs_edited_copy(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = ortckpt.load(ORT_OPTIM)
    old = np.array(state.parameters["fc2.weight"].data)
    new = old.copy()
    new[3, 1] += np.float32(0.5)
    state.parameters["fc2.weight"].data = new
    edited = tmp_path / "edited.ckpt"
    state.save(edited)

    code, out, err = _run(["diff", str(ORT_OPTIM), str(edited)], capsys)
    assert (code, err) == (1, "")
    expected_max = abs(float(new[3, 1]) - float(old[3, 1]))
    assert out.splitlines() == [
        f"--- {ORT_OPTIM}",
        f"+++ {edited}",
        "parameters:",
        f"  ~ fc2.weight: 1 of 24 values differ, max abs diff {expected_max:.6g}",
        "1 difference",
    ]
    doc = _diff_json(ORT_OPTIM, edited, capsys)
    assert doc["differences"] == 1
    assert doc["parameters"]["changed"] == [
        {"name": "fc2.weight", "values": {"differing": 1, "total": 24, "max_abs_diff": expected_max}}
    ]
    assert doc["optimizer"] == {"only_in_a": [], "only_in_b": [], "changed": []}
    assert doc["properties"] == {"removed": [], "added": [], "changed": []}
    # the same difference seen from the other side
    assert _diff_json(edited, ORT_OPTIM, capsys)["parameters"]["changed"][0]["name"] == "fc2.weight"


def test_diff_two_ort_written_files(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _diff_json(ORT_OPTIM, ORT_EDITED, capsys)
    a, b = ortckpt.load(ORT_OPTIM), ortckpt.load(ORT_EDITED)
    bias_a = a.parameters["fc1.bias"].data.astype(np.float64)
    bias_b = b.parameters["fc1.bias"].data.astype(np.float64)
    assert doc["parameters"]["changed"] == [
        {
            "name": "fc1.bias",
            "values": {"differing": 8, "total": 8, "max_abs_diff": float(np.abs(bias_a - bias_b).max())},
        }
    ]
    assert doc["optimizer"]["changed"] == []  # ORT re-saved the momentums unchanged
    props = doc["properties"]
    assert props["removed"] == []
    assert props["added"] == [
        {"name": "edited_by", "value": "ort_oracle ✎", "type": "str"},
        {"name": "scale", "value": 2.5, "type": "float"},
    ]
    assert props["changed"] == [
        {"name": "epoch", "a": {"value": 3, "type": "int"}, "b": {"value": 4, "type": "int"}}
    ]
    assert doc["differences"] == 4
    code, out, _ = _run(["diff", str(ORT_OPTIM), str(ORT_EDITED)], capsys)
    assert code == 1
    assert "  ~ fc1.bias: 8 of 8 values differ" in out
    assert "  + edited_by = 'ort_oracle ✎' (str) (only in B)" in out
    assert "  + scale = 2.5 (float) (only in B)" in out
    assert "  ~ epoch: 3 (int) -> 4 (int)" in out
    assert out.endswith("4 differences\n")


def test_diff_optimizer_only_in_one(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _diff_json(ORT_OPTIM, ORT_PARAMS_ONLY, capsys)
    assert doc["differences"] == 1
    assert doc["optimizer"] == {"only_in_a": ["group0"], "only_in_b": [], "changed": []}
    doc = _diff_json(ORT_PARAMS_ONLY, ORT_OPTIM, capsys)
    assert doc["optimizer"]["only_in_b"] == ["group0"]


def test_diff_nominal_vs_values(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _diff_json(ORT_NOMINAL, ORT_FRESH, capsys)
    assert doc["nominal"] == {"a": True, "b": False}
    assert doc["a"]["is_nominal"] is True and doc["b"]["is_nominal"] is False
    assert [c["name"] for c in doc["parameters"]["changed"]] == sorted(MLP_SHAPES)
    assert all(c["nominal"] == {"a": True, "b": False} for c in doc["parameters"]["changed"])
    assert all("values" not in c for c in doc["parameters"]["changed"])
    code, out, _ = _run(["diff", str(ORT_NOMINAL), str(ORT_FRESH)], capsys)
    assert code == 1 and "nominal checkpoint: yes -> no" in out


def _save(tmp_path: pathlib.Path, name: str, state: CheckpointState, **kwargs: Any) -> pathlib.Path:
    path = tmp_path / name
    ortckpt.save(state, path, **kwargs)
    return path


def test_diff_reports_every_kind_of_change(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = CheckpointState(
        {
            "same": np.arange(4, dtype=np.float32),
            "dtype": np.zeros(3, np.float32),
            "shape": np.zeros((2, 3), np.float32),
            "flag": np.ones(2, np.float32),
            "gone": np.zeros((1, 2), np.int64),
        },
        frozen={"frozen": np.zeros(2, np.float64)},
        properties={"same": "x", "removed": 1, "retyped": 1, "value": 0.5, "nan": float("nan")},
        optimizer={
            "g": OptimizerGroup(
                step=3,
                initial_learning_rate=0.001,
                states={
                    "same": {"m0": np.zeros(4, np.float32), "m1": np.ones(4, np.float32)},
                    "flag": {"m0": np.zeros(2, np.float32)},
                },
            ),
            "old": OptimizerGroup(),
        },
    )
    b = CheckpointState(
        {
            "same": np.arange(4, dtype=np.float32),
            "dtype": np.zeros(3, np.float64),
            "shape": np.zeros((3, 2), np.float32),
            "new": np.array(["s"], dtype=object),
        },
        frozen={"frozen": np.zeros(2, np.float64), "flag": np.array([1.0, 3.0], np.float32)},
        properties={"same": "x", "added": "y", "retyped": 1.0, "value": 0.25, "nan": float("nan")},
        optimizer={
            "g": OptimizerGroup(
                step=4,
                initial_learning_rate=0.002,
                states={
                    "same": {"m0": np.array([0, 0, 2, 0], np.float32), "m2": np.ones(4, np.float32)},
                    "other": {"m0": np.zeros(1, np.float32)},
                },
            ),
            "young": OptimizerGroup(),
        },
    )
    pa, pb = _save(tmp_path, "a.ckpt", a), _save(tmp_path, "b.ckpt", b)
    doc = _diff_json(pa, pb, capsys)
    assert doc["parameters"] == {
        "only_in_a": [{"name": "gone", "trainable": True, "dtype": "int64", "shape": [1, 2]}],
        "only_in_b": [{"name": "new", "trainable": True, "dtype": "string", "shape": [1]}],
        "changed": [
            {"name": "dtype", "dtype": {"a": "float32", "b": "float64"}},
            {
                "name": "flag",
                "trainable": {"a": True, "b": False},
                "values": {"differing": 1, "total": 2, "max_abs_diff": 2.0},
            },
            {"name": "shape", "shape": {"a": [2, 3], "b": [3, 2]}},
        ],
    }
    assert doc["optimizer"] == {
        "only_in_a": ["old"],
        "only_in_b": ["young"],
        "changed": [
            {
                "name": "g",
                "step": {"a": 3, "b": 4},
                "initial_learning_rate": {"a": float(np.float32(0.001)), "b": float(np.float32(0.002))},
                "states": {"only_in_a": ["flag"], "only_in_b": ["other"]},
                "momentums": {
                    "only_in_a": [{"parameter": "same", "momentum": "m1", "dtype": "float32", "shape": [4]}],
                    "only_in_b": [{"parameter": "same", "momentum": "m2", "dtype": "float32", "shape": [4]}],
                    "changed": [
                        {
                            "parameter": "same",
                            "momentum": "m0",
                            "values": {"differing": 1, "total": 4, "max_abs_diff": 2.0},
                        }
                    ],
                },
            }
        ],
    }
    assert doc["properties"] == {
        "removed": [{"name": "removed", "value": 1, "type": "int"}],
        "added": [{"name": "added", "value": "y", "type": "str"}],
        "changed": [
            {"name": "retyped", "a": {"value": 1, "type": "int"}, "b": {"value": 1.0, "type": "float"}},
            {"name": "value", "a": {"value": 0.5, "type": "float"}, "b": {"value": 0.25, "type": "float"}},
        ],
    }
    assert doc["differences"] == 2 + 4 + 1 + 2 + 2 + 2 + 2 + 1 + 3  # params, optimizer, properties

    code, out, _ = _run(["diff", str(pa), str(pb)], capsys)
    assert code == 1
    for line in [
        "  - gone: trainable int64 [1, 2] (only in A)",
        "  + new: trainable string [1] (only in B)",
        "  ~ dtype: dtype float32 -> float64",
        "  ~ flag: trainable -> frozen",
        "  ~ flag: 1 of 2 values differ, max abs diff 2",
        "  ~ shape: shape [2, 3] -> [3, 2]",
        "  - group old (only in A)",
        "  + group young (only in B)",
        "  ~ g: step 3 -> 4",
        "  ~ g: initial_learning_rate 0.001 -> 0.002",
        "  - g/flag: optimizer state only in A",
        "  + g/other: optimizer state only in B",
        "  - g/same/m1: float32 [4] (only in A)",
        "  + g/same/m2: float32 [4] (only in B)",
        "  ~ g/same/m0: 1 of 4 values differ, max abs diff 2",
        "  - removed = 1 (int) (only in A)",
        "  + added = 'y' (str) (only in B)",
        "  ~ retyped: 1 (int) -> 1.0 (float)",
        "  ~ value: 0.5 (float) -> 0.25 (float)",
    ]:
        assert line in out.splitlines(), line
    assert out.endswith(f"{doc['differences']} differences\n")


def test_diff_tolerances_nan_and_signed_zero(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _save(
        tmp_path, "a.ckpt", CheckpointState({"w": np.array([1.0, 2.0, np.nan, -0.0, np.inf], np.float32)})
    )
    b = _save(
        tmp_path, "b.ckpt", CheckpointState({"w": np.array([1.000001, 2.0, np.nan, 0.0, np.inf], np.float32)})
    )
    step = float(np.float32(1.000001)) - 1.0
    exact = _diff_json(a, b, capsys)["parameters"]["changed"][0]["values"]
    assert exact == {"differing": 2, "total": 5, "max_abs_diff": step}  # bit-exact: -0.0 != 0.0
    # with a tolerance values compare as numbers: -0.0 == 0.0; NaN == NaN; inf == inf
    assert _diff_json(a, b, capsys, "--atol", "0")["parameters"]["changed"][0]["values"]["differing"] == 1
    doc = _diff_json(a, b, capsys, "--atol", "1e-5")
    assert doc["identical"] is True and doc["exact"] is False and doc["atol"] == 1e-5
    assert _diff_json(a, b, capsys, "--rtol", "1e-5")["identical"] is True
    assert _diff_json(a, b, capsys, "--rtol", "1e-7")["differences"] == 1
    assert main(["diff", str(a), str(b), "--atol", "1e-5", "--rtol", "0"]) == 0
    capsys.readouterr()


def test_diff_nan_payloads_are_equal_and_nan_vs_number_differs(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bits_a = np.array([0x7FC00000, 0x7F800001, 0x3F800000], np.uint32)
    bits_b = np.array([0xFFC00001, 0x7FC00000, 0x7FC00000], np.uint32)
    a = _save(tmp_path, "a.ckpt", CheckpointState({"w": bits_a.view(np.float32)}))
    b = _save(tmp_path, "b.ckpt", CheckpointState({"w": bits_b.view(np.float32)}))
    values = _diff_json(a, b, capsys)["parameters"]["changed"][0]["values"]
    # only 1.0 vs NaN differs; it has no numeric difference
    assert values == {"differing": 1, "total": 3, "max_abs_diff": "nan"}
    code, out, _ = _run(["diff", str(a), str(b)], capsys)
    assert code == 1 and "1 of 3 values differ, max abs diff nan" in out


def test_diff_integer_strings_bool_complex(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    i64 = np.iinfo(np.int64)
    a = CheckpointState(
        {
            "i64": np.array([i64.min, 0, 5], np.int64),
            "u64": np.array([0, 2**64 - 1], np.uint64),
            "i8": np.array([-128, 127], np.int8),
            "s": np.array(["a", "b", "c"], dtype=object),
            "flag": np.array([True, False]),
            "c": np.array([1 + 1j, 2 + 2j], np.complex64),
        }
    )
    b = CheckpointState(
        {
            "i64": np.array([i64.max, 0, 5], np.int64),
            "u64": np.array([2**64 - 1, 2**64 - 1], np.uint64),
            "i8": np.array([127, -128], np.int8),
            "s": np.array(["a", "B", "C"], dtype=object),
            "flag": np.array([True, True]),
            "c": np.array([1 + 1j, 2 - 2j], np.complex64),
        }
    )
    doc = _diff_json(_save(tmp_path, "a.ckpt", a), _save(tmp_path, "b.ckpt", b), capsys)
    values = {c["name"]: c["values"] for c in doc["parameters"]["changed"]}
    assert values == {
        "i64": {"differing": 1, "total": 3, "max_abs_diff": 2**64 - 1},  # exact, no float rounding
        "u64": {"differing": 1, "total": 2, "max_abs_diff": 2**64 - 1},
        "i8": {"differing": 2, "total": 2, "max_abs_diff": 255},
        "s": {"differing": 2, "total": 3, "max_abs_diff": None},
        "flag": {"differing": 1, "total": 2, "max_abs_diff": 1},
        "c": {"differing": 1, "total": 2, "max_abs_diff": 4.0},
    }


def _reference_values(x: Arr, y: Arr) -> tuple[int, float | int | None]:
    """Differing count and max abs diff, the slow obvious way (bits differ and not both NaN)."""
    if x.dtype == np.dtype(object):
        return sum(1 for p, q in zip(x.flat, y.flat) if p != q), None
    width = x.dtype.itemsize
    bx = np.ascontiguousarray(x).reshape(-1).view(np.uint8).reshape(-1, width)
    by = np.ascontiguousarray(y).reshape(-1).view(np.uint8).reshape(-1, width)
    kind = np.dtype(x.dtype).kind
    worst: float | int | None = None
    count = 0
    for i, (p, q) in enumerate(zip(x.reshape(-1), y.reshape(-1))):
        if bytes(bx[i]) == bytes(by[i]):
            continue
        if kind in "iub":
            count += 1
            d: float | int = abs(int(p) - int(q))
        else:
            cp, cq = complex(p), complex(q)
            if (cp != cp) and (cq != cq):  # NaN on both sides
                continue
            count += 1
            d = abs(cp - cq)
            if d != d:
                continue
        worst = d if worst is None else max(worst, d)
    if count and worst is None:
        worst = math.nan
    return count, worst


@pytest.mark.parametrize("chunk", [3, 1 << 16], ids=["chunk3", "default_chunk"])
def test_diff_every_dtype_against_reference(
    chunk: int,
    dtype_arrays: dict[str, Arr],
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ortckpt import cli

    monkeypatch.setattr(cli._compare, "CHUNK", chunk)
    edited: dict[str, Arr] = {}
    for name, arr in dtype_arrays.items():
        new = np.array(arr, copy=True)
        if new.size:
            if new.dtype == np.dtype(object):
                new.reshape(-1)[-1] = "changed"
            else:
                raw = new.reshape(-1).view(np.uint8)
                raw[:: max(1, raw.size // 7)] ^= 1  # flip the low bit of a spread of bytes
        edited[name] = new
    pa = _save(tmp_path, "a.ckpt", CheckpointState(dtype_arrays))
    pb = _save(tmp_path, "b.ckpt", CheckpointState(edited))
    assert _run(["diff", str(pa), str(pa)], capsys) == (0, "", "")
    doc = _diff_json(pa, pb, capsys)
    got = {c["name"]: c["values"] for c in doc["parameters"]["changed"]}
    expected = {}
    for name, arr in dtype_arrays.items():
        count, worst = _reference_values(arr, edited[name])
        if count:
            expected[name] = (count, worst)
    assert sorted(got) == sorted(expected)
    assert len(expected) > 20
    for name, (count, worst) in expected.items():
        assert got[name]["differing"] == count, name
        assert got[name]["total"] == dtype_arrays[name].size
        shown = got[name]["max_abs_diff"]
        if worst is None:
            assert shown is None, name
        elif isinstance(worst, float) and math.isnan(worst):
            assert shown == "nan", name
        elif isinstance(worst, float) and math.isinf(worst):
            assert shown == "inf", name
        else:
            assert shown == pytest.approx(worst, rel=1e-12), name


def test_diff_external_data_vs_inline(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = CheckpointState({"w": np.arange(64, dtype=np.float32), "b": np.ones(3, np.float32)})
    inline = _save(tmp_path, "inline.ckpt", state)
    external = _save(tmp_path, "external.ckpt", state, external_data_threshold=0)
    assert pathlib.Path(ortckpt.external_data_path(external)).is_file()
    doc = _diff_json(inline, external, capsys)
    assert doc["identical"] is True
    assert doc["a"]["has_external_data"] is False and doc["b"]["has_external_data"] is True
    state.parameters["w"] = np.arange(64, dtype=np.float32) * 2
    changed = _save(tmp_path, "changed.ckpt", state, external_data_threshold=0)
    assert _diff_json(external, changed, capsys)["parameters"]["changed"][0]["values"]["differing"] == 63


def test_diff_streams_one_tensor_pair_at_a_time(tmp_path: pathlib.Path) -> None:
    import tracemalloc

    rng = np.random.default_rng(3)
    arrays = {f"t{i}": rng.standard_normal(1 << 20).astype(np.float32) for i in range(8)}  # 32 MiB
    a = _save(tmp_path, "a.ckpt", CheckpointState(arrays))
    b = _save(tmp_path, "b.ckpt", CheckpointState({k: v + 1 for k, v in arrays.items()}))
    del arrays
    tracemalloc.start()
    try:
        assert main(["diff", "-q", str(a), str(b), "--atol", "0.5"]) == 1
        tracemalloc.reset_peak()
        assert main(["diff", "--json", str(a), str(b)]) == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # each tensor is 4 MiB and each file 32 MiB: the comparison works in fixed-size chunks
    assert peak < 4 * 2**20, peak


def test_diff_quiet(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["diff", "-q", str(ORT_OPTIM), str(ORT_EDITED)], capsys) == (1, "", "")
    assert _run(["diff", "--quiet", "--json", str(ORT_OPTIM), str(ORT_OPTIM)], capsys) == (0, "", "")


def test_diff_errors_exit_2(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"garbage" * 20)
    for argv in (
        ["diff", str(ORT_OPTIM), str(tmp_path / "missing.ckpt")],
        ["diff", str(garbage), str(ORT_OPTIM)],
        ["diff", str(ORT_OPTIM), str(tmp_path)],
    ):
        code, out, err = _run(argv, capsys)
        assert code == 2 and out == "", argv
        _one_error_line(err)
    for argv in (
        ["diff", str(ORT_OPTIM)],
        ["diff", str(ORT_OPTIM), str(ORT_OPTIM), "--rtol", "-1"],
        ["diff", str(ORT_OPTIM), str(ORT_OPTIM), "--atol", "nan"],
        ["diff", str(ORT_OPTIM), str(ORT_OPTIM), "--atol", "x"],
        ["diff", str(ORT_OPTIM), str(ORT_OPTIM), "--bogus"],
    ):
        assert _run(argv, capsys)[0] == 2, argv


# -- ONNX -----------------------------------------------------------------------------------------


@pytest.fixture
def onnx_mod() -> Any:
    return pytest.importorskip("onnx")


def _mlp_model(onnx_mod: Any, values: dict[str, Arr], extra: dict[str, Arr] | None = None) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(v, k) for k, v in {**values, **(extra or {})}.items()]
    nodes = [
        helper.make_node("MatMul", ["X", "fc1.weight"], ["h0"]),
        helper.make_node("Add", ["h0", "fc1.bias"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "fc2.weight"], ["h3"]),
        helper.make_node("Add", ["h3", "fc2.bias"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 3])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx_mod.checker.check_model(model)
    return model


def _mlp_values(seed: int = 0) -> dict[str, Arr]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in MLP_SHAPES.items()}


def test_from_onnx_round_trips_values(
    onnx_mod: Any, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = _mlp_values()
    extra = {"steps": np.array([3, -1], np.int64), "scale": np.array(0.5, np.float64)}
    model_path = tmp_path / "model.onnx"
    onnx_mod.save(_mlp_model(onnx_mod, values, extra), model_path)
    out = tmp_path / "model.ckpt"
    code, stdout, err = _run(["from-onnx", str(model_path), str(out)], capsys)
    assert (code, err) == (0, "")
    assert stdout == f"wrote {out}: 5 trainable + 1 frozen parameters, {out.stat().st_size} B\n"
    state = ortckpt.load(out)
    assert list(state.trainable_parameters) == sorted([*MLP_SHAPES, "scale"])  # every float initializer
    assert list(state.frozen_parameters) == ["steps"]
    for name, arr in {**values, **extra}.items():
        got = state.parameters[name].data
        assert got.dtype == arr.dtype and got.shape == arr.shape
        assert got.tobytes() == arr.tobytes(), name

    picked = tmp_path / "picked.ckpt"
    argv = ["from-onnx", str(model_path), str(picked), "--trainable", "fc1.weight", "--trainable", "fc2.bias"]
    assert _run(argv, capsys)[0] == 0
    state = ortckpt.load(picked)
    assert list(state.trainable_parameters) == ["fc1.weight", "fc2.bias"]
    assert state.parameters["fc1.bias"].data.tobytes() == values["fc1.bias"].tobytes()

    nominal = tmp_path / "nominal.ckpt"
    assert _run(["from-onnx", str(model_path), str(nominal), "--nominal"], capsys)[0] == 0
    state = ortckpt.load(nominal)
    assert state.is_nominal and sorted(state.parameters) == sorted([*MLP_SHAPES, *extra])
    assert state.parameters["steps"].data_type == 7 and state.parameters["fc1.weight"].is_nominal

    external = tmp_path / "external.ckpt"
    argv = ["from-onnx", str(model_path), str(external), "--external-data-threshold", "0"]
    code, stdout, _ = _run(argv, capsys)
    assert code == 0 and f"tensor data in {external}.data" in stdout
    state = ortckpt.load(external)
    assert state.has_external_data
    assert _run(["diff", str(out), str(external)], capsys) == (0, "", "")


def test_from_onnx_reads_model_external_data(
    onnx_mod: Any, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = _mlp_values(1)
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    onnx_mod.save_model(
        _mlp_model(onnx_mod, values),
        model_dir / "model.onnx",
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    out = tmp_path / "out.ckpt"
    assert _run(["from-onnx", str(model_dir / "model.onnx"), str(out)], capsys)[0] == 0
    state = ortckpt.load(out)
    for name, arr in values.items():
        assert state.parameters[name].data.tobytes() == arr.tobytes()


def test_from_onnx_errors(onnx_mod: Any, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    model_path = tmp_path / "model.onnx"
    onnx_mod.save(_mlp_model(onnx_mod, _mlp_values()), model_path)
    out = tmp_path / "out.ckpt"
    code, _, err = _run(["from-onnx", str(model_path), str(out), "--trainable", "nope"], capsys)
    assert code == 2 and "'nope'" in _one_error_line(err)
    code, _, err = _run(["from-onnx", str(ORT_OPTIM), str(out)], capsys)
    assert code == 2 and "not an ONNX model" in _one_error_line(err)
    code, _, err = _run(["from-onnx", str(tmp_path / "missing.onnx"), str(out)], capsys)
    assert code == 2 and "missing.onnx" in _one_error_line(err)
    code, _, err = _run(["from-onnx", str(model_path), str(tmp_path / "no" / "dir" / "x.ckpt")], capsys)
    assert code == 2
    _one_error_line(err)
    assert not out.exists()
    assert _run(["from-onnx", str(model_path), str(out), "--external-data-threshold", "-1"], capsys)[0] == 2


def _initializers(model: Any) -> dict[str, Arr]:
    from onnx import numpy_helper

    return {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}


def test_to_onnx_writes_checkpoint_values(
    onnx_mod: Any, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    zeros = {name: np.zeros(shape, np.float32) for name, shape in MLP_SHAPES.items()}
    extra = {"not_in_ckpt": np.array([1.5, 2.5], np.float32)}
    model_path = tmp_path / "model.onnx"
    onnx_mod.save(_mlp_model(onnx_mod, zeros, extra), model_path)
    out = tmp_path / "trained.onnx"
    code, stdout, err = _run(["to-onnx", str(ORT_OPTIM), str(model_path), str(out)], capsys)
    assert (code, err) == (0, "")
    assert stdout == f"wrote {out}: 4 of 5 initializers from {ORT_OPTIM}\n"
    assert not pathlib.Path(f"{out}.data").exists()
    written = onnx_mod.load(out)
    onnx_mod.checker.check_model(written)
    inits = _initializers(written)
    state = ortckpt.load(ORT_OPTIM)
    for name in MLP_SHAPES:
        expected = state.parameters[name].data
        assert inits[name].dtype == expected.dtype and inits[name].shape == expected.shape
        assert inits[name].tobytes() == expected.tobytes(), name
    assert inits["not_in_ckpt"].tobytes() == extra["not_in_ckpt"].tobytes()
    assert [n.op_type for n in written.graph.node] == ["MatMul", "Add", "Relu", "MatMul", "Add"]

    # round trip: back to a checkpoint, the same parameters
    back = tmp_path / "back.ckpt"
    argv = ["from-onnx", str(out), str(back), "--trainable", "fc1.weight", "fc1.bias", "fc2.weight"]
    assert _run(argv, capsys)[0] == 0
    doc = _diff_json(ORT_PARAMS_ONLY, back, capsys)
    assert doc["parameters"] == {
        "only_in_a": [],
        "only_in_b": [{"name": "not_in_ckpt", "trainable": False, "dtype": "float32", "shape": [2]}],
        "changed": [],
    }


def test_to_onnx_large_model_uses_external_data(
    onnx_mod: Any, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ortckpt.cli import _onnx as cli_onnx

    monkeypatch.setattr(cli_onnx, "ONNX_SIZE_LIMIT", 1024)  # stands in for protobuf's 2 GiB
    values = _mlp_values(2)
    ckpt = _save(tmp_path, "big.ckpt", CheckpointState(values))
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    extra = {"kept": np.arange(400, dtype=np.float32)}
    onnx_mod.save_model(
        _mlp_model(onnx_mod, _mlp_values(3), extra),
        model_dir / "model.onnx",
        save_as_external_data=True,
        location="model.weights",
        size_threshold=0,
    )
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "big.onnx"
    (out_dir / "big.onnx.data").write_bytes(b"stale" * 1000)  # replaced, not appended to
    code, stdout, _ = _run(["to-onnx", str(ckpt), str(model_dir / "model.onnx"), str(out)], capsys)
    assert code == 0 and stdout.endswith(f", tensor data in {out}.data\n")
    assert sorted(p.name for p in out_dir.iterdir()) == ["big.onnx", "big.onnx.data"]
    written = onnx_mod.load(out)  # loads big.onnx.data
    inits = _initializers(written)
    for name, arr in values.items():
        assert inits[name].tobytes() == arr.tobytes(), name
    # an initializer the checkpoint lacks came from the model's own external file, elsewhere
    assert inits["kept"].tobytes() == extra["kept"].tobytes()
    assert (out_dir / "big.onnx.data").stat().st_size < 5000 + 4 * 400


def test_to_onnx_errors(onnx_mod: Any, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    model_path = tmp_path / "model.onnx"
    onnx_mod.save(_mlp_model(onnx_mod, _mlp_values()), model_path)
    out = tmp_path / "out.onnx"
    code, _, err = _run(["to-onnx", str(ORT_NOMINAL), str(model_path), str(out)], capsys)
    assert code == 2 and "nominal" in _one_error_line(err)
    code, _, err = _run(["to-onnx", str(tmp_path / "none.ckpt"), str(model_path), str(out)], capsys)
    assert code == 2 and "none.ckpt" in _one_error_line(err)
    code, _, err = _run(["to-onnx", str(ORT_OPTIM), str(ORT_OPTIM), str(out)], capsys)
    assert code == 2 and "not an ONNX model" in _one_error_line(err)
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]  # no temporary left behind

    # an initializer the checkpoint lacks, whose external data file is missing
    broken_dir = tmp_path / "broken"
    broken_dir.mkdir()
    onnx_mod.save_model(
        _mlp_model(onnx_mod, _mlp_values(), {"lost": np.zeros(4, np.float32)}),
        broken_dir / "model.onnx",
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    (broken_dir / "weights.bin").unlink()
    code, _, err = _run(
        ["to-onnx", str(DATA / "trainable_only.ckpt"), str(broken_dir / "model.onnx"), str(out)], capsys
    )
    assert code == 2 and "model.onnx" in _one_error_line(err)
    assert not out.exists()

    other = tmp_path / "other.onnx"
    onnx_mod.save(_mlp_model(onnx_mod, {k: v for k, v in _mlp_values().items()}), other)
    code, stdout, err = _run(["to-onnx", str(DATA / "trainable_only.ckpt"), str(other), str(out)], capsys)
    assert code == 0 and "0 of 4 initializers" in stdout and "warning" in err


@pytest.mark.parametrize("command", ["from-onnx", "to-onnx"])
def test_missing_onnx_gives_install_hint(
    command: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx -> ImportError
    argv = [command, str(tmp_path / "m.onnx"), str(tmp_path / "out")]
    if command == "to-onnx":
        argv.insert(1, str(ORT_OPTIM))
    code, out, err = _run(argv, capsys)
    assert code == 2 and out == ""
    assert "pip install onnx" in _one_error_line(err)


# -- set-property ---------------------------------------------------------------------------------


def test_set_property_then_inspect(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], assert_same_state: Any
) -> None:
    path = _copy(ORT_OPTIM, tmp_path)
    argv = ["set-property", str(path), "epoch=7", "lr=0.5", "note=fine-tuned v2", "count=-3", "ratio=1e-3"]
    code, out, err = _run(argv, capsys)
    assert (code, err) == (0, "")
    assert f"{path}: epoch = 7 (int)" in out and f"{path}: ratio = 0.001 (float)" in out
    assert f"{path}: note = 'fine-tuned v2' (str)" in out

    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert (
        "epoch = 7  (int)" in text and "lr = 0.5  (float)" in text and "note = 'fine-tuned v2'  (str)" in text
    )
    assert main(["inspect", "--json", str(path)]) == 0
    props = {k: v["value"] for k, v in _strict_json(capsys.readouterr().out)["properties"].items()}
    assert props["epoch"] == 7 and props["count"] == -3 and props["lr"] == 0.5
    assert props["ratio"] == float(np.float32(1e-3)) and props["ĉefa_ŝlosilo"] == "ŝlosila valoro"

    loaded = ortckpt.load(path).properties
    assert type(loaded["epoch"]) is int and type(loaded["lr"]) is float and type(loaded["note"]) is str
    # everything else is kept bit for bit
    expected = ortckpt.load(ORT_OPTIM)
    expected.properties.update(epoch=7, lr=0.5, note="fine-tuned v2", count=-3, ratio=1e-3)
    assert_same_state(expected, ortckpt.load(path))


def test_set_property_types_and_delete(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(ORT_OPTIM, tmp_path)
    assert main(["set-property", str(path), "run_id=0042", "--type", "str"]) == 0
    assert main(["set-property", str(path), "--type", "float", "epoch=3"]) == 0
    assert main(["set-property", str(path), "a=1", "--delete", "note", "b=x=y", "--delete", "best_loss"]) == 0
    capsys.readouterr()
    props = dict(ortckpt.load(path).properties)
    assert props["run_id"] == "0042" and props["epoch"] == 3.0 and type(props["epoch"]) is float
    assert props["a"] == 1 and props["b"] == "x=y"
    assert "note" not in props and "best_loss" not in props
    assert main(["set-property", str(path), "e=", "n=nan", "u=1_000", "h=0x10"]) == 0
    capsys.readouterr()
    props = dict(ortckpt.load(path).properties)
    assert (
        props["e"] == ""
        and isinstance(props["n"], float)
        and math.isnan(props["n"])
        and props["u"] == "1_000"
        and props["h"] == "0x10"
    )


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("5", None, 5),
        ("-5", None, -5),
        ("+5", None, 5),
        ("007", "int", 7),
        ("007", "str", "007"),
        ("0", None, 0),
        ("-0", None, 0),
        ("0.5", None, 0.5),
        ("1.5", None, 1.5),
        ("-1e3", None, -1000.0),
        (".5", None, 0.5),
        ("inf", None, math.inf),
        ("abc", None, "abc"),
        ("", None, ""),
        (" 5", None, " 5"),
        ("1_0", None, "1_0"),
        ("5", "str", "5"),
        ("5", "float", 5.0),
        ("2.5", "float", 2.5),
        ("12", "int", 12),
    ],
)
def test_parse_property(text: str, kind: str | None, expected: object) -> None:
    from ortckpt.cli._edit import parse_property

    value = parse_property(text, kind)
    assert type(value) is type(expected) and value == expected


def test_set_property_errors_leave_the_file_alone(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _copy(ORT_OPTIM, tmp_path)
    before = path.read_bytes()
    for argv, needle in [
        (["x=1.5", "--type", "int"], "not an integer"),
        (["x=abc", "--type", "float"], "not a number"),
        (["x=99999999999999999999"], "64-bit"),
        (["x=1e39"], "32-bit float"),
        (["=5"], "NAME=VALUE"),
        (["novalue"], "NAME=VALUE"),
        (["--delete", "nope"], "no property 'nope'"),
        (["epoch=1", "--delete", "epoch"], "both set and deleted"),
        ([], "nothing to do"),
    ]:
        code, out, err = _run(["set-property", str(path), *argv], capsys)
        assert code == 2 and out == "", argv
        assert needle in _one_error_line(err), (argv, err)
        assert path.read_bytes() == before
    code, _, err = _run(["set-property", str(tmp_path / "missing.ckpt"), "a=1"], capsys)
    assert code == 2 and "missing.ckpt" in _one_error_line(err)
    assert _run(["set-property", str(path), "a=1", "--type", "bool"], capsys)[0] == 2
    assert _run(["set-property", str(path), "a=1", "--bogus"], capsys)[0] == 2
    assert path.read_bytes() == before


def test_set_property_keeps_external_data_and_nominal(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = CheckpointState({"w": np.arange(64, dtype=np.float32)})
    path = _save(tmp_path, "ext.ckpt", state, external_data_threshold=0)
    reference = _save(tmp_path, "ref.ckpt", state)
    assert main(["set-property", str(path), "epoch=2"]) == 0
    loaded = ortckpt.load(path)
    assert loaded.has_external_data and loaded.properties["epoch"] == 2
    assert loaded.parameters["w"].data.tobytes() == np.arange(64, dtype=np.float32).tobytes()

    nominal = _copy(ORT_NOMINAL, tmp_path)
    assert main(["set-property", str(nominal), "note=nominal"]) == 0
    capsys.readouterr()
    doc = _diff_json(ORT_NOMINAL, nominal, capsys)
    assert doc["differences"] == 1 and doc["properties"]["added"][0]["name"] == "note"
    assert _diff_json(reference, path, capsys)["differences"] == 1


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions and symlinks")
@pytest.mark.parametrize("command", [["set-property", "epoch=5"], ["strip-optimizer"]], ids=lambda c: c[0])
def test_in_place_edits_keep_mode_and_follow_symlinks(
    command: list[str], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = _copy(ORT_OPTIM, tmp_path, "real.ckpt")
    real.chmod(0o600)
    link = tmp_path / "link.ckpt"
    link.symlink_to(real.name)
    assert main([command[0], str(link), *command[1:]]) == 0
    capsys.readouterr()
    assert link.is_symlink() and os.readlink(link) == real.name
    assert real.stat().st_mode & 0o777 == 0o600
    edited = ortckpt.load(real)
    assert edited.properties["epoch"] == 5 if command[0] == "set-property" else edited.optimizer is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.ckpt", "real.ckpt"]


# -- strip-optimizer ------------------------------------------------------------------------------


def test_strip_optimizer_to_new_file(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], assert_same_state: Any
) -> None:
    out = tmp_path / "stripped.ckpt"
    code, stdout, err = _run(["strip-optimizer", str(ORT_OPTIM), str(out)], capsys)
    assert (code, err) == (0, "")
    assert stdout.startswith(f"wrote {out}: removed 1 optimizer group (")
    stripped = ortckpt.load(out)
    assert stripped.optimizer is None
    original = ortckpt.load(ORT_OPTIM)
    assert_same_state(original, stripped, optimizer=False)  # parameters bit-exact, properties kept
    # ORT saved the same state with include_optimizer_state=False: same content
    assert _run(["diff", str(ORT_PARAMS_ONLY), str(out)], capsys) == (0, "", "")


def test_strip_optimizer_in_place(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(ORT_OPTIM, tmp_path)
    assert main(["strip-optimizer", str(path)]) == 0
    capsys.readouterr()
    assert ortckpt.load(path).optimizer is None
    doc = _diff_json(ORT_OPTIM, path, capsys)
    assert doc["differences"] == 1 and doc["optimizer"]["only_in_a"] == ["group0"]
    before = path.read_bytes()
    code, out, _ = _run(["strip-optimizer", str(path)], capsys)
    assert code == 0 and out == f"{path}: no optimizer state; unchanged\n"
    assert path.read_bytes() == before
    copy = tmp_path / "copy.ckpt"
    code, out, _ = _run(["strip-optimizer", str(path), str(copy)], capsys)
    assert code == 0 and "no optimizer state to remove" in out
    assert _run(["diff", str(path), str(copy)], capsys) == (0, "", "")


def test_strip_optimizer_errors(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["strip-optimizer", str(tmp_path / "none.ckpt")], capsys)
    assert code == 2 and "none.ckpt" in _one_error_line(err)
    code, _, err = _run(["strip-optimizer", str(ORT_OPTIM), str(tmp_path / "no" / "x.ckpt")], capsys)
    assert code == 2
    _one_error_line(err)
    assert _run(["strip-optimizer"], capsys)[0] == 2


# -- help and python -m ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", ["inspect", "diff", "from-onnx", "to-onnx", "set-property", "strip-optimizer"]
)
def test_subcommand_help_has_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: ortckpt {command} ")
    assert "examples:" in out and f"  ortckpt {command} " in out.split("examples:")[1]


def test_top_level_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ["inspect", "diff", "from-onnx", "to-onnx", "set-property", "strip-optimizer"]:
        assert command in out


def test_python_dash_m_diff_and_set_property(tmp_path: pathlib.Path) -> None:
    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ortckpt", *argv], capture_output=True, text=True)

    different = run("diff", str(ORT_OPTIM), str(ORT_EDITED))
    assert different.returncode == 1 and "fc1.bias" in different.stdout and different.stderr == ""
    assert run("diff", str(ORT_OPTIM), str(ORT_OPTIM)).returncode == 0
    path = _copy(ORT_OPTIM, tmp_path)
    assert run("set-property", str(path), "epoch=9").returncode == 0
    assert ortckpt.load(path).properties["epoch"] == 9
    bad = run("set-property", str(path), "--delete", "nope")
    assert bad.returncode == 2 and bad.stderr.startswith("ortckpt: error: ") and "Traceback" not in bad.stderr
