"""Real HTTP servers on 127.0.0.1 for the remote-load tests, started and stopped by the tests:
nginx (from Debian) serving a folder with byte ranges and ETags, its access log counting the body
bytes of every reply; gcp-storage-emulator's GCS JSON API (``gcs_emulator``); and a fault proxy in
front of any of them (or of moto's S3 server) that ignores
``Range``, truncates, pads or stalls replies or changes the ETag after some requests, delays and
throttles replies, and counts the requests it has in flight."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def moto_s3(bucket: str | None = None) -> Iterator[dict[str, Any]]:
    """A fresh S3 server on 127.0.0.1 (moto's ``ThreadedMotoServer``), with ``bucket`` made when
    given: the ``storage_options`` that reach it, with fake credentials and
    no instance-metadata lookups (nothing leaves the machine); stopped, and the environment
    restored, afterwards."""
    import fsspec
    from moto.server import ThreadedMotoServer

    names = ("AWS_EC2_METADATA_DISABLED", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")
    saved = {k: os.environ.get(k) for k in names}
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    os.environ["AWS_CONFIG_FILE"] = os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options: dict[str, Any] = {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    try:
        if bucket is not None:
            fsspec.filesystem("s3", **options).mkdir(bucket)
        yield options
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def nginx_binary() -> str | None:
    """The nginx executable, or None when it is not installed (``apt-get install nginx-light``)."""
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


@dataclass
class Nginx:
    """An nginx serving ``root`` at ``url``; ``log`` holds one ``METHOD URI STATUS BYTES`` line per
    reply (the body bytes sent)."""

    url: str
    root: Path
    log: Path

    def replies(self) -> list[tuple[str, str, int, int]]:
        """``(method, uri, status, body bytes)`` of every reply so far."""
        out = []
        for line in self.log.read_text().splitlines():
            method, uri, status, sent = line.split()
            out.append((method, uri, int(status), int(sent)))
        return out

    def body_bytes(self, uri_suffix: str = "") -> int:
        return sum(sent for _, uri, _, sent in self.replies() if uri.endswith(uri_suffix))

    def clear(self) -> None:
        self.log.write_text("")


@contextlib.contextmanager
def nginx(root: Path, work: Path) -> Iterator[Nginx]:
    """nginx on a free port of 127.0.0.1 serving ``root`` (its files under ``work``); stopped
    when the block ends."""
    binary = nginx_binary()
    if binary is None:
        raise FileNotFoundError("nginx is not installed (apt-get install -y nginx-light)")
    port = free_port()
    work.mkdir(parents=True, exist_ok=True)
    log = work / "access.log"
    log.write_text("")
    user = "user root;" if os.geteuid() == 0 else ""  # the workers must read the test's files
    conf = work / "nginx.conf"
    conf.write_text(
        f"""
{user}
daemon off;
master_process off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log;
events {{ worker_connections 64; }}
http {{
    log_format counted '$request_method $request_uri $status $body_bytes_sent';
    access_log {log} counted;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        etag on;
    }}
}}
"""
    )
    proc = subprocess.Popen(
        [binary, "-p", str(work), "-c", str(conf), "-e", str(work / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"nginx exited with {proc.returncode}: {err}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("nginx did not start listening within 10 s")
            time.sleep(0.05)
        yield Nginx(f"http://127.0.0.1:{port}", root, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


@contextlib.contextmanager
def gcs_emulator(bucket: str) -> Iterator[str]:
    """gcp-storage-emulator (PyPI: its GCS JSON API, objects in memory, with ``bucket``) on a free
    port of 127.0.0.1: its URL (gcsfs's ``endpoint_url``). Stopped when the block ends.
    ``ModuleNotFoundError`` when the package is not installed."""
    from gcp_storage_emulator.server import create_server

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=bucket)
    server.start()  # returns once it listens
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


#: bytes the ``oversize`` fault adds after a range's body
OVERSIZE = 256 << 20


@dataclass
class Faults:
    """What the proxy does to replies. ``mode``: ``"pass"``, ``"ignore-range"`` (the Range header
    dropped: 200 with the whole object), ``"truncate"`` (a range's body cut to half, with a
    matching Content-Length), ``"close-early"`` (half the body sent, then the connection closed),
    ``"etag-change"`` (after ``after`` GET requests, every reply carries another ETag),
    ``"stall"`` (a GET is answered with nothing until ``released`` is set, then the connection is
    closed), ``"oversize"`` (a range's body followed by ``OVERSIZE`` bytes more, announced in its
    Content-Length: a server that sends far more than asked), ``"other-range"`` (the range asked
    moved by ``SHIFT`` bytes, or to the object's start, before it is forwarded: a 206 of the right
    length whose Content-Range honestly names other bytes), ``"unsized"`` (a server that does not
    report sizes: no Content-Length on HEAD or GET, ``Range`` ignored, each GET's whole object sent
    until the connection closes; every request). Every mode but ``"etag-change"`` and
    ``"unsized"`` applies to the GETs numbered ``after + 1`` to ``after + times`` (every GET after
    ``after`` when ``times`` is None).

    Whatever the mode: each GET waits ``delay`` seconds before it is forwarded (a server's
    latency), its body is sent at ``rate`` bytes per second (0: at once), and ``on_get(n)`` is
    called with its number first. ``peak`` is the most GETs the proxy had in flight (received,
    their reply not yet begun) at once,
    ``ranges`` the Range header of each GET ("" for none), ``body_bytes`` the body bytes of the
    GET replies sent. With ``ranged_only``, the GETs are numbered for the fault among those with a
    ``Range`` header only (``ranged_gets`` counts them), the others pass: a store whose metadata
    is read by GETs too (GCS) is faulted in its range requests whatever metadata a client asks."""

    mode: str = "pass"
    after: int = 0
    times: int | None = None
    ranged_only: bool = False
    ranged_gets: int = 0
    delay: float = 0.0
    rate: float = 0.0
    on_get: Callable[[int], None] | None = None
    gets: int = 0
    in_flight: int = 0
    peak: int = 0
    ranges: list[str] = field(default_factory=list)
    body_bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    released: threading.Event = field(default_factory=threading.Event)

    def applies(self, number: int) -> bool:
        """Whether the fault applies to the GET numbered ``number``."""
        return number > self.after and (self.times is None or number <= self.after + self.times)

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Returns once no GET is in flight (a client may leave a request running after the call
        that made it returned: gcsfs's ``info()``)."""
        deadline = time.monotonic() + timeout
        while self.in_flight:
            assert time.monotonic() < deadline, f"{self.in_flight} GETs still in flight after {timeout} s"
            time.sleep(0.01)

    def reset_counts(self) -> None:
        with self.lock:
            self.gets = self.ranged_gets = self.peak = self.body_bytes = 0
            self.ranges.clear()


SHIFT = 4096


def _moved(spec: str) -> str:
    """A ``bytes=a-b`` Range moved back by ``SHIFT`` bytes (to the object's start when ``a`` is
    smaller), forward when it starts at 0: the same length, other bytes."""
    found = re.fullmatch(r"bytes=(\d+)-(\d+)", spec.strip())
    if found is None:
        return spec
    first, last = int(found[1]), int(found[2])
    move = -min(SHIFT, first) if first else SHIFT
    return f"bytes={first + move}-{last + move}"


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int]
    faults: Faults

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _forward(self, method: str) -> None:
        faults = self.faults
        if method != "GET":
            self._reply(method, 0)
            return
        with faults.lock:
            faults.gets += 1
            number = faults.gets
            if self.headers.get("Range"):
                faults.ranged_gets += 1
                number = faults.ranged_gets if faults.ranged_only else number
            elif faults.ranged_only:
                number = 0  # never faulted
            faults.in_flight += 1
            faults.peak = max(faults.peak, faults.in_flight)
            faults.ranges.append(self.headers.get("Range", ""))
        self._waiting = True
        try:
            if faults.on_get is not None:
                faults.on_get(number)
            if faults.delay:
                time.sleep(faults.delay)
            self._reply(method, number)
        finally:
            self._answered()

    def _answered(self) -> None:
        """The GET's reply begins (counted once): a GET is in flight until then, not until this
        thread ends, since its client may read the whole reply and send its next request first
        (which counted one GET too many now and then)."""
        if getattr(self, "_waiting", False):
            self._waiting = False
            with self.faults.lock:
                self.faults.in_flight -= 1

    def _reply(self, method: str, number: int) -> None:
        """Forward the request; ``number``: the GET's number (0 for other methods)."""
        faults = self.faults
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        with faults.lock:
            changed = faults.mode == "etag-change" and faults.gets > faults.after
        mode = faults.mode if method == "GET" and faults.applies(number) else "pass"
        unsized = faults.mode == "unsized"
        if mode == "stall":  # the request was read; no byte of a reply is ever sent
            faults.released.wait(60)
            self.close_connection = True
            return
        if mode == "ignore-range" or unsized:
            headers = {k: v for k, v in headers.items() if k.lower() != "range"}
        if mode == "other-range":
            headers = {k: (_moved(v) if k.lower() == "range" else v) for k, v in headers.items()}
        conn = http.client.HTTPConnection(*self.upstream, timeout=10)
        try:
            conn.request(method, self.path, headers=headers)
            reply = conn.getresponse()
            body = reply.read()
        finally:
            conn.close()
        cut = mode in ("truncate", "close-early") and reply.status == 206
        sent = body[: len(body) // 2] if cut else body
        if mode == "oversize" and reply.status == 206:
            sent = body + bytes(OVERSIZE)
        self._answered()
        self.send_response(reply.status)
        for key, value in reply.getheaders():
            if key.lower() in ("connection", "transfer-encoding", "content-length"):
                continue
            if key.lower() == "etag" and changed:
                value = '"replaced-' + value.strip('"') + '"'
            self.send_header(key, value)
        if method == "HEAD":  # what the upstream announced for the body it did not send
            claimed = int(reply.getheader("Content-Length") or 0)
        else:
            claimed = len(body) if mode == "close-early" and cut else len(sent)
        if not unsized:
            self.send_header("Content-Length", str(claimed))
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            if method == "GET":
                self._send_body(sent)
            self.wfile.flush()
        except ConnectionError:  # the client stopped reading (as it should, past what it asked)
            pass
        self.close_connection = True

    def _send_body(self, body: bytes) -> None:
        """``body``, at ``faults.rate`` bytes per second when set; counted in ``body_bytes``."""
        faults = self.faults
        piece = max(1, int(faults.rate // 20)) if faults.rate else len(body) or 1
        view = memoryview(body)
        for start in range(0, len(body), piece):
            self.wfile.write(view[start : start + piece])
            with faults.lock:
                faults.body_bytes += len(view[start : start + piece])
            if faults.rate:
                time.sleep(piece / faults.rate)

    def do_GET(self) -> None:
        self._forward("GET")

    def do_HEAD(self) -> None:
        self._forward("HEAD")


@contextlib.contextmanager
def fault_proxy(upstream_url: str, faults: Faults) -> Iterator[str]:
    """A proxy on a free port of 127.0.0.1 in front of ``upstream_url`` (``http://host:port``)
    that applies ``faults``; its URL. Stopped when the block ends."""
    host, port = upstream_url.removeprefix("http://").split(":")
    handler = type("Handler", (_ProxyHandler,), {"upstream": (host, int(port)), "faults": faults})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        faults.released.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
