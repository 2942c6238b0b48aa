"""The ServerApp: ``OrtFedAvg`` over the ONNX Runtime devices.

Run config (pyproject.toml, or ``flwr run --run-config``): ``initial-checkpoint`` (the checkpoint
ORT's ``generate_artifacts`` wrote), ``out-dir`` (where each round's global checkpoint and a JSON
report go), ``training-model`` (its ``training_model.onnx``, to decode parameter buffers),
``num-server-rounds``, ``min-nodes``, ``local-steps``, ``lr``, ``method`` (any of
``ortckpt.average``'s), ``byzantine`` (the attackers Krum, MultiKrum and Bulyan tolerate) and
``payload`` (``checkpoint``, ``checkpoint-v1`` or ``nominal+buffer``). Devices may reply with a
checkpoint or a flat parameter buffer. A round that gives no aggregate (too few good replies for
the method) is recorded with its ``failure`` and the run goes on.
"""

from __future__ import annotations

import json
from pathlib import Path

from flwr.app import ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp

import ortckpt
from ortckpt.flower import OrtFedAvg, RoundReport

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    config = context.run_config
    out = Path(str(config["out-dir"]))
    out.mkdir(parents=True, exist_ok=True)
    rounds: list[dict[str, object]] = []

    def record(report: RoundReport) -> None:
        if report.state is not None:
            ortckpt.save(report.state, out / f"global_round{report.server_round}.ckpt")
        rounds.append(
            {
                "round": report.server_round,
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
    strategy = OrtFedAvg(
        str(config["initial-checkpoint"]),
        method=method,
        average_options={"byzantine": byzantine} if method in ("krum", "multi_krum", "bulyan") else {},
        payload=str(config["payload"]),
        training_model=str(config["training-model"]),
        on_round=record,
        fraction_evaluate=0.0,
        min_train_nodes=nodes,
        min_available_nodes=nodes,
    )
    strategy.start(
        grid=grid,
        initial_arrays=strategy.initial_arrays(),
        num_rounds=int(config["num-server-rounds"]),
        train_config=ConfigRecord({"local-steps": config["local-steps"], "lr": config["lr"]}),
    )
