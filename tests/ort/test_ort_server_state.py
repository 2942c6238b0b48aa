"""What a device receives from a server that keeps state, decided with ORT 1.19.2's training API
(the example's device program, examples/flower_ort/flower_ort/ort_device.py).

Found: ORT loads a global checkpoint that carries the server's optimizer group
(``ortckpt.server``, float64 moments) and trains exactly as from the same checkpoint without it —
bit-equal parameters and AdamW state, whether or not the checkpoint also holds the device's own
optimizer group (``group0``) — but a device that saves its optimizer state writes the server's
group back into its upload, unchanged (five times the float32 model for FedAdam). So the server
strips it when sending (``ortckpt.strip_server_state``, ``OrtFedOpt``'s payloads), and ORT trains
from the stripped checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ortckpt
from ortckpt.federated._server_state import GROUP
from tests.ort.test_ort_flower_round import device

pytestmark = pytest.mark.ort


def _train(ort_python: str, art: Path, src: Path, out: Path) -> ortckpt.CheckpointState:
    device(ort_python, "train", str(art), str(src), str(out), "--steps", "5", "--keep-optimizer")
    return ortckpt.load(out)


def _same(a: ortckpt.CheckpointState, b: ortckpt.CheckpointState) -> None:
    for name, p in a.parameters.items():
        assert np.array_equal(p.data, b.parameters[name].data), name
    ga, gb = a.optimizer["group0"], b.optimizer["group0"]
    assert ga.step == gb.step
    for param, moms in ga.states.items():
        for m, arr in moms.items():
            assert np.array_equal(arr, gb.states[param][m]), (param, m)


def test_orts_training_ignores_the_server_state_but_carries_it_back(ort_python: str, tmp_path: Path) -> None:
    art = tmp_path / "art"
    device(ort_python, "artifacts", str(art))
    uploads = []
    for i in range(2):
        path = tmp_path / f"up{i}.ckpt"
        device(
            ort_python,
            "train",
            str(art),
            str(art / "checkpoint"),
            str(path),
            "--partition",
            str(i),
            "--steps",
            "5",
        )
        uploads.append(path)
    report = ortckpt.average(
        uploads, tmp_path / "g1.ckpt", relative_to=art / "checkpoint", server_optimizer=ortckpt.FedAdam()
    )
    assert report.state.optimizer is not None and list(report.state.optimizer) == [GROUP]
    stripped = tmp_path / "g1_device.ckpt"
    ortckpt.save(ortckpt.strip_server_state(report.state), stripped)

    # no device optimizer state in the global checkpoint: the same training either way
    with_server = _train(ort_python, art, tmp_path / "g1.ckpt", tmp_path / "a.ckpt")
    without = _train(ort_python, art, stripped, tmp_path / "b.ckpt")
    _same(with_server, without)
    # ... but ORT saves the server's group back into the device's checkpoint, untouched
    assert sorted(with_server.optimizer) == ["group0", GROUP] and list(without.optimizer) == ["group0"]
    sent = report.state.optimizer[GROUP]
    for param, moms in with_server.optimizer[GROUP].states.items():
        for m, arr in moms.items():
            assert arr.dtype == np.float64 and np.array_equal(arr, sent.states[param][m])

    # with the device's own optimizer state beside the server's: the same again
    ortckpt.save(ortckpt.strip_server_state(with_server), tmp_path / "a_stripped.ckpt")
    again_with = _train(ort_python, art, tmp_path / "a.ckpt", tmp_path / "c.ckpt")
    again_without = _train(ort_python, art, tmp_path / "a_stripped.ckpt", tmp_path / "d.ckpt")
    _same(again_with, again_without)
    assert again_with.optimizer["group0"].step == 10
