"""Hostile weights, options and rounds against ``average`` (issue 32, items 2, 5 and 6): weights
that would make the total infinite are refused (never summed), a round too small for its method
ends with an ``AggregationError`` naming the shortfall, every option is checked on entry, and no
method returns a non-finite model: an update that overflows is rejected, an aggregate that
overflows its dtype is an ``AggregationError``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ortckpt
from ortckpt import CheckpointState
from ortckpt.cli import main

METHODS = ["fedavg", "median", "trimmed_mean", "krum", "multi_krum", "bulyan"]


def upload(value: float, dtype: Any = np.float32, **properties: Any) -> bytes:
    """A one-tensor upload; ``properties`` also make equal values distinct uploads."""
    return CheckpointState({"w": np.full(4, value, dtype)}, properties=properties).to_bytes()


def fleet(n: int) -> list[bytes]:
    return [upload(0.1 * i, i=i) for i in range(n)]


# -- item 2: weights ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["fedavg", "multi_krum"])
def test_weights_that_would_overflow_the_total_are_refused(method: str, tmp_path: Path):
    """Two uploads weighing 1e308 each made the total infinite and the aggregate all zeros,
    every upload accepted. Given weights are a caller's mistake (ValueError); weights read from
    the uploads' property are rejected one by one with kind ``weight`` and never summed, on
    every path (bytes, and local files read by the native round)."""
    a, b = upload(0.5, i=0), upload(0.25, i=1)
    with pytest.raises(ValueError, match=r"weight 1e\+308 of source 0 is outside \[2\^-64, 2\^64\]"):
        ortckpt.average([a, b], weights=[1e308, 1e308], method=method)
    with pytest.raises(ValueError, match="outside"):
        ortckpt.average([a, b], weights=[1, 10**400], method=method)  # beyond float64 as an int
    hostile = [upload(9.0, n=3.0e38, i=i) for i in range(2)]  # float32 property: 3e38 > 2^64
    good = [upload(0.5, n=10, i=2), upload(0.25, n=30, i=3)]
    paths = []
    for i, data in enumerate([*hostile, *good]):
        paths.append(tmp_path / f"d{i}.ckpt")
        paths[-1].write_bytes(data)
    for sources in ([*hostile, *good], paths):
        report = ortckpt.average(sources, weights="n", method=method)
        assert [(s.accepted, s.kind) for s in report.sources] == [(False, "weight")] * 2 + [(True, None)] * 2
        assert "outside [2^-64, 2^64]" in report.sources[0].reason
        assert report.total_weight == 40
        np.testing.assert_allclose(report.state.parameters["w"].data, (0.5 * 10 + 0.25 * 30) / 40, rtol=1e-7)


def test_zero_negative_and_non_finite_weights_are_rejected(tmp_path: Path):
    """Zero is not a weight: an upload of no examples adds nothing, and a round of zero weights
    has no mean (0 / 0)."""
    sources = {
        "zero": upload(1.0, n=0),
        "negative": upload(1.0, n=-3),
        "nan": upload(1.0, n=math.nan),
        "inf": upload(1.0, n=math.inf),
        "tiny": upload(1.0, n=1e-30),
        "text": upload(1.0, n="many"),
        "good": upload(2.0, n=5),
    }
    report = ortckpt.average(sources, weights="n")
    assert [s.client for s in report.accepted] == ["good"]
    assert {s.client: s.kind for s in report.rejected} == dict.fromkeys(
        ["zero", "negative", "nan", "inf", "tiny", "text"], "weight"
    )
    for bad in (0, -1, math.nan, math.inf, "3", True, 1e-30):
        with pytest.raises(ValueError, match="weight"):
            ortckpt.average([upload(1.0, i=0), upload(2.0, i=1)], weights=[1, bad])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**70), 2**70), min_size=2, max_size=5
    )
)
def test_any_weights_give_a_finite_total_and_model_or_a_value_error(weights: list[float]):
    sources = [upload(float(i), i=i) for i in range(len(weights))]
    try:
        report = ortckpt.average(sources, weights=weights)
    except ValueError as exc:
        assert "weight" in str(exc)
        return
    assert math.isfinite(report.total_weight) and report.total_weight > 0
    assert np.isfinite(report.state.parameters["w"].data).all()


# -- item 5: too few accepted uploads for the method ----------------------------------------------


@pytest.mark.parametrize(
    ("options", "need"),
    [
        ({"method": "multi_krum", "byzantine": 3}, 4),  # was IndexError: keep = n - f <= 0
        ({"method": "multi_krum", "byzantine": 7}, 8),
        ({"method": "multi_krum", "keep": 5}, 5),
        ({"method": "bulyan", "byzantine": 1}, 7),
    ],
)
def test_a_round_too_small_for_the_method_names_the_shortfall(options: dict[str, Any], need: int):
    sources = [*fleet(3), b"garbage"]
    with pytest.raises(ortckpt.AggregationError) as info:
        ortckpt.average(sources, **options)
    message = str(info.value)
    assert f"at least {need}" in message.splitlines()[0] or f"= {need} accepted" in message
    assert f"3 were accepted ({need - 3} short)" in message
    report = info.value.report
    assert [s.accepted for s in report.sources] == [True, True, True, False]
    assert report.sources[3].kind == "unreadable" and report.output is None


# -- item 6: options checked on entry, results checked finite ------------------------------------

BAD_OPTIONS = [
    ({"method": "median", "clip_norm": 1.0, "noise_multiplier": math.nan}, "noise_multiplier"),
    ({"clip_norm": 1.0, "noise_multiplier": math.inf}, "noise_multiplier"),
    ({"clip_norm": 1.0, "noise_multiplier": -1.0}, "noise_multiplier"),
    ({"clip_norm": math.inf, "noise_multiplier": 1.0}, "clip_norm"),
    ({"clip_norm": math.inf}, "clip_norm"),
    ({"clip_norm": math.nan}, "clip_norm"),
    ({"clip_norm": -1.0}, "clip_norm"),
    ({"clip_norm": 1e300, "noise_multiplier": 1e300}, "overflows"),
    ({"method": "trimmed_mean", "trim": math.nan}, "trim"),
    ({"method": "trimmed_mean", "trim": -math.inf}, "trim"),
    ({"method": "trimmed_mean", "trim": 0.5}, "trim"),
    ({"method": "trimmed_mean", "trim": "0.1"}, "trim"),
    ({"method": "krum", "byzantine": -1}, "byzantine"),
    ({"method": "krum", "byzantine": 1.5}, "byzantine"),
    ({"method": "krum", "byzantine": math.nan}, "byzantine"),
    ({"method": "multi_krum", "keep": 0}, "keep"),
    ({"method": "multi_krum", "keep": math.inf}, "keep"),
    ({"seed": -1, "clip_norm": 1.0, "noise_multiplier": 1.0}, "seed"),
    ({"chunk_bytes": 4}, "chunk_bytes"),
    ({"chunk_bytes": 2**80}, "chunk_bytes"),
    ({"chunk_bytes": math.nan}, "chunk_bytes"),
    ({"max_bytes": 0}, "max_bytes"),
    ({"max_bytes": 2**70}, "max_bytes"),
    ({"max_bytes": -5}, "max_bytes"),
    ({"method": None}, "method"),
]


@pytest.mark.parametrize(("options", "named"), BAD_OPTIONS, ids=[str(o) for o, _ in BAD_OPTIONS])
def test_every_option_is_checked_on_entry(options: dict[str, Any], named: str):
    """ValueError naming the option before any upload is read (the generator would fail)."""

    def untouched() -> Iterator[bytes]:
        raise AssertionError("an upload was read before the options were checked")
        yield b""

    with pytest.raises(ValueError, match=named):
        ortckpt.average(untouched(), **options)


@pytest.mark.parametrize(
    "args",
    [
        ["--clip-norm", "1", "--noise-multiplier", "nan"],
        ["--clip-norm", "inf", "--noise-multiplier", "1"],
        ["--method", "trimmed_mean", "--trim", "nan"],
        ["--method", "krum", "--byzantine", "-1"],
        ["--chunk-bytes", str(2**80)],
        ["--max-bytes", str(2**70)],
    ],
)
def test_the_cli_refuses_the_same_options(tmp_path: Path, args: list[str], capsys):
    src = tmp_path / "d.ckpt"
    src.write_bytes(upload(1.0))
    out = tmp_path / "out.ckpt"
    assert main(["average", str(out), str(src), *args]) == 2
    err = capsys.readouterr().err
    assert "ortckpt: error:" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("method", METHODS)
def test_an_update_that_overflows_is_rejected_and_the_round_goes_on(method: str):
    """With ``relative_to``, an upload of finite values whose difference to the global model
    leaves float64 (1.75e308 - -1e307) is rejected with kind ``overflow``; the others are
    aggregated and the result is finite."""
    base = upload(-1e307, np.float64)
    honest = [upload(0.1 * i, np.float64, i=i) for i in range(7)]  # updates of about 1e307
    sources = {**{f"d{i}": u for i, u in enumerate(honest)}, "attacker": upload(1.75e308, np.float64)}
    options = {"byzantine": 1} if method in ("krum", "multi_krum", "bulyan") else {}
    report = ortckpt.average(sources, method=method, relative_to=base, **options)
    assert [(s.client, s.kind) for s in report.rejected] == [("attacker", "overflow")]
    assert "update against relative_to overflows float64 in 'w'" in report.rejected[0].reason
    assert len(report.accepted) == 7
    assert np.isfinite(report.state.parameters["w"].data).all()


@pytest.mark.parametrize("method", METHODS)
def test_no_method_returns_a_non_finite_model(method: str):
    """float16 uploads near its limit, relative to a global model near it too, with central
    noise (standard deviation 10 * 1e6 / 8 in float64): the aggregate is beyond float16. Refused
    with an ``AggregationError`` naming the tensor and dtype, never returned as inf."""
    base = upload(65000.0, np.float16)
    sources = [upload(60000.0 + 500 * i, np.float16, i=i) for i in range(8)]
    options = {"byzantine": 1} if method in ("krum", "multi_krum", "bulyan") else {}
    with pytest.raises(ortckpt.AggregationError, match=r"aggregate of 'w' is not finite in float16") as info:
        ortckpt.average(
            sources, method=method, relative_to=base, clip_norm=1e6, noise_multiplier=10.0, seed=3, **options
        )
    assert info.value.report.output is None


def test_a_trimmed_mean_of_finite_values_near_the_limit_is_refused_not_inf():
    """Uploads alternating +-1.7e308 pass FedAvg's overflow check (their running sum stays
    finite) but the trimmed mean adds the sorted values: -inf. An ``AggregationError``."""
    values = [1.7e308 if i % 2 == 0 else -1.7e308 for i in range(40)]
    values[-1] = -1.6e308
    sources = [upload(v, np.float64, i=i) for i, v in enumerate(values)]
    with pytest.raises(ortckpt.AggregationError, match="trimmed_mean aggregate of 'w' is not finite"):
        ortckpt.average(sources, method="trimmed_mean", trim=0.1)


def test_the_cli_says_why_a_round_gave_no_result(tmp_path: Path, capsys):
    paths = []
    for i, data in enumerate(fleet(3)):
        paths.append(tmp_path / f"d{i}.ckpt")
        paths[-1].write_bytes(data)
    out = tmp_path / "out.ckpt"
    assert main(["average", str(out), *map(str, paths), "--method", "bulyan", "--byzantine", "1"]) == 2
    printed = capsys.readouterr().out
    assert "nothing written: bulyan with byzantine = 1 needs at least 4 * byzantine + 3 = 7" in printed
    assert "3 were accepted (4 short)" in printed and not out.exists()
