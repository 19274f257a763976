#!/usr/bin/env python3
"""Two livecheck builds side by side: Envoy CPU per checked request, for a before/after of a change
(`make bench-ab AB_BASE=path/to/livecheck.wasm`; not part of `make bench`; AB_BODY_BYTES and
AB_CONNECTIONS for other request sizes than the 4 KiB turn).

Method: the same set-up as `benches/compare.py` section 1 (envoy/livecheck.yaml's shape, V8,
`--concurrency 1`, `benches/rules.json`: 5 input + 5 output rule checks, 4 KiB Chat requests to
`benches/upstream-double`, a scripted DOUBLE of Chat Completions, not a model; turn reports to the real
sidecar), with three Envoys: (b) the no-op wasm filter, (base) livecheck built from AB_BASE, (head) the
`.wasm` `make wasm` built from this tree. Closed loop, 16 connections, 8 s a run, the three interleaved
and rotated for AB_REPEATS rounds (default 5), so the machine's drift hits all alike. CPU per request =
the Envoy process's utime + stime over a run ÷ requests answered; a run counts only when every request
was answered 200 and reached the double. Prints and writes `bench/results-ab.md` (AB_OUT elsewhere):
medians with min–max over rounds, and per-round differences (each round's base and head ran minutes
apart at most), so the verdict reads the differences, not the absolute figures.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benches"))
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import compare  # noqa: E402
from compare import (Envoy, UpstreamDouble, check, publish, run_bench, chat_body, cpu_model,  # noqa: E402
                     git_hash, log, measured, oha)
from envoy_process import JudgeSidecar, wasm_path  # noqa: E402

REPEATS = int(os.environ.get("AB_REPEATS", "5"))
# AB_BODY_BYTES: the Chat request's size (default compare.py's 4 KiB turn); AB_CONNECTIONS: the closed
# loop's connections (default compare.py's 16; its 1 MiB scan runs use 2).
BODY_BYTES = int(os.environ.get("AB_BODY_BYTES", str(compare.BODY_BYTES)))
CONNECTIONS = int(os.environ.get("AB_CONNECTIONS", str(compare.CONNECTIONS)))
OUT = pathlib.Path(os.environ.get("AB_OUT", REPO / "bench" / "results-ab.md"))


def envoy_for(double: UpstreamDouble, variant: str, wasm: pathlib.Path, workdir: pathlib.Path) -> Envoy:
    """compare.py's config for (b) or (c), with (c)'s filter taken from `wasm`."""
    if variant == "b":
        return Envoy(compare.envoy_config(double.port, "b"), workdir, "ab-b")
    saved = compare.wasm_path
    compare.wasm_path = lambda _name: wasm
    try:
        config = compare.envoy_config(double.port, "c")
    finally:
        compare.wasm_path = saved
    return Envoy(config, workdir, f"ab-{variant}")


def main() -> int:
    base = pathlib.Path(os.environ.get("AB_BASE", ""))
    check(base.is_file(), f"AB_BASE={base} is not a .wasm file: name the build to compare against")
    head = wasm_path("livecheck.wasm")  # refused when older than this tree's sources
    for path in (compare.OHA, compare.DOUBLE_BIN, compare.JUDGE_BIN):
        check(path.exists(), f"{path} is missing: run `make bench-ab`")
    started = time.monotonic()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-ab-"))
    double = UpstreamDouble()
    compare.SIDECAR = JudgeSidecar(workdir / "sidecar", [
        {"name": "unused", "api": "openai", "base_url": "http://127.0.0.1:9", "models": ["*"]}],
        binary=compare.JUDGE_BIN)
    proxies = {}
    try:
        proxies = {"b": envoy_for(double, "b", head, workdir), "base": envoy_for(double, "base", base, workdir),
                   "head": envoy_for(double, "head", head, workdir)}
        body = workdir / f"body-{BODY_BYTES}.json"
        body.write_bytes(chat_body(BODY_BYTES))
        before = {v: p.stats() for v, p in proxies.items() if v != "b"}
        for v, p in proxies.items():  # warm-up
            measured(p, double, lambda p=p: oha(p.url, body, conns=CONNECTIONS, duration=2))
        runs = {v: [] for v in proxies}
        order = list(proxies)
        for rep in range(REPEATS):
            for v in order[rep % 3:] + order[:rep % 3]:
                p = proxies[v]
                runs[v].append(measured(p, double, lambda p=p: oha(p.url, body, conns=CONNECTIONS,
                                                                   duration=compare.THROUGHPUT_S)))
                log(f"ab {v} {rep + 1}/{REPEATS}: {runs[v][-1]['rps']:.0f} req/s, "
                    f"{runs[v][-1]['cpu_us_per_req']:.1f} µs CPU/req")
        # Both builds ran their 10 checks on every request they answered.
        for v in ("base", "head"):
            served = sum(x["ok"] for x in runs[v])
            after = proxies[v].stats()
            passed = {k: after[k] - before[v].get(k, 0) for k in after
                      if k.startswith("wasmcustom.livecheck.bench.") and k.endswith(".passed")}
            check(len(passed) == 10 and all(n >= served for n in passed.values()),
                  f"{v} did not run its 10 checks on every request: {passed} for {served}")
        version = proxies["b"].version()
    finally:
        for p in proxies.values():
            p.stop()
        compare.SIDECAR.stop()
        double.stop()
        shutil.rmtree(workdir, ignore_errors=True)  # a run's sidecar store grows to gigabytes
    write(runs, base, version, time.monotonic() - started)
    return 0


def write(runs: dict, base: pathlib.Path, version: str, took: float) -> None:
    cpu = {v: [x["cpu_us_per_req"] for x in rs] for v, rs in runs.items()}
    rps = {v: [x["rps"] for x in rs] for v, rs in runs.items()}

    def cell(xs: list[float], fmt: str = "{:.1f}") -> str:
        return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"

    over_b = {v: [c - b for c, b in zip(cpu[v], cpu["b"])] for v in ("base", "head")}
    diff = [h - b for h, b in zip(cpu["head"], cpu["base"])]
    lines = [
        "# Two livecheck builds side by side: Envoy CPU per checked request",
        "",
        f"Generated by `benches/ab_cpu.py` (`make bench-ab`) on {time.strftime('%Y-%m-%dT%H:%M')}, in {took:.0f} s; "
        "the method is in the script's docstring.",
        "",
        f"- Machine: {cpu_model()}, {os.cpu_count()} cores; Envoy {version} (V8, `--concurrency 1`).",
        f"- base: `{base}`; head: livecheck {git_hash()} (`make wasm`). Rules: `benches/rules.json`; {BODY_BYTES:,}-byte "
        f"Chat requests; {REPEATS} rounds of 8 s closed loop at {CONNECTIONS} connections, variants interleaved.",
        "",
        "| variant | CPU µs/request | over the no-op filter, µs | req/s |",
        "|---|---|---|---|",
        f"| (b) no-op filter | {cell(cpu['b'])} | – | {cell(rps['b'], '{:.0f}')} |",
        f"| base | {cell(cpu['base'])} | {cell(over_b['base'])} | {cell(rps['base'], '{:.0f}')} |",
        f"| head | {cell(cpu['head'])} | {cell(over_b['head'])} | {cell(rps['head'], '{:.0f}')} |",
        "",
        f"- head − base, per round (µs CPU/request): {', '.join(f'{d:+.1f}' for d in diff)}; median "
        f"{statistics.median(diff):+.1f}. "
        + ("Every round agrees in sign." if all(d < 0 for d in diff) or all(d > 0 for d in diff)
           else "The rounds disagree in sign: **too noisy to tell**."),
        "",
    ]
    publish(OUT, lines)


if __name__ == "__main__":
    run_bench(main, "ab_cpu")
