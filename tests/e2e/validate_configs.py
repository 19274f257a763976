"""Validate every Envoy config in envoy/ with the venv's Envoy (`make envoy-validate`).

`envoy --mode validate` loads and starts the wasm module (the filter's VM start runs) and loads the
dynamic module (envoy/livecheck-native.yaml: its ABI version checked, its policy compiled), so the
.wasm and the .so the configs name must be built first (`make wasm module`); paths in the configs are
relative to the repository root, which is where this runs Envoy. Exits non-zero naming every config
that failed.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from envoy_process import REPO, envoy_binary, module_path, wasm_path  # noqa: E402


def main() -> int:
    # Fail loudly, with the build command, before Envoy's own error.
    wasm_path("livecheck.wasm")
    module_path()
    configs = sorted((REPO / "envoy").glob("*.yaml"))
    if not configs:
        print("no Envoy configs found in envoy/", file=sys.stderr)
        return 1
    failed = []
    for config in configs:
        name = config.relative_to(REPO)
        result = subprocess.run(
            [envoy_binary(), "--mode", "validate", "-c", str(name), "--disable-hot-restart", "--log-level", "warn"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode == 0:
            print(f"ok      {name}")
        else:
            failed.append(str(name))
            print(f"FAILED  {name}\n{result.stdout[-3000:]}{result.stderr[-3000:]}", file=sys.stderr)
    if failed:
        print(f"invalid Envoy configs: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
