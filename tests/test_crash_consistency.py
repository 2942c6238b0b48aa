"""Crash consistency of saves: a child process saves over an existing checkpoint and is killed with
SIGKILL, deterministically after every file system step of the save (the test-only hook
``ORTCKPT_TEST_KILL_AT``, see docs/format.md, "Crash consistency") and at random times. After
each kill, ``load`` gives exactly the old or the new state (verified value by value) or raises
``InterruptedSaveError``; ``recover`` then restores exactly one of them and leaves no helper file.

``ORTCKPT_CRASH_KILLS`` sets the number of random kills (default 160; raise it for long campaigns,
e.g. ``ORTCKPT_CRASH_KILLS=5000 pytest tests/test_crash_consistency.py``).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, InterruptedSaveError, OptimizerGroup, _native

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork + SIGKILL crash tests are Linux-only")

RANDOM_KILLS = int(os.environ.get("ORTCKPT_CRASH_KILLS", "160"))
# Steps after which the new state is committed to (the journal is durable): recovery completes it.
PAST_JOURNAL = set(_native.CRASH_STEPS[_native.CRASH_STEPS.index("journal_committed") :])


def make_state(tag: int) -> CheckpointState:
    """A state whose every value depends on ``tag``, with tensors big enough to go external at a
    small threshold, small inline ones, an optimizer group and properties."""
    rng = np.random.default_rng(tag)
    return CheckpointState(
        {
            "a": rng.standard_normal(300).astype(np.float32),
            "b": np.arange(40, dtype=np.int64) * (tag + 1),
            "small": np.array([tag, tag + 1], dtype=np.int8),
        },
        frozen={"f": np.full(33, tag, dtype=np.float64)},
        properties={"tag": tag, "label": f"state {tag}"},
        optimizer={
            "g": OptimizerGroup(
                step=tag,
                initial_learning_rate=0.5,
                states={"a": {"momentum0": rng.standard_normal(300).astype(np.float32)}},
            )
        },
    )


STATES = {tag: make_state(tag) for tag in (1, 2)}


def which_state(state: CheckpointState) -> int:
    """The tag of the expected state ``state`` equals value by value (fails on any mix)."""
    tag = state.properties["tag"]
    assert isinstance(tag, int) and tag in STATES, tag
    want = STATES[tag]
    assert dict(state.properties) == dict(want.properties)
    assert sorted(state.parameters) == sorted(want.parameters)
    for name, param in want.parameters.items():
        got = state.parameters[name]
        assert got.trainable == param.trainable, name
        assert got.data.tobytes() == param.data.tobytes(), f"tensor {name} of state {tag} is mixed"
    assert state.optimizer is not None and want.optimizer is not None
    got_group, want_group = state.optimizer["g"], want.optimizer["g"]
    assert got_group.step == want_group.step
    assert got_group.states["a"]["momentum0"].tobytes() == want_group.states["a"]["momentum0"].tobytes()
    return tag


def threshold(external: bool) -> int | None:
    return 0 if external else None


def save_in_child(path: Path, tag: int, external: bool, kill_at: str | None, loop: bool = False) -> int:
    """Fork a child that saves state ``tag`` (alternating with the other state when ``loop``) and
    exits; returns its pid."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            if kill_at is not None:
                os.environ["ORTCKPT_TEST_KILL_AT"] = kill_at
            while True:
                ortckpt.save(STATES[tag], path, external_data_threshold=threshold(external))
                if not loop:
                    break
                tag = 3 - tag
        except BaseException:
            code = 3
        os._exit(code)
    return pid


