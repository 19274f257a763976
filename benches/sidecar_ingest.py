#!/usr/bin/env python3
"""How fast the sidecar stores turn reports: `make bench-ingest` (not part of `make bench`).

The real livecheck-judge (release; SQLite in a temporary directory) on loopback; one client posts
BATCHES batches of SIZE reports, each of 10 rule results, to `POST /v1/results/batch` as the filter
does, one at a time. Prints CPU per report (the sidecar's, /proc) and reports per second. Given several
binaries (e.g. one built from an earlier commit), runs them interleaved, twice each, for a before/after.
INGEST_BATCHES=N posts N batches instead of 40 (a longer run, e.g. to attach `perf record -p` to the
sidecar while it stores).
"""
from __future__ import annotations

import http.client
import json
import pathlib
import sys
import tempfile
import time
import uuid

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "benches"))

from compare import tree_cpu_s  # noqa: E402
from envoy_process import JudgeSidecar  # noqa: E402

BATCHES, SIZE = int(__import__("os").environ.get("INGEST_BATCHES", "40")), 256


def turn_id() -> str:
    """A turn id as the filter makes them (`src/turn/question.rs`): the time in ms, then random."""
    return "lc_%012x%s" % (time.time_ns() // 1_000_000, uuid.uuid4().hex[:20])


def report() -> dict:
    return {"turn_id": turn_id(), "agent": "bench", "version": "1", "results": [
        {"name": f"check-{k}", "stage": "input" if k < 5 else "output", "kind": "not_contains", "mode": "block",
         "attempt": 1, "outcome": "passed", "reason": "The text holds nothing it had to avoid.",
         "created_at_ms": 1_790_000_000_000} for k in range(10)]}


def run(binary: pathlib.Path) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="livecheck-ingest-") as d:
        sidecar = JudgeSidecar(pathlib.Path(d), [
            {"name": "unused", "api": "openai", "base_url": "http://127.0.0.1:9", "models": ["*"]}], binary=binary)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", sidecar.port, timeout=120)
            bodies = [json.dumps({"reports": [report() for _ in range(SIZE)]}) for _ in range(BATCHES)]
            cpu0, t0 = tree_cpu_s(sidecar.process.pid), time.monotonic()
            for body in bodies:
                conn.request("POST", "/v1/results/batch", body=body, headers={"content-type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                if r.status != 200:
                    raise SystemExit(f"the sidecar answered {r.status}: {data[:200]!r}")
            cpu, wall = tree_cpu_s(sidecar.process.pid) - cpu0, time.monotonic() - t0
            n = BATCHES * SIZE
            return cpu / n * 1e6, n / wall
        finally:
            sidecar.stop()


def main() -> int:
    binaries = [pathlib.Path(b) for b in sys.argv[1:]] or [REPO / "target" / "release" / "livecheck-judge"]
    for rep in range(2):
        for binary in binaries:
            cpu, rate = run(binary)
            print(f"{binary}: {cpu:.0f} µs CPU per report, {rate:.0f} reports/s "
                  f"(SQLite, {SIZE} reports of 10 results per batch, {BATCHES} batches, run {rep + 1})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
