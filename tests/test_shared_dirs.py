"""Saves, journals and recovery in directories other users can write to, attacked as they would be.

Each attack here was first reproduced against the previous save protocol (issue 16), then fixed:

* a symlink at ``<ckpt>.data`` made an inline save delete, and an external save overwrite, the
  link's target;
* links re-planted at the journal's predictable temporary name got a victim file truncated;
* a forged journal made ``recover`` (or the next ``save``) rename an arbitrary file over the
  checkpoint;
* a FIFO at a helper name, or another process holding the directory's ``flock``, blocked
  ``save``/``recover`` forever;
* a directory copied with ``cp -a`` while holding an interrupted save could never be loaded,
  recovered or saved again;
* a 256-byte file name left a journal behind forever.

The same-user tests run everywhere. The cross-user tests need root: they use ``setpriv`` to plant
links, FIFOs and journals as one uid in a sticky (1777) and a group-writable (2775) directory, and
save as another uid; without root they are skipped with the reason shown. When the other uids
cannot read the clone (a 0700 directory), they run the base interpreter with a world-readable copy
of the built package (``ORTCKPT_TEST_COPY_FOR_OTHER_UIDS=1`` forces that path).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, InterruptedSaveError
from tests.helpers import checks

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux file semantics (flock, setpriv)")

TIMEOUT = 30.0
SECRET = b"the victim's private file\n"


def state(value: float) -> CheckpointState:
    return CheckpointState({"w": np.full(4096, value, dtype=np.float32)}, properties={"v": value})


def value_of(path: Path | str) -> float:
    return float(ortckpt.load(path, mmap=False).parameters["w"].data[0])


def promptly(fn: Callable[[], Any], timeout: float = TIMEOUT) -> BaseException | None:
    """``checks.promptly`` with this module's timeout."""
    return checks.promptly(fn, timeout)


def _checksum(body: str) -> str:
    """The journal's own checksum (BLAKE3, like the core), so forged journals parse."""
    blake3 = pytest.importorskip("blake3", reason="forging journals needs the blake3 package")
    digest: str = blake3.blake3(body.encode()).hexdigest()
    return digest


def helper_prefix(path: Path) -> str:
    """The helper-file prefix of ``path``'s checkpoint (``.ortckpt-<h>.``), from a real save's
    journal name (the only ``.ortckpt-*.journal`` of its directory) while a save is interrupted."""
    journal = [p.name for p in path.parent.glob(".ortckpt-*.journal")]
    assert len(journal) == 1, journal
    return journal[0][: -len("journal")]


def journal_path(path: Path) -> Path:
    """The journal name of ``path``: made visible by a save killed right after the journal."""
    probe = path.parent / ".probe" / path.name
    probe.parent.mkdir(exist_ok=True)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.environ["ORTCKPT_TEST_KILL_AT"] = "journal_committed"
        ortckpt.save(state(0.0), probe)
        os._exit(0)
    os.waitpid(pid, 0)
    name = helper_prefix(probe) + "journal"
    shutil.rmtree(probe.parent)
    return path.parent / name


# --- same user: links, FIFOs, forged journals, locks, copies, long names ---------------------


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external"])
def test_a_link_at_the_data_name_never_reaches_its_target(tmp_path: Path, external: bool) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(SECRET)
    path = tmp_path / "m.ckpt"
    ortckpt.save(state(1.0), path, external_data_threshold=0)
    os.unlink(tmp_path / "m.ckpt.data")
    os.symlink(victim, tmp_path / "m.ckpt.data")
    ortckpt.save(state(2.0), path, external_data_threshold=0 if external else None)
    assert victim.read_bytes() == SECRET
    data = tmp_path / "m.ckpt.data"
    assert data.exists() == external and not data.is_symlink()
    assert value_of(path) == 2.0


