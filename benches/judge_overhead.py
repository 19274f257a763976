#!/usr/bin/env python3
"""Sidecar overhead per judged check, beyond the judge backend's own time (issue 5).

Run from the repository root after `make venv`:

    .venv/bin/python benches/judge_overhead.py [N]      # writes bench/results-judge.md (N default 300)

For a before/after of two sidecar builds, name the binary and where to write:
`JUDGE_BINARY=/tmp/judge-before BENCH_RESULTS=/tmp/before.md .venv/bin/python benches/judge_overhead.py`
(no cargo build then: cargo re-links `target/release/livecheck-judge` from its own fingerprint, so a
binary copied there would be replaced). Run the builds alternately, more than once each.

What it measures, on loopback, in well under a minute:

- The REAL livecheck-judge binary (release build, `cargo build --release -p livecheck-judge`) on a free
  loopback port, its backends pointed at the judge backend double (tests/e2e/judge_backend_double.py)
  running in a process of its own, which answers every call after a fixed delay (DELAY) with a verdict.
- (s) through the sidecar: N sequential `POST /v1/judge` calls (a polite_tone output check with a
  question, ~200 characters of text, the turn's key), per backend API (OpenAI-compatible, Anthropic),
  on one keep-alive connection. Client latency = request written -> verdict read (perf_counter).
- (d) the baseline: N sequential calls straight to the double with the request body the sidecar sends,
  through the same HTTP client: what the client, the loopback hop and the double's HTTP parsing cost.
- For every call the double records its own handling time (request line read -> answer flushed, the
  DELAY included), matched to the call by a sequence number in the judged text.
- Overhead of one call = client latency - the double's handling time. The sidecar's own cost per
  judged check is (s) - (d): its HTTP server, prompt building, its HTTP client to the backend, reading
  the verdict, answering.
Warm-up calls (WARMUP per series) are not counted. Series run interleaved in blocks (s, d, s, d, ...)
so drift hits both alike. Every process it starts is stopped by its own PID.
"""

from __future__ import annotations

import datetime
import http.client
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from envoy_process import JudgeSidecar  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
WARMUP = 20
BLOCK = 25  # calls per block; blocks of (s) and (d) alternate
DELAY = 0.020  # the double's fixed answer delay, seconds
OUT = pathlib.Path(os.environ.get("BENCH_RESULTS", str(REPO / "bench" / "results-judge.md")))
# A given sidecar binary instead of the release build of this checkout (see the docstring).
GIVEN_BINARY = os.environ.get("JUDGE_BINARY")
KEY = "sk-bench-turn-key"
QUESTION = "Where is my order 4711, and when will it arrive?"
ANSWER = ("Your order 4711 left our warehouse in Utrecht this morning and should reach you tomorrow "
          "between 9:00 and 12:00. You can follow it with the tracking link in your confirmation mail. ")

# The double in its own process (the client's GIL never delays it): prints its port, then on a line
# "dump" on stdin prints every call's (judged text, handled seconds) as JSON and exits.
DOUBLE_MAIN = f"""
import json, sys
sys.path.insert(0, {str(REPO / 'tests' / 'e2e')!r})
from judge_backend_double import JudgeBackendDouble
d = JudgeBackendDouble(delay={DELAY}).start()
print(d.port, flush=True)
for line in sys.stdin:
    if line.strip() == "dump":
        print(json.dumps([(c.judged_text, c.handled_s) for c in d.seen()]), flush=True)
        d.reset()
    elif line.strip() == "quit":
        break
d.stop()
"""


def release_binary() -> pathlib.Path:
    if GIVEN_BINARY:
        binary = pathlib.Path(GIVEN_BINARY).resolve()
        if not os.access(binary, os.X_OK):
            raise SystemExit(f"JUDGE_BINARY={GIVEN_BINARY}: not an executable file")
        return binary
    print("building livecheck-judge (release) ...", file=sys.stderr)
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "livecheck-judge"], cwd=REPO, check=True)
    return REPO / "target" / "release" / "livecheck-judge"


