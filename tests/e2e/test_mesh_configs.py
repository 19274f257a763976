"""livecheck as Istio and Envoy Gateway run it (issue 15): real Envoy with the Envoy config each control
plane renders from the shipped manifests (tests/e2e/mesh/, each citing the translation code it follows),
the real sidecar requiring the filter token, and the official SDKs.

The plugin configuration is the one in deploy/istio/wasmplugin.yaml or
deploy/envoy-gateway/envoyextensionpolicy.yaml (the seed, plus judge_cluster in the mesh's own naming and
judge_token_env), with two agents added for what the seed does not show: `judged` (a judged input check)
and `rules` (an output rule without recovery, so a stream is cut). The token reaches the VM as each mesh
delivers it: the proxy's own environment variable, named by the filter's host_env_keys. Neither config
sets allow_on_headers_stop_iteration.

Per mesh: a refused question, a withheld non-streamed answer, a streamed answer cut where an IBAN
starts, a clean streamed and non-streamed answer, a judged question passed and refused; and, without
Envoy, that each fixture follows its manifest (root id, failure policy, env keys, cluster and filter
names).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import urllib.error
import urllib.request
from typing import Callable, Optional

import httpx2 as httpx
import pytest
import yaml

from cut_support import (
    BEFORE_MATCH,
    CLEAN,
    FORBIDDEN,
    NEVER_SENT,
    RULES_ONLY,
    VENDOR_EVENTS,
    Tee,
    anthropic_iter,
    chat_iter,
    x_core_check,
)
from envoy_process import MESH_FIXTURES, REPO, SEED_CONFIG, Envoy, JudgeSidecar, render_mesh_config, wasm_path
from judge_backend_double import FAIL_MARKER, JudgeBackendDouble
from test_judged import _backends
from test_rule_checks import ANTHROPIC, CHAT, IBAN, RESPONSES, _json_answer
from upstream_double import Answer, UpstreamDouble

SEED = json.loads(SEED_CONFIG.read_text())
BLOCKED_REPLY = SEED["agents"]["orders"]["versions"]["1"]["blocked_reply"]
JUDGED_BLOCKED = "I can only help with orders."
TOKEN_ENV = "LIVECHECK_FILTER_TOKEN"
CLIENT_TIMEOUT = 10.0
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache"}


def _manifest(path: str) -> dict:
    return yaml.safe_load((REPO / "deploy" / path).read_text())


@dataclasses.dataclass
class Mesh:
    """One control plane: its manifest, what the filter reads from it, and its fixture's clusters."""

    name: str
    manifest: dict
    plugin: dict  # the WasmPlugin spec / the EnvoyExtensionPolicy's wasm entry
    policy: dict  # livecheck's plugin configuration in it
    env_keys: list[str]  # the VM environment variables it takes from the proxy's environment
    vendor_cluster: str
    code_cluster: Optional[str]  # the cluster the module is fetched through (remote code)


def _istio() -> Mesh:
    manifest = _manifest("istio/wasmplugin.yaml")
    spec = manifest["spec"]
    return Mesh("istio", manifest, spec, spec["pluginConfig"],
                [e["name"] for e in spec["vmConfig"]["env"] if e.get("valueFrom") == "HOST"],
                "outbound|443||api.anthropic.com", None)


def _envoy_gateway() -> Mesh:
    manifest = _manifest("envoy-gateway/envoyextensionpolicy.yaml")
    (entry,) = manifest["spec"]["wasm"]
    return Mesh("envoy-gateway", manifest, entry, entry["config"], entry["env"]["hostKeys"],
                "httproute/livecheck/anthropic/rule/0", "wasm_cluster")


MESHES: dict[str, Callable[[], Mesh]] = {"istio": _istio, "envoy-gateway": _envoy_gateway}


# --- each fixture follows its manifest -------------------------------------------------------------------


def _fixture(name: str) -> dict:
    return yaml.safe_load((MESH_FIXTURES / f"{name}.yaml").read_text())


