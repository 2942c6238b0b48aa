"""Files written by the real ONNX Runtime 1.19.2 load in ortckpt exactly as ORT itself sees them.

Sources: checkpoints ORT writes here from ort_cases (save_checkpoint of TensorProtos, then
add_property + save of the loaded state), ORT re-saves of those and of the fixtures, the fixtures
of tests/data (trained with AdamW/SGD, nominal, edited) and the corpus in tests/data/corpus.
Each is dumped by ORT in the same batch and compared with ortckpt's view.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers.ort import (
    Dump,
    assert_state_matches_dump,
    import_ortckpt,
    read_dump,
    same_bits,
)
from tests.helpers.paths import corpus_files, fixture_files
from tests.ort.ort_cases import CASES

pytestmark = pytest.mark.ort

FIXTURES = {p.name: p for p in fixture_files()}
CORPUS = {p.name: p for p in corpus_files()}
# Files ORT re-saves (load_checkpoint + save_checkpoint) before ortckpt reads them.
RESAVED = [
    "mlp_adamw_with_optimizer.ckpt",
    "mlp_adamw_edited.ckpt",
    "mlp_sgd_with_optimizer.ckpt",
    "mlp_fresh_artifact.ckpt",
    "dtypes.ckpt",
]


@pytest.fixture(scope="module")
def ort_files(oracle) -> dict[str, tuple[Path, Dump]]:
    """{label: (file, ORT's dump of it)} for everything ORT wrote or that ORT should read."""
    jobs: list[dict[str, Any]] = []
    files: dict[str, Path] = {}
    dumps: dict[str, Path] = {}

    def dump(label: str, path: Path) -> None:
        job, out = oracle.dump_job(path, stem="dump")
        jobs.append(job)
        files[label] = path
        dumps[label] = out

    for name, make in CASES.items():
        job, path = oracle.write_job(stem=name, **make())
        jobs.append(job)
        dump(f"written:{name}", path)
    for name, path in FIXTURES.items():
        dump(f"fixture:{name}", path)
    for name, path in CORPUS.items():
        dump(f"corpus:{name}", path)
    for name in RESAVED:
        for opt in (True, False):
            job, path = oracle.resave_job(FIXTURES[name], optimizer=opt, stem=name)
            jobs.append(job)
            dump(f"resaved{'' if opt else '-noopt'}:{name}", path)
    job, path = oracle.resave_job(files["written:properties"], stem="properties")
    jobs.append(job)
    dump("resaved:written-properties", path)
    oracle.run(jobs)
    return {label: (files[label], read_dump(dumps[label])) for label in files}


LABELS = (
    [f"written:{n}" for n in CASES]
    + [f"fixture:{n}" for n in FIXTURES]
    + [f"corpus:{n}" for n in CORPUS]
    + [f"resaved:{n}" for n in RESAVED]
    + [f"resaved-noopt:{n}" for n in RESAVED]
    + ["resaved:written-properties"]
)


@pytest.mark.parametrize("label", LABELS)
def test_ortckpt_reads_what_ort_sees(ort_files, label):
    ortckpt = import_ortckpt()
    path, dump = ort_files[label]
    assert_state_matches_dump(ortckpt.load(path), dump)


@pytest.mark.parametrize(
    "label", ["written:dtypes", "written:many_tensors", "fixture:mlp_adamw_with_optimizer.ckpt"]
)
def test_other_entry_points_agree(ort_files, label):
    ortckpt = import_ortckpt()
    path, dump = ort_files[label]
    assert_state_matches_dump(ortckpt.load(path, mmap=False), dump)
    assert_state_matches_dump(ortckpt.load_bytes(path.read_bytes()), dump)
    assert_state_matches_dump(ortckpt.load(str(path)), dump)
    assert_state_matches_dump(ortckpt.CheckpointState.load_checkpoint(path), dump)


def test_written_cases_hold_the_arrays_given_to_ort(ort_files):
    """The dumps themselves are faithful: what ORT wrote is what the case asked for."""
    for name, make in CASES.items():
        case = make()
        _, dump = ort_files[f"written:{name}"]
        expected = {
            **{k: (True, v) for k, v in case.get("trainable", {}).items()},
            **{k: (False, v) for k, v in case.get("frozen", {}).items()},
        }
        assert sorted(p["name"] for p in dump.parameters) == sorted(expected), name
        assert dump.meta["is_nominal"] == case.get("nominal", False)
        if dump.meta["is_nominal"]:
            continue
        for p in dump.parameters:
            flag, arr = expected[p["name"]]
            assert p["trainable"] == flag
            assert same_bits(dump.array(p["key"]), np.asarray(arr)), (name, p["name"])


def test_ort_state_writer_sorts(ort_files):
    """Facts about ORT's writer that ortckpt mirrors. Saving a CheckpointState sorts tensors,
    properties and optimizer states by name (bytewise), writes version 2 and external_data_offset
    -1. (save_checkpoint of TensorProtos, which generate_artifacts uses, keeps the given order.)"""
    for label, (_, dump) in ort_files.items():
        w = dump.resaved
        assert w["version"] == 2, label
        for group in ("trainable", "frozen"):
            names = [t["name"] for t in w[group]]
            assert names == sorted(names, key=lambda s: s.encode()), (label, group)
            assert all(t["external_data_offset"] == -1 for t in w[group]), label
        for kind in ("ints", "floats", "strings"):
            names = [n for n, _ in w["properties"][kind]]
            assert names == sorted(names, key=lambda s: s.encode()), (label, kind)
        for g in w["optimizer_groups"]:
            params = [s["param"] for s in g["states"]]
            assert params == sorted(params, key=lambda s: s.encode()), label
            for s in g["states"]:
                moms = [m["name"] for m in s["momentums"]]
                assert moms == sorted(moms), label


def test_float_properties_are_float32(ort_files):
    ortckpt = import_ortckpt()
    path, dump = ort_files["written:properties"]
    props = ortckpt.load(path).properties
    assert props["float_tenth"] == float(np.float32(0.1)) == dump.properties["float_tenth"]
    assert props["float_overflow"] == float("inf")
    assert props["float_tiny"] == float(np.float32(1e-45))
    # ORT's flatbuffers builder elides fields equal to their default and -0.0 == 0.0: the sign of
    # a -0.0 property is lost in ORT's own files.
    assert repr(props["float_negzero"]) == repr(dump.properties["float_negzero"]) == "0.0"
    assert props["float_nan"] != props["float_nan"]
    assert props["int_min"] == -(2**63) and props["int_max"] == 2**63 - 1
    assert props["str_nul"] == "a\0b"


def test_optimizer_fixtures_have_expected_shape(ort_files):
    """AdamW keeps momentum0/momentum1 per trainable parameter, SGD momentum0, both in group0."""
    ortckpt = import_ortckpt()
    adamw = ortckpt.load(FIXTURES["mlp_adamw_with_optimizer.ckpt"])
    assert list(adamw.optimizer) == ["group0"]
    g = adamw.optimizer["group0"]
    assert g.step == 3
    assert g.initial_learning_rate == float(np.float32(0.001))
    trainable = sorted(n for n, p in adamw.parameters.items() if p.trainable)
    assert sorted(g.states) == trainable
    for name in trainable:
        assert sorted(g.states[name]) == ["momentum0", "momentum1"]
        assert g.states[name]["momentum0"].shape == adamw.parameters[name].shape
    sgd = ortckpt.load(FIXTURES["mlp_sgd_with_optimizer.ckpt"]).optimizer["group0"]
    assert (sgd.step, sgd.initial_learning_rate) == (5, float(np.float32(0.05)))
    assert all(sorted(m) == ["momentum0"] for m in sgd.states.values())
    assert (
        ortckpt.load(FIXTURES["mlp_adamw_params_only.ckpt"]).optimizer is None
        or not ortckpt.load(FIXTURES["mlp_adamw_params_only.ckpt"]).optimizer
    )


def _corruptions(src: bytes) -> dict[str, bytes]:
    return {
        "empty": b"",
        "garbage": bytes(range(256)) * 4,
        "truncated_half": src[: len(src) // 2],
        "truncated_8": src[:8],
        "wrong_identifier": src[:4] + b"XXXX" + src[8:],
    }


def test_both_refuse_corrupt_files(oracle, tmp_path):
    """Files ORT refuses to load are refused by ortckpt too, with a CheckpointError."""
    ortckpt = import_ortckpt()
    src = FIXTURES["mlp_adamw_with_optimizer.ckpt"].read_bytes()
    paths = {}
    for name, data in _corruptions(src).items():
        paths[name] = tmp_path / f"{name}.ckpt"
        paths[name].write_bytes(data)
    jobs = [oracle.dump_job(p)[0] for p in paths.values()]
    for (name, path), res in zip(paths.items(), oracle.batch(jobs)):
        assert not res["ok"], f"ORT accepted {name}"
        with pytest.raises(ortckpt.CheckpointError):
            ortckpt.load(path)
        with pytest.raises(ortckpt.CheckpointError):
            ortckpt.load_bytes(path.read_bytes())
