"""Shared pieces of the tool-call check tests (test_tool_checks.py, test_mcp_tool_checks.py).

  - `ToolCheckStack`: the REAL livecheck-judge sidecar (its backends on the judge backend double, each
    with a key of its own for callouts that carry none, its results API behind a token) and a real Envoy
    running livecheck.wasm with a given policy, its `livecheck-judge` cluster on that sidecar;
  - `McpServerProcess`: tests/e2e/mcp_server.py (the official MCP SDK's server) in a process of its own
    on a free loopback port, stopped by its PID, with the record of every tool call it received;
  - `Recorder`: an SDK transport that keeps every response byte the caller received (the rest of a body
    the SDK did not read included) and survives the reset that follows a cut;
  - `stack_owning`: a `ToolCheckStack` that closes its sidecar with it;
  - `x_core_check` (from cut_support): the `X-Core-Check` header parsed as an RFC 8941 dictionary.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, Iterator, Optional

import httpx2 as httpx

from cut_support import x_core_check  # noqa: F401 (re-exported for the tool-check tests)
from envoy_process import REPO, Envoy, JudgeSidecar, render_config, wasm_path

E2E = pathlib.Path(__file__).resolve().parent

API_TOKEN = "op-tool-checks-e2e-token"
API_TOKEN_ENV = "LIVECHECK_E2E_TOOL_API_TOKEN"
# The sidecar's own key for its judge backends: used only for callouts that carry no key (MCP).
JUDGE_OWN_KEY = "sk-judge-sidecar-own-key"
JUDGE_OWN_KEY_ENV = "LIVECHECK_E2E_JUDGE_OWN_KEY"


def judge_backends(base_url: str) -> list[dict]:
    """claude-* judge models on the Anthropic judge API, every other on the OpenAI one; both on the judge
    backend double, both with the sidecar's own key."""
    return [
        {"name": "double-anthropic", "api": "anthropic", "base_url": base_url, "models": ["claude-*"],
         "api_key_env": JUDGE_OWN_KEY_ENV},
        {"name": "double-openai", "api": "openai", "base_url": base_url, "models": ["*"],
         "api_key_env": JUDGE_OWN_KEY_ENV},
    ]


def start_sidecar(judge_backend, workdir: pathlib.Path, upstream_port: Optional[int] = None) -> JudgeSidecar:
    """The real sidecar: backends on the judge backend double with keys of their own, the results API
    behind `API_TOKEN`; with `upstream_port`, recovery's `[[upstreams]]` names the model double there
    for every turn's host. Close it with `.close()`."""
    # Callers reach Envoy at 127.0.0.1:<its port>: an authority without a port matches any.
    upstreams = [{"name": "double", "authority": "127.0.0.1", "base_url": f"http://127.0.0.1:{upstream_port}",
                  "timeout_ms": 5000}] if upstream_port else []
    return JudgeSidecar(
        workdir / "judge", judge_backends(judge_backend.base_url),
        tables={"api": {"token_env": API_TOKEN_ENV}},
        arrays={"upstreams": upstreams},
        env={API_TOKEN_ENV: API_TOKEN, JUDGE_OWN_KEY_ENV: JUDGE_OWN_KEY},
    )


class ToolCheckStack:
    """A real Envoy running `policy`, its `livecheck-judge` cluster on `sidecar` (not owned: `close`
    stops Envoy only); `clusters` / `routes` as render_config's `extra_clusters` / `extra_routes`."""

    def __init__(self, double, sidecar: JudgeSidecar, workdir: pathlib.Path, policy: dict,
                 clusters: Optional[dict[str, int]] = None, routes: Optional[dict[str, str]] = None) -> None:
        self.judge = sidecar
        config = render_config(wasm_path("livecheck.wasm"), double.port, plugin_configuration=json.dumps(policy),
                               extra_clusters={"livecheck-judge": sidecar.port, **(clusters or {})},
                               extra_routes=routes)
        self.envoy = Envoy(config, workdir / "envoy")

    def close(self) -> None:
        self.envoy.stop()

    def api(self, path: str) -> tuple[int, bytes]:
        """The sidecar's operator API, read with urllib and the token."""
        request = urllib.request.Request(self.judge.url + path)
        request.add_header("Authorization", f"Bearer {API_TOKEN}")
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def checks(self, turn: str) -> tuple[list[dict], bytes]:
        """Every stored result of a turn (all pages) and the raw bodies joined; empty when unknown."""
        items, bodies, cursor = [], b"", None
        for _ in range(50):
            query = "?" + urllib.parse.urlencode({"cursor": cursor}) if cursor else ""
            status, body = self.api(f"/responses/{urllib.parse.quote(turn, safe='')}/checks{query}")
            bodies += body
            if status == 404:
                return [], bodies
            assert status == 200, (status, body)
            page = json.loads(body)
            items += page["items"]
            cursor = page["next_cursor"]
            if cursor is None:
                return items, bodies
        raise AssertionError("next_cursor never ended")

    def wait_checks(self, turn: str, count: int, timeout: float = 5.0) -> tuple[list[dict], bytes]:
        """The turn's results once there are at least `count` (reports arrive after the turn), then once
        more after a moment, so that a result stored late is not missed."""
        try:
            wait_for(lambda: len(self.checks(turn)[0]) >= count, timeout, f"{count} result(s) of turn {turn}")
        except AssertionError as e:
            stored = [(i["name"], i.get("tool"), i.get("call"), i["outcome"]) for i in self.checks(turn)[0]]
            raise AssertionError(f"{e}; stored: {stored}") from None
        time.sleep(0.3)
        return self.checks(turn)


