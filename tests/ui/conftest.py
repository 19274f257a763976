"""Fixtures of the operator pages' browser tests: the e2e suite's doubles and process helpers
(tests/e2e, imported from there), and headless Chromium (Debian's `chromium`, driven by Playwright
for Python; `make ui-tests` installs both) with axe-core from tests/ui/node_modules."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests" / "e2e"))



def _e2e_conftest():
    """tests/e2e/conftest.py under another module name (this file is `conftest` too)."""
    spec = importlib.util.spec_from_file_location("e2e_conftest", REPO / "tests" / "e2e" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The upstream double and the judge backend double, as the e2e suite starts them.
_E2E = _e2e_conftest()
double = _E2E.double
judge_backend = _E2E.judge_backend

CHROMIUM = os.environ.get("LIVECHECK_CHROMIUM", "/usr/bin/chromium")
AXE = HERE / "node_modules" / "axe-core" / "axe.min.js"
SCREENSHOTS = REPO / "target" / "ui-screenshots"


@pytest.fixture(scope="session")
def chromium():
    """One headless Chromium for the session: the system's binary, no browser download."""
    from playwright.sync_api import sync_playwright

    assert pathlib.Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: make ui-tests installs Debian's chromium"
    with sync_playwright() as p:
        # --no-sandbox: the tests run as root, where Chromium's sandbox refuses to start.
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def axe_source() -> str:
    assert AXE.exists(), f"{AXE} is missing: make ui-tests runs npm ci in tests/ui"
    return AXE.read_text()


@pytest.fixture(scope="session")
def screenshots() -> pathlib.Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
