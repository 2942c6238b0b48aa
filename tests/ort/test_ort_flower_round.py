"""A real federated round end to end: a Flower deployment on loopback (a SuperLink and four
SuperNodes as processes, insecure mode, 127.0.0.1 only), the example app examples/flower_ort
submitted with ``flwr run``; its ClientApps train with the real onnxruntime-training 1.19.2 (a
subprocess into the ORT side environment) and reply with their checkpoints. One SuperNode replies
with corrupted bytes, one with NaN weights: both are reported and excluded in both rounds, the
global checkpoint after round 2 loads in ORT 1.19.2 and its loss is below the initial one's.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.ort.flower_deployment import Deployment

pytest.importorskip("flwr.serverapp.strategy", reason="needs flwr (ortckpt[flower])")

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "examples" / "flower_ort"
DEVICE = APP / "flower_ort" / "ort_device.py"
BEHAVIOURS = ["honest", "honest", "corrupt", "nan"]
# what the server sends, and what each device replies with (a checkpoint or a parameter buffer)
SETUPS = {
    "checkpoints": ("checkpoint", ["checkpoint"] * 4),
    "nominal+buffers": ("nominal+buffer", ["checkpoint", "buffer", "checkpoint", "buffer"]),
}

pytestmark = pytest.mark.ort


def device(ort_python: str, *args: str) -> dict[str, float]:
    proc = subprocess.run(
        [ort_python, str(DEVICE), *args], capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run_config(artifacts: Path, out: Path, nodes: int, steps: int, method: str, extra: str) -> str:
    """The example app's run config (``extra``: the payload, the method's options)."""
    return (
        f'initial-checkpoint="{artifacts / "checkpoint"}" '
        f'training-model="{artifacts / "training_model.onnx"}" '
        f'out-dir="{out}" num-server-rounds=2 min-nodes={nodes} local-steps={steps} lr=0.02 '
        f'method="{method}" {extra}'
    )


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_two_rounds_on_a_flower_deployment(
    setup: str, deployment: Deployment, ort_python: str, tmp_path: Path
) -> None:
    payload, replies = SETUPS[setup]
    started = time.monotonic()
    artifacts, out = tmp_path / "artifacts", tmp_path / "out"
    device(ort_python, "artifacts", str(artifacts))
    initial_loss = device(ort_python, "loss", str(artifacts), str(artifacts / "checkpoint"))["loss"]

    deployment.start_superlink()
    node_configs = [
        f'partition-id={i} behaviour="{behaviour}" reply="{reply}" '
        f'ort-python="{ort_python}" artifacts="{artifacts}"'
        for i, (behaviour, reply) in enumerate(zip(BEHAVIOURS, replies))
    ]
    node_logs = dict(zip(deployment.start_supernodes(node_configs), BEHAVIOURS))
    config = run_config(artifacts, out, len(BEHAVIOURS), 20, "fedavg", f'payload="{payload}"')
    proc = deployment.run(APP, config, timeout=150)
    context = f"flwr run:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}\n{deployment.tail()}"
    assert proc.returncode == 0, context
    assert (out / "rounds.json").exists(), context

    # which node id is which behaviour: each SuperNode logs its id when it registers
    behaviour_of = {}
    for log, behaviour in node_logs.items():
        found = re.search(r"SuperNode ID: (\d+)", log.read_text(errors="replace"))
        assert found, log.read_text()
        behaviour_of[f"node {found.group(1)}"] = behaviour

    rounds = json.loads((out / "rounds.json").read_text())
    assert [r["round"] for r in rounds] == [1, 2], context
    for r in rounds:
        assert sorted(behaviour_of[c] for c in r["accepted"]) == ["honest", "honest"], r
        kinds = {behaviour_of[x["client"]]: x["kind"] for x in r["rejected"]}
        assert kinds == {"corrupt": "unreadable", "nan": "non-finite"}, r

    final = out / "global_round2.ckpt"
    final_loss = device(ort_python, "loss", str(artifacts), str(final))["loss"]  # loads in ORT 1.19.2
    assert final_loss < initial_loss, (initial_loss, final_loss)
    print(f"2 rounds took {time.monotonic() - started:.1f} s; loss {initial_loss:.3f} -> {final_loss:.3f}")


def test_stop_leaves_no_process_behind(tmp_path: Path) -> None:
    """What the fixture's finalizer relies on: stop() ends every process the deployment started,
    the SuperExec processes Flower starts in their own sessions included."""
    d = Deployment(tmp_path)
    try:
        d.start_superlink()
        d.start_supernodes(["partition-id=0"])
        family = [
            p
            for proc in d.procs
            for p in (psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True))
        ]
        # the SuperLink, its SuperExec and the SuperNode (whose SuperExec may not be up yet)
        assert any(p.name().startswith("flower-superexe") for p in family), family
    finally:
        d.stop()
    assert [p.pid for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []


#: what each hostile device sends, and the kind its reply is rejected with
HOSTILE = {
    "overflow": "weight",  # an honest checkpoint claiming 1e308 examples
    "nan": "non-finite",
    "corrupt": "unreadable",  # garbage bytes
    "empty": "malformed",  # nothing: no ArrayRecord, no metrics
    "crash": "error",  # no reply: Flower's error message
}
#: (method, byzantine, whether its rounds aggregate with three good replies)
HOSTILE_RUNS = [
    ("fedavg", 0, True),
    ("median", 0, True),
    ("trimmed_mean", 0, True),
    ("krum", 0, True),
    ("multi_krum", 1, True),
    ("bulyan", 0, True),
    ("bulyan", 1, False),  # needs 4 * 1 + 3 = 7 accepted: every round fails, the run goes on
]


def test_a_hostile_fleet_on_a_flower_deployment(
    deployment: Deployment, ort_python: str, tmp_path: Path
) -> None:
    """Issue 32: three honest devices and five hostile ones (overflowing weight, NaN, garbage,
    nothing, a crash) on one loopback deployment, one ``flwr run`` of two rounds per method:
    every run completes all its rounds, every bad reply is reported with its kind in every round,
    and each round either aggregates the honest replies only or, when they are too few for the
    method, reports the shortfall and keeps the global model (``RoundReport.failure``)."""
    artifacts = tmp_path / "artifacts"
    device(ort_python, "artifacts", str(artifacts))
    deployment.start_superlink()
    behaviours = ["honest"] * 3 + list(HOSTILE)
    node_configs = [
        f'partition-id={i} behaviour="{b}" reply="checkpoint" ort-python="{ort_python}" '
        f'artifacts="{artifacts}"'
        for i, b in enumerate(behaviours)
    ]
    logs = deployment.start_supernodes(node_configs)
    behaviour_of = {}
    for log, behaviour in zip(logs, behaviours, strict=True):
        found = None
        for _ in range(100):  # the id is logged once the node registered
            found = re.search(r"SuperNode ID: (\d+)", log.read_text(errors="replace"))
            if found:
                break
            time.sleep(0.1)
        assert found, log.read_text()
        behaviour_of[f"node {found.group(1)}"] = behaviour
    for method, byzantine, aggregates in HOSTILE_RUNS:
        out = tmp_path / f"out-{method}-{byzantine}"
        config = run_config(
            artifacts, out, len(behaviours), 5, method, f'byzantine={byzantine} payload="checkpoint"'
        )
        proc = deployment.run(APP, config, timeout=240)
        context = f"{method}: flwr run:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}\n{deployment.tail()}"
        assert proc.returncode == 0, context
        rounds = json.loads((out / "rounds.json").read_text())
        assert [r["round"] for r in rounds] == [1, 2], context
        for r in rounds:
            assert sorted(behaviour_of[c] for c in r["accepted"]) == ["honest"] * 3, (method, r)
            kinds = {behaviour_of[x["client"]]: x["kind"] for x in r["rejected"]}
            assert kinds == HOSTILE, (method, r)
            if aggregates:
                assert r["failure"] is None and (out / f"global_round{r['round']}.ckpt").exists(), (method, r)
            else:
                assert "3 were accepted (4 short)" in r["failure"], (method, r)
                assert not (out / f"global_round{r['round']}.ckpt").exists()
