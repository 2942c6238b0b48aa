"""A Flower deployment whose ServerApp dies and is started again: the loopback SuperLink and three
SuperNodes of ``test_ort_flower_round.py`` (ORT 1.19.2 devices), the example app with FedAdam
(``server-optimizer="fedadam"``) for three rounds. Once the global checkpoint of round 2 is saved,
the ServerApp process is SIGKILLed (and the ``flwr run`` following it stopped); ``flwr run`` is
submitted again, the new ServerApp goes on from the saved checkpoint (which carries FedAdam's
state: step 2) and runs round 3. The final checkpoint holds 3 server rounds, loads in ORT 1.19.2,
and its loss is below round 0's.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

import ortckpt
from tests.ort.flower_deployment import Deployment
from tests.ort.test_ort_flower_round import APP, device

pytest.importorskip("flwr.serverapp.strategy", reason="needs flwr (ortckpt[flower])")

pytestmark = pytest.mark.ort


def test_fedadam_run_survives_its_serverapp_being_killed(
    deployment: Deployment, ort_python: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    artifacts, out = tmp_path / "artifacts", tmp_path / "out"
    device(ort_python, "artifacts", str(artifacts))
    initial_loss = device(ort_python, "loss", str(artifacts), str(artifacts / "checkpoint"))["loss"]
    deployment.start_superlink()
    nodes = 3
    deployment.start_supernodes(
        [f'partition-id={i} ort-python="{ort_python}" artifacts="{artifacts}"' for i in range(nodes)]
    )
    model = artifacts / "training_model.onnx"
    run_config = (
        f'initial-checkpoint="{artifacts / "checkpoint"}" training-model="{model}" '
        f'out-dir="{out}" num-server-rounds=3 min-nodes={nodes} local-steps=20 lr=0.02 method="fedavg" '
        'payload="checkpoint" server-optimizer="fedadam" server-lr=0.05'
    )
    first = deployment.start_run(APP, run_config)
    deadline = time.monotonic() + 150

    def round_2_recorded() -> bool:
        reports = out / "rounds.json"
        return (
            (out / "global_round2.ckpt").exists() and reports.exists() and '"round": 2' in reports.read_text()
        )

    while not round_2_recorded():
        assert first.poll() is None, first.communicate()[0][-4000:] + deployment.tail()
        assert time.monotonic() < deadline, deployment.tail()
        time.sleep(0.1)
    victims = deployment.serverapps()
    assert victims, deployment.tail()
    for p in victims:
        p.send_signal(signal.SIGKILL)
    killed_at = time.monotonic() - started
    first.terminate()
    first.communicate(timeout=30)
    assert not (out / "global_round3.ckpt").exists()
    assert ortckpt.server_state(ortckpt.load(out / "global_round2.ckpt")).round == 2

    second = deployment.run(APP, run_config, timeout=150)
    context = f"flwr run:\n{second.stdout[-4000:]}\n{second.stderr[-2000:]}\n{deployment.tail()}"
    assert second.returncode == 0, context
    final = out / "global_round3.ckpt"
    assert final.exists(), context
    state = ortckpt.server_state(ortckpt.load(final))
    assert state.round == 3 and state.optimizer == ortckpt.FedAdam(eta=0.05), state
    assert ortckpt.load(final).optimizer["ortckpt.server"].step == 3
    assert [r["round"] for r in json.loads((out / "rounds.json").read_text())] == [1, 2, 3], context
    final_loss = device(ort_python, "loss", str(artifacts), str(final))["loss"]  # loads in ORT 1.19.2
    assert final_loss < initial_loss, (initial_loss, final_loss)
    print(
        f"killed the ServerApp at {killed_at:.1f} s; 3 rounds done at {time.monotonic() - started:.1f} s; "
        f"loss {initial_loss:.3f} -> {final_loss:.3f}"
    )