def _http_filters(config: dict) -> list[dict]:
    (listener,) = config["static_resources"]["listeners"]
    (hcm,) = listener["filter_chains"][0]["filters"]
    return hcm["typed_config"]["http_filters"]


def _cluster_names(config: dict) -> set[str]:
    return {c["name"] for c in config["static_resources"]["clusters"]}


def test_the_istio_fixture_is_the_wasmplugin_as_istiod_renders_it():
    mesh = _istio()
    config = _fixture("istio")
    wasm_filter = _http_filters(config)[0]
    ecds = yaml.safe_load((MESH_FIXTURES / "istio-ecds.yaml").read_text())
    (resource,) = ecds["resources"]
    plugin = resource["typed_config"]["config"]
    # The namespace is deploy/istio's kustomization's; 1.30 adds the marker of a translated WasmPlugin.
    name = f"livecheck.{mesh.manifest['metadata']['name']}~istio-translated-wasmplugin"

    assert wasm_filter["name"] == resource["name"] == f"extensions.istio.io/trafficextension/{name}"
    assert plugin["name"] == name
    assert plugin["root_id"] == mesh.plugin["pluginName"]
    assert (mesh.plugin["failStrategy"], plugin["failure_policy"]) == ("FAIL_CLOSE", "FAIL_CLOSED")
    assert plugin["vm_config"]["environment_variables"] == {"host_env_keys": mesh.env_keys}
    assert "vm_id" not in plugin["vm_config"]
    assert "allow_on_headers_stop_iteration" not in plugin
    assert {mesh.policy["judge_cluster"], mesh.vendor_cluster} <= _cluster_names(config)


def test_the_envoy_gateway_fixture_is_the_policy_as_envoy_gateway_renders_it():
    mesh = _envoy_gateway()
    config = _fixture("envoy-gateway")
    wasm_filter = _http_filters(config)[0]
    plugin = wasm_filter["typed_config"]["config"]
    ir_name = f"envoyextensionpolicy/livecheck/{mesh.manifest['metadata']['name']}/wasm/0"
    (patch,) = _manifest("envoy-gateway/envoypatchpolicy.yaml")["spec"]["jsonPatches"]
    (route,) = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"][
        "route_config"]["virtual_hosts"][0]["routes"]

    assert wasm_filter["name"] == f"envoy.filters.http.wasm/{ir_name}"
    assert wasm_filter["disabled"] is True and wasm_filter["name"] in route["typed_per_filter_config"]
    assert (plugin["name"], plugin["root_id"], plugin["vm_config"]["vm_id"]) == (
        mesh.plugin["name"], mesh.plugin["rootID"], ir_name)
    # failOpen false sets nothing: Envoy's default, FAIL_CLOSED.
    assert mesh.plugin["failOpen"] is False
    assert not {"fail_open", "failure_policy", "allow_on_headers_stop_iteration"} & set(plugin)
    assert plugin["vm_config"]["environment_variables"] == {"host_env_keys": mesh.env_keys}
    assert patch["operation"]["value"]["name"] == patch["name"] == mesh.policy["judge_cluster"]
    assert {mesh.policy["judge_cluster"], mesh.vendor_cluster, mesh.code_cluster} <= _cluster_names(config)


# --- the stack ---------------------------------------------------------------------------------------------


def _test_policy(policy: dict) -> dict:
    """The manifest's policy with the agents `judged` and `rules` added."""
    judged = {"published": "1", "versions": {"1": {"blocked_reply": JUDGED_BLOCKED, "live_checks": [
        {"name": "on-topic", "stage": "input", "kind": "custom_rule",
         "expected": "The question is about orders.", "timeout_ms": 3000}]}}}
    return {**policy, "agents": {**policy["agents"], "judged": judged, "rules": RULES_ONLY["agents"]["a"]}}


