#!/usr/bin/env python3
"""Hand-written Rust files with more lines of code than a room should hold (issue 53: ~800).

A line counts when it is not blank and lies outside `#[cfg(test)] mod tests` blocks; comments count,
since a reader reads them too (stricter than cloc's "code"); files that are tests (`tests.rs`, `fixtures.rs`, anything under a `tests/` folder) are not
rooms of the product and are skipped. Usage: room_sizes.py [--max N] [--check] DIR [DIR...]; prints
every file over the limit, and with --check exits 1 when there is one (`make structure`)."""
import pathlib
import re
import sys

TEST_BLOCK = re.compile(r"#\[cfg\(test\)\]\s*(pub(\([a-z]+\))?\s+)?mod\s+[a-z_]+\s*\{")


def without_test_blocks(text: str) -> str:
    """`text` with every inline `#[cfg(test)] mod x { ... }` removed (braces counted)."""
    while (m := TEST_BLOCK.search(text)) is not None:
        depth, i = 0, m.end() - 1
        while i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        text = text[: m.start()] + text[i:]
    return text


def lines_of_code(path: pathlib.Path) -> int:
    text = without_test_blocks(path.read_text(errors="replace"))
    return sum(1 for line in text.splitlines() if line.strip())


def is_test_file(path: pathlib.Path) -> bool:
    return path.name in ("tests.rs", "fixtures.rs") or "tests" in path.parts[:-1] or path.stem.endswith("_tests")


def main(args: list) -> int:
    limit, check, dirs = 800, "--check" in args, []
    rest = [a for a in args if a != "--check"]
    while rest:
        a = rest.pop(0)
        if a == "--max":
            limit = int(rest.pop(0))
        else:
            dirs.append(pathlib.Path(a))
    over = [(lines_of_code(p), p) for d in dirs for p in sorted(d.rglob("*.rs")) if not is_test_file(p)]
    over = [(n, p) for n, p in over if n > limit]
    for n, p in sorted(over, reverse=True):
        print(f"{p}: {n} lines (more than {limit})")
    print(f"{len(over)} file(s) over {limit} lines in {', '.join(map(str, dirs))}")
    return 1 if check and over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
