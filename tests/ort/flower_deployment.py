"""A Flower deployment on loopback for tests: a SuperLink and SuperNodes as real processes
(``flower-superlink`` / ``flower-supernode --insecure`` on 127.0.0.1, free ports), and ``flwr run``
against them. Every process is started in its own session; ``stop()`` kills it with every process it started
(the SuperExec, ServerApp and ClientApp processes, which Flower starts in sessions of their own,
so they are found by parentage, not by process group).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

BIN = Path(sys.executable).parent  # flower-superlink, flower-supernode, flwr, flower-superexec


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s:\n{log.read_text()[-3000:]}")


class Deployment:
    """A SuperLink and its SuperNodes under ``root`` (FLWR_HOME, logs)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "flwr-home"
        self.home.mkdir(parents=True)
        self.env = dict(
            os.environ,
            FLWR_HOME=str(self.home),
            PATH=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
            # nothing leaves the machine: no telemetry, no check for a newer Flower on PyPI
            FLWR_TELEMETRY_ENABLED="0",
            FLWR_DISABLE_UPDATE_CHECK="1",
        )
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        self.port = 0

    def _start(self, name: str, args: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(BIN / args[0]), *args[1:]],
                cwd=self.root,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() kills its children too
            )
        self.procs.append(proc)
        self.logs.append(log)
        return proc, log

    def start_superlink(self) -> None:
        self.port = free_port()
        proc, log = self._start(
            "superlink",
            [
                "flower-superlink",
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--disable-runtime-dependency-installation",  # the app runs in this environment
            ],
        )
        wait_for_port(self.port, proc, log, 60)
        # the SuperLink connection `flwr run` uses: $FLWR_HOME/config.toml in Flower 1.42 (not the
        # app's pyproject.toml)
        (self.home / "config.toml").write_text(
            '[superlink]\ndefault = "loopback"\n\n'
            f'[superlink.loopback]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n'
        )

    def start_supernodes(self, node_configs: list[str]) -> list[Path]:
        """One SuperNode per node config, started together; returns their logs once all listen."""
        started = []
        for i, node_config in enumerate(node_configs):
            port = free_port()
            proc, log = self._start(
                f"supernode{i}",
                [
                    "flower-supernode",
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{self.port}",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--node-config",
                    node_config,
                ],
            )
            started.append((port, proc, log))
        for port, proc, log in started:
            wait_for_port(port, proc, log, 60)
        return [log for _, _, log in started]

    def run(self, app: Path, run_config: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """``flwr run APP loopback --stream``: submit the app and follow its logs to the end."""
        proc = self.start_run(app, run_config)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def start_run(self, app: Path, run_config: str) -> subprocess.Popen[str]:
        """``run`` without waiting: the ``flwr run`` process (its output and errors piped)."""
        return subprocess.Popen(
            [str(BIN / "flwr"), "run", str(app), "loopback", "--stream", "--run-config", run_config],
            cwd=self.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def serverapps(self) -> list[psutil.Process]:
        """The ServerApp processes running under the SuperLink (``flwr-serverapp``)."""
        found = []
        for proc in self.procs:
            try:
                for p in psutil.Process(proc.pid).children(recursive=True):
                    if any("flwr-serverapp" in part for part in p.cmdline()):
                        found.append(p)
            except psutil.NoSuchProcess:
                pass
        return found

    def stop(self) -> None:
        """SIGTERM every process and its descendants, then SIGKILL what is left after 5 s."""
        family: list[psutil.Process] = []
        for proc in self.procs:
            try:
                leader = psutil.Process(proc.pid)
                family += [leader, *leader.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        for member in family:
            try:
                member.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(family, timeout=5)
        for member in alive:
            try:
                member.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=5)
        for proc in self.procs:
            try:  # anything still in a leader's process group
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait(5)

    def tail(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-2500:]}" for log in self.logs)
