"""``average`` over local files with a robust method checks each value where the result first
reads it (issue 30): attacks on that deferral. Every test compares ``average(paths, ...)`` with
``Round.add`` one upload at a time (values checked at once): the same reports, total weight,
values bit for bit, and the same failure; a file changed during the round fails it with
``CheckpointChangedError``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, OptimizerGroup
from tests.helpers.io_counts import bytes_read, float32_uploads
from tests.helpers.round_reports import before_result, report_rows

SHAPES = {"fc.weight": (6, 5), "fc.bias": (5,)}
MARK = np.float32(1234.5)  # a value written once, to find its bytes in a file


@pytest.fixture(autouse=True)
def defer_whatever_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """These models are small: the round defers for tensors of 64 KiB or more on average unless
    told otherwise (``ORTCKPT_DEFER_MIN_TENSOR_BYTES``)."""
    monkeypatch.setenv("ORTCKPT_DEFER_MIN_TENSOR_BYTES", "0")


def write(folder: Path, name: str, values: dict[str, np.ndarray], **props: Any) -> str:
    path = folder / name
    ortckpt.save(CheckpointState(values, properties=props), path)
    return str(path)


def values(rng: np.random.Generator, dtype: Any = np.float32, bad: Any = None, at: str = "fc.bias"):
    out = {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}
    if bad is not None:
        out[at].reshape(-1)[-1] = bad  # the very last lane of the tensor
    return out


def one_by_one(sources: Sequence[Any], weights: Any = None, **options: Any) -> ortckpt.AggregationReport:
    reference = options.pop("reference", None)
    rnd = ortckpt.Round(reference, **options)
    for i, s in enumerate(sources):
        w = weights if weights is None or isinstance(weights, str) else weights[i]
        rnd.add(s, weight=w)
    return rnd.result()


def assert_same(batch: ortckpt.AggregationReport, one: ortckpt.AggregationReport) -> None:
    assert report_rows(batch) == report_rows(one)
    assert batch.total_weight == one.total_weight
    for name, tensor in one.state.parameters.items():
        assert batch.state.parameters[name].data.tobytes() == tensor.data.tobytes(), name


def failures(sources: Sequence[Any], weights: Any = None, **options: Any) -> list[tuple[str, list]]:
    """The failure of ``average`` and of ``Round.add`` one at a time: message, report rows."""
    out = []
    for run in (
        lambda: ortckpt.average(sources, weights=weights, **options),
        lambda: one_by_one(sources, weights, **options),
    ):
        with pytest.raises(ortckpt.AggregationError) as caught:
            run()
        report = caught.value.report
        out.append((str(caught.value).splitlines()[0], report_rows(report), report.total_weight))
    return out


# -- problems ------------------------------------------------------------------------------------


@pytest.mark.parametrize("byzantine", [1, 2])
def test_too_few_for_bulyan_before_the_values_are_read_rejects_the_bad_uploads(
    tmp_path: Path, byzantine: int
):
    """Bulyan with f = 1 needs 7 uploads; 5 come, 2 holding NaN / infinity. ``Round.add`` rejects
    the 2 and fails with "3 were accepted (4 short)". ``average`` counts the 5 before it reads a
    value (``Round::finish`` checks the count first): it fails with "5 were accepted (2 short)" and
    its failure's report shows the NaN and infinite uploads as accepted."""
    rng = np.random.default_rng(1)
    sources = [
        write(tmp_path, "g0.ckpt", values(rng)),
        write(tmp_path, "nan.ckpt", values(rng, bad=np.nan)),
        write(tmp_path, "g1.ckpt", values(rng)),
        write(tmp_path, "inf.ckpt", values(rng, bad=np.inf, at="fc.weight")),
        write(tmp_path, "g2.ckpt", values(rng)),
    ]
    batch, one = failures(sources, method="bulyan", byzantine=byzantine)
    assert "3 were accepted" in one[0]
    assert [r[2] for r in one[1]] == [None, "non-finite", None, "non-finite", None]
    assert batch == one


