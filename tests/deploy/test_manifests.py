"""The Kubernetes manifests in deploy/ (`make deploy-validate`), checked offline:

  - each kustomization (deploy/judge, deploy/istio, deploy/envoy-gateway, deploy/envoy-gateway-native) is
    rendered by the real `kubectl kustomize`;
  - every core object is checked against Kubernetes' own schemas for KUBERNETES (kubernetes-validate,
    strict: an unknown or misspelled field is a problem, as `kubectl apply`'s field validation says);
  - every Istio and Envoy Gateway object against its CRD's schema (crd_schemas.mjs); Istio's gateway
    deployment overlay as the Deployment fields it patches;
  - every EnvoyProxy and EnvoyExtensionPolicy also against Envoy Gateway v1.8.3's own CRD, strictly
    (vendored_crds.py: the pinned schemas predate dynamic modules), and a policy's dynamic module must be
    registered in the EnvoyProxy;
  - the livecheck policy inside the WasmPlugin and the EnvoyExtensionPolicy (its wasm or its dynamic
    module entry) passes `livecheck lint`, and is examples/seed.json plus where the sidecar is.

A broken copy of deploy/ shows that each check refuses what it should.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import shutil
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2e"))
from envoy_process import REPO, SEED_CONFIG, cargo_binary  # noqa: E402
from vendored_crds import BLOBS, crd_bytes, git_blob_id, registered_module_problems, vendored_problems  # noqa: E402

DEPLOY = REPO / "deploy"
KUSTOMIZATIONS = ["judge", "istio", "envoy-gateway", "envoy-gateway-native"]
# The Kubernetes version the core objects are checked against (kubernetes-validate ships its schemas).
KUBERNETES = "1.33.0"
# The keys each mesh's policy adds to examples/seed.json: where the sidecar is and the token it wants.
MESH_KEYS = {"judge_cluster", "judge_authority", "judge_token_env"}


def kubectl() -> str:
    """The venv's kubectl (`make kubectl` installs it there when the machine has none), else PATH's."""
    venv = REPO / ".venv" / "bin" / "kubectl"
    found = str(venv) if venv.is_file() else shutil.which("kubectl")
    if not found:
        pytest.fail("kubectl is missing: run `make kubectl`")
    return found


def render(directory: pathlib.Path) -> list[dict]:
    result = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def name(obj: dict) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def is_core(obj: dict) -> bool:
    """Kubernetes' own API groups (core, apps, policy, ...) have no dot in their name."""
    return "." not in obj["apiVersion"].split("/")[0]


def policy_of(obj: dict) -> dict | None:
    """The livecheck plugin configuration a mesh resource carries, if any."""
    if obj["kind"] == "WasmPlugin":
        return obj["spec"].get("pluginConfig")
    if obj["kind"] == "EnvoyExtensionPolicy":
        entries = [w.get("config") for w in obj["spec"].get("wasm", []) if w.get("rootID") == "livecheck"]
        entries += [m.get("config") for m in obj["spec"].get("dynamicModule", []) if m.get("filterName") == "livecheck"]
        return next(iter(entries), None)
    return None


# --- the checks ------------------------------------------------------------------------------------------


def core_problems(obj: dict) -> list[str]:
    try:
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError as e:
        where = "/".join(str(p) for p in e.path)
        return [f"{where}: {e.message}"]
    problems = []
    if obj["kind"] == "ConfigMap" and "deployment" in obj.get("data", {}):
        problems += overlay_problems(obj["data"]["deployment"])
    return problems


def overlay_problems(overlay: str) -> list[str]:
    """Istio's per-Gateway `deployment` overlay, checked as the Deployment fields it patches (a skeleton
    Deployment supplies the fields the overlay leaves to Istio)."""
    patch = yaml.safe_load(overlay)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "overlay"},
                  "spec": {"selector": {"matchLabels": {"gateway": "overlay"}}, **copy.deepcopy(patch.get("spec", {}))}}
    return [f"data/deployment: {p}" for p in core_problems(deployment)]


