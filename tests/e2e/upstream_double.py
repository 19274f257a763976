"""A scripted HTTP/1.1 upstream test double: stands in for the model vendor and the callout cluster.

It answers every request from a script (the default answer, or one per path), writes response bodies
in chunked encoding with a delay between chunks so Envoy reads each chunk separately (one body
callback per chunk), and records every request it received.
"""

from __future__ import annotations

import dataclasses
import http.server
import select
import socket
import threading
import time
from typing import Optional


@dataclasses.dataclass
class Answer:
    """One scripted answer. `body_chunks` go out as separate HTTP/1.1 chunks, `chunk_delay` apart;
    with `chunked=False` the body goes out at once with a content-length."""

    status: int = 200
    headers: dict = dataclasses.field(default_factory=dict)
    body_chunks: list = dataclasses.field(default_factory=list)
    chunk_delay: float = 0.06
    chunked: bool = True
    # Never answer (for callout timeouts): hold the request until the double stops or 10 s pass.
    hang: bool = False
    # Answer only after the default (upstream) answer was fully written, plus this many seconds.
    after_upstream_end: Optional[float] = None
    # Before each chunk, check whether the peer (Envoy) closed the connection; if so stop writing.
    # What happened is recorded in `UpstreamDouble.writes` either way.
    watch_peer: bool = False
    # Record when the first chunk containing this text was written (`Written.marked_at`).
    mark: Optional[bytes] = None
    # Wait this long (instead of `chunk_delay`) before the first chunk.
    first_delay: Optional[float] = None
    # Wait this long (instead of `chunk_delay`) before the chunk after the marked one: a model that
    # goes quiet.
    pause_after_mark: Optional[float] = None
    # Set by the test to stop writing (the double stops writing every answer when it stops, too).
    stop: Optional[threading.Event] = None


@dataclasses.dataclass
class Written:
    """How the double's answer to one request went out (times are `time.monotonic()`)."""

    path: str
    started: float
    chunks_written: int = 0
    # The body bytes written (chunk payloads, without the chunked framing).
    body_bytes: int = 0
    first_write: Optional[float] = None
    last_write: Optional[float] = None
    marked_at: Optional[float] = None
    # When the double saw the peer go away (closed or reset) before it finished; None if it never did.
    gone_at: Optional[float] = None
    completed: bool = False
    # The test (`Answer.stop`) or the double stopping ended the answer before it finished.
    stopped: bool = False


@dataclasses.dataclass
class Received:
    method: str
    path: str
    headers: dict  # lower-cased names; the last value wins
    body: bytes


