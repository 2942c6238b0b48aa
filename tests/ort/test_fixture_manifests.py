"""ORT-written files checked against the manifests made when ORT wrote them. No ORT needed here:
the manifests (tests/data/*.json, by scripts/make_fixtures.py) and the corpus dumps
(tests/data/corpus/*.json) record what ORT 1.19.2 saw in each file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers.ort import import_ortckpt
from tests.helpers.paths import ARTIFACTS, artifact_checkpoints, corpus_files, fixture_files


def sha256(a: Any) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def _load_all(ortckpt, path: Path):
    """The same file through each entry point."""
    return [ortckpt.load(path), ortckpt.load(path, mmap=False), ortckpt.load_bytes(path.read_bytes())]


@pytest.mark.parametrize(
    "path", fixture_files() + artifact_checkpoints(), ids=lambda p: str(p.relative_to(p.parents[1]))
)
def test_fixture_matches_manifest(path: Path):
    ortckpt = import_ortckpt()
    m = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    assert path.stat().st_size == m["size"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == m["sha256"], (
        "fixture changed without its manifest"
    )
    for state in _load_all(ortckpt, path):
        assert state.version == m["version"]
        assert bool(state.is_nominal) == m["is_nominal"]
        assert bool(state.has_external_data) == m["has_external_data"]
        assert list(state.parameters) == [p["name"] for p in m["parameters"]]
        for ref in m["parameters"]:
            p = state.parameters[ref["name"]]
            assert p.trainable == ref["trainable"], ref["name"]
            assert np.dtype(p.dtype) == np.dtype(ref["dtype"]), ref["name"]
            if ref["sha256"] is not None:
                assert list(p.shape) == ref["dims"], ref["name"]
                assert sha256(p.data) == ref["sha256"], ref["name"]
        if m["optimizer_groups"]:
            assert state.optimizer is not None
            assert sorted(state.optimizer) == sorted(g["name"] for g in m["optimizer_groups"])
            for g in m["optimizer_groups"]:
                og = state.optimizer[g["name"]]
                assert (og.step, og.initial_learning_rate) == (g["step"], g["initial_learning_rate"])
                assert sorted(og.states) == sorted(g["states"])
                for param, moms in g["states"].items():
                    assert sorted(og.states[param]) == sorted(moms)
                    for name, t in moms.items():
                        arr = og.states[param][name]
                        assert np.dtype(arr.dtype) == np.dtype(t["dtype"])
                        assert list(arr.shape) == t["dims"]
                        assert sha256(arr) == t["sha256"], (param, name)
        else:
            assert not state.optimizer
        props = dict(state.properties)
        assert sorted(props) == sorted(p["name"] for p in m["properties"])
        for ref in m["properties"]:
            got = props[ref["name"]]
            assert type(got).__name__ == ref["type"], ref["name"]
            assert repr(got) == repr(ref["value"]) if ref["type"] == "float" else got == ref["value"], ref[
                "name"
            ]


def test_artifact_files_match_their_record():
    """Every file of the artifact set (models and adapter included) is the one ORT wrote:
    files.json (scripts/make_artifact_fixtures.py) lists each, with its size and sha256."""
    record = json.loads((ARTIFACTS / "files.json").read_text(encoding="utf-8"))
    made = {str(p.relative_to(ARTIFACTS)) for p in ARTIFACTS.rglob("*") if p.is_file()}
    assert set(record) == {n for n in made if not n.endswith((".json", ".md"))}
    for name, entry in record.items():
        data = (ARTIFACTS / name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["bytes"], entry["sha256"]), name


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_matches_its_dump(path: Path):
    ortckpt = import_ortckpt()
    ref = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    state = ortckpt.load(path)
    assert state.version == ref["version"]
    assert bool(state.is_nominal) == ref["is_nominal_state"]
    assert bool(state.has_external_data) == ref["has_external_data"]
    tensors = {t["name"]: (True, t) for t in ref["requires_grad_params"]}
    tensors |= {t["name"]: (False, t) for t in ref["frozen_params"]}
    assert list(state.parameters) == sorted(tensors)
    for name, (trainable, t) in tensors.items():
        p = state.parameters[name]
        assert p.trainable == trainable, name
        if not ref["is_nominal_state"]:
            assert list(p.shape) == t["dims"], name
            assert sha256(p.data) == t["sha256"], name
            assert np.array_equal(np.asarray(p.data).ravel(), np.asarray(t["values"], dtype=p.dtype)), name
    groups = ref["optimizer_groups"] or []
    if not groups:
        assert not state.optimizer
    for g in groups:
        og = state.optimizer[g["group_name"]]
        assert (og.step, og.initial_learning_rate) == (g["step"], g["initial_learning_rate"])
        for st in g["optimizer_states"]:
            for t in st["momentums"]:
                assert sha256(og.states[st["param_name"]][t["name"]]) == t["sha256"]
    want: dict[str, Any] = {}
    for kind in ("ints", "floats", "strings"):
        for name, value in (ref["properties"] or {}).get(kind, []):
            want[name] = value
    assert dict(state.properties) == want
