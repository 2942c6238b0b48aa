"""ONNX interop against the real ONNX Runtime 1.19.2: TensorProtos -> checkpoints both ways, nominal
checkpoints, external data, and load_into_model == ORT's get_model_after_loading_checkpoint.

Everything ORT does here runs in one oracle batch (one subprocess for the module):

* ``save_protos``: ORT's ``save_checkpoint(trainable_protos, frozen_protos, path, nominal)`` on the
  same TensorProtos ortckpt's ``save_tensor_protos`` gets (raw_data and typed-field forms);
* ``dump``: ORT's ``load_checkpoint`` view of both writers' files;
* ``load_into_model``: ORT's ``get_model_after_loading_checkpoint(ckpt, model_bytes)`` on the models
  and checkpoints ``onnx_io.load_into_model`` gets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests.helpers.ort import (
    assert_dumps_equivalent,
    assert_state_matches_dump,
    import_ortckpt,
    oracle_formats,
    read_dump,
    same_bits,
)
from tests.ort.ort_cases import SUPPORTED_DTYPES

pytestmark = pytest.mark.ort

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tests.helpers.onnx_protos import data_type_of, header, make_model, raw_proto  # noqa: E402

Arr = np.ndarray

# -- inputs -------------------------------------------------------------------------------------------


def ort_dtype_arrays() -> dict[str, Arr]:
    """Every dtype ORT 1.19.2 can load from a checkpoint, with edge values, a scalar and an empty."""
    out: dict[str, Arr] = {}
    for dt in SUPPORTED_DTYPES:
        d = np.dtype(dt)
        if d.kind == "f":
            a = np.array([np.nan, np.inf, -np.inf, -0.0, 1.5, np.finfo(d).tiny / 2], dtype=d)
        elif d.kind == "b":
            a = np.array([True, False, True, True, False, True])
        else:
            info = np.iinfo(d)
            a = np.array([info.min, info.max, 0, 1, info.max // 3, info.min // 3], dtype=d)
        out[f"t.{d.name}"] = a.reshape(2, 3)
    out["t.scalar_f32"] = np.array(-2.75, np.float32)
    out["t.scalar_i64"] = np.array(-7, np.int64)
    out["t.empty_f32"] = np.zeros((0, 4), np.float32)
    out["t.5d_i16"] = np.arange(32, dtype=np.int16).reshape(1, 2, 2, 4, 2)
    return out


ARRAYS = ort_dtype_arrays()
TRAINABLE = {n for n, a in ARRAYS.items() if a.dtype.kind == "f"}

# dtypes ORT's save_checkpoint writes but its load_checkpoint refuses (ortckpt reads them)
ORT_WRITE_ONLY = {
    "w.float16": np.array([[0, 1.5], [np.inf, -65504]], np.float16),
    "w.bfloat16": np.arange(0, 2**16, 4099, dtype=np.uint16).view(ml_dtypes.bfloat16),
    "w.float8_e4m3fn": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
    "w.float8_e4m3fnuz": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fnuz),
    "w.float8_e5m2": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2),
    "w.float8_e5m2fnuz": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2fnuz),
    "w.string": np.array([["héllo ✓", ""], ["a\x00b", "日本語"]], dtype=object),
}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def typed_proto(name: str, arr: Arr) -> TensorProto:
    """The typed-field form (float_data via the wire format so NaN payloads survive)."""
    t = header(name, arr)
    flat = np.ascontiguousarray(arr).reshape(-1)
    kind = arr.dtype
    if kind == np.float32:
        payload = flat.astype("<f4").tobytes()
        return TensorProto.FromString(t.SerializeToString() + b"\x22" + _varint(len(payload)) + payload)
    if kind == np.float64:
        t.double_data.extend(flat.tolist())
    elif kind == np.int64:
        t.int64_data.extend(flat.tolist())
    elif kind in (np.uint32, np.uint64):
        t.uint64_data.extend(flat.astype(np.uint64).tolist())
    elif kind.kind == "O":
        t.string_data.extend(s.encode("utf-8") for s in flat)
    elif kind in (np.float16, ml_dtypes.bfloat16):
        t.int32_data.extend(flat.view(np.uint16).astype(np.int32).tolist())
    elif kind.itemsize == 1 and kind not in (np.int8, np.uint8, np.bool_):  # float8
        t.int32_data.extend(flat.view(np.uint8).astype(np.int32).tolist())
    else:  # (u)int8/16, int32, bool
        t.int32_data.extend(flat.astype(np.int64).tolist())
    return t


# Typed-field values outside the element type's range: ORT wraps integers and makes bools 0/1
ODD_TYPED = [
    TensorProto(name="odd.bool", data_type=TensorProto.BOOL, dims=[4], int32_data=[0, 2, -1, 1]),
    TensorProto(name="odd.uint8", data_type=TensorProto.UINT8, dims=[2], int32_data=[263, -1]),
    TensorProto(name="odd.int8", data_type=TensorProto.INT8, dims=[2], int32_data=[200, -129]),
    TensorProto(name="odd.uint16", data_type=TensorProto.UINT16, dims=[1], int32_data=[70000]),
    TensorProto(name="odd.int16", data_type=TensorProto.INT16, dims=[1], int32_data=[40000]),
    TensorProto(name="odd.uint32", data_type=TensorProto.UINT32, dims=[1], uint64_data=[2**32 + 5]),
]


def set_external(t: TensorProto, location: str, offset: int, length: int) -> None:
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = t.external_data.add()
        entry.key, entry.value = key, str(value)


# -- the batch ---------------------------------------------------------------------------------------


class Run:
    """Collects oracle jobs and the files they make."""

    def __init__(self, oracle: Any, workdir: Path) -> None:
        self.oracle = oracle
        self.dir = workdir
        self.jobs: list[dict[str, Any]] = []
        self.results: dict[str, dict[str, Any]] = {}
        self._labels: list[str] = []

    def path(self, name: str) -> Path:
        return self.dir / name

    def add(self, label: str, job: dict[str, Any]) -> None:
        self.jobs.append(job)
        self._labels.append(label)

    def ort_save(
        self, label: str, trainable: list[TensorProto], frozen: list[TensorProto], nominal: bool
    ) -> Path:
        tp, fp, out = self.path(f"{label}.t.pbs"), self.path(f"{label}.f.pbs"), self.path(f"{label}.ckpt")
        oracle_formats.write_protos(tp, [p.SerializeToString() for p in trainable])
        oracle_formats.write_protos(fp, [p.SerializeToString() for p in frozen])
        self.add(
            label,
            {
                "op": "save_protos",
                "trainable": str(tp),
                "frozen": str(fp),
                "out": str(out),
                "nominal": nominal,
            },
        )
        return out

    def dump(self, label: str, ckpt: Path) -> Path:
        out = self.path(f"{label}.npz")
        self.add(label, {"op": "dump", "ckpt": str(ckpt), "out": str(out)})
        return out

    def load_into_model(self, label: str, ckpt: Path, model: Path) -> Path:
        out = self.path(f"{label}.out.onnx")
        self.add(label, {"op": "load_into_model", "ckpt": str(ckpt), "model": str(model), "out": str(out)})
        return out

    def run(self) -> None:
        results = self.oracle.batch(self.jobs)
        for label, result in zip(self._labels, results):
            self.results[label] = result

    def ok(self, label: str) -> None:
        result = self.results[label]
        assert result["ok"], f"ORT refused {label}: {result.get('error')}"


def split(protos: dict[str, TensorProto]) -> tuple[list[TensorProto], list[TensorProto]]:
    names = sorted(protos)
    return [protos[n] for n in names if n in TRAINABLE], [protos[n] for n in names if n not in TRAINABLE]


# load_into_model cases: (checkpoint maker, model initializers)
def lim_cases(ortckpt: Any, onnx_io: Any, d: Path, run: Run) -> dict[str, tuple[Path, Path]]:
    """{case: (checkpoint, model file)} for load_into_model; some checkpoints are ORT's (from run)."""
    state = ortckpt.CheckpointState
    rng = np.random.default_rng(5)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    ids = np.arange(6, dtype=np.int64).reshape(2, 3)

    def save(name: str, st: Any, **kwargs: Any) -> Path:
        p = d / f"lim_{name}.ckpt"
        ortckpt.save(st, p, **kwargs)
        return p

    def model(name: str, inits: list[TensorProto]) -> Path:
        p = d / f"lim_{name}.onnx"
        onnx.save(make_model(inits), p)
        return p

    zeros = numpy_helper.from_array
    base_inits = [
        zeros(np.zeros((3, 4), np.float32), "w"),
        zeros(np.zeros(4, np.float32), "b"),
        zeros(np.zeros((2, 3), np.int64), "ids"),
    ]
    ck_basic = save("basic", state({"w": w, "b": b}, frozen={"ids": ids}))
    cases: dict[str, tuple[Path, Path]] = {}
    cases["matching"] = (ck_basic, model("matching", base_inits))
    cases["checkpoint_has_extra"] = (
        save("extra", state({"w": w, "b": b, "only.in.ckpt": np.ones(3, np.float32)}, frozen={"ids": ids})),
        model("ckpt_extra", base_inits[:2]),
    )
    ext = header("external.ref", np.zeros(4, np.float32))
    set_external(ext, "not_there.bin", 0, 16)
    typed = helper.make_tensor("typed", TensorProto.FLOAT, [2], [1.0, 2.0])
    typed.doc_string = "kept"
    cases["model_has_extra"] = (
        ck_basic,
        model("model_extra", [*base_inits, zeros(np.ones(2, np.float64), "c.f64"), typed, ext]),
    )
    doc_w = helper.make_tensor("w", TensorProto.FLOAT, [5], [9, 9, 9, 9, 9])  # float_data, other shape
    doc_w.doc_string = "old doc, dropped"
    ext_b = header("b", np.zeros(4, np.float32))
    set_external(ext_b, "b.bin", 0, 16)  # replaced: the external reference goes away
    cases["dtype_and_shape_differ"] = (
        ck_basic,
        model("differ", [doc_w, ext_b, zeros(np.zeros(7, np.float64), "ids")]),
    )
    cases["other_dtypes"] = (
        save(
            "other_dtypes",
            state(
                {k: v for k, v in ORT_WRITE_ONLY.items()}, frozen={"c64": np.array([1 + 2j], np.complex64)}
            ),
        ),
        model("other_dtypes", [zeros(np.zeros(1, np.float32), n) for n in [*ORT_WRITE_ONLY, "c64"]]),
    )
    cases["scalar_and_empty"] = (
        save("scalar_empty", state({"s": np.array(2.5, np.float32), "e": np.zeros((0, 3), np.float32)})),
        model("scalar_empty", [zeros(np.zeros(2, np.float32), "s"), zeros(np.zeros(2, np.float32), "e")]),
    )
    opt_state = state(
        {"w": w},
        frozen={"ids": ids},
        properties={"epoch": 3},
        optimizer={
            "g": ortckpt.OptimizerGroup(step=2, initial_learning_rate=0.1, states={"w": {"m": w * 0}})
        },
    )
    cases["with_optimizer_and_properties"] = (save("opt", opt_state), model("opt", base_inits))
    cases["external_data_checkpoint"] = (
        save(
            "external", state({"w": np.tile(w, 20), "b": b}, frozen={"ids": ids}), external_data_threshold=0
        ),
        model("external", base_inits),
    )
    ort_ck = run.ort_save(
        "lim_ort_written", [raw_proto("w", w), typed_proto("b", b)], [typed_proto("ids", ids)], False
    )
    cases["ort_written_checkpoint"] = (ort_ck, model("ort_written", base_inits))
    nominal = d / "lim_nominal.ckpt"
    onnx_io.save_tensor_protos([raw_proto("w", w)], [raw_proto("ids", ids)], nominal, nominal=True)
    cases["nominal"] = (nominal, model("nominal", base_inits))
    ort_nominal = run.ort_save("lim_ort_nominal", [raw_proto("w", w)], [raw_proto("ids", ids)], True)
    cases["ort_nominal"] = (ort_nominal, model("ort_nominal", base_inits))
    unnamed = TensorProto(data_type=TensorProto.FLOAT, dims=[1], raw_data=b"\0" * 4)
    cases["unnamed_initializer"] = (ck_basic, model("unnamed", [base_inits[0], unnamed]))
    empty = save("empty", state())
    cases["empty_checkpoint"] = (empty, model("empty", base_inits))
    return cases


