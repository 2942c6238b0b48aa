"""``ortckpt.average``: weighted FedAvg against an independent numpy computation, every kind of bad
upload rejected and reported (never raised, never in the result), and the ``average`` command."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import AggregationError, CheckpointState, OptimizerGroup
from ortckpt.cli import main

SHAPES = {
    "fc1.weight": ((6, 5), np.float32),
    "fc1.bias": ((5,), np.float16),
    "emb": ((4, 3), ml_dtypes.bfloat16),
}


def device(seed: int, samples: int = 1, *, optimizer: bool = False) -> CheckpointState:
    """A device's upload: trainable float32/float16/bfloat16 parameters, a frozen int table."""
    rng = np.random.default_rng(seed)
    params = {n: rng.standard_normal(shape).astype(dtype) for n, (shape, dtype) in SHAPES.items()}
    opt = None
    if optimizer:
        states = {
            n: {"momentum0": rng.standard_normal(shape).astype(np.float32)}
            for n, (shape, _) in SHAPES.items()
            if n == "fc1.weight"
        }
        opt = {"group0": OptimizerGroup(step=seed + 1, initial_learning_rate=0.01, states=states)}
    return CheckpointState(
        params,
        frozen={"vocab": np.arange(10, dtype=np.int64) + seed},
        properties={"samples": samples, "device": f"phone-{seed}"},
        optimizer=opt,
    )


def expected_mean(states: list[CheckpointState], weights: list[float], name: str) -> np.ndarray:
    """The weighted mean computed independently: numpy's average in float64, rounded once."""
    stack = np.stack([np.asarray(s.parameters[name].data, dtype=np.float64) for s in states])
    mean = np.average(stack, axis=0, weights=np.asarray(weights, np.float64))
    return mean.astype(states[0].parameters[name].dtype)


def assert_within_one_ulp(got: np.ndarray, want: np.ndarray) -> None:
    """The documented rounding: float64 sums (in any order) rounded once to the dtype agree with an
    exact computation to one unit in the last place of the dtype."""
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.astype(np.float64), want.astype(np.float64)
    ulp = np.abs(np.spacing(want.astype(np.float32)).astype(np.float64))
    if want.dtype != np.float32:  # float16/bfloat16: their own spacing (next value up)
        bits = want.view(np.uint16).astype(np.int64)
        up = (bits + 1).astype(np.uint16).view(want.dtype).astype(np.float64)
        ulp = np.abs(up - w)
    assert np.all(np.abs(g - w) <= ulp), np.max(np.abs(g - w) - ulp)
    assert np.mean(g == w) > 0.95  # and nearly always exactly equal


def test_weighted_average_matches_numpy(tmp_path: Path):
    uploads = [device(i, samples=i * 7 + 1) for i in range(12)]
    paths = []
    for i, s in enumerate(uploads):
        paths.append(tmp_path / f"dev{i}.ckpt")
        ortckpt.save(s, paths[-1])
    weights = [i * 7 + 1 for i in range(12)]
    for kwargs in ({"weights": "samples"}, {"weights": weights}):
        report = ortckpt.average(paths, tmp_path / "global.ckpt", **kwargs)
        assert [r.accepted for r in report.sources] == [True] * 12
        assert report.total_weight == sum(weights)
        assert [r.weight for r in report.sources] == weights
        result = ortckpt.load(tmp_path / "global.ckpt")
        for name in SHAPES:
            assert_within_one_ulp(result.parameters[name].data, expected_mean(uploads, weights, name))
        # frozen parameters and properties come from the reference (the first upload)
        assert result.parameters["vocab"].data.tolist() == list(range(10))
        assert not result.parameters["vocab"].trainable
        assert dict(result.properties) == {"samples": 1, "device": "phone-0"}
        assert result.optimizer is None
    equal = ortckpt.average(paths)
    assert equal.output is None and equal.total_weight == 12
    assert_within_one_ulp(
        equal.state.parameters["fc1.weight"].data, expected_mean(uploads, [1] * 12, "fc1.weight")
    )