class MeshStack:
    """The real sidecar (requiring the token), the module's server for remote code, and Envoy running the
    mesh's fixture with the token in its environment."""

    def __init__(self, mesh: Mesh, double: UpstreamDouble, judge_backend: JudgeBackendDouble, workdir) -> None:
        self.mesh = mesh
        self.token = secrets.token_hex(24)
        self.judge = JudgeSidecar(workdir / "judge", _backends(judge_backend),
                                  tables={"filter": {"token_env": TOKEN_ENV}}, env={TOKEN_ENV: self.token})
        self.code_server: Optional[UpstreamDouble] = None
        try:
            wasm = wasm_path("livecheck.wasm")
            clusters = {mesh.vendor_cluster: double.port, mesh.policy["judge_cluster"]: self.judge.port}
            if mesh.code_cluster:
                self.code_server = UpstreamDouble().start()
                self.code_server.script(default=Answer(headers={"content-type": "application/wasm"},
                                                       body_chunks=[wasm.read_bytes()], chunked=False))
                clusters[mesh.code_cluster] = self.code_server.port
            # Compact, as both control planes write it (Istio: protomarshal.ToJSON of the Struct).
            policy = json.dumps(_test_policy(mesh.policy), separators=(",", ":"))
            config = render_mesh_config(mesh.name, wasm, policy, clusters, workdir / "envoy")
            self.envoy = Envoy(config, workdir / "envoy", env={key: self.token for key in mesh.env_keys})
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if hasattr(self, "envoy"):
            self.envoy.stop()
        if self.code_server:
            self.code_server.stop()
        self.judge.close()


@pytest.fixture(scope="module", params=list(MESHES))
def stack(request, double, judge_backend, tmp_path_factory):
    s = MeshStack(MESHES[request.param](), double, judge_backend, tmp_path_factory.mktemp(f"mesh-{request.param}"))
    yield s
    s.close()


def _agent(name: str) -> dict:
    return {"extra_headers": {"x-core-agent": name}}


# --- the turns ---------------------------------------------------------------------------------------------


def test_the_filter_arrived_the_mesh_s_way(stack):
    stats = stack.envoy.stats()
    if stack.mesh.name == "istio":
        (filter_name,) = [f["name"] for f in _http_filters(_fixture("istio")) if "config_discovery" in f]
        assert stats[f"extension_config_discovery.http_filter.{filter_name}.update_success"] == 1, "by ECDS"
    else:
        (fetch,) = stack.code_server.requests()
        assert (fetch.method, fetch.path) == ("GET", "/livecheck-wasm")
        assert stats["wasm.remote_load_fetch_successes"] == 1, "as remote code, its sha256 checked"
    # The VMs running: the one Envoy first loads the module into, then one per thread that runs the
    # filter, the main thread and the one worker (`--concurrency 1`): three, one plugin's worth.
    # `wasm.wasm_vm_count` from Envoy 1.40 on, `wasm.envoy.wasm.runtime.v8.active` before (1.40 has both).
    vms = {stats[k] for k in ("wasm.wasm_vm_count", "wasm.envoy.wasm.runtime.v8.active") if k in stats}
    assert vms == {3}, {k: v for k, v in stats.items() if k.startswith("wasm.")}


def _reached_vendor(double: UpstreamDouble, question: str) -> bool:
    """Whether the vendor got the question. A question's headers go upstream before its body is
    checked; a refused one leaves an unfinished request there, which Envoy resets."""
    return any(question.encode() in r.body for r in double.requests())


def test_a_question_with_a_password_is_refused_before_the_vendor(stack, double):
    double.script(default=_json_answer(ANTHROPIC.answer("Sure.")))
    question = "My password is hunter2."

    raw = ANTHROPIC.create(stack.envoy, question, False)
    stop, text, _usage = ANTHROPIC.read(raw.parse())

    assert (stop, text) == ("refusal", BLOCKED_REPLY)
    assert x_core_check(raw.headers) == {"stage": "input", "check": "no-passwords", "code": "input_check_failed"}
    assert not _reached_vendor(double, question)


