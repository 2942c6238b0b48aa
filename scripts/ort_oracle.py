#!/usr/bin/env python3
"""ONNX Runtime 1.19.2 as an oracle for ortckpt: make the real ORT read and write checkpoints.

Run this file with the python of the ORT side venv (``scripts/setup_ort_env.sh`` prints it); it
needs ``onnxruntime-training-cpu==1.19.2``, ``numpy<2``, ``onnx`` and ``flatbuffers`` (an ORT
dependency) and nothing else: no torch. Everything ORT-side goes through
``onnxruntime.capi._pybind_state`` (``load_checkpoint``, ``save_checkpoint``, ``CheckpointState``).

Subcommands
-----------
``dump CKPT OUT.npz [--json]``
    Load CKPT with ``load_checkpoint`` and write what ORT sees to OUT.npz. Exit 1 with ORT's message
    on stderr when ORT cannot load the file. ``--json`` also prints the metadata on stdout.
``write SPEC.npz OUT.ckpt``
    Make ORT write a checkpoint from a spec (tensors, trainable flags, properties, nominal flag).
``resave CKPT OUT.ckpt [--no-optimizer]``
    ``load_checkpoint`` then ``save_checkpoint(state, OUT, include_optimizer_state)``.
``save-protos TRAINABLE.pbs FROZEN.pbs OUT.ckpt [--nominal]``
    ``save_checkpoint(trainable_protos, frozen_protos, OUT, nominal_checkpoint)``: ORT's own
    TensorProto -> checkpoint path. The .pbs files hold serialized ``onnx.TensorProto``s (see
    "Protos file format" below; ``write_protos`` makes one).
``load-into-model CKPT MODEL.onnx OUT.onnx``
    ``get_model_after_loading_checkpoint(CKPT, model_bytes)``: ORT's ``LoadCheckpointToModel``;
    OUT.onnx receives the serialized ModelProto ORT returns.
``batch JOBS.json``
    Run many of the above in one process. JOBS.json is a list of objects
    ``{"op": "dump", "ckpt": ..., "out": ...}``, ``{"op": "write", "spec": ..., "out": ...}``,
    ``{"op": "resave", "ckpt": ..., "out": ..., "optimizer": true}``,
    ``{"op": "save_protos", "trainable": PBS, "frozen": PBS, "out": ..., "nominal": false}``,
    ``{"op": "load_into_model", "ckpt": ..., "model": ..., "out": ...}``. Prints a JSON list with one
    ``{"ok": true}`` or ``{"ok": false, "error": "<ORT's message>"}`` per job, in order; exit 0 when
    every job ran (whether or not ORT accepted its file), 2 when JOBS.json is malformed.
``info``
    Print the versions of onnxruntime, numpy and onnx as JSON.

Dump format (OUT.npz, ``np.load(OUT, allow_pickle=False)``)
---------------------------------------------------------
Key ``__meta__`` holds UTF-8 JSON as a uint8 array (``read_dump`` below decodes it); the other keys
are the tensors it refers to::

    {
      "format": "ortckpt-oracle-dump/1",
      "versions": {"onnxruntime": ..., "numpy": ..., "onnx": ...},
      "file": str, "size": int, "sha256": str,
      "is_nominal": bool,              # get_parameter refuses nominal states; that is how it is seen
      "parameters": [                  # CheckpointState.parameter_names() order (ORT sorts them)
        {"name": str, "trainable": bool | null, "data_type": int | null, "dtype": str | null,
         "shape": [int] | null, "key": str | null}       # null fields: nominal state
      ],
      "properties": [                  # property_names() order; type is type(get_property(n))
        {"name": str, "type": "int" | "float" | "str", "value": ...}
      ],
      "resaved": {...} | null,         # see below; null with "resave_error" when ORT cannot resave
      "as_written": {...} | null,      # CKPT itself read with ORT's flatbuffers bindings, like
                                       # "resaved" but every "key" null: file order, flags, version
    }

The pybind API does not expose optimizer state (nor, for nominal states, flags and dtypes). To see
what ORT loaded of those, ``dump`` makes ORT re-serialize its in-memory state
(``save_checkpoint(state, tmp, include_optimizer_state=True)``) and reads that file with the
flatbuffers bindings ORT ships for its own schema (``onnxruntime.tools.ort_format_model.
ort_flatbuffers_py.fbs``). Anything the C++ loader dropped or misread shows up as missing or
different there. (Caveat: ORT re-saves a nominal state with every tensor as a float scalar of
uninitialised bytes, still flagged nominal; an empty state is saved without a module_state table.)
``resaved`` is::

    {"version": int, "is_nominal": bool, "has_external_data": bool,
     "trainable": [TENSOR], "frozen": [TENSOR],                       # file order
     "optimizer_groups": [{"name": str, "step": int, "initial_learning_rate": float,
                           "states": [{"param": str, "momentums": [TENSOR]}]}],
     "has_property_bag": bool,        # ORT's state save writes one only when there are properties
     "properties": {"ints": [[name, int]], "floats": [[name, float]], "strings": [[name, str]]}}
    TENSOR = {"name": str, "data_type": int, "dims": [int], "raw_len": int,
              "external_data_offset": int, "key": str | null}

Spec format (SPEC.npz for ``write``; ``write_spec`` below makes one)
------------------------------------------------------------------
Key ``__spec__`` holds UTF-8 JSON as a uint8 array::

    {"format": "ortckpt-oracle-spec/1", "nominal": bool,
     "tensors": [{"name": str, "trainable": bool, "key": str}],     # arrays under "key"
     "properties": [{"name": str, "type": "int" | "float" | "str", "value": ...}]}

ORT writes the tensors with ``save_checkpoint(trainable_protos, frozen_protos, path, nominal)``
(TensorProtos from ``onnx.numpy_helper``); properties need a CheckpointState, so when there are
any the file is loaded, ``add_property`` is called for each and it is saved again (refused for
nominal specs: see the caveat above). ORT 1.19.2 only handles float32/64, (u)int8/16/32/64 and
bool tensors in checkpoints; float properties are stored as float32.

Protos file format (TRAINABLE.pbs / FROZEN.pbs for ``save-protos``)
-------------------------------------------------------------------
A sequence of records, each an unsigned 64-bit little-endian byte count followed by that many
bytes of one serialized ``onnx.TensorProto``; an empty file is an empty list. ``write_protos`` /
``read_protos`` below write and read it (no numpy or onnx needed).

``write_spec``, ``read_dump``, ``read_spec``, ``write_protos`` and ``read_protos`` only need numpy,
so the tests (another venv) load this file as a module to share the formats.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from typing import Any

import numpy as np

DUMP_FORMAT = "ortckpt-oracle-dump/1"
SPEC_FORMAT = "ortckpt-oracle-spec/1"

# ONNX TensorProto.DataType -> numpy dtype, for the types ORT 1.19.2 accepts in checkpoints
# (plus float16 so that a dump could show one should a later ORT accept it).
NP_DTYPES = {
    1: np.dtype(np.float32),
    2: np.dtype(np.uint8),
    3: np.dtype(np.int8),
    4: np.dtype(np.uint16),
    5: np.dtype(np.int16),
    6: np.dtype(np.int32),
    7: np.dtype(np.int64),
    9: np.dtype(np.bool_),
    10: np.dtype(np.float16),
    11: np.dtype(np.float64),
    12: np.dtype(np.uint32),
    13: np.dtype(np.uint64),
}
DATA_TYPES = {dt: code for code, dt in NP_DTYPES.items()}


# --------------------------------------------------------------------------------------------
# Format helpers (numpy only)
# --------------------------------------------------------------------------------------------


def _json_bytes(obj: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(obj, ensure_ascii=True).encode("utf-8"), dtype=np.uint8)


def _json_load(arr: np.ndarray) -> Any:
    return json.loads(arr.tobytes().decode("utf-8"))


def write_spec(
    path: str | os.PathLike[str],
    trainable: dict[str, np.ndarray] | None = None,
    frozen: dict[str, np.ndarray] | None = None,
    properties: dict[str, int | float | str] | None = None,
    nominal: bool = False,
) -> None:
    """Write a SPEC.npz for ``write``. Property types come from the Python values (bool refused)."""
    tensors, arrays = [], {}
    for flag, group in ((True, trainable or {}), (False, frozen or {})):
        for name, arr in group.items():
            key = f"t{len(tensors)}"
            tensors.append({"name": name, "trainable": flag, "key": key})
            arrays[key] = np.array(arr, order="C", copy=True)
    props = []
    for name, value in (properties or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"property {name!r}: int, float or str expected, got {type(value).__name__}")
        # np.float32/np.int64 scalars are not int/float subclasses in every case; normalise.
        kind = "str" if isinstance(value, str) else "int" if isinstance(value, int) else "float"
        props.append({"name": name, "type": kind, "value": value})
    spec = {"format": SPEC_FORMAT, "nominal": bool(nominal), "tensors": tensors, "properties": props}
    with open(path, "wb") as f:
        np.savez(f, __spec__=_json_bytes(spec), **arrays)


def read_spec(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(path, allow_pickle=False) as z:
        spec = _json_load(z["__spec__"])
        if spec.get("format") != SPEC_FORMAT:
            raise ValueError(f"{path}: not an {SPEC_FORMAT} file")
        arrays = {t["key"]: z[t["key"]] for t in spec["tensors"]}
    return spec, arrays


def read_dump(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Return (meta, arrays) of a dump; tensors refer to arrays by their "key"."""
    with np.load(path, allow_pickle=False) as z:
        meta = _json_load(z["__meta__"])
        if meta.get("format") != DUMP_FORMAT:
            raise ValueError(f"{path}: not an {DUMP_FORMAT} file")
        arrays = {k: z[k] for k in z.files if k != "__meta__"}
    return meta, arrays