REFUSED = {"nominal": "nominal", "ort_nominal": "nominal", "unnamed_initializer": "must have names"}


@pytest.fixture(scope="module")
def env(oracle, tmp_path_factory) -> dict[str, Any]:
    ortckpt = import_ortckpt()
    from ortckpt import onnx_io

    d = tmp_path_factory.mktemp("onnx_io")
    run = Run(oracle, d)
    out: dict[str, Any] = {"run": run, "dir": d}

    # 1. every ORT dtype, raw_data and typed fields, written by both
    for form, make in (("raw", raw_proto), ("typed", typed_proto)):
        protos = {n: make(n, a) for n, a in ARRAYS.items()}
        trainable, frozen = split(protos)
        ours = d / f"ours_{form}.ckpt"
        # serialized bytes for half of them: both input kinds are accepted
        onnx_io.save_tensor_protos(trainable, [p.SerializeToString() for p in frozen], ours)
        ort = run.ort_save(f"ort_{form}", trainable, frozen, False)
        out[f"ours_{form}"] = (ours, run.dump(f"dump_ours_{form}", ours))
        out[f"ort_{form}"] = (ort, run.dump(f"dump_ort_{form}", ort))

    # 2. dtypes ORT writes but cannot load, and typed values out of range
    for form, make in (("raw", raw_proto), ("typed", typed_proto)):
        protos = [make(n, a) for n, a in sorted(ORT_WRITE_ONLY.items())]
        ours = d / f"ours_write_only_{form}.ckpt"
        onnx_io.save_tensor_protos(protos, [], ours)
        out[f"write_only_{form}"] = (ours, run.ort_save(f"ort_write_only_{form}", protos, [], False))
    ours = d / "ours_odd.ckpt"
    onnx_io.save_tensor_protos([], ODD_TYPED, ours)
    out["odd"] = (ours, run.ort_save("ort_odd", [], ODD_TYPED, False))

    # 3. nominal checkpoints from both (ORT-loadable dtypes: dumped; the rest compared in ortckpt)
    protos = {n: raw_proto(n, a) for n, a in ARRAYS.items()}
    trainable, frozen = split(protos)
    ours = d / "ours_nominal.ckpt"
    onnx_io.save_tensor_protos(trainable, frozen, ours, nominal=True)
    ort = run.ort_save("ort_nominal", trainable, frozen, True)
    out["nominal"] = (ours, ort, run.dump("dump_ours_nominal", ours), run.dump("dump_ort_nominal", ort))
    wo = [raw_proto(n, a) for n, a in sorted(ORT_WRITE_ONLY.items())]
    ours = d / "ours_nominal_write_only.ckpt"
    onnx_io.save_tensor_protos(wo[:3], wo[3:], ours, nominal=True)
    out["nominal_write_only"] = (ours, run.ort_save("ort_nominal_write_only", wo[:3], wo[3:], True))

    # 4. external data: save_tensor_protos and save_from_onnx (an onnx external-data model) with a
    #    small threshold; ORT must load the values
    big = {n: np.tile(a.ravel(), 40) for n, a in ARRAYS.items()}
    protos = {n: raw_proto(n, a) for n, a in big.items()}
    trainable, frozen = split(protos)
    ours = d / "ours_external.ckpt"
    onnx_io.save_tensor_protos(trainable, frozen, ours, external_data_threshold=1024)
    out["external"] = (ours, big, run.dump("dump_ours_external", ours))
    model_dir = d / "ext_model"
    model_dir.mkdir()
    onnx.save_model(
        make_model(list(protos.values())),
        model_dir / "m.onnx",
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.data",
        size_threshold=0,
    )
    ours = d / "ours_from_onnx.ckpt"
    onnx_io.save_from_onnx(model_dir / "m.onnx", ours, external_data_threshold=512)
    out["from_onnx"] = (ours, big, run.dump("dump_ours_from_onnx", ours))

    # 5. load_into_model
    cases = lim_cases(ortckpt, onnx_io, d, run)
    out["lim"] = {
        name: (ck, model, run.load_into_model(f"lim:{name}", ck, model))
        for name, (ck, model) in cases.items()
    }

    run.run()
    return out


