"""livecheck as Envoy Gateway runs the dynamic module (issue 56, item 4): real Envoy with the config Envoy
Gateway 1.8 renders from deploy/envoy-gateway-native (tests/e2e/mesh/envoy-gateway-native.yaml, citing
the translation code it follows), the built module at the fixture's module path, the real sidecar
requiring the filter token from the proxy's environment, and the official SDKs.

The filter config is the EnvoyExtensionPolicy's `config` (the seed, plus judge_cluster and
judge_token_env) as compact JSON, with the agent `judged` added (test_mesh_configs._test_policy). Without
Envoy: the fixture follows the manifests (filter and module names, module path, doNotClose, the route
that enables it, the clusters). In Envoy: a refused question, a withheld non-streamed answer, a clean
answer, a judged question passed and refused through the patched-in judge cluster with the token. These
run under either LIVECHECK_DELIVERY: they are the module's Gateway.
"""

from __future__ import annotations

import json
import secrets

import pytest
import yaml

from envoy_process import MESH_FIXTURES, MODULE_FILTER_TYPE, REPO, Envoy, JudgeSidecar, _point_clusters, module_path
from judge_backend_double import FAIL_MARKER
from test_judged import _backends
from test_mesh_configs import BLOCKED_REPLY, JUDGED_BLOCKED, TOKEN_ENV, _test_policy, x_core_check
from test_native_config import abi_line, skip_where_the_module_cannot_load
from test_rule_checks import ANTHROPIC, CHAT, IBAN, _json_answer
from upstream_double import Answer

# These start the module from the shipped native config themselves: run once, in the module delivery's run.
pytestmark = pytest.mark.module_only

FIXTURE = MESH_FIXTURES / "envoy-gateway-native.yaml"
NATIVE = REPO / "deploy" / "envoy-gateway-native"
VENDOR_CLUSTER = "httproute/livecheck/anthropic/rule/0"


def _policy_manifest() -> dict:
    return yaml.safe_load((NATIVE / "envoyextensionpolicy.yaml").read_text())


def _entry() -> dict:
    (entry,) = _policy_manifest()["spec"]["dynamicModule"]
    return entry


def _registered(name: str) -> dict:
    proxy = yaml.safe_load((NATIVE / "envoyproxy.yaml").read_text())
    (module,) = [m for m in proxy["spec"]["dynamicModules"] if m["name"] == name]
    return module


def _listener_parts(config: dict) -> tuple[list[dict], dict]:
    """The HTTP filters and the one route of the fixture's one listener."""
    (listener,) = config["static_resources"]["listeners"]
    (hcm,) = listener["filter_chains"][0]["filters"]
    (route,) = hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    return hcm["typed_config"]["http_filters"], route


def test_the_fixture_is_the_policy_as_envoy_gateway_renders_it():
    config = yaml.safe_load(FIXTURE.read_text())
    filters, route = _listener_parts(config)
    entry = _entry()
    registered = _registered(entry["name"])
    ir_name = f"envoyextensionpolicy/livecheck/{_policy_manifest()['metadata']['name']}/dynamic-module/0"
    module_filter = filters[0]
    typed = module_filter["typed_config"]

    assert [f["name"] for f in filters] == [f"envoy.filters.http.dynamic_modules/{ir_name}", "envoy.filters.http.router"]
    assert module_filter["disabled"] is True and module_filter["name"] in route["typed_per_filter_config"]
    assert typed["@type"] == MODULE_FILTER_TYPE
    assert typed["filter_name"] == entry["filterName"] == "livecheck"
    assert typed["dynamic_module_config"] == {
        "do_not_close": registered["doNotClose"],
        "module": {"local": {"filename": registered["source"]["local"]["path"]}},
    }
    assert typed["filter_config"]["@type"] == "type.googleapis.com/google.protobuf.StringValue"
    assert {c["name"] for c in config["static_resources"]["clusters"]} == {VENDOR_CLUSTER, entry["config"]["judge_cluster"]}


# --- in real Envoy ------------------------------------------------------------------------------------------


def render_native_mesh_config(policy: str, clusters: dict[str, int]) -> dict:
    """The fixture re-pointed at loopback: the clusters on their ports, the built module at the fixture's
    module path, `policy` as its filter config (as Envoy Gateway writes it: the config object as JSON)."""
    config = yaml.safe_load(FIXTURE.read_text())
    _point_clusters(config["static_resources"]["clusters"], clusters)
    filters, _route = _listener_parts(config)
    typed = filters[0]["typed_config"]
    typed["dynamic_module_config"]["module"]["local"]["filename"] = str(module_path())
    typed["filter_config"]["value"] = policy
    return config


