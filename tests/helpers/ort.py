"""Helpers for the tests that talk to the real ONNX Runtime (the oracle).

ORT lives in side virtualenvs (it needs numpy<2), made on first use by ``scripts/setup_ort_env.sh``:
1.19.2 in ``$ORTCKPT_ORT_VENV`` or ``<repo>/.ort-venv``, 1.17.3 in ``$ORTCKPT_ORT117_VENV`` or
``<repo>/.ort-venv-1.17``. When one cannot be made (no network), the tests that need it are
skipped, except on CI (``CI=true``) where that is a failure (``ort_venv_python``).

The oracle is ``scripts/ort_oracle.py`` run by the venv's python; tests batch their work into one
subprocess per module (``Oracle.batch``). Its numpy-only helpers (``write_spec``, ``read_dump``)
are imported from the script itself (``scripts/`` is an import root of the suite, see
tests/__init__.py) so both sides share one definition of the exchange formats. Modules of this
package that run under an ORT venv (tests/ort/release_train.py, compat_parity_runner.py) are
started by ``run_module``.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import ort_oracle as oracle_formats
import pytest

from tests.helpers.paths import REPO

SCRIPTS = REPO / "scripts"
ORACLE_SCRIPT = SCRIPTS / "ort_oracle.py"
SETUP_SCRIPT = SCRIPTS / "setup_ort_env.sh"


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def import_ortckpt():
    """The package under test; a missing build skips locally and fails on CI."""
    try:
        import ortckpt
    except ImportError as e:
        if on_ci():
            pytest.fail(f"ortckpt is not importable on CI: {e}")
        pytest.skip(f"ortckpt is not importable (not built yet?): {e}")
    return ortckpt


# ---------------------------------------------------------------------------------------------
# The ORT side environment and the oracle
# ---------------------------------------------------------------------------------------------


def venv_dir() -> Path:
    """Where the ORT 1.19.2 side venv is (``scripts/setup_ort_env.sh``'s default DIR)."""
    return Path(os.environ.get("ORTCKPT_ORT_VENV") or (REPO / ".ort-venv"))


def ort_venv_python(release: str = "1.19.2", venv: Path | None = None) -> str:
    """The python of the side venv of ORT ``release`` (made by scripts/setup_ort_env.sh if needed;
    ``venv`` None: the script's default for the release). Skips when it cannot be made, except on
    CI, where that fails."""
    cmd = ["bash", str(SETUP_SCRIPT), "--release", release]
    if venv is not None:
        cmd.append(str(venv))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        proc = None
        err = f"{type(e).__name__}: {e}"
    else:
        err = proc.stderr.strip()[-2000:]
    if proc is None or proc.returncode != 0:
        msg = (
            f"ORT {release} side environment unavailable ({' '.join(cmd[1:])} failed"
            f"{'' if proc is None else f' with exit {proc.returncode}'}; no network?):\n{err}"
        )
        if on_ci():
            pytest.fail(msg)
        pytest.skip(msg)
    py = proc.stdout.strip().splitlines()[-1]
    assert Path(py).exists(), py
    return py


def run_module(python: str, module: str, *args: str, timeout: float) -> None:
    """Runs ``python -m module args...`` from the repository with the suite's two import roots (the
    repository and scripts/) on its path: how a module of this package runs under an ORT venv."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(SCRIPTS)]))
    subprocess.run(
        [python, "-m", module, *args],
        cwd=REPO,
        env=env,
        check=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@dataclass
class Dump:
    """What ORT saw when loading a file (see scripts/ort_oracle.py for the fields)."""

    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]

    def array(self, key: str) -> np.ndarray:
        return self.arrays[key]

    @property
    def parameters(self) -> list[dict[str, Any]]:
        return self.meta["parameters"]

    @property
    def properties(self) -> dict[str, Any]:
        return {p["name"]: p["value"] for p in self.meta["properties"]}

    @property
    def property_types(self) -> dict[str, str]:
        return {p["name"]: p["type"] for p in self.meta["properties"]}

    @property
    def resaved(self) -> dict[str, Any]:
        assert self.meta["resaved"] is not None, self.meta.get("resave_error")
        return self.meta["resaved"]

    @property
    def as_written(self) -> dict[str, Any]:
        assert self.meta["as_written"] is not None, self.meta.get("as_written_error")
        return self.meta["as_written"]


class OracleFailure(AssertionError):
    pass


class Oracle:
    """Runs scripts/ort_oracle.py jobs with the ORT venv's python, many per subprocess."""

    def __init__(self, python: str, workdir: Path):
        self.python = python
        self.workdir = workdir
        self._n = 0

    def _path(self, stem: str, suffix: str) -> Path:
        self._n += 1
        return self.workdir / f"{self._n:04d}_{stem}{suffix}"

    # Job builders: each returns (job, output path). Run them with batch().
    def dump_job(self, ckpt: Path | str, stem: str = "dump") -> tuple[dict[str, Any], Path]:
        out = self._path(stem, ".npz")
        return {"op": "dump", "ckpt": str(ckpt), "out": str(out)}, out

    def write_job(self, stem: str = "ort", **spec: Any) -> tuple[dict[str, Any], Path]:
        """spec: trainable=, frozen=, properties=, nominal= as for ort_oracle.write_spec."""
        spec_path = self._path(stem, ".spec.npz")
        oracle_formats.write_spec(spec_path, **spec)
        out = self._path(stem, ".ckpt")
        return {"op": "write", "spec": str(spec_path), "out": str(out)}, out

    def resave_job(
        self, ckpt: Path | str, optimizer: bool = True, stem: str = "resaved"
    ) -> tuple[dict[str, Any], Path]:
        out = self._path(stem, ".ckpt")
        return {"op": "resave", "ckpt": str(ckpt), "out": str(out), "optimizer": optimizer}, out

    def batch(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run the jobs in one subprocess; return one {"ok": bool, "error": str?} per job."""
        if not jobs:
            return []
        jobs_path = self._path("jobs", ".json")
        jobs_path.write_text(json.dumps(jobs), encoding="utf-8")
        proc = subprocess.run(
            [self.python, str(ORACLE_SCRIPT), "batch", str(jobs_path)],
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            raise OracleFailure(f"ort_oracle batch failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        results = json.loads(proc.stdout)
        assert len(results) == len(jobs)
        return results

    def run(self, jobs: list[dict[str, Any]]) -> None:
        """batch() where every job must succeed."""
        results = self.batch(jobs)
        bad = [f"{j} -> {r['error']}" for j, r in zip(jobs, results) if not r["ok"]]
        if bad:
            raise OracleFailure("ORT refused:\n" + "\n".join(bad))

    # One-off conveniences (one subprocess each).
    def dump(self, ckpt: Path | str) -> Dump:
        job, out = self.dump_job(ckpt)
        self.run([job])
        return read_dump(out)

    def write(self, **spec: Any) -> Path:
        job, out = self.write_job(**spec)
        self.run([job])
        return out

    def resave(self, ckpt: Path | str, optimizer: bool = True) -> Path:
        job, out = self.resave_job(ckpt, optimizer)
        self.run([job])
        return out


def read_dump(path: Path | str) -> Dump:
    meta, arrays = oracle_formats.read_dump(path)
    return Dump(meta, arrays)


def make_state(ortckpt, case: dict[str, Any]):
    """ortckpt's CheckpointState of a case of tests/ort/ort_cases.py (the kwargs ORT writes from)."""
    optimizer = None
    if case.get("optimizer"):
        optimizer = {
            g: ortckpt.OptimizerGroup(
                step=v["step"], initial_learning_rate=v["initial_learning_rate"], states=v["states"]
            )
            for g, v in case["optimizer"].items()
        }
    return ortckpt.CheckpointState(
        case.get("trainable"),
        frozen=case.get("frozen"),
        properties=case.get("properties"),
        optimizer=optimizer,
    )


# ---------------------------------------------------------------------------------------------
# Comparing an ortckpt CheckpointState with what ORT saw
# ---------------------------------------------------------------------------------------------


def same_bits(a: Any, b: np.ndarray) -> bool:
    a = np.asarray(a)
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    )


def describe(a: Any) -> str:
    a = np.asarray(a)
    return f"{a.dtype}{list(a.shape)} {np.array2string(a.ravel()[:8], threshold=8)}"


def assert_state_matches_dump(
    state: Any, dump: Dump, *, optimizer: bool = True, external: bool = False, signed_zeros: bool = True
) -> None:
    """ortckpt's view of a file == ORT's view of (the same or an equivalent) file.

    Parameters (names, order, trainable flags, dtypes, shapes, bit-exact values), properties (values
    and Python types), version/nominal flags, and the optimizer state ORT loaded (as re-saved by
    ORT). With optimizer=False the optimizer is not compared.
    """
    meta = dump.meta
    written = dump.as_written
    assert state.version == written["version"]
    assert bool(state.is_nominal) == meta["is_nominal"]
    assert state.has_external_data == external

    names = list(state.parameters)
    assert names == [p["name"] for p in dump.parameters], "parameter names / order differ"
    if meta["is_nominal"]:
        # pybind refuses get_parameter on nominal states; flags and types come from the file.
        flags = {t["name"]: True for t in written["trainable"]} | {
            t["name"]: False for t in written["frozen"]
        }
        types = {t["name"]: t["data_type"] for t in written["trainable"] + written["frozen"]}
        for name in names:
            p = state.parameters[name]
            assert p.trainable == flags[name], name
            assert np.dtype(p.dtype) == oracle_formats.NP_DTYPES[types[name]], name
    else:
        for ref in dump.parameters:
            p = state.parameters[ref["name"]]
            assert p.name == ref["name"]
            assert p.trainable == ref["trainable"], ref["name"]
            assert np.dtype(p.dtype) == np.dtype(ref["dtype"]), ref["name"]
            assert tuple(p.shape) == tuple(ref["shape"]), ref["name"]
            expected = dump.array(ref["key"])
            assert p.nbytes == expected.nbytes, ref["name"]
            assert same_bits(p.data, expected), f"{ref['name']}: {describe(p.data)} != {describe(expected)}"

    props = dict(state.properties)
    assert props.keys() == dump.properties.keys()
    for name, value in dump.properties.items():
        got = props[name]
        assert type(got).__name__ == dump.property_types[name], (name, type(got))
        if isinstance(value, float):
            if not signed_zeros:  # ORT's writer drops -0.0 (it equals the default 0.0)
                got, value = got + 0.0, value + 0.0
            assert repr(got) == repr(value), (name, got, value)  # bit-exact incl. NaN and -0.0
        else:
            assert got == value, name

    if not optimizer:
        return
    groups = dump.resaved["optimizer_groups"]
    if not groups:
        assert not state.optimizer, "ortckpt sees optimizer state that ORT did not load"
        return
    assert state.optimizer is not None, "ORT loaded optimizer state that ortckpt does not see"
    assert sorted(state.optimizer) == sorted(g["name"] for g in groups)
    for g in groups:
        og = state.optimizer[g["name"]]
        assert og.step == g["step"], g["name"]
        assert og.initial_learning_rate == g["initial_learning_rate"], g["name"]
        assert sorted(og.states) == sorted(s["param"] for s in g["states"])
        for s in g["states"]:
            moms = og.states[s["param"]]
            assert sorted(moms) == sorted(m["name"] for m in s["momentums"]), s["param"]
            for m in s["momentums"]:
                expected = (
                    dump.array(m["key"])
                    if m["key"]
                    else np.zeros(m["dims"], oracle_formats.NP_DTYPES[m["data_type"]])
                )
                got = moms[m["name"]]
                assert same_bits(got, expected), (
                    f"{s['param']}/{m['name']}: {describe(got)} != {describe(expected)}"
                )


def assert_dumps_equivalent(a: Dump, b: Dump, *, signed_zeros: bool = True) -> None:
    """Two files that ORT sees identically (values, flags, properties, optimizer state).
    signed_zeros=False when one of them was written by ORT, which writes -0.0 floats as 0.0."""
    assert a.meta["is_nominal"] == b.meta["is_nominal"]
    assert [dict(p, key=None) for p in a.parameters] == [dict(p, key=None) for p in b.parameters]
    for pa, pb in zip(a.parameters, b.parameters):
        if pa["key"] is not None:
            assert same_bits(a.array(pa["key"]), b.array(pb["key"])), pa["name"]
    assert canon(a.meta["properties"], signed_zeros) == canon(b.meta["properties"], signed_zeros)
    ra, rb = a.resaved, b.resaved
    assert canon(ra["optimizer_groups"]) == canon(rb["optimizer_groups"])
    for ga, gb in zip(ra["optimizer_groups"], rb["optimizer_groups"]):
        for sa, sb in zip(ga["states"], gb["states"]):
            for ma, mb in zip(sa["momentums"], sb["momentums"]):
                if ma["key"] is not None:
                    assert same_bits(a.array(ma["key"]), b.array(mb["key"])), (sa["param"], ma["name"])


def canon(obj: Any, signed_zeros: bool = True) -> Any:
    """Drop array "key"s and make floats comparable bit for bit (NaN == NaN, -0.0 != 0.0 unless
    signed_zeros is False)."""
    if isinstance(obj, dict):
        return {k: canon(v, signed_zeros) for k, v in obj.items() if k != "key"}
    if isinstance(obj, (list, tuple)):
        return [canon(v, signed_zeros) for v in obj]
    if isinstance(obj, float):
        return ("float", repr(obj if signed_zeros else obj + 0.0))
    return obj


def structure(view: dict[str, Any]) -> dict[str, Any]:
    """A flatbuffers view without value keys and without has_property_bag (whether an empty
    property bag is written or left out means nothing; ORT's two writers differ there)."""
    out = canon(view, signed_zeros=False)  # ortckpt keeps -0.0 floats, ORT writes them as 0.0
    out.pop("has_property_bag", None)
    return out
