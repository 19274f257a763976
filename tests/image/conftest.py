"""The image tests import the builder from scripts/, and read the filter that `make wasm` built and the
static sidecar that `make judge-static` built."""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))


@pytest.fixture(scope="session")
def wasm_file() -> pathlib.Path:
    """livecheck.wasm as `make wasm` leaves it (LIVECHECK_WASM_DIR, which make exports). Only its
    packaging is under test here, so any build of it will do, but a missing one fails the run."""
    wasm_dir = pathlib.Path(os.environ.get("LIVECHECK_WASM_DIR", REPO / "target" / "wasm32-wasip1" / "release"))
    path = wasm_dir / "livecheck.wasm"
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `make wasm`")
    return path


@pytest.fixture(scope="session")
def judge_static() -> pathlib.Path:
    """livecheck-judge as `make judge-static` leaves it, the binary `make image` packs
    (LIVECHECK_JUDGE_STATIC, which make exports; `make image-tests` builds it first). A missing one
    fails the run."""
    default = REPO / "target" / "x86_64-unknown-linux-musl" / "release" / "livecheck-judge"
    path = pathlib.Path(os.environ.get("LIVECHECK_JUDGE_STATIC", default))
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `make judge-static`")
    return path
