"""What code a checked turn runs, function by function (`make bench-sites`; not part of `make bench`).

Why: `make bench-perf` found that livecheck slows Envoy's own code by the distinct branches a turn
runs (docs/design/011-measuring-cost.md; bench/optimisation-log-turn.md, "Where the gap is"), so a change is judged by the code it keeps off a turn's
path, not only by its time.

Method: `src/profiling/turn.rs`'s ignored test `profiling::turn::chat_4k_turns` (the 4 KiB Chat turns of
`make bench-v8-turn`: the bench's request and the bench double's answer, `benches/rules.json`,
through the real `Turn` against the test host) is built natively (release) and run under
valgrind's callgrind, collecting only inside `one_turn` (`--toggle-collect`), with
`--dump-instr=yes`. Per function this prints the distinct instructions run (each address counted
once however often it runs) and the instructions run per turn. Native x86 code is not the code V8
compiles from the wasm, but both come from the same LLVM IR: the counts are a stand-in, to compare
builds and find the largest functions, not V8's figures. The test host's functions (`FakeHost`) and
the test's own (`one_turn`) stand in for Envoy's side and are listed but not what Envoy runs.

    make bench-sites                # SITES_TURNS turns (default 50), the 40 largest functions
    python3 benches/turn_sites.py <callgrind.out> [N]   # an existing profile
"""

import collections
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
TURNS = int(os.environ.get("SITES_TURNS", "50"))


def test_binary() -> str:
    """Builds the native release test binary of the livecheck library and returns its path."""
    out = subprocess.run(
        ["cargo", "test", "--release", "--locked", "-p", "livecheck", "--lib", "--no-run",
         "--message-format=json"],
        cwd=REPO, check=True, stdout=subprocess.PIPE, text=True).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") \
                and msg.get("target", {}).get("name") == "livecheck":
            return msg["executable"]
    raise SystemExit("turn_sites: cargo built no livecheck test binary")


def profile(binary: str, out: pathlib.Path) -> None:
    env = dict(os.environ, LIVECHECK_PROFILE_TURNS=str(TURNS))
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--dump-instr=yes", "--toggle-collect=*profiling*turn*one_turn*",
         f"--callgrind-out-file={out}", binary, "profiling::turn::", "--ignored", "--test-threads=1"],
        check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def position(token: str, current: int) -> int:
    """An instruction address as callgrind writes it: absolute, relative (+n / -n) or the same (*)."""
    if token == "*":
        return current
    if token[0] in "+-":
        return current + int(token, 0)
    return int(token, 0)


def read(path: pathlib.Path) -> tuple[dict, collections.Counter]:
    """Per function: the set of instruction addresses run, and the instructions run."""
    names: dict[str, str] = {}
    fn = "?"
    address = 0
    after_call = False
    distinct: dict[str, set] = collections.defaultdict(set)
    run: collections.Counter = collections.Counter()
    for line in path.read_text().splitlines():
        named = re.match(r"(c?fn|c?ob|c?fl|fi|fe)=\((\d+)\)(?: (.*))?", line)
        if named:
            kind, index, name = named.groups()
            if name:
                names[f"{kind.lstrip('c')}{index}"] = name
            if kind == "fn":
                fn = names.get(f"fn{index}", index)
            continue
        if line.startswith("calls="):
            after_call = True  # the next cost line is the call's, charged to the callee
            continue
        if not line or line[0] not in "0123456789+-*":
            continue
        fields = line.split()
        address = position(fields[0], address)
        if after_call:
            after_call = False
            continue
        cost = int(fields[2]) if len(fields) > 2 else 0
        if cost:
            distinct[fn].add(address)
            run[fn] += cost
    return distinct, run


def report(path: pathlib.Path, top: int) -> None:
    distinct, run = read(path)
    total_distinct = sum(len(s) for s in distinct.values())
    total_run = sum(run.values())
    print(f"{TURNS} turns: {total_distinct:,} distinct instructions, "
          f"{total_run / TURNS:,.0f} run per turn ({path})\n")
    print("| distinct | run per turn | function |\n|---:|---:|---|")
    for fn in sorted(distinct, key=lambda f: -len(distinct[f]))[:top]:
        print(f"| {len(distinct[fn]):,} | {run[fn] / TURNS:,.0f} | `{fn[:120]}` |")


def main() -> int:
    if len(sys.argv) > 1:
        report(pathlib.Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 40)
        return 0
    binary = test_binary()
    with tempfile.TemporaryDirectory(prefix="livecheck-sites-") as tmp:
        out = pathlib.Path(tmp) / "callgrind.out"
        profile(binary, out)
        report(out, 40)
    return 0


if __name__ == "__main__":
    sys.exit(main())
