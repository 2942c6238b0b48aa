"""Run by the current onnxruntime's python (tests/ort/test_ort_adapters.py, through
``tests.helpers.ort.run_module``): everything the adapter tests ask of the real ORT, in one process.

    python -m tests.ort.adapter_runner WORKDIR

Reads ``WORKDIR/ours.onnx_adapter`` (written by ortckpt) with ``AdapterFormat.read_adapter`` into
``read.npz`` (+ ``read.json``: versions and dtypes); runs ``WORKDIR/model.onnx`` on the ``x`` of
``feeds.npz`` with ``model_adapter.onnx_adapter`` active, with its values fed directly, and with
neither, into ``outputs.npz``;
writes the arrays of ``theirs_in.npz`` with ``AdapterFormat`` into ``theirs.onnx_adapter``; reads
every file of ``WORKDIR/mutants`` into ``mutants.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort


def read(work: Path) -> None:
    adapter = ort.AdapterFormat.read_adapter(str(work / "ours.onnx_adapter"))
    params = adapter.get_parameters()
    arrays = {name: value.numpy() for name, value in params.items()}
    np.savez(work / "read.npz", **arrays)
    meta = {
        "format_version": adapter.get_format_version(),
        "adapter_version": adapter.get_adapter_version(),
        "model_version": adapter.get_model_version(),
        "dtypes": {name: str(a.dtype) for name, a in arrays.items()},
        "shapes": {name: list(a.shape) for name, a in arrays.items()},
    }
    (work / "read.json").write_text(json.dumps(meta))


def run(work: Path) -> None:
    session = ort.InferenceSession(str(work / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = dict(np.load(work / "feeds.npz"))
    options = ort.RunOptions()
    adapter = ort.LoraAdapter()
    adapter.Load(str(work / "model_adapter.onnx_adapter"))
    options.add_active_adapter(adapter)
    with_adapter = session.run(None, {"x": feeds["x"]}, options)
    direct = session.run(None, feeds)
    without = session.run(None, {"x": feeds["x"]})
    np.savez(work / "outputs.npz", with_adapter=with_adapter[0], direct=direct[0], without=without[0])


def write(work: Path) -> None:
    arrays = dict(np.load(work / "theirs_in.npz"))
    adapter = ort.AdapterFormat()
    adapter.set_adapter_version(7)
    adapter.set_model_version(11)
    adapter.set_parameters({name: ort.OrtValue.ortvalue_from_numpy(a) for name, a in arrays.items()})
    adapter.export_adapter(str(work / "theirs.onnx_adapter"))


def _hex(value: ort.OrtValue) -> str | None:
    """The values' bytes in hex; None for types numpy cannot show (the float8 types)."""
    try:
        return value.numpy().tobytes().hex()
    except RuntimeError:
        return None


def mutants(work: Path) -> None:
    """Each adapter of ``WORKDIR/mutants`` (changed bytes ortckpt accepted), as ORT reads it:
    ``mutants.json`` maps file name to {parameter: [ORT type, shape, values hex]}, or to the error."""
    seen: dict[str, object] = {}
    for path in sorted((work / "mutants").iterdir()):
        try:
            params = ort.AdapterFormat.read_adapter(str(path)).get_parameters()
        except Exception as e:  # ORT refused the file: the test reports it
            seen[path.name] = f"{type(e).__name__}: {e}"
            continue
        seen[path.name] = {name: [v.data_type(), list(v.shape()), _hex(v)] for name, v in params.items()}
    (work / "mutants.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    workdir = Path(sys.argv[1])
    read(workdir)
    run(workdir)
    write(workdir)
    mutants(workdir)
    (workdir / "versions.json").write_text(json.dumps({"onnxruntime": ort.__version__}))