def wait(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def settle(path: Path, outcomes: Counter[str]) -> int:
    """Load after a crash (recovering when load says so); the tag of the state found. Afterwards
    no helper file of any save is left."""
    try:
        before = which_state(ortckpt.load(path))
        outcomes["load ok"] += 1
    except InterruptedSaveError as exc:
        assert "ortckpt recover" in str(exc)
        outcomes["load InterruptedSaveError"] += 1
        before = None
    result = ortckpt.recover(path)
    outcomes[f"recover {result}"] += 1
    after = which_state(ortckpt.load(path, mmap=False))
    if before is not None and result not in ("new", "old"):
        assert after == before
    names = sorted(os.listdir(path.parent))
    assert all(n in (path.name, path.name + ".data") for n in names), names
    if not ortckpt.load(path).has_external_data:
        assert path.name + ".data" not in names, "stale external data file left behind"
    return after


SCENARIOS = {
    # (old state saved with external data?, new state with external data?)
    "external_over_external": (True, True),
    "external_over_inline": (False, True),
    "inline_over_external": (True, False),
    "inline_over_inline": (False, False),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_kill_after_every_save_step(tmp_path: Path, scenario: str) -> None:
    old_external, new_external = SCENARIOS[scenario]
    outcomes: Counter[str] = Counter()
    kills = 0
    for step in _native.CRASH_STEPS:
        if step.startswith("recover_"):
            continue
        work = tmp_path / step
        work.mkdir()
        path = work / "model.ckpt"
        ortckpt.save(STATES[1], path, external_data_threshold=threshold(old_external))
        status = wait(save_in_child(path, 2, new_external, step))
        if status == 0:
            # a step this kind of save does not pass (e.g. no backup of an absent .data)
            assert which_state(ortckpt.load(path)) == 2
            continue
        assert status == -signal.SIGKILL, (step, status)
        kills += 1
        tag = settle(path, outcomes)
        assert tag == (2 if step in PAST_JOURNAL else 1), (step, tag)
        # the next save works and cleans up after the crashed one
        ortckpt.save(STATES[1], path, external_data_threshold=threshold(new_external))
        assert which_state(ortckpt.load(path)) == 1
        assert sorted(os.listdir(work)) == sorted(
            [path.name] + ([path.name + ".data"] if new_external else [])
        )
    assert kills >= (16 if new_external else 12), outcomes
    print(f"{scenario}: {kills} kills, {dict(outcomes)}")


def test_kill_first_save_leaves_nothing_or_the_new_state(tmp_path: Path) -> None:
    for step in ("data_synced", "journal_committed", "data_renamed", "ckpt_renamed"):
        path = tmp_path / step / "model.ckpt"
        path.parent.mkdir()
        assert wait(save_in_child(path, 2, True, step)) == -signal.SIGKILL
        result = ortckpt.recover(path)
        if step in PAST_JOURNAL:
            assert result == "new" and which_state(ortckpt.load(path)) == 2
        else:
            assert result == "leftovers" and os.listdir(path.parent) == []


def test_kill_during_recovery(tmp_path: Path) -> None:
    """A crash while recovering is recovered by running it again."""
    for step in ("recover_data_placed", "recover_ckpt_placed", "recover_journal_removed"):
        path = tmp_path / step / "model.ckpt"
        path.parent.mkdir()
        ortckpt.save(STATES[1], path, external_data_threshold=0)
        assert wait(save_in_child(path, 2, True, "backups_synced")) == -signal.SIGKILL
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.environ["ORTCKPT_TEST_KILL_AT"] = step
            ortckpt.recover(path)
            os._exit(0)
        assert wait(pid) == -signal.SIGKILL
        assert settle(path, Counter()) == 2


def test_cli_recover_after_a_crash_between_the_renames(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ortckpt.cli import main

    path = tmp_path / "model.ckpt"
    ortckpt.save(STATES[1], path, external_data_threshold=0)
    assert wait(save_in_child(path, 2, True, "data_renamed")) == -signal.SIGKILL
    with pytest.raises(InterruptedSaveError, match="ortckpt recover"):
        ortckpt.load(path)
    assert main(["inspect", str(path)]) == 2
    assert "ortckpt recover" in capsys.readouterr().err
    assert main(["recover", str(path)]) == 0
    assert "completed an interrupted save" in capsys.readouterr().out
    assert which_state(ortckpt.load(path)) == 2
    assert main(["recover", str(path)]) == 0
    assert "nothing to recover" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path)) == ["model.ckpt", "model.ckpt.data"]


def test_kill_at_random_times(tmp_path: Path) -> None:
    """A child saves the two states alternately, with and without external data, and is killed
    after a random delay; every kill must leave one of the two states."""
    rng = random.Random(int(os.environ.get("ORTCKPT_CRASH_SEED", "12345")))
    outcomes: Counter[str] = Counter()
    found: Counter[int] = Counter()
    for i in range(RANDOM_KILLS):
        path = tmp_path / f"r{i % 4}" / "model.ckpt"
        path.parent.mkdir(exist_ok=True)
        external = i % 3 != 0
        if not path.exists():
            ortckpt.save(STATES[1], path, external_data_threshold=threshold(external))
        pid = save_in_child(path, 2, external, None, loop=True)
        time.sleep(rng.uniform(0.0, 0.03))
        os.kill(pid, signal.SIGKILL)
        assert wait(pid) == -signal.SIGKILL
        found[settle(path, outcomes)] += 1
    print(f"random: {RANDOM_KILLS} kills, states {dict(found)}, {dict(outcomes)}")
    assert sum(found.values()) == RANDOM_KILLS