class UpstreamDouble:
    def __init__(self) -> None:
        self.default = Answer(body_chunks=["no script"])
        # Upstream requests take these answers in turn (the last one repeats) before `default`.
        self.sequence: list[Answer] = []
        self.by_path: dict[str, Answer] = {}
        self.received: list[Received] = []
        self.incomplete: list[str] = []  # paths of requests whose body never completed
        self.writes: list[Written] = []  # one per answered request, in arrival order
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._upstream_done = threading.Event()
        double = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep pytest output readable
                pass

            def _serve(self) -> None:
                try:
                    body = self._read_body()
                except (ValueError, ConnectionError):
                    # Envoy gave up on the request mid-body (e.g. a 413 after the headers went out).
                    with double._lock:
                        double.incomplete.append(self.path)
                    self.close_connection = True
                    return
                path = self.path
                with double._lock:
                    double.received.append(
                        Received(self.command, path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    answer = double.by_path.get(path.split("?", 1)[0])
                    is_upstream = answer is None
                    if is_upstream and double.sequence:
                        answer = double.sequence.pop(0) if len(double.sequence) > 1 else double.sequence[0]
                    answer = answer or double.default
                written = Written(path, time.monotonic())
                with double._lock:
                    double.writes.append(written)
                try:
                    self._answer(answer, written)
                except (BrokenPipeError, ConnectionResetError):
                    written.gone_at = written.gone_at or time.monotonic()
                    self.close_connection = True
                finally:
                    if is_upstream:
                        double._upstream_done.set()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

            def _read_body(self) -> bytes:
                if "chunked" in self.headers.get("transfer-encoding", "").lower():
                    body = b""
                    while True:
                        size = int(self.rfile.readline().split(b";", 1)[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return body
                        body += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("content-length", "0") or 0)
                return self.rfile.read(length) if length else b""

            def _peer_closed(self) -> bool:
                sock = self.connection
                try:
                    readable, _, _ = select.select([sock], [], [], 0)
                    return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
                except (ConnectionResetError, OSError):
                    return True

            def _answer(self, answer: Answer, written: Written) -> None:
                if answer.hang:
                    double._stopping.wait(10)
                    self.close_connection = True
                    return
                if answer.after_upstream_end is not None:
                    double._upstream_done.wait(10)
                    time.sleep(answer.after_upstream_end)
                chunks = [c.encode() if isinstance(c, str) else c for c in answer.body_chunks]
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                if answer.chunked and chunks:
                    self.send_header("transfer-encoding", "chunked")
                else:
                    self.send_header("content-length", str(sum(len(c) for c in chunks)))
                self.end_headers()
                self.wfile.flush()
                if not (answer.chunked and chunks):
                    self.wfile.write(b"".join(chunks))
                    self.wfile.flush()
                    written.body_bytes = sum(len(c) for c in chunks)
                    written.completed = True
                    return
                for i, chunk in enumerate(chunks):
                    delay = answer.first_delay if (i == 0 and answer.first_delay is not None) else answer.chunk_delay
                    if answer.pause_after_mark is not None and written.marked_at is not None and i > 0 \
                            and answer.mark in chunks[i - 1]:
                        delay = answer.pause_after_mark
                    # A long wait watches the peer meanwhile, so a close is seen when it happens.
                    until = time.monotonic() + delay
                    while True:
                        step = min(until - time.monotonic(), 0.01 if answer.watch_peer else delay)
                        if step <= 0 or (answer.stop is not None and answer.stop.wait(step)):
                            break
                        if answer.stop is None:
                            time.sleep(step)
                        if answer.watch_peer and delay > 0.1 and self._peer_closed():
                            break
                    if double._stopping.is_set() or (answer.stop is not None and answer.stop.is_set()):
                        written.stopped = True
                        self.close_connection = True
                        return
                    if answer.watch_peer and self._peer_closed():
                        written.gone_at = time.monotonic()
                        self.close_connection = True
                        return
                    data = b"%x\r\n%s\r\n" % (len(chunk), chunk)
                    if i == len(chunks) - 1:
                        # The last chunk and the terminator in one write: Envoy delivers them as
                        # one body callback with end_of_stream.
                        data += b"0\r\n\r\n"
                    self.wfile.write(data)
                    self.wfile.flush()
                    written.chunks_written += 1
                    written.body_bytes += len(chunk)
                    written.last_write = time.monotonic()
                    written.first_write = written.first_write or written.last_write
                    if answer.mark is not None and written.marked_at is None and answer.mark in chunk:
                        written.marked_at = written.last_write
                written.completed = True

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="upstream-double", daemon=True)

    def start(self) -> "UpstreamDouble":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def script(self, default: Optional[Answer] = None, by_path: Optional[dict] = None,
               sequence: Optional[list[Answer]] = None) -> None:
        """Replace the script and forget what was received. `sequence`: the answers to upstream
        requests in turn (a first answer, then a retry's), the last one repeating."""
        with self._lock:
            self.default = default or Answer(body_chunks=["no script"])
            self.sequence = list(sequence or [])
            self.by_path = dict(by_path or {})
            self.received = []
            self.incomplete = []
            self.writes = []
            self._upstream_done.clear()

    def add_path(self, path: str, answer: Answer) -> None:
        """Script one more path without forgetting anything (for concurrent streams, one path each)."""
        with self._lock:
            self.by_path[path] = answer

    def written(self, path: str) -> Optional[Written]:
        """How the (first) answer to `path` went out, if it was requested."""
        with self._lock:
            return next((w for w in self.writes if w.path.split("?", 1)[0] == path), None)

    def requests(self, callouts: bool = False) -> list[Received]:
        """What the double received: upstream requests, or (callouts=True) requests to scripted paths."""
        with self._lock:
            return [r for r in self.received if (r.path.split("?", 1)[0] in self.by_path) == callouts]
