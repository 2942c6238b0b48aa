"""Results the core rounds to float32 itself (issue 30): a plain median's or trimmed mean's float32
and complex64 tensors rounded as they are computed, FedAvg's rounded over its sums' own memory,
both handed to numpy without a copy (``RoundedValues``). The promise is that nothing but memory
changed: every test compares a round with the same round through the float64 path the core still
has (``finish()`` without ``float32``, the values rounded by ``_reference._rounded`` as before),
bit for bit — values, every report field, the saved bytes — and attacks the memory the state keeps.
"""

from __future__ import annotations

import ctypes
import gc
import os
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, OptimizerGroup, _native
from ortckpt.federated import _round as round_module
from tests.helpers.round_reports import REPORT_FIELDS, report_rows

F32_MAX = float(np.finfo(np.float32).max)
BIG = 3 * (1 << 20) + 5  # past the core's 1 Mi lanes rounded at a time, not a multiple of them


class _Float64Finish:
    """A native round whose ``finish`` ignores ``float32``: the values come as float64 and
    Python rounds them, as every round did before the core rounded them itself."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def finish(self, **_: Any) -> Any:
        return self._native.finish()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._native, name)


@contextmanager
def float64_path() -> Iterator[None]:
    """Rounds finish through the float64 path while inside."""
    result = round_module.Round.result

    def through_float64(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._native is not None:
            self._native = _Float64Finish(self._native)
        return result(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(round_module.Round, "result", through_float64)
        yield


def tensors(state: CheckpointState) -> dict[str, np.ndarray]:
    """Every parameter and momentum of ``state`` by name."""
    out = {name: p.data for name, p in state.parameters.items()}
    for group_name, group in (state.optimizer or {}).items():
        for param, moms in group.states.items():
            for m, array in moms.items():
                out[f"{group_name}/{param}/{m}"] = array
    return out


def outcome(run: Callable[[], ortckpt.AggregationReport], folder: Path) -> dict[str, Any]:
    """What a round gives, to compare bit for bit: each tensor's dtype, shape and bytes, every
    report field, the total weight, the saved checkpoint's bytes; or the failure's message and
    report."""
    try:
        report = run()
    except ortckpt.AggregationError as exc:
        return {"error": str(exc), "rows": report_rows(exc.report), "total": exc.report.total_weight}
    out = folder / "saved.ckpt"
    ortckpt.save(report.state, out, include_optimizer_state=True)
    saved = [out.read_bytes(), Path(f"{out}.data").read_bytes() if os.path.exists(f"{out}.data") else b""]
    return {
        "tensors": {k: (a.dtype, a.shape, a.tobytes()) for k, a in tensors(report.state).items()},
        "rows": report_rows(report),
        "staleness": [r.staleness for r in report.sources],
        "total": report.total_weight,
        "saved": saved,
    }


def assert_as_the_float64_path(run: Callable[[], ortckpt.AggregationReport], folder: Path) -> dict[str, Any]:
    got = outcome(run, folder)
    with float64_path():
        want = outcome(run, folder)
    assert got.get("error") == want.get("error")
    assert got["rows"] == want["rows"]
    assert got["total"] == want["total"]
    if "tensors" in want:
        assert got["tensors"].keys() == want["tensors"].keys()
        for name, (dtype, shape, data) in want["tensors"].items():
            assert got["tensors"][name][:2] == (dtype, shape), name
            assert got["tensors"][name][2] == data, name
        assert got["saved"] == want["saved"]
        assert got["staleness"] == want["staleness"]
    return got


# -- fleets --------------------------------------------------------------------------------------


def model(rng: np.random.Generator, kind: str, i: int) -> dict[str, np.ndarray]:
    if kind == "float32":
        return {
            "b": rng.standard_normal(5).astype(np.float32),
            "w": rng.standard_normal((7, 5)).astype(np.float32),
        }
    if kind == "special":  # +-0, subnormals, float32's largest values: the median of them is one
        values = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-40, F32_MAX, -F32_MAX, F32_MAX, 1.0, 3.0], np.float32)
        values[i % 10] = rng.standard_normal()
        return {
            "m": np.array([F32_MAX, -F32_MAX, 0.0, -0.0], np.float32),
            "s": values if i % 3 else -values,
            "z": np.array([-0.0, 0.0, -0.0], np.float32)
            if i % 2
            else np.array([-0.0, -0.0, 0.0], np.float32),
        }
    if kind == "mixed":
        return {
            "a": rng.standard_normal(40).astype(np.float32),
            "bf": rng.standard_normal(9).astype(ml_dtypes.bfloat16),
            "c": (rng.standard_normal(6) + 1j * rng.standard_normal(6)).astype(np.complex64),
            "d": rng.standard_normal(13),
            "h": rng.standard_normal(11).astype(np.float16),
        }
    if kind == "complex64":
        return {"c": (rng.standard_normal(17) + 1j * rng.standard_normal(17)).astype(np.complex64)}
    if kind == "big":
        return {
            "big": (rng.standard_normal(BIG) * 1e3).astype(np.float32),
            "small": rng.standard_normal(3).astype(np.float32),
        }
    raise AssertionError(kind)


def fleet(
    folder: Path,
    kind: str,
    count: int,
    *,
    optimizer: bool = False,
    bad: dict[int, float] | None = None,
    empty: bool = False,
) -> list[str]:
    """``count`` upload files of a ``kind`` model (weights in property ``samples``); ``bad`` puts a
    value at the last lane of the first tensor of those uploads; ``empty`` adds empty tensors
    before and after the others."""
    rng = np.random.default_rng(count * 1000 + len(kind))
    paths = []
    for i in range(count):
        values = model(rng, kind, i)
        if i in (bad or {}):
            next(iter(values.values())).reshape(-1)[-1] = (bad or {})[i]
        if empty:
            values |= {"a0": np.zeros((0, 3), np.float32), "cc": np.zeros(0, np.complex64)}
            values |= {"zz": np.zeros((2, 0), np.float32)}
        groups = None
        if optimizer:
            states = {
                name: {
                    "momentum0": rng.standard_normal(v.shape).astype(v.dtype),
                    "momentum1": np.abs(rng.standard_normal(v.shape)).astype(v.dtype),
                }
                for name, v in values.items()
                if v.dtype in (np.float32, np.float16)
            }
            groups = {"g": OptimizerGroup(step=3, initial_learning_rate=0.1, states=states)}
        state = CheckpointState(values, properties={"samples": 1 + (i * 7) % 5}, optimizer=groups)
        path = folder / f"u{i:03d}.ckpt"
        ortckpt.save(state, path, external_data_threshold=1 << 20)
        paths.append(str(path))
    return paths


ROUNDED = ["median", "trimmed_mean", "fedavg"]


# -- empty tensors -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ROUNDED)
def test_an_empty_tensor_leaves_every_other_tensor_its_own_values(method: str):
    """An empty tensor has no lanes, so the core's median has no segment for it; the flags saying
    which slots came rounded were kept per segment and read per slot, so every tensor after an
    empty one took another's values: ``c`` (float16) got ``d``'s float32 bits read as float16
    (never checked as finite) and ``d`` got ``c``'s first value, silently; other layouts raised
    numpy's ``cannot reshape``."""
    rng = np.random.default_rng(3)
    uploads = [
        CheckpointState(
            {
                "a": rng.standard_normal(4).astype(np.float32),
                "b_empty": np.zeros(0, np.float32),
                "c": rng.standard_normal(2).astype(np.float16),
                "d": np.array([rng.standard_normal()], np.float32),
                "z_empty": np.zeros(0, np.float32),
            }
        )
        for _ in range(3)
    ]
    report = ortckpt.average([u.to_bytes() for u in uploads], method=method)
    for name in ("a", "c", "d"):
        stacked = np.stack([u.parameters[name].data.astype(np.float64) for u in uploads])
        want = np.median(stacked, axis=0) if method == "median" else np.mean(stacked, axis=0)
        want = want.astype(uploads[0].parameters[name].data.dtype)
        got = report.state.parameters[name].data
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), name
    for name in ("b_empty", "z_empty"):
        assert report.state.parameters[name].data.shape == (0,)


