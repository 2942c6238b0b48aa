"""Parameter buffers against the real ORT 1.19.2 (side venv, ``$ORTCKPT_ORT_VENV``; runner:
tests/ort/buffers_runner.py). Training artifacts from ORT's ``generate_artifacts`` for an MLP with
``fc1.bias`` frozen, between trainable parameters in graph order:

* ``parameters_to_buffer`` equals ``Module.get_contiguous_parameters()`` bit for bit, with
  ``trainable_only`` True and False;
* buffers made by ortckpt (random values), given to ORT's ``copy_buffer_to_parameters`` (both
  ways, and into the nominal checkpoint), leave ORT with exactly the parameters
  ``parameters_from_buffer`` decodes;
* a checkpoint parameter that is not an input of the training graph is in neither ORT's buffer
  nor ortckpt's;
* ORT refuses what ortckpt refuses: a buffer of the wrong length, a nominal state with
  ``trainable_only=True``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.ort import import_ortckpt, run_module, same_bits

ortckpt = import_ortckpt()

RUNNER = "tests.ort.buffers_runner"


@pytest.fixture(scope="module")
def work(ort_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("buffers")
    run_module(ort_python, RUNNER, "make", str(work), timeout=300)
    return work


def _model(work: Path) -> str:
    return str(work / "art" / "training_model.onnx")


def test_to_buffer_equals_ort_get_contiguous_parameters(work: Path) -> None:
    state = ortckpt.load(work / "art" / "checkpoint")
    sizes = json.loads((work / "make.json").read_text())
    assert not state.parameters["fc1.bias"].trainable  # the case has a frozen parameter
    for label, only in (("trainable", True), ("all", False)):
        ort = np.fromfile(work / f"ort_{label}.bin", dtype="<f4")
        ours = ortckpt.parameters_to_buffer(state, _model(work), trainable_only=only)
        assert ours.dtype == np.float32 and ours.shape == (sizes[label],)
        assert same_bits(ours, ort), label
    # the frozen parameter is what tells the two apart: 8 values inside, not at the end
    assert sizes["all"] - sizes["trainable"] == state.parameters["fc1.bias"].size == 8


def test_ort_copies_ortckpt_buffers_to_the_parameters_ortckpt_decodes(ort_python: str, work: Path) -> None:
    model = _model(work)
    full = ortckpt.load(work / "art" / "checkpoint")
    nominal = ortckpt.load(work / "art" / "nominal_checkpoint")
    rng = np.random.default_rng(23)
    jobs, expected = [], {}
    cases = [("checkpoint", full, True), ("checkpoint", full, False), ("nominal_checkpoint", nominal, False)]
    for i, (ckpt, ref, only) in enumerate(cases):
        size = ortckpt.parameters_to_buffer(full, model, trainable_only=only).size
        values = rng.standard_normal(size).astype(np.float32)
        buffer = f"ours_{i}.bin"
        values.tofile(work / buffer)
        out = f"after_{i}.ckpt"
        jobs.append({"checkpoint": f"art/{ckpt}", "buffer": buffer, "trainable_only": only, "out": out})
        expected[out] = ortckpt.parameters_from_buffer(values, ref, model, trainable_only=only)
        # the file form decodes the same
        from_file = ortckpt.parameters_from_buffer(work / buffer, ref, model, trainable_only=only)
        for name, p in expected[out].parameters.items():
            assert same_bits(from_file.parameters[name].data, p.data), name
    (work / "jobs.json").write_text(json.dumps(jobs))
    extra = ortckpt.CheckpointState(
        [*full.parameters.values(), ortckpt.Parameter("zz.extra", np.ones(5, np.float32))],
        properties=full.properties,
    )
    extra.save(work / "extra.ckpt")
    run_module(ort_python, RUNNER, "copy", str(work), timeout=300)
    for job in jobs:
        out = job["out"]
        theirs = ortckpt.load(work / out)
        ours = expected[out]
        assert sorted(theirs.parameters) == sorted(ours.parameters)
        for name, p in ours.parameters.items():
            assert p.trainable == theirs.parameters[name].trainable, (out, name)
            assert same_bits(theirs.parameters[name].data, p.data), (out, name)
        # and ORT's own buffer of the result is ortckpt's buffer of what it decoded
        ort_all = np.fromfile(work / f"{out}.all.bin", dtype="<f4")
        assert same_bits(ortckpt.parameters_to_buffer(ours, model, trainable_only=False), ort_all), out
    # a checkpoint parameter that is not a graph input is in neither buffer, in ORT as in ortckpt
    sizes = json.loads((work / "extra.json").read_text())
    for label, only in (("trainable", True), ("all", False)):
        theirs_extra = np.fromfile(work / f"extra_{label}.bin", dtype="<f4")
        ours_extra = ortckpt.parameters_to_buffer(extra, model, trainable_only=only)
        assert sizes[label] == ours_extra.size and same_bits(ours_extra, theirs_extra), label
    # with trainable_only=True the frozen parameter kept the reference's values, in both
    first = ortckpt.load(work / "after_0.ckpt")
    assert same_bits(first.parameters["fc1.bias"].data, full.parameters["fc1.bias"].data)


def test_ort_refuses_what_ortckpt_refuses(work: Path) -> None:
    refusals = json.loads((work / "copy.json").read_text())
    assert "size" in refusals["wrong_length"].lower()
    assert "trainable_only" in refusals["nominal_trainable_only"]
    model = _model(work)
    full = ortckpt.load(work / "art" / "checkpoint")
    size = ortckpt.parameters_to_buffer(full, model).size
    with pytest.raises(ortckpt.TensorDataError, match=f"needs {size}"):
        ortckpt.parameters_from_buffer(np.zeros(size + 1, np.float32), full, model)
    nominal = ortckpt.load(work / "art" / "nominal_checkpoint")
    with pytest.raises(ortckpt.CheckpointError, match="trainable_only=False"):
        ortckpt.parameters_from_buffer(np.zeros(size, np.float32), nominal, model)
