"""The wire shapes of `benches/streaming.py`'s Google Gemini and Bedrock Converse answers (issue 55):
the request each SDK sends, the stream each vendor writes back, and the client's reading of it.

Both are built here from the vendors' own descriptions, independently of the filter's readers:

- Gemini, `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` (google-genai always asks for
  `alt=sse`: python-genai `models.py`), key in `x-goog-api-key` (python-genai `_api_client.py`). The
  answer is server-sent events without names or an end marker, `content-type: text/event-stream`: each
  `data:` one GenerateContentResponse (<https://ai.google.dev/api/generate-content#v1beta.GenerateContentResponse>)
  with only its new text part, `modelVersion` and `responseId` repeated and `usageMetadata` cumulative
  on every chunk (simonw/llm-gemini#97, a captured stream; ankit373/hydra#855), events ended by
  `\\r\\n\\r\\n` (docs/design/027-gemini-converse-and-event-streams.md: also seen beside `\\n\\n`). The last chunk carries
  `finishReason: "STOP"` on a candidate whose content has no parts (the "done + usage" chunk:
  agentjido/req_llm#638, pydantic/pydantic-ai#2631), so every text chunk is alike.
- Converse, `POST /model/{modelId}/converse-stream` (botocore `bedrock-runtime/2023-09-30/service-2.json`
  `ConverseStream`; <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html>),
  SigV4-signed by the caller (a fixed dummy signature here: neither Envoy nor livecheck checks it). The
  answer is an AWS event stream, `content-type: application/vnd.amazon.eventstream`: each message a
  12-byte prelude (total length, headers length, CRC-32 of those 8 bytes), headers (`:event-type`,
  `:content-type`, `:message-type`, strings: type 7 with a 16-bit length), the JSON payload and the
  CRC-32 of everything before it, big-endian (<https://docs.aws.amazon.com/AmazonS3/latest/API/RESTSelectObjectAppendix.html>;
  botocore `eventstream.py`). Events, in the order Bedrock sends them (`ConverseStreamOutput`):
  `messageStart`, a `contentBlockDelta` per piece of text (a text block has no `contentBlockStart`),
  `contentBlockStop`, `messageStop`, `metadata` (usage and metrics required). Bedrock pads each payload
  with a random-length `"p"` field its model does not declare (a captured frame: AI21Labs/ai21-python
  `tests/unittests/test_aws_stream_decoder.py`; docs/design/027-gemini-converse-and-event-streams.md); so do these, seeded.
"""

from __future__ import annotations

import binascii
import json
import random
import struct
from typing import Iterator

GEMINI_MODEL = "gemini-2.5-flash"
CONVERSE_MODEL = "amazon.nova-lite-v1:0"
PROMPT_TOKENS = 12
EVENTSTREAM = "application/vnd.amazon.eventstream"
# Bedrock's padding alphabet, as in the captured frame (`"p":"abcdefghijklmnopqrstuv"`).
PADDING = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


# --- requests ---------------------------------------------------------------------------------------------


def request_head(shape: str) -> tuple[list[str], bytes]:
    """The request line and headers (without length or connection), and the body, the SDK would send."""
    if shape == "gemini":
        # google-genai's `generate_content_stream`: `contents` with a user turn of one text part.
        body = {"contents": [{"parts": [{"text": "Where is my order?"}], "role": "user"}]}
        lines = [f"POST /v1beta/models/{GEMINI_MODEL}:streamGenerateContent?alt=sse HTTP/1.1",
                 "host: generativelanguage.googleapis.com", "content-type: application/json",
                 "x-goog-api-key: AIza-bench-dummy-key"]
    elif shape == "converse":
        # boto3's `converse_stream(modelId=..., messages=..., inferenceConfig=...)`: the model id
        # percent-encoded in the path (`:` as `%3A`), SigV4 over `content-type;host;x-amz-date`.
        body = {"messages": [{"role": "user", "content": [{"text": "Where is my order?"}]}],
                "inferenceConfig": {"maxTokens": 4096}}
        model = CONVERSE_MODEL.replace(":", "%3A")
        lines = [f"POST /model/{model}/converse-stream HTTP/1.1", "host: bedrock-runtime.us-east-1.amazonaws.com",
                 "content-type: application/json", "x-amz-date: 20261207T120000Z",
                 "authorization: AWS4-HMAC-SHA256 Credential=AKIDBENCHDUMMY/20261207/us-east-1/bedrock/aws4_request, "
                 "SignedHeaders=content-type;host;x-amz-date, Signature=" + "0" * 64]
    else:
        raise ValueError(shape)
    return lines, json.dumps(body).encode()


def content_type(shape: str) -> str:
    return EVENTSTREAM if shape == "converse" else "text/event-stream"


# --- Gemini -----------------------------------------------------------------------------------------------


def gemini_stream(deltas: list[str]) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """(head, text events, tail) of a `:streamGenerateContent?alt=sse` answer, as Google writes it."""
    def chunk_event(candidate: dict, out_tokens: int) -> bytes:
        data = {"candidates": [candidate],
                "usageMetadata": {"promptTokenCount": PROMPT_TOKENS, "candidatesTokenCount": out_tokens,
                                  "totalTokenCount": PROMPT_TOKENS + out_tokens,
                                  "promptTokensDetails": [{"modality": "TEXT", "tokenCount": PROMPT_TOKENS}]},
                "modelVersion": GEMINI_MODEL, "responseId": "bench-gemini-response"}
        return b"data: %s\r\n\r\n" % json.dumps(data, separators=(",", ": ")).encode()

    body = [chunk_event({"content": {"parts": [{"text": d}], "role": "model"}, "index": 0}, i + 1)
            for i, d in enumerate(deltas)]
    tail = [chunk_event({"content": {"role": "model"}, "finishReason": "STOP", "index": 0}, len(deltas))]
    return [], body, tail


