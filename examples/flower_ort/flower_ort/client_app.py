"""The ClientApp: one ONNX Runtime device per SuperNode.

It receives the global checkpoint's bytes, trains the device's model for a few steps with
onnxruntime-training (``ort_device.py``, run by the Python of ORT's own environment: the node
config's ``ort-python``), and replies with the trained checkpoint's bytes and its sample count and
loss. Two behaviours simulate a broken fleet (node config ``behaviour``): ``"corrupt"`` replies
with damaged bytes (a truncated upload), ``"nan"`` with a checkpoint whose weights diverged to NaN.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

import ortckpt
from ortckpt.flower import checkpoint_bytes, checkpoint_record, to_metricrecord

DEVICE = Path(__file__).with_name("ort_device.py")

app = ClientApp()


def run_device(ort_python: str, *args: str) -> dict[str, object]:
    """Run ``ort_device.py`` under ORT's Python; its last stdout line is a JSON object."""
    proc = subprocess.run(
        [ort_python, str(DEVICE), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"ort_device.py {args[0]} failed: {proc.stderr[-2000:]}")
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _misbehave(data: bytes, behaviour: str) -> bytes:
    if behaviour == "corrupt":  # an upload cut short, its first bytes garbled
        return bytes(b ^ 0x5A for b in data[:64]) + data[64 : len(data) // 2]
    if behaviour == "nan":  # training diverged
        state = ortckpt.load_bytes(data)
        weight = state.parameters["fc1.weight"]
        weight.data = np.full(weight.shape, np.nan, weight.dtype)
        return ortckpt.serialize(state)
    return data


@app.train()
def train(msg: Message, context: Context) -> Message:
    node, config = context.node_config, msg.content["config"]
    with tempfile.TemporaryDirectory() as tmp:
        start, trained = Path(tmp, "global.ckpt"), Path(tmp, "trained.ckpt")
        start.write_bytes(checkpoint_bytes(msg.content["arrays"]))
        run_device(
            str(node["ort-python"]),
            "train",
            str(node["artifacts"]),
            str(start),
            str(trained),
            "--partition",
            str(node["partition-id"]),
            "--steps",
            str(config["local-steps"]),
            "--lr",
            str(config["lr"]),
        )
        data = trained.read_bytes()
    # the sample count and loss the device stored as properties, under FedAvg's weight key
    metrics: MetricRecord = to_metricrecord(data)
    reply = _misbehave(data, str(node.get("behaviour", "honest")))
    return Message(RecordDict({"arrays": checkpoint_record(reply), "metrics": metrics}), reply_to=msg)
