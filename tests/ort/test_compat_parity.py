"""ortckpt.compat against ORT 1.19.2's ``onnxruntime.training.api``: the same test functions
(compat_parity_cases.py) run on both, and what a program can observe must agree."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.ort import import_ortckpt, run_module
from tests.ort import compat_parity_cases as cases


@pytest.fixture(scope="module")
def ort_results(ort_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("parity_ort")
    out = work / "results.json"
    run_module(ort_python, "tests.ort.compat_parity_runner", str(work), str(out), timeout=600)
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


class CompatEnv:
    def __init__(self, checkpoints: dict[str, str], scratch: Path) -> None:
        import ortckpt.compat

        self.api = ortckpt.compat
        self._checkpoints = checkpoints
        self._scratch = scratch

    def load(self, which: str, session: bool = False) -> Any:
        return self.api.CheckpointState.load_checkpoint(self._checkpoints[which])

    def path(self, name: str) -> str:
        self._scratch.mkdir(parents=True, exist_ok=True)
        return os.fspath(self._scratch / name)


@pytest.mark.parametrize("case", sorted(cases.CASES))
def test_compat_behaves_like_ort(case: str, ort_results: dict[str, Any], tmp_path: Path) -> None:
    import_ortckpt()
    expected = ort_results["results"][case]
    assert not (isinstance(expected, dict) and "crash" in expected), expected
    env = CompatEnv(ort_results["checkpoints"], tmp_path)
    got = json.loads(json.dumps(cases.CASES[case](env)))
    assert got == expected


def test_the_cases_can_fail(ort_results: dict[str, Any], tmp_path: Path) -> None:
    """The comparison sees a difference: a state whose parameters are scaled is not ORT's."""
    import numpy as np

    env = CompatEnv(ort_results["checkpoints"], tmp_path)
    original = env.load

    def scaled(which: str, session: bool = False) -> Any:
        state = original(which, session)
        if not state.ortckpt_state.is_nominal:
            for _, p in state.parameters:
                p.data[...] = p.data * np.float32(2)
        return state

    env.load = scaled  # type: ignore[method-assign]
    got = json.loads(json.dumps(cases.case_parameter_attributes(env)))
    assert got != ort_results["results"]["parameter_attributes"]