def crd_problems(objects: list[dict]) -> list[list[str]]:
    """One node process for all of them (tests/deploy/node_modules, from `make deploy-validate`)."""
    if not (HERE / "node_modules").is_dir():
        pytest.fail("tests/deploy/node_modules is missing: run `make deploy-validate`")
    result = subprocess.run(["node", str(HERE / "crd_schemas.mjs")], input=json.dumps(objects),
                            capture_output=True, text=True, timeout=60, cwd=HERE)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def lint_problems(policy: dict) -> list[str]:
    result = subprocess.run([str(cargo_binary("livecheck-cli", "livecheck")), "lint", "-"], input=json.dumps(policy),
                            capture_output=True, text=True, timeout=60)
    return [] if result.returncode == 0 else [line for line in result.stdout.splitlines() if line]


def problems(objects: list[dict]) -> dict[str, list[str]]:
    """Every problem found, by object (`Kind/name`); empty when all is valid."""
    found: dict[str, list[str]] = {}
    custom = [o for o in objects if not is_core(o)]
    for obj, crd in zip(custom, crd_problems(custom)):
        found.setdefault(name(obj), []).extend(crd)
        found[name(obj)].extend(f"Envoy Gateway v1.8.3 CRD: {p}" for p in vendored_problems(obj) or [])
    for refused, why in registered_module_problems(objects).items():
        found.setdefault(refused, []).extend(why)
    for obj in objects:
        if is_core(obj):
            found.setdefault(name(obj), []).extend(core_problems(obj))
        policy = policy_of(obj)
        if policy is not None:
            found.setdefault(name(obj), []).extend(f"livecheck lint: {p}" for p in lint_problems(policy))
    return {k: v for k, v in found.items() if v}


# --- the shipped manifests -------------------------------------------------------------------------------

EXPECTED_KINDS = {
    "judge": {"Namespace", "ConfigMap", "Service", "Deployment", "PodDisruptionBudget"},
    "istio": {"WasmPlugin"},
    "envoy-gateway": {"EnvoyExtensionPolicy", "EnvoyPatchPolicy", "EnvoyProxy"},
    "envoy-gateway-native": {"EnvoyExtensionPolicy", "EnvoyPatchPolicy", "EnvoyProxy"},
}


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_each_kustomization_renders_objects_their_schemas_accept(kustomization):
    objects = render(DEPLOY / kustomization)

    kinds = {o["kind"] for o in objects}
    assert EXPECTED_KINDS[kustomization] | EXPECTED_KINDS["judge"] <= kinds, kinds
    assert {o["metadata"].get("namespace", "livecheck") for o in objects} == {"livecheck"}
    assert problems(objects) == {}


@pytest.mark.parametrize("kustomization", ["istio", "envoy-gateway", "envoy-gateway-native"])
def test_the_mesh_policy_is_the_seed_plus_where_the_sidecar_is(kustomization):
    (policy,) = [p for p in map(policy_of, render(DEPLOY / kustomization)) if p is not None]

    assert {k: v for k, v in policy.items() if k not in MESH_KEYS} == json.loads(SEED_CONFIG.read_text())
    assert policy["judge_token_env"] == "LIVECHECK_FILTER_TOKEN"


def test_the_native_gateway_has_the_module_in_place_of_the_wasm_filter():
    wasm, native = render(DEPLOY / "envoy-gateway"), render(DEPLOY / "envoy-gateway-native")
    (policy,) = [o for o in native if o["kind"] == "EnvoyExtensionPolicy"]
    (proxy,) = [o for o in native if o["kind"] == "EnvoyProxy"]
    (wasm_policy,) = [o for o in wasm if o["kind"] == "EnvoyExtensionPolicy"]
    (module,) = policy["spec"]["dynamicModule"]
    (registered,) = proxy["spec"]["dynamicModules"]
    container = proxy["spec"]["provider"]["kubernetes"]["envoyDeployment"]["container"]
    (mount,) = container["volumeMounts"]

    assert "wasm" not in policy["spec"] and policy["spec"]["targetRefs"] == wasm_policy["spec"]["targetRefs"]
    assert (module["name"], module["filterName"]) == (registered["name"], "livecheck")
    assert module["config"] == wasm_policy["spec"]["wasm"][0]["config"]
    # The module's path is inside the image volume mounted into the proxy container.
    assert registered["source"]["local"]["path"] == mount["mountPath"] + "/liblivecheck.so"
    assert registered["doNotClose"] is True
    # The Envoy the module's ABI version is built for; the token still reaches the proxy's environment.
    assert container["image"].endswith(":distroless-v1.40.0")
    assert [e["name"] for e in container["env"]] == ["LIVECHECK_FILTER_TOKEN"]
    # Everything else is deploy/envoy-gateway's.
    rest = {name(o): o for o in native if o["kind"] not in ("EnvoyExtensionPolicy", "EnvoyProxy")}
    assert rest == {name(o): o for o in wasm if o["kind"] not in ("EnvoyExtensionPolicy", "EnvoyProxy")}


