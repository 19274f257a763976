"""Tool-call checks on MCP (issue 14) end to end: the official MCP Python SDK's streamable-HTTP client
(`streamable_http_client` + `ClientSession`) -> real Envoy running livecheck.wasm -> a real MCP server
(tests/e2e/mcp_server.py: the SDK's `MCPServer`, FastMCP's name in mcp 2.x, one process answering with
SSE and one with JSON, each recording every tool call it receives), with `when` rows judged by the REAL
livecheck-judge sidecar on the judge backend double.

A JSON-RPC `tools/call` POST to a path ending in `/mcp` (the default `mcp_paths`; the query is ignored)
is checked before the server is called:

  (a) with no tool checks configured everything passes (initialize, tools/list, tools/call, the GET
      stream, the session's DELETE);
  (b) initialize, notifications and tools/list pass untouched and ask no judge;
  (c) an allowed call reaches the server and its answer (SSE or JSON) reaches the client;
  (d) a call denied by an `args` row, by `allowed_tools` or by a `when` row judged to hold never reaches
      the server; the client's `call_tool` result is an error whose only text is the reason, answered as
      HTTP 200 `application/json` with `x-core-check: stage=output, check="<row>", code=tool_call_denied`,
      and the session goes on;
  (e) a raw `tools/call` POST gets exactly `{"jsonrpc": "2.0", "id": <its id>, "result": {"content":
      [{"type": "text", "text": <reason>}], "isError": true}}`;
  (f) the judge model is the row's `judge_model`, else the version's `model`; the judge is called with
      the sidecar backend's own key, never the MCP client's credentials, and reads no user messages.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from typing import Awaitable, Callable, Optional

import httpx2 as httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from judge_backend_double import TOOL_HOLDS_EXPLANATION
from tool_check_support import (JUDGE_OWN_KEY, McpServerProcess, denied_header, stack_owning, start_sidecar,
                                x_core_check)

REASON_BILLING = "No billing info in email."
REASON_RIVAL = "Never write to a rival."
REASON_CARD = "Card numbers may not leave."
# The filter's fixed sentence for a call `allowed_tools` denies (livecheck_wire::reasons::TOOL_NOT_ALLOWED).
REASON_NOT_ALLOWED = "The tool is not one this agent may call."
VERSION_MODEL = "gpt-mcp-judge"
ROW_MODEL = "claude-mcp-judge"
CLIENT_TOKEN = "mcp-client-token-never-forwarded"
CLIENT_TIMEOUT = 10.0

POLICY = {
    "default_agent": "tools",
    "agents": {
        "tools": {"published": "1", "versions": {"1": {
            "model": VERSION_MODEL,
            "allowed_tools": ["get_*", "send_email", "lookup"],
            "tool_checks": [
                {"name": "no-billing", "tool": "send_email", "when": "The email contains billing information",
                 "reason": REASON_BILLING},
                # No reason (the judge's explanation is shown) and a judge model of its own.
                {"name": "billing-records", "tool": "get_*", "when": "The call fetches billing records",
                 "judge_model": ROW_MODEL},
                {"name": "no-rival", "tool": "send_email",
                 "args": [{"pointer": "/to", "not_contains": "@rival.example"}], "reason": REASON_RIVAL},
                {"name": "no-card", "args": [{"pointer": "", "pattern": "[0-9]{16}", "max_match": 16}],
                 "reason": REASON_CARD},
            ],
        }}},
        # No tool checks at all.
        "open": {"published": "1", "versions": {"1": {"model": VERSION_MODEL}}},
    },
}

# Two MCP servers behind one Envoy: both paths end in `/mcp`.
SERVERS = {"sse": "/sse/mcp", "json": "/json/mcp"}
TOOLS = ["send_email", "lookup", "delete_account", "get_weather"]


# --- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mcp_servers(tmp_path_factory):
    started: dict[str, McpServerProcess] = {}
    try:
        for kind, path in SERVERS.items():
            started[kind] = McpServerProcess(tmp_path_factory.mktemp(f"mcp-{kind}"), path,
                                             json_response=kind == "json")
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def stack(double, judge_backend, mcp_servers, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("mcp-tool-checks")
    with stack_owning(start_sidecar(judge_backend, workdir), double, workdir, POLICY,
                      clusters={f"mcp_{kind}": server.port for kind, server in mcp_servers.items()},
                      routes={path: f"mcp_{kind}" for kind, path in SERVERS.items()}) as s:
        yield s


servers = pytest.mark.parametrize("server", list(SERVERS))


# --- the MCP client ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Exchange:
    """One POST the client made through Envoy, as its httpx client saw the answer."""

    method: Optional[str]  # the JSON-RPC method, None for a response or an unreadable body
    status: int
    headers: httpx.Headers


def run_client(url: str, agent: str, steps: Callable[[ClientSession], Awaitable]) -> tuple[object, list[Exchange]]:
    """Connects the SDK's client to `url` (through Envoy) as `agent`, initializes the session, runs
    `steps(session)`, closes the session; returns what the steps returned and every POST's answer."""
    exchanges: list[Exchange] = []

    async def on_response(response: httpx.Response) -> None:
        if response.request.method != "POST":
            return
        try:
            method = json.loads(response.request.content).get("method")
        except (ValueError, AttributeError):
            method = None
        exchanges.append(Exchange(method, response.status_code, response.headers))

    async def main():
        headers = {"x-core-agent": agent, "authorization": f"Bearer {CLIENT_TOKEN}"}
        async with httpx.AsyncClient(headers=headers, timeout=CLIENT_TIMEOUT,
                                     event_hooks={"response": [on_response]}) as client:
            async with streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await steps(session)

    result = asyncio.run(asyncio.wait_for(main(), 30))
    return result, exchanges