def test_sources_of_every_kind_and_client_ids(tmp_path: Path):
    uploads = [device(i) for i in range(4)]
    ortckpt.save(uploads[0], tmp_path / "a.ckpt")
    sources = {
        "alice": tmp_path / "a.ckpt",  # a path (memory-mapped)
        "bob": uploads[1].to_bytes(),  # an upload's bytes
        "carol": uploads[2],  # a state
        "dave": memoryview(uploads[3].to_bytes()),
    }
    report = ortckpt.average(sources, weights={"alice": 1, "bob": 2, "carol": 3, "dave": 4})
    assert [r.client for r in report.sources] == ["alice", "bob", "carol", "dave"]
    assert_within_one_ulp(
        report.state.parameters["fc1.weight"].data, expected_mean(uploads, [1, 2, 3, 4], "fc1.weight")
    )


def test_generator_sources_are_consumed_once():
    produced: list[int] = []

    def uploads() -> Iterator[bytes]:
        for i in range(5):
            produced.append(i)
            yield device(i).to_bytes()

    report = ortckpt.average(uploads())
    assert produced == [0, 1, 2, 3, 4] and len(report.accepted) == 5


def _bad_uploads(good: bytes) -> dict[str, tuple[str, Any]]:
    """client -> (expected rejection kind, upload)."""
    base = device(100)

    def variant(**changes: Any) -> bytes:
        params = {n: p.data for n, p in base.trainable_parameters.items()}
        frozen = {n: p.data for n, p in base.frozen_parameters.items()}
        params.update(changes.get("params", {}))
        for name in changes.get("drop", []):
            params.pop(name)
        frozen = changes.get("frozen", frozen)
        return CheckpointState(
            params, frozen=frozen, properties=changes.get("properties", {"samples": 3})
        ).to_bytes()

    nan = base.parameters["fc1.weight"].data.copy()
    nan[2, 3] = np.nan
    inf = base.parameters["emb"].data.copy()
    inf[0, 0] = np.inf
    return {
        "missing": ("missing-parameter", variant(drop=["fc1.bias"])),
        "extra": ("extra-parameter", variant(params={"fc2.weight": np.zeros(3, np.float32)})),
        "dtype": ("dtype", variant(params={"fc1.weight": nan.astype(np.float64)})),
        "shape": ("shape", variant(params={"fc1.weight": np.zeros((5, 6), np.float32)})),
        "flag": ("trainable-flag", variant(params={"vocab": np.arange(10, dtype=np.int64)}, frozen={})),
        "nan": ("non-finite", variant(params={"fc1.weight": nan})),
        "inf": ("non-finite", variant(params={"emb": inf})),
        "truncated": ("unreadable", good[: len(good) // 2]),
        "garbage": ("unreadable", b"\x00garbage" * 50),
        "empty": ("unreadable", b""),
        "no-weight": ("weight", variant(properties={"device": "x"})),
        "zero-weight": ("weight", variant(properties={"samples": 0})),
        "huge": ("too-large", good + b"\x00" * (8 << 20)),
        "nominal": ("nominal", ortckpt.serialize(ortckpt.to_nominal(base))),
    }


def test_every_rejection_is_reported_not_raised(tmp_path: Path):
    good = [device(i, samples=i + 1) for i in range(3)]
    good_bytes = [s.to_bytes() for s in good]
    bad = _bad_uploads(good_bytes[0])
    missing_file = tmp_path / "never-uploaded.ckpt"
    sources: dict[str, Any] = {"good0": good_bytes[0]}
    for client, (_, data) in bad.items():
        sources[client] = data
    sources["good1"] = good_bytes[1]
    sources["missing-file"] = missing_file
    sources["good2"] = good_bytes[2]
    report = ortckpt.average(sources, tmp_path / "out.ckpt", weights="samples")
    kinds = {r.client: r.kind for r in report.rejected}
    assert kinds == {client: kind for client, (kind, _) in bad.items()} | {"missing-file": "unreadable"}
    assert [r.client for r in report.accepted] == ["good0", "good1", "good2"]
    for r in report.rejected:
        assert r.reason, r
    reasons = {r.client: r.reason for r in report.rejected}
    assert "'fc1.bias'" in reasons["missing"] and "'fc2.weight'" in reasons["extra"]
    assert "float64" in reasons["dtype"] and "(5, 6)" in reasons["shape"]
    assert "'fc1.weight'" in reasons["nan"] and "'emb'" in reasons["inf"]
    assert "never-uploaded.ckpt" in reasons["missing-file"]
    # the bad uploads never reached the sum
    result = ortckpt.load(tmp_path / "out.ckpt")
    for name in SHAPES:
        assert_within_one_ulp(result.parameters[name].data, expected_mean(good, [1, 2, 3], name))
    assert "rejected 15" in report.summary() and "nan" in report.summary()


def test_first_upload_bad_next_one_is_the_reference():
    good = [device(i) for i in range(3)]
    sources = [b"garbage", good[0].to_bytes(), good[1].to_bytes(), good[2]]
    report = ortckpt.average(sources)
    assert [r.accepted for r in report.sources] == [False, True, True, True]
    assert report.reference == "upload #1"


def test_explicit_reference(tmp_path: Path):
    reference = device(50)
    reference.properties["round"] = 7
    uploads = [device(i) for i in range(3)]
    odd = CheckpointState({"other": np.zeros(2, np.float32)})
    report = ortckpt.average([odd, *uploads], reference=reference.to_bytes())
    assert [r.kind for r in report.sources] == ["missing-parameter", None, None, None]
    assert report.state.properties["round"] == 7
    assert report.state.parameters["vocab"].data.tolist() == (np.arange(10) + 50).tolist()


def test_optimizer_state_averaged():
    uploads = [device(i, optimizer=True) for i in range(4)]
    report = ortckpt.average(uploads, include_optimizer_state=True, weights=[1, 1, 2, 4])
    group = report.state.optimizer["group0"]
    assert group.step == 1  # from the reference
    moms = [u.optimizer["group0"].states["fc1.weight"]["momentum0"].astype(np.float64) for u in uploads]
    want = np.average(np.stack(moms), axis=0, weights=[1, 1, 2, 4]).astype(np.float32)
    assert_within_one_ulp(group.states["fc1.weight"]["momentum0"], want)
    plain = device(9)  # no optimizer state: rejected when momentums are averaged
    report = ortckpt.average([*uploads, plain], include_optimizer_state=True)
    assert report.sources[-1].kind == "optimizer"


def test_nothing_accepted_raises_with_the_report(tmp_path: Path):
    with pytest.raises(AggregationError, match="no upload could be averaged") as info:
        ortckpt.average([b"junk", b"", tmp_path / "nope.ckpt"], tmp_path / "out.ckpt")
    assert [r.kind for r in info.value.report.sources] == ["unreadable"] * 3
    assert not (tmp_path / "out.ckpt").exists()
    assert isinstance(info.value, ortckpt.CheckpointError)


def test_caller_mistakes_raise():
    uploads = [device(i).to_bytes() for i in range(2)]
    with pytest.raises(ValueError, match="fewer weights"):
        ortckpt.average(uploads, weights=[1])
    with pytest.raises(ValueError, match="more weights"):
        ortckpt.average(uploads, weights=[1, 2, 3])
    with pytest.raises(ValueError, match="positive"):
        ortckpt.average(uploads, weights=[1, -2])
    with pytest.raises(TypeError, match="list"):
        ortckpt.average(uploads[0])  # type: ignore[arg-type]
    frozen_int = CheckpointState({"steps": np.zeros(2, np.int64)})
    with pytest.raises(ValueError, match="only floating-point"):
        ortckpt.average(uploads, reference=frozen_int)


def test_cli_average(tmp_path: Path, capsys):
    paths = []
    for i in range(4):
        paths.append(str(tmp_path / f"dev{i}.ckpt"))
        ortckpt.save(device(i, samples=i + 1), paths[-1])
    (tmp_path / "bad.ckpt").write_bytes(b"not a checkpoint")
    ortckpt.save(device(0), tmp_path / "ref.ckpt")
    out = str(tmp_path / "global.ckpt")
    args = ["average", out, *paths, str(tmp_path / "bad.ckpt"), "--weights-property", "samples"]
    assert main([*args, "--reference", str(tmp_path / "ref.ckpt")]) == 0
    text = capsys.readouterr().out
    assert "accepted 4 of 5 uploads (total weight 10" in text
    assert "bad.ckpt" in text and "unreadable" in text and f"wrote {out}" in text
    uploads = [device(i) for i in range(4)]
    assert_within_one_ulp(
        ortckpt.load(out).parameters["fc1.weight"].data, expected_mean(uploads, [1, 2, 3, 4], "fc1.weight")
    )
    assert main(["average", str(tmp_path / "none.ckpt"), str(tmp_path / "bad.ckpt")]) == 2
    assert "nothing written" in capsys.readouterr().out


def test_a_mapped_upload_with_a_wrong_stored_length_is_rejected(tmp_path: Path):
    """A local upload is memory-mapped, and a mapped load compares each tensor's stored length on
    first use: the upload is still rejected as unreadable, and none of it reaches the sum."""
    good = [device(i) for i in range(2)]
    data = bytearray(device(7).to_bytes())
    values = device(7).parameters["fc1.weight"].data.tobytes()
    at = data.find(values)
    assert at > 4 and int.from_bytes(data[at - 4 : at], "little") == len(values)
    data[at - 4 : at] = (len(values) - 4).to_bytes(4, "little")
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(bytes(data))
    report = ortckpt.average(
        {"g0": good[0].to_bytes(), "bad": bad, "g1": good[1].to_bytes()}, tmp_path / "o.ckpt"
    )
    assert [(r.client, r.kind) for r in report.rejected] == [("bad", "unreadable")]
    assert "fc1.weight" in report.rejected[0].reason and "bad.ckpt" in report.rejected[0].reason
    result = ortckpt.load(tmp_path / "o.ckpt")
    for name in SHAPES:
        assert_within_one_ulp(result.parameters[name].data, expected_mean(good, [1, 1], name))


@pytest.mark.parametrize("method", ["fedavg", "median"])
def test_the_reference_read_from_a_file_keeps_its_values_while_others_are_read(tmp_path: Path, method: str):
    """The reference state is built over the first upload's private memory, not a copy of it; the
    memory must stay its own while later uploads are read into reused buffers (large enough to be
    read in windows, with external data for half of them)."""
    rng = np.random.default_rng(7)
    paths = []
    for i in range(9):
        state = CheckpointState(
            {"w": rng.standard_normal((512, 1024)).astype(np.float32)},  # 2 MiB
            frozen={"table": np.full(300_000, i, np.int64)},  # 2.3 MiB, the reference's own
        )
        paths.append(tmp_path / f"dev{i}.ckpt")
        ortckpt.save(state, paths[-1], external_data_threshold=1024 if i % 2 else None)
    report = ortckpt.average(paths, method=method)
    assert len(report.accepted) == 9
    table = report.state.parameters["table"].data
    assert table.dtype == np.int64 and (table == 0).all()  # the first upload's, intact
    reference = ortckpt.load(paths[0])
    assert reference.parameters["table"].data.tobytes() == table.tobytes()


@pytest.mark.parametrize("count", [40, 121])
def test_median_and_trimmed_mean_of_many_uploads_equal_numpy(tmp_path: Path, count: int):
    """Past the sorting networks the statistics are found by counting, float32 tensors compared
    as float32 (AVX-512 where the CPU has it, plain loops elsewhere: this file also runs on
    aarch64) and float16/bfloat16 ones as float64: both equal numpy's on the same uploads (the
    median exactly, the trimmed mean within the final rounding)."""
    states = [device(seed) for seed in range(count)]
    paths = []
    for i, state in enumerate(states):
        if i % 7 == 3:  # a few repeated values in every column
            state = device(0)
            states[i] = state
        paths.append(tmp_path / f"dev{i:03d}.ckpt")
        ortckpt.save(state, paths[-1])
    stacks = {n: np.stack([np.asarray(s.parameters[n].data, np.float64) for s in states]) for n in SHAPES}
    median = ortckpt.average(paths, method="median").state
    trimmed = ortckpt.average(paths, method="trimmed_mean", trim=0.1).state
    cut = int(0.1 * count)  # Flower's trim count
    for name, (_, dtype) in SHAPES.items():
        want = np.median(stacks[name], axis=0).astype(dtype)
        got = median.parameters[name].data
        assert got.dtype == want.dtype and np.array_equal(got, want), name
        kept = np.sort(stacks[name], axis=0)[cut : count - cut]
        assert_within_one_ulp(trimmed.parameters[name].data, kept.mean(axis=0).astype(dtype))
