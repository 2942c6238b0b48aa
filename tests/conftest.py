"""Shared fixtures for the ortckpt Python tests (the code behind them lives in ``tests.helpers``).

* ``corpus_dir``: ``tests/data/corpus`` (ORT-written checkpoints + JSON manifests, in git).
* ``corpus_case``: parametrized over every ``*.ckpt`` in the corpus (see ``pytest_generate_tests``).
* ``sample_state``: a state built in memory with mixed dtypes, optimizer state and properties.
* ``dtype_arrays``: one array per supported dtype plus 0-d/empty/odd shapes.
* ``assert_same_state`` / ``raw``: bit-exact comparison helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ortckpt import CheckpointState
from tests.helpers import compare, samples
from tests.helpers.paths import CORPUS_DIR, corpus_files

StateComparer = Callable[..., None]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "corpus_case" in metafunc.fixturenames:
        files = corpus_files()
        metafunc.parametrize("corpus_case", files, ids=[f.stem for f in files])


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    return CORPUS_DIR


@pytest.fixture(scope="session")
def assert_same_state() -> StateComparer:
    """``assert_same_state(a, b, *, optimizer=True)``: names, flags, dtypes, shapes, bytes, optimizer
    groups and property values (with their Python types) all equal."""
    return compare.assert_same_state


@pytest.fixture
def sample_state() -> CheckpointState:
    return samples.build_sample_state()


@pytest.fixture
def dtype_arrays() -> dict[str, np.ndarray[Any, Any]]:
    """Fresh ``every_dtype_arrays()``."""
    return samples.every_dtype_arrays()


@pytest.fixture(scope="session")
def raw() -> Callable[[np.ndarray[Any, Any]], bytes | list[str]]:
    """``raw(arr)``: the bytes of an array (its strings for object arrays), for bit-exact checks."""
    return compare.raw_values