@pytest.mark.parametrize(
    "weights,total",
    [([1.0, 2.0**64, 1.0, 1.0, 1.0], 4.0), ([0.1, 0.2, 0.3], 0.1 + 0.3)],
    ids=["heavy", "tenths"],
)
def test_total_weight_with_a_bad_upload_left_out_is_that_of_round_add(
    tmp_path: Path, weights: list[float], total: float
):
    """The deferred check adds every upload's weight when it comes and takes a bad one's back at
    the end: (1 + 2^64 + 1 + 1 + 1) - 2^64 is 0.0 in float64, not 4.0, and (0.1 + 0.2 + 0.3) - 0.2
    is 0.4000000000000001, not 0.1 + 0.3. ``Round.add`` never adds a rejected upload's weight."""
    rng = np.random.default_rng(2)
    sources = [write(tmp_path, f"g{i}.ckpt", values(rng)) for i in range(4)]
    sources.insert(1, write(tmp_path, "nan.ckpt", values(rng, bad=np.nan)))
    sources = sources[: len(weights)]
    for method in ("median", "multi_krum"):
        batch = ortckpt.average(sources, weights=weights, method=method)
        one = one_by_one(sources, weights, method=method)
        assert report_rows(batch) == report_rows(one)
        assert one.total_weight == total
        assert batch.total_weight == one.total_weight, method


def test_every_upload_bad_against_a_given_reference_fails_as_round_add(tmp_path: Path):
    """With ``reference`` given, every upload is deferred. All of them hold infinity: ``Round.add``
    rejects each at once and ``result()`` says "no upload could be averaged (all 4 rejected)";
    ``average`` accepts them, leaves them all out in ``finish`` and says "no aggregate: no upload
    was accepted" (the reports agree; the message does not)."""
    rng = np.random.default_rng(3)
    reference = write(tmp_path, "ref.ckpt", values(rng))
    sources = [write(tmp_path, f"bad{i}.ckpt", values(rng, bad=np.inf)) for i in range(4)]
    batch, one = failures(sources, method="median", reference=reference)
    assert one[0].startswith("no upload could be averaged (all 4 rejected)")
    assert batch == one


@pytest.mark.parametrize("method", ["median", "krum", "trimmed_mean"])
def test_a_file_poisoned_in_place_during_the_round_fails_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
):
    """A good upload rewritten in place (same size, a NaN written into it, its modification time
    moved) after the round opened it and before the result reads it. ``Round.add`` checked it
    finite: the round fails with ``CheckpointChangedError``. ``average`` (values unchecked until
    then) takes the NaN for the upload's own, rejects it as non-finite and returns an aggregate:
    the file's change (its stamp differs) is never noticed, since ``check_unchecked`` never
    confirms a bad member unchanged and ``robust::aggregate`` confirms only the members kept."""
    rng = np.random.default_rng(4)
    sources = [write(tmp_path, f"g{i}.ckpt", values(rng)) for i in range(5)]
    marked = values(rng)
    marked["fc.weight"][2, 3] = MARK
    victim = write(tmp_path, "victim.ckpt", marked)
    sources.insert(2, victim)
    original = Path(victim).read_bytes()
    assert original.count(MARK.tobytes()) == 1

    def poison() -> None:
        at = original.find(MARK.tobytes())
        with open(victim, "r+b") as f:
            f.seek(at)
            f.write(np.float32(np.nan).tobytes())
        st = os.stat(victim)
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))

    rnd = ortckpt.Round(method=method)
    for s in sources:
        rnd.add(s)
    poison()
    with pytest.raises(ortckpt.CheckpointChangedError):
        rnd.result()

    Path(victim).write_bytes(original)
    before_result(monkeypatch, poison)
    with pytest.raises(ortckpt.CheckpointChangedError):
        ortckpt.average(sources, method=method)