def test_a_non_streamed_answer_with_an_iban_is_withheld(stack, double):
    double.script(default=_json_answer(CHAT.answer(f"Your refund goes to {IBAN}.")))
    failed = "wasmcustom.livecheck.orders.no-iban.failed"
    before = stack.envoy.stats(failed).get(failed, 0)

    raw = CHAT.create(stack.envoy, "Where is my refund?", False)
    body = raw.http_response.read()
    stop, text, _usage = CHAT.read(raw.parse())

    assert (stop, text) == ("content_filter", BLOCKED_REPLY)
    assert IBAN.encode() not in body
    # The answer's headers went on before its body was read, so no X-Core-Check names the check; the
    # counter does.
    assert stack.envoy.stats(failed)[failed] == before + 1


def test_a_clean_non_streamed_answer_passes_unchanged(stack, double):
    upstream = json.dumps(RESPONSES.answer("Your order left this morning."))
    double.script(default=Answer(headers={"content-type": "application/json"}, body_chunks=[upstream], chunked=False))

    raw = RESPONSES.create(stack.envoy, "Where is my order?", False)

    assert raw.http_response.read() == upstream.encode()
    assert x_core_check(raw.headers) is None


def _stream(stack, double, sdk, vendor: str, words: list[str], agent: str) -> tuple[dict, bytes]:
    double.script(default=Answer(headers=SSE_HEADERS, body_chunks=VENDOR_EVENTS[vendor](0, words=words),
                                 chunk_delay=0.02))
    tee = Tee(drain=False)  # after a cut the stream is reset: the Chat SDK stops at [DONE] before that
    got: dict = {}
    sdk(stack.envoy.url, {"x-core-agent": agent}, [], got, timeout=CLIENT_TIMEOUT,
        http_client=httpx.Client(transport=tee))
    return got, bytes(tee.body)


def test_a_streamed_answer_is_cut_where_the_iban_starts(stack, double):
    got, raw = _stream(stack, double, chat_iter, "chat", FORBIDDEN, "rules")

    assert got == {"text": BEFORE_MATCH, "end": "content_filter"}
    for never in NEVER_SENT:
        assert never not in raw, never


def test_a_clean_streamed_answer_arrives_whole(stack, double):
    got, _raw = _stream(stack, double, anthropic_iter, "anthropic", CLEAN, "orders")

    assert got == {"text": "".join(CLEAN), "end": "end_turn"}


def test_a_judged_question_goes_through_the_mesh_cluster_with_the_token(stack, double, judge_backend):
    double.script(default=_json_answer(CHAT.answer("It ships tomorrow.")))
    judge_backend.reset()

    passed = CHAT.create(stack.envoy, "Where is my order 4711?", False, **_agent("judged"))
    refused = CHAT.create(stack.envoy, f"Where is my order, you {FAIL_MARKER} bot?", False, **_agent("judged"))

    assert CHAT.read(passed.parse())[:2] == ("stop", "It ships tomorrow.")
    assert x_core_check(passed.headers) is None
    assert CHAT.read(refused.parse())[:2] == ("content_filter", JUDGED_BLOCKED)
    assert x_core_check(refused.headers) == {"stage": "input", "check": "on-topic", "code": "input_check_failed"}
    # The manifest's `orders` agent samples a background `polite` check (0.2) that the sidecar may
    # still be judging from an earlier test: count the calls that judged this test's two questions.
    questions = ("Where is my order 4711?", f"Where is my order, you {FAIL_MARKER} bot?")
    ours = [c for c in judge_backend.seen() if c.judged_text in questions]
    assert [c.passed for c in ours] == [True, False]
    assert _reached_vendor(double, "Where is my order 4711?")
    assert not _reached_vendor(double, FAIL_MARKER)


def test_the_sidecar_refuses_a_callout_without_the_token(stack):
    request = urllib.request.Request(stack.judge.url + "/v1/judge", data=b"{}", method="POST",
                                     headers={"content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 401
