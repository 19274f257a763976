"""envoy/livecheck-native.yaml, the config an operator of the dynamic module starts from (issue 56, item 4).

Without Envoy: it is envoy/livecheck.yaml with the module in place of the wasm filter, the same listener,
routes, clusters and policy text, so the two cannot drift. In real Envoy: the shipped config itself,
re-pointed at the upstream double as render_config does for livecheck.yaml (ports 0, the vendor cluster
on loopback), its module path left as shipped (relative to the repository root, where Envoy runs); it
loads the module with a matching ABI version, refuses a question with a password before the vendor,
withholds an answer with an IBAN naming the check in X-Core-Check (no Envoy flag needed), and passes a
clean turn byte for byte. These run under either LIVECHECK_DELIVERY: they are the module's config.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import subprocess

import pytest
import yaml

from envoy_process import (
    LIVECHECK_YAML,
    MODULE_FILTER_TYPE,
    REPO,
    SEED_CONFIG,
    Envoy,
    _cluster,
    envoy_binary,
    module_path,
)
from test_rule_checks import ANTHROPIC, BLOCKED_REPLY, CHAT, CLEAN_ANSWER, CLEAN_QUESTION, FORBIDDEN_ANSWER, IBAN
from upstream_double import Answer

# These start the module from the shipped native config themselves: run once, in the module delivery's run.
pytestmark = pytest.mark.module_only

NATIVE_YAML = REPO / "envoy" / "livecheck-native.yaml"
# The module `make module` writes (the Makefile's MODULE), relative to the repository root.
MODULE = "target/envoy-module/liblivecheck.so"
# What Envoy 1.40 logs for a module that declares the ABI version it was built for (docs/issue-56/abi.md);
# 1.39 loads it too, logging the version as deprecated (docs/native-module-versions.md).
ABI_MATCHED = "Dynamic module ABI version v0.2.0 matched."
ABI_DEPRECATED = "Dynamic module ABI version v0.2.0 is deprecated."
# The Envoy the module's ABI is declared for.
MODULE_ENVOY = (1, 40)


def _load(path) -> dict:
    return yaml.safe_load(path.read_text())


def _hcm(config: dict) -> dict:
    (listener,) = config["static_resources"]["listeners"]
    (hcm,) = listener["filter_chains"][0]["filters"]
    return hcm["typed_config"]


def _livecheck_filter(config: dict) -> dict:
    (first, router) = _hcm(config)["http_filters"]
    assert router["name"] == "envoy.filters.http.router"
    return first


def _without_livecheck(config: dict) -> dict:
    """The config with livecheck's HTTP filter taken out: what both configs must share."""
    rest = copy.deepcopy(config)
    filters = _hcm(rest)["http_filters"]
    filters.remove(_livecheck_filter(config))
    return rest


# --- the shipped file ------------------------------------------------------------------------------------


def test_the_native_config_is_livecheck_yaml_with_the_module_in_place_of_the_wasm_filter():
    wasm, native = _load(LIVECHECK_YAML), _load(NATIVE_YAML)

    # Admin, listener, connection manager settings, routes, clusters: the same.
    assert _without_livecheck(native) == _without_livecheck(wasm)
    # The policy: the same text, character for character.
    wasm_policy = _livecheck_filter(wasm)["typed_config"]["config"]["configuration"]
    native_policy = _livecheck_filter(native)["typed_config"]["filter_config"]
    assert native_policy == wasm_policy
    shipped = json.loads(native_policy["value"])
    assert shipped.pop("hold_answer_headers") is True
    assert shipped == json.loads(SEED_CONFIG.read_text())


def test_the_native_config_loads_the_built_module_as_livecheck():
    module = _livecheck_filter(_load(NATIVE_YAML))
    typed = module["typed_config"]

    assert module["name"] == "envoy.filters.http.dynamic_modules"
    assert typed["@type"] == MODULE_FILTER_TYPE
    assert typed["filter_name"] == "livecheck"
    assert typed["dynamic_module_config"] == {"module": {"local": {"filename": MODULE}}, "do_not_close": True}
    # The wasm flag means nothing to a module; nothing of the wasm filter is left.
    shipped = json.dumps(_load(NATIVE_YAML))
    assert "allow_on_headers_stop_iteration" not in shipped and "wasm" not in shipped