def test_a_hostile_median_reads_its_uploads_at_most_three_times(tmp_path: Path):
    """docs/federated.md: a round whose uploads hold a bad value reads them at most three times
    (the pass that meets the value, the check of every upload not yet checked, the result again),
    where checking each upload first reads them twice. The worst place: one NaN at the very last
    lane of the last tensor of the last of 5 float32 uploads (about 2.8 passes' bytes;
    ``Round.add``, which checks first and holds the first upload's bytes: about 1.8)."""
    paths, size = float32_uploads(tmp_path, seed=4)
    last = ortckpt.load(paths[-1])
    arrays = {k: np.array(v.data) for k, v in last.parameters.items()}
    arrays[sorted(arrays)[-1]][-1] = np.nan
    ortckpt.save(CheckpointState(arrays), paths[-1])
    ortckpt.average(paths[:3], method="median")  # the modules a round imports, read before counting
    before = bytes_read()
    report = ortckpt.average(paths, method="median")
    read = bytes_read() - before
    assert [r.kind for r in report.sources] == [None] * 4 + ["non-finite"]
    before = bytes_read()
    one_by_one(paths, method="median")
    checked_first = bytes_read() - before
    assert read <= 3 * size, (read / size, checked_first / size)
    assert checked_first <= 2 * size


# -- coverage: these hold ------------------------------------------------------------------------

ROBUST: list[dict[str, Any]] = [
    {"method": "median"},
    {"method": "trimmed_mean", "trim": 0.2},
    {"method": "krum", "byzantine": 2},
    {"method": "multi_krum", "byzantine": 2, "keep": 5},
    {"method": "bulyan", "byzantine": 1},
    {"method": "median", "clip_norm": 3.0, "noise_multiplier": 0.4, "seed": 9},
    {"method": "multi_krum", "byzantine": 1, "clip_norm": 2.0},
]


def hostile_fleet(folder: Path, goods: int, bads: int, dtypes: dict[str, Any], seed: int) -> list[Any]:
    """``goods`` good local files and ``bads`` bad ones (NaN / ±inf at the last lane of either
    tensor, some with a bad weight property too), bad uploads given as bytes, duplicates of bad
    files before and after their first read, and a good upload given as a state. Weights: ``n``,
    whole numbers (exact sums)."""
    rng = np.random.default_rng(seed)

    def draw(bad: Any = None, at: str = "fc.bias") -> dict[str, np.ndarray]:
        out = {k: (rng.standard_normal(s) * 4).astype(dtypes[k]) for k, s in SHAPES.items()}
        if bad is not None:
            out[at].reshape(-1)[-1] = bad
        return out

    goods_ = [write(folder, f"g{i}.ckpt", draw(), n=i + 1) for i in range(goods)]
    specials = [np.nan, np.inf, -np.inf]
    bads_ = [
        write(
            folder,
            f"b{i}.ckpt",
            draw(specials[i % 3], ("fc.bias", "fc.weight")[i % 2]),
            n=(-1 if i % 5 == 4 else i + 2),
        )
        for i in range(bads)
    ]
    sources: list[Any] = []
    for i in range(max(goods, bads)):
        if i < goods:
            sources.append(goods_[i])
        if i < bads:
            sources.append(bads_[i])
        if i == 1 and bads > 3:
            sources.append(bads_[3])  # a duplicate before its original is read
            sources.append(CheckpointState(draw(np.nan), properties={"n": 3}).to_bytes())
        if i == 2:
            sources.append(CheckpointState(draw(), properties={"n": 2}))
    sources.append(bads_[0])
    sources.append(str(Path(folder) / "missing.ckpt"))
    return sources


