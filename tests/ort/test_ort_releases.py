"""ortckpt against ORT 1.17.3, the last release of format version 1, in its own side venv
(``scripts/setup_ort_env.sh --release 1.17.3``): both directions.

* ortckpt reads what ORT 1.17.3 wrote after real training steps (values, shapes, dtypes, trainable
  flags, properties, optimizer state, as ORT itself sees them);
* ORT 1.17.3 reads what ortckpt wrote with ``format_version=1`` and sees the same state, and
  refuses what ortckpt writes by default (version 2), which is why version 1 exists.

(ORT 1.15's folder format is proven by tests/test_compat_legacy.py against committed output of
ORT 1.15.1.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers.ort import (
    Oracle,
    assert_state_matches_dump,
    import_ortckpt,
    ort_venv_python,
    read_dump,
    run_module,
)


@pytest.fixture(scope="module")
def ort117(tmp_path_factory: pytest.TempPathFactory) -> Oracle:
    return Oracle(ort_venv_python("1.17.3"), tmp_path_factory.mktemp("ort117"))


@pytest.fixture(scope="module")
def trained(ort117: Oracle) -> Path:
    out = ort117.workdir / "trained_v1.ckpt"
    run_module(ort117.python, "tests.ort.release_train", str(out), timeout=300)
    return out


def test_reads_what_ort_117_wrote(ort117: Oracle, trained: Path) -> None:
    ortckpt = import_ortckpt()
    state = ortckpt.load(trained)
    assert state.version == 1
    assert state.optimizer is not None and state.optimizer["group0"].step == 3
    assert dict(state.properties) == {"epoch": 3, "best": 0.25, "note": "héllo"}
    assert_state_matches_dump(state, ort117.dump(trained))


def test_ort_117_reads_what_ortckpt_wrote(ort117: Oracle, trained: Path, tmp_path: Path) -> None:
    ortckpt = import_ortckpt()
    state = ortckpt.load(trained)
    # edit it, so the file ORT reads is really ortckpt's
    w = state.parameters["fc1.weight"].data
    state.parameters["fc1.weight"].data = w * np.float32(0.5)
    state.properties["edited"] = "yes"
    v1 = tmp_path / "ortckpt_v1.ckpt"
    v2 = tmp_path / "ortckpt_v2.ckpt"
    ortckpt.save(state, v1, format_version=1)
    ortckpt.save(state, v2)
    dump_job, dump_out = ort117.dump_job(v1)
    v2_job, _ = ort117.dump_job(v2)
    resave_job, resaved = ort117.resave_job(v1)
    results = ort117.batch([dump_job, v2_job, resave_job])
    assert results[0]["ok"], results[0]
    assert not results[1]["ok"] and "version 2 is not supported" in results[1]["error"], results[1]
    assert results[2]["ok"], results[2]
    reloaded = ortckpt.load(v1)
    assert reloaded.version == 1
    assert_state_matches_dump(reloaded, read_dump(dump_out))
    # and what ORT 1.17 saves back from our file is the same state again
    again = ortckpt.load(resaved)
    assert again.version == 1
    assert_state_matches_dump(again, read_dump(dump_out))


def test_cli_converts_for_ort_117(ort117: Oracle, trained: Path, tmp_path: Path) -> None:
    from ortckpt.cli import main

    v2 = tmp_path / "v2.ckpt"
    v1 = tmp_path / "v1.ckpt"
    assert main(["convert", str(trained), str(v2), "--include-optimizer-state"]) == 0
    assert main(["convert", str(v2), str(v1), "--format-version", "1", "--include-optimizer-state"]) == 0
    ort117.run([ort117.dump_job(v1)[0]])
