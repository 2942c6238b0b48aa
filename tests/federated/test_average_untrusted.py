"""``average`` cannot be killed or fooled by its inputs: an upload truncated while the round runs
(a memory map would raise SIGBUS: uploads are read into private memory instead), ``max_bytes``
holds for every kind of source (folders included), finite uploads whose sum overflows float64
are rejected, and the same upload given twice is counted once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState

MIB = 1 << 20

TRUNCATE_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    import ortckpt

    method, paths = sys.argv[1], sys.argv[2:]
    contents = {p: open(p, "rb").read() for p in paths}
    stop = threading.Event()

    def vandal():
        # truncate every upload to one page and write it back, over and over, while the rounds run
        while not stop.is_set():
            for p in paths:
                with open(p, "r+b") as f:
                    f.truncate(4096)
                    f.write(b"")
                with open(p, "r+b") as f:
                    f.write(contents[p])

    t = threading.Thread(target=vandal, daemon=True)
    t.start()
    kinds = set()
    for _ in range(6):
        try:
            report = ortckpt.average(paths, method=method)
            kinds.update(r.kind for r in report.sources)
        except ortckpt.AggregationError as e:
            kinds.update(r.kind for r in e.report.sources)
        except ortckpt.CheckpointChangedError:
            # the robust methods read the accepted uploads again after their check: a file
            # changed in between fails the round (its values can no longer be trusted)
            assert method != "fedavg"
            kinds.add("changed")
    stop.set()
    t.join()
    print(sorted(k or "accepted" for k in kinds))
    """
)


