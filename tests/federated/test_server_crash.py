"""Crash and resume: a server process runs six rounds, each ``average(..., relative_to=GLOBAL,
out=GLOBAL)`` over the same file (the global checkpoint carries the model and the server's
state), and is SIGKILLed at random points during aggregation and during the save; after every
kill it is started again and resumes from what the file holds. The final file is bit-equal to an
uninterrupted run's, and its round counter says every round was applied once.

Budget: ``ORTCKPT_CRASH_KILLS`` kills in all (default 20, over the two setups: FedAdam; adaptive
clipping + noise + privacy accounting), about a minute on 2 cores.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ortckpt
from tests.helpers.paths import REPO
from tests.helpers.server_rounds import initial_model

pytest.importorskip("dp_accounting", reason="needs dp-accounting (ortckpt[privacy])")

KILLS = int(os.environ.get("ORTCKPT_CRASH_KILLS", "20"))
ROUNDS = 6

# The server: resumes from GLOBAL (its round counter says which round is next), runs the rest.
# Each round's uploads depend on the global model they start from and the round only. Phase
# markers (appended, flushed) tell the test where a kill lands.
SERVER = r"""
import sys
from pathlib import Path
import numpy as np
import ortckpt
sys.path.insert(0, sys.argv[3])
from tests.helpers.server_rounds import trained, updates, SHAPES

path, setup = Path(sys.argv[1]), sys.argv[2]
marks = open(path.with_suffix(".marks"), "a", buffering=1)
ortckpt.recover(path)
options = {"fedadam": {"server_optimizer": ortckpt.FedAdam(eta=0.05)},
           "dp": {"server_optimizer": ortckpt.FedAvgM(server_momentum=0.5),
                  "adaptive_clipping": ortckpt.AdaptiveClipping(4, initial_clipping_norm=0.2),
                  "noise_multiplier": 0.2, "seed": 1234,
                  "privacy": ortckpt.PrivacyAccountant(1e-5, sampling_rate=0.1)}}[setup]
while True:
    glob = ortckpt.load_bytes(path.read_bytes())
    t = ortckpt.server_state(glob).round + 1
    if t > int(sys.argv[4]):
        break
    marks.write(f"aggregate {t}\n")
    rnd = ortckpt.Round(relative_to=path, **options)
    for i, u in enumerate(updates(t)):
        rnd.add(trained(glob, u, 10 * (i + 1)), weight="samples")
    report = rnd.result()
    marks.write(f"save {t}\n")
    ortckpt.save(report.state, path)
    marks.write(f"saved {t}\n")
"""


def _server(path: Path, setup: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", SERVER, str(path), setup, str(REPO), str(ROUNDS)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _last_mark(path: Path) -> str:
    lines = path.with_suffix(".marks").read_text().splitlines() if path.with_suffix(".marks").exists() else []
    return lines[-1] if lines else ""


def _run(path: Path, setup: str, kills: int, rng: random.Random) -> dict[str, int]:
    ortckpt.save(initial_model(), path)
    where = {"aggregate": 0, "save": 0}
    done = 0
    while done < kills:
        proc = _server(path, setup)
        phase = rng.choice(["aggregate", "save"])
        deadline = time.monotonic() + 60
        while proc.poll() is None and not _last_mark(path).startswith(phase) and time.monotonic() < deadline:
            time.sleep(0.0005)
        if proc.poll() is not None:  # the run finished before this kill: start it over
            _, err = proc.communicate()
            assert proc.returncode == 0, err.decode()
            ortckpt.save(initial_model(), path)
            path.with_suffix(".marks").unlink()
            continue
        time.sleep(rng.uniform(0, 0.004))
        mark = _last_mark(path)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        if not mark.startswith("saved"):
            where[mark.split()[0]] += 1
        done += 1
    proc = _server(path, setup)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    return where


@pytest.mark.parametrize("setup", ["fedadam", "dp"])
def test_killed_servers_resume_bit_equal(setup: str, tmp_path: Path) -> None:
    started = time.monotonic()
    clean = tmp_path / "clean.ckpt"
    ortckpt.save(initial_model(), clean)
    proc = _server(clean, setup)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()

    killed = tmp_path / "killed.ckpt"
    kills = KILLS // 2 if setup == "fedadam" else KILLS - KILLS // 2
    where = _run(killed, setup, kills, random.Random(f"{setup}-{KILLS}"))
    assert killed.read_bytes() == clean.read_bytes()  # model and state, bit for bit
    state = ortckpt.server_state(ortckpt.load(killed))
    assert state.round == ROUNDS and ortckpt.load(killed).optimizer["ortckpt.server"].step == ROUNDS
    if setup == "dp":
        assert state.ledger == [(0.1, 0.2, ROUNDS)]  # every round accounted once
    marks = [m.split() for m in killed.with_suffix(".marks").read_text().splitlines()]
    for i, (kind, t) in enumerate(marks):  # no round started again once its save was done
        assert kind != "saved" or ["aggregate", t] not in marks[i:], marks
    print(
        f"{setup}: {kills} kills ({where['aggregate']} aggregating, {where['save']} saving) in "
        f"{time.monotonic() - started:.1f} s"
    )