def test_links_planted_in_a_loop_never_touch_a_victim(tmp_path: Path) -> None:
    """A thread keeps planting links to a victim file at the journal name and at every helper name
    it sees appear, while saves run: the victim is never written, truncated or removed; each save
    either succeeds or fails with an error that says why."""
    work = tmp_path / "work"
    work.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(SECRET)
    path = work / "m.ckpt"
    ortckpt.save(state(0.0), path, external_data_threshold=0)
    journal = journal_path(path)
    prefix = journal.name[: -len("journal")]
    pid = os.getpid()
    predicted = {f"{prefix}{pid}.jtmp"} | {f"{prefix}{pid}-{n}.tmp" for n in range(64)}
    stop = threading.Event()

    def plant() -> None:
        while not stop.is_set():
            # the journal name, every helper name that appears, and the names an attacker could
            # predict from the saving process's pid (what the previous protocol used)
            names = {journal.name} | {n for n in os.listdir(work) if n.startswith(prefix)} | predicted
            for name in names:
                target = work / name
                try:
                    if not target.is_symlink():
                        tmp = work / f"link-{name}"
                        os.symlink(victim, tmp)
                        os.replace(tmp, target)
                except OSError:
                    pass

    planter = threading.Thread(target=plant, daemon=True)
    planter.start()
    outcomes: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 5.0
        i = 0
        while time.monotonic() < deadline:
            i += 1
            exc = promptly(
                functools.partial(ortckpt.save, state(float(i)), path, external_data_threshold=i % 2 * 1024)
            )
            key = "ok" if exc is None else type(exc).__name__
            outcomes[key] = outcomes.get(key, 0) + 1
            assert exc is None or isinstance(exc, OSError | InterruptedSaveError), repr(exc)
            assert victim.read_bytes() == SECRET
    finally:
        stop.set()
        planter.join()
    assert victim.read_bytes() == SECRET
    for name in os.listdir(work):
        if (work / name).is_symlink():
            os.unlink(work / name)
    ortckpt.recover(path)
    assert victim.read_bytes() == SECRET
    print(outcomes)


@pytest.mark.parametrize("forgery", ["garbage", "names-another-file", "wrong-digest"])
def test_a_forged_journal_never_renames_another_file_over_the_checkpoint(
    tmp_path: Path, forgery: str
) -> None:
    path = tmp_path / "m.ckpt"
    ortckpt.save(state(1.0), path)
    other = tmp_path / "other.ckpt"
    ortckpt.save(state(7.0), other)
    other_bytes, original = other.read_bytes(), path.read_bytes()
    journal = journal_path(path)
    st = os.stat(other)
    fake_temp = journal.name[: -len("journal")] + "ab" * 16 + ".tmp"
    if forgery == "wrong-digest":
        shutil.copy(other, tmp_path / fake_temp)
    name = {"garbage": "", "names-another-file": "other.ckpt", "wrong-digest": fake_temp}[forgery]
    body = (
        "ortckpt-journal 2\n"
        f"checkpoint {b'm.ckpt'.hex()}\n"
        f"new_checkpoint {name.encode().hex()} {st.st_size} {'00' * 32} {st.st_dev} {st.st_ino}\n"
        "new_external -\nold_checkpoint -\nold_external -\n"
    )
    text = body + f"end {_checksum(body)}\n"
    journal.write_text("forged\n" if forgery == "garbage" else text)
    recovered = promptly(lambda: ortckpt.recover(path))
    saved = promptly(lambda: ortckpt.save(state(3.0), path))
    assert other.read_bytes() == other_bytes
    if forgery == "garbage":  # unreadable: nothing is done, the error says what to check
        for exc in (recovered, saved):
            assert isinstance(exc, InterruptedSaveError) and "journal" in str(exc), repr(exc)
    else:  # its file is not there with the recorded bytes: undone, nothing renamed
        assert recovered is None and saved is None, (recovered, saved)
    exc = saved
    assert other.read_bytes() == other_bytes
    assert value_of(other) == 7.0
    # the checkpoint is the original, or the new save that went through after a clean recovery
    if exc is None:
        assert value_of(path) == 3.0
    else:
        assert path.read_bytes() == original


