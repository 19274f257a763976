"""Fixtures: the upstream test double and real Envoy processes (stopped by PID at session end)."""

from __future__ import annotations

import json

import pytest

from cut_support import RULES_ONLY
from envoy_process import DELIVERY, SEED_CONFIG, Envoy, render_config, wasm_path
from judge_backend_double import JudgeBackendDouble
from upstream_double import UpstreamDouble
from wasm_exports import without_exports


def pytest_configure(config):
    config.addinivalue_line("markers", "wasm_only: what only the proxy-wasm filter does (skipped for the module)")
    config.addinivalue_line("markers", "module_only: what only the dynamic module does (skipped for the wasm filter)")


def pytest_collection_modifyitems(config, items):
    """Each delivery runs what applies to it (LIVECHECK_DELIVERY; `make e2e` runs both)."""
    other = "module_only" if DELIVERY == "wasm" else "wasm_only"
    skip = pytest.mark.skip(reason=f"not the {DELIVERY} delivery's behaviour")
    for item in items:
        if item.get_closest_marker(other):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def double():
    d = UpstreamDouble().start()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def judge_backend(request):
    """The JUDGE BACKEND DOUBLE (a scripted model the sidecar asks), one per test module; a module sets
    `JUDGE_SLOW_SECONDS` for how late its `SLOW` conditions are answered."""
    d = JudgeBackendDouble(slow_seconds=getattr(request.module, "JUDGE_SLOW_SECONDS", 3.0)).start()
    yield d
    d.stop()


@pytest.fixture(scope="session")
def livecheck_envoy(double, tmp_path_factory):
    """Envoy running livecheck with the seed configuration (examples/seed.json) in front of the double."""
    wasm = wasm_path("livecheck.wasm")
    config = render_config(wasm, double.port, plugin_configuration=SEED_CONFIG.read_text())
    envoy = Envoy(config, tmp_path_factory.mktemp("envoy-livecheck"))
    yield envoy
    envoy.stop()


@pytest.fixture(scope="module")
def rules_envoy(double, tmp_path_factory):
    """Envoy (envoy/livecheck.yaml re-pointed at the double) running livecheck with RULES_ONLY (one
    blocking output pattern, so answers stream with minimal hold-back), one per test module."""
    config = render_config(wasm_path("livecheck.wasm"), double.port, plugin_configuration=json.dumps(RULES_ONLY))
    envoy = Envoy(config, tmp_path_factory.mktemp("envoy-rules"))
    yield envoy
    envoy.stop()


@pytest.fixture(scope="session")
def fidelity_envoy(double, tmp_path_factory):
    """fidelity_envoy(filter_options) -> an Envoy running the fidelity filter with those options.

    One Envoy per distinct options object, started on first use and kept for the session.
    """
    wasm = wasm_path("fidelity_filter.wasm")
    envoys: dict[str, Envoy] = {}

    def get(options: dict) -> Envoy:
        key = json.dumps(options, sort_keys=True)
        if key not in envoys:
            module = wasm
            if options.get("without_exports"):
                module = tmp_path_factory.mktemp("fidelity-wasm") / wasm.name
                module.write_bytes(without_exports(wasm.read_bytes(), options["without_exports"]))
            config = render_config(
                module,
                double.port,
                plugin_name="fidelity",
                plugin_configuration=json.dumps(options.get("plugin_config", {})),
                allow_on_headers_stop_iteration=options.get("allow_on_headers_stop_iteration", True),
                failure_policy=options.get("failure_policy", "FAIL_RELOAD"),
                buffer_limit=options.get("buffer_limit"),
                environment=options.get("environment"),
                extra_clusters={"fidelity_callout": double.port},
            )
            envoys[key] = Envoy(config, tmp_path_factory.mktemp("envoy-fidelity"))
        return envoys[key]

    yield get
    for envoy in envoys.values():
        envoy.stop()