# -- 1. both writers, every ORT dtype -------------------------------------------------------------------


def check_dump_holds(dump: Any, arrays: dict[str, Arr]) -> None:
    assert not dump.meta["is_nominal"]
    assert [p["name"] for p in dump.parameters] == sorted(arrays)
    for p in dump.parameters:
        arr = arrays[p["name"]]
        assert p["trainable"] == (p["name"] in TRAINABLE), p["name"]
        assert same_bits(dump.array(p["key"]), arr), p["name"]


@pytest.mark.parametrize("form", ["raw", "typed"])
def test_ort_loads_save_tensor_protos(env, form):
    env["run"].ok(f"dump_ours_{form}")
    _, dump_path = env[f"ours_{form}"]
    check_dump_holds(read_dump(dump_path), ARRAYS)


@pytest.mark.parametrize("form", ["raw", "typed"])
def test_ortckpt_reads_ort_save_checkpoint_of_protos(env, form):
    ortckpt = import_ortckpt()
    run = env["run"]
    run.ok(f"ort_{form}")
    run.ok(f"dump_ort_{form}")
    path, dump_path = env[f"ort_{form}"]
    dump = read_dump(dump_path)
    check_dump_holds(dump, ARRAYS)
    state = ortckpt.load(path)
    assert_state_matches_dump(state, dump, optimizer=False)
    for name, arr in ARRAYS.items():
        assert same_bits(state.parameters[name].data, arr), name