def tools_call_exchanges(exchanges: list[Exchange]) -> list[Exchange]:
    return [e for e in exchanges if e.method == "tools/call"]


def texts(result) -> list[str]:
    return [c.text for c in result.content if c.type == "text"]


_unique = itertools.count(1)


def judge_key(call) -> Optional[str]:
    """The key the judge backend received, in either API's style."""
    return call.headers.get("x-api-key") or call.headers.get("authorization", "").removeprefix("Bearer ") or None


def assert_judged_with_own_key(call, path: str, model: str) -> None:
    assert (call.path, call.body["model"]) == (path, model)
    assert judge_key(call) == JUDGE_OWN_KEY, "the sidecar's own key: an MCP call forwards no credentials"
    assert CLIENT_TOKEN not in json.dumps(call.headers), "the MCP client's credentials reached the judge"
    assert call.tool_check.intent == [], "an MCP call carries no user messages"


# --- (a) no tool checks configured -----------------------------------------------------------------------


@servers
def test_without_tool_checks_every_mcp_request_passes(stack, mcp_servers, judge_backend, server):
    judge_backend.reset()
    mcp = mcp_servers[server]
    before = len(mcp.received())
    user = f"ann-{next(_unique)}"

    async def steps(session: ClientSession):
        listed = await session.list_tools()
        called = await session.call_tool("delete_account", {"user": user})
        return listed, called

    (listed, called), exchanges = run_client(stack.envoy.url + SERVERS[server], "open", steps)

    assert sorted(t.name for t in listed.tools) == sorted(TOOLS)
    assert (called.is_error, texts(called)) == (False, [f"deleted {user}"])
    assert mcp.received()[before:] == [{"tool": "delete_account", "arguments": {"user": user}}]
    assert all(x_core_check(e.headers) is None for e in exchanges)
    assert judge_backend.seen() == []


# --- (b) what is not a tools/call ----------------------------------------------------------------------


@servers
def test_initialize_notifications_and_tools_list_pass_unchecked(stack, mcp_servers, judge_backend, server):
    judge_backend.reset()
    mcp = mcp_servers[server]
    before = len(mcp.received())

    async def steps(session: ClientSession):
        return await session.list_tools()

    listed, exchanges = run_client(stack.envoy.url + SERVERS[server], "tools", steps)

    assert sorted(t.name for t in listed.tools) == sorted(TOOLS), "tools/list is not filtered"
    # The server's own statuses: 202 Accepted for a notification (MCP streamable HTTP), 200 for a request.
    assert [(e.method, e.status) for e in exchanges] == [
        ("initialize", 200), ("notifications/initialized", 202), ("tools/list", 200)]
    assert all(x_core_check(e.headers) is None for e in exchanges)
    assert mcp.received()[before:] == []
    assert judge_backend.seen() == []


# --- (c) allowed calls ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Call:
    tool: str
    arguments: dict
    answer: str  # what the server answers
    judged: Optional[tuple] = None  # (judge API path, judge model) when a `when` row reads it