class NativeGateway:
    """The real sidecar (requiring the token) and Envoy running the fixture with the token in its environment."""

    def __init__(self, double, judge_backend, workdir) -> None:
        self.token = secrets.token_hex(24)
        self.judge = JudgeSidecar(workdir / "judge", _backends(judge_backend),
                                  tables={"filter": {"token_env": TOKEN_ENV}}, env={TOKEN_ENV: self.token})
        try:
            policy = _test_policy(_entry()["config"])
            assert policy["judge_token_env"] == TOKEN_ENV
            config = render_native_mesh_config(json.dumps(policy, separators=(",", ":")),
                                               {VENDOR_CLUSTER: double.port, policy["judge_cluster"]: self.judge.port})
            self.envoy = Envoy(config, workdir / "envoy", env={TOKEN_ENV: self.token})
        except BaseException:
            self.judge.close()
            raise

    def close(self) -> None:
        self.envoy.stop()
        self.judge.close()


@pytest.fixture(scope="module")
def gateway(double, judge_backend, tmp_path_factory):
    skip_where_the_module_cannot_load()
    g = NativeGateway(double, judge_backend, tmp_path_factory.mktemp("mesh-native"))
    yield g
    g.close()


def _reached_vendor(double, question: str) -> bool:
    return any(question.encode() in r.body for r in double.requests())


def test_envoy_loads_the_module_from_the_registered_path(gateway):
    log = gateway.envoy.log()

    assert abi_line() in log, log[-3000:]
    assert "livecheck configured: 3 agent(s)" in log, log[-3000:]


def test_a_question_with_a_password_is_refused_before_the_vendor(gateway, double):
    double.script(default=_json_answer(ANTHROPIC.answer("Sure.")))
    question = "My password is hunter2."

    raw = ANTHROPIC.create(gateway.envoy, question, False)

    assert ANTHROPIC.read(raw.parse())[:2] == ("refusal", BLOCKED_REPLY)
    assert x_core_check(raw.headers) == {"stage": "input", "check": "no-passwords", "code": "input_check_failed"}
    assert not _reached_vendor(double, question)


def test_a_non_streamed_answer_with_an_iban_is_withheld(gateway, double):
    double.script(default=_json_answer(CHAT.answer(f"Your refund goes to {IBAN}.")))
    failed = "dynamicmodulescustom.livecheck.orders.no-iban.failed"
    before = gateway.envoy.stats(failed).get(failed, 0)

    raw = CHAT.create(gateway.envoy, "Where is my refund?", False)
    body = raw.http_response.read()

    assert CHAT.read(raw.parse())[:2] == ("content_filter", BLOCKED_REPLY)
    assert IBAN.encode() not in body
    assert gateway.envoy.stats(failed)[failed] == before + 1


def test_a_clean_answer_passes_unchanged(gateway, double):
    upstream = json.dumps(ANTHROPIC.answer("Your order left this morning."))
    double.script(default=Answer(headers={"content-type": "application/json"}, body_chunks=[upstream], chunked=False))

    raw = ANTHROPIC.create(gateway.envoy, "Where is my order?", False)

    assert raw.http_response.read() == upstream.encode()
    assert x_core_check(raw.headers) is None


def test_a_judged_question_goes_through_the_patched_cluster_with_the_token(gateway, double, judge_backend):
    double.script(default=_json_answer(CHAT.answer("It ships tomorrow.")))
    judge_backend.reset()
    agent = {"extra_headers": {"x-core-agent": "judged"}}

    passed = CHAT.create(gateway.envoy, "Where is my order 4711?", False, **agent)
    refused = CHAT.create(gateway.envoy, f"Where is my order, you {FAIL_MARKER} bot?", False, **agent)

    assert CHAT.read(passed.parse())[:2] == ("stop", "It ships tomorrow.")
    assert CHAT.read(refused.parse())[:2] == ("content_filter", JUDGED_BLOCKED)
    assert x_core_check(refused.headers) == {"stage": "input", "check": "on-topic", "code": "input_check_failed"}
    assert _reached_vendor(double, "Where is my order 4711?")
    assert not _reached_vendor(double, FAIL_MARKER)