@pytest.mark.parametrize("options", ROBUST, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_many_hostile_uploads_among_few_good_ones_give_round_add_s_verdicts(
    tmp_path: Path, options: dict[str, Any]
):
    """30 bad uploads among 10 good ones (past the sorting networks' 32, and back under once the
    bad ones are left out), chunks of a few bytes: the same reports, weight and values."""
    dtypes = {"fc.weight": np.float32, "fc.bias": np.float32}
    sources = hostile_fleet(tmp_path, goods=10, bads=30, dtypes=dtypes, seed=5)
    opts = {**options, "chunk_bytes": 8}
    batch = ortckpt.average(sources, weights="n", **opts)
    assert_same(batch, one_by_one(sources, "n", **opts))
    kinds = [r.kind for r in batch.sources]
    assert kinds.count("non-finite") == 30 - 6 + 1 and kinds.count("weight") == 6
    assert kinds.count("duplicate") == 2 and len(batch.accepted) == 11


DTYPES = {
    "float16": {"fc.weight": np.float16, "fc.bias": np.float16},
    "bfloat16": {"fc.weight": ml_dtypes.bfloat16, "fc.bias": ml_dtypes.bfloat16},
    "float16+float32": {"fc.weight": np.float32, "fc.bias": np.float16},
    "bfloat16+float32": {"fc.weight": ml_dtypes.bfloat16, "fc.bias": np.float32},
    "float32+float64": {"fc.weight": np.float32, "fc.bias": np.float64},  # checked at once
}


@pytest.mark.parametrize("dtypes", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("goods,bads", [(8, 4), (36, 5)])
@pytest.mark.parametrize(
    "options",
    [{"method": "median"}, {"method": "bulyan", "byzantine": 1}, {"method": "trimmed_mean", "trim": 0.3}],
    ids=lambda o: o["method"],
)
def test_half_precision_and_mixed_models_give_round_add_s_verdicts(
    tmp_path: Path, dtypes: dict[str, Any], goods: int, bads: int, options: dict[str, Any]
):
    sources = hostile_fleet(tmp_path, goods=goods, bads=bads, dtypes=dtypes, seed=goods + bads)
    for chunk in (8, 64 << 20):
        batch = ortckpt.average(sources, weights="n", chunk_bytes=chunk, **options)
        assert_same(batch, one_by_one(sources, "n", chunk_bytes=chunk, **options))


def test_a_bad_weight_and_a_nan_in_one_upload_is_rejected_for_its_weight(tmp_path: Path):
    """The weight (from a property) is checked with the structure when the upload comes, the
    values later: an upload with both a bad weight and a NaN is a ``weight`` rejection, as
    ``Round.add`` gives it, whether it is the first upload (the reference candidate) or not."""
    rng = np.random.default_rng(6)
    both_bad = [
        write(tmp_path, f"both{i}.ckpt", values(rng, bad=np.nan), n=w)
        for i, w in enumerate([0.0, -3.0, 2.0**70])
    ]
    goods = [write(tmp_path, f"g{i}.ckpt", values(rng), n=i + 1) for i in range(4)]
    sources = [both_bad[0], *goods[:2], both_bad[1], goods[2], both_bad[2], goods[3]]
    for method in ("median", "krum"):
        batch = ortckpt.average(sources, weights="n", method=method)
        assert_same(batch, one_by_one(sources, "n", method=method))
        assert [r.kind for r in batch.sources] == [
            "weight",
            None,
            None,
            "weight",
            None,
            "weight",
            None,
        ]


def test_nan_in_momentums_and_external_data_are_found_where_they_are_read(tmp_path: Path):
    """With ``include_optimizer_state``: a NaN or infinity in a momentum only, and one in a
    tensor stored in the external data file, are rejected naming them, as ``Round.add`` does."""
    rng = np.random.default_rng(7)
    sources = []
    for i in range(8):
        params = values(rng)
        states = {
            "fc.weight": {
                "momentum0": rng.standard_normal(SHAPES["fc.weight"]).astype(np.float32),
                "momentum1": np.abs(rng.standard_normal(SHAPES["fc.weight"])).astype(np.float32),
            }
        }
        if i == 2:
            states["fc.weight"]["momentum1"][-1, -1] = np.inf
        if i == 5:
            params["fc.weight"][-1, -1] = np.nan
        path = tmp_path / f"u{i}.ckpt"
        group = OptimizerGroup(step=4, initial_learning_rate=0.1, states=states)
        state = CheckpointState(params, optimizer={"g": group}, properties={"n": i + 1})
        ortckpt.save(state, path, external_data_threshold=0 if i in (5, 6) else None)
        sources.append(str(path))
    assert Path(sources[5] + ".data").exists()
    for method in ("median", "multi_krum"):
        opts = {"method": method, "include_optimizer_state": True, "byzantine": 1}
        batch = ortckpt.average(sources, weights="n", **opts)
        one = one_by_one(sources, "n", **opts)
        assert_same(batch, one)
        assert "momentum1" in (batch.sources[2].reason or "")
        assert "fc.weight" in (batch.sources[5].reason or "") and batch.sources[5].kind == "non-finite"
        for key in ("momentum0", "momentum1"):
            a = batch.state.optimizer["g"].states["fc.weight"][key]
            b = one.state.optimizer["g"].states["fc.weight"][key]
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


@pytest.mark.parametrize("n", [5, 6, 32, 33, 40])
def test_float32_median_of_zeros_and_subnormals_is_numpy_s(tmp_path: Path, n: int):
    """The float32 sorting network (<= 32 uploads) and the chunked path (> 32) over signed zeros,
    subnormals and the smallest normals: numpy's median (zeros' signs aside), and
    ``average`` = ``Round.add`` bit for bit."""
    rng = np.random.default_rng(n)
    tiny = np.array(
        [-0.0, 0.0, 1e-45, -1e-45, 3e-42, -3e-42, 1.1754942e-38, 1.1754944e-38, -1.1754944e-38],
        np.float32,
    )
    arrays = [
        {k: rng.choice(tiny, size=s).astype(np.float32) for k, s in (("w", (17, 33)), ("b", (1031,)))}
        for _ in range(n)
    ]
    sources = [write(tmp_path, f"u{i}.ckpt", a) for i, a in enumerate(arrays)]
    batch = ortckpt.average(sources, method="median", chunk_bytes=8)
    assert_same(batch, one_by_one(sources, method="median", chunk_bytes=8))
    for name in ("w", "b"):
        want = np.median(np.stack([a[name] for a in arrays]), axis=0)
        np.testing.assert_array_equal(batch.state.parameters[name].data, want)


def test_a_good_file_cut_during_the_round_fails_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A good upload truncated after the round opened it: ``CheckpointChangedError``, as with
    ``Round.add``, whether or not a bad upload is dropped on the way."""
    rng = np.random.default_rng(8)
    sources = [write(tmp_path, f"g{i}.ckpt", values(rng)) for i in range(5)]
    sources.insert(1, write(tmp_path, "nan.ckpt", values(rng, bad=np.nan)))
    victim = sources[3]
    original = Path(victim).read_bytes()
    before_result(monkeypatch, lambda: os.truncate(victim, 64))
    for method in ("median", "bulyan"):
        Path(victim).write_bytes(original)
        with pytest.raises(ortckpt.CheckpointChangedError):
            ortckpt.average(sources, method=method)


def test_a_bad_file_mended_in_place_during_the_round_fails_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A file holding NaN when it came, its NaN replaced by a finite value before the result
    reads it: ``Round.add`` had rejected it (and succeeds without it); ``average`` (its values not
    yet read) never sees the NaN, but the file's stamp changed: ``CheckpointChangedError``, never
    an aggregate with values nobody checked as they came."""
    rng = np.random.default_rng(9)
    sources = [write(tmp_path, f"g{i}.ckpt", values(rng)) for i in range(5)]
    bad = values(rng)
    bad["fc.weight"][1, 1] = np.nan
    victim = write(tmp_path, "nan.ckpt", bad)
    sources.insert(2, victim)
    original = Path(victim).read_bytes()

    def mend() -> None:
        at = original.find(np.float32(np.nan).tobytes())
        with open(victim, "r+b") as f:
            f.seek(at)
            f.write(np.float32(0.5).tobytes())
        st = os.stat(victim)
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))

    before_result(monkeypatch, mend)
    with pytest.raises(ortckpt.CheckpointChangedError):
        ortckpt.average(sources, method="median")