class Client:
    """One keep-alive HTTP/1.1 connection; post() returns (seconds, status, body)."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def post(self, path: str, body: bytes, headers: dict) -> tuple[float, int, bytes]:
        t0 = time.perf_counter()
        self.conn.request("POST", path, body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        return time.perf_counter() - t0, r.status, data

    def close(self) -> None:
        self.conn.close()


def judge_request(seq: str, model: str) -> bytes:
    return json.dumps({"stage": "output", "kind": "polite_tone", "text": f"{ANSWER}[{seq}]",
                       "question": QUESTION, "judge_model": model}).encode()


def direct_request(seq: str, api: str) -> bytes:
    """What the sidecar sends the backend (its prompt shape, abridged rubric), for the baseline."""
    nonce = "0123456789abcdef0123456789abcdef"
    user = (f"Check: polite_tone\nWhat it requires: The text is polite and respectful.\n"
            f"Stage: output. The text is the AI agent's answer to the user.\n\n"
            f"<<<USER-MESSAGE {nonce}>>>\n{QUESTION}\n<<<END USER-MESSAGE {nonce}>>>\n\n"
            f"<<<JUDGED-TEXT {nonce}>>>\n{ANSWER}[{seq}]\n<<<END JUDGED-TEXT {nonce}>>>\n")
    system = "You are a judge for one check on a turn of an AI agent. " * 20
    schema = {"type": "object", "additionalProperties": False, "required": ["passed", "score", "reason"],
              "properties": {"passed": {"type": "boolean"}, "score": {"type": "number"}, "reason": {"type": "string"}}}
    if api == "openai":
        body = {"model": "gpt-judge", "temperature": 0, "max_tokens": 512,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "verdict", "strict": True,
                                                                           "schema": schema}}}
    else:
        body = {"model": "claude-judge", "max_tokens": 512, "temperature": 0, "system": system,
                "messages": [{"role": "user", "content": user}],
                "tools": [{"name": "record_verdict", "description": "Record the verdict.", "input_schema": schema}],
                "tool_choice": {"type": "tool", "name": "record_verdict"}}
    return json.dumps(body).encode()


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


def main() -> None:
    started = time.monotonic()
    binary = release_binary()
    double = subprocess.Popen([sys.executable, "-c", DOUBLE_MAIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="judge-bench-"))
    sidecar = None
    try:
        port = int(double.stdout.readline())
        base = f"http://127.0.0.1:{port}"
        sidecar = JudgeSidecar(workdir, [
            {"name": "double-anthropic", "api": "anthropic", "base_url": base, "models": ["claude-*"]},
            {"name": "double-openai", "api": "openai", "base_url": base, "models": ["*"]},
        ], timeout_ms=5000, binary=binary)

        def dump() -> dict[str, float]:
            double.stdin.write("dump\n")
            double.stdin.flush()
            calls = json.loads(double.stdout.readline())
            return {text.rsplit("[", 1)[-1].rstrip("]"): handled for text, handled in calls if text}

        results = {}
        for api, model, path in (("openai", "gpt-judge", "/v1/chat/completions"),
                                 ("anthropic", "claude-judge", "/v1/messages")):
            via_sidecar, direct = Client(sidecar.port), Client(port)
            headers_s = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
            headers_d = {"content-type": "application/json", "accept": "application/json",
                         ("authorization" if api == "openai" else "x-api-key"):
                             (f"Bearer {KEY}" if api == "openai" else KEY)}
            lat = {"s": {}, "d": {}}
            i = 0
            for block in range((WARMUP + N + BLOCK - 1) // BLOCK + 1):
                for series in ("s", "d"):
                    for _ in range(BLOCK):
                        if len(lat[series]) >= WARMUP + N:
                            break
                        seq = f"{api}-{series}-{len(lat[series])}"
                        if series == "s":
                            took, status, body = via_sidecar.post("/v1/judge", judge_request(seq, model), headers_s)
                            verdict = json.loads(body)
                            assert status == 200 and verdict["outcome"] == "passed", (status, body)
                        else:
                            took, status, body = direct.post(path, direct_request(seq, api), headers_d)
                            assert status == 200, (status, body)
                        lat[series][seq] = took
                        i += 1
            handled = dump()
            via_sidecar.close()
            direct.close()
            for series in ("s", "d"):
                keys = list(lat[series])[WARMUP:]
                missing = [k for k in keys if k not in handled]
                assert not missing, f"the double did not see {missing[:3]}"
                results[(api, series)] = {
                    "latency": [lat[series][k] for k in keys],
                    "handled": [handled[k] for k in keys],
                    "overhead": [lat[series][k] - handled[k] for k in keys],
                }
        write(results, binary, time.monotonic() - started)
    finally:
        if sidecar is not None:
            sidecar.close()
        if double.poll() is None:
            try:
                double.stdin.write("quit\n")
                double.stdin.flush()
                double.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                double.kill()
                double.wait(timeout=5)
        shutil.rmtree(workdir, ignore_errors=True)


def write(results: dict, binary: pathlib.Path, seconds: float) -> None:
    us = lambda v: f"{v * 1e6:,.0f}"  # noqa: E731
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "judge", "wire"], cwd=REPO, capture_output=True,
                               text=True).stdout.strip()
    except OSError:
        commit, dirty = "unknown", ""
    load = pathlib.Path("/proc/loadavg").read_text().split()[:3]
    cpu = next((line.split(":", 1)[1].strip() for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    lines = [
        "# Judge sidecar overhead per judged check (issue 5)",
        "",
        f"Generated by `benches/judge_overhead.py` (`make bench`) on {datetime.date.today()}, in {seconds:.0f} s.",
        "",
        f"- Machine: `nproc` {os.cpu_count()}, {cpu}, {platform.system()} {platform.release()}; Python "
        f"{platform.python_version()}; load average at the end {' / '.join(load)} (p99 is sensitive to other work on "
        f"the machine: compare (s) and (d), which ran interleaved)",
        (f"- livecheck-judge given as `{binary}` (`JUDGE_BINARY`; its commit is not recorded here)" if GIVEN_BINARY
         else f"- livecheck-judge {commit}{'+dirty(judge/wire)' if dirty else ''}, release build "
         f"(`{binary.relative_to(REPO)}`)") + ", defaults except `timeout_ms = 5000`; logs at `info` (one line per call)",
        f"- Judge backend double (tests/e2e/judge_backend_double.py) in its own process, answering after a fixed "
        f"{DELAY * 1000:.0f} ms; its handling time is measured from the request line read to the answer flushed.",
        f"- Client: Python `http.client`, one keep-alive connection per series, calls one at a time; {N} calls per "
        f"series after {WARMUP} warm-up calls; series interleaved in blocks of {BLOCK}.",
        "- (s) = `POST /v1/judge` to the sidecar (polite_tone, output, question + ~200-character answer, the "
        "turn's key); (d) = the same client straight to the double with the body the sidecar sends.",
        "- Overhead = client latency − the double's own handling time of that call. **Sidecar cost = (s) − (d)**.",
        "",
        "Times in µs.",
        "",
        "| backend API | series | latency p50 | latency p99 | double's time p50 | overhead p50 | overhead p99 | "
        "overhead max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for api in ("openai", "anthropic"):
        for series, label in (("s", "(s) via the sidecar"), ("d", "(d) straight to the double")):
            r = results[(api, series)]
            lines.append(f"| {api} | {label} | {us(pct(r['latency'], 50))} | {us(pct(r['latency'], 99))} | "
                         f"{us(pct(r['handled'], 50))} | {us(pct(r['overhead'], 50))} | {us(pct(r['overhead'], 99))} | "
                         f"{us(max(r['overhead']))} |")
    lines += ["", "**Sidecar cost per judged check, (s) − (d):**", ""]
    lines += ["| backend API | p50 | p99 |", "|---|---|---|"]
    for api in ("openai", "anthropic"):
        s, d = results[(api, "s")]["overhead"], results[(api, "d")]["overhead"]
        lines.append(f"| {api} | {us(pct(s, 50) - pct(d, 50))} | {us(pct(s, 99) - pct(d, 99))} |")
    lines += [
        "",
        "Reading it: (d)'s overhead is what any caller pays for one loopback HTTP call from this client to this "
        "double (Python on both ends). (s) adds a second loopback hop (client → sidecar → double), the sidecar's "
        "request parsing, prompt building with a fresh random tag, reqwest to the backend, verdict parsing and "
        "its answer. In front of a real judge model (hundreds of ms per verdict) this cost is noise; the filter's "
        "callout through Envoy adds its own hop, not measured here.",
        "",
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
