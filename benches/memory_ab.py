"""Memory per held stream through real Envoy for livecheck builds side by side (`make bench-memory-ab`).

`make bench`'s memory run (`benches/compare.py`'s `memory_run`, variant (c): livecheck with the bench
rules, 1,000 held streams, a tenth as many at 200,000 tokens, a fresh Envoy per run) for each build
in turn, interleaved, so that a change to what a stream keeps can be judged in minutes instead of a
whole `make bench`. Prints, per build, shape and answer length, the wasm VM's growth per stream
(what the filter itself keeps), the peak RSS growth per stream and Envoy's own heap per stream.

    MEMORY_AB=/tmp/base,/tmp/head make bench-memory-ab
    # each directory holds a livecheck.wasm; MEMORY_SHAPES=chat,chat-n4,responses,
    # MEMORY_TOKENS=2000,20000,200000, MEMORY_REPS=1 (defaults shown)

The .wasm files must be newer than this tree's sources (`touch` them after copying), as every test
and bench here refuses a stale build. Loopback only; every run is bounded by compare.py's own limits.
"""

import os
import pathlib
import resource
import shutil
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import compare  # noqa: E402


def main() -> int:
    dirs = [d for d in os.environ.get("MEMORY_AB", "").split(",") if d]
    if not dirs:
        raise SystemExit("MEMORY_AB=dir1,dir2 (directories holding a livecheck.wasm each) is required")
    shapes = os.environ.get("MEMORY_SHAPES", "chat,chat-n4,responses").split(",")
    tokens_list = [int(t) for t in os.environ.get("MEMORY_TOKENS", "2000,20000,200000").split(",")]
    reps = int(os.environ.get("MEMORY_REPS", "1"))
    for d in dirs:
        compare.check((pathlib.Path(d) / "livecheck.wasm").is_file(), f"{d}/livecheck.wasm is missing")
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    compare.check(hard >= 4 * compare.MEMORY_STREAMS + 512, f"open files limit {hard} is too low")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-memory-ab-"))
    double = compare.UpstreamDouble()
    compare.SIDECAR = compare.judge_sidecar(workdir)
    print("| build | shape | tokens × streams | wasm VM KiB/stream | RSS peak KiB/stream | Envoy heap KiB/stream |")
    print("|---|---|---|---|---|---|")
    try:
        for rep in range(reps):
            for shape in shapes:
                for tokens in tokens_list:
                    order = list(enumerate(dirs))
                    for i, d in (order if rep % 2 == 0 else order[::-1]):
                        os.environ["LIVECHECK_WASM_DIR"] = d
                        m = compare.memory_run(double, workdir, "c", tokens, compare.memory_streams(tokens),
                                               rep * 100 + i, shape)
                        print(f"| {d} | {shape} | {tokens} × {m['streams']} | {m['per_stream_vm_kib']:.2f} | "
                              f"{m['per_stream_hwm_kib']:.2f} | {m['per_stream_alloc_kib']:.2f} |", flush=True)
    finally:
        double.stop()
        compare.SIDECAR.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
