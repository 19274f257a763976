"""What the runs that inject faults share (`make soak`, benches/soak.py; `make chaos-replicas`,
benches/chaos_replicas.py): a throwaway PostgreSQL server, stopping every process a run started, and
keeping a failed run's work directory.

The server: judge/tests/postgres.sh starts it in a directory of its own on a free loopback port (trust
auth, user `livecheck`), restarts it in place on the same port, and stops it (pg_ctl, by the server's
own PID file). Queries go through `psql`."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / "judge" / "tests" / "postgres.sh"


class Postgres:
    """A throwaway PostgreSQL server (judge/tests/postgres.sh), restarted in place and stopped by it."""

    def __init__(self, workdir: pathlib.Path) -> None:
        self.dir = workdir / "postgres"
        self.script = str(SCRIPT)
        self.url = subprocess.run([self.script, "start", str(self.dir)], check=True, capture_output=True,
                                  text=True).stdout.strip()

    def restart(self, down_seconds: float = 0) -> None:
        """Stops the server (fast) and starts it again on its port, `down_seconds` later."""
        subprocess.run([self.script, "restart", str(self.dir), str(down_seconds)], check=True)

    def query(self, sql: str) -> list[list[str]]:
        out = subprocess.run(["psql", self.url, "-At", "-F", "\t", "-c", sql], check=True, capture_output=True,
                             text=True).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def stop(self) -> None:
        subprocess.run([self.script, "stop", str(self.dir)], check=False)


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
