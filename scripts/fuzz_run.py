#!/usr/bin/env python3
"""Runs the fuzz targets of fuzz/ (cargo-fuzz, libFuzzer, nightly) one after the other, each for a
set time at low priority, and prints a table per target: executions, executions per second,
coverage (libFuzzer's `cov:` edges and `ft:` features), corpus size and crashes. Writes the table
to target/fuzz/summary.md (and to --report when given). Exits non-zero when a target crashed; the
crashing input is in fuzz/artifacts/<target>/.

Each target reads its checked-in seeds (fuzz/corpus/<target>/) and grows a working corpus in
fuzz/target/corpus/<target>/ that later runs start from. `--cmin` instead adds to the checked-in
corpus the working corpus's inputs that add coverage to it (libFuzzer's -merge=1), each cut to
CMIN_LEN bytes.

Usage: scripts/fuzz_run.py [--seconds N] [--cmin] [--report FILE] TARGET...
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
FUZZ = ROOT / "fuzz"
CARGO_FUZZ = ROOT / ".tools" / "bin" / "cargo-fuzz"
MAX_LEN = 16384
# What `--cmin` keeps of a found input: the checked-in corpus stays under 2 MB.
CMIN_LEN = 1024


def cargo_fuzz(args, **kw):
    """`cargo fuzz ARGS` on the nightly toolchain (the repository pins stable), nice'd."""
    env = dict(os.environ, RUSTUP_TOOLCHAIN="nightly")
    cmd = ["nice", "-n", "10", str(CARGO_FUZZ), "fuzz", *args]
    return subprocess.run(cmd, cwd=FUZZ, env=env, **kw)


def corpus_stats(path):
    files = [p for p in path.iterdir() if p.is_file()] if path.is_dir() else []
    return len(files), sum(p.stat().st_size for p in files)


def last(pattern, text, cast=int):
    found = re.findall(pattern, text)
    return cast(found[-1]) if found else None


def run(target, seconds):
    work = FUZZ / "target" / "corpus" / target
    seeds = FUZZ / "corpus" / target
    work.mkdir(parents=True, exist_ok=True)
    artifacts = FUZZ / "artifacts" / target
    before = set(artifacts.iterdir()) if artifacts.is_dir() else set()
    started = time.monotonic()
    proc = cargo_fuzz(
        ["run", "-O", target, str(work), str(seeds), "--",
         f"-max_total_time={seconds}", f"-max_len={MAX_LEN}", "-timeout=10",
         "-rss_limit_mb=2048", "-print_final_stats=1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
    )
    elapsed = time.monotonic() - started
    log = proc.stdout
    (FUZZ / "target" / f"{target}.log").write_text(log)
    crashes = sorted(set(artifacts.iterdir()) - before) if artifacts.is_dir() else []
    files, size = corpus_stats(work)
    seed_files, _ = corpus_stats(seeds)
    return {
        "target": target,
        "seconds": round(elapsed),
        "execs": last(r"stat::number_of_executed_units:\s*(\d+)", log),
        "exec_s": last(r"stat::average_exec_per_sec:\s*(\d+)", log),
        "cov": last(r"\bcov: (\d+)", log),
        "ft": last(r"\bft: (\d+)", log),
        "seeds": seed_files,
        "corpus": files,
        "corpus_kb": round(size / 1024),
        "rss_mb": last(r"stat::peak_rss_mb:\s*(\d+)", log),
        "crashes": [str(c.relative_to(ROOT)) for c in crashes],
        "ok": proc.returncode == 0 and not crashes,
    }


def num(n):
    return "?" if n is None else f"{n:,}"


def table(rows):
    head = ("| target | seconds | executions | exec/s | cov (edges) | ft (features) | seeds | "
            "corpus (files / KiB) | peak RSS MB | crashes |")
    lines = [head, "|" + " --- |" * 10]
    for r in rows:
        crashes = ", ".join(r["crashes"]) or ("none" if r["ok"] else "run failed, see log")
        lines.append(
            f"| {r['target']} | {r['seconds']} | {num(r['execs'])} | {num(r['exec_s'])} | "
            f"{num(r['cov'])} | {num(r['ft'])} | {r['seeds']} | {r['corpus']} / {r['corpus_kb']} | "
            f"{num(r['rss_mb'])} | {crashes} |"
        )
    return "\n".join(lines)


def cmin(target):
    """Adds to the checked-in seeds the smallest set of working-corpus inputs (each cut to
    CMIN_LEN bytes) that covers what the seeds do not, so the repository stays small."""
    seeds = FUZZ / "corpus" / target
    work = FUZZ / "target" / "corpus" / target
    cargo_fuzz(["run", "-O", target, str(seeds), str(work), "--", "-merge=1",
                f"-max_len={CMIN_LEN}"], check=True, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
    files, size = corpus_stats(seeds)
    print(f"{target}: {files} inputs, {round(size / 1024)} KiB checked in")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--cmin", action="store_true")
    ap.add_argument("--report")
    ap.add_argument("targets", nargs="+")
    args = ap.parse_args()
    if args.cmin:
        for t in args.targets:
            cmin(t)
        return 0
    cargo_fuzz(["build", "-O"], check=True)
    rows = []
    for t in args.targets:
        print(f"fuzz: {t} for {args.seconds} s", flush=True)
        rows.append(run(t, args.seconds))
        r = rows[-1]
        print(f"  {r['execs']} executions, cov {r['cov']}, ft {r['ft']}, corpus {r['corpus']}, "
              f"crashes: {', '.join(r['crashes']) or 'none'}", flush=True)
    out = table(rows)
    print(out)
    summary = ROOT / "target" / "fuzz" / "summary.md"
    summary.parent.mkdir(parents=True, exist_ok=True)
    summary.write_text(out + "\n")
    if args.report:
        pathlib.Path(args.report).write_text(out + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