@pytest.mark.parametrize("count", [70, 140])
def test_bad_uploads_across_native_batches_and_the_progress_bar(
    tmp_path: Path, count: int, capsys: pytest.CaptureFixture[str]
):
    """More files than one native call takes (64): bad ones in every batch, their places among
    the accepted uploads kept across batches; the progress bar on changes nothing."""
    rng = np.random.default_rng(count)
    sources: list[Any] = []
    for i in range(count):
        bad = [None, np.nan, None, np.inf, None, None, -np.inf][i % 7]
        sources.append(write(tmp_path, f"u{i}.ckpt", values(rng, bad=bad), n=i % 9 + 1))
        if i % 23 == 22:
            sources.append(CheckpointState(values(rng), properties={"n": 2}).to_bytes())
    for opts in ({"method": "median"}, {"method": "multi_krum", "byzantine": 5}):
        batch = ortckpt.average(sources, weights="n", progress=True, **opts)
        assert_same(batch, one_by_one(sources, "n", **opts))
    capsys.readouterr()


def test_weights_of_bad_uploads_never_count_when_they_sum_exactly(tmp_path: Path):
    """Whole-number weights (exact in float64): the total is the accepted uploads', for every
    method, with most uploads bad."""
    rng = np.random.default_rng(10)
    sources = [write(tmp_path, f"u{i}.ckpt", values(rng, bad=np.nan if i % 3 else None)) for i in range(21)]
    weights = [float(3 * i + 1) for i in range(21)]
    for opts in ROBUST:
        batch = ortckpt.average(sources, weights=weights, **opts)
        assert_same(batch, one_by_one(sources, weights, **opts))
        assert batch.total_weight == sum(weights[::3])


