"""A throwaway PostgreSQL server for the tests and the runs that need one (tests/e2e/test_replicas.py,
`make soak`, `make chaos-replicas`): judge/tests/postgres.sh starts it in a directory of its own on a free
loopback port (trust auth, user `livecheck`; as root the server runs as `nobody`, so the directory is
made reachable), restarts it in place on the same port, and stops it (pg_ctl, by the server's own PID
file). Queries go through `psql`."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile
from typing import Optional

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "judge" / "tests" / "postgres.sh"


class Postgres:
    """A throwaway PostgreSQL server in `workdir`/postgres, or in a temporary directory of its own that
    `stop()` removes."""

    def __init__(self, workdir: Optional[pathlib.Path] = None) -> None:
        self.owns_dir = workdir is None
        if workdir is None:
            self.dir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-pg."))
            os.chmod(self.dir, 0o755)
        else:
            self.dir = workdir / "postgres"
        started = subprocess.run([str(SCRIPT), "start", str(self.dir)], capture_output=True, text=True)
        if started.returncode != 0:
            self.stop()
            raise RuntimeError(f"PostgreSQL did not start (make postgres-tools installs it):\n{started.stderr}")
        self.url = started.stdout.strip()

    def restart(self, down_seconds: float = 0) -> None:
        """Stops the server (fast) and starts it again on its port, `down_seconds` later."""
        subprocess.run([str(SCRIPT), "restart", str(self.dir), str(down_seconds)], check=True)

    def query(self, sql: str) -> list[list[str]]:
        out = subprocess.run(["psql", self.url, "-At", "-F", "\t", "-c", sql], check=True, capture_output=True,
                             text=True).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def count(self, table: str) -> int:
        """Rows of `table` (a table name, or a table and its WHERE clause; never input)."""
        return int(self.query(f"SELECT count(*) FROM {table}")[0][0])

    def stop(self) -> None:
        subprocess.run([str(SCRIPT), "stop", str(self.dir)], check=False)
        if self.owns_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
