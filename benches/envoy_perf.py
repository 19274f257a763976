#!/usr/bin/env python3
"""Where Envoy's CPU per checked turn goes, by what code runs it (`make bench-perf`; not part of `make bench`).

`make bench-floor` says livecheck's own logic costs Envoy ~55-75 µs a 4 KiB turn over the floor, while the
same logic warm under Node's V8 takes ~20 µs (`profiling::turn::chat_4k_turns`). This splits Envoy's CPU by
sampling it with `perf` (cpu-clock, call graphs by frame pointer, which Envoy's release binary, V8's
compiled wasm and its stubs all keep) and sorting each sample by the code it landed in:

- `wasm`: V8's compiled code (anonymous executable memory, perf's `[JIT]`/`perf-PID.map`): the filter's
  own logic, and V8's stubs around it;
- `host calls`: Envoy's binary (its C++ and V8's, linked in), libc or the kernel, with compiled code
  below it on the stack: the host calls the filter makes (copying headers and bodies in, counters);
- `Envoy`: Envoy's binary with no compiled code below: Envoy's own work (codecs, the router, the
  event loop, the filter chain) and V8 entering the VM;
- `kernel`, `libc`: the same without compiled code below (the sockets, memcpy, malloc).

Variants: plain Envoy (a), the no-op filter (b), the floor (`benches/floor.py`'s `all`: the no-op filter
doing a checking filter's host work), the floor also writing 64 KiB of its own memory a turn (`touch=64`:
does a filter's data going through the caches slow Envoy's own code?), the floor also running 16,384
distinct steps of straight-line code a turn (`code=16`, ~400 KiB of wasm: does a filter's code?), the
floor also running 4,096 steps of two branches each that always go the same way (`branches=4`: does a
filter's branchy code, through the branch predictors Envoy's code shares?), livecheck (c), and
livecheck with no sidecar cluster, so that its turn reports fail at the callout (what the report
callouts cost Envoy), each as `benches/floor.py` runs it (compare.py's set-up, 4 KiB Chat turns to `benches/upstream-double`, a
scripted DOUBLE, not a model; livecheck reporting to the real sidecar). Per round and variant: a fresh
closed loop of 16 connections for PERF_S + 2 s (default 8), `perf record -F 4999 -g -p <envoy>` over
PERF_S s of it; CPU per request from the process's schedstat over the whole loop. A bucket's µs a
request = its share of the samples × that CPU per request. perf's sampling inflates every variant's CPU
(~5-10%), so compare the variants within this page, not with `make bench-floor`'s. PERF_REPEATS
rounds (default 3), variants interleaved; medians. PERF_PIN=1 pins Envoy to CPU 0 and the rest (this
script, oha, the double, the sidecar) to CPU 1. Every no-op variant loads the no-op filter built with
its `controls` feature (`target/controls/`, which the controls need). Writes `bench/results-perf.md`.
"""
from __future__ import annotations

import collections
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benches"))
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import compare  # noqa: E402
import floor  # noqa: E402
from compare import (Envoy, UpstreamDouble, check, publish, run_bench, chat_body, cpu_model,  # noqa: E402
                     git_hash, log, measured, oha)
from envoy_process import JudgeSidecar  # noqa: E402

SECONDS = float(os.environ.get("PERF_S", "8"))
REPEATS = int(os.environ.get("PERF_REPEATS", "3"))
OUT = pathlib.Path(os.environ.get("PERF_OUT", REPO / "bench" / "results-perf.md"))
# PERF_PIN=1: Envoy alone on CPU 0, everything else on CPU 1 (does sharing Envoy's core matter?).
PIN = os.environ.get("PERF_PIN", "") not in ("", "0")

# The no-op filter built with its controls (`code=`, `branches=`); every no-op variant here loads it.
CONTROLS = REPO / "target" / "controls" / "wasm32-wasip1" / "release" / "noop_filter.wasm"