@pytest.mark.parametrize("where", ["journal", "data", "helper"])
def test_fifos_at_helper_names_fail_promptly(tmp_path: Path, where: str) -> None:
    path = tmp_path / "m.ckpt"
    ortckpt.save(state(1.0), path)
    fifo = {
        "journal": journal_path(path),
        "data": tmp_path / "m.ckpt.data",
        "helper": tmp_path / (journal_path(path).name[: -len("journal")] + "cd" * 16 + ".tmp"),
    }[where]
    os.mkfifo(fifo)
    save = promptly(lambda: ortckpt.save(state(2.0), path, external_data_threshold=0))
    recover = promptly(lambda: ortckpt.recover(path))
    if where == "helper":  # a random-named helper that is not ours is simply left alone
        assert save is None and recover is None
        assert value_of(path) == 2.0
    else:
        assert save is not None and "FIFO" in str(save), repr(save)
        if where == "journal":
            assert isinstance(recover, InterruptedSaveError) and "FIFO" in str(recover), repr(recover)
        if where == "journal":
            assert value_of(path) == 1.0  # a load is never blocked or misled by it
        else:  # a load opens ``.data`` when present: refused promptly, never read
            exc = promptly(lambda: value_of(path))
            assert isinstance(exc, OSError) and "FIFO" in str(exc), repr(exc)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@contextlib.contextmanager
def holding_flock(directory: Path, as_user: list[str] | None = None) -> Iterator[None]:
    """Another process (as another uid with ``as_user``, a setpriv prefix) holds ``directory``'s
    flock for the duration of the block."""
    code = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    cmd = [*(as_user or []), OTHER_PYTHON if as_user else sys.executable, "-c", code, str(directory)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd="/") as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
            yield
        finally:
            holder.kill()


def test_a_held_directory_lock_fails_after_the_bounded_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.ckpt"
    ortckpt.save(state(1.0), path)
    monkeypatch.setenv("ORTCKPT_LOCK_TIMEOUT", "0.5")
    with holding_flock(tmp_path):
        for op in (lambda: ortckpt.save(state(2.0), path), lambda: ortckpt.recover(path)):
            start = time.monotonic()
            exc = promptly(op)
            assert isinstance(exc, OSError), repr(exc)
            assert "commit lock" in str(exc) and str(tmp_path) in str(exc), str(exc)
            assert "ORTCKPT_LOCK_TIMEOUT" in str(exc)
            assert 0.4 < time.monotonic() - start < 10
    ortckpt.save(state(2.0), path)
    assert value_of(path) == 2.0
    assert sorted(os.listdir(tmp_path)) == ["m.ckpt"]


class _Stop(Exception):
    pass


def test_ctrl_c_interrupts_the_wait_for_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.ckpt"
    ortckpt.save(state(1.0), path)
    monkeypatch.setenv("ORTCKPT_LOCK_TIMEOUT", "60")

    def handler(signum: int, frame: object) -> None:
        raise _Stop

    previous = signal.signal(signal.SIGINT, handler)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    try:
        with holding_flock(tmp_path):
            timer.start()
            start = time.monotonic()
            with pytest.raises(_Stop):
                ortckpt.save(state(2.0), path)
            assert time.monotonic() - start < 10
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert value_of(path) == 1.0
    assert sorted(os.listdir(tmp_path)) == ["m.ckpt"]


@pytest.mark.parametrize("kill_at", ["journal_committed", "data_renamed", "ckpt_renamed"])
def test_a_copied_directory_with_an_interrupted_save_recovers(tmp_path: Path, kill_at: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    path = src / "m.ckpt"
    ortckpt.save(state(1.0), path, external_data_threshold=0)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.environ["ORTCKPT_TEST_KILL_AT"] = kill_at
        ortckpt.save(state(2.0), path, external_data_threshold=0)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(src), str(copy)], check=True)
    shutil.rmtree(src)  # the original is gone: only the copy (other inode numbers) is left
    copied = copy / "m.ckpt"
    try:
        before: float | None = value_of(copied)
    except InterruptedSaveError:
        before = None
    assert before in (None, 1.0, 2.0)
    assert ortckpt.recover(copied) == "new"  # the journal was committed: recovery completes it
    assert value_of(copied) == 2.0
    ortckpt.save(state(3.0), copied, external_data_threshold=0)
    assert value_of(copied) == 3.0
    assert sorted(os.listdir(copy)) == ["m.ckpt", "m.ckpt.data"]


