"""Envoy Gateway's own CRDs of the version deploy/envoy-gateway-native needs, vendored: the pinned npm
schemas (@kubernetes-models/envoy-gateway 2.0.0, crd_schemas.mjs) predate dynamic modules and, like a
CRD's openAPIV3Schema, let an unknown field through, so `dynamicModules` misspelled or put on the wrong
resource would pass there.

The files: Envoy Gateway v1.8.3 (the first minor with `EnvoyProxy.spec.dynamicModules` and
`EnvoyExtensionPolicy.spec.dynamicModule` is v1.8.0), github.com/envoyproxy/gateway at tag v1.8.3,
commit 94850d4323922cba7c67b5b5ad23de9c715f8048,
charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_<plural>.yaml, byte for byte,
gzip-compressed (the EnvoyProxy CRD is 1.3 MB of YAML). BLOBS holds each file's git blob id there;
`test_the_vendored_crds_are_envoy_gateway_s_files` checks the decompressed bytes against it.

An object is checked against its CRD's schema as the API server checks what `kubectl apply` sends
(field validation Strict, kubectl's default): types, enums, patterns, lengths, required fields, and an
unknown field is a problem, except under `x-kubernetes-preserve-unknown-fields` (a policy's `config`).
Not checked: the CEL rules (`x-kubernetes-validations`) and defaults.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import pathlib

import jsonschema
import yaml

CRDS = pathlib.Path(__file__).resolve().parent / "crds" / "envoy-gateway-v1.8.3"
GROUP = "gateway.envoyproxy.io"
# kind -> (the CRD's plural, its git blob id at v1.8.3)
BLOBS = {
    "EnvoyProxy": ("envoyproxies", "14ac49d727c25ca651fa024aa46a8a9c77810b2b"),
    "EnvoyExtensionPolicy": ("envoyextensionpolicies", "51964f1d6ad3178ceb2d9517ceff829fc16d8cad"),
}


def crd_file(kind: str) -> pathlib.Path:
    return CRDS / f"{GROUP}_{BLOBS[kind][0]}.yaml.gz"


def git_blob_id(data: bytes) -> str:
    """What `git hash-object` says of these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def crd_bytes(kind: str) -> bytes:
    return gzip.decompress(crd_file(kind).read_bytes())


def _strict(schema: dict) -> dict:
    """The schema with unknown fields refused wherever the API server prunes or refuses them: every
    object with `properties` and no `additionalProperties` of its own, unless it preserves unknown fields."""
    if not isinstance(schema, dict):
        return schema
    out = {k: (_strict(v) if k in ("items", "additionalProperties", "not") else v) for k, v in schema.items()}
    if "properties" in schema:
        out["properties"] = {k: _strict(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    for key in ("allOf", "anyOf", "oneOf"):
        if key in schema:
            out[key] = [_strict(s) for s in schema[key]]
    return out


@functools.lru_cache(maxsize=None)
def _validator(kind: str, version: str) -> jsonschema.protocols.Validator | None:
    crd = yaml.safe_load(crd_bytes(kind))
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return jsonschema.Draft7Validator(_strict(v["schema"]["openAPIV3Schema"]))
    return None


def vendored_problems(obj: dict) -> list[str] | None:
    """The object's problems against its vendored CRD (empty: valid), None when none is vendored."""
    group, _, version = str(obj.get("apiVersion", "")).partition("/")
    if group != GROUP or obj.get("kind") not in BLOBS:
        return None
    validator = _validator(obj["kind"], version)
    if validator is None:
        return [f"{obj['apiVersion']} {obj['kind']}: no such version in Envoy Gateway v1.8.3's CRD"]
    return sorted(f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj))


def registered_module_problems(objects: list[dict]) -> dict[str, list[str]]:
    """What Envoy Gateway refuses when it translates: an EnvoyExtensionPolicy's dynamic module must be
    registered by that name in the EnvoyProxy's `dynamicModules` (internal/gatewayapi/
    envoyextensionpolicy.go buildDynamicModules: "is not registered in the EnvoyProxy dynamicModules
    allowlist"). One rendered kustomization is one Gateway's proxies here."""
    registered = {m.get("name") for o in objects if o.get("kind") == "EnvoyProxy"
                  for m in o.get("spec", {}).get("dynamicModules", [])}
    found: dict[str, list[str]] = {}
    for o in objects:
        if o.get("kind") != "EnvoyExtensionPolicy":
            continue
        for i, module in enumerate(o.get("spec", {}).get("dynamicModule", [])):
            if module.get("name") not in registered:
                found.setdefault(f"{o['kind']}/{o['metadata']['name']}", []).append(
                    f"spec/dynamicModule/{i}/name: {module.get('name')!r} is not registered in the EnvoyProxy's "
                    f"dynamicModules ({sorted(registered)})")
    return found