@pytest.mark.parametrize("form", ["raw", "typed"])
def test_both_writers_equivalent(env, form):
    ours = read_dump(env[f"ours_{form}"][1])
    ort = read_dump(env[f"ort_{form}"][1])
    assert_dumps_equivalent(ours, ort)


# -- 2. dtypes ORT writes but cannot load; ORT's reading of typed fields ----------------------------


@pytest.mark.parametrize("form", ["raw", "typed"])
def test_ortckpt_reads_ort_written_dtypes_ort_cannot_load(env, form):
    ortckpt = import_ortckpt()
    ours, ort = env[f"write_only_{form}"]
    env["run"].ok(f"ort_write_only_{form}")
    a, b = ortckpt.load(ours), ortckpt.load(ort)
    assert list(a.parameters) == list(b.parameters) == sorted(ORT_WRITE_ONLY)
    for name, arr in ORT_WRITE_ONLY.items():
        for state in (a, b):
            p = state.parameters[name]
            assert p.trainable and p.data_type == data_type_of(arr), name
            got = p.data
            assert got.dtype == arr.dtype and got.shape == arr.shape, name
            if arr.dtype == object:
                assert got.tolist() == arr.tolist(), name
            else:
                assert got.tobytes() == arr.tobytes(), name


def test_out_of_range_typed_values_decode_like_ort(env):
    ortckpt = import_ortckpt()
    ours, ort = env["odd"]
    env["run"].ok("ort_odd")
    a, b = ortckpt.load(ours), ortckpt.load(ort)
    assert list(a.parameters) == list(b.parameters)
    for name in a.parameters:
        assert same_bits(a.parameters[name].data, b.parameters[name].data), name
    assert b.parameters["odd.bool"].data.view(np.uint8).tolist() == [0, 1, 1, 1]