def test_names_too_long_fail_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(OSError) as info:
        ortckpt.save(state(1.0), tmp_path / ("n" * 256))
    assert info.value.errno == errno.ENAMETOOLONG
    # 255 bytes: the checkpoint fits, its ``.data`` name does not
    with pytest.raises(OSError) as info:
        ortckpt.save(state(1.0), tmp_path / ("n" * 255), external_data_threshold=0)
    assert info.value.errno == errno.ENAMETOOLONG
    assert os.listdir(tmp_path) == []
    assert ortckpt.recover(tmp_path / ("n" * 255)) == "clean"


def test_own_symlinked_checkpoint_names_are_followed(tmp_path: Path) -> None:
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    link = tmp_path / "link.ckpt"
    link.symlink_to(real_dir / "m.ckpt")
    ortckpt.save(state(1.0), link, external_data_threshold=0)
    assert link.is_symlink() and (real_dir / "m.ckpt").is_file()
    # no ``link.ckpt.data`` exists, so the pair stays together beside the link's target
    # (docs/format.md); that name is a regular file, never a link
    data = real_dir / "m.ckpt.data"
    assert data.is_file() and not data.is_symlink() and not (tmp_path / "link.ckpt.data").exists()
    assert value_of(link) == 1.0 and value_of(real_dir / "m.ckpt") == 1.0


# --- two users (root only): sticky and group-writable directories ---------------------------

ROOT = os.geteuid() == 0 and shutil.which("setpriv") is not None
VICTIM, ATTACKER, GROUP = 41001, 41002, 41003


# What the other uids import: ortckpt (with its built native module) and its runtime dependencies,
# and onnx with its own (protobuf, in the ``google`` namespace, and typing_extensions, a module
# file) for the export case; a name not installed is left out.
_SHARED_PACKAGES = ("ortckpt", "numpy", "numpy.libs", "ml_dtypes", "ml_dtypes.libs")
_SHARED_FOR_ONNX = ("onnx", "onnx.libs", os.path.join("google", "protobuf"), "typing_extensions.py")


