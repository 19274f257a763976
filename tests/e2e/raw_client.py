"""A raw HTTP/1.1 client: sends the request body as separate chunks with a delay between them (so
Envoy delivers one request body callback per chunk) and reports a reset instead of raising."""

from __future__ import annotations

import dataclasses
import http.client
import socket
import time
from typing import Optional


@dataclasses.dataclass
class Reply:
    status: Optional[int]  # None when the stream was reset before response headers
    headers: dict  # lower-cased names; repeated headers joined with ", "
    body: bytes
    reset: bool  # the response did not complete (connection closed or reset mid-response)


def send(
    port: int,
    method: str,
    path: str,
    headers: dict,
    body_chunks: list,
    chunk_delay: float = 0.06,
    timeout: float = 10.0,
) -> Reply:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        lines = [f"{method} {path} HTTP/1.1", "host: fidelity.test", "connection: close"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body_chunks:
            lines.append("transfer-encoding: chunked")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        chunks = [c.encode() if isinstance(c, str) else c for c in body_chunks]
        for i, chunk in enumerate(chunks):
            time.sleep(chunk_delay)
            data = b"%x\r\n%s\r\n" % (len(chunk), chunk)
            if i == len(chunks) - 1:
                data += b"0\r\n\r\n"  # last chunk and terminator together: one callback with end_of_stream
            try:
                sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                break  # Envoy answered early (local reply) and closed; read what it said
        return _read(sock)
    finally:
        sock.close()


def _read(sock: socket.socket) -> Reply:
    response = http.client.HTTPResponse(sock)
    try:
        response.begin()
    except (http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine):
        return Reply(None, {}, b"", True)
    headers: dict = {}
    for name, value in response.getheaders():
        name = name.lower()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    try:
        body = response.read()
        reset = False
    except http.client.IncompleteRead as e:
        body, reset = e.partial, True
    except ConnectionResetError:
        body, reset = b"", True
    return Reply(response.status, headers, body, reset)