def _allowed_calls() -> list:
    n = next(_unique)
    return [
        pytest.param(Call("lookup", {"q": f"weather in Utrecht {n}"}, f"found: weather in Utrecht {n}"),
                     id="args-rows-only"),
        pytest.param(Call("send_email", {"to": "bob@ok.example", "body": f"See you on Monday {n}."},
                          "sent to bob@ok.example", ("/v1/chat/completions", VERSION_MODEL)),
                     id="judged-by-the-versions-model"),
        pytest.param(Call("get_weather", {"city": f"Zwolle {n}"}, f"sunny in Zwolle {n}", ("/v1/messages", ROW_MODEL)),
                     id="judged-by-the-rows-model"),
    ]


@servers
@pytest.mark.parametrize("call", _allowed_calls())
def test_an_allowed_call_reaches_the_server_and_its_answer_the_client(stack, mcp_servers, judge_backend, server, call):
    judge_backend.reset()
    mcp = mcp_servers[server]
    before = len(mcp.received())

    async def steps(session: ClientSession):
        return await session.call_tool(call.tool, call.arguments)

    result, exchanges = run_client(stack.envoy.url + SERVERS[server], "tools", steps)

    assert (result.is_error, texts(result)) == (False, [call.answer])
    assert mcp.received()[before:] == [{"tool": call.tool, "arguments": call.arguments}]
    (answer,) = tools_call_exchanges(exchanges)
    assert answer.status == 200 and x_core_check(answer.headers) is None
    expected_type = "application/json" if server == "json" else "text/event-stream"
    assert answer.headers["content-type"].startswith(expected_type), "the server's answer passes as it was"
    judged = judge_backend.tool_checks()
    if call.judged is None:
        assert judge_backend.seen() == []
    else:
        (judge_call,) = judged
        assert_judged_with_own_key(judge_call, *call.judged)
        assert judge_call.tool_check.tool == call.tool
        assert json.loads(judge_call.tool_check.arguments) == call.arguments
        assert judge_call.tool_check.answered == "clear"


# --- (d) denied calls ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Denied:
    tool: str
    arguments: dict
    check: str
    reason: str
    judged: Optional[tuple] = None
    never: tuple = ()  # what of the call must not be in the answer


DENIED = [
    pytest.param(Denied("send_email", {"to": "eve@rival.example", "body": "Our roadmap."}, "no-rival", REASON_RIVAL,
                        never=("eve@", "rival.example", "roadmap")), id="args-row"),
    pytest.param(Denied("lookup", {"q": "card 4111111111111111"}, "no-card", REASON_CARD,
                        never=("4111111111111111",)), id="args-pattern-row"),
    # What allowed_tools shows is the filter's own sentence (see the test on its wording below).
    pytest.param(Denied("delete_account", {"user": "ann-5512"}, "allowed_tools", REASON_NOT_ALLOWED,
                        never=("ann-5512",)), id="allowed_tools"),
    pytest.param(Denied("send_email", {"to": "bob@ok.example", "body": "Your invoice 2231."}, "no-billing",
                        REASON_BILLING, ("/v1/chat/completions", VERSION_MODEL), never=("invoice", "2231")),
                 id="when-row-holds"),
    pytest.param(Denied("get_record", {"id": "invoice-8812"}, "billing-records", TOOL_HOLDS_EXPLANATION,
                        ("/v1/messages", ROW_MODEL), never=("invoice-8812",)), id="when-row-without-reason"),
]


@servers
@pytest.mark.parametrize("denied", DENIED)
def test_a_denied_call_never_reaches_the_server(stack, mcp_servers, judge_backend, server, denied):
    judge_backend.reset()
    mcp = mcp_servers[server]
    before = len(mcp.received())
    after = f"after denial {next(_unique)}"

    async def steps(session: ClientSession):
        refused = await session.call_tool(denied.tool, denied.arguments)
        # The session goes on: the next (allowed) call is served.
        return refused, await session.call_tool("lookup", {"q": after})

    (result, next_result), exchanges = run_client(stack.envoy.url + SERVERS[server], "tools", steps)

    assert mcp.received()[before:] == [{"tool": "lookup", "arguments": {"q": after}}], \
        "the denied call reached the MCP server"
    assert result.is_error is True
    (text,) = texts(result)
    assert text == denied.reason
    for never in denied.never:
        assert never not in text, f"the answer shows {never!r} of the denied call"
    denial, allowed = tools_call_exchanges(exchanges)
    assert denial.status == 200
    assert denial.headers["content-type"].startswith("application/json")
    assert x_core_check(denial.headers) == denied_header(denied.check)
    assert (next_result.is_error, texts(next_result)) == (False, [f"found: {after}"])
    assert x_core_check(allowed.headers) is None
    if denied.judged is None:
        assert judge_backend.seen() == [], "decided in the filter: no judge call"
    else:
        (judge_call,) = judge_backend.tool_checks()
        assert_judged_with_own_key(judge_call, *denied.judged)
        assert judge_call.tool_check.answered == "holds"