# -- 3. nominal -------------------------------------------------------------------------------------------


def test_nominal_files_are_equivalent(env):
    ortckpt = import_ortckpt()
    run = env["run"]
    ours, ort, ours_dump, ort_dump = env["nominal"]
    for label in ("ort_nominal", "dump_ours_nominal", "dump_ort_nominal"):
        run.ok(label)
    a, b = read_dump(ours_dump), read_dump(ort_dump)
    assert a.meta["is_nominal"] and b.meta["is_nominal"]
    assert [p["name"] for p in a.parameters] == [p["name"] for p in b.parameters] == sorted(ARRAYS)
    # the files through ORT's own schema bindings: names, flags, data types, no dims, no data.
    # (ORT keeps the order it is given; both were given the same sorted lists.)
    wa, wb = a.as_written, b.as_written
    for key in ("version", "is_nominal", "has_external_data", "trainable", "frozen"):
        assert wa[key] == wb[key], key
    for t in wa["trainable"] + wa["frozen"]:
        assert t["dims"] == [] and t["raw_len"] == 0 and t["external_data_offset"] == -1, t
    assert {t["name"] for t in wa["trainable"]} == TRAINABLE
    sa, sb = ortckpt.load(ours), ortckpt.load(ort)
    for state in (sa, sb):
        assert state.is_nominal
        assert_state_matches_dump(state, b, optimizer=False)
    for name in sa.parameters:
        pa, pb = sa.parameters[name], sb.parameters[name]
        assert (pa.data_type, pa.trainable, pa.shape, pa.is_nominal) == (pb.data_type, pb.trainable, (), True)


def test_nominal_other_dtypes_equivalent(env):
    ortckpt = import_ortckpt()
    ours, ort = env["nominal_write_only"]
    env["run"].ok("ort_nominal_write_only")
    sa, sb = ortckpt.load(ours), ortckpt.load(ort)
    assert sa.is_nominal and sb.is_nominal
    view = [(n, p.data_type, p.trainable, p.shape, p.is_nominal) for n, p in sa.parameters.items()]
    assert view == [(n, p.data_type, p.trainable, p.shape, p.is_nominal) for n, p in sb.parameters.items()]
    assert [n for n, *_ in view] == sorted(ORT_WRITE_ONLY)


