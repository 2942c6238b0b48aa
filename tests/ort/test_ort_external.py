"""External data both ways with ORT 1.19.2, with a small threshold so the files stay tiny.

ORT 1.19.2's Python API cannot choose a threshold, but its state path keeps a checkpoint external
when it was loaded from one (docs/format.md §7). So: ortckpt writes external-data checkpoints, ORT
loads them (its values must equal ours) and saves them again, which writes ORT's own external
data file, and ortckpt must read that back with the same contents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers.ort import assert_state_matches_dump, import_ortckpt, make_state, read_dump, same_bits
from tests.ort.ort_cases import CASES, adamw_optimizer

pytestmark = pytest.mark.ort

THRESHOLD = 4 * 1024


def _cases() -> dict[str, dict[str, Any]]:
    dtypes = CASES["dtypes"]()
    big = {
        "w.big": np.linspace(-1, 1, 3000, dtype=np.float32).reshape(30, 100),
        "w.small": np.arange(5, dtype=np.float32),  # under 64 bytes: stays inline
    }
    frozen = {"f.ids": np.arange(700, dtype=np.int64), "f.mask": np.arange(999) % 3 == 0}
    return {
        "params": {"trainable": big, "frozen": frozen, "properties": {"epoch": 2, "note": "ext ✓"}},
        "adamw": {"trainable": big, "frozen": frozen, "optimizer": adamw_optimizer(big)},
        # Every dtype ORT can hold, tiled so each tensor is over 64 bytes and goes external.
        "dtypes": {
            "trainable": {k: np.tile(v.ravel(), 16) for k, v in dtypes["trainable"].items()},
            "frozen": {k: np.tile(v.ravel(), 16) for k, v in dtypes["frozen"].items()},
        },
    }


@pytest.fixture(scope="module")
def files(oracle, tmp_path_factory) -> dict[str, dict[str, Path]]:
    ortckpt = import_ortckpt()
    d = tmp_path_factory.mktemp("external")
    out: dict[str, dict[str, Path]] = {}
    jobs = []
    for name, case in _cases().items():
        ours = d / f"{name}.ckpt"
        ortckpt.save(make_state(ortckpt, case), ours, external_data_threshold=THRESHOLD)
        dump_job, dump_path = oracle.dump_job(ours, stem=f"{name}_ours")
        resave_job, resaved = oracle.resave_job(ours, stem=f"{name}_resaved")
        redump_job, redump_path = oracle.dump_job(resaved, stem=f"{name}_resaved_dump")
        jobs += [dump_job, resave_job, redump_job]
        out[name] = {"ours": ours, "dump": dump_path, "resaved": resaved, "redump": redump_path}
    oracle.run(jobs)
    return out


@pytest.mark.parametrize("name", list(_cases()))
def test_ort_loads_ortckpt_external_data(files, name: str) -> None:
    ortckpt = import_ortckpt()
    f = files[name]
    assert Path(ortckpt.external_data_path(f["ours"])).is_file()
    state = ortckpt.load(f["ours"])
    assert state.has_external_data
    assert_state_matches_dump(state, read_dump(f["dump"]), external=True)


@pytest.mark.parametrize("name", list(_cases()))
def test_ortckpt_loads_ort_external_data(files, name: str) -> None:
    ortckpt = import_ortckpt()
    f = files[name]
    ort_written = f["resaved"]
    assert Path(ortckpt.external_data_path(ort_written)).is_file(), "ORT kept the checkpoint external"
    theirs = ortckpt.load(ort_written)
    assert theirs.has_external_data
    assert_state_matches_dump(theirs, read_dump(f["redump"]), external=True)
    ours = ortckpt.load(f["ours"])
    assert list(theirs.parameters) == list(ours.parameters)
    for pname, p in ours.parameters.items():
        q = theirs.parameters[pname]
        assert (q.dtype, q.shape, q.trainable) == (p.dtype, p.shape, p.trainable), pname
        assert same_bits(q.data, p.data), pname
    assert dict(theirs.properties) == dict(ours.properties)
    if ours.optimizer:
        assert theirs.optimizer is not None
        for gname, g in ours.optimizer.items():
            h = theirs.optimizer[gname]
            assert (h.step, h.initial_learning_rate) == (g.step, g.initial_learning_rate)
            for param, moms in g.states.items():
                for mname, m in moms.items():
                    assert same_bits(h.states[param][mname], m), (param, mname)