@pytest.mark.parametrize("method", ROUNDED)
@pytest.mark.parametrize("count", [2, 5, 34])
def test_empty_tensors_among_parameters_and_momentums(tmp_path: Path, method: str, count: int):
    """Empty float32 and complex64 tensors first, between and last, momentums included (they come
    after every parameter: an empty parameter shifted all of them), up to and past 32 uploads."""
    paths = fleet(tmp_path, "mixed", count, optimizer=True, empty=True)
    got = assert_as_the_float64_path(
        lambda: ortckpt.average(paths, method=method, include_optimizer_state=True), tmp_path
    )
    assert got["tensors"]["zz"][1] == (2, 0) and got["tensors"]["cc"][1] == (0,)


# -- the same values, reports and files as the float64 path --------------------------------------


CASES = [
    ("float32", 1, {}),
    ("float32", 2, {}),
    ("float32", 5, {"optimizer": True}),
    ("float32", 6, {"optimizer": True}),
    ("float32", 37, {}),  # past 32 uploads: the counting path
    ("special", 4, {}),
    ("special", 5, {}),
    ("special", 35, {}),
    ("mixed", 5, {}),
    ("mixed", 6, {}),
    ("mixed", 34, {}),
    ("complex64", 4, {}),
    ("complex64", 33, {}),
    ("float32", 7, {"bad": {2: float("nan"), 5: float("inf")}}),
    ("float32", 36, {"bad": {1: float("nan"), 30: float("-inf"), 31: float("nan")}}),
    ("mixed", 6, {"bad": {0: float("nan"), 3: float("inf")}}),
]


