"""``from_npz`` and ``from_safetensors`` take ``max_bytes`` with ``load``'s rule, for fsspec URLs
and local files alike: a size known in advance is refused before anything is read
(``SourceTooLargeError``), and a stream whose size nobody announced is cut after ``max_bytes + 1``
bytes. Real file systems: fsspec's ``memory://``, ``file://``, local paths, and an HTTP server on
loopback that sends no ``Content-Length`` (fsspec's ``http://`` file system)."""

from __future__ import annotations

import http.server
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, SourceTooLargeError

fsspec = pytest.importorskip("fsspec")

STATE = CheckpointState({"w": np.arange(4096, dtype=np.float32), "b": np.ones(16, np.float64)})
WRITERS: dict[str, Callable[..., None]] = {".npz": ortckpt.to_npz, ".safetensors": ortckpt.to_safetensors}
READERS: dict[str, Callable[..., CheckpointState]] = {
    ".npz": ortckpt.from_npz,
    ".safetensors": ortckpt.from_safetensors,
}


@pytest.fixture(params=sorted(WRITERS))
def flat_file(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, bytes]:
    ext: str = request.param
    path = tmp_path / f"m{ext}"
    WRITERS[ext](STATE, path)
    return ext, path.read_bytes()


def test_memory_urls_are_refused_past_max_bytes(flat_file: tuple[str, bytes], assert_same_state):
    ext, data = flat_file
    fs = fsspec.filesystem("memory")
    url = f"memory://ortckpt-{uuid.uuid4().hex[:8]}/m{ext}"
    with fs.open(url, "wb") as f:
        f.write(data)
    try:
        with pytest.raises(SourceTooLargeError, match=f"{len(data)} bytes exceed the size limit"):
            READERS[ext](url, max_bytes=len(data) - 1)
        assert_same_state(STATE, READERS[ext](url, max_bytes=len(data)))
    finally:
        fs.rm(url.replace("memory://", "/"))


def test_local_files_and_file_urls_are_refused_past_max_bytes(
    flat_file: tuple[str, bytes], tmp_path: Path, assert_same_state
):
    ext, data = flat_file
    path = tmp_path / f"local{ext}"
    path.write_bytes(data)
    for source in (path, str(path), f"file://{path}"):
        with pytest.raises(SourceTooLargeError, match="exceed the size limit"):
            READERS[ext](source, max_bytes=len(data) - 1)
        assert_same_state(STATE, READERS[ext](source, max_bytes=len(data)))


class _Unannounced(http.server.BaseHTTPRequestHandler):
    """Serves the class's bytes with no Content-Length (the body ends when the connection
    closes), and fails HEAD: the client cannot know the size in advance."""

    body = b""

    def do_HEAD(self) -> None:
        self.send_error(405)

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Connection", "close")
        self.end_headers()
        for at in range(0, len(self.body), 4096):
            try:
                self.wfile.write(self.body[at : at + 4096])
            except (BrokenPipeError, ConnectionResetError):
                return  # the reader stopped early, as it should past max_bytes

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def unannounced_server() -> Iterator[tuple[str, type[_Unannounced]]]:
    handler = type("Handler", (_Unannounced,), {"protocol_version": "HTTP/1.0"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_stream_of_unannounced_size_is_cut_at_max_bytes(
    flat_file: tuple[str, bytes], unannounced_server: tuple[str, type[_Unannounced]], assert_same_state
):
    pytest.importorskip("aiohttp")
    ext, data = flat_file
    base, handler = unannounced_server
    handler.body = data + bytes(8 << 20)  # 8 MiB more than the file: the copy must stop early
    url = f"{base}/m{ext}"
    with pytest.raises(SourceTooLargeError, match=f"more than {len(data)} bytes exceed"):
        READERS[ext](url, max_bytes=len(data))
    handler.body = data
    assert_same_state(STATE, READERS[ext](url, max_bytes=len(data)))
