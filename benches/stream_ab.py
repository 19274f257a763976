#!/usr/bin/env python3
"""Two livecheck builds side by side on a streamed answer: Envoy CPU per stream, for a before/after of
a change to the stream rewriter (`make bench-ab-stream AB_BASE=path/to/livecheck.wasm`; not part of
`make bench`).

Method: `benches/streaming.py`'s chunked run (issue 13's CPU verdict): its upstream DOUBLE (a scripted
Python server of the vendor's wire format, not a model) writes a 2,000-token Chat Completions answer (an
Anthropic Messages, OpenAI Responses, Gemini or Bedrock Converse one with AB_SHAPE=anthropic, responses,
gemini or converse) in 4-character deltas, AB_CHUNK_EVENTS events per write (default 16), one write
every 1 ms; its raw-socket client reads it. Three Envoys of envoy/livecheck.yaml's shape (V8, `--concurrency 1`): (a) without
the wasm filter, (base) livecheck built from AB_BASE, (head) the `.wasm` `make wasm` built from this
tree, both with `benches/rules.json`. Each round streams once through each, in a rotating order, for
AB_REPEATS rounds (default 20), so the machine's drift hits all alike. CPU per stream = all Envoy
threads' run time over the stream (/proc/<pid>/task/*/schedstat). A stream counts only when the client
decoded exactly the text the double sent. Prints and writes `target/bench/results-stream-ab.md`
(AB_OUT elsewhere): medians with min–max over rounds, each build over (a), and the per-round
difference head − base, so the verdict reads the paired differences, not the absolute figures.
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

# The shape of streaming.py's chat mode (the verdict's), here and in the double it starts; AB_SHAPE=anthropic
# (or responses) streams the same text as Anthropic Messages (OpenAI Responses) events.
SHAPE = os.environ.get("AB_SHAPE", "chat")
os.environ["BENCH_SHAPE"] = SHAPE
import streaming  # noqa: E402
from streaming import Double, Envoy, answer_text, envoy_config, latency_run  # noqa: E402

REPEATS = int(os.environ.get("AB_REPEATS", "20"))
CHUNK_EVENTS = int(os.environ.get("AB_CHUNK_EVENTS", str(streaming.CHUNK_EVENTS)))
PACE_US = 1000
OUT = pathlib.Path(os.environ.get("AB_OUT", REPO / "target" / "bench" / "results-stream-ab.md"))


def livecheck_envoy(double: Double, wasm_dir: pathlib.Path, workdir: pathlib.Path, name: str) -> Envoy:
    """streaming.py's (b), its filter loaded from `wasm_dir`."""
    before = os.environ.get("LIVECHECK_WASM_DIR")
    os.environ["LIVECHECK_WASM_DIR"] = str(wasm_dir)
    try:
        return Envoy(envoy_config(double.port, True), workdir, name)
    finally:
        if before is None:
            del os.environ["LIVECHECK_WASM_DIR"]
        else:
            os.environ["LIVECHECK_WASM_DIR"] = before


def main() -> int:
    base = os.environ.get("AB_BASE")
    if not base or not pathlib.Path(base).is_file():
        raise SystemExit("AB_BASE=path/to/livecheck.wasm (the build to compare against) is required")
    base_dir = pathlib.Path(base).resolve().parent
    head_dir = pathlib.Path(os.environ.get("LIVECHECK_WASM_DIR", REPO / "target" / "wasm32-wasip1" / "release"))
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-stream-ab-"))
    double = Double(workdir)
    sidecar = None
    envoys: list[Envoy] = []
    try:
        sidecar = streaming.start_sidecar(workdir)
        # Each Envoy is stopped below even when a later one fails to start (a stale .wasm, say).
        variants = {}
        for name, start in (("a", lambda: Envoy(envoy_config(double.port, False), workdir, "plain")),
                            ("base", lambda: livecheck_envoy(double, base_dir, workdir, "base")),
                            ("head", lambda: livecheck_envoy(double, head_dir, workdir, "head"))):
            variants[name] = start()
            envoys.append(variants[name])
        expected = answer_text(streaming.TOKENS * streaming.DELTA_CHARS)
        for warm in range(2):
            for name, envoy in variants.items():
                latency_run(envoy, double, f"warm-{name}{warm}", 0, expected)
        cpu = {name: [] for name in variants}
        names = list(variants)
        for i in range(REPEATS):
            order = names[i % 3:] + names[:i % 3]
            for name in order:
                r = latency_run(variants[name], double, f"ab-{name}{i}", PACE_US, expected, "latency", CHUNK_EVENTS)
                cpu[name].append(r["cpu_us"])
            print(f"round {i + 1}/{REPEATS}: " + ", ".join(f"{n} {cpu[n][-1]:.0f} µs" for n in names), file=sys.stderr)
    finally:
        for e in envoys:
            e.stop()
        double.stop()
        if sidecar:
            sidecar.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    write_report(cpu, base)
    return 0


def write_report(cpu: dict[str, list[float]], base: str) -> None:
    def cell(xs: list[float]) -> str:
        return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}–{max(xs):,.0f})"

    a = cpu["a"]
    lines = [
        "# Stream rewriter A/B: Envoy CPU per streamed answer",
        "",
        f"`benches/stream_ab.py` on {time.strftime('%Y-%m-%d %H:%M')}, {streaming.cpu_model()}: "
        f"{REPEATS} rounds, a 2,000-token {streaming.SHAPE_NAMES[SHAPE]} answer in 4-character deltas, {CHUNK_EVENTS} events per "
        f"write, one write every {PACE_US} µs; base `{base}`, head this tree's `make wasm`. "
        "µs per stream, median (min–max) over rounds.",
        "",
        "| variant | Envoy CPU per stream | ratio to (a), median of per-round ratios |",
        "|---|---:|---:|",
    ]
    for name in ("a", "base", "head"):
        ratios = [x / y for x, y in zip(cpu[name], a)]
        lines.append(f"| {name} | {cell(cpu[name])} | {statistics.median(ratios):.2f}× |")
    diffs = [h - b for h, b in zip(cpu["head"], cpu["base"])]
    lower = sum(d < 0 for d in diffs)
    lines += [
        "",
        f"head − base per round: median {statistics.median(diffs):+,.0f} µs ({min(diffs):+,.0f} to "
        f"{max(diffs):+,.0f}), {statistics.median(diffs) / streaming.TOKENS:+.2f} µs per event; head lower in "
        f"{lower} of {len(diffs)} rounds.",
    ]
    text = "\n".join(lines) + "\n"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