GENERATED = re.compile(rb'"(id|[a-z_]+_id|created_at|next_cursor)":"[^"]*"')


def generated_masked(raw: bytes) -> bytes:
    """`raw` with the values the sidecar generates (ids, times, cursors) blanked: random hex ids can hold
    any short run of digits, so a search for a call's argument reads only what was recorded from the turn."""
    return GENERATED.sub(rb'"\1":""', raw)


@contextlib.contextmanager
def stack_owning(sidecar: JudgeSidecar, double, workdir: pathlib.Path, policy: dict,
                 **options) -> Iterator[ToolCheckStack]:
    """A ToolCheckStack on `sidecar` (`options` as its own) that closes the sidecar with it, and closes it
    too when Envoy does not start."""
    try:
        stack = ToolCheckStack(double, sidecar, workdir, policy, **options)
    except BaseException:
        sidecar.close()
        raise
    try:
        yield stack
    finally:
        stack.close()
        sidecar.close()


def wait_for(probe: Callable, timeout: float, what: str, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(every)




def denied_header(check: str) -> dict:
    return {"stage": "output", "check": check, "code": "tool_call_denied"}


# --- what the caller received ------------------------------------------------------------------------------


class Recorder(httpx.BaseTransport):
    """An SDK's HTTP/1.1 transport that records the last response's headers and every body byte that
    reached the caller: what the SDK read, then (when the SDK closes the response) the rest, read to
    the end or to the reset that ends a cut stream (`drain_error` says which)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.status: Optional[int] = None
        self.headers: Optional[httpx.Headers] = None
        self.body = bytearray()
        self.drain_error: Optional[str] = None

    def handle_request(self, request):
        response = self.inner.handle_request(request)
        self.status, self.headers, self.body = response.status_code, response.headers, bytearray()
        inner, recorder = response.stream, self
        chunks = iter(inner)

        class Recorded(httpx.SyncByteStream):
            def __iter__(self):
                for chunk in chunks:
                    recorder.body.extend(chunk)
                    yield chunk

            def close(self) -> None:
                try:
                    for chunk in chunks:
                        recorder.body.extend(chunk)
                except Exception as e:  # noqa: BLE001 - a reset after a cut is what is recorded
                    recorder.drain_error = f"{type(e).__name__}: {e}"
                finally:
                    inner.close()

        return httpx.Response(response.status_code, headers=response.headers, stream=Recorded(),
                              extensions=response.extensions)

    def client(self, **options) -> httpx.Client:
        return httpx.Client(transport=self, **options)

    def close(self) -> None:
        self.inner.close()


# --- the MCP server ----------------------------------------------------------------------------------------


class McpServerProcess:
    """tests/e2e/mcp_server.py in its own process (the venv's Python), serving the streamable HTTP
    transport at `path` on a free loopback port; `json_response` for JSON instead of SSE answers.
    Stopped by its own PID; `received()` reads the calls its tools received."""

    def __init__(self, workdir: pathlib.Path, path: str, json_response: bool = False) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.record = workdir / "calls.jsonl"
        self.log_path = workdir / "mcp-server.log"
        port_file = workdir / "port"
        port_file.unlink(missing_ok=True)
        self._log = open(self.log_path, "ab")
        command = [sys.executable, str(E2E / "mcp_server.py"), "--record", str(self.record),
                   "--port-file", str(port_file), "--path", path]
        if json_response:
            command.append("--json-response")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            wait_for(lambda: port_file.exists() or self.process.poll() is not None, 20.0, "the MCP server's port")
            if self.process.poll() is not None:
                raise RuntimeError(f"the MCP server exited with {self.process.returncode}:\n{self.log()[-4000:]}")
            self.port = int(port_file.read_text())
        except BaseException:
            self.stop()
            raise

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def received(self) -> list[dict]:
        """Every tool call the server received so far: {"tool": name, "arguments": {...}}."""
        text = self.record.read_text() if self.record.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def stop(self) -> None:
        """SIGTERM to this process only (by its PID), then SIGKILL if it does not exit within 5 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._log.close()
