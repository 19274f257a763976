"""Exploratory: every SDK path x every cut mechanism through real Envoy. Run by hand (takes ~1 min):

    .venv/bin/python tests/e2e/cut_matrix.py [how ...]

Prints a Markdown table: seconds from the cut to the SDK call returning, whether it raised, what the
call reported, and when the upstream double saw Envoy go away (or that the upstream ran to its end).
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from cut_support import SDK_PATHS, measure, start_envoy  # noqa: E402
from upstream_double import UpstreamDouble  # noqa: E402

MECHANISMS = [
    "drop",
    "local_reply", "close_response", "close_request",
    "local_reply_next", "close_response_next", "close_request_next",
    "local_reply_timer", "close_response_timer", "close_request_timer",
]


def main() -> None:
    hows = sys.argv[1:] or MECHANISMS
    double = UpstreamDouble().start()
    envoy = start_envoy(double, pathlib.Path(tempfile.mkdtemp(prefix="cut-matrix-")))
    try:
        jobs = [(sdk, how) for how in hows for sdk in SDK_PATHS]
        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            # The slow (drop) runs first so they overlap with everything else.
            futures = [pool.submit(measure, envoy.url, double, sdk, how) for sdk, how in jobs]
            outcomes = [f.result() for f in futures]
        print("| SDK path | mechanism | cut→return | raised | result | cut→upstream gone | upstream chunks after cut |")
        print("|---|---|---|---|---|---|---|")
        for o in outcomes:
            print(o.row())
        print(f"\nEnvoy log: {envoy.log_path}")
    finally:
        envoy.stop()
        double.stop()


if __name__ == "__main__":
    main()
