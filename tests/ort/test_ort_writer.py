"""What the streaming writer adds, proven against ORT 1.19.2: where momentums go in external-data
saves, tensor doc strings, the format version field, and a 100,000-tensor file both ways."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers.ort import assert_state_matches_dump, import_ortckpt, make_state, same_bits
from tests.ort.ort_cases import adamw_optimizer

pytestmark = pytest.mark.ort

W = np.linspace(-1, 1, 3000, dtype=np.float32).reshape(30, 100)  # 12,000 bytes


@pytest.mark.parametrize("external_momentums", [False, True])
def test_momentums_stay_inline_unless_asked(oracle, tmp_path: Path, external_momentums: bool) -> None:
    ortckpt = import_ortckpt()
    case = {
        "trainable": {"w": W},
        "frozen": {"b": np.arange(40, dtype=np.int64)},
        "optimizer": adamw_optimizer({"w": W}),
    }
    state = make_state(ortckpt, case)
    path = tmp_path / "c.ckpt"
    ortckpt.save(state, path, external_data_threshold=0, external_momentums=external_momentums)
    ext_size = os.path.getsize(ortckpt.external_data_path(path))
    # w (12,000 bytes) and b (320) go external either way; the two momentums (12,000 each) only
    # when asked, as ORT keeps them inline. Every offset here is already 16-byte aligned.
    assert ext_size == (12000 + 320 + 2 * 12000 if external_momentums else 12000 + 320)
    dump = oracle.dump(path)
    assert_state_matches_dump(ortckpt.load(path), dump, external=True)
    loaded = ortckpt.load(path)
    assert loaded.optimizer is not None
    for mname, m in case["optimizer"]["group0"]["states"]["w"].items():
        assert same_bits(loaded.optimizer["group0"].states["w"][mname], m), mname


def test_doc_strings_reach_ort(oracle, tmp_path: Path) -> None:
    """save_tensor_protos keeps each TensorProto's doc_string, as ORT's TensorProto path does; ORT's
    get_model_after_loading_checkpoint copies it into the model, which shows ORT read it."""
    ortckpt = import_ortckpt()
    w = numpy_helper.from_array(W, "w")
    w.doc_string = "weights ✓"
    b = numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")  # no doc string
    ckpt = tmp_path / "doc.ckpt"
    ortckpt.save_tensor_protos([w], [b], ckpt)
    inits = [
        numpy_helper.from_array(np.zeros_like(W), "w"),
        numpy_helper.from_array(np.zeros(3, np.float32), "b"),
    ]
    graph = helper.make_graph(
        [], "g", [], [helper.make_tensor_value_info("w", TensorProto.FLOAT, None)], inits
    )
    model_path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), model_path)
    out = tmp_path / "out.onnx"
    oracle.run([{"op": "load_into_model", "ckpt": str(ckpt), "model": str(model_path), "out": str(out)}])
    result = onnx.ModelProto()
    result.ParseFromString(out.read_bytes())
    docs = {t.name: t.doc_string for t in result.graph.initializer}
    assert docs == {"w": "weights ✓", "b": ""}
    got = {t.name: numpy_helper.to_array(t) for t in result.graph.initializer}
    assert same_bits(got["w"], W)
    # ortckpt's load_into_model copies doc strings as ORT does: the same model, byte for byte, also
    # after a load/save round trip of the checkpoint (Parameter.doc_string is kept)
    assert ortckpt.load_into_model(ckpt, model_path).SerializeToString() == out.read_bytes()
    state = ortckpt.load(ckpt)
    assert (state.parameters["w"].doc_string, state.parameters["b"].doc_string) == ("weights ✓", "")
    again = tmp_path / "again.ckpt"
    ortckpt.save(state, again)
    assert ortckpt.load_into_model(again, model_path).SerializeToString() == out.read_bytes()
    assert ortckpt.to_tensor_proto(ortckpt.load(again).parameters["w"]).doc_string == "weights ✓"


def test_format_version_1_is_written_and_refused_by_ort_1_19(oracle, tmp_path: Path) -> None:
    """ORT 1.19.2 reads only version 2 (docs/format.md §2): its refusal of our version 1 file shows
    the field is written; ortckpt reads the file back unchanged otherwise."""
    ortckpt = import_ortckpt()
    path = tmp_path / "v1.ckpt"
    state = ortckpt.CheckpointState({"w": W}, properties={"epoch": 3})
    ortckpt.save(state, path, format_version=1)
    job, _ = oracle.dump_job(path)
    (result,) = oracle.batch([job])
    assert not result["ok"] and "Checkpoint version 1 is not supported" in result["error"], result
    back = ortckpt.load(path)
    assert back.version == 1 and same_bits(back.parameters["w"].data, W)
    assert dict(back.properties) == {"epoch": 3}
    with pytest.raises(ortckpt.CheckpointError, match="writable versions are 1"):
        ortckpt.save(state, tmp_path / "x.ckpt", format_version=3)
    nominal = tmp_path / "n.ckpt"
    ortckpt.save_tensor_protos([numpy_helper.from_array(W, "w")], [], nominal, nominal=True)
    with pytest.raises(ortckpt.CheckpointError, match="no nominal flag"):
        ortckpt.save(ortckpt.load(nominal), tmp_path / "n1.ckpt", format_version=1)
    with pytest.raises(ortckpt.CheckpointError, match="cannot hold external data"):
        ortckpt.save(state, tmp_path / "e.ckpt", format_version=1, external_data_threshold=0)


def test_hundred_thousand_tensors_both_ways(oracle, tmp_path: Path) -> None:
    """Issue 8's shape C: ORT loads ortckpt's 100,000-tensor file and saves it again; ortckpt reads
    ORT's file back with the same values."""
    ortckpt = import_ortckpt()
    n = 100_000
    values = np.arange(n * 16, dtype=np.float32).reshape(n, 16)
    params = {f"t{i:06d}": values[i] for i in range(n)}
    ours = tmp_path / "many.ckpt"
    ortckpt.save(ortckpt.CheckpointState(params), ours)
    resaved = oracle.resave(ours, optimizer=False)
    theirs = ortckpt.load(resaved)
    assert len(theirs.parameters) == n
    for name in ("t000000", "t054321", "t099999"):
        assert same_bits(theirs.parameters[name].data, params[name]), name
    assert all(same_bits(p.data, params[name]) for name, p in theirs.parameters.items())