def write_protos(path: str | os.PathLike[str], protos: list[bytes]) -> None:
    """Write serialized TensorProtos as a protos file (u64 little-endian length + bytes each)."""
    with open(path, "wb") as f:
        for proto in protos:
            data = bytes(proto)
            f.write(len(data).to_bytes(8, "little"))
            f.write(data)


def read_protos(path: str | os.PathLike[str]) -> list[bytes]:
    """The serialized TensorProtos of a protos file."""
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        if pos + 8 > len(data):
            raise ValueError(f"{path}: truncated length at byte {pos}")
        n = int.from_bytes(data[pos : pos + 8], "little")
        pos += 8
        if pos + n > len(data):
            raise ValueError(f"{path}: record of {n} bytes at byte {pos} runs past the end")
        out.append(data[pos : pos + n])
        pos += n
    return out


# --------------------------------------------------------------------------------------------
# ORT side
# --------------------------------------------------------------------------------------------


def _ort():
    from onnxruntime.capi import _pybind_state as C

    return C


def _fbs():
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py import fbs

    return fbs


class OracleError(Exception):
    """ORT refused something; the message is ORT's."""


def _ort_call(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # pybind maps ORT failures to RuntimeError, some to other types
        raise OracleError(f"{type(e).__name__}: {e}") from e


def _str(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="surrogateescape")


def versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    return {"onnxruntime": onnxruntime.__version__, "numpy": np.__version__, "onnx": onnx.__version__}


def _read_fbs_checkpoint(data: bytes, arrays: dict[str, np.ndarray] | None, prefix: str) -> dict[str, Any]:
    """Read a checkpoint with ORT's generated flatbuffers bindings; tensor values go to ``arrays``
    under "<prefix>/<n>" unless it is None (then every "key" is null)."""
    fbs = _fbs()
    buf = bytearray(data)
    if not fbs.Checkpoint.Checkpoint.CheckpointBufferHasIdentifier(buf, 0):
        raise OracleError("resaved file lacks the ODTC identifier")
    root = fbs.Checkpoint.Checkpoint
    # ORT 1.17's generated bindings predate GetRootAs, external data and has_external_data
    ck = (root.GetRootAs if hasattr(root, "GetRootAs") else root.GetRootAsCheckpoint)(buf, 0)

    def tensor(t) -> dict[str, Any]:
        dims = [int(t.Dims(i)) for i in range(t.DimsLength())]
        entry = {
            "name": _str(t.Name()),
            "data_type": int(t.DataType()),
            "dims": dims,
            "raw_len": int(t.RawDataLength()),
            "external_data_offset": int(t.ExternalDataOffset()) if hasattr(t, "ExternalDataOffset") else -1,
            "key": None,
        }
        dt = NP_DTYPES.get(entry["data_type"])
        if arrays is not None and dt is not None and (t.RawDataLength() > 0 or (dims and 0 in dims)):
            raw = t.RawDataAsNumpy() if t.RawDataLength() > 0 else np.zeros(0, np.uint8)
            key = f"{prefix}/{len(arrays)}"
            arrays[key] = np.frombuffer(raw.tobytes(), dtype=dt).reshape(dims)
            entry["key"] = key
        return entry

    out: dict[str, Any] = {"version": int(ck.Version())}
    ms = ck.ModuleState()

    def flag(method: str) -> bool:  # ORT 1.17's bindings have neither flag
        return ms is not None and bool(getattr(ms, method, lambda: False)())

    out["is_nominal"] = flag("IsNominalState")
    out["has_external_data"] = flag("HasExternalData")
    out["trainable"] = (
        [tensor(ms.RequiresGradParams(i)) for i in range(ms.RequiresGradParamsLength())] if ms else []
    )
    out["frozen"] = [tensor(ms.FrozenParams(i)) for i in range(ms.FrozenParamsLength())] if ms else []
    groups = []
    for i in range(ck.OptimizerGroupsLength()):
        g = ck.OptimizerGroups(i)
        states = []
        for j in range(g.OptimizerStatesLength()):
            st = g.OptimizerStates(j)
            states.append(
                {
                    "param": _str(st.ParamName()),
                    "momentums": [tensor(st.Momentums(k)) for k in range(st.MomentumsLength())],
                }
            )
        groups.append(
            {
                "name": _str(g.GroupName()),
                "step": int(g.Step()),
                "initial_learning_rate": float(g.InitialLearningRate()),
                "states": states,
            }
        )
    out["optimizer_groups"] = groups
    props: dict[str, list[list[Any]]] = {"ints": [], "floats": [], "strings": []}
    pb = ck.PropertyBag()
    out["has_property_bag"] = pb is not None
    if pb is not None:
        for i in range(pb.IntsLength()):
            p = pb.Ints(i)
            props["ints"].append([_str(p.Name()), int(p.Value())])
        for i in range(pb.FloatsLength()):
            p = pb.Floats(i)
            props["floats"].append([_str(p.Name()), float(p.Value())])
        for i in range(pb.StringsLength()):
            p = pb.Strings(i)
            props["strings"].append([_str(p.Name()), _str(p.Value())])
    out["properties"] = props
    return out


def inspect_checkpoint(ckpt: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Load CKPT with ORT; return (meta, arrays) as a dump holds them. OracleError if ORT refuses."""
    C = _ort()
    ckpt = os.fspath(ckpt)
    with open(ckpt, "rb") as f:
        data = f.read()
    state = _ort_call(C.load_checkpoint, ckpt)
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {
        "format": DUMP_FORMAT,
        "versions": versions(),
        "file": ckpt,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    is_nominal = False
    params = []
    for name in state.parameter_names():
        try:
            p = state.get_parameter(name)
        except RuntimeError as e:
            if "nominal" not in str(e):
                raise OracleError(f"get_parameter({name!r}): {e}") from e
            is_nominal = True
            params.append(
                {
                    "name": name,
                    "trainable": None,
                    "data_type": None,
                    "dtype": None,
                    "shape": None,
                    "key": None,
                }
            )
            continue
        ov = p.data
        arr = np.array(ov.numpy(), copy=True)
        key = f"param/{len(arrays)}"
        arrays[key] = arr
        params.append(
            {
                "name": p.name,
                "trainable": bool(p.requires_grad),
                "data_type": DATA_TYPES.get(arr.dtype),
                "dtype": arr.dtype.name,
                "shape": [int(d) for d in ov.shape()],
                "key": key,
            }
        )
    meta["is_nominal"] = is_nominal
    meta["parameters"] = params
    props = []
    for name in state.property_names():
        v = state.get_property(name)
        props.append({"name": name, "type": type(v).__name__, "value": v})
    meta["properties"] = props

    fd, tmp = tempfile.mkstemp(suffix=".ckpt", prefix="ort_oracle_resave_")
    os.close(fd)
    try:
        C.save_checkpoint(state, tmp, True)
        with open(tmp, "rb") as f:
            meta["resaved"] = _read_fbs_checkpoint(f.read(), arrays, "resaved")
    except Exception as e:
        meta["resaved"] = None
        meta["resave_error"] = f"{type(e).__name__}: {e}"
    finally:
        os.unlink(tmp)
        # ORT writes large tensors to "<path>.data" beside the checkpoint
        if os.path.exists(tmp + ".data"):
            os.unlink(tmp + ".data")
    # The input file itself through ORT's schema bindings, without values: file order and flags.
    try:
        meta["as_written"] = _read_fbs_checkpoint(data, None, "")
    except Exception as e:
        meta["as_written"] = None
        meta["as_written_error"] = f"{type(e).__name__}: {e}"
    return meta, arrays


def dump(ckpt: str | os.PathLike[str], out: str | os.PathLike[str]) -> dict[str, Any]:
    """Load CKPT with ORT and write OUT.npz; return the metadata. OracleError if ORT refuses it."""
    meta, arrays = inspect_checkpoint(ckpt)
    with open(out, "wb") as f:
        np.savez(f, __meta__=_json_bytes(meta), **arrays)
    return meta


def write(spec_path: str, out: str) -> None:
    """Make ORT write OUT from SPEC.npz. OracleError if ORT refuses."""
    from onnx import numpy_helper

    C = _ort()
    spec, arrays = read_spec(spec_path)
    trainable, frozen = [], []
    for t in spec["tensors"]:
        proto = numpy_helper.from_array(np.array(arrays[t["key"]], order="C", copy=True), t["name"])
        (trainable if t["trainable"] else frozen).append(proto.SerializeToString())
    props = spec["properties"]
    if props and spec["nominal"]:
        # Adding properties needs load + save of a CheckpointState, and ORT materialises nominal
        # tensors as uninitialised scalars when it saves such a state: the output would be garbage.
        raise OracleError("write: properties cannot be added to a nominal checkpoint through ORT")
    out_dir = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(suffix=".ckpt", prefix=".ort_oracle_", dir=out_dir)
    os.close(fd)
    try:
        _ort_call(C.save_checkpoint, trainable, frozen, tmp, bool(spec["nominal"]))
        if props:
            state = _ort_call(C.load_checkpoint, tmp)
            for p in props:
                conv = {"int": int, "float": float, "str": str}[p["type"]]
                _ort_call(state.add_property, p["name"], conv(p["value"]))
            _ort_call(C.save_checkpoint, state, out, False)
        else:
            os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def resave(ckpt: str, out: str, optimizer: bool = True) -> None:
    C = _ort()
    state = _ort_call(C.load_checkpoint, os.fspath(ckpt))
    _ort_call(C.save_checkpoint, state, os.fspath(out), bool(optimizer))


def save_protos(trainable: str, frozen: str, out: str, nominal: bool = False) -> None:
    """ORT's ``save_checkpoint(trainable_protos, frozen_protos, OUT, nominal)``; the protos come
    from protos files. OracleError if ORT refuses."""
    C = _ort()
    _ort_call(C.save_checkpoint, read_protos(trainable), read_protos(frozen), os.fspath(out), bool(nominal))


def load_into_model(ckpt: str, model: str, out: str) -> None:
    """ORT's ``get_model_after_loading_checkpoint(CKPT, model bytes)``; OUT gets the returned
    serialized ModelProto. OracleError if ORT refuses."""
    C = _ort()
    with open(model, "rb") as f:
        model_bytes = f.read()
    result = _ort_call(C.get_model_after_loading_checkpoint, os.fspath(ckpt), model_bytes)
    with open(out, "wb") as f:
        f.write(result)


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run one batch job; never raises (a failure is reported in the result)."""
    op = job.get("op")
    try:
        if op == "dump":
            dump(job["ckpt"], job["out"])
        elif op == "write":
            write(job["spec"], job["out"])
        elif op == "resave":
            resave(job["ckpt"], job["out"], job.get("optimizer", True))
        elif op == "save_protos":
            save_protos(job["trainable"], job["frozen"], job["out"], job.get("nominal", False))
        elif op == "load_into_model":
            load_into_model(job["ckpt"], job["model"], job["out"])
        else:
            return {"ok": False, "error": f"unknown op {op!r}"}
    except (OracleError, OSError) as e:
        return {"ok": False, "error": str(e)}
    except Exception as e:  # a malformed job or spec: report it, keep the batch going
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    return {"ok": True}


def _quiet_ort() -> None:
    try:
        import onnxruntime

        onnxruntime.set_default_logger_severity(3)
    except Exception:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="ort_oracle.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("dump", help="load CKPT with ORT and dump what it sees to OUT.npz")
    p.add_argument("ckpt")
    p.add_argument("out")
    p.add_argument("--json", action="store_true", help="also print the metadata as JSON")
    p = sub.add_parser("write", help="make ORT write OUT.ckpt from SPEC.npz")
    p.add_argument("spec")
    p.add_argument("out")
    p = sub.add_parser("resave", help="load CKPT with ORT and save it to OUT.ckpt")
    p.add_argument("ckpt")
    p.add_argument("out")
    p.add_argument("--no-optimizer", action="store_true", help="include_optimizer_state=False")
    p = sub.add_parser("save-protos", help="save_checkpoint of the TensorProtos in two protos files")
    p.add_argument("trainable")
    p.add_argument("frozen")
    p.add_argument("out")
    p.add_argument("--nominal", action="store_true", help="nominal_checkpoint=True")
    p = sub.add_parser("load-into-model", help="get_model_after_loading_checkpoint(CKPT, MODEL) -> OUT")
    p.add_argument("ckpt")
    p.add_argument("model")
    p.add_argument("out")
    p = sub.add_parser("batch", help="run the jobs listed in JOBS.json")
    p.add_argument("jobs")
    sub.add_parser("info", help="print versions as JSON")
    args = ap.parse_args(argv)
    _quiet_ort()

    if args.cmd == "info":
        print(json.dumps(versions()))
        return 0
    if args.cmd == "batch":
        try:
            with open(args.jobs, encoding="utf-8") as f:
                jobs = json.load(f)
            if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
                raise ValueError("a JSON list of objects expected")
        except (OSError, ValueError) as e:
            print(f"ort_oracle: {args.jobs}: {e}", file=sys.stderr)
            return 2
        print(json.dumps([run_job(j) for j in jobs]))
        return 0
    try:
        if args.cmd == "dump":
            meta = dump(args.ckpt, args.out)
            if args.json:
                print(json.dumps(meta, indent=1, ensure_ascii=False))
        elif args.cmd == "write":
            write(args.spec, args.out)
        elif args.cmd == "resave":
            resave(args.ckpt, args.out, not args.no_optimizer)
        elif args.cmd == "save-protos":
            save_protos(args.trainable, args.frozen, args.out, args.nominal)
        elif args.cmd == "load-into-model":
            load_into_model(args.ckpt, args.model, args.out)
    except (OracleError, OSError, ValueError, KeyError) as e:
        print(f"ort_oracle: {args.cmd}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
