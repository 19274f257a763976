"""A real MCP server for the e2e tests: the official MCP Python SDK's server (`MCPServer`, the SDK's
FastMCP, renamed in mcp 2.x) on the streamable HTTP transport, on a free loopback port.

    python mcp_server.py --record CALLS.jsonl --port-file PORT [--path /mcp] [--json-response]

It binds 127.0.0.1:0 and starts listening itself, writes the port it got to `--port-file` (so the
test knows where to point Envoy without a race for the port), then serves until SIGTERM. Every tool
call the server RECEIVES is appended to `--record` as one JSON line `{"tool": ..., "arguments": ...}`
before the tool answers, so a test can assert that a denied call never reached it.

`--json-response` makes the server answer POSTs with `application/json` instead of an SSE stream
(the transport allows both; the filter must pass either untouched).

Tools: `send_email(to, body)`, `lookup(q)`, `delete_account(user)`, `get_weather(city)`; each
answers one line of text naming what it did.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import threading

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer


def build(record: pathlib.Path) -> MCPServer:
    server = MCPServer("livecheck-e2e-tools", log_level="WARNING")
    lock = threading.Lock()

    def received(tool: str, **arguments) -> None:
        line = json.dumps({"tool": tool, "arguments": arguments}) + "\n"
        with lock, record.open("a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    @server.tool()
    def send_email(to: str, body: str) -> str:
        """Send an e-mail."""
        received("send_email", to=to, body=body)
        return f"sent to {to}"

    @server.tool()
    def lookup(q: str) -> str:
        """Look something up."""
        received("lookup", q=q)
        return f"found: {q}"

    @server.tool()
    def delete_account(user: str) -> str:
        """Delete a user's account."""
        received("delete_account", user=user)
        return f"deleted {user}"

    @server.tool()
    def get_weather(city: str) -> str:
        """Today's weather in a city."""
        received("get_weather", city=city)
        return f"sunny in {city}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", required=True, type=pathlib.Path)
    parser.add_argument("--port-file", required=True, type=pathlib.Path)
    parser.add_argument("--path", default="/mcp")
    parser.add_argument("--json-response", action="store_true")
    args = parser.parse_args()

    args.record.touch()
    app = build(args.record).streamable_http_app(streamable_http_path=args.path, json_response=args.json_response)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    # Written once the socket listens: a connection from now on waits in the backlog until served.
    tmp = args.port_file.with_suffix(".tmp")
    tmp.write_text(str(sock.getsockname()[1]))
    tmp.rename(args.port_file)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2))
    anyio.run(lambda: server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