@pytest.mark.parametrize("defer", [False, True], ids=["checked", "deferred"])
@pytest.mark.parametrize(
    ("kind", "count", "how"), CASES, ids=[f"{k}-{n}-{i}" for i, (k, n, _) in enumerate(CASES)]
)
def test_results_equal_the_float64_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, count: int, how: dict[str, Any], defer: bool
):
    """Each plain method whose float32 tensors the core now rounds, on float32, float16,
    bfloat16, float64 and complex64 tensors, odd and even counts, past 32 uploads, ±0,
    subnormals and float32's largest values, uploads holding NaN or infinity (checked when they
    come, or deferred: the round is then run again without them), with momentums."""
    if defer:  # small tensors are deferred only when told
        monkeypatch.setenv("ORTCKPT_DEFER_MIN_TENSOR_BYTES", "0")
    paths = fleet(tmp_path, kind, count, **how)
    include = bool(how.get("optimizer"))
    for method in ROUNDED:
        assert_as_the_float64_path(
            partial(ortckpt.average, paths, method=method, include_optimizer_state=include), tmp_path
        )
    assert_as_the_float64_path(lambda: ortckpt.average(paths, weights="samples"), tmp_path)


@pytest.mark.parametrize("method", ROUNDED)
def test_weights_staleness_and_bytes_uploads(tmp_path: Path, method: str):
    paths = fleet(tmp_path, "mixed", 7, optimizer=True)

    def stale() -> ortckpt.AggregationReport:
        rnd = ortckpt.Round(method=method, include_optimizer_state=True)
        for i, path in enumerate(paths):
            rnd.add(path, weight="samples", staleness=i % 3)
        return rnd.result()

    assert_as_the_float64_path(stale, tmp_path)
    uploads = [Path(p).read_bytes() for p in paths]
    assert_as_the_float64_path(lambda: ortckpt.average(uploads, method=method, trim=0.3), tmp_path)