@pytest.mark.parametrize("kind", list(BLOBS))
def test_the_vendored_crds_are_envoy_gateway_s_files(kind):
    assert git_blob_id(crd_bytes(kind)) == BLOBS[kind][1]


def test_the_judge_reads_the_token_and_the_store_url_from_secrets():
    (deployment,) = [o for o in render(DEPLOY / "judge") if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"] if "valueFrom" in e}

    assert secrets == {"LIVECHECK_FILTER_TOKEN": "livecheck-filter-token",
                       "LIVECHECK_RESULTS_URL": "livecheck-results-store"}
    (config,) = [o for o in render(DEPLOY / "judge") if o["kind"] == "ConfigMap"]
    toml = config["data"]["judge.toml"]
    assert 'token_env = "LIVECHECK_FILTER_TOKEN"' in toml and 'url_env = "LIVECHECK_RESULTS_URL"' in toml


# --- a broken copy is refused ----------------------------------------------------------------------------

# (file under deploy/, text there, its replacement, the object that must be refused, a word of the problem)
BROKEN = {
    "a misspelled Deployment field": (
        "judge/deployment.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true",
        "Deployment/livecheck-judge", "readOnlyRootFileSystem"),
    "Envoy's failure policy name in a WasmPlugin": (
        "istio/wasmplugin.yaml", "failStrategy: FAIL_CLOSE", "failStrategy: FAIL_CLOSED",
        "WasmPlugin/livecheck", "failStrategy"),
    "a sha256 with its prefix": (
        "istio/wasmplugin.yaml", 'sha256: "0000', 'sha256: "sha256:0000',
        "WasmPlugin/livecheck", "sha256"),
    "an unknown wasm code type": (
        "envoy-gateway/envoyextensionpolicy.yaml", "type: Image", "type: OCI",
        "EnvoyExtensionPolicy/livecheck", "code/type"),
    "a pattern without a bounded match": (
        "istio/wasmplugin.yaml", r"pattern: NL\d{2}[A-Z]{4}\d{10}", r"pattern: NL\d+",
        "WasmPlugin/livecheck", "livecheck lint"),
    "a bad overlay in Istio's gateway options": (
        "istio/gateway-options.yaml", "secretKeyRef:", "secretRef:",
        "ConfigMap/livecheck-gateway-options", "data/deployment"),
    "the EnvoyProxy's plural on the policy": (
        "envoy-gateway-native/envoyextensionpolicy.yaml", "  dynamicModule:", "  dynamicModules:",
        "EnvoyExtensionPolicy/livecheck-native", "'dynamicModules' was unexpected"),
    "an unknown module source type": (
        "envoy-gateway-native/envoyproxy.yaml", "type: Local", "type: File",
        "EnvoyProxy/livecheck-proxy", "dynamicModules/0/source/type"),
    "a module path too long for the CRD": (
        "envoy-gateway-native/envoyproxy.yaml", "path: /usr/lib/envoy/modules/livecheck/liblivecheck.so",
        "path: /" + "x" * 4100, "EnvoyProxy/livecheck-proxy", "dynamicModules/0/source/local/path"),
    "a module the EnvoyProxy does not register": (
        "envoy-gateway-native/envoyextensionpolicy.yaml", "- name: livecheck\n      filterName",
        "- name: livecheck-module\n      filterName", "EnvoyExtensionPolicy/livecheck-native", "not registered"),
    "a pattern without a bounded match in the module's policy": (
        "envoy-gateway-native/envoyextensionpolicy.yaml", r"pattern: NL\d{2}[A-Z]{4}\d{10}", r"pattern: NL\d+",
        "EnvoyExtensionPolicy/livecheck-native", "livecheck lint"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_manifest_is_refused(case, tmp_path):
    path, old, new, refused, word = BROKEN[case]
    copy_of_deploy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy_of_deploy)
    target = copy_of_deploy / path
    assert old in target.read_text(), f"{path} no longer says {old!r}: update this case"
    target.write_text(target.read_text().replace(old, new, 1))

    found = problems(render(copy_of_deploy / path.split("/")[0]))

    assert list(found) == [refused], found
    assert any(word in p for p in found[refused]), found