# --- (e) the exact answer to a raw tools/call ------------------------------------------------------------


@pytest.mark.parametrize("path", ["/sse/mcp", "/json/mcp?tenant=e2e"])
@pytest.mark.parametrize("request_id", ["req-7", 7])
def test_a_raw_denied_tools_call_is_answered_in_the_servers_place(stack, mcp_servers, judge_backend, path,
                                                                  request_id):
    mcp = mcp_servers["sse" if path.startswith("/sse") else "json"]
    before = len(mcp.received())
    request = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
               "params": {"name": "send_email", "arguments": {"to": "eve@rival.example", "body": "Our roadmap."}}}

    response = httpx.post(stack.envoy.url + path, json=request, timeout=CLIENT_TIMEOUT,
                          headers={"accept": "application/json, text/event-stream",
                                   "mcp-protocol-version": "2025-06-18"})

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert x_core_check(response.headers) == denied_header("no-rival")
    assert response.json() == {"jsonrpc": "2.0", "id": request_id,
                               "result": {"content": [{"type": "text", "text": REASON_RIVAL}], "isError": True}}
    for never in (b"send_email", b"eve@", b"rival.example", b"roadmap"):
        assert never not in response.content
    assert mcp.received()[before:] == []


def test_allowed_tools_reason_does_not_name_the_denied_tool(stack, mcp_servers):
    """Spec: none of a denied call's name or arguments reaches the caller."""
    response = httpx.post(stack.envoy.url + "/sse/mcp", timeout=CLIENT_TIMEOUT,
                          json={"jsonrpc": "2.0", "id": 11, "method": "tools/call",
                                "params": {"name": "delete_account", "arguments": {"user": "ann-5513"}}},
                          headers={"accept": "application/json, text/event-stream"})
    assert x_core_check(response.headers) == denied_header("allowed_tools")
    assert b"delete_account" not in response.content, response.json()
    assert response.json() == {"jsonrpc": "2.0", "id": 11, "result": {
        "content": [{"type": "text", "text": REASON_NOT_ALLOWED}], "isError": True}}


# --- what cannot be checked is refused, never passed ---------------------------------------------------------


# JSON-RPC 2.0's error codes, as src/mcp.rs answers them (the harness pins them: tests/tool_checks.rs).
PARSE_ERROR, INVALID_REQUEST = -32700, -32600
NOT_STRICT_JSON = "the body is not valid JSON (or repeats a key), so its tool calls cannot be checked"


@pytest.mark.parametrize("body, code, message", [
    pytest.param(b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "lookup", '
                 b'"arguments": {"q": "card 4111111111111111"}}}]', INVALID_REQUEST,
                 "a batch with tools/call cannot be checked: send each tools/call on its own",
                 id="batch-holding-a-tools-call"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "lookup", '
                 b'"arguments": {"q": "fine"}, "arguments": {"q": "card 4111111111111111"}}}', PARSE_ERROR,
                 NOT_STRICT_JSON, id="a-key-twice"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "lookup", ',
                 PARSE_ERROR, NOT_STRICT_JSON, id="not-json"),
])
def test_a_tools_call_the_filter_cannot_read_is_refused_with_a_json_rpc_error(stack, mcp_servers, body, code,
                                                                              message):
    """README: a batch holding a tools/call, or a body that is not strict JSON, is refused with a
    JSON-RPC error (never passed unchecked): HTTP 400, no id (none could be read), the code and a
    message that names what is wrong and quotes nothing of the body."""
    mcp = mcp_servers["json"]
    before = len(mcp.received())
    response = httpx.post(stack.envoy.url + "/json/mcp", content=body, timeout=CLIENT_TIMEOUT,
                          headers={"content-type": "application/json",
                                   "accept": "application/json, text/event-stream"})
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    assert b"4111111111111111" not in response.content
    assert mcp.received()[before:] == []
