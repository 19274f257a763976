#!/usr/bin/env python3
"""What Envoy charges any checking filter, before it decides anything (`make bench-floor`; not part of
`make bench`): issue 16's floor.

A filter that checks a non-streamed turn must ask Envoy for some things whatever its logic: hold the
request body until it is whole, copy it into the VM, read the header maps, mark the answer unencoded,
hold and copy the answer, drop its `content-length` (a withheld answer changes size), add a turn-id
header, count its checks. `benches/noop-filter` given those actions in its plugin configuration does
them and nothing else (no parse, no scan, no report). Measured against plain Envoy, the no-op filter
and livecheck, this splits livecheck's CPU over the no-op filter into what the host work costs
(Envoy's side and V8's crossings included, which the in-VM profile of `make bench-profile` cannot see)
and what livecheck's own logic costs.

Method: `benches/compare.py` section 1's set-up (envoy/livecheck.yaml's shape, V8, `--concurrency 1`,
4 KiB Chat requests to `benches/upstream-double`, a scripted DOUBLE of Chat Completions, not a model;
livecheck with `benches/rules.json` reporting to the real sidecar), one Envoy per variant, closed loop at
16 connections for 8 s a run, the variants interleaved and rotated for FLOOR_REPEATS rounds (default 5).
CPU per request = the Envoy process's CPU (every thread, ns) over a run ÷ requests answered; a run counts
only when every request was answered 200 and reached the double. Writes `bench/results-floor.md`.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from typing import Optional

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benches"))
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import compare  # noqa: E402
from compare import (Envoy, UpstreamDouble, check, publish, run_bench, chat_body, cpu_model,  # noqa: E402
                     git_hash, log, measured, oha)
from envoy_process import JudgeSidecar, render_config  # noqa: E402

REPEATS = int(os.environ.get("FLOOR_REPEATS", "5"))
# FLOOR_ONLY: a comma-separated list of the variants to run (a and b, which every figure is relative to,
# always run; c and FLOORS' names); all by default.
ONLY = [v for v in os.environ.get("FLOOR_ONLY", "").split(",") if v]
# A partial run (FLOOR_ONLY) does not replace the full one's page.
OUT = pathlib.Path(os.environ.get("FLOOR_OUT", REPO / ("target/bench/results-floor-partial.md" if ONLY
                                                         else "bench/results-floor.md")))
NOOP = REPO / "target" / "wasm32-wasip1" / "release" / "noop_filter.wasm"

# Each floor variant: the no-op filter given these actions (benches/noop-filter/src/lib.rs).
FLOORS = {
    "maps": "request_header_map,response_header_map",
    "lookups": "lookups",
    "crossings": "crossings",
    "writes": "accept_encoding,turn_id",
    "no-length": "drop_content_length",
    "headers": "request_headers,response_headers",
    "hold": "hold_request,hold_response",
    "hold+read": "hold_request,read_request,hold_response,read_response",
    "counters": "counters",
    "all": "request_headers,hold_request,read_request,response_headers,hold_response,read_response,counters",
}
LABELS = {
    "a": "(a) plain Envoy",
    "b": "(b) no-op filter",
    "maps": "both header maps read whole",
    "lookups": "ten request headers and three of the answer's read one at a time instead",
    "crossings": "a hundred clock reads (host calls returning no data) in each body and header callback",
    "writes": "`accept-encoding: identity` set, a turn-id header added",
    "no-length": "the answer's `content-length` dropped (so it goes to the caller chunked)",
    "headers": "the three above together",
    "hold": "both bodies held until whole (nothing read)",
    "hold+read": "both bodies held and copied into the VM",
    "counters": "ten counters incremented per turn",
    "all": "**the floor**: all of the above",
    "c": "(c) livecheck, `benches/rules.json`",
}


def floor_config(port: int, actions: str, wasm: Optional[pathlib.Path] = None) -> dict:
    """compare.py's (b) config with the no-op filter given `actions` (and loaded from `wasm`, another
    build of it, when given)."""
    config = compare.envoy_config(port, "b")
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    for f in hcm["http_filters"]:
        if f["name"] == "envoy.filters.http.wasm":
            f["typed_config"]["config"]["configuration"]["value"] = actions
            if wasm is not None:
                f["typed_config"]["config"]["vm_config"]["code"]["local"]["filename"] = str(wasm)
    return config


def sanity(proxy: Envoy) -> None:
    status, headers, body = compare.post(proxy.url, chat_body(compare.BODY_BYTES))
    check(status == 200 and b"Your order left our depot" in body, f"{proxy.url} did not forward a plain turn: {status}")


def main() -> int:
    for path in (compare.OHA, compare.DOUBLE_BIN, compare.JUDGE_BIN, NOOP):
        check(path.exists(), f"{path} is missing: run `make bench-floor`")
    started = time.monotonic()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-floor-"))
    double = UpstreamDouble()
    compare.SIDECAR = JudgeSidecar(workdir / "sidecar", [
        {"name": "unused", "api": "openai", "base_url": "http://127.0.0.1:9", "models": ["*"]}],
        binary=compare.JUDGE_BIN)
    proxies: dict[str, Envoy] = {}
    try:
        for v in ["a", "b", *FLOORS, "c"]:
            if ONLY and v not in ("a", "b", *ONLY):
                continue
            config = (floor_config(double.port, FLOORS[v]) if v in FLOORS
                      else compare.envoy_config(double.port, v))
            proxies[v] = Envoy(config, workdir, f"floor-{v.replace('+', '-')}")
        check(all(v in proxies for v in ONLY), f"FLOOR_ONLY names an unknown variant: {ONLY}")
        for p in proxies.values():
            sanity(p)
        counters_before = proxies["all"].stats() if "all" in proxies else {}
        body = workdir / "body-4k.json"
        body.write_bytes(chat_body(compare.BODY_BYTES))
        for p in proxies.values():  # warm-up
            measured(p, double, lambda p=p: oha(p.url, body, conns=compare.CONNECTIONS, duration=2))
        runs: dict[str, list[dict]] = {v: [] for v in proxies}
        order = list(proxies)
        for rep in range(REPEATS):
            shift = rep % len(order)
            for v in order[shift:] + order[:shift]:
                p = proxies[v]
                runs[v].append(measured(p, double, lambda p=p: oha(p.url, body, conns=compare.CONNECTIONS,
                                                                   duration=compare.THROUGHPUT_S)))
                log(f"floor {v} {rep + 1}/{REPEATS}: {runs[v][-1]['rps']:.0f} req/s, "
                    f"{runs[v][-1]['cpu_us_per_req']:.1f} µs CPU/req")
        if "all" in proxies:
            # The floor did its work: each of its ten counters moved once per request it answered.
            after = proxies["all"].stats()
            moved = {k: after[k] - counters_before.get(k, 0) for k in after if k.startswith("wasmcustom.floor.")}
            served = sum(x["ok"] for x in runs["all"])
            check(len(moved) == 10 and all(n >= served for n in moved.values()),
                  f"the floor filter did not count every turn: {moved} for {served}")
        version = proxies["a"].version()
    finally:
        for p in proxies.values():
            p.stop()
        compare.SIDECAR.stop()
        double.stop()
        shutil.rmtree(workdir, ignore_errors=True)  # a run's sidecar store grows to gigabytes
    write(runs, version, time.monotonic() - started)
    return 0


def write(runs: dict, version: str, took: float) -> None:
    cpu = {v: [x["cpu_us_per_req"] for x in rs] for v, rs in runs.items()}
    rps = {v: [x["rps"] for x in rs] for v, rs in runs.items()}

    def cell(xs: list[float], fmt: str = "{:.1f}") -> str:
        return compare.cell(xs, fmt)

    def over(v: str, base: str) -> list[float]:
        return [x - y for x, y in zip(cpu[v], cpu[base])]

    lines = [
        "# What Envoy charges any checking filter (issue 16's floor)",
        "",
        f"Generated by `benches/floor.py` (`make bench-floor`) on {time.strftime('%Y-%m-%dT%H:%M')}, in "
        f"{took:.0f} s; the method is in the script's docstring.",
        "",
        f"- Machine: {cpu_model()}, {os.cpu_count()} cores; Envoy {version} (V8, `--concurrency 1`); "
        f"livecheck {git_hash()}.",
        f"- 4 KiB Chat requests, {REPEATS} rounds of 8 s closed loop at 16 connections, variants interleaved; "
        "medians with min–max over rounds; \"over (b)\" is per round, then the median.",
        "",
        "| variant | Envoy CPU µs/request | over (b), µs | req/s | ÷ plain req/s |",
        "|---|---|---|---|---|",
    ]
    plain = statistics.median(rps["a"])
    for v in runs:
        actions = f" (`{FLOORS[v]}`)" if v in FLOORS else ""
        ob = "–" if v in ("a", "b") else cell(over(v, "b"))
        lines.append(f"| {LABELS[v]}{actions} | {cell(cpu[v])} | {ob} | {cell(rps[v], '{:.0f}')} | "
                     f"{statistics.median(rps[v]) / plain:.2f}x |")
    if "all" not in runs or "c" not in runs:
        lines.append("")
    else:
        floor, lc = statistics.median(over("all", "b")), statistics.median(over("c", "b"))
        logic = statistics.median(over("c", "all"))
        lines += [
            "",
            f"- The floor over the no-op filter: **{floor:.1f} µs** a request (issue 16's goal for all of "
            f"livecheck over the no-op filter: 25 µs); livecheck over the no-op filter {lc:.1f} µs, of which "
            f"its own logic (livecheck − the floor, per round) **{logic:.1f} µs**.",
            f"- Issue 56's goal, livecheck ≤ 15 µs over the floor: {logic:.1f} µs "
            f"({min(over('c', 'all')):.1f}–{max(over('c', 'all')):.1f} over the rounds, ≤ 15 µs in "
            f"{sum(x <= 15 for x in over('c', 'all'))} of {len(over('c', 'all'))}): "
            + ("**met**." if logic <= 15 else f"**missed** by {logic - 15:.1f} µs."),
            f"- Throughput: the floor {statistics.median(rps['all']) / plain:.2f}x plain, livecheck "
            f"{statistics.median(rps['c']) / plain:.2f}x (goal 0.75x; livecheck's turn reports also go to the "
            "sidecar, which takes CPU from the same two cores; the floor sends none).",
            "",
        ]
    publish(OUT, lines)


if __name__ == "__main__":
    run_bench(main, "floor")
