"""`make soak`: livecheck under load and faults for a bounded time, loopback only (issue 18).

Real Envoy running livecheck.wasm, the real livecheck-judge sidecar (release) storing results in a real
PostgreSQL server (judge/tests/postgres.sh, a throwaway one), the UPSTREAM DOUBLE (benches/upstream-double:
a scripted stand-in for the model vendor, not a model) and the JUDGE BACKEND DOUBLE
(tests/e2e/judge_backend_double.py: a scripted stand-in for the judge model). SOAK_CALLERS concurrent
callers (default 1,000) each run turns for SOAK_SECONDS (default 600) with a think time between turns,
mixing every kind of turn (plain, streamed, streamed and cut, refused, withheld, recovered, judged, tool
calls allowed and denied). While they run:

  - the judge backend answers 5xx, then garbage, then late (past the sidecar's timeout), each for a while;
  - the sidecar is killed (SIGKILL) and started again on the same port;
  - PostgreSQL is restarted once.

Then it asserts: no forbidden text reached any caller (no leak), every caller error is one the design
allows (a judged check that errored stops its turn: fail closed), every turn's results are stored exactly
once (each turn a caller saw is in the store with one row per check and attempt, or counted by the filter
as dropped or lost), and Envoy's and the sidecar's memory are flat once the faults are over (least-squares
slope of RSS printed). It prints latency percentiles per kind of turn and writes bench/results-soak.md
(SOAK_OUT for another path; SOAK_OUTAGE_SECONDS, default 2, how long the sidecar stays down). Every process it starts is stopped by its PID.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pathlib
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from envoy_process import Envoy, JudgeSidecar, render_config, wasm_path  # noqa: E402
from judge_backend_double import JudgeBackendDouble  # noqa: E402
from fault_runs import finish, stop_all  # noqa: E402
from postgres_server import Postgres  # noqa: E402

SECONDS = float(os.environ.get("SOAK_SECONDS", "600"))
CALLERS = int(os.environ.get("SOAK_CALLERS", "1000"))
THINK = float(os.environ.get("SOAK_THINK_SECONDS", "4"))
# How long the sidecar stays down after its SIGKILL (a restart takes ~2 s; a Kubernetes pod restart
# tens of seconds: the filter's outbox holds the reports meanwhile).
OUTAGE = float(os.environ.get("SOAK_OUTAGE_SECONDS", "2"))
# Faults end at 55% of the run; memory is judged from here on (high-water marks reached under faults,
# such as a fuller outbox or more turns held at once, stay: wasm memory never shrinks).
CALM_FROM = 0.62
OUT = pathlib.Path(os.environ.get("SOAK_OUT", REPO / "bench" / "results-soak.md"))
RELEASE = REPO / "target" / "release"
LEAK = b"project-bluebird"
LEAK_MARKER = "leak-the-codename"
API_TOKEN = "soak-operator-token-0123456789"
BLOCKED = "Not allowed."
HOST = "soak.test"

RULES = [
    {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
    {"name": "no-codename", "stage": "output", "kind": "not_contains", "expected": "project-bluebird"},
]


def version(checks: list, **extra) -> dict:
    return {"published": "1", "versions": {"1": {"blocked_reply": BLOCKED, "live_checks": checks, **extra}}}


POLICY = {
    "default_agent": "plain",
    "agents": {
        "plain": version(RULES),
        "recovering": version([RULES[0], {**RULES[1], "recover": True}], recover_attempts=1),
        "judged": version([RULES[0], {"name": "polite", "stage": "output", "kind": "polite_tone",
                                      "judge_model": "gpt-judge", "timeout_ms": 3000}]),
        "tools": version([RULES[0]], allowed_tools=["send_email", "lookup"], tool_checks=[
            {"name": "no-rival", "tool": "send_email", "args": [{"pointer": "/to", "not_contains": "@rival.example"}],
             "reason": "No mail to rivals."},
            {"name": "no-billing", "tool": "send_email", "when": "The email contains billing information",
             "reason": "No billing by mail.", "timeout_ms": 3000},
        ]),
    },
}


@dataclasses.dataclass
class Kind:
    """One kind of turn: its request, and the outcomes the design allows for it."""
    name: str
    agent: str
    question: str
    headers: dict
    stream: bool
    # what the caller may see: "answer" (the double's text), "blocked" (the blocked reply / refusal), "cut"
    # (a stream ended by content_filter), "denied" (a tool call refused)
    allowed: tuple
    weight: int


KINDS = [
    Kind("plain", "plain", "Where is my order?", {}, False, ("answer",), 20),
    Kind("streamed", "plain", "Tell me about my order.", {"x-bench-stream-tokens": "200", "x-bench-pace-us": "2000",
         "x-bench-event-chars": "8"}, True, ("answer",), 20),
    Kind("cut", "plain", f"Tell me the codename {LEAK_MARKER}.", {"x-bench-stream-tokens": "200",
         "x-bench-pace-us": "2000", "x-bench-event-chars": "8"}, True, ("cut",), 10),
    Kind("refused", "plain", "My password is hunter2.", {}, False, ("blocked",), 10),
    Kind("withheld", "plain", f"What is the codename {LEAK_MARKER}?", {}, False, ("blocked",), 10),
    Kind("recovered", "recovering", f"Which codename {LEAK_MARKER}?", {}, False, ("blocked", "answer"), 10),
    # A judged check that errors (the backend's 5xx, garbage, late) stops its turn: fail closed.
    Kind("judged", "judged", "Where is my parcel?", {}, False, ("answer", "blocked"), 10),
    Kind("tool-allowed", "tools", "Mail Bob.", {"x-bench-tool-call": "send_email",
         "x-bench-tool-arguments": json.dumps({"to": "bob@ok.example", "body": "See you Monday."})}, False,
         ("tool", "denied"), 5),
    Kind("tool-denied", "tools", "Mail the rival.", {"x-bench-tool-call": "send_email",
         "x-bench-tool-arguments": json.dumps({"to": "eve@rival.example", "body": "Hi"})}, False, ("denied",), 5),
]


@dataclasses.dataclass
class Turn:
    kind: str
    status: Optional[int]
    outcome: str
    seconds: float
    turn_id: Optional[str]
    leaked: bool


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- the caller side: a small HTTP/1.1 client over asyncio streams ---------------------------------


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict, bytes, bool]:
    """(status, headers, body, complete). A connection that ends early gives complete=False."""
    line = await reader.readline()
    if not line:
        raise ConnectionResetError("closed before a status line")
    status = int(line.split()[1])
    headers: dict = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = bytearray()
    try:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await reader.readline()).split(b";")[0], 16)
                if size == 0:
                    await reader.readline()
                    break
                body += await reader.readexactly(size)
                await reader.readexactly(2)
        elif "content-length" in headers:
            body += await reader.readexactly(int(headers["content-length"]))
        else:
            body += await reader.read()
    except (asyncio.IncompleteReadError, ConnectionResetError, ValueError) as e:
        if isinstance(e, asyncio.IncompleteReadError):
            body += e.partial
        return status, headers, bytes(body), False
    return status, headers, bytes(body), True


def classify(kind: Kind, status: Optional[int], headers: dict, body: bytes, complete: bool) -> str:
    if status is None:
        return "reset"
    if status != 200:
        return f"http-{status}"
    text = body.decode(errors="replace")
    if kind.stream:
        if '"finish_reason":"content_filter"' in text.replace(" ", ""):
            return "cut"
        if BLOCKED in text:
            return "blocked"
        return "answer" if complete and "[DONE]" in text else "broken-stream"
    try:
        reply = json.loads(body)
    except ValueError:
        return "unreadable"
    choice = (reply.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content = message.get("content") or ""
    if message.get("tool_calls"):
        return "tool"
    if kind.agent == "tools" and (choice.get("finish_reason") == "content_filter" or message.get("refusal")
                                  or "rival" in content or "billing" in content or BLOCKED in content):
        return "denied"
    if BLOCKED in content or choice.get("finish_reason") == "content_filter" or message.get("refusal"):
        return "blocked"
    return "answer"


async def one_turn(port: int, kind: Kind) -> Turn:
    body = json.dumps({"model": "gpt-4.1-mini", "stream": kind.stream,
                       "messages": [{"role": "user", "content": kind.question}]}).encode()
    headers = {"host": HOST, "content-type": "application/json", "content-length": str(len(body)),
               "x-core-agent": kind.agent, "connection": "close", **kind.headers}
    request = "POST /v1/chat/completions HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    started = time.monotonic()
    status, got_headers, got, complete = None, {}, b"", False
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        writer.write(request.encode() + b"\r\n" + body)
        await writer.drain()
        status, got_headers, got, complete = await asyncio.wait_for(read_response(reader), 60)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError):
        status = None
    finally:
        if writer is not None:
            writer.close()
    return Turn(kind.name, status, classify(kind, status, got_headers, got, complete), time.monotonic() - started,
                got_headers.get("x-core-response-id"), LEAK in got)


async def caller(port: int, stop_at: float, turns: list, rng: random.Random) -> None:
    kinds = [k for k in KINDS for _ in range(k.weight)]
    await asyncio.sleep(rng.uniform(0, THINK))
    while time.monotonic() < stop_at:
        turns.append(await one_turn(port, rng.choice(kinds)))
        await asyncio.sleep(rng.uniform(0.5 * THINK, 1.5 * THINK))


async def load(port: int, seconds: float, turns: list) -> None:
    stop_at = time.monotonic() + seconds
    await asyncio.gather(*(caller(port, stop_at, turns, random.Random(i)) for i in range(CALLERS)))


# --- the processes -----------------------------------------------------------------------------------


class UpstreamDouble:
    def __init__(self) -> None:
        self.process = subprocess.Popen([str(RELEASE / "upstream-double")], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.port = int(self.process.stdout.readline())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()


def rss_kib(pid: int) -> int:
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def slope_kib_per_min(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of (seconds, KiB) samples, in KiB per minute."""
    if len(samples) < 3:
        return 0.0
    xs = [t for t, _ in samples]
    ys = [v for _, v in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def percentile(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


# --- the run -------------------------------------------------------------------------------------------


def main() -> int:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-soak-"))
    workdir.chmod(0o755)  # PostgreSQL runs as `nobody` when this runs as root
    log(f"{CALLERS} callers for {SECONDS:.0f} s, think time ~{THINK} s; work in {workdir}")
    started: list = []
    failures: list[str] = []
    try:
        pg = Postgres(workdir)
        started.append(pg)
        upstream = UpstreamDouble()
        started.append(upstream)
        judge_backend = JudgeBackendDouble().start()
        started.append(judge_backend)
        sidecar = JudgeSidecar(
            workdir / "sidecar", binary=RELEASE / "livecheck-judge", timeout_ms=2000, max_concurrent=64,
            backends=[{"name": "double", "api": "openai", "base_url": judge_backend.base_url, "models": ["*"]}],
            tables={"store": {"url_env": "LIVECHECK_RESULTS_URL"}, "api": {"token_env": "LIVECHECK_API_TOKEN"}},
            arrays={"upstreams": [{"name": "double", "authority": HOST,
                                   "base_url": f"http://127.0.0.1:{upstream.port}", "timeout_ms": 10000}]},
            env={"LIVECHECK_RESULTS_URL": pg.url, "LIVECHECK_API_TOKEN": API_TOKEN, "RUST_LOG": "warn"},
        )
        started.append(sidecar)
        config = render_config(wasm_path("livecheck.wasm"), upstream.port, plugin_configuration=json.dumps(POLICY),
                               extra_clusters={"livecheck-judge": sidecar.port})
        envoy = Envoy(config, workdir / "envoy")
        started.append(envoy)

        turns: list[Turn] = []
        # (seconds into the run, pid, RSS KiB)
        memory: dict[str, list[tuple[float, int, int]]] = {"envoy": [], "sidecar": []}
        events: list[str] = []
        t0 = time.monotonic()

        def at(fraction: float) -> float:
            return t0 + fraction * SECONDS

        def chaos() -> None:
            # Faults from 10% to 55% of the run; from CALM_FROM on nothing is injected, and memory must
            # stay flat there. The sidecar is down for OUTAGE s (2 s by default, as long as a restart takes).
            plan = [
                (0.10, lambda: setattr(judge_backend, "chaos", "5xx"), "judge backend answers 5xx"),
                (0.16, lambda: setattr(judge_backend, "chaos", None), "judge backend healthy"),
                (0.22, lambda: os.kill(sidecar.pid, signal.SIGKILL), "sidecar killed (SIGKILL)"),
                (None, lambda: sidecar.start(same_port=True), f"sidecar started again, on its port, {OUTAGE:g} s later"),
                (0.30, lambda: setattr(judge_backend, "chaos", "garbage"), "judge backend answers garbage"),
                (0.36, lambda: setattr(judge_backend, "chaos", None), "judge backend healthy"),
                (0.42, pg.restart, "PostgreSQL restarted"),
                (0.48, lambda: setattr(judge_backend, "chaos", "late"), "judge backend answers late"),
                (0.55, lambda: setattr(judge_backend, "chaos", None), "judge backend healthy"),
            ]
            for fraction, act, what in plan:
                if fraction is None:
                    time.sleep(OUTAGE)
                while fraction is not None and time.monotonic() < at(fraction):
                    time.sleep(0.2)
                act()
                events.append(f"{time.monotonic() - t0:6.1f} s  {what}")
                log(what)

        def sample() -> None:
            while time.monotonic() < t0 + SECONDS:
                now = time.monotonic() - t0
                memory["envoy"].append((now, envoy.process.pid, rss_kib(envoy.process.pid)))
                if sidecar.running():
                    memory["sidecar"].append((now, sidecar.pid, rss_kib(sidecar.pid)))
                time.sleep(5)

        threads = [threading.Thread(target=chaos, daemon=True), threading.Thread(target=sample, daemon=True)]
        for t in threads:
            t.start()
        asyncio.run(load(envoy.port, SECONDS, turns))
        for t in threads:
            t.join(timeout=30)
        log(f"load over: {len(turns)} turns; letting the outbox drain")

        # Reports still waiting are delivered (the sidecar is up): wait until the store stops growing.
        stored_prev, quiet = -1, 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and quiet < 3:
            stored = int(pg.query("SELECT count(*) FROM turns")[0][0])
            quiet = quiet + 1 if stored == stored_prev else 0
            stored_prev = stored
            time.sleep(2)

        stats = envoy.stats("wasmcustom.livecheck.reports.")
        counted = {k.rsplit(".", 1)[-1]: v for k, v in stats.items()}
        seen_ids = {t.turn_id for t in turns if t.turn_id}
        stored_ids = {row[0] for row in pg.query("SELECT turn_id FROM turns")}
        duplicates = pg.query("SELECT turn_id, name, attempt, count(*) FROM results "
                              "GROUP BY turn_id, name, attempt HAVING count(*) > 1")
        missing = seen_ids - stored_ids
        unaccounted = len(missing) - counted.get("dropped", 0) - counted.get("lost", 0) - counted.get("refused", 0)

        leaks = [t for t in turns if t.leaked]
        by_kind = {k.name: k for k in KINDS}
        unexpected = [t for t in turns if t.outcome not in by_kind[t.kind].allowed]

        # The calm end of the run, for each process's last instance (the sidecar was restarted).
        windows = {}
        for name, samples in memory.items():
            last_pid = samples[-1][1] if samples else None
            windows[name] = [(t, v) for t, pid, v in samples if pid == last_pid and t >= CALM_FROM * SECONDS]
        slopes = {name: slope_kib_per_min(w) for name, w in windows.items()}
        mean_rss = {name: statistics.fmean([v for _, v in w] or [0]) for name, w in windows.items()}
        spans = {name: (w[-1][0] - w[0][0]) if len(w) > 1 else 0 for name, w in windows.items()}
        growth = {name: slopes[name] * spans[name] / 60 for name in slopes}

        if leaks:
            failures.append(f"{len(leaks)} turns leaked forbidden text to the caller")
        if unexpected:
            failures.append(f"{len(unexpected)} turns ended in an outcome the design does not allow")
        if duplicates:
            failures.append(f"{len(duplicates)} results stored more than once")
        if unaccounted > 0:
            failures.append(f"{unaccounted} turns' results neither stored nor counted as dropped or lost")
        for name in growth:
            limit = max(8 * 1024, 0.05 * mean_rss[name])
            if growth[name] > limit:
                failures.append(f"{name} memory grew {growth[name]:.0f} KiB in the calm end (limit {limit:.0f})")

        report = write_report(turns, events, counted, len(seen_ids), len(stored_ids & seen_ids), len(missing),
                              duplicates, slopes, mean_rss, growth, spans, memory, unexpected, leaks, failures)
        print(report)
    finally:
        stop_all(started)
    return finish("SOAK", failures, workdir)


def write_report(turns, events, counted, seen, stored, missing, duplicates, slopes, mean_rss, growth, spans,
                 memory, unexpected, leaks, failures) -> str:
    lines = [
        "# Soak (`make soak`, benches/soak.py)",
        "",
        f"{CALLERS} concurrent callers for {SECONDS:.0f} s (think time ~{THINK} s) through real Envoy and "
        "livecheck.wasm, the real sidecar (release) on a throwaway PostgreSQL, the upstream double and the "
        "judge backend double (both scripted stand-ins, not models). Loopback only; "
        f"git {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO, capture_output=True, text=True).stdout.strip()}, "
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores shared with other work.",
        "",
        "## Faults injected",
        "",
        *[f"- {e}" for e in events],
        "",
        "## Turns",
        "",
        "| kind | turns | outcomes | p50 ms | p90 ms | p99 ms | max ms |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for kind in KINDS:
        mine = [t for t in turns if t.kind == kind.name]
        outcomes: dict = {}
        for t in mine:
            outcomes[t.outcome] = outcomes.get(t.outcome, 0) + 1
        ms = [t.seconds * 1000 for t in mine]
        lines.append(f"| {kind.name} | {len(mine)} | " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
                     + f" | {percentile(ms, 50):.0f} | {percentile(ms, 90):.0f} | {percentile(ms, 99):.0f} | "
                     f"{max(ms, default=float('nan')):.0f} |")
    lines += [
        "",
        f"- Forbidden text at a caller: **{len(leaks)}** turns.",
        f"- Outcomes the design does not allow: **{len(unexpected)}**"
        + (": " + ", ".join(sorted({f'{t.kind}->{t.outcome}' for t in unexpected})) if unexpected else "") + ".",
        "",
        "## Results stored",
        "",
        f"- Turns callers saw with an id: {seen}; stored: {stored}; not stored: {missing}.",
        "- The filter's counters: " + ", ".join(f"{k} {v}" for k, v in sorted(counted.items())) + ".",
        f"- Results stored more than once: {len(duplicates)}.",
        "",
        "## Memory",
        "",
        f"RSS sampled every 5 s. Judged over the calm end of the run (from {CALM_FROM:.0%}, after the last fault)",
        "for each process's last instance (the sidecar's after its restart): the slope is a least-squares fit,",
        "the growth the slope over that window. The whole run, one sample a minute (MiB):",
        "",
        *[f"- {name}: " + " ".join(f"{v / 1024:.0f}" for i, (_, _, v) in enumerate(samples) if i % 12 == 0)
          for name, samples in memory.items()],
        "",
        "| process | window s | mean RSS KiB | slope KiB/min | growth KiB |",
        "| --- | ---: | ---: | ---: | ---: |",
        *[f"| {name} | {spans[name]:.0f} | {mean_rss[name]:.0f} | {slopes[name]:.1f} | {growth[name]:.0f} |"
          for name in slopes],
        "",
        "## Verdict",
        "",
        *([f"- FAILED: {f}" for f in failures] or ["- Passed: no leak, no undesigned outcome, every turn's results "
                                                   "stored once or counted, memory flat."]),
        "",
    ]
    text = "\n".join(lines)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
