#!/usr/bin/env python3
"""What Envoy charges any filter that checks a streamed answer, before it decides anything
(`make bench-floor-stream`; not part of `make bench`): issue 13's CPU floor.

A filter that checks a streamed answer must at least be called for every chunk of it and copy the chunk
into the VM to read it; for the turn it also reads the request (held until whole) and both header maps.
`benches/noop-filter` given those actions (`request_headers,hold_request,read_request,response_headers,
read_chunks`) does them and nothing else: (f). A filter that holds back as little as issue 13 asks (only text
that could still begin a match) holds back the end of a chunk whenever the chunk's text ends in what could
begin one: with an e-mail rule (`benches/rules.json`) any word may be an address's first part, so on this
workload (4-character deltas, words cut anywhere) nearly every chunk's last event. (h) is (f) keeping back
each chunk's last event and sending it at the front of the next (`hold_last_event`: the chunk written back
without its tail, one `set_buffer` a chunk), deciding nothing. (r) is (h) also having every turn's results
stored by a service, as the spec has livecheck's sidecar store them: `report=livecheck-judge`, one HTTP call
to the real sidecar on the root's 200 ms tick with 1 KiB a turn ended since the last (livecheck batches its
turn reports the same way; one stream at a time, each stream's goes alone). Measured beside plain Envoy, the no-op filter and livecheck on
`benches/streaming.py`'s chunked run (issue 13's CPU verdict: its upstream DOUBLE, a scripted Python server
of the Chat Completions wire format, not a model, writes a 2,000-token answer in 4-character deltas, 16
events per write, one write every 1 ms; its raw-socket client reads it), one stream through each Envoy per
round in a rotating order, FLOOR_REPEATS rounds (default 20). CPU per stream = all Envoy threads' run
time from the request until 300 ms after the answer's last byte (/proc/<pid>/task/*/schedstat;
`streaming.SETTLE_S`: so that a report sent on the next 200 ms tick, (r)'s and livecheck's, counts with
its stream, not with whichever stream ran next); a stream counts only when the client decoded exactly
the text the double sent. Prints and writes `bench/results-floor-stream.md` (FLOOR_OUT elsewhere):
medians (min–max) over rounds and the median of per-round ratios to plain Envoy.
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

# The shape of streaming.py's chat mode (the verdict's), here and in the double it starts.
os.environ["BENCH_SHAPE"] = "chat"
import compare  # noqa: E402
import streaming  # noqa: E402
from envoy_process import render_config  # noqa: E402
from streaming import NOOP_WASM, Double, Envoy, answer_text, envoy_config, latency_run  # noqa: E402

REPEATS = int(os.environ.get("FLOOR_REPEATS", "20"))
PACE_US = 1000
TEXT_EVENTS = streaming.TOKENS
OUT = pathlib.Path(os.environ.get("FLOOR_OUT", REPO / "bench" / "results-floor-stream.md"))
FLOOR = "request_headers,hold_request,read_request,response_headers,read_chunks"
HOLDING = FLOOR + ",hold_last_event"
RECORDING = HOLDING + ",report=livecheck-judge"
LABELS = {
    "a": "(a) plain Envoy",
    "n": "(n) no-op filter",
    "f": f"(f) the floor: the no-op filter reading every chunk (`{FLOOR}`)",
    "h": "(h) the floor of a hold-back: (f) keeping back each chunk's last event for the next (`hold_last_event`)",
    "r": "(r) the floor of a recorded hold-back: (h) and one call a turn to the sidecar, batched per 200 ms tick (`report=livecheck-judge`)",
    "b": "(b) livecheck, `benches/rules.json`",
}


def main() -> int:
    if not NOOP_WASM.exists():
        raise SystemExit(f"{NOOP_WASM} is missing: run `make bench-floor-stream`")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-stream-floor-"))
    double = Double(workdir)
    sidecar = None
    envoys: dict[str, Envoy] = {}
    started = time.monotonic()
    try:
        sidecar = streaming.start_sidecar(workdir)
        # Each Envoy is stopped below even when a later one fails to start.
        for name, config in (
                ("a", lambda: envoy_config(double.port, False)),
                ("n", lambda: envoy_config(double.port, False, noop=True)),
                ("f", lambda: render_config(NOOP_WASM, double.port, plugin_name="noop", plugin_configuration=FLOOR)),
                ("h", lambda: render_config(NOOP_WASM, double.port, plugin_name="noop", plugin_configuration=HOLDING)),
                ("r", lambda: render_config(NOOP_WASM, double.port, plugin_name="noop", plugin_configuration=RECORDING,
                                            extra_clusters={"livecheck-judge": sidecar.port})),
                ("b", lambda: envoy_config(double.port, True))):
            envoys[name] = Envoy(config(), workdir, f"floor-{name}")
        expected = answer_text(streaming.TOKENS * streaming.DELTA_CHARS)
        for warm in range(2):
            for name, envoy in envoys.items():
                latency_run(envoy, double, f"warm-{name}{warm}", 0, expected)
        cpu: dict[str, list[float]] = {name: [] for name in envoys}
        names = list(envoys)
        for i in range(REPEATS):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                r = latency_run(envoys[name], double, f"floor-{name}{i}", PACE_US, expected, "latency",
                                streaming.CHUNK_EVENTS)
                cpu[name].append(r["cpu_us"])
            print(f"round {i + 1}/{REPEATS}: " + ", ".join(f"{n} {cpu[n][-1]:.0f} µs" for n in names),
                  file=sys.stderr)
        # (r) recorded what it claims: its calls reached the sidecar, which answered each.
        time.sleep(0.5)
        stats = envoys["r"].stats()
        reported = stats.get("cluster.livecheck-judge.upstream_rq_total", 0)
        if reported < REPEATS or stats.get("cluster.livecheck-judge.upstream_rq_405", 0) != reported:
            raise SystemExit(f"(r) did not report its turns: {reported} calls for {REPEATS + 2} streams, "
                             f"{stats.get('cluster.livecheck-judge.upstream_rq_405', 0)} answered 405")
    finally:
        for e in envoys.values():
            e.stop()
        double.stop()
        if sidecar:
            sidecar.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    write_report(cpu, time.monotonic() - started, reported)
    return 0


def write_report(cpu: dict[str, list[float]], took: float, reported: int) -> None:
    def cell(xs: list[float]) -> str:
        return compare.cell(xs, "{:,.0f}")

    def ratio(name: str) -> float:
        return statistics.median([x / y for x, y in zip(cpu[name], cpu["a"])])

    def per_round(floor: str) -> list[float]:
        return [b / f for b, f in zip(cpu["b"], cpu[floor])]

    def over(floor: str) -> float:
        return statistics.median(per_round(floor))

    lines = [
        "# What Envoy charges any filter that checks a streamed answer (issue 13's CPU floor)",
        "",
        f"Generated by `benches/stream_floor.py` (`make bench-floor-stream`) on {time.strftime('%Y-%m-%dT%H:%M')}, "
        f"in {took:.0f} s, {streaming.cpu_model()}; the method is in the script's docstring. {REPEATS} rounds, a "
        f"2,000-token Chat answer in 4-character deltas, {streaming.CHUNK_EVENTS} events per write, one write "
        f"every {PACE_US} µs. Envoy CPU per stream counted until {streaming.SETTLE_S * 1000:g} ms after its last "
        f"byte (a report sent on the next tick counts with its stream). µs per stream, median (min–max) over rounds.",
        "",
        "| variant | Envoy CPU per stream | ratio to (a), median of per-round ratios |",
        "|---|---:|---:|",
    ]
    for name in cpu:
        lines.append(f"| {LABELS[name]} | {cell(cpu[name])} | {ratio(name):.2f}× |")
    lines += [
        "",
        f"- Issue 13's goal: livecheck ≤ 1.3× plain Envoy. The floor alone: **{ratio('f'):.2f}×** (the no-op "
        f"filter {ratio('n'):.2f}×); livecheck {ratio('b'):.2f}×, "
        f"{statistics.median([b - f for b, f in zip(cpu['b'], cpu['f'])]):,.0f} µs per stream over the floor "
        "(per round, then the median).",
        f"- The floor of a hold-back, (h): **{ratio('h'):.2f}×**; recorded, (r): **{ratio('r'):.2f}×**. livecheck "
        f"{statistics.median([b - r for b, r in zip(cpu['b'], cpu['r'])]):,.0f} µs per stream over (r), "
        f"{statistics.median([(b - r) / TEXT_EVENTS for b, r in zip(cpu['b'], cpu['r'])]):.2f} µs an event. "
        f"What 1.3× plain leaves livecheck beyond (r): "
        f"{statistics.median([1.3 * a - r for a, r in zip(cpu['a'], cpu['r'])]):,.0f} µs per stream, "
        f"{statistics.median([(1.3 * a - r) / TEXT_EVENTS for a, r in zip(cpu['a'], cpu['r'])]):.2f} µs an event "
        "(per round, then the median).",
        f"- Issue 56's goal: livecheck's CPU ≤ 1.1× the stream floor's. livecheck ÷ (f), per round then the median: "
        f"**{over('f'):.2f}×** ({min(per_round('f')):.2f}–{max(per_round('f')):.2f}; under 1.1× in "
        f"{sum(x <= 1.1 for x in per_round('f'))} of {len(per_round('f'))} rounds); ÷ (r), the floor of what "
        f"issue 13 asks beyond reading (a hold-back and a stored report): {over('r'):.2f}× "
        f"({min(per_round('r')):.2f}–{max(per_round('r')):.2f}).",
        f"- (r) made {reported:,} report calls for its {REPEATS + 2} streams (warm-up included), each answered by "
        "the sidecar (405, as asked).",
        "",
    ]
    text = "\n".join(lines)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
