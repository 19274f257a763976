#!/usr/bin/env python3
"""Checks that the repository's Markdown links stay inside the repository and resolve.

Every `[text](target)` in README.md, ARCHITECTURE.md, judge/README.md, harness/README.md, docs/ and
bench/*.md (or the files given) must name a file or directory of this repository (relative to the
file that links it), or an anchor that a heading of the target file makes; web links (http, https,
mailto) are not fetched. A link out of the repository (`../shared/...`) is an error. With `--paths`
it also lists the repository paths named in backticks (`src/turn/mod.rs`) that do not exist: a
warning, since a design page may name a file a change is about to create.

Usage: python3 scripts/doc_links.py [--paths] [FILE ...]   (exit 1 when a link is broken)
"""

import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
TICKED = re.compile(r"`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.{}<>*,-]*)+)`")
TOP = ("src/", "judge/", "harness/", "cli/", "wire/", "tests/", "benches/", "bench/", "docs/",
       "scripts/", "envoy/", "deploy/", "examples/", "schema/", "fuzz/", ".cargo/")


def default_files():
    names = ["README.md", "ARCHITECTURE.md", "judge/README.md", "harness/README.md"]
    files = [REPO / n for n in names if (REPO / n).exists()]
    files += sorted((REPO / "docs").rglob("*.md")) + sorted((REPO / "bench").glob("*.md"))
    return files


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    out = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def check(path, with_paths):
    errors, warnings = [], []
    text = path.read_text(encoding="utf-8")
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        where = f"{path.relative_to(REPO)}:{number}"
        for match in LINK.finditer(line):
            target = match.group(1) or match.group(2)
            if re.match(r"^(https?|mailto):", target):
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            if REPO not in resolved.parents and resolved != REPO:
                errors.append(f"{where}: {target} leaves the repository")
            elif not resolved.exists():
                errors.append(f"{where}: {target} does not exist")
            elif anchor and resolved.is_file() and resolved.suffix == ".md":
                if anchor not in anchors(resolved):
                    errors.append(f"{where}: {target}: no heading makes #{anchor}")
        if with_paths:
            for match in TICKED.finditer(line):
                named = match.group(1)
                if not named.startswith(TOP) or re.search(r"[{}<>*]", named):
                    continue
                bare = named.rstrip("/")
                if not (REPO / bare).exists() and not (path.parent / bare).exists():
                    warnings.append(f"{where}: `{named}` names no file of this tree")
    return errors, warnings


def main(argv):
    with_paths = "--paths" in argv
    names = [a for a in argv if a != "--paths"]
    files = [pathlib.Path(n).resolve() for n in names] or default_files()
    errors, warnings, links = [], [], 0
    for path in files:
        e, w = check(path, with_paths)
        errors += e
        warnings += w
        links += len(LINK.findall(path.read_text(encoding="utf-8")))
    for line in warnings:
        print("warning:", line)
    for line in errors:
        print("error:", line)
    print(f"{len(files)} files, {links} links, {len(errors)} broken"
          + (f", {len(warnings)} backticked paths missing" if with_paths else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