@pytest.mark.parametrize("method", ROUNDED)
def test_a_tensor_past_the_rounding_block_has_the_same_values(tmp_path: Path, method: str):
    """3 Mi + 5 lanes: the median rounds 1 Mi lanes at a time through a float64 scratch."""
    paths = fleet(tmp_path, "big", 4)
    got = outcome(lambda: ortckpt.average(paths, method=method), tmp_path)
    with float64_path():
        want = outcome(lambda: ortckpt.average(paths, method=method), tmp_path)
    assert got["tensors"] == want["tensors"] and got["saved"] == want["saved"]
    accepted = [r[:5] for r in want["rows"]]  # client, accepted, kind, reason, weight
    assert [r[:5] for r in got["rows"]] == accepted


@pytest.mark.parametrize("count", [3, 34])
def test_a_tensor_past_the_rounding_block_has_its_values_and_its_diagnostics(tmp_path: Path, count: int):
    """A median over a 3 Mi + 5 lane tensor (rounded 1 Mi lanes at a time): values, saved bytes,
    verdicts and weights bit for bit as the float64 path; the norms and distances, float64 sums
    whose grouping follows the threads' and the blocks' cuts, to float64's rounding (e.g. a norm
    of 1773203.772628521 where the float64 path gives 1773203.7726285208)."""
    paths = fleet(tmp_path, "big", count)
    got = outcome(lambda: ortckpt.average(paths, method="median"), tmp_path)
    with float64_path():
        want = outcome(lambda: ortckpt.average(paths, method="median"), tmp_path)
    assert got["tensors"] == want["tensors"] and got["saved"] == want["saved"]
    assert got["total"] == want["total"]
    diagnostics = [REPORT_FIELDS.index("norm"), REPORT_FIELDS.index("distance")]
    for row, wanted in zip(got["rows"], want["rows"], strict=True):
        for k, (a, b) in enumerate(zip(row, wanted, strict=True)):
            if k in diagnostics:
                assert a == pytest.approx(b, rel=1e-12, abs=0.0), (k, a, b)
            else:
                assert a == b, (k, a, b)


def global_model(folder: Path, kind: str) -> str:
    path = folder / "global.ckpt"
    ortckpt.save(CheckpointState(model(np.random.default_rng(99), kind, 0)), path)
    return str(path)


@pytest.mark.parametrize("method", ROUNDED)
def test_rounds_that_keep_float64_values_are_unchanged(tmp_path: Path, method: str):
    """``relative_to``, clipping that scales and that does not, noise with a seed, server
    optimizers: the values stay float64 until Python rounds them, as before."""
    paths = fleet(tmp_path, "float32", 6)
    base = global_model(tmp_path, "float32")
    options: list[dict[str, Any]] = [
        {"relative_to": base},
        {"clip_norm": 1e9},
        {"clip_norm": 0.5},
        {"relative_to": base, "clip_norm": 1.0, "noise_multiplier": 0.3, "seed": 7},
        {"relative_to": base, "server_optimizer": ortckpt.FedAdam()},
        {"relative_to": base, "server_optimizer": ortckpt.FedAvgM()},
        {"reference": base},
    ]
    for extra in options:
        got = assert_as_the_float64_path(partial(ortckpt.average, paths, method=method, **extra), tmp_path)
        assert [got["tensors"][name][0] for name in ("b", "w")] == [np.float32, np.float32]


@pytest.mark.parametrize(("method", "extra"), [("krum", {}), ("multi_krum", {"keep": 3}), ("bulyan", {})])
def test_krum_s_family_is_unchanged(tmp_path: Path, method: str, extra: dict[str, Any]):
    for kind in ("float32", "mixed"):
        (tmp_path / kind).mkdir()
        paths = fleet(tmp_path / kind, kind, 7, bad={2: float("nan")})
        assert_as_the_float64_path(
            partial(ortckpt.average, paths, method=method, byzantine=1, **extra), tmp_path
        )


def test_the_dask_engine_is_unchanged(tmp_path: Path):
    pytest.importorskip("distributed")
    from tests.helpers.dask_cluster import loopback_client

    paths = fleet(tmp_path, "mixed", 6, optimizer=True, empty=True)
    with loopback_client(2, 1) as client:
        for method in ROUNDED:
            assert_as_the_float64_path(
                partial(ortckpt.average, paths, method=method, include_optimizer_state=True, engine=client),
                tmp_path,
            )


