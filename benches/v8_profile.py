#!/usr/bin/env python3
"""Where a livecheck turn's time goes inside Envoy's V8 (issue 16, step 1): `make bench-profile`.

Method (repeat it after a change and compare the tables):
- livecheck.wasm built with `--features profile` into `target/profile/` (`src/profile.rs`): every
  callback Envoy makes into the filter (`cb.*`), every host call the filter makes (`host.*`: the time
  V8 and Envoy's C++ side take for it, seen from the guest) and the main steps of the logic (`phase.*`)
  are timed with the host's clock (`proxy_get_current_time_nanoseconds`) and summed per name; the root
  context adds the sums to Envoy counters on its 200 ms tick. The shipped build contains none of it.
- One Envoy (`--concurrency 1`, V8, envoy/livecheck.yaml's shape) with `benches/rules.json` (5 input and
  5 output rule checks), the real sidecar (release, SQLite) taking the turn reports, and
  `benches/upstream-double` (a scripted Rust DOUBLE of Chat Completions, not a model).
- For scale, Envoy CPU per turn of the same workloads through the same Envoy config without the wasm
  filter and with the no-op filter (`benches/noop-filter`), each its own Envoy, run just before.
- One client, one keep-alive connection, one turn at a time. Workloads: 4 KiB non-streamed Chat turns;
  streamed Chat answers of 2,000 four-character deltas (one event per upstream write, as fast as the
  double writes them, so Envoy hands several to one body callback); and the same answer paced
  (`PACE_US` between writes), so each event is its own body callback, as a model's tokens arrive; and
  chunked (16 events per write, 1 ms apart, as `benches/streaming.py`'s verdict run writes them).
  `PROFILE_ONLY=stream-2k-chunked` (a comma-separated list) runs only the workloads named.
- After each workload the run waits until every turn report was answered by the sidecar, then reads the
  counters; per turn = the counter's growth over the workload ÷ its turns. Envoy CPU per turn (all its
  threads, /proc/<pid>/task/*/schedstat) is over the same span, so it includes the spans' own clock
  reads: `clock` (an empty span, timed on each tick) is what each span adds to the span around it.
"""
from __future__ import annotations

import http.client
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "benches"))

from compare import (BenchFailed, Envoy, UpstreamDouble, check, publish, run_bench, chat_body,  # noqa: E402
                     cpu_model)
from envoy_process import JudgeSidecar, render_config  # noqa: E402
from tool_checks import cpu_ns  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK") == "1"
TURNS = 300 if QUICK else 3000
STREAMS = 10 if QUICK else 60
# Streams written one event per upstream write, PACE_US apart, so each event is its own body
# callback (as a model's tokens arrive): the per-event cost, which the unpaced run hides.
PACED_STREAMS = 2 if QUICK else 6
PACE_US = 400
# Streams written CHUNK_EVENTS events to a write, CHUNK_PACE_US apart (`benches/streaming.py`'s chunked
# run, issue 13's CPU verdict): many events to a body callback, the chunking fixed.
CHUNKED_STREAMS = 4 if QUICK else 30
CHUNK_EVENTS = 16
CHUNK_PACE_US = 1000
# A 1 MiB Chat question (not run by default: PROFILE_ONLY=chat-1m): where Envoy's per-byte work for a
# body held whole goes (`make bench`'s V8 scanning row).
LARGE_TURNS = 5 if QUICK else 100
# PROFILE_ONLY: a comma-separated list of the workloads to run (chat-4k, stream-2k, stream-2k-paced,
# stream-2k-chunked, chat-1m); all but chat-1m by default.
ONLY = [w for w in os.environ.get("PROFILE_ONLY", "").split(",") if w]
STREAM_TOKENS = 2000
WARMUP = 50
# PROFILE_WASM: another profile build to measure (e.g. one of an earlier commit, for a before/after);
# PROFILE_OUT: where its report goes.
WASM = pathlib.Path(os.environ.get("PROFILE_WASM", REPO / "target" / "profile" / "wasm32-wasip1" / "release"
                                   / "livecheck.wasm"))
JUDGE_BIN = REPO / "target" / "release" / "livecheck-judge"
OUT = pathlib.Path(os.environ["PROFILE_OUT"]) if os.environ.get("PROFILE_OUT") else (
    (REPO / "target" / "bench" / "results-profile-quick.md") if QUICK else (REPO / "bench" / "results-profile.md"))
PREFIX = "wasmcustom.livecheck.profile."


NOOP = REPO / "target" / "wasm32-wasip1" / "release" / "noop_filter.wasm"


