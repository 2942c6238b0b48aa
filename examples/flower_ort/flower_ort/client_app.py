"""The ClientApp: one ONNX Runtime device per SuperNode.

It receives the round's payload (the global checkpoint's bytes, or a nominal checkpoint and a flat
parameter buffer), trains the device's model for a few steps with onnxruntime-training
(``ort_device.py``, run by the Python of ORT's own environment: the node config's ``ort-python``),
and replies with the trained checkpoint's bytes, or (node config ``reply="buffer"``) the flat
buffer of its trainable parameters (``Module.get_contiguous_parameters``), with its sample count
and loss. Other behaviours simulate a broken or hostile fleet (node config ``behaviour``):
``"corrupt"`` replies with damaged bytes (a truncated upload), ``"nan"`` with weights that
diverged to NaN, ``"overflow"`` with an honest checkpoint claiming 1e308 examples (a weight that
would make the round's total infinite), ``"empty"`` with nothing (no ArrayRecord, no metrics),
and ``"crash"`` fails (Flower replies with an error message).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

import ortckpt
from ortckpt.flower import (
    BUFFER_KEY,
    buffer_record,
    buffer_values,
    checkpoint_bytes,
    checkpoint_record,
    to_metricrecord,
)

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


def _misbehave(reply: ArrayRecord, behaviour: str) -> ArrayRecord:
    if behaviour == "corrupt":  # an upload cut short, its first bytes garbled
        data = checkpoint_bytes(reply)
        return checkpoint_record(bytes(b ^ 0x5A for b in data[:64]) + data[64 : len(data) // 2])
    if behaviour == "nan":  # training diverged
        if BUFFER_KEY in reply:
            return buffer_record(np.full_like(buffer_values(reply), np.nan))
        state = ortckpt.load_bytes(checkpoint_bytes(reply))
        weight = state.parameters["fc1.weight"]
        weight.data = np.full(weight.shape, np.nan, weight.dtype)
        return checkpoint_record(ortckpt.serialize(state))
    return reply


@app.train()
def train(msg: Message, context: Context) -> Message:
    node, config, payload = context.node_config, msg.content["config"], msg.content["arrays"]
    behaviour = str(node.get("behaviour", "honest"))
    if behaviour == "crash":
        raise RuntimeError("this device fails to train")
    if behaviour == "empty":
        return Message(RecordDict({}), reply_to=msg)
    with tempfile.TemporaryDirectory() as tmp:
        start, trained, upload = Path(tmp, "global.ckpt"), Path(tmp, "trained.ckpt"), Path(tmp, "up.bin")
        start.write_bytes(checkpoint_bytes(payload))  # a full checkpoint, or the nominal one
        extra = []
        if BUFFER_KEY in payload:  # nominal checkpoint + every parameter's values in one buffer
            buffer_values(payload).astype("<f4").tofile(Path(tmp, "down.bin"))
            extra += ["--buffer-in", str(Path(tmp, "down.bin"))]
        if node.get("reply") == "buffer":
            extra += ["--buffer-out", str(upload)]
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
            *extra,
        )
        data = trained.read_bytes()
        reply = (
            buffer_record(np.fromfile(upload, dtype="<f4"))
            if node.get("reply") == "buffer"
            else checkpoint_record(data)
        )
    # the sample count and loss the device stored as properties, under FedAvg's weight key
    metrics: MetricRecord = to_metricrecord(data)
    if behaviour == "overflow":
        metrics["num-examples"] = 1e308
    reply = _misbehave(reply, behaviour)
    return Message(RecordDict({"arrays": reply, "metrics": metrics}), reply_to=msg)
