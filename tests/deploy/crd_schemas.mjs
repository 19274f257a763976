// Validates Istio and Envoy Gateway resources against their schemas, as the API server's CRD validation
// would (types, enums, patterns, required fields; not the CEL rules, and like the CRDs' openAPIV3Schema
// it does not refuse unknown fields). The schemas: @kubernetes-models/istio (generated from Istio's
// crd-all.gen.yaml) and @kubernetes-models/envoy-gateway (from Envoy Gateway's api/v1alpha1), pinned in
// package-lock.json.
//
// stdin: a JSON array of objects. stdout: a JSON array, per object, of its problems (empty: valid).
import { readFileSync } from "node:fs";

const PACKAGES = {
  "extensions.istio.io": "@kubernetes-models/istio",
  "networking.istio.io": "@kubernetes-models/istio",
  "security.istio.io": "@kubernetes-models/istio",
  "gateway.envoyproxy.io": "@kubernetes-models/envoy-gateway",
};

async function problems(object) {
  const [group, version] = String(object.apiVersion).split("/");
  const pkg = PACKAGES[group];
  if (!pkg || !version) {
    return [`no schema for ${object.apiVersion} ${object.kind}`];
  }
  let Model;
  try {
    Model = (await import(`${pkg}/${group}/${version}/${object.kind}`))[object.kind];
  } catch {
    return [`no schema for ${object.apiVersion} ${object.kind} in ${pkg}`];
  }
  try {
    new Model(object).validate();
    return [];
  } catch (e) {
    return String(e.message).split(", ");
  }
}

const objects = JSON.parse(readFileSync(0, "utf8"));
console.log(JSON.stringify(await Promise.all(objects.map(problems))));
