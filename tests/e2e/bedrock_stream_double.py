"""Bedrock's `invoke-with-response-stream` as the UPSTREAM DOUBLE (a test double, not a model) answers
it, and read back as a caller reads it: Anthropic's Messages events, each one's JSON base64 in the
`bytes` of an AWS event-stream `chunk` message (`{"bytes": "...", "p": "abc..."}`, the padding Bedrock
adds), framed here with Python's own CRC32 (`binascii.crc32`), independently of the filter's encoder.

Framing: prelude (total length, headers length, CRC32 of those 8 bytes; big-endian), headers (name
length, name, type 7 = string, u16 length, value), payload, CRC32 of everything before it
(botocore `botocore/eventstream.py`; https://docs.aws.amazon.com/AmazonS3/latest/API/RESTSelectObjectAppendix.html).
"""

from __future__ import annotations

import base64
import binascii
import json
import struct

from upstream_double import Answer

CONTENT_TYPE = "application/vnd.amazon.eventstream"
PAD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return bytes([len(n)]) + n + bytes([7]) + struct.pack("!H", len(v)) + v


def frame(headers: list[tuple[str, str]], payload: bytes) -> bytes:
    block = b"".join(_header(k, v) for k, v in headers)
    prelude = struct.pack("!II", 16 + len(block) + len(payload), len(block))
    prelude += struct.pack("!I", binascii.crc32(prelude))
    message = prelude + block + payload
    return message + struct.pack("!I", binascii.crc32(message))


def chunk(event: dict, pad: int) -> bytes:
    data = json.dumps(event, separators=(",", ":")).encode()
    payload = json.dumps({"bytes": base64.b64encode(data).decode(), "p": PAD[:pad]}, separators=(",", ":"))
    headers = [(":event-type", "chunk"), (":content-type", "application/json"), (":message-type", "event")]
    return frame(headers, payload.encode())


def exception(kind: str, message: str) -> bytes:
    """A modelled exception inside the stream (`:message-type: exception`), as Bedrock sends one."""
    headers = [(":exception-type", kind), (":content-type", "application/json"), (":message-type", "exception")]
    return frame(headers, json.dumps({"message": message}).encode())


def messages_events(pieces: list[str]) -> list[dict]:
    """A Messages stream whose answer text arrives in `pieces`."""
    events = [{"type": "message_start", "message": {
        "id": "msg_bdrk_01", "type": "message", "role": "assistant", "model": "claude-test", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}]
    events += [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
               for p in pieces]
    events += [{"type": "content_block_stop", "index": 0},
               {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 5}},
               {"type": "message_stop"}]
    return events


def chunk_stream(pieces: list[str]) -> Answer:
    """The double's answer: one chunk message per HTTP chunk, each padded as Bedrock pads."""
    frames = [chunk(e, 1 + (7 * i) % len(PAD)) for i, e in enumerate(messages_events(pieces))]
    return Answer(headers={"content-type": CONTENT_TYPE, "x-amzn-bedrock-content-type": "application/json"},
                  body_chunks=frames, chunk_delay=0.01)


def read_chunks(body: bytes) -> tuple[list[dict], bytes]:
    """The Messages events of the whole messages in `body` (each checked: both CRCs, a `chunk` event),
    and what is left after the last whole message (empty for a well-framed stream)."""
    events = []
    while len(body) >= 12:
        total, headers_len, prelude_crc = struct.unpack("!III", body[:12])
        if len(body) < total:
            break
        assert binascii.crc32(body[:8]) == prelude_crc, "prelude CRC"
        assert binascii.crc32(body[:total - 4]) == struct.unpack("!I", body[total - 4:total])[0], "message CRC"
        block, payload = body[12:12 + headers_len], body[12 + headers_len:total - 4]
        headers, i = {}, 0
        while i < len(block):
            n = block[i]
            name = block[i + 1:i + 1 + n].decode()
            assert block[i + 1 + n] == 7, "string headers only"
            (v,) = struct.unpack("!H", block[i + 2 + n:i + 4 + n])
            headers[name] = block[i + 4 + n:i + 4 + n + v].decode()
            i += 4 + n + v
        assert headers.get(":message-type") == "event" and headers.get(":event-type") == "chunk", headers
        part = json.loads(payload)
        assert PAD.startswith(part.get("p", "")), part
        events.append(json.loads(base64.b64decode(part["bytes"], validate=True)))
        body = body[total:]
    return events, body
