"""The dynamic-module variants `make bench` measures beside the wasm ones (issue 56): livecheck's module
(target/envoy-module/liblivecheck.so, `make module`) and the bench's own module (benches/noop-module,
`make bench-modules`: `{}` is the module no-op, FLOOR_ACTIONS the module floor), each put in the wasm
filter's place in a config `tests/e2e/envoy_process.render_config` rendered, so every variant has the same
listener, routes, clusters and filter position.

Also the wasm floor's configuration (benches/noop-filter given FLOOR_ACTIONS, as `benches/floor.py`'s
`all` variant loads it).
"""
from __future__ import annotations

import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from envoy_process import module_filter, module_path  # noqa: E402

NOOP_MODULE = REPO / "target" / "envoy-module" / "bench" / "libnoop.so"
NOOP_MODULE_SOURCES = [REPO / "benches" / "noop-module" / "src" / "lib.rs", REPO / "benches" / "noop-module" / "Cargo.toml"]
# What any filter that checks a non-streamed turn asks of Envoy (benches/floor.py's `all`): both header maps
# read whole, accept-encoding set, a turn-id header added, content-length dropped, both bodies held until
# whole and read, ten counters bumped.
FLOOR_ACTIONS = "request_headers,hold_request,read_request,response_headers,hold_response,read_response,counters"
# The counter prefix of a module's own counters (Envoy's DynamicModuleHttpFilterConfig stats namespace).
MODULE_STATS = "dynamicmodulescustom."


def noop_module() -> pathlib.Path:
    """The bench's module, refused when missing or older than its sources (run `make bench-modules`)."""
    if not NOOP_MODULE.is_file():
        raise FileNotFoundError(f"{NOOP_MODULE} is missing: run `make bench-modules`")
    built = NOOP_MODULE.stat().st_mtime
    newer = [p for p in NOOP_MODULE_SOURCES if p.stat().st_mtime > built]
    if newer:
        raise FileNotFoundError(f"{NOOP_MODULE} is older than {newer[0]}: run `make bench-modules`")
    return NOOP_MODULE


def _filters(config: dict) -> list:
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    return hcm["http_filters"]


def swap_in_module(config: dict, filter_config: str, module: pathlib.Path, filter_name: str) -> dict:
    """`config` with its wasm filter replaced by the dynamic module `module` given `filter_config`."""
    filters = _filters(config)
    i = next(i for i, f in enumerate(filters) if f["name"] == "envoy.filters.http.wasm")
    f = module_filter(filter_config, module)
    f["typed_config"]["filter_name"] = filter_name
    filters[i] = f
    return config


def livecheck_module(config: dict) -> dict:
    """A livecheck wasm config (rendered with the policy as plugin configuration) as livecheck's module."""
    wasm = next(f for f in _filters(config) if f["name"] == "envoy.filters.http.wasm")
    policy = wasm["typed_config"]["config"]["configuration"]["value"]
    return swap_in_module(config, policy, module_path(), "livecheck")


def noop_module_config(config: dict, actions: str = "{}") -> dict:
    """A config with a wasm filter, that filter replaced by the bench's module doing `actions`."""
    return swap_in_module(config, actions, noop_module(), "noop")


def wasm_floor(config: dict) -> dict:
    """A no-op wasm filter config (benches/noop-filter) given the floor's actions."""
    for f in _filters(config):
        if f["name"] == "envoy.filters.http.wasm":
            f["typed_config"]["config"]["configuration"]["value"] = FLOOR_ACTIONS
    return config
