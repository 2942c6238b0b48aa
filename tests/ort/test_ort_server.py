"""The server side against the real ONNX Runtime 1.19.2: ORT loads what ``average`` writes (with and
without the averaged optimizer state) and what ``to_nominal`` / ``strip-values`` write, and sees
exactly the values ortckpt computed.

The device uploads are derived from an ORT-written checkpoint (tests/data): the trainable values are
perturbed per device, everything else is kept. One oracle batch (one subprocess) for the module.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers.ort import assert_state_matches_dump, import_ortckpt, read_dump
from tests.helpers.paths import DATA

pytestmark = pytest.mark.ort

ORT_WRITTEN = DATA / "mlp_adamw_with_optimizer.ckpt"


def fleet(ortckpt, folder: Path, n: int = 6) -> list[Path]:
    """n device checkpoints: ORT's file with perturbed trainable values and momentums."""
    paths = []
    for i in range(n):
        state = ortckpt.load(ORT_WRITTEN)
        rng = np.random.default_rng(i)
        for p in state.trainable_parameters.values():
            p.data = p.data + rng.standard_normal(p.shape).astype(p.dtype)
        for moms in state.optimizer["group0"].states.values():
            for m in list(moms):
                moms[m] = moms[m] + np.float32(i)
        state.properties["samples"] = 10 * (i + 1)
        paths.append(folder / f"device{i}.ckpt")
        ortckpt.save(state, paths[-1])
    return paths


def test_ort_loads_averaged_and_nominal_checkpoints(oracle, tmp_path: Path):
    ortckpt = import_ortckpt()
    from ortckpt.cli import main

    uploads = fleet(ortckpt, tmp_path)
    plain = tmp_path / "global.ckpt"
    with_optimizer = tmp_path / "global_opt.ckpt"
    report = ortckpt.average([*uploads, b"garbage"], plain, weights="samples", reference=ORT_WRITTEN)
    assert len(report.accepted) == len(uploads) and report.rejected[0].kind == "unreadable"
    ortckpt.average(uploads, with_optimizer, weights="samples", include_optimizer_state=True)
    nominal = tmp_path / "nominal.ckpt"
    ortckpt.save(ortckpt.to_nominal(ortckpt.load(plain)), nominal)
    cli_nominal = tmp_path / "cli_nominal.ckpt"
    assert main(["strip-values", str(with_optimizer), str(cli_nominal)]) == 0

    files = [plain, with_optimizer, nominal, cli_nominal]
    jobs, outs = zip(*(oracle.dump_job(f, stem=f.stem) for f in files))
    oracle.run(list(jobs))
    dumps = [read_dump(o) for o in outs]

    for path, dump in zip(files, dumps):
        state = ortckpt.load(path)
        assert_state_matches_dump(state, dump)  # names, flags, dtypes, values bit for bit, optimizer
    # what ORT sees is the average: frozen values and properties from the reference, the rest averaged
    ort_plain = dumps[0]
    reference = ortckpt.load(ORT_WRITTEN)
    by_name = {p["name"]: p for p in ort_plain.parameters}
    assert np.array_equal(ort_plain.array(by_name["fc2.bias"]["key"]), reference.parameters["fc2.bias"].data)
    devices = [ortckpt.load(p) for p in uploads]
    weights = np.array([10 * (i + 1) for i in range(len(uploads))], np.float64)
    want = np.average(
        np.stack([d.parameters["fc1.weight"].data.astype(np.float64) for d in devices]),
        axis=0,
        weights=weights,
    ).astype(np.float32)
    got = ort_plain.array(by_name["fc1.weight"]["key"])
    assert np.all(np.abs(got.astype(np.float64) - want) <= np.spacing(np.abs(want)))
    assert ort_plain.properties == dict(reference.properties)
    assert ort_plain.meta["resaved"]["optimizer_groups"] == []
    groups = dumps[1].meta["resaved"]["optimizer_groups"]
    assert [g["name"] for g in groups] == ["group0"] and groups[0]["step"] == 3
    for dump in dumps[2:]:
        assert dump.meta["is_nominal"]
        assert [p["name"] for p in dump.parameters] == sorted(reference.parameters)
