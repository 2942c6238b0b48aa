"""Every ORT-written checkpoint in ``tests/data/corpus`` matches its JSON manifest exactly, through
every loader, and keeps matching after being re-saved by ortckpt."""

from __future__ import annotations

import hashlib
import json
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, Parameter
from ortckpt._optimizer import momentum_tensor

Loader = Callable[[pathlib.Path], CheckpointState]
Comparer = Callable[..., None]

LOADERS: dict[str, Loader] = {
    "mmap": lambda p: ortckpt.load(p),
    "read": lambda p: ortckpt.load(p, mmap=False),
    "bytes": lambda p: ortckpt.load_bytes(p.read_bytes()),
    "memoryview": lambda p: ortckpt.load_bytes(memoryview(p.read_bytes())),
    "bytearray": lambda p: ortckpt.load_bytes(bytearray(p.read_bytes())),
    "ort_alias": lambda p: CheckpointState.load_checkpoint(p),
}


def _manifest(ckpt: pathlib.Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(ckpt.with_suffix(".json").read_text(encoding="utf-8"))
    return result


def _raw(param_data: np.ndarray[Any, Any]) -> bytes:
    return np.ascontiguousarray(param_data).tobytes()


def _check_tensor(
    expected: dict[str, Any],
    data_type: int,
    shape: tuple[int, ...],
    nbytes: int,
    data: np.ndarray[Any, Any] | None,
    nominal: bool,
) -> None:
    name = expected["name"]
    assert data_type == expected["data_type"], name
    assert list(shape) == expected["dims"], name
    assert expected["external_data_offset"] == -1, name  # the corpus has no external data
    if nominal:
        assert expected["raw_data_len"] == 0 and nbytes == 0
        assert data is None
        return
    assert data is not None
    assert nbytes == expected["raw_data_len"], name
    raw = _raw(data)
    assert len(raw) == expected["raw_data_len"], name
    assert hashlib.sha256(raw).hexdigest() == expected["sha256"], name
    assert data.reshape(-1).tolist() == expected["values"], name


def _check_param(expected: dict[str, Any], param: Parameter, trainable: bool, nominal: bool) -> None:
    assert param.trainable is trainable, param.name
    assert param.is_nominal is nominal, param.name
    data = None
    if nominal:
        with pytest.raises(ortckpt.CheckpointError, match="nominal"):
            param.data  # noqa: B018
    else:
        data = param.data
        assert not data.flags.writeable
        assert data.dtype == param.dtype and data.shape == param.shape
    _check_tensor(expected, param.data_type, param.shape, param.nbytes, data, nominal)


def check_against_manifest(
    state: CheckpointState, manifest: dict[str, Any], *, optimizer: bool = True
) -> None:
    assert state.version == manifest["version"]
    assert state.is_nominal is manifest["is_nominal_state"]
    assert state.has_external_data is manifest["has_external_data"]
    nominal = state.is_nominal

    trainable = {t["name"]: t for t in manifest["requires_grad_params"]}
    frozen = {t["name"]: t for t in manifest["frozen_params"]}
    assert list(state.trainable_parameters) == sorted(trainable)
    assert list(state.frozen_parameters) == sorted(frozen)
    assert list(state.parameters) == sorted([*trainable, *frozen])
    for name, expected in trainable.items():
        _check_param(expected, state.parameters[name], True, nominal)
    for name, expected in frozen.items():
        _check_param(expected, state.parameters[name], False, nominal)

    if optimizer:
        groups = manifest["optimizer_groups"]
        if not groups:
            assert state.optimizer is None
        else:
            assert state.optimizer is not None
            assert list(state.optimizer) == sorted(g["group_name"] for g in groups)
            for g in groups:
                group = state.optimizer[g["group_name"]]
                assert group.step == g["step"]
                assert group.initial_learning_rate == g["initial_learning_rate"]
                expected_states = {s["param_name"]: s["momentums"] for s in g["optimizer_states"]}
                assert list(group.states) == sorted(expected_states)
                for param_name, momentums in expected_states.items():
                    got = group.states[param_name]
                    assert list(got) == sorted(m["name"] for m in momentums)
                    for m in momentums:
                        arr = got[m["name"]]
                        assert not arr.flags.writeable
                        data_type = momentum_tensor(got, m["name"]).data_type
                        _check_tensor(m, data_type, arr.shape, arr.nbytes, arr, False)
    else:
        assert state.optimizer is None

    props = manifest["properties"] or {"ints": [], "floats": [], "strings": []}
    expected_props: dict[str, object] = {}
    for kind, pytype in (("ints", int), ("floats", float), ("strings", str)):
        for name, value in props[kind]:
            assert type(value) is pytype or (pytype is float and type(value) is int)
            expected_props[name] = pytype(value)
    assert sorted(state.properties) == sorted(expected_props)
    for name, value in expected_props.items():
        prop = state.properties[name]
        assert type(prop) is type(value) and prop == value, name


def test_corpus_is_present(corpus_dir: pathlib.Path) -> None:
    files = sorted(corpus_dir.glob("*.ckpt"))
    assert files, f"no checkpoints in {corpus_dir}"
    for f in files:
        assert f.with_suffix(".json").is_file(), f"{f.name} has no manifest"


def test_manifest_describes_the_file(corpus_case: pathlib.Path) -> None:
    manifest = _manifest(corpus_case)
    data = corpus_case.read_bytes()
    assert manifest["file"] == corpus_case.name
    assert manifest["size"] == len(data)
    assert manifest["sha256"] == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("how", sorted(LOADERS))
def test_load_matches_manifest(corpus_case: pathlib.Path, how: str) -> None:
    state = LOADERS[how](corpus_case)
    check_against_manifest(state, _manifest(corpus_case))


@pytest.mark.parametrize("include_optimizer_state", [True, False])
def test_resave_preserves_everything(
    corpus_case: pathlib.Path,
    tmp_path: pathlib.Path,
    include_optimizer_state: bool,
    assert_same_state: Comparer,
) -> None:
    manifest = _manifest(corpus_case)
    original = ortckpt.load(corpus_case)
    out = tmp_path / corpus_case.name
    ortckpt.save(original, out, include_optimizer_state=include_optimizer_state)
    for how, loader in LOADERS.items():
        again = loader(out)
        assert again.version == 2, how
        check_against_manifest(again, manifest, optimizer=include_optimizer_state)
        assert_same_state(original, again, optimizer=include_optimizer_state)
    # serialize() gives the same bytes as save(), and the output is a fixed point
    blob = ortckpt.serialize(original, include_optimizer_state=include_optimizer_state)
    assert blob == out.read_bytes()
    assert ortckpt.serialize(ortckpt.load_bytes(blob)) == blob


def test_resave_over_itself(corpus_case: pathlib.Path, tmp_path: pathlib.Path) -> None:
    path = tmp_path / corpus_case.name
    path.write_bytes(corpus_case.read_bytes())
    state = ortckpt.load(path)
    state.save(path)  # replaces the mapped file atomically
    check_against_manifest(ortckpt.load(path), _manifest(corpus_case))
    check_against_manifest(state, _manifest(corpus_case))  # the old mapping is still intact


def test_edit_then_resave(corpus_case: pathlib.Path, tmp_path: pathlib.Path) -> None:
    state = ortckpt.load(corpus_case)
    state.properties["edited"] = "yes"
    names = list(state.parameters)
    if not state.is_nominal:
        first = state.parameters[names[0]]
        first.data = np.zeros(first.shape, first.dtype)
    out = tmp_path / "edited.ckpt"
    state.save(out)
    again = ortckpt.load(out)
    assert again.properties["edited"] == "yes"
    assert list(again.parameters) == names
    if not state.is_nominal:
        assert not again.parameters[names[0]].data.any()
        for name in names[1:]:
            assert _raw(again.parameters[name].data) == _raw(state.parameters[name].data)


def test_views_of_corpus_files_are_zero_copy(corpus_case: pathlib.Path) -> None:
    state = ortckpt.load(corpus_case)
    if state.is_nominal:
        pytest.skip("nominal checkpoints have no values")
    mapped = np.frombuffer(ortckpt._native.MappedFile(str(corpus_case)), dtype=np.uint8)  # type: ignore[call-overload]
    for param in state.parameters.values():
        data = param.data
        if data.size and data.flags.aligned:
            # the view's bytes are the file's bytes at the indexed offset
            assert data.tobytes() in mapped.tobytes()
            base = data.base
            while isinstance(base, (np.ndarray, memoryview)):
                # numpy < 1.23's frombuffer keeps a memoryview of the exporter as the base
                base = base.obj if isinstance(base, memoryview) else base.base
            assert isinstance(base, ortckpt._native.MappedFile)


FIXTURES = sorted((pathlib.Path(__file__).parent / "data").glob("*.ckpt"))


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_repo_fixtures_roundtrip(
    fixture: pathlib.Path, tmp_path: pathlib.Path, assert_same_state: Comparer
) -> None:
    """tests/data/*.ckpt (also written by ORT; checked against their manifests in tests/ort) load
    through every loader and survive a re-save unchanged."""
    state = ortckpt.load(fixture)
    for loader in LOADERS.values():
        assert_same_state(state, loader(fixture))
    out = tmp_path / fixture.name
    state.save(out)
    assert_same_state(state, ortckpt.load(out))
