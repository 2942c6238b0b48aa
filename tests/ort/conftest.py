"""Fixtures for the tests that talk to the real ONNX Runtime 1.19.2 (the oracle).

ORT lives in a side virtualenv (it needs numpy<2): ``$ORTCKPT_ORT_VENV`` or ``<repo>/.ort-venv``,
created on first use by ``scripts/setup_ort_env.sh``. When it cannot be created (no network), the
tests that need it are skipped, except on CI (``CI=true``) where that is a failure.
Helpers and the oracle driver live in ort_helpers.py; shared checkpoint contents in ort_cases.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# The test modules import ort_helpers / ort_cases from this folder, whatever pytest's import mode.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from ort_helpers import SETUP_SCRIPT, Oracle, on_ci, venv_dir


@pytest.fixture(scope="session")
def ort_python() -> str:
    """Path of the ORT venv's python, creating the venv if needed."""
    venv = venv_dir()
    try:
        proc = subprocess.run(
            ["bash", str(SETUP_SCRIPT), str(venv)],
            capture_output=True,
            text=True,
            timeout=900,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        proc = None
        err = f"{type(e).__name__}: {e}"
    else:
        err = proc.stderr.strip()[-2000:]
    if proc is None or proc.returncode != 0:
        msg = (
            f"ORT side environment unavailable ({SETUP_SCRIPT.name} {venv} failed"
            f"{'' if proc is None else f' with exit {proc.returncode}'}; no network?):\n{err}"
        )
        if on_ci():
            pytest.fail(msg)
        pytest.skip(msg)
    py = proc.stdout.strip().splitlines()[-1]
    assert Path(py).exists(), py
    return py


@pytest.fixture(scope="session")
def oracle(ort_python: str, tmp_path_factory: pytest.TempPathFactory) -> Oracle:
    return Oracle(ort_python, tmp_path_factory.mktemp("ort_oracle"))
