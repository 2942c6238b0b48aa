"""``ortckpt.Round``: uploads added one at a time, each answered at once, give what ``average``
gives over all of them, for every method, with hostile uploads among them; staleness as FedBuff
defines it; every option checked on entry; too few uploads for the method is an
``AggregationError`` with the report, never an ``IndexError`` or a silent result."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState
from tests.helpers.io_counts import bytes_read, float32_uploads
from tests.helpers.paths import DATA
from tests.helpers.round_reports import report_rows

SHAPES = {"fc.weight": (12, 9), "fc.bias": (9,)}


def fleet(folder: Path, n: int = 10) -> tuple[list[Any], str]:
    """Uploads as files, bytes and states around a global model, and hostile ones: NaN values,
    garbage, a missing file, the same file twice, a wrong shape."""
    rng = np.random.default_rng(5)
    base = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    global_path = folder / "global.ckpt"
    ortckpt.save(CheckpointState(base, properties={"n": 1}), global_path)
    sources: list[Any] = []
    for i in range(n):
        values = {k: (v + 0.1 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in base.items()}
        if i == 2:
            values = {k: v * 30 for k, v in values.items()}
        state = CheckpointState(values, properties={"n": i + 1})
        path = folder / f"dev{i}.ckpt"
        ortckpt.save(state, path)
        sources.append(str(path) if i % 3 else state.to_bytes() if i % 2 else state)
    nan = CheckpointState({k: np.full(s, np.nan, np.float32) for k, s in SHAPES.items()}, properties={"n": 1})
    wrong = CheckpointState(
        {k: np.zeros((2, *s), np.float32) for k, s in SHAPES.items()}, properties={"n": 1}
    )
    hostile = [nan.to_bytes(), b"garbage", str(folder / "missing.ckpt"), sources[1], wrong]
    return sources[:4] + hostile + sources[4:], str(global_path)


METHODS: list[dict[str, Any]] = [
    {"method": "fedavg", "weights": "n"},
    {"method": "median"},
    {"method": "trimmed_mean", "trim": 0.2},
    {"method": "krum", "byzantine": 1},
    {"method": "multi_krum", "byzantine": 1, "keep": 4},
    {"method": "bulyan", "byzantine": 1},
    {"method": "fedavg", "relative_to": "GLOBAL", "clip_norm": 1.0, "weights": "n"},
    {"method": "median", "relative_to": "GLOBAL", "clip_norm": 1.0, "noise_multiplier": 0.3, "seed": 4},
]


@pytest.mark.parametrize("options", METHODS, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_uploads_one_at_a_time_equal_average(tmp_path: Path, options: dict[str, Any]):
    sources, global_path = fleet(tmp_path)
    kw = {k: (global_path if v == "GLOBAL" else v) for k, v in options.items()}
    weights = kw.pop("weights", None)
    batch = ortckpt.average(sources, weights=weights, **kw)
    rnd = ortckpt.Round(**kw)
    answers = [rnd.add(s, weight=weights, client=r.client) for s, r in zip(sources, batch.sources)]
    assert [(a.client, a.accepted, a.kind, a.weight) for a in answers] == [
        (r.client, r.accepted, r.kind, r.weight) for r in batch.sources
    ]
    assert rnd.accepted == len(batch.accepted)
    one = rnd.result()
    assert [(r.kind, r.selected, r.clipped) for r in one.sources] == [
        (r.kind, r.selected, r.clipped) for r in batch.sources
    ]
    for name in SHAPES:
        np.testing.assert_array_equal(one.state.parameters[name].data, batch.state.parameters[name].data)
    assert sorted(r.kind or "" for r in one.rejected) == [
        "duplicate",
        "non-finite",
        "shape",
        "unreadable",
        "unreadable",
    ]
    with pytest.raises(ValueError, match="given its result"):
        rnd.add(sources[0])
    with pytest.raises(ValueError, match="given its result"):
        rnd.result()


@pytest.mark.parametrize("goods", [5, 70])
def test_a_first_file_that_fails_its_checks_where_it_is_counted_is_not_the_reference(
    tmp_path: Path, goods: int
):
    """Plain FedAvg reads a first local file's structure only and counts it with the files after
    it (``goods`` = 70: past one native call's 64 files). When it fails its checks there (NaN
    values; a tensor the others lack), the files checked against it go again: the next one is
    the reference, none is rejected for not matching the bad one, and the same file given twice
    is still a duplicate. The same verdicts and result as one ``add`` at a time and as bytes."""
    rng = np.random.default_rng(11)
    bad = CheckpointState(
        {**{k: np.full(s, np.nan, np.float32) for k, s in SHAPES.items()}, "extra": np.ones(3, np.float32)}
    )
    paths = [tmp_path / "bad.ckpt"]
    ortckpt.save(bad, paths[0])
    states = []
    for i in range(goods):
        states.append(
            CheckpointState({k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()})
        )
        paths.append(tmp_path / f"good{i}.ckpt")
        ortckpt.save(states[-1], paths[-1])
    sources = [str(p) for p in paths]
    sources.insert(3, sources[2])  # good1 twice
    batch = ortckpt.average(sources)
    kinds = [r.kind for r in batch.sources]
    assert kinds == ["non-finite", None, None, "duplicate"] + [None] * (goods - 2)
    assert batch.reference == sources[1]
    one = ortckpt.Round()
    assert [one.add(s).kind for s in sources] == kinds
    as_bytes = ortckpt.average([Path(s).read_bytes() for s in sources])
    assert [r.kind for r in as_bytes.sources] == kinds  # bytes: the same content is a duplicate
    result = one.result()
    assert "extra" not in batch.state.parameters
    for name in SHAPES:
        want = np.mean([s.parameters[name].data.astype(np.float64) for s in states], axis=0)
        np.testing.assert_allclose(
            batch.state.parameters[name].data, want.astype(np.float32), rtol=1e-6, atol=1e-7
        )
        np.testing.assert_array_equal(batch.state.parameters[name].data, result.state.parameters[name].data)


def test_fedavg_over_local_files_reads_each_byte_once(tmp_path: Path):
    """A reference given as a path, or found among the uploads, is indexed from its structure's
    blocks: a FedAvg round over N local files reads N files' bytes, not N + 1 (the first twice),
    and ``Round(reference=path)`` reads a few blocks of a 16 MiB file."""
    rng = np.random.default_rng(3)
    paths = []
    for i in range(4):
        state = CheckpointState(
            {f"w{j}": rng.standard_normal(1 << 20).astype(np.float32) for j in range(4)},
            frozen={"table": np.arange(100) + i},
        )
        paths.append(tmp_path / f"dev{i}.ckpt")
        ortckpt.save(state, paths[-1], external_data_threshold=1024 if i == 1 else None)
    size = sum(
        p.stat().st_size + (p.with_name(p.name + ".data").stat().st_size if i == 1 else 0)
        for i, p in enumerate(paths)
    )
    ortckpt.Round(reference=paths[3])  # the modules a round imports are read once, before counting
    before = bytes_read()
    ortckpt.Round(reference=paths[0])
    assert bytes_read() - before < 1 << 20
    for run in ("average", "round"):
        before = bytes_read()
        if run == "average":
            report = ortckpt.average(paths)
        else:
            rnd = ortckpt.Round()
            for p in paths:
                rnd.add(p)
            report = rnd.result()
        read = bytes_read() - before
        assert size <= read < size + (2 << 20), (run, read, size)
        assert report.state.parameters["table"].data.tolist() == list(range(100))


def test_staleness_discounts_each_upload_as_fedbuff_and_the_cut_off_rejects(tmp_path: Path):
    """FedBuff's discount: weight * (1 + s) ** -exponent (default 0.5, i.e. 1 / sqrt(1 + s))."""
    sources, _ = fleet(tmp_path, n=4)
    good = sources[:4]
    rnd = ortckpt.Round(max_staleness=20)
    reports = [rnd.add(s, weight=6.0, staleness=a) for s, a in zip(good, (0, 3, 8, 21))]
    assert [r.kind for r in reports] == [None, None, None, "stale"]
    assert [r.weight for r in reports[:3]] == [6.0, 6.0 / 2.0, 6.0 / 3.0]
    assert [r.staleness for r in reports] == [None, 3, 8, 21]
    result = rnd.result()
    assert math.isclose(result.total_weight, 6.0 + 3.0 + 2.0)
    steep = ortckpt.Round(staleness_exponent=1.0)
    assert steep.add(good[0], weight=2.0, staleness=3).weight == 2.0 / 4.0


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("trim", float("nan")),
        ("trim", 0.5),
        ("clip_norm", float("inf")),
        ("clip_norm", -1.0),
        ("clip_norm", float("nan")),
        ("byzantine", -1),
        ("keep", 0),
        ("chunk_bytes", 4),
        ("max_bytes", 0),
        ("staleness_exponent", float("nan")),
        ("staleness_exponent", -0.5),
        ("max_staleness", -1),
        ("seed", -3),
        ("method", "mean"),
    ],
)
def test_every_option_is_checked_when_the_round_starts(option: str, value: Any):
    with pytest.raises(ValueError, match=option if option != "method" else "method must be one of"):
        ortckpt.Round(**{option: value})
    with pytest.raises(ValueError):
        ortckpt.Round(clip_norm=1.0, noise_multiplier=float("nan"))


