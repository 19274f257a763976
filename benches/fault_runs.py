"""What the runs that inject faults share (`make soak`, benches/soak.py; `make chaos-replicas`,
benches/chaos_replicas.py) beside their throwaway PostgreSQL server (tests/e2e/postgres_server.py):
stopping every process a run started, and keeping a failed run's work directory."""

from __future__ import annotations

import pathlib
import shutil
import sys



def stop_all(started: list) -> None:
    """Stops what a run started, last first, each by its own PID: `close()` where it has one (a sidecar:
    stopped and its log closed), else `stop()`; one that fails to stop does not keep the others running."""
    for process in reversed(started):
        try:
            close = getattr(process, "close", None)
            (close or process.stop)()
        except Exception as e:  # noqa: BLE001 (stop every process whatever one did)
            print(f"stopping {process}: {e}", file=sys.stderr)


def finish(name: str, failures: list[str], workdir: pathlib.Path) -> int:
    """Prints the failures; keeps the work directory (logs, stores) of a failed run, removes a passed
    one's. The exit status."""
    for failure in failures:
        print(f"{name} FAILED: {failure}", file=sys.stderr)
    if failures:
        print(f"the run's logs and stores are kept in {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failures else 0
