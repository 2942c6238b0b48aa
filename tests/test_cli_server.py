"""``ortckpt average --relative-to GLOBAL --server-optimizer ...``: a chain of commands is a
resumable server (each reads the state from GLOBAL and writes it into OUT)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ortckpt
from ortckpt.cli import main
from tests.helpers.server_rounds import initial_model, trained, updates

pytest.importorskip("dp_accounting", reason="needs dp-accounting (ortckpt[privacy])")

FLAGS = [
    "--server-optimizer",
    "fedyogi",
    "--eta",
    "0.05",
    "--adaptive-clipping",
    "4",
    "--noise-multiplier",
    "0.1",
]
FLAGS += ["--seed", "7", "--dp-delta", "1e-5", "--sampling-rate", "0.2", "--weights-property", "samples"]


def _uploads(tmp_path: Path, t: int, start: ortckpt.CheckpointState) -> list[str]:
    paths = []
    for i, u in enumerate(updates(t)):
        path = tmp_path / f"r{t}_{i}.ckpt"
        ortckpt.save(trained(start, u, 10 * (i + 1)), path)
        paths.append(str(path))
    return paths


def test_a_chain_of_commands_equals_the_library_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ortckpt.save(initial_model(), tmp_path / "g0.ckpt")
    expected = initial_model()
    options = {
        "server_optimizer": ortckpt.FedYogi(eta=0.05),
        "adaptive_clipping": ortckpt.AdaptiveClipping(4),
        "noise_multiplier": 0.1,
        "seed": 7,
        "privacy": ortckpt.PrivacyAccountant(1e-5, sampling_rate=0.2),
        "weights": "samples",
    }
    for t in (1, 2, 3):
        paths = _uploads(tmp_path, t, ortckpt.load(tmp_path / f"g{t - 1}.ckpt"))
        # the first command names every setting; the next ones only what is not saved in GLOBAL
        flags = FLAGS if t == 1 else ["--server-optimizer", "fedyogi", "--adaptive-clipping", "4"]
        flags = (
            flags if t == 1 else [*flags, "--noise-multiplier", "0.1", "--seed", "7", "--dp-delta", "1e-5"]
        )
        flags = flags if t == 1 else [*flags, "--weights-property", "samples"]
        argv = [
            "average",
            str(tmp_path / f"g{t}.ckpt"),
            *paths,
            "--relative-to",
            str(tmp_path / f"g{t - 1}.ckpt"),
        ]
        assert main([*argv, *flags, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        report = ortckpt.average(paths, relative_to=expected, **options)  # type: ignore[arg-type]
        expected = report.state
        assert out["server"]["round"] == t and out["server"]["optimizer"] == "fedyogi"
        assert out["server"]["epsilon"] == report.server.epsilon  # type: ignore[union-attr]
        assert out["server"]["next_clipping_norm"] == report.server.next_clipping_norm  # type: ignore[union-attr]
        written = ortckpt.load(tmp_path / f"g{t}.ckpt")
        assert ortckpt.serialize(written) == ortckpt.serialize(expected)


def test_settings_that_do_not_fit_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ortckpt.save(initial_model(), tmp_path / "g0.ckpt")
    paths = _uploads(tmp_path, 1, initial_model())
    argv = ["average", str(tmp_path / "g1.ckpt"), *paths]
    assert main([*argv, "--server-optimizer", "fedadam"]) == 2  # no GLOBAL
    assert "--relative-to" in capsys.readouterr().err
    rel = ["--relative-to", str(tmp_path / "g0.ckpt")]
    assert main([*argv, *rel, "--server-optimizer", "fedadam", "--server-momentum", "0.9"]) == 2
    assert "not an option of fedadam" in capsys.readouterr().err
    assert main([*argv, *rel, "--server-optimizer", "fedadam", "--beta-1", "1.0"]) == 2
    assert "beta_1" in capsys.readouterr().err
    assert main([*argv, *rel, "--server-optimizer", "fedadam", "--eta", "nan"]) == 2
    assert main([*argv, *rel, "--server-optimizer", "fedadam", "--eta", "0.3"]) == 0
    capsys.readouterr()
    again = ["average", str(tmp_path / "g2.ckpt"), *paths, "--relative-to", str(tmp_path / "g1.ckpt")]
    assert (
        main([*again, "--server-optimizer", "fedadam", "--eta", "0.1"]) == 2
    )  # not what GLOBAL was made with
    assert "eta=0.3" in capsys.readouterr().err
    assert main(again) == 2  # the state would be dropped
    assert "server state" in capsys.readouterr().err
    assert not (tmp_path / "g2.ckpt").exists()