def _as_victim(python: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    probe = [
        "setpriv",
        f"--reuid={VICTIM}",
        f"--regid={VICTIM}",
        "--clear-groups",
        python,
        "-c",
        "import ortckpt",
    ]
    return subprocess.run(
        probe, capture_output=True, text=True, timeout=120, cwd="/", env={**os.environ, **env}
    )


def _world_readable_copy() -> str:
    """A 0755 directory under /tmp holding copies of the packages other uids need (removed at
    exit): for a clone (and its .venv) in a 0700 directory, which other uids cannot read."""
    import atexit
    import importlib.util

    shared = tempfile.mkdtemp(prefix="ortckpt-other-uids-", dir="/tmp")
    atexit.register(shutil.rmtree, shared, ignore_errors=True)
    os.chmod(shared, 0o755)
    roots = {
        os.path.dirname(os.path.dirname(importlib.util.find_spec(n).origin or ""))
        for n in ("ortckpt", "numpy", "onnx")
        if importlib.util.find_spec(n) is not None
    }
    for name in _SHARED_PACKAGES + _SHARED_FOR_ONNX:
        found = [os.path.join(r, name) for r in roots if os.path.exists(os.path.join(r, name))]
        if not found:
            continue
        os.makedirs(os.path.dirname(os.path.join(shared, name)), exist_ok=True)
        if os.path.isdir(found[0]):
            shutil.copytree(
                found[0], os.path.join(shared, name), ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copyfile(found[0], os.path.join(shared, name))
    for dirpath, dirnames, filenames in os.walk(shared):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            os.chmod(path, os.stat(path).st_mode | 0o444 | (0o111 if os.path.isdir(path) else 0))
    return shared


def _second_user_python() -> tuple[str, dict[str, str], str | None]:
    """The interpreter and environment other uids run ortckpt with, and why the cross-user tests
    cannot run here (None when they can). Root and setpriv are needed. This interpreter with
    this ortckpt is used when other uids can run it; when they cannot (the clone or its .venv in
    a 0700 directory), the venv's base interpreter with a world-readable copy of the built package
    and its dependencies; only when neither works are the tests skipped, with the reason."""
    if not ROOT:
        return sys.executable, {}, "cross-user attacks need root and setpriv (util-linux) to act as two uids"
    if (
        not os.environ.get("ORTCKPT_TEST_COPY_FOR_OTHER_UIDS")
        and _as_victim(sys.executable, {}).returncode == 0
    ):
        return sys.executable, {}, None
    python = os.path.realpath(sys.executable)
    env = {"PYTHONPATH": _world_readable_copy(), "PYTHONNOUSERSITE": "1"}
    done = _as_victim(python, env)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["exit status " + str(done.returncode)])[-1]
        return python, env, f"another uid cannot run {python} with a world-readable copy of ortckpt ({last})"
    return python, env, None


OTHER_PYTHON, OTHER_ENV, _NO_SECOND_USER = _second_user_python()
cross_user = pytest.mark.skipif(_NO_SECOND_USER is not None, reason=_NO_SECOND_USER or "")

# Run by setpriv as another uid: one operation, the outcome as JSON on stdout.
_ACT = r"""
import json, os, sys
import numpy as np
import ortckpt
op, path = sys.argv[1], sys.argv[2]
try:
    if op == "save":
        st = ortckpt.CheckpointState({"w": np.full(4096, float(sys.argv[3]), dtype=np.float32)})
        ortckpt.save(st, path, external_data_threshold=0 if sys.argv[4] == "1" else None)
        out = None
    elif op == "npz":
        st = ortckpt.CheckpointState({"w": np.full(4096, float(sys.argv[3]), dtype=np.float32)})
        ortckpt.to_npz(st, path)
        out = None
    elif op == "export":
        # an inference model whose tensors go to <out>.data (the writer's 2 GiB limit lowered)
        from ortckpt.deploy._export import plan_export
        from ortckpt.formats._onnx_write import write_model
        plan = plan_export(sys.argv[3], sys.argv[4], ["y"])
        out = write_model(plan.model, plan.initializers, path, limit=4096)
    elif op == "load":
        out = float(ortckpt.load(path, mmap=False).parameters["w"].data[0])
    elif op == "recover":
        out = ortckpt.recover(path)
    elif op == "symlink":
        os.symlink(sys.argv[3], path)
        out = None
    elif op == "mkfifo":
        os.mkfifo(path)
        out = None
    elif op == "write":
        with open(path, "w") as f:
            f.write(sys.argv[3])
        out = None
    print(json.dumps({"ok": out}))
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"""


def act(uid: int, gid: int, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", OTHER_PYTHON, "-c", _ACT, *args]
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd="/",
        env={**os.environ, **OTHER_ENV, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A world-traversable scratch root (pytest's tmp_path is private to root), with the victim's
    private home (0700) holding a secret file."""
    root = Path(tempfile.mkdtemp(prefix="ortckpt-shared-", dir="/tmp"))
    try:
        os.chmod(root, 0o755)
        home = root / "victim-home"
        home.mkdir(mode=0o700)
        (home / "secret").write_bytes(SECRET)
        os.chown(home / "secret", VICTIM, VICTIM)
        os.chown(home, VICTIM, VICTIM)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def shared_dir(root: Path, mode: int) -> Path:
    d = root / f"shared-{mode:o}"
    d.mkdir()
    os.chown(d, 0, GROUP)
    os.chmod(d, mode)
    return d


@cross_user
@pytest.mark.parametrize("mode", [0o1777, 0o2775], ids=["sticky-1777", "group-2775"])
@pytest.mark.parametrize("external", [False, True], ids=["inline", "external"])
def test_another_users_link_at_the_data_name(shared_root: Path, mode: int, external: bool) -> None:
    d = shared_dir(shared_root, mode)
    gid = GROUP if mode == 0o2775 else VICTIM
    agid = GROUP if mode == 0o2775 else ATTACKER
    path = d / "m.ckpt"
    secret = shared_root / "victim-home" / "secret"
    assert act(VICTIM, gid, "save", str(path), "1", "1") == {"ok": None}
    assert act(VICTIM, gid, "save", str(path), "2", "0") == {"ok": None}  # inline: no .data now
    assert act(ATTACKER, agid, "symlink", str(d / "m.ckpt.data"), str(secret)) == {"ok": None}
    result = act(VICTIM, gid, "save", str(path), "3", "1" if external else "0")
    assert secret.read_bytes() == SECRET, result
    if mode == 0o1777:
        # the attacker's link cannot be replaced in a sticky directory: refused before writing
        assert result.get("error") == "PermissionError" and "sticky" in result["message"], result
        assert act(VICTIM, gid, "load", str(path)) == {"ok": 2.0}
    else:
        assert result == {"ok": None}, result
        assert (d / "m.ckpt.data").is_symlink() is False
        assert act(VICTIM, gid, "load", str(path)) == {"ok": 3.0}
    assert secret.read_bytes() == SECRET


@cross_user
@pytest.mark.parametrize("mode", [0o1777, 0o2775], ids=["sticky-1777", "group-2775"])
def test_another_users_link_at_the_checkpoint_name_is_not_followed(shared_root: Path, mode: int) -> None:
    d = shared_dir(shared_root, mode)
    gid, agid = (GROUP, GROUP) if mode == 0o2775 else (VICTIM, ATTACKER)
    secret = shared_root / "victim-home" / "secret"
    path = d / "m.ckpt"
    assert act(ATTACKER, agid, "symlink", str(path), str(secret)) == {"ok": None}
    result = act(VICTIM, gid, "save", str(path), "1", "0")
    assert result.get("error") == "PermissionError", result
    assert f"uid {ATTACKER}" in result["message"] and "does not follow" in result["message"], result
    assert secret.read_bytes() == SECRET
    assert act(VICTIM, gid, "recover", str(path))["error"] == "PermissionError"
    assert secret.read_bytes() == SECRET


@cross_user
@pytest.mark.parametrize("mode", [0o1777, 0o2775], ids=["sticky-1777", "group-2775"])
def test_another_users_link_at_an_output_name_is_not_followed(shared_root: Path, mode: int) -> None:
    """Every writer's atomic output (here ``to_npz``) applies the checkpoint name's link rule."""
    d = shared_dir(shared_root, mode)
    gid, agid = (GROUP, GROUP) if mode == 0o2775 else (VICTIM, ATTACKER)
    secret = shared_root / "victim-home" / "secret"
    out = d / "m.npz"
    assert act(ATTACKER, agid, "symlink", str(out), str(secret)) == {"ok": None}
    result = act(VICTIM, gid, "npz", str(out), "1")
    assert result.get("error") == "PermissionError" and f"uid {ATTACKER}" in result["message"], result
    assert secret.read_bytes() == SECRET
    assert sorted(os.listdir(d)) == ["m.npz"]


@cross_user
@pytest.mark.parametrize("mode", [0o1777, 0o2775], ids=["sticky-1777", "group-2775"])
def test_another_users_link_at_an_exports_data_name(shared_root: Path, mode: int) -> None:
    """An exported model's ``<out>.data`` follows a checkpoint's ``.data`` rule: in a directory
    the attacker owns, the link the attacker planted there is replaced as a name (or, in a
    sticky directory, refused), never followed. Before: followed as a link of the directory's
    owner, and the victim's private file replaced with tensor bytes (issue 32, item 3)."""
    onnx = pytest.importorskip("onnx")
    from tests.deploy.test_export import _ckpt, _eval_model

    d = shared_root / f"attackers-{mode:o}"
    d.mkdir()
    os.chown(d, ATTACKER, GROUP)
    os.chmod(d, mode)
    gid, agid = (GROUP, GROUP) if mode == 0o2775 else (VICTIM, ATTACKER)
    secret = shared_root / "victim-home" / "secret"
    inputs = shared_root / "inputs"
    inputs.mkdir(mode=0o755)
    eval_model = _eval_model(inputs / "eval.onnx", w_shape=[3, "n"])
    ckpt = _ckpt(inputs / "t.ckpt", w=np.ones((3, 700), np.float32), unrelated=None)
    out = d / "model.onnx"
    assert act(ATTACKER, agid, "symlink", str(d / "model.onnx.data"), str(secret)) == {"ok": None}
    result = act(VICTIM, gid, "export", str(out), str(eval_model), str(ckpt))
    assert secret.read_bytes() == SECRET, result
    if mode == 0o1777:
        assert result.get("error") == "PermissionError" and "sticky" in result["message"], result
        assert not out.exists()
    else:
        assert result == {"ok": True}, result  # True: the tensors went to model.onnx.data
        assert not (d / "model.onnx.data").is_symlink()
        loaded = onnx.load(out)
        assert [t.name for t in loaded.graph.initializer] == ["c", "w", "b"]
    assert secret.read_bytes() == SECRET


@cross_user
@pytest.mark.parametrize("mode", [0o1777, 0o2775], ids=["sticky-1777", "group-2775"])
@pytest.mark.parametrize("plant", ["fifo", "forged", "link"])
def test_another_users_file_at_the_journal_name(shared_root: Path, mode: int, plant: str) -> None:
    d = shared_dir(shared_root, mode)
    gid, agid = (GROUP, GROUP) if mode == 0o2775 else (VICTIM, ATTACKER)
    secret = shared_root / "victim-home" / "secret"
    path = d / "m.ckpt"
    assert act(VICTIM, gid, "save", str(path), "1", "1") == {"ok": None}
    other = d / "other.ckpt"
    assert act(VICTIM, gid, "save", str(other), "9", "0") == {"ok": None}
    probe = shared_root / "probe"
    probe.mkdir()
    journal = d / journal_path(probe / "m.ckpt").name
    if plant == "fifo":
        planted = act(ATTACKER, agid, "mkfifo", str(journal))
    elif plant == "link":
        planted = act(ATTACKER, agid, "symlink", str(journal), str(secret))
    else:
        st = os.stat(other)
        body = (
            "ortckpt-journal 2\n"
            f"checkpoint {b'm.ckpt'.hex()}\n"
            f"new_checkpoint {b'other.ckpt'.hex()} {st.st_size} {'00' * 32} {st.st_dev} {st.st_ino}\n"
            "new_external -\nold_checkpoint -\nold_external -\n"
        )
        planted = act(ATTACKER, agid, "write", str(journal), body + f"end {_checksum(body)}\n")
    assert planted == {"ok": None}
    start = time.monotonic()
    saved = act(VICTIM, gid, "save", str(path), "2", "1")
    recovered = act(VICTIM, gid, "recover", str(path))
    assert time.monotonic() - start < TIMEOUT
    assert secret.read_bytes() == SECRET
    assert act(VICTIM, gid, "load", str(other)) == {"ok": 9.0}, "another file was renamed"
    loaded = act(VICTIM, gid, "load", str(path))
    if mode == 0o1777 or plant != "forged":
        # not trusted (another user's, in a sticky directory; or not a regular file): nothing done
        assert saved.get("error") == "InterruptedSaveError" and "journal" in saved["message"], saved
        assert recovered.get("error") == "InterruptedSaveError", recovered
        assert loaded == {"ok": 1.0}, loaded  # loads ignore it
    else:
        # a group member's journal is read, but its file does not have the recorded bytes: the
        # save is undone (nothing renamed over the checkpoint) and the next save goes through
        assert saved == {"ok": None}, saved
        assert loaded == {"ok": 2.0}, loaded


@cross_user
def test_another_user_holding_the_directory_lock(shared_root: Path) -> None:
    d = shared_dir(shared_root, 0o1777)
    path = d / "m.ckpt"
    assert act(VICTIM, VICTIM, "save", str(path), "1", "0") == {"ok": None}
    setpriv = ["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}", "--clear-groups"]
    with holding_flock(d, setpriv):
        start = time.monotonic()
        result = act(VICTIM, VICTIM, "save", str(path), "2", "0", env={"ORTCKPT_LOCK_TIMEOUT": "0.5"})
        assert time.monotonic() - start < TIMEOUT
        assert result.get("error") == "OSError" and "commit lock" in result["message"], result
    assert act(VICTIM, VICTIM, "load", str(path)) == {"ok": 1.0}
    assert sorted(os.listdir(d)) == ["m.ckpt"]