@pytest.mark.parametrize("method", ["fedavg", "fedavg-streamed", "median"])
def test_an_upload_truncated_during_the_round_is_rejected_not_a_crash(tmp_path: Path, method: str):
    """A mapping of a file another process truncates raises SIGBUS on the next touch; the round
    must survive it (run in a subprocess: a SIGBUS would kill it, returncode -7). The median
    reads the files again after their check (``reduce_slots``), never through a mapping either.
    ``fedavg-streamed``: FedAvg as it runs for large models (``ORTCKPT_STREAM_MIN_BYTES=0``
    streams this small one), which adds values before the whole upload is read: a cut or
    rewritten upload is undone and refused, never raised."""
    paths = []
    for i in range(4):
        state = CheckpointState({"w": np.full((1024, 1024), i, np.float32), "b": np.ones(8, np.float32)})
        paths.append(str(tmp_path / f"dev{i}.ckpt"))
        ortckpt.save(state, paths[-1])
    env = dict(os.environ, ORTCKPT_STREAM_MIN_BYTES="0") if method == "fedavg-streamed" else None
    method = method.split("-")[0]
    proc = subprocess.run(
        [sys.executable, "-c", TRUNCATE_SCRIPT, method, *paths],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    kinds = eval(proc.stdout.strip().splitlines()[-1])  # a list of str printed by the script
    print(method, kinds)
    assert set(kinds) <= {"accepted", "unreadable", "duplicate", "changed"}, kinds


def test_max_bytes_holds_for_folders_files_and_their_data(tmp_path: Path):
    good = CheckpointState({"w": np.ones(4, np.float32)})
    folder = tmp_path / "legacy_upload"
    folder.mkdir()
    with open(folder / "paramtrain.pbseq", "wb") as f:
        f.truncate(200 * MIB)  # sparse: 200 MiB that a reader would have to go through
    ortckpt.save(good, tmp_path / "ok.ckpt")
    big = CheckpointState({"w": np.ones(4, np.float32)}, frozen={"table": np.zeros(MIB, np.float32)})
    report = ortckpt.average(
        {"ok": tmp_path / "ok.ckpt", "folder": folder, "bytes": big.to_bytes()},
        max_bytes=MIB,
    )
    kinds = {r.client: r.kind for r in report.sources}
    assert kinds == {"ok": None, "folder": "too-large", "bytes": "too-large"}
    reason = report.sources[1].reason or ""
    assert str(200 * MIB) in reason and "legacy_upload" in reason
    # the external data file counts too
    ortckpt.save(big, tmp_path / "ext.ckpt", external_data_threshold=1024)
    assert (tmp_path / "ext.ckpt.data").exists() and os.path.getsize(tmp_path / "ext.ckpt") < MIB
    report = ortckpt.average([tmp_path / "ok.ckpt", tmp_path / "ext.ckpt"], max_bytes=MIB)
    assert [r.kind for r in report.sources] == [None, "too-large"]  # the size is checked first


def test_max_bytes_measures_the_data_file_the_core_pairs_and_a_folder_s_files(tmp_path: Path):
    """``max_bytes`` counts what the core opens: for a link to a checkpoint whose ``.data`` lies
    beside the link's target (where ``load`` finds it), that file, in ``load`` (mapped or read)
    and in ``average``, which finds it there too; for an ORT 1.15 folder, its checkpoint files,
    measured before any is read (was: ``load`` measured ``<link>.data``, absent, and read 4 MiB
    past a 1 MiB limit; a folder's directory entry; ``average`` missed the ``.data``)."""
    big = CheckpointState({"w": np.ones(4, np.float32)}, frozen={"table": np.arange(MIB, dtype=np.float32)})
    (tmp_path / "real").mkdir()
    (tmp_path / "links").mkdir()
    target = tmp_path / "real" / "ext.ckpt"
    ortckpt.save(big, target, external_data_threshold=1024)
    link = tmp_path / "links" / "link.ckpt"
    link.symlink_to(target)
    assert not (tmp_path / "links" / "link.ckpt.data").exists()
    size = target.stat().st_size + (tmp_path / "real" / "ext.ckpt.data").stat().st_size
    for mmap in (True, False):
        with pytest.raises(ortckpt.SourceTooLargeError, match=f"{size} bytes exceed the size limit of {MIB}"):
            ortckpt.load(link, max_bytes=MIB, mmap=mmap)
        loaded = ortckpt.load(link, max_bytes=size, mmap=mmap)
        assert loaded.parameters["table"].data[-1] == MIB - 1
    report = ortckpt.average([link, tmp_path / "real" / "ext.ckpt"], max_bytes=size)
    assert [r.kind for r in report.sources] == [None, "duplicate"]  # the same pair, by either name
    with pytest.raises(ortckpt.AggregationError) as refused:
        ortckpt.average([link], max_bytes=MIB)
    (only,) = refused.value.report.sources
    assert only.kind == "too-large" and str(size) in (only.reason or "")
    folder = tmp_path / "legacy"
    folder.mkdir()
    with open(folder / "paramtrain.pbseq", "wb") as f:
        f.truncate(200 * MIB)  # sparse: 200 MiB that a reader would have to go through
    with pytest.raises(ortckpt.SourceTooLargeError, match=f"legacy: {200 * MIB} bytes exceed"):
        ortckpt.load(folder, max_bytes=MIB)


def test_finite_uploads_whose_sum_overflows_are_rejected():
    huge = np.full(3, 1.5e308, np.float64)
    uploads = {
        "a": CheckpointState({"w": huge, "v": np.ones(2, np.float32)}),
        "b": CheckpointState({"w": huge * 0.9, "v": np.ones(2, np.float32)}),  # a + b = inf
        "c": CheckpointState({"w": -huge / 2, "v": np.ones(2, np.float32)}),  # fits
    }
    report = ortckpt.average(uploads)
    assert [(r.client, r.kind) for r in report.sources] == [("a", None), ("b", "overflow"), ("c", None)]
    assert "'w'" in (report.sources[1].reason or "")
    assert np.isfinite(report.state.parameters["w"].data).all()
    np.testing.assert_array_equal(report.state.parameters["w"].data, (huge - huge / 2) / 2)
    # one upload whose weighted values alone overflow
    report = ortckpt.average([uploads["c"], uploads["a"]], weights=[1, 10])
    assert [r.kind for r in report.sources] == [None, "overflow"]


@pytest.mark.parametrize("method", ["median", "trimmed_mean", "multi_krum", "bulyan"])
def test_robust_methods_reject_overflow_exactly_as_fedavg(tmp_path: Path, method: str):
    """The robust methods check without keeping FedAvg's sums until a bound could overflow; then
    they make the exact sums (read again from the files) and the verdicts are FedAvg's: b
    overflows, d's bound is infinite but its exact sums fit (1.5 - 0.75 + 1.0 = 1.75e308)."""
    huge = np.full(3, 1.5e308, np.float64)
    values = {"a": huge, "b": huge * 0.9, "c": -huge / 2, "d": huge / 1.5, "e": np.full(3, 1.0)}
    paths = {}
    for name, w in values.items():
        paths[name] = tmp_path / f"{name}.ckpt"
        ortckpt.save(CheckpointState({"w": w, "v": np.ones(2, np.float32)}), paths[name])
    fedavg = ortckpt.average(paths)
    want = [("a", None), ("b", "overflow"), ("c", None), ("d", None), ("e", None)]
    assert [(r.client, r.kind) for r in fedavg.sources] == want
    # pytest turns warnings into errors here: squared norms beyond float64 must not warn
    robust = ortckpt.average(paths, method=method, trim=0.2, byzantine=0)
    assert [(r.client, r.kind) for r in robust.sources] == want
    assert "'w'" in (robust.sources[1].reason or "")
    # sums past float64's limit inside a method (Bulyan's mean adds a and d first) fall back to
    # a mean that stays finite
    assert np.isfinite(robust.state.parameters["w"].data).all()
    if method == "median":  # of a, c, d, e: (1.0 + 1e308) / 2 per coordinate
        np.testing.assert_array_equal(robust.state.parameters["w"].data, np.full(3, (1.0 + 1e308) / 2))


def test_an_accepted_upload_changed_before_its_sums_are_needed_stops_the_round(tmp_path: Path):
    """The robust check makes FedAvg's sums from the accepted uploads' files only when a bound
    could overflow; if one of those files changed after its check, the round stops with
    CheckpointChangedError naming it (the sweep reads every accepted upload again)."""
    huge = np.full(3, 1.5e308, np.float64)
    paths = {}
    for name, w in {"a": huge, "c": -huge / 2}.items():
        paths[name] = tmp_path / f"{name}.ckpt"
        ortckpt.save(CheckpointState({"w": w}), paths[name])

    def sources():
        yield paths["a"]
        data = bytearray(paths["a"].read_bytes())  # a rewritten in place after its check
        with open(paths["a"], "r+b") as f:
            f.write(bytes(data[:-1]) + bytes([data[-1] ^ 1]))
        os.utime(paths["a"], ns=(1, 1))
        yield paths["c"]  # its bound is infinite: the sums of a are read again

    with pytest.raises(ortckpt.CheckpointChangedError, match=r"a\.ckpt"):
        ortckpt.average(sources(), method="median")


@pytest.mark.parametrize("count", [5, 40])  # the fused pass (<= 32 uploads) and the chunked sweep
@pytest.mark.parametrize("swap", ["fifo", "symlink", "other-checkpoint", "in-place"])
def test_paths_swapped_after_the_check_never_reach_the_robust_reads(tmp_path: Path, count: int, swap: str):
    """Between the robust methods' check and their second reads, another program replaces some
    uploads' paths: a FIFO (opening it would block), a symlink to /dev/zero, another checkpoint.
    The second reads go through the files held open since the check, never the paths: the median
    is the checked uploads', with no hang and no error. The same file rewritten in place (same
    inode, other values) stops the round with CheckpointChangedError naming it."""
    paths = []
    for i in range(count):
        state = CheckpointState(
            {"w": np.full((64, 300), i, np.float32), "b": np.arange(8, dtype=np.float32) * i}
        )
        paths.append(tmp_path / f"dev{i:02d}.ckpt")
        ortckpt.save(state, paths[-1])
    want = ortckpt.average(paths, method="median").state
    other = tmp_path / "other.ckpt"
    ortckpt.save(
        CheckpointState({"w": np.full((64, 300), 1e6, np.float32), "b": np.zeros(8, np.float32)}), other
    )

    def vandal() -> None:
        for p in paths[:3]:
            if swap == "in-place":
                data = bytearray(p.read_bytes())
                data[-64:] = bytes(64)  # inside the last tensor's values: still finite (zeros)
                with open(p, "r+b") as f:
                    f.write(bytes(data))
                os.utime(p, ns=(1, 1))
                continue
            p.unlink()
            if swap == "fifo":
                os.mkfifo(p)
            elif swap == "symlink":
                p.symlink_to("/dev/zero")
            else:
                os.link(other, p)

    # every upload checked (the round's add), then the paths vandalized, then the second reads
    rnd = ortckpt.Round(method="median")
    for p in paths:
        assert rnd.add(p).accepted
    vandal()
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the robust reads blocked"))
    signal.alarm(120)
    try:
        if swap == "in-place":
            with pytest.raises(ortckpt.CheckpointChangedError, match=r"dev0[0-2]\.ckpt"):
                rnd.result()
            return
        got = rnd.result()
    finally:
        signal.alarm(0)
    assert not got.rejected
    for name in ("w", "b"):
        np.testing.assert_array_equal(got.state.parameters[name].data, want.parameters[name].data)


@pytest.mark.parametrize("method", ["fedavg", "median"])  # median: the robust batched check
def test_the_same_upload_twice_is_counted_once(tmp_path: Path, method: str):
    states = [CheckpointState({"w": np.full(4, i, np.float32)}) for i in range(3)]
    for i, s in enumerate(states):
        ortckpt.save(s, tmp_path / f"d{i}.ckpt")
    os.symlink(tmp_path / "d0.ckpt", tmp_path / "link.ckpt")
    os.link(tmp_path / "d1.ckpt", tmp_path / "hard.ckpt")
    data = states[2].to_bytes()
    sources = {
        "d0": tmp_path / "d0.ckpt",
        "d1": tmp_path / "d1.ckpt",
        "again": tmp_path / "d0.ckpt",
        "link": tmp_path / "link.ckpt",
        "hard": tmp_path / "hard.ckpt",
        "b": data,
        "b-copy": bytes(bytearray(data)),
        "state": states[2],
    }
    report = ortckpt.average(sources, method=method)
    kinds = {r.client: r.kind for r in report.sources}
    assert kinds == {
        "d0": None,
        "d1": None,
        "again": "duplicate",
        "link": "duplicate",
        "hard": "duplicate",
        "b": None,
        "b-copy": "duplicate",
        "state": "duplicate",
    }
    assert "'d0'" in (report.sources[2].reason or "")
    np.testing.assert_array_equal(report.state.parameters["w"].data, np.full(4, 1.0, np.float32))


@pytest.mark.parametrize(
    "dtype",
    [
        np.float16,
        ml_dtypes.bfloat16,
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2,
        ml_dtypes.float8_e5m2fnuz,
        np.complex64,
        np.complex128,
    ],
)
def test_every_float_type_is_widened_exactly(dtype):
    """Every bit pattern of the 8-bit types (every finite one, averaged with zero), and random
    values of the others: the kernel's float64 widening equals ml_dtypes'/numpy's."""
    rng = np.random.default_rng(1)
    if np.dtype(dtype).itemsize == 1:
        values = np.arange(256, dtype=np.uint8).view(dtype)
        values = values[np.isfinite(values.astype(np.float64))]
    elif np.dtype(dtype).kind == "c":
        values = (rng.standard_normal(64) + 1j * rng.standard_normal(64)).astype(dtype)
    else:
        values = rng.standard_normal(256).astype(dtype)
    zeros = np.zeros_like(values)
    report = ortckpt.average([CheckpointState({"w": values}), CheckpointState({"w": zeros})], weights=[3, 1])
    kind = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    want = (values.astype(kind) * 3 / 4).astype(dtype)
    got = report.state.parameters["w"].data
    assert got.dtype == values.dtype
    kind_got, kind_want = got.astype(kind), want.astype(kind)  # -0.0 == 0.0: sums start at +0.0
    np.testing.assert_array_equal(kind_got, kind_want)
    bad = values.copy()
    if np.dtype(dtype).kind == "c":
        bad[0] = complex(0, np.nan)
    else:
        bad[0] = np.nan
    report = ortckpt.average([CheckpointState({"w": values}), CheckpointState({"w": bad})])
    assert [r.kind for r in report.sources] == [None, "non-finite"]