# -- the memory the state keeps ------------------------------------------------------------------


def root_of(array: np.ndarray) -> Any:
    base: Any = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base


@pytest.mark.parametrize("method", ROUNDED)
def test_the_kept_values_cannot_be_written_and_outlive_the_report(tmp_path: Path, method: str):
    rng = np.random.default_rng(5)
    uploads = [
        CheckpointState(
            {
                "a": rng.standard_normal(3000).astype(np.float32),
                "c": (rng.standard_normal((2, 3)) + 1j).astype(np.complex64),
            }
        ).to_bytes()
        for _ in range(5)
    ]
    report = ortckpt.average(uploads, method=method)
    with float64_path():
        want = ortckpt.average(uploads, method=method)
    a, c = report.state.parameters["a"].data, report.state.parameters["c"].data
    # kept without a copy, in memory nothing writes after the round
    assert _native.is_unchanging(a) and _native.is_unchanging(c)
    root = root_of(a)
    assert type(root).__name__ == "RoundedValues"
    for array in (a, c, np.asarray(a), a[10:20], c.reshape(-1)[1:]):
        assert not array.flags.writeable
        with pytest.raises(ValueError):
            array[...] = 0
        with pytest.raises(ValueError):
            array.flags.writeable = True
    with pytest.raises(TypeError):
        (ctypes.c_char * 4).from_buffer(root)  # a writable buffer is refused
    with pytest.raises(ValueError):
        np.frombuffer(root, np.uint8).flags.writeable = True
    with pytest.raises(TypeError):
        pickle.dumps(root)  # the arrays pickle as copies; their owner does not
    view = memoryview(root)
    assert view.readonly and view.nbytes == len(root)
    view.release()
    copied = a.copy()
    copied[0] = 1.0  # a copy is the caller's own
    assert a[0] == want.state.parameters["a"].data[0]
    # pickled and back, saved: the same values and bytes as the float64 path's
    again = pickle.loads(pickle.dumps(report.state))
    for name in ("a", "c"):
        assert again.parameters[name].data.tobytes() == want.state.parameters[name].data.tobytes()
    ortckpt.save(report.state, tmp_path / "got.ckpt")
    ortckpt.save(want.state, tmp_path / "want.ckpt")
    assert (tmp_path / "got.ckpt").read_bytes() == (tmp_path / "want.ckpt").read_bytes()
    # only a slice kept: the report, state and arrays dropped, memory reused, the slice intact
    kept = c.reshape(-1)[2:5]
    expected = want.state.parameters["c"].data.reshape(-1)[2:5].tobytes()
    del report, a, c, root, again, view
    gc.collect()
    filler = [np.full(1 << 16, 7.0, np.float32) for _ in range(64)]
    assert kept.tobytes() == expected
    del filler


def test_absorbed_partial_sums_whose_mean_passes_float32_fail_the_round():
    """FedAvg on Dask adds the workers' partial sums (``absorb``), and the core divides and
    rounds them to float32: sums finite in float64 are not a mean of checked values, and one
    whose mean passes float32's range must fail the round as it did (the same message), not give
    ``inf`` in the global model (it did once the core rounded them: ``[1.5, 1.5, inf, 1.5]``)."""
    ups = [CheckpointState({"w": np.full(4, float(i), np.float32)}).to_bytes() for i in (1, 2)]
    rnd = ortckpt.Round()
    rnd.add(ups[0])
    worker = ortckpt.Round(reference=ups[0])
    worker.add(ups[1])
    sums, squares, total, count = worker._native.take_partial()
    sums = sums.copy()
    sums[2] = 1e300  # finite in float64; its mean is not in float32
    assert rnd._native is not None
    rnd._native.absorb((sums, squares, total, count))
    with pytest.raises(ortckpt.AggregationError, match="the aggregate of 'w' is not finite in float32"):
        rnd.result()