# --- in real Envoy ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def envoy_version() -> tuple[int, int]:
    """The tests' Envoy's minor version, (1, 40) for 1.40.0 (`make e2e-matrix` runs older ones)."""
    out = subprocess.run([envoy_binary(), "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"version: [0-9a-f]+/(\d+)\.(\d+)\.", out)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def abi_line() -> str:
    """What this Envoy logs when it loads the module."""
    return ABI_MATCHED if envoy_version() >= MODULE_ENVOY else ABI_DEPRECATED


@functools.lru_cache(maxsize=None)
def refused_by_this_envoy() -> str:
    """Why this Envoy does not load the module ("" when it does): Envoy before 1.39 lacks callbacks the
    module calls (docs/native-module-versions.md). `envoy --mode validate` of the shipped config says."""
    module_path()
    result = subprocess.run([envoy_binary(), "--mode", "validate", "-c", str(NATIVE_YAML), "--disable-hot-restart",
                             "--log-level", "critical"], cwd=REPO, capture_output=True, text=True, timeout=120)
    return "" if result.returncode == 0 else (result.stdout + result.stderr).strip()[-300:]


def skip_where_the_module_cannot_load() -> None:
    """Skips a test that runs the module on an Envoy older than the one it is built for that refuses it
    (the e2e matrix's older versions), naming Envoy's reason; on the Envoy it is built for, a refusal
    fails the test instead."""
    why = refused_by_this_envoy()
    if why and envoy_version() < MODULE_ENVOY:
        pytest.skip(f"this Envoy {envoy_version()} does not load the module: {why}")


def _validate(config_text: str, tmp_path) -> subprocess.CompletedProcess:
    """`envoy --mode validate` of a config, run from the repository root as `make envoy-validate` runs."""
    path = tmp_path / "envoy.yaml"
    path.write_text(config_text)
    module_path()
    return subprocess.run([envoy_binary(), "--mode", "validate", "-c", str(path), "--disable-hot-restart",
                           "--log-level", "info"], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_envoy_validate_loads_the_module_and_compiles_its_policy(tmp_path):
    skip_where_the_module_cannot_load()
    shipped = NATIVE_YAML.read_text()
    broken = shipped.replace('"kind": "not_contains"', '"kind": "bogus"', 1)
    assert broken != shipped

    ok, refused = _validate(shipped, tmp_path), _validate(broken, tmp_path)

    assert ok.returncode == 0 and abi_line() in ok.stdout + ok.stderr, ok.stdout[-3000:] + ok.stderr[-3000:]
    # The module compiles the policy as `make envoy-validate` loads it: a bad one fails validation.
    assert refused.returncode != 0
    assert "config refused: 1 problem(s)" in refused.stdout + refused.stderr


def render_native_config(upstream_port: int) -> dict:
    """envoy/livecheck-native.yaml with loopback ports and the vendor cluster on the double."""
    module_path()  # refuses a missing or stale module, naming `make module`
    config = _load(NATIVE_YAML)
    config["admin"]["address"]["socket_address"]["port_value"] = 0
    (listener,) = config["static_resources"]["listeners"]
    listener["address"]["socket_address"]["port_value"] = 0
    for route in _hcm(config)["route_config"]["virtual_hosts"][0]["routes"]:
        route["route"].pop("host_rewrite_literal", None)
    clusters = config["static_resources"]["clusters"]
    (vendor,) = [i for i, c in enumerate(clusters) if c["name"] == "vendor_api"]
    clusters[vendor] = _cluster("vendor_api", upstream_port)
    return config


@pytest.fixture(scope="module")
def native_envoy(double, tmp_path_factory):
    skip_where_the_module_cannot_load()
    envoy = Envoy(render_native_config(double.port), tmp_path_factory.mktemp("envoy-native"))
    yield envoy
    envoy.stop()


def _json_answer(body: dict) -> Answer:
    return Answer(headers={"content-type": "application/json"}, body_chunks=[json.dumps(body)], chunked=False)


def test_envoy_loads_the_module_from_the_shipped_path_with_a_matching_abi_version(native_envoy):
    log = native_envoy.log()

    assert abi_line() in log, log[-3000:]
    assert re.search(r"livecheck \d+\.\d+\.\d+ \(git [0-9a-f]{7,}(-dirty)?\)", log), log[-3000:]
    assert "livecheck configured: 1 agent(s)" in log, log[-3000:]
    assert "config refused" not in log


def test_a_question_with_a_password_is_refused_before_the_vendor(native_envoy, double):
    double.script(default=_json_answer(ANTHROPIC.answer("Sure.")))
    question = "My password is hunter2."

    raw = ANTHROPIC.create(native_envoy, question, False)
    stop, text, _usage = ANTHROPIC.read(raw.parse())

    assert (stop, text) == ("refusal", BLOCKED_REPLY)
    assert raw.headers["x-core-check"].startswith('stage=input, check="no-passwords"'), raw.headers["x-core-check"]
    assert not any(question.encode() in r.body for r in double.requests())
    failed = "dynamicmodulescustom.livecheck.orders.no-passwords.failed"
    assert native_envoy.stats(failed)[failed] >= 1


def test_a_withheld_answer_names_its_check_without_an_envoy_flag(native_envoy, double):
    double.script(default=_json_answer(CHAT.answer(FORBIDDEN_ANSWER)))

    raw = CHAT.create(native_envoy, CLEAN_QUESTION, False)
    body = raw.http_response.read()
    stop, text, _usage = CHAT.read(raw.parse())

    assert (stop, text) == ("content_filter", BLOCKED_REPLY)
    assert IBAN.encode() not in body
    assert 'check="no-iban"' in raw.headers["x-core-check"], raw.headers["x-core-check"]


def test_a_clean_turn_passes_unchanged(native_envoy, double):
    upstream = json.dumps(ANTHROPIC.answer(CLEAN_ANSWER))
    double.script(default=Answer(headers={"content-type": "application/json"}, body_chunks=[upstream], chunked=False))

    raw = ANTHROPIC.create(native_envoy, CLEAN_QUESTION, False)

    assert raw.http_response.read() == upstream.encode()
    assert "x-core-check" not in raw.headers
    (sent,) = double.requests()
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["accept-encoding"] == "identity"  # the shipped route's header