def envoy_config(upstream_port: int, judge_port: int, variant: str = "livecheck") -> dict:
    """envoy/livecheck.yaml's shape with the profile build of livecheck, the no-op filter (`noop`) or no
    wasm filter at all (`plain`), the same in every other way."""
    if variant == "noop":
        config = render_config(NOOP, upstream_port, plugin_name="noop", plugin_configuration="{}",
                               buffer_limit=4 << 20, extra_clusters={"livecheck-judge": judge_port})
    else:
        config = render_config(WASM, upstream_port, plugin_configuration=(REPO / "benches" / "rules.json").read_text(),
                               buffer_limit=4 << 20, extra_clusters={"livecheck-judge": judge_port})
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm.pop("common_http_protocol_options", None)
    if variant == "plain":
        hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] != "envoy.filters.http.wasm"]
    return config


def baseline_cpu(upstream: UpstreamDouble, judge: JudgeSidecar, workdir: pathlib.Path, variant: str) -> dict:
    """Envoy CPU per turn for the same workloads through Envoy with no wasm filter or the no-op one."""
    envoy = Envoy(envoy_config(upstream.port, judge.port, variant), workdir, f"envoy-{variant}")
    try:
        runs = workloads(envoy)
        for i in range(WARMUP):
            runs["chat-4k"][0](i)
        out = {}
        for name, (run, n) in runs.items():
            cpu0 = cpu_ns(envoy.pid)
            for i in range(n):
                run(i)
            out[name] = (cpu_ns(envoy.pid) - cpu0) / 1000 / n
        return out
    finally:
        envoy.stop()