def local_fleet(folder: Path, goods: int, dtype: Any = np.float32) -> list[str]:
    """``goods`` local upload files and hostile local files among them: NaN in the second
    tensor, +inf in the first, the NaN file again, a wrong shape."""
    rng = np.random.default_rng(8)
    paths = []

    def write(name: str, values: dict[str, np.ndarray]) -> str:
        path = folder / name
        ortckpt.save(CheckpointState(values, properties={"n": len(paths) + 1}), path)
        return str(path)

    for i in range(goods):
        paths.append(
            write(f"dev{i}.ckpt", {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()})
        )
    nan = {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}
    nan["fc.bias"][4] = np.nan
    inf = {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}
    inf["fc.weight"][3, 2] = np.inf
    wrong = {k: np.zeros((2, *s), dtype) for k, s in SHAPES.items()}
    hostile = [write("nan.ckpt", nan), write("inf.ckpt", inf), write("wrong.ckpt", wrong)]
    return paths[:2] + hostile[:1] + paths[2:4] + hostile[1:] + paths[4:] + hostile[:1]


ROBUST = [o for o in METHODS if o["method"] != "fedavg" and "relative_to" not in o] + [
    {"method": "median", "clip_norm": 1.0, "noise_multiplier": 0.3, "seed": 4},
    {"method": "krum", "byzantine": 1, "clip_norm": 2.0},
]