VARIANTS = {
    "a": ("(a) plain Envoy", None),
    "b": ("(b) no-op filter", "{}"),
    "floor": ("the floor (`benches/floor.py`'s `all`)", floor.FLOORS["all"]),
    "floor+touch": ("the floor writing 64 KiB of its memory a turn", floor.FLOORS["all"] + ",touch=64"),
    "floor+code": ("the floor running ~400 KiB of straight-line code a turn", floor.FLOORS["all"] + ",code=16"),
    "floor+branches": ("the floor running 8,192 predictable branch sites a turn", floor.FLOORS["all"] + ",branches=4"),
    "c": ("(c) livecheck, `benches/rules.json`", None),
    "c-unreported": ("livecheck with no sidecar cluster (its reports fail at the callout)", None),
}
BUCKETS = ["wasm", "host calls", "Envoy", "kernel", "libc", "other"]


def config(port: int, v: str) -> dict:
    actions = VARIANTS[v][1]
    if actions is not None:
        return floor.floor_config(port, actions, wasm=CONTROLS)
    if v == "c-unreported":
        sidecar, compare.SIDECAR = compare.SIDECAR, None
        try:
            return compare.envoy_config(port, "c")
        finally:
            compare.SIDECAR = sidecar
    return compare.envoy_config(port, v)


def bucket(frames: list[str]) -> str:
    """The bucket of one sample, from the DSO of each frame, leaf first."""
    def compiled(dso: str) -> bool:
        return "[JIT]" in dso or "/perf-" in dso
    if not frames:
        return "other"
    if compiled(frames[0]):
        return "wasm"
    if any(compiled(d) for d in frames[1:]):
        return "host calls"
    leaf = frames[0]
    if "kernel" in leaf:
        return "kernel"
    if "libc" in leaf:
        return "libc"
    if leaf.endswith("/envoy)") or leaf.endswith("/envoy"):
        return "Envoy"
    return "other"


def shares(data: pathlib.Path) -> dict[str, float]:
    out = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,ip,dso"], capture_output=True,
                         text=True, timeout=600)
    check(out.returncode == 0, f"perf script failed: {out.stderr[-1000:]}")
    counts: collections.Counter = collections.Counter()
    frames: list[str] = []
    # A sample is a line naming its thread, then one indented line per frame (address, then DSO).
    for line in out.stdout.splitlines() + [""]:
        if line.startswith((" ", "\t")) and line.strip():
            frames.append(line.strip().split(None, 1)[-1])
        elif frames:
            counts[bucket(frames)] += 1
            frames = []
    total = sum(counts.values())
    check(total > 1000, f"perf took only {total} samples from {data}")
    return {b: counts[b] / total for b in BUCKETS}


def one_run(p: Envoy, double: UpstreamDouble, body: pathlib.Path, data: pathlib.Path) -> dict:
    """One closed loop through `p`, `perf` sampling Envoy over PERF_S s of it; compare.measured checks
    every request was answered and reached the double, and gives the CPU per request."""
    def sampled_load() -> dict:
        result: dict = {}
        loader = threading.Thread(target=lambda: result.update(
            oha(p.url, body, conns=compare.CONNECTIONS, duration=SECONDS + 2)))
        loader.start()
        time.sleep(1)
        rec = subprocess.run(["perf", "record", "-q", "-F", "4999", "-g", "-o", str(data), "-p", str(p.pid),
                              "--", "sleep", str(SECONDS)], capture_output=True, text=True, timeout=SECONDS + 60)
        loader.join()
        check(rec.returncode == 0, f"perf record failed: {rec.stderr[-1000:]}")
        check("ok" in result, "the load did not finish (oha failed: see above)")
        return result

    r = measured(p, double, sampled_load)
    cpu_us = r["cpu_us_per_req"]
    return {"cpu_us": cpu_us, "rps": r["rps"], **{b: s * cpu_us for b, s in shares(data).items()}}