def workloads(envoy: Envoy) -> dict:
    """One keep-alive connection; a 4 KiB non-streamed Chat turn, a streamed 2,000-token answer, the
    same answer paced (one event per body callback) and chunked (16 events per write, paced), and a
    1 MiB Chat question when PROFILE_ONLY names it: name → (run one, how many), the ones PROFILE_ONLY
    names."""
    conn = http.client.HTTPConnection("127.0.0.1", envoy.port, timeout=30)
    body = chat_body(4096)
    stream_headers = {"content-type": "application/json", "x-bench-stream-tokens": str(STREAM_TOKENS)}

    def turn(_i: int) -> None:
        conn.request("POST", "/v1/chat/completions", body=body, headers={"content-type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        check(r.status == 200 and b"choices" in data, f"a plain turn was answered {r.status}")

    def stream(_i: int) -> None:
        conn.request("POST", "/v1/chat/completions", body=chat_body(512), headers=stream_headers)
        r = conn.getresponse()
        data = r.read()
        check(r.status == 200 and data.rstrip().endswith(b"data: [DONE]"), "a stream did not end with [DONE]")

    def paced(_i: int) -> None:
        conn.request("POST", "/v1/chat/completions", body=chat_body(512),
                     headers={**stream_headers, "x-bench-pace-us": str(PACE_US)})
        r = conn.getresponse()
        data = r.read()
        check(r.status == 200 and data.rstrip().endswith(b"data: [DONE]"), "a paced stream did not end with [DONE]")

    def chunked(_i: int) -> None:
        conn.request("POST", "/v1/chat/completions", body=chat_body(512),
                     headers={**stream_headers, "x-bench-pace-us": str(CHUNK_PACE_US),
                              "x-bench-group": str(CHUNK_EVENTS)})
        r = conn.getresponse()
        data = r.read()
        check(r.status == 200 and data.rstrip().endswith(b"data: [DONE]"), "a chunked stream did not end with [DONE]")

    large = chat_body(1 << 20)

    def large_turn(_i: int) -> None:
        conn.request("POST", "/v1/chat/completions", body=large, headers={"content-type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        check(r.status == 200 and b"choices" in data, f"a 1 MiB turn was answered {r.status}")

    runs = {"chat-4k": (turn, TURNS), "stream-2k": (stream, STREAMS), "stream-2k-paced": (paced, PACED_STREAMS),
            "stream-2k-chunked": (chunked, CHUNKED_STREAMS), "chat-1m": (large_turn, LARGE_TURNS)}
    return {name: run for name, run in runs.items()
            if name == "chat-4k" or (name in ONLY if ONLY else name != "chat-1m")}


def profile(envoy: Envoy) -> dict[str, tuple[int, int]]:
    """name → (calls, ns) from the profile's counters."""
    out: dict[str, list[int]] = {}
    for name, value in envoy.stats().items():
        if name.startswith(PREFIX):
            span, what = name[len(PREFIX):].rsplit(".", 1)
            out.setdefault(span, [0, 0])[0 if what == "calls" else 1] = value
    return {k: (v[0], v[1]) for k, v in out.items()}


def reports_settled(envoy: Envoy, judge: JudgeSidecar, timeout: float = 30) -> None:
    """Waits until the outbox is empty: every report answered (the profile's `cb.report_answered`
    calls stop growing for a second) and one more tick flushed the counters."""
    last, still = None, 0.0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = profile(envoy).get("cb.report_answered", (0, 0))[0]
        if now == last:
            still += 0.25
            if still >= 1.0:
                time.sleep(0.5)
                return
        else:
            last, still = now, 0.0
        time.sleep(0.25)
    raise BenchFailed("turn reports were still being answered after 30 s")


def measure(envoy: Envoy, judge: JudgeSidecar, turns: int, run_one) -> dict:
    reports_settled(envoy, judge)
    before, cpu0 = profile(envoy), cpu_ns(envoy.pid)
    t0 = time.monotonic()
    for i in range(turns):
        run_one(i)
    wall = time.monotonic() - t0
    cpu1 = cpu_ns(envoy.pid)
    reports_settled(envoy, judge)
    after = profile(envoy)
    rows = {}
    for name, (calls, ns) in after.items():
        c0, n0 = before.get(name, (0, 0))
        rows[name] = (calls - c0, ns - n0)
    return {"turns": turns, "rows": rows, "cpu_us_per_turn": (cpu1 - cpu0) / 1000 / turns, "wall_s": wall}


def main() -> int:
    if not WASM.exists():
        raise BenchFailed(f"{WASM} is missing: `make bench-profile` builds it")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="livecheck-profile-") as tmp:
        workdir = pathlib.Path(tmp)
        upstream = UpstreamDouble()
        judge = JudgeSidecar(workdir / "sidecar", [
            {"name": "unused", "api": "openai", "base_url": "http://127.0.0.1:9", "models": ["*"]}],
            binary=JUDGE_BIN)
        baselines = {v: baseline_cpu(upstream, judge, workdir, v) for v in ("plain", "noop")}
        envoy = Envoy(envoy_config(upstream.port, judge.port), workdir, "envoy")
        try:
            runs = workloads(envoy)
            for i in range(WARMUP):
                runs["chat-4k"][0](i)
            results = {name: measure(envoy, judge, n, run) for name, (run, n) in runs.items()
                       if not ONLY or name in ONLY}
            stats = envoy.stats()
            version = envoy.version()
        finally:
            envoy.stop()
            judge.stop()
            upstream.stop()
    passed = stats.get("wasmcustom.livecheck.bench.out-codename.passed", 0)
    expected = WARMUP + sum(r["turns"] for r in results.values())
    check(passed >= expected, f"the output checks ran on too few turns ({passed} of {expected})")
    for name, r in results.items():
        r["baselines"] = {v: b[name] for v, b in baselines.items()}
    write(results, version, time.monotonic() - started)
    return 0


def write(results: dict, version: str, took: float) -> None:
    lines = [
        "# Where a turn's time goes inside Envoy's V8 (issue 16, step 1)",
        "",
        f"Generated by `benches/v8_profile.py` (`make bench-profile`) on {time.strftime('%Y-%m-%dT%H:%M')}, in "
        f"{took:.0f} s. The method is in the script's docstring; repeat it after a change and compare.",
        "",
        f"- Machine: {cpu_model()}, {os.cpu_count()} cores, Linux {platform.release()}; Envoy {version} (V8, "
        "`--concurrency 1`); livecheck.wasm built with `--features profile` (the timing is not in shipped builds).",
        "- `cb.*`: a callback into the filter, all it does included; `host.*`: one host call as the guest sees it "
        "(V8's crossing and Envoy's C++ side); `phase.*`: a step of the logic. Spans nest: a callback's time "
        "includes its host calls and phases, and every span inside it adds `clock` (two clock reads).",
        "- µs/turn = the counter's growth over the workload ÷ turns; the report callout's answer arrives on the "
        "root context (`cb.report_answered`), the report itself leaves from `cb.tick`.",
        "",
    ]
    for name, r in results.items():
        rows = r["rows"]
        turns = r["turns"]
        clock = rows.get("clock", (1, 0))
        clock_us = clock[1] / max(clock[0], 1) / 1000
        in_filter = sum(ns for n, (_, ns) in rows.items() if n.startswith("cb.")) / 1000 / turns
        lines += [f"## {name}: {turns} turns", "",
                  f"Envoy CPU per turn (all threads): livecheck (profile build) {r['cpu_us_per_turn']:.1f} µs, the no-op "
                  f"filter {r['baselines']['noop']:.1f} µs, no wasm filter {r['baselines']['plain']:.1f} µs (each run "
                  f"once, one after the other: indicative). Inside livecheck's callbacks: {in_filter:.1f} µs; one "
                  f"span's own cost (`clock`): {clock_us:.2f} µs.", "",
                  "| span | calls/turn | µs/turn | µs/call |", "|---|---:|---:|---:|"]
        for n, (calls, ns) in sorted(rows.items(), key=lambda kv: (kv[0].split(".")[0], -kv[1][1])):
            if n == "clock" or calls == 0:
                continue
            lines.append(f"| `{n}` | {calls / turns:.2f} | {ns / 1000 / turns:.2f} | {ns / 1000 / calls:.2f} |")
        lines.append("")
    publish(OUT, lines)


if __name__ == "__main__":
    run_bench(main, "v8_profile")
