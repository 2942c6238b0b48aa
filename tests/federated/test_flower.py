"""ortckpt.flower: checkpoints <-> Flower records (bit-exact for every dtype an Array carries, a
clear error for string tensors, hostile Arrays refused with ConversionError) and OrtFedAvg's
aggregation of real Flower reply messages, bad replies dropped and reported."""

from __future__ import annotations

import io
import time

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ortckpt

flwr_app = pytest.importorskip("flwr.app", reason="needs flwr (ortckpt[flower])")
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MessageType, MetricRecord, RecordDict  # noqa: E402
from flwr.app.message.message import make_message  # noqa: E402
from flwr.app.metadata import Metadata  # noqa: E402
from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects  # noqa: E402
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents  # noqa: E402

import ortckpt.flower as F  # noqa: E402  # with flwr present, a broken bridge fails, never skips

NUMERIC = [
    "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "complex128",
    "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
]  # fmt: skip


def _dtype(name: str) -> np.dtype:
    return (
        np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) and name != "bool" else np.dtype(name)
    )


def _bits(dtype: np.dtype, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Every bit pattern is fair: random bytes (NaN payloads, -0.0, infinities, subnormals)."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    if dtype == np.bool_:
        raw &= 1
    return raw.view(dtype).reshape(shape)


def _wire(obj):
    """What crosses the network: Flower deflates the record and its chunks, the peer inflates."""
    contents = {oid: o.deflate() for oid, o in get_all_nested_objects(obj).items()}
    return inflate_object_from_contents(obj.object_id, contents)


def _state(name: str) -> ortckpt.CheckpointState:
    dtype = _dtype(name)
    trainable = {"w": _bits(dtype, (3, 5), 1), "a.bias": _bits(dtype, (0,), 2)}
    frozen = {"frozen": _bits(dtype, (2, 2, 2), 3), "count": np.array(7, np.int64)}
    props = {"samples": 12, "loss": 0.375, "note": "héllo"}
    return ortckpt.load_bytes(ortckpt.CheckpointState(trainable, frozen=frozen, properties=props).to_bytes())


@pytest.mark.parametrize("name", NUMERIC)
def test_checkpoint_arrayrecord_parameters_round_trip_bit_exact(name: str) -> None:
    state = _state(name)
    original = ortckpt.serialize(state)
    record = _wire(F.to_arrayrecord(state))
    assert list(record) == F.parameter_order(state)
    assert record["w"].dtype == name and record["w"].shape == (3, 5)
    assert ortckpt.serialize(F.from_arrayrecord(record, state)) == original
    # trainable only: the frozen ones come from the reference
    assert (
        ortckpt.serialize(F.from_arrayrecord(_wire(F.to_arrayrecord(state, trainable_only=True)), state))
        == original
    )
    # legacy Parameters and ndarrays (Flower's own serialization of them included)
    assert ortckpt.serialize(F.from_parameters(F.to_parameters(state), state)) == original
    assert ortckpt.serialize(F.from_ndarrays(F.to_ndarrays(state), state)) == original
    legacy = ndarrays_to_parameters(F.to_ndarrays(state))  # Flower's own serialization
    assert ortckpt.serialize(F.from_parameters(legacy, state)) == original
    if name == "float8_e5m2":  # numpy writes it as '<f1', which numpy.load (so Flower) cannot read
        with pytest.raises((TypeError, ValueError)):
            parameters_to_ndarrays(legacy)
    else:
        assert ortckpt.serialize(F.from_ndarrays(parameters_to_ndarrays(legacy), state)) == original
    # without a reference: names, dtypes and values, floating-point ones trainable
    bare = F.from_arrayrecord(record)
    for key, param in state.parameters.items():
        assert bare.parameters[key].data.tobytes() == param.data.tobytes()
        assert bare.parameters[key].dtype == param.dtype


def test_parameter_order_is_orts_byte_order() -> None:
    names = ["b", "a", "é", "Z", "a.b", "a_b"]
    state = ortckpt.CheckpointState(
        {n: np.zeros(1, np.float32) for n in names}, frozen={"f": np.zeros(1, np.int32)}
    )
    order = F.parameter_order(state)
    assert order == sorted([*names, "f"], key=lambda n: n.encode())
    assert F.parameter_order(state, trainable_only=True) == [n for n in order if n != "f"]
    values = F.to_ndarrays(state)
    assert len(values) == len(order)


def test_string_tensors_cannot_be_carried_but_stay_with_the_reference() -> None:
    state = ortckpt.CheckpointState(
        {"w": np.ones(2, np.float32)}, frozen={"vocab": np.array(["a", "b"], object)}
    )
    with pytest.raises(ortckpt.ConversionError, match=r"'vocab'.*trainable_only=True"):
        F.to_arrayrecord(state)
    record = F.to_arrayrecord(state, trainable_only=True)
    back = F.from_arrayrecord(record, state)
    assert list(back.parameters["vocab"].data) == ["a", "b"] and not back.parameters["vocab"].trainable


def _npy(values: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, values, allow_pickle=False)
    return buffer.getvalue()


def _npy_header(shape: tuple[int, ...]) -> bytes:
    """A valid .npy header declaring ``shape`` float32 values, with none after it."""
    text = repr({"descr": "<f4", "fortran_order": False, "shape": shape}).encode()
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text


def _hostile() -> dict[str, Array]:
    good = _npy(np.zeros((3, 5), np.float32))
    header_end = good.index(b"\n") + 1
    return {
        "stype": Array(dtype="float32", shape=(3, 5), stype="torch", data=good),
        "unknown dtype": Array(dtype="float128", shape=(3, 5), stype="numpy.ndarray", data=good),
        "other dtype": Array(
            dtype="float64", shape=(3, 5), stype="numpy.ndarray", data=_npy(np.zeros((3, 5)))
        ),
        "data of another dtype": Array(
            dtype="float32", shape=(3, 5), stype="numpy.ndarray", data=_npy(np.zeros((3, 5), np.int32))
        ),
        "shape lie": Array(
            dtype="float32", shape=(3, 5), stype="numpy.ndarray", data=_npy(np.zeros((5, 3), np.float32))
        ),
        "declared shape lie": Array(dtype="float32", shape=(5, 3), stype="numpy.ndarray", data=good),
        "truncated": Array(dtype="float32", shape=(3, 5), stype="numpy.ndarray", data=good[:-1]),
        "trailing": Array(dtype="float32", shape=(3, 5), stype="numpy.ndarray", data=good + b"\0"),
        "no magic": Array(dtype="float32", shape=(3, 5), stype="numpy.ndarray", data=b"<html>502</html>"),
        "empty": Array(dtype="float32", shape=(3, 5), stype="numpy.ndarray", data=b""),
        "pickled object": Array(
            dtype="float32",
            shape=(3, 5),
            stype="numpy.ndarray",
            data=good[:10] + good[10:header_end].replace(b"'<f4'", b"'|O' "),
        ),
        "huge count": Array(
            dtype="float32",
            shape=(1 << 40, 1 << 20),
            stype="numpy.ndarray",
            data=_npy_header((1 << 40, 1 << 20)),
        ),
        "code in header": Array(
            dtype="float32",
            shape=(3, 5),
            stype="numpy.ndarray",
            data=b"\x93NUMPY\x01\x00\x20\x00__import__('os').system('x')   \n",
        ),
        "huge header": Array(
            dtype="float32", shape=(3, 5), stype="numpy.ndarray", data=b"\x93NUMPY\x02\x00\xff\xff\xff\x7f"
        ),
    }


@pytest.mark.parametrize("case", sorted(_hostile()))
def test_hostile_arrays_are_refused_by_name(case: str) -> None:
    reference = ortckpt.CheckpointState({"w": np.zeros((3, 5), np.float32)})
    record = ArrayRecord({"w": _hostile()[case]})
    with pytest.raises(ortckpt.ConversionError, match="'w'"):
        F.from_arrayrecord(record, reference)


def _padded_npy(values: np.ndarray, header_bytes: int) -> bytes:
    """``values`` as a version 2.0 .npy buffer whose header is padded to ``header_bytes``."""
    text = repr({"descr": values.dtype.str, "fortran_order": False, "shape": values.shape}).encode()
    text += b" " * (header_bytes - len(text) - 1) + b"\n"
    return b"\x93NUMPY\x02\x00" + len(text).to_bytes(4, "little") + text + values.tobytes()


def test_npy_headers_are_parsed_by_the_core_with_its_one_limit() -> None:
    """The bridge reads .npy headers with the core's parser (the one .npz members are read
    with): a header of 20,000 bytes (past numpy's default 10,000) is read, one past the core's
    64 KiB is refused naming the limit."""
    values = np.arange(15, dtype=np.float32).reshape(3, 5)
    reference = ortckpt.CheckpointState({"w": np.zeros((3, 5), np.float32)})
    record = ArrayRecord(
        {"w": Array(dtype="float32", shape=(3, 5), stype="numpy.ndarray", data=_padded_npy(values, 20_000))}
    )
    assert np.array_equal(F.from_arrayrecord(record, reference).parameters["w"].data, values)
    record = ArrayRecord(
        {"w": Array(dtype="float32", shape=(3, 5), stype="numpy.ndarray", data=_padded_npy(values, 70_000))}
    )
    with pytest.raises(
        ortckpt.ConversionError,
        match=r"'w': malformed .npy header.*claims 70000 bytes \(at most 65536 are read\)",
    ) as caught:
        F.from_arrayrecord(record, reference)
    assert caught.value.tensor == "w"  # type: ignore[attr-defined]


def test_fortran_order_arrays_decode_in_c_order() -> None:
    values = np.asfortranarray(np.arange(15, dtype=np.float32).reshape(3, 5))
    record = ArrayRecord({"w": Array(values)})
    back = F.from_arrayrecord(record, ortckpt.CheckpointState({"w": np.zeros((3, 5), np.float32)}))
    assert np.array_equal(back.parameters["w"].data, values)


def test_records_that_do_not_match_the_reference() -> None:
    ref = ortckpt.CheckpointState({"w": np.zeros(3, np.float32)}, frozen={"f": np.zeros(2, np.int64)})
    cases = {
        "missing": ArrayRecord({"f": Array(np.zeros(2, np.int64))}),
        "extra": ArrayRecord({"w": Array(np.zeros(3, np.float32)), "x": Array(np.zeros(1, np.float32))}),
        "shape": ArrayRecord({"w": Array(np.zeros(4, np.float32))}),
        "dtype": ArrayRecord({"w": Array(np.zeros(3, np.float64))}),
    }
    for case, record in cases.items():
        with pytest.raises(ortckpt.ConversionError):
            F.from_arrayrecord(record, ref)
        assert case
    with pytest.raises(ortckpt.ConversionError, match="2 arrays"):
        F.from_ndarrays([np.zeros(3, np.float32), np.zeros(2, np.int64)], ref, trainable_only=True)
    with pytest.raises(ortckpt.ConversionError, match="'w'"):
        F.from_ndarrays([np.zeros(2, np.int64), np.zeros(3, np.float64)], ref)


def test_properties_to_records_and_back() -> None:
    state = ortckpt.CheckpointState(
        {"w": np.zeros(1, np.float32)}, properties={"samples": 40, "loss": 0.1, "note": "x", "big": -(2**63)}
    )
    metrics = F.to_metricrecord(state)
    assert metrics["num-examples"] == 40 and metrics["samples"] == 40 and "note" not in metrics
    assert F.to_metricrecord(state, weight_property="big", weighted_by_key="w8")["w8"] == -(2**63)
    config = F.to_configrecord(state)
    props = F.properties_from_records(_wire(config))
    rebuilt = ortckpt.CheckpointState({"w": np.zeros(1, np.float32)}, properties=props)
    assert ortckpt.serialize(rebuilt) == ortckpt.serialize(state)
    assert props["loss"] == float(np.float32(0.1))
    with pytest.raises(KeyError, match="absent"):
        F.to_metricrecord(state, weight_property="absent")
    with pytest.raises(ortckpt.ConversionError, match="'flag'"):
        F.properties_from_records(ConfigRecord({"flag": True}))


def test_checkpoint_bytes_ride_in_an_arrayrecord() -> None:
    data = _state("float32").to_bytes()
    assert F.checkpoint_bytes(_wire(F.checkpoint_record(data))) == data
    with pytest.raises(ortckpt.ConversionError):
        F.checkpoint_bytes(ArrayRecord({"w": Array(np.zeros(2, np.float32))}))
    with pytest.raises(ortckpt.ConversionError, match="whole checkpoint"):
        F.from_arrayrecord(F.checkpoint_record(data))


# -- the strategy -------------------------------------------------------------------------------


def _reply(node: int, content: RecordDict | None = None, error: Error | None = None) -> Message:
    metadata = Metadata(
        run_id=1,
        message_id=f"m{node}",
        src_node_id=node,
        dst_node_id=0,
        reply_to_message_id="q",
        group_id="1",
        created_at=time.time(),
        ttl=600.0,
        message_type=MessageType.TRAIN,
    )
    return make_message(metadata, content, error)


def _base() -> ortckpt.CheckpointState:
    rng = np.random.default_rng(0)
    return ortckpt.CheckpointState(
        {"fc.weight": rng.standard_normal((4, 3)).astype(np.float32), "fc.bias": np.zeros(3, np.float32)},
        frozen={"scale": np.ones(3, np.float32)},
        properties={"epoch": 1},
    )


def _trained(base: ortckpt.CheckpointState, seed: int, samples: int) -> ortckpt.CheckpointState:
    rng = np.random.default_rng(seed)
    state = ortckpt.load_bytes(base.to_bytes())
    for p in state.trainable_parameters.values():
        p.data = (p.data + rng.standard_normal(p.shape)).astype(np.float32)
    state.properties["samples"] = samples
    return state


def _content(record: ArrayRecord, metrics: MetricRecord) -> RecordDict:
    return RecordDict({"arrays": record, "metrics": metrics})


def test_ortfedavg_drops_and_reports_bad_replies_flower_would_abort_on() -> None:
    base = _base()
    good = [_trained(base, s, n) for s, n in ((1, 10), (2, 30), (3, 60))]
    nan = _trained(base, 4, 10)
    nan.parameters["fc.weight"].data = np.full((4, 3), np.nan, np.float32)
    wrong = ortckpt.CheckpointState(
        {"fc.weight": np.zeros((4, 4), np.float32), "fc.bias": np.zeros(3, np.float32)},
        frozen={"scale": np.ones(3, np.float32)},
        properties={"samples": 5},
    )
    replies = [
        _reply(1, _content(F.checkpoint_record(good[0].to_bytes()), F.to_metricrecord(good[0]))),
        _reply(2, _content(F.to_arrayrecord(good[1], trainable_only=True), F.to_metricrecord(good[1]))),
        _reply(3, _content(F.checkpoint_record(good[2].to_bytes()), F.to_metricrecord(good[2]))),
        _reply(4, _content(F.checkpoint_record(good[0].to_bytes()[:100]), MetricRecord({"num-examples": 5}))),
        _reply(5, _content(F.checkpoint_record(nan.to_bytes()), F.to_metricrecord(nan))),
        _reply(6, _content(F.checkpoint_record(wrong.to_bytes()), F.to_metricrecord(wrong))),
        _reply(7, _content(F.checkpoint_record(good[0].to_bytes()), MetricRecord({"loss": 1.0}))),
        _reply(
            8,
            _content(
                ArrayRecord(
                    {"fc.weight": Array(dtype="float32", shape=(4, 3), stype="numpy.ndarray", data=b"x")}
                ),
                MetricRecord({"num-examples": 5}),
            ),
        ),
        _reply(9, error=Error(code=0, reason="ClientApp crashed")),
    ]
    reports = []
    strategy = F.OrtFedAvg(base, on_round=reports.append)
    arrays, metrics = strategy.aggregate_train(1, replies)
    report = strategy.round_reports[1]
    assert reports == [report]
    assert report.accepted == ["node 1", "node 2", "node 3"]
    kinds = {r.node_id: r.kind for r in report.rejected}
    assert kinds == {4: "unreadable", 5: "non-finite", 6: "shape", 7: "weight", 8: "malformed", 9: "error"}
    assert all(r.reason for r in report.rejected)
    # the aggregate is ortckpt.average's weighted mean of the good ones (frozen and properties from the base)
    expected = ortckpt.average(good, weights=[10, 30, 60], reference=base).state
    assert arrays is not None and ortckpt.serialize(F.from_arrayrecord(arrays, base)) == ortckpt.serialize(
        expected
    )
    assert ortckpt.serialize(strategy.global_state) == ortckpt.serialize(expected)
    assert metrics is not None and metrics["samples"] == pytest.approx((10 * 10 + 30 * 30 + 60 * 60) / 100)
    # Flower's own FedAvg agrees on the good replies (sums in another order: within float32 rounding)
    flower_arrays, _ = FedAvg().aggregate_train(
        1, [_reply(i, _content(F.to_arrayrecord(s), F.to_metricrecord(s))) for i, s in enumerate(good)]
    )
    for key, array in flower_arrays.items():
        np.testing.assert_allclose(array.numpy(), expected.parameters[key].data, rtol=1e-6)
    # ... and gives up on the mixed round: one odd reply ends it
    with pytest.raises(Exception, match=r"same keys|Expected exactly one|Missing required key"):
        FedAvg().aggregate_train(1, replies[:2] + replies[6:8])


def test_ortfedavg_with_no_good_reply_keeps_the_global_model() -> None:
    base = _base()
    strategy = F.OrtFedAvg(base, method="median")
    arrays, metrics = strategy.aggregate_train(
        3, [_reply(1, _content(F.checkpoint_record(b"garbage"), MetricRecord({"num-examples": 1})))]
    )
    assert arrays is None and metrics is None
    assert [r.kind for r in strategy.round_reports[3].rejected] == ["unreadable"]
    assert ortckpt.serialize(strategy.global_state) == ortckpt.serialize(base, include_optimizer_state=False)


@pytest.mark.parametrize("method", ["median", "trimmed_mean", "krum"])
def test_ortfedavg_uses_any_average_method(method: str) -> None:
    base = _base()
    good = [_trained(base, s, 10) for s in range(1, 6)]
    replies = [
        _reply(i, _content(F.checkpoint_record(s.to_bytes()), F.to_metricrecord(s)))
        for i, s in enumerate(good)
    ]
    options = {"byzantine": 1} if method == "krum" else {}
    strategy = F.OrtFedAvg(base, method=method, average_options=options)
    arrays, _ = strategy.aggregate_train(1, replies)
    expected = ortckpt.average(good, reference=base, method=method, **options).state
    assert arrays is not None and ortckpt.serialize(F.from_arrayrecord(arrays, base)) == ortckpt.serialize(
        expected
    )
    assert strategy.round_reports[1].aggregation.method == method


def test_payloads_for_devices() -> None:
    base = _base()
    full = F.OrtFedAvg(base).payload_record()
    assert ortckpt.serialize(ortckpt.load_bytes(F.checkpoint_bytes(full))) == ortckpt.serialize(base)
    old = ortckpt.load_bytes(F.checkpoint_bytes(F.OrtFedAvg(base, payload="checkpoint-v1").payload_record()))
    assert old.version == 1 and ortckpt.serialize(old) == ortckpt.serialize(base)
    named = F.OrtFedAvg(base, payload="arrays").payload_record()
    assert ortckpt.serialize(F.from_arrayrecord(named, base)) == ortckpt.serialize(base)
    assert ortckpt.load_bytes(F.OrtFedAvg(base).nominal_checkpoint()).is_nominal
    with pytest.raises(ValueError, match="payload"):
        F.OrtFedAvg(base, payload="pickle")
    with pytest.raises(ValueError, match="reference"):
        F.OrtFedAvg(base, average_options={"reference": base})


# -- parameter buffers (ORT's get_contiguous_parameters / copy_buffer_to_parameters) -------------


def _training_model(tmp_path) -> str:
    """The interface of _base()'s training graph: parameters as graph inputs, in graph order (not
    name order), trainable ones with their gradient buffers."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    spec = [
        ("x", ["batch", 4]),
        ("fc.bias", [3]),
        ("scale", [3]),
        ("fc.weight", [4, 3]),
        ("fc.weight_grad.accumulation.buffer", [4, 3]),
        ("fc.bias_grad.accumulation.buffer", [3]),
    ]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["loss"])],
        "training",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in spec],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
    )
    path = tmp_path / "training_model.onnx"
    onnx.save(helper.make_model(graph), path)
    return str(path)


def test_ortfedavg_takes_parameter_buffer_replies(tmp_path) -> None:
    model = _training_model(tmp_path)
    base = _base()
    good = [_trained(base, s, n) for s, n in ((1, 10), (2, 30), (3, 60))]
    nan = ortckpt.parameters_to_buffer(_trained(base, 4, 10), model)
    nan[2] = np.nan
    replies = [
        # trainable only (ORT's default), all parameters (told apart by length), a checkpoint
        _reply(
            1,
            _content(
                F.buffer_record(ortckpt.parameters_to_buffer(good[0], model)), F.to_metricrecord(good[0])
            ),
        ),
        _reply(
            2,
            _content(
                F.buffer_record(ortckpt.parameters_to_buffer(good[1], model, trainable_only=False)),
                F.to_metricrecord(good[1]),
            ),
        ),
        _reply(3, _content(F.checkpoint_record(good[2].to_bytes()), F.to_metricrecord(good[2]))),
        _reply(4, _content(F.buffer_record(np.zeros(5, np.float32)), MetricRecord({"num-examples": 5}))),
        _reply(5, _content(F.buffer_record(nan), MetricRecord({"num-examples": 5}))),
    ]
    strategy = F.OrtFedAvg(base, training_model=model)
    arrays, _ = strategy.aggregate_train(1, replies)
    report = strategy.round_reports[1]
    assert report.accepted == ["node 1", "node 2", "node 3"]
    assert {r.node_id: r.kind for r in report.rejected} == {4: "malformed", 5: "non-finite"}
    assert "holds 5 float32 values" in report.rejected[0].reason and "needs 15" in report.rejected[0].reason
    expected = ortckpt.average(good, weights=[10, 30, 60], reference=base).state
    assert arrays is not None and ortckpt.serialize(F.from_arrayrecord(arrays, base)) == ortckpt.serialize(
        expected
    )
    # without the training model a buffer cannot be decoded: that reply is dropped, not the round
    plain = F.OrtFedAvg(base)
    plain.aggregate_train(1, replies[:1] + replies[2:3])
    assert [(r.node_id, r.kind) for r in plain.round_reports[1].rejected] == [(1, "malformed")]


def test_nominal_plus_buffer_payload(tmp_path) -> None:
    model = _training_model(tmp_path)
    base = _base()
    record = _wire(F.OrtFedAvg(base, payload="nominal+buffer", training_model=model).payload_record())
    nominal = ortckpt.load_bytes(F.checkpoint_bytes(record))
    assert nominal.is_nominal and list(nominal.parameters) == list(base.parameters)
    buffer = F.buffer_values(record)
    assert np.array_equal(buffer, ortckpt.parameters_to_buffer(base, model, trainable_only=False))
    # what the device ends up with (copy_buffer_to_parameters(buffer, trainable_only=False))
    restored = ortckpt.parameters_from_buffer(buffer, base, model, trainable_only=False)
    assert ortckpt.serialize(restored) == ortckpt.serialize(base)
    with pytest.raises(ValueError, match="training_model"):
        F.OrtFedAvg(base, payload="nominal+buffer")
    with pytest.raises(ortckpt.ConversionError, match="1-D float32"):
        F.buffer_record(np.zeros(3, np.float64))
    with pytest.raises(ortckpt.ConversionError):
        F.buffer_values(F.checkpoint_record(b"x"))


_GOOD = _npy(np.arange(15, dtype=np.float32).reshape(3, 5))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cut=st.integers(0, len(_GOOD)),
    edits=st.lists(st.tuples(st.integers(0, len(_GOOD) - 1), st.integers(0, 255)), max_size=6),
    tail=st.binary(max_size=8),
)
def test_mangled_npy_data_is_refused_or_exact(cut: int, edits: list[tuple[int, int]], tail: bytes) -> None:
    """Any damage to an Array's bytes: a ConversionError, or (a change inside the values) a
    (3, 5) float32 array of exactly the bytes carried. Never another exception."""
    data = bytearray(_GOOD)
    for at, value in edits:
        data[at] = value
    data = bytes(data[:cut]) + tail
    reference = ortckpt.CheckpointState({"w": np.zeros((3, 5), np.float32)})
    record = ArrayRecord({"w": Array(dtype="float32", shape=(3, 5), stype="numpy.ndarray", data=data)})
    try:
        state = F.from_arrayrecord(record, reference)
    except ortckpt.ConversionError:
        return
    values = state.parameters["w"].data
    assert values.shape == (3, 5) and values.dtype == np.float32
    assert values.tobytes() == data[-60:]


def test_ortfedavg_evaluation_drops_replies_flower_would_abort_on() -> None:
    replies = [
        _reply(1, RecordDict({"metrics": MetricRecord({"num-examples": 10, "loss": 1.0})})),
        _reply(2, RecordDict({"metrics": MetricRecord({"num-examples": 30, "loss": 3.0})})),
        _reply(3, RecordDict({"metrics": MetricRecord({"loss": 0.0})})),
        _reply(4, RecordDict({"a": MetricRecord({"num-examples": 1}), "b": MetricRecord({"loss": 0.0})})),
        _reply(5, error=Error(code=0, reason="ClientApp crashed")),
        _reply(1, RecordDict({"metrics": MetricRecord({"num-examples": -1, "loss": 9.0})})),
    ]
    strategy = F.OrtFedAvg(_base())
    metrics = strategy.aggregate_evaluate(2, replies)
    assert metrics is not None and metrics["loss"] == pytest.approx(2.5)
    report = strategy.evaluate_reports[2]
    assert report.accepted == ["node 1", "node 2"]
    assert [(r.client, r.kind) for r in report.rejected] == [
        ("node 3", "weight"),
        ("node 4", "malformed"),
        ("node 5", "error"),
        ("node 1 (reply #5)", "weight"),
    ]
    with pytest.raises(Exception, match="MetricRecord"):
        FedAvg().aggregate_evaluate(2, replies)


def _train_replies(
    states: list[ortckpt.CheckpointState], weights: list[object], first: int = 1
) -> list[Message]:
    return [
        _reply(first + i, _content(F.checkpoint_record(s.to_bytes()), MetricRecord({"num-examples": w})))
        for i, (s, w) in enumerate(zip(states, weights, strict=True))
    ]


@pytest.mark.parametrize("method", ["fedavg", "multi_krum"])
def test_ortfedavg_rejects_weights_that_would_overflow_the_total(method: str) -> None:
    """Two replies claiming 1e308 examples made the total weight infinite: the aggregate came out
    all zeros, every reply accepted. Now each is rejected (kind ``weight``), never summed, and the
    aggregate is the good replies' (issue 32, item 2)."""
    base = _base()
    good = [_trained(base, s, 10) for s in (1, 2, 3)]
    hostile = [_trained(base, s, 10) for s in (4, 5, 6, 7)]
    replies = _train_replies([*good, *hostile], [10, 30, 60, 1e308, 1e308, 0, float("nan")])
    strategy = F.OrtFedAvg(base, method=method)
    arrays, _ = strategy.aggregate_train(1, replies)
    report = strategy.round_reports[1]
    assert report.accepted == ["node 1", "node 2", "node 3"] and report.failure is None
    assert [(r.node_id, r.kind) for r in report.rejected] == [
        (4, "weight"),
        (5, "weight"),
        (6, "weight"),
        (7, "weight"),
    ]
    assert "outside [2^-64, 2^64]" in report.rejected[0].reason
    expected = ortckpt.average(good, weights=[10, 30, 60], reference=base, method=method).state
    assert arrays is not None and ortckpt.serialize(F.from_arrayrecord(arrays, base)) == ortckpt.serialize(
        expected
    )
    # evaluation replies: the same rule (Flower's weighted metrics would be 1e308 * loss / inf)
    assert strategy.aggregate_evaluate(
        1,
        [
            _reply(1, RecordDict({"m": MetricRecord({"num-examples": 10, "loss": 1.0})})),
            _reply(2, RecordDict({"m": MetricRecord({"num-examples": 1e308, "loss": 5.0})})),
        ],
    ) == MetricRecord({"loss": 1.0})


@pytest.mark.parametrize(
    "options",
    [
        {"method": "bulyan", "average_options": {"byzantine": 1}},
        {"method": "multi_krum", "average_options": {"byzantine": 3}},
        {"method": "multi_krum", "average_options": {"keep": 4}},
    ],
)
def test_ortfedavg_reports_a_round_too_small_for_its_method_and_the_run_goes_on(options: dict) -> None:
    """One garbage and one missing reply leave fewer accepted uploads than the method needs:
    ``average`` raised ValueError (IndexError for multi_krum) out of ``aggregate_train`` and
    Flower's run ended. Now the round answers as Flower's own Bulyan does when it cannot
    aggregate, (None, None) and a warning, with the shortfall in the round's report; the global
    model stays and the next round aggregates (issue 32, item 5)."""
    base = _base()
    good = [_trained(base, s, 10) for s in (1, 2, 3)]
    replies = [
        *_train_replies(good, [10, 10, 10]),
        _reply(4, _content(F.checkpoint_record(b"garbage"), MetricRecord({"num-examples": 10}))),
        _reply(5, error=Error(code=0, reason="no reply")),
    ]
    strategy = F.OrtFedAvg(base, **options)
    assert strategy.aggregate_train(1, replies) == (None, None)
    report = strategy.round_reports[1]
    assert report.failure is not None and "3 were accepted" in report.failure and "short" in report.failure
    assert report.accepted == ["node 1", "node 2", "node 3"]
    assert sorted((r.node_id, r.kind) for r in report.rejected) == [(4, "unreadable"), (5, "error")]
    assert ortckpt.serialize(strategy.global_state) == ortckpt.serialize(base, include_optimizer_state=False)
    more = [_trained(base, s, 10) for s in range(10, 17)]
    arrays, _ = strategy.aggregate_train(2, _train_replies(more, [10] * 7))
    assert arrays is not None and strategy.round_reports[2].failure is None


def test_ortfedavg_checks_its_options_when_built() -> None:
    """A NaN noise multiplier would have made every round's model NaN; it is refused at once."""
    with pytest.raises(ValueError, match="noise_multiplier must be a finite number"):
        F.OrtFedAvg(_base(), average_options={"clip_norm": 1.0, "noise_multiplier": float("nan")})
    with pytest.raises(ValueError, match="byzantine"):
        F.OrtFedAvg(_base(), method="krum", average_options={"byzantine": -1})