def main() -> int:
    check(shutil.which("perf") is not None, "perf is not installed (linux-tools / linux-perf)")
    if PIN:
        check((os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None, "PERF_PIN needs two CPUs and taskset")
        os.sched_setaffinity(0, {1})
    for path in (compare.OHA, compare.DOUBLE_BIN, compare.JUDGE_BIN, CONTROLS):
        check(path.exists(), f"{path} is missing: run `make bench-perf`")
    started = time.monotonic()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-perf-"))
    double = UpstreamDouble()
    compare.SIDECAR = JudgeSidecar(workdir / "sidecar", [
        {"name": "unused", "api": "openai", "base_url": "http://127.0.0.1:9", "models": ["*"]}],
        binary=compare.JUDGE_BIN)
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    version = ""
    try:
        body = workdir / "body-4k.json"
        body.write_bytes(chat_body(compare.BODY_BYTES))
        order = list(VARIANTS)
        for rep in range(REPEATS):
            shift = rep % len(order)
            for v in order[shift:] + order[:shift]:
                # A fresh Envoy per run: perf attaches to its process, and V8's code is compiled anew.
                p = Envoy(config(double.port, v), workdir, f"perf-{v.replace('+', '-')}-{rep}")
                try:
                    floor.sanity(p)
                    if PIN:
                        # Envoy's threads alone on CPU 0; this script, and so the load, the double and
                        # the sidecar it started, on CPU 1.
                        subprocess.run(["taskset", "-a", "-pc", "0", str(p.pid)], capture_output=True, check=True)
                    oha(p.url, body, conns=compare.CONNECTIONS, duration=2)  # warm-up
                    runs[v].append(one_run(p, double, body, workdir / f"{v}-{rep}.data"))
                    version = version or p.version()
                finally:
                    p.stop()
                (workdir / f"{v}-{rep}.data").unlink(missing_ok=True)
                r = runs[v][-1]
                log(f"perf {v} {rep + 1}/{REPEATS}: {r['cpu_us']:.1f} µs CPU/req, " +
                    ", ".join(f"{b} {r[b]:.1f}" for b in BUCKETS))
    finally:
        compare.SIDECAR.stop()
        double.stop()
        shutil.rmtree(workdir, ignore_errors=True)  # a run's sidecar store grows to gigabytes
    write(runs, version, time.monotonic() - started)
    return 0


def write(runs: dict, version: str, took: float) -> None:
    def med(v: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[v])

    def cell(v: str, key: str) -> str:
        return compare.cell([x[key] for x in runs[v]], "{:.1f}")

    lines = [
        "# Where Envoy's CPU per checked turn goes, by the code that runs it (issue 16)",
        "",
        f"Generated by `benches/envoy_perf.py` (`make bench-perf`) on {time.strftime('%Y-%m-%dT%H:%M')}, in "
        f"{took:.0f} s; the method and the buckets are in the script's docstring.",
        "",
        f"- Machine: {cpu_model()}, {os.cpu_count()} cores; Envoy {version} (V8, `--concurrency 1`); "
        f"livecheck {git_hash()}." + (" Envoy pinned to CPU 0, everything else to CPU 1 (`PERF_PIN`)." if PIN else ""),
        f"- 4 KiB Chat turns, {REPEATS} rounds of {SECONDS:.0f} s sampled by `perf` (4,999 Hz, call graphs), "
        "variants interleaved; medians with min–max over rounds, µs of Envoy CPU a request (perf's sampling "
        "included: compare within this page).",
        "",
        "| variant | all | " + " | ".join(BUCKETS) + " | req/s |",
        "|---|---|" + "---|" * len(BUCKETS) + "---|",
    ]
    for v, (label, _) in VARIANTS.items():
        lines.append(f"| {label} | {cell(v, 'cpu_us')} | " + " | ".join(cell(v, b) for b in BUCKETS) +
                     f" | {compare.cell([x['rps'] for x in runs[v]], '{:.0f}')} |")
    lines += ["", "Differences of the medians, µs a request:", "",
              "| | all | " + " | ".join(BUCKETS) + " |", "|---|---|" + "---|" * len(BUCKETS)]
    for a, b, label in [("floor", "b", "the floor − the no-op filter"),
                        ("floor+touch", "floor", "64 KiB written a turn − the floor"),
                        ("floor+code", "floor", "~400 KiB of code run a turn − the floor"),
                        ("floor+branches", "floor", "8,192 branch sites run a turn − the floor"),
                        ("c", "floor", "livecheck − the floor"),
                        ("c", "c-unreported", "livecheck − livecheck unreported")]:
        lines.append(f"| {label} | {med(a, 'cpu_us') - med(b, 'cpu_us'):+.1f} | " +
                     " | ".join(f"{med(a, k) - med(b, k):+.1f}" for k in BUCKETS) + " |")
    lines.append("")
    publish(OUT, lines)


if __name__ == "__main__":
    run_bench(main, "bench-perf")
