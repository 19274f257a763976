"""The turn logic's own cost in V8, function by function (issue 16, step 1; `make bench-v8-turn`).

Method: `src/profiling/turn.rs`'s ignored test `profiling::turn::chat_4k_turns` drives LIVECHECK_PROFILE_TURNS
checked 4 KiB Chat turns (the bench's request, the bench double's answer, `benches/rules.json`)
through the real `Turn` against the test host (`host::fake::FakeHost`), compiled for
wasm32-wasip1 and run under Node's V8 with `--cpu-prof` (V8's sampling profiler, every 50 µs).
This script reads the newest profile in the directory given and prints, per function, the time
per turn spent in it (self) and under it (inclusive). The test host's own functions (`FakeHost`)
stand in for Envoy's host calls and are not what Envoy pays for them; `bench/results-profile.md`
has those, measured inside Envoy.

What it does not show: a turn in Envoy runs between network reads that evict caches, so the same
code costs more there (compare with `make bench-profile`). Use it to see which functions to cut,
and the Envoy figures to see whether cutting them paid.
"""

import collections
import glob
import json
import os
import re
import sys


def short(name: str) -> str:
    """A Rust (legacy-mangled) symbol's last path segments, without the hash."""
    if not name:
        return "(anonymous)"
    if not name.startswith("_ZN"):
        return name
    parts, i = [], 3
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        parts.append(name[j:j + n])
        i = j + n
    parts = [p.replace("$LT$", "<").replace("$GT$", ">").replace("$u20$", " ").replace("$RF$", "&")
             .replace("..", "::").replace("$u7b$", "{").replace("$u7d$", "}")
             for p in parts if not re.fullmatch(r"h[0-9a-f]{16}", p)]
    return "::".join(parts[-3:]) or name


def main() -> None:
    directory, turns = sys.argv[1], int(sys.argv[2])
    newest = max(glob.glob(os.path.join(directory, "*.cpuprofile")), key=os.path.getmtime)
    profile = json.load(open(newest))
    nodes = {n["id"]: n for n in profile["nodes"]}
    parent = {c: n["id"] for n in profile["nodes"] for c in n.get("children", [])}
    own, under = collections.Counter(), collections.Counter()
    for sample, delta in zip(profile["samples"], profile["timeDeltas"]):
        node, seen, leaf = sample, set(), True
        while node is not None:
            name = short(nodes[node]["callFrame"]["functionName"])
            if leaf:
                own[name] += delta
                leaf = False
            if name not in seen:
                under[name] += delta
                seen.add(name)
            node = parent.get(node)
    turn_total = max((t for n, t in under.items() if n.endswith("profiling::turn::one_turn")), default=0)
    print(f"{turns} turns; inside one_turn: {turn_total / turns:.2f} µs/turn (profile {newest})")
    print("\n| self µs/turn | function |\n|---:|---|")
    for name, t in own.most_common(25):
        print(f"| {t / turns:.2f} | `{name[:100]}` |")
    print("\n| inclusive µs/turn | function |\n|---:|---|")
    for name, t in under.most_common(60):
        if t / turns < 0.2 or t > turn_total * 1.001 and turn_total:
            continue
        print(f"| {t / turns:.2f} | `{name[:100]}` |")


if __name__ == "__main__":
    main()
