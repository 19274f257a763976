"""The CLI's tests reuse the e2e helpers: the fresh-.wasm rule, the prebuilt binaries and the upstream double."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "e2e"))