def gemini_events(data: dict) -> list[dict]:
    """One Gemini chunk as the client's events (named as their Anthropic counterparts, as the other
    shapes are): its first candidate's text (google-genai's `.text`: the text parts, thoughts aside),
    then the stream's end where a finishReason ends it (Gemini has no end marker)."""
    out = []
    candidate = (data.get("candidates") or [{}])[0]
    text = "".join(p.get("text", "") for p in (candidate.get("content") or {}).get("parts") or []
                   if not p.get("thought"))
    if text:
        out.append({"type": "content_block_delta", "delta": {"type": "text_delta", "text": text}})
    if candidate.get("finishReason"):
        out.append({"type": "message_stop"})
    return out or [{"type": "chunk"}]


# --- Converse (AWS event stream) --------------------------------------------------------------------------


def eventstream_message(event_type: str, payload: bytes) -> bytes:
    """One event message, its headers in Bedrock's order (`:event-type`, `:content-type`, `:message-type`)."""
    headers = b"".join(
        struct.pack("!B", len(name)) + name + b"\x07" + struct.pack("!H", len(value)) + value
        for name, value in ((b":event-type", event_type.encode()), (b":content-type", b"application/json"),
                            (b":message-type", b"event")))
    prelude = struct.pack("!II", 12 + len(headers) + len(payload) + 4, len(headers))
    message = prelude + struct.pack("!I", binascii.crc32(prelude)) + headers + payload
    return message + struct.pack("!I", binascii.crc32(message))


def converse_stream(deltas: list[str]) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """(head, text events, tail) of a `converse-stream` answer, as Bedrock writes it."""
    rng = random.Random(55)

    def event(event_type: str, member: dict) -> bytes:
        padded = {**member, "p": PADDING[:rng.randint(1, len(PADDING))]}
        return eventstream_message(event_type, json.dumps(padded, separators=(",", ":")).encode())

    head = [event("messageStart", {"role": "assistant"})]
    body = [event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": d}}) for d in deltas]
    tail = [event("contentBlockStop", {"contentBlockIndex": 0}),
            event("messageStop", {"stopReason": "end_turn"}),
            event("metadata", {"usage": {"inputTokens": PROMPT_TOKENS, "outputTokens": len(deltas),
                                         "totalTokens": PROMPT_TOKENS + len(deltas)},
                               "metrics": {"latencyMs": 2000}})]
    return head, body, tail


class BadEventStream(ValueError):
    pass


def eventstream_messages(body: bytes) -> Iterator[tuple[int, dict[str, str], bytes]]:
    """(offset of the message's end, string headers, payload) of each message, both CRCs checked; a
    body that ends inside a message, or a message whose lengths or checksums do not hold, is an error
    (boto3 would stop silently on a cut one: docs/design/027-gemini-converse-and-event-streams.md)."""
    pos = 0
    while pos < len(body):
        if len(body) - pos < 16:
            raise BadEventStream(f"{len(body) - pos} bytes after the last whole message")
        total, headers_len, prelude_crc = struct.unpack_from("!III", body, pos)
        if binascii.crc32(body[pos:pos + 8]) != prelude_crc:
            raise BadEventStream(f"prelude CRC at {pos}")
        end = pos + total
        if total < 16 + headers_len or end > len(body):
            raise BadEventStream(f"message at {pos} of {total} bytes does not fit")
        if binascii.crc32(body[pos:end - 4]) != struct.unpack_from("!I", body, end - 4)[0]:
            raise BadEventStream(f"message CRC at {pos}")
        headers, h = {}, pos + 12
        while h < pos + 12 + headers_len:
            name_len = body[h]
            name = body[h + 1:h + 1 + name_len].decode()
            kind = body[h + 1 + name_len]
            if kind != 7:
                raise BadEventStream(f"header {name!r} of type {kind}, not a string")
            (value_len,) = struct.unpack_from("!H", body, h + 2 + name_len)
            value_at = h + 4 + name_len
            headers[name] = body[value_at:value_at + value_len].decode()
            h = value_at + value_len
        yield end, headers, body[pos + 12 + headers_len:end - 4]
        pos = end


def converse_events(headers: dict[str, str], payload: bytes) -> dict:
    """One Converse message as the client's event (named as its Anthropic counterpart): a text delta,
    the stream's end (`metadata`, Bedrock's last event), an exception, or any other event."""
    if headers.get(":message-type") != "event":
        return {"type": "exception:" + headers.get(":exception-type", headers.get(":error-code", "?"))}
    kind = headers.get(":event-type")
    data = json.loads(payload)
    if kind == "contentBlockDelta" and isinstance(data.get("delta", {}).get("text"), str):
        return {"type": "content_block_delta", "delta": {"type": "text_delta", "text": data["delta"]["text"]}}
    if kind == "metadata":
        return {"type": "message_stop"}
    return {"type": kind}