def test_bulyan_and_multi_krum_too_few_after_the_drops_fail_as_round_add(tmp_path: Path):
    """Enough uploads when they come, too few once the bad ones are left out: the same message
    and the same report (the bad ones rejected, their weights not counted)."""
    rng = np.random.default_rng(11)
    bad = {1: np.inf, 4: np.nan, 6: -np.inf}
    sources = [write(tmp_path, f"u{i}.ckpt", values(rng, bad=bad.get(i))) for i in range(8)]
    weights = [float(i + 1) for i in range(8)]
    cases: list[dict[str, Any]] = [
        {"method": "bulyan", "byzantine": 1},
        {"method": "multi_krum", "byzantine": 1, "keep": 6},
    ]
    for opts in cases:
        batch, one = failures(sources, weights, **opts)
        assert "5 were accepted" in one[0]
        assert batch == one


def test_complex64_tensors_are_checked_lane_by_lane_where_they_are_read(tmp_path: Path):
    """complex64 is stored as two float32 lanes (sorted by the float32 network): an infinite or
    NaN imaginary part at the last element is found where the result reads it, as ``Round.add``
    finds it."""
    rng = np.random.default_rng(12)
    sources = []
    for i in range(9):
        c = (rng.standard_normal(37) + 1j * rng.standard_normal(37)).astype(np.complex64)
        if i in (2, 6):
            c[-1] = complex(1.0, np.inf if i == 2 else np.nan)
        w = rng.standard_normal(5).astype(np.float32)
        sources.append(write(tmp_path, f"u{i}.ckpt", {"c": c, "w": w}))
    cases: list[dict[str, Any]] = [
        {"method": "median"},
        {"method": "trimmed_mean", "trim": 0.2},
        {"method": "bulyan", "byzantine": 1},
    ]
    for opts in cases:
        batch = ortckpt.average(sources, **opts)
        assert_same(batch, one_by_one(sources, **opts))
        assert [r.kind for r in batch.sources].count("non-finite") == 2
