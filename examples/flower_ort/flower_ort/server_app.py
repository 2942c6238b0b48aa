"""The ServerApp: ``OrtFedAvg`` over the ONNX Runtime devices.

Run config (pyproject.toml, or ``flwr run --run-config``): ``initial-checkpoint`` (the checkpoint
ORT's ``generate_artifacts`` wrote), ``out-dir`` (where each round's global checkpoint and a JSON
report go), ``training-model`` (its ``training_model.onnx``, to decode parameter buffers),
``num-server-rounds``, ``min-nodes``, ``local-steps``, ``lr``, ``method`` (any of
``ortckpt.average``'s), ``byzantine`` (the attackers Krum, MultiKrum and Bulyan tolerate),
``payload`` (``checkpoint``, ``checkpoint-v1`` or ``nominal+buffer``) and ``server-optimizer``
(``""``, ``fedavgm``, ``fedadagrad``, ``fedadam`` or ``fedyogi``, with Flower's defaults;
``server-lr`` sets its learning rate when > 0). Devices may reply with a checkpoint or a flat
parameter buffer. A round that gives no aggregate (too few good replies for the method) is
recorded with its ``failure`` and the run goes on.

With a server optimizer the ServerApp resumes: each round's global checkpoint carries the
optimizer's state, and a ServerApp started again (after a crash, a redeployment) goes on from the
last one in ``out-dir`` until the run has ``num-server-rounds`` rounds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from flwr.app import ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp

import ortckpt
from ortckpt.flower import OrtFedAvg, OrtFedOpt, RoundReport

app = ServerApp()
OPTIMIZERS = {"fedavgm": ortckpt.FedAvgM, "fedadagrad": ortckpt.FedAdagrad, "fedadam": ortckpt.FedAdam}
OPTIMIZERS["fedyogi"] = ortckpt.FedYogi


def latest_global(out: Path) -> Path | None:
    """The global checkpoint of the last round a ServerApp of this run saved."""
    saved = [
        (int(m.group(1)), p) for p in out.glob("global_round*.ckpt") if (m := re.search(r"(\d+)", p.name))
    ]
    return max(saved)[1] if saved else None


def server_optimizer(config: dict[str, object]) -> ortckpt.FedAdam | None:
    name = str(config.get("server-optimizer", ""))
    if not name:
        return None
    rate = float(str(config.get("server-lr", 0.0)))
    key = "server_learning_rate" if name == "fedavgm" else "eta"
    return OPTIMIZERS[name](**({key: rate} if rate > 0 else {}))  # type: ignore[return-value]


@app.main()
def main(grid: Grid, context: Context) -> None:
    config = context.run_config
    out = Path(str(config["out-dir"]))
    out.mkdir(parents=True, exist_ok=True)
    rounds: list[dict[str, object]] = []
    optimizer = server_optimizer(dict(config))
    initial, done = str(config["initial-checkpoint"]), 0
    last = latest_global(out) if optimizer is not None else None
    if last is not None:  # a ServerApp started again: go on from the last saved round
        initial, done = str(last), ortckpt.server_state(ortckpt.load(last)).round
        reports = out / "rounds.json"
        rounds = (
            [r for r in json.loads(reports.read_text()) if r["round"] <= done] if reports.exists() else []
        )

    def record(report: RoundReport) -> None:
        number = done + report.server_round  # Flower numbers the rounds of each start from 1
        if report.state is not None:
            ortckpt.save(report.state, out / f"global_round{number}.ckpt")
        rounds.append(
            {
                "round": number,
                "accepted": report.accepted,
                "rejected": [
                    {"node_id": r.node_id, "client": r.client, "kind": r.kind, "reason": r.reason}
                    for r in report.rejected
                ],
                "failure": report.failure,
            }
        )
        (out / "rounds.json").write_text(json.dumps(rounds, indent=1))

    nodes = int(config["min-nodes"])
    method, byzantine = str(config["method"]), int(config.get("byzantine", 0))
    options = {
        "method": method,
        "average_options": {"byzantine": byzantine} if method in ("krum", "multi_krum", "bulyan") else {},
        "payload": str(config["payload"]),
        "training_model": str(config["training-model"]),
        "on_round": record,
        "fraction_evaluate": 0.0,
        "min_train_nodes": nodes,
        "min_available_nodes": nodes,
    }
    strategy = (
        OrtFedAvg(initial, **options)  # type: ignore[arg-type]
        if optimizer is None
        else OrtFedOpt(initial, server_optimizer=optimizer, **options)  # type: ignore[arg-type]
    )
    strategy.start(
        grid=grid,
        initial_arrays=strategy.initial_arrays(),
        num_rounds=int(config["num-server-rounds"]) - done,
        train_config=ConfigRecord({"local-steps": config["local-steps"], "lr": config["lr"]}),
    )