@pytest.mark.parametrize("options", ROBUST, ids=lambda o: "-".join(str(v) for v in o.values()))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("goods", [8, 40])  # 40: past the sorting networks' 32 uploads
def test_robust_rounds_over_local_files_check_values_where_they_read_them(
    tmp_path: Path, options: dict[str, Any], dtype: Any, goods: int, monkeypatch: pytest.MonkeyPatch
):
    """``average`` over local files of a robust method checks each value when the result reads it
    (float32 and float16 models: each upload read once); uploads holding NaN or infinity are then
    left out with the kind and reason that ``Round.add`` gives them at once, so every report,
    weight, diagnostic and value is the same as one ``add`` at a time. (These tensors are small:
    the round defers for tensors of 64 KiB or more on average, unless told otherwise.)"""
    monkeypatch.setenv("ORTCKPT_DEFER_MIN_TENSOR_BYTES", "0")
    sources = local_fleet(tmp_path, goods=goods, dtype=dtype)
    batch = ortckpt.average(sources, weights="n", **options)
    rnd = ortckpt.Round(**options)
    for s in sources:
        rnd.add(s, weight="n")
    one = rnd.result()
    assert report_rows(batch) == report_rows(one)
    hostile = [None, None, "non-finite", None, None, "non-finite", "shape"]
    assert [r.kind for r in batch.sources] == hostile + [None] * (goods - 4) + ["duplicate"]
    assert "fc.bias" in (batch.sources[2].reason or "") and "fc.weight" in (batch.sources[5].reason or "")
    assert batch.total_weight == one.total_weight
    assert len(batch.accepted) == goods
    for name in SHAPES:
        np.testing.assert_array_equal(batch.state.parameters[name].data, one.state.parameters[name].data)


def test_a_round_too_small_once_bad_uploads_are_left_out_reports_them_as_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Bulyan with f = 1 needs 7 uploads: 8 local files of which 2 hold NaN or infinity leave 6.
    ``average`` (values checked where the result reads them) fails as ``Round.add`` does, and its
    failure's report shows the two as rejected, not as accepted."""
    monkeypatch.setenv("ORTCKPT_DEFER_MIN_TENSOR_BYTES", "0")
    sources = local_fleet(tmp_path, goods=6)[:-1]  # without the duplicate
    sources = [s for s in sources if not s.endswith("wrong.ckpt")]
    want = "4 \\* byzantine \\+ 3 = 7.*6 were accepted \\(1 short\\)"
    reports = []
    for run in ("average", "round"):
        with pytest.raises(ortckpt.AggregationError, match=want) as caught:
            if run == "average":
                ortckpt.average(sources, method="bulyan", byzantine=1)
            else:
                rnd = ortckpt.Round(method="bulyan", byzantine=1)
                for s in sources:
                    rnd.add(s)
                rnd.result()
        reports.append([(r.client, r.accepted, r.kind, r.reason) for r in caught.value.report.sources])
    assert reports[0] == reports[1]
    assert [kind for _, _, kind, _ in reports[0]] == [
        None,
        None,
        "non-finite",
        None,
        None,
        "non-finite",
        None,
        None,
    ]