# -- 4. external data ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["external", "from_onnx"])
def test_ort_loads_external_data_written_from_protos(env, case):
    ortckpt = import_ortckpt()
    path, arrays, dump_path = env[case]
    env["run"].ok(f"dump_ours_{case}")
    assert Path(ortckpt.external_data_path(path)).exists()
    dump = read_dump(dump_path)
    check_dump_holds(dump, arrays)
    state = ortckpt.load(path)
    assert state.has_external_data
    for name, arr in arrays.items():
        assert same_bits(state.parameters[name].data, arr), name


# -- 5. load_into_model == get_model_after_loading_checkpoint ------------------------------------------


LIM_CASES = [
    "matching",
    "checkpoint_has_extra",
    "model_has_extra",
    "dtype_and_shape_differ",
    "other_dtypes",
    "scalar_and_empty",
    "with_optimizer_and_properties",
    "external_data_checkpoint",
    "ort_written_checkpoint",
    "nominal",
    "ort_nominal",
    "unnamed_initializer",
    "empty_checkpoint",
]


@pytest.mark.parametrize("case", LIM_CASES)
def test_load_into_model_matches_ort(env, case):
    from ortckpt import CheckpointError, onnx_io

    ortckpt = import_ortckpt()
    run = env["run"]
    ckpt, model_path, ort_out = env["lim"][case]
    for label, result in run.results.items():
        if label.startswith("lim_ort_"):
            assert result["ok"], (label, result)
    result = run.results[f"lim:{case}"]
    if case in REFUSED:
        assert not result["ok"], "ORT accepted it"
        assert REFUSED[case] in result["error"], result["error"]
        kind = ValueError if case == "unnamed_initializer" else CheckpointError
        with pytest.raises(kind):
            onnx_io.load_into_model(ckpt, model_path)
        return
    assert result["ok"], result.get("error")
    expected = onnx.ModelProto()
    expected.ParseFromString(ort_out.read_bytes())
    for source in ("path", "state", "proto"):
        if source == "path":
            got = onnx_io.load_into_model(ckpt, model_path)
        elif source == "state":
            got = onnx_io.load_into_model(ortckpt.load(ckpt), str(model_path))
        else:
            got = onnx_io.load_into_model(ckpt, onnx.load(model_path, load_external_data=False))
        assert [t.name for t in got.graph.initializer] == [t.name for t in expected.graph.initializer]
        for ours, theirs in zip(got.graph.initializer, expected.graph.initializer):
            assert ours.SerializeToString() == theirs.SerializeToString(), (case, ours.name)
        assert got == expected, case
        assert got.SerializeToString() == ort_out.read_bytes(), case


def test_load_into_model_rules_seen_in_ort(env):
    """The rules of load_into_model's docstring, read off ORT's outputs."""
    ortckpt = import_ortckpt()

    def ort_result(case: str) -> tuple[Any, Any, Any]:
        ckpt, model_path, out = env["lim"][case]
        model = onnx.load(model_path, load_external_data=False)
        result = onnx.ModelProto()
        result.ParseFromString(out.read_bytes())
        return ortckpt.load(ckpt), {t.name: t for t in model.graph.initializer}, result

    state, before, after = ort_result("dtype_and_shape_differ")
    inits = {t.name: t for t in after.graph.initializer}
    # checkpoint dtype/shape win, no conversion; the old initializer's fields are all gone
    assert (inits["w"].data_type, list(inits["w"].dims)) == (TensorProto.FLOAT, [3, 4])
    assert not inits["w"].doc_string and not inits["w"].float_data
    assert (inits["ids"].data_type, list(inits["ids"].dims)) == (TensorProto.INT64, [2, 3])
    assert inits["b"].data_location == TensorProto.DEFAULT and not inits["b"].external_data
    assert inits["b"].raw_data == state.parameters["b"].data.tobytes()
    # names only in the model are untouched, names only in the checkpoint ignored
    _, before, after = ort_result("model_has_extra")
    inits = {t.name: t for t in after.graph.initializer}
    for name in ("c.f64", "typed", "external.ref"):
        assert inits[name] == before[name], name
    _, _, after = ort_result("checkpoint_has_extra")
    assert [t.name for t in after.graph.initializer] == ["w", "b"]
    # strings come back in string_data
    _, _, after = ort_result("other_dtypes")
    s = next(t for t in after.graph.initializer if t.name == "w.string")
    assert not s.HasField("raw_data") and list(s.string_data) == [
        x.encode() for x in ORT_WRITE_ONLY["w.string"].ravel()
    ]
