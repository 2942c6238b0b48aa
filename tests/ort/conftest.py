"""Fixtures for the tests that talk to the real ONNX Runtime 1.19.2 (the oracle).

ORT lives in a side virtualenv (it needs numpy<2): ``$ORTCKPT_ORT_VENV`` or ``<repo>/.ort-venv``,
created on first use by ``scripts/setup_ort_env.sh``. When it cannot be created (no network), the
tests that need it are skipped, except on CI (``CI=true``) where that is a failure.
Helpers and the oracle driver live in tests/helpers/ort.py; shared checkpoint contents in ort_cases.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.ort import Oracle, ort_venv_python, venv_dir
from tests.ort.flower_deployment import Deployment


@pytest.fixture(scope="session")
def ort_python() -> str:
    """Path of the ORT venv's python, creating the venv if needed."""
    return ort_venv_python("1.19.2", venv_dir())


@pytest.fixture(scope="session")
def oracle(ort_python: str, tmp_path_factory: pytest.TempPathFactory) -> Oracle:
    return Oracle(ort_python, tmp_path_factory.mktemp("ort_oracle"))


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    """A loopback Flower deployment (tests/ort/flower_deployment.py), stopped with every process it
    started when the test ends, pass or fail."""
    d = Deployment(tmp_path)
    try:
        yield d
    finally:
        d.stop()
