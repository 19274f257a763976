#!/usr/bin/env python3
"""The import circles of a Rust crate's modules: which module files name which others
(`use crate::a::b`, `crate::a::f(..)` paths, `super::x`), and the strongly connected components
of that graph with more than one module (Tarjan). Module = a file under the crate's src (mod.rs
counts as its folder). Usage: import_cycles.py [--check] SRC_DIR [SRC_DIR...]; with --check it exits 1
when any crate has a circle (`make structure`, part of `make test`)."""
import pathlib
import re
import sys


def module_of(src: pathlib.Path, path: pathlib.Path) -> tuple:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def resolve(modules: set, parts: tuple):
    """The longest prefix of `parts` that is a module."""
    for n in range(len(parts), 0, -1):
        if parts[:n] in modules:
            return parts[:n]
    return None


USE = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{[^;]*)")


def edges(src: pathlib.Path):
    files = [p for p in src.rglob("*.rs")]
    modules = {module_of(src, p) for p in files}
    graph = {m: set() for m in modules}
    for p in files:
        me = module_of(src, p)
        text = p.read_text(errors="replace")
        # Drop #[cfg(test)] mod tests { ... } roughly: tests may import anything.
        cut = re.search(r"#\[cfg\(test\)\]\s*mod tests", text)
        if cut:
            text = text[: cut.start()]
        text = re.sub(r"//.*", "", text)
        for m in re.finditer(r"\b(crate|super)::((?:[A-Za-z_][A-Za-z0-9_]*::)*)(\{[^;]*?\}|[A-Za-z_][A-Za-z0-9_]*)", text):
            root, mid, last = m.group(1), m.group(2), m.group(3)
            base = () if root == "crate" else (me[:-1] if p.stem not in ("mod", "lib", "main") else me[:-1])
            if root == "super" and p.stem == "mod":
                base = me[:-1]
            elif root == "super":
                base = me[:-1]
            path_parts = tuple(x for x in mid.split("::") if x)
            names = [last] if not last.startswith("{") else [n.strip().split("::")[0] for n in last[1:-1].split(",") if n.strip()]
            for name in names:
                target = resolve(modules, base + path_parts + (name,)) or resolve(modules, base + path_parts)
                if target and target != me and not (target == () ):
                    graph[me].add(target)
    return graph


def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def main(args: list) -> int:
    check = "--check" in args
    found = 0
    for src in (pathlib.Path(a) for a in args if a != "--check"):
        graph = edges(src)
        circles = sccs(graph)
        found += len(circles)
        print(f"{src}: {len(graph)} modules, {len(circles)} circles")
        for c in sorted(circles, key=len, reverse=True):
            print("  " + " <-> ".join(sorted("::".join(m) or "crate" for m in c)))
    return 1 if check and found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
