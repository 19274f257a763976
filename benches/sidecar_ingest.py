#!/usr/bin/env python3
"""How fast the sidecar stores turn reports: `make bench-ingest` (not part of `make bench`).

The real livecheck-judge (release; SQLite in a temporary directory) on loopback; one client posts
BATCHES batches of SIZE reports, each of 10 rule results, to `POST /v1/results/batch` as the filter
does, one at a time. Prints CPU per report (the sidecar's, /proc) and reports per second. Given several
binaries (e.g. one built from an earlier commit), runs them interleaved, twice each, for a before/after.
INGEST_BATCHES=N posts N batches instead of 40 (a longer run, e.g. to attach `perf record -p` to the
sidecar while it stores).

A sidecar that answers 200 without storing measures nothing: each batch's answer must say it stored
every result it was sent (`{"stored": 2560, "skipped": 0}`), and after the timed run the results API
must count every check's results and give back each batch's last report as it was sent.
"""
from __future__ import annotations

import http.client
import json
import os
import pathlib
import sys
import tempfile
import time
import urllib.parse
import uuid

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "benches"))

from compare import tree_cpu_s  # noqa: E402
from envoy_process import JudgeSidecar  # noqa: E402

BATCHES, SIZE = int(os.environ.get("INGEST_BATCHES", "40")), 256
CHECKS = 10
# The operator API (`[api] token_env`) reads back what was stored, after the timed run.
API_TOKEN_ENV, API_TOKEN = "LIVECHECK_INGEST_API_TOKEN", "bench-ingest-operator-token"


def turn_id() -> str:
    """A turn id as the filter makes them (`src/turn/question.rs`): the time in ms, then random."""
    return "lc_%012x%s" % (time.time_ns() // 1_000_000, uuid.uuid4().hex[:20])


def report() -> dict:
    # Written now, as the filter does: the summary counts the results of the last 7 days.
    now_ms = time.time_ns() // 1_000_000
    return {"turn_id": turn_id(), "agent": "bench", "version": "1", "results": [
        {"name": f"check-{k}", "stage": "input" if k < 5 else "output", "kind": "not_contains", "mode": "block",
         "attempt": 1, "outcome": "passed", "reason": "The text holds nothing it had to avoid.",
         "created_at_ms": now_ms} for k in range(CHECKS)]}


def api(conn: http.client.HTTPConnection, path: str) -> dict:
    conn.request("GET", path, headers={"authorization": f"Bearer {API_TOKEN}"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise SystemExit(f"GET {path}: the sidecar answered {r.status}: {data[:200]!r}")
    return json.loads(data)


def check_stored(conn: http.client.HTTPConnection, batches: list[dict]) -> None:
    """Every result sent is stored: each check counted once per report, all passed, and each batch's
    last report read back with the fields it was sent with."""
    summary = api(conn, "/agents/bench/checks/summary")["items"]
    expected = [{"name": f"check-{k}", "passed": BATCHES * SIZE, "failed": 0, "errored": 0} for k in range(CHECKS)]
    if summary != expected:
        raise SystemExit(f"the results API counts {summary}, not {BATCHES * SIZE} passed results of each check")
    fields = ("name", "stage", "kind", "mode", "attempt", "outcome", "reason")
    for batch in batches:
        sent = batch["reports"][-1]
        items = api(conn, f"/responses/{urllib.parse.quote(sent['turn_id'])}/checks?limit=100")["items"]
        got = [{f: item[f] for f in fields} for item in items]
        if got != [{f: result[f] for f in fields} for result in sent["results"]]:
            raise SystemExit(f"turn {sent['turn_id']} was stored as {got}, not as it was sent")


def run(binary: pathlib.Path) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="livecheck-ingest-") as d:
        sidecar = JudgeSidecar(pathlib.Path(d), [
            {"name": "unused", "api": "openai", "base_url": "http://127.0.0.1:9", "models": ["*"]}], binary=binary,
            tables={"api": {"token_env": API_TOKEN_ENV}}, env={API_TOKEN_ENV: API_TOKEN})
        try:
            conn = http.client.HTTPConnection("127.0.0.1", sidecar.port, timeout=120)
            batches = [{"reports": [report() for _ in range(SIZE)]} for _ in range(BATCHES)]
            bodies = [json.dumps(b) for b in batches]
            answers = []
            cpu0, t0 = tree_cpu_s(sidecar.process.pid), time.monotonic()
            for body in bodies:
                conn.request("POST", "/v1/results/batch", body=body, headers={"content-type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                if r.status != 200:
                    raise SystemExit(f"the sidecar answered {r.status}: {data[:200]!r}")
                answers.append(data)
            cpu, wall = tree_cpu_s(sidecar.process.pid) - cpu0, time.monotonic() - t0
            for data in answers:
                if json.loads(data) != {"stored": SIZE * CHECKS, "skipped": 0}:
                    raise SystemExit(f"a batch of {SIZE * CHECKS} results was answered {data[:200]!r}")
            check_stored(conn, batches)
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