def test_a_median_over_local_files_reads_each_byte_once(tmp_path: Path):
    """The robust methods' ``average`` over local float32 files reads each upload once (its values
    checked where the median reads them), not twice (checked first, read again), and the first,
    the reference, twice (checked when it comes, from its file: it decides the structure the
    others are checked against; never read whole into memory): N + 1 files' bytes, where the
    check-first round read 2N."""
    paths, size = float32_uploads(tmp_path, seed=4)
    ortckpt.average(paths[:3], method="median")  # the modules a round imports are read once, before counting
    one = paths[0].stat().st_size
    before = bytes_read()
    report = ortckpt.average(paths, method="median")
    read = bytes_read() - before
    assert size + one <= read < size + one + (1 << 20), (read, size)
    rnd = ortckpt.Round(method="median")
    for p in paths:
        rnd.add(p)
    for name, tensor in rnd.result().state.parameters.items():
        np.testing.assert_array_equal(report.state.parameters[name].data, tensor.data)


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), -1.0, 0.0])
def test_a_reply_s_bad_weight_is_its_rejection_not_an_exception(tmp_path: Path, weight: float):
    sources, _ = fleet(tmp_path, n=3)
    rnd = ortckpt.Round()
    assert rnd.add(sources[1], weight=2.0).accepted
    bad = rnd.add(sources[2], weight=weight)
    assert (bad.accepted, bad.kind) == (False, "weight")
    assert rnd.result().total_weight == 2.0


@pytest.mark.parametrize(
    ("options", "want"),
    [
        ({"method": "bulyan", "byzantine": 1}, "4 \\* byzantine \\+ 3 = 7"),
        ({"method": "multi_krum", "byzantine": 5}, "needs at least 6"),
        ({"method": "multi_krum", "keep": 9}, "keep = 9"),
    ],
)
def test_too_few_uploads_for_the_method_is_an_aggregation_error_with_the_report(
    tmp_path: Path, options: dict[str, Any], want: str
):
    sources, _ = fleet(tmp_path, n=4)
    rnd = ortckpt.Round(**options)
    for s in sources[:6]:
        rnd.add(s)
    with pytest.raises(ortckpt.AggregationError, match=want) as caught:
        rnd.result()
    assert len(caught.value.report.sources) == 6
    with pytest.raises(ortckpt.AggregationError, match=want):
        ortckpt.average(sources[:6], **options)


# --- ORT 1.15 folders: read by the core's folder reader, taken as they are (issue 34) ----------

ORT115 = DATA / "ort115"


@pytest.mark.parametrize("method", ["fedavg", "median"])
def test_folder_uploads_are_taken_from_the_folder_reader_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
):
    """ORT 1.15 folders given to a round (the reference among them, one given twice, an empty
    directory): the verdicts and aggregate of the same uploads saved as checkpoint files, bit for
    bit. The core's folder reader hands its index and values to the round as they are: no state
    is serialized into a checkpoint's bytes to be indexed again (``to_bytes`` refuses here; a
    folder upload used to go through it)."""
    names = ["adamw_trained", "adamw_params_only", "adamw_fresh_artifact", "adamw_trained"]
    folders = [ORT115 / n for n in names]
    files = []
    for n in names:
        if not (tmp_path / f"{n}.ckpt").exists():
            ortckpt.save(ortckpt.load(ORT115 / n), tmp_path / f"{n}.ckpt")
        files.append(tmp_path / f"{n}.ckpt")
    (tmp_path / "empty").mkdir()
    here = ortckpt.average([*files, tmp_path / "empty"], method=method, weights=[1, 2, 3, 4, 5])

    def refused(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("a folder upload was serialized")

    monkeypatch.setattr(CheckpointState, "to_bytes", refused)
    report = ortckpt.average([*folders, tmp_path / "empty"], method=method, weights=[1, 2, 3, 4, 5])
    assert [(r.accepted, r.kind, r.weight) for r in report.sources] == [
        (r.accepted, r.kind, r.weight) for r in here.sources
    ]
    assert [r.kind for r in report.sources] == [None, None, None, "duplicate", "unreadable"]
    assert "not an ORT 1.15 checkpoint folder" in (report.sources[4].reason or "")
    for name, p in here.state.parameters.items():
        assert report.state.parameters[name].data.tobytes() == p.data.tobytes(), name
    assert report.state.properties == here.state.properties
    # one add at a time: the same
    rnd = ortckpt.Round(method=method)
    for folder, w in zip(folders, [1, 2, 3, 4], strict=True):
        rnd.add(folder, weight=w)
    one_by_one = rnd.result().state
    for name, p in here.state.parameters.items():
        assert one_by_one.parameters[name].data.tobytes() == p.data.tobytes(), name
