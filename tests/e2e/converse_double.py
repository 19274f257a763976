"""The MODEL DOUBLE's answers in Amazon Bedrock's Converse shapes, and its check of the caller's SigV4
signature (a test double standing in for `bedrock-runtime`, not a model).

Non-streamed (`POST /model/{modelId}/converse`): one JSON body, `ConverseResponse` of botocore's service
model (botocore/data/bedrock-runtime/2023-09-30/service-2.json: `output.message.content[]` blocks `text` and
`toolUse {toolUseId, name, input}`, `stopReason`, `usage {inputTokens, outputTokens, totalTokens}`,
`metrics {latencyMs}`; AWS API reference API_runtime_Converse).

Streamed (`POST /model/{modelId}/converse-stream`): AWS event-stream messages (content type
`application/vnd.amazon.eventstream`), framed here with `binascii.crc32`, independently of the filter's
encoder: a 12-byte prelude (total length, headers length, CRC32 of those 8 bytes; big-endian), the headers
(name length u8, name, type 7 = string, value length u16, value), the JSON payload, and the CRC32 of all
before it (https://docs.aws.amazon.com/AmazonS3/latest/API/RESTSelectObjectAppendix.html; botocore
`eventstream.py`). The headers in Bedrock's order: `:event-type`, `:content-type`, `:message-type`. Events
(service model `ConverseStreamOutput`, AWS API reference API_runtime_ConverseStreamOutput): `messageStart`,
`contentBlockStart` (a `toolUse` block's id and name), `contentBlockDelta` (`delta.text`, or
`delta.toolUse.input`: the arguments' JSON in pieces), `contentBlockStop`, `messageStop {stopReason}`,
`metadata {usage, metrics}`. Every payload also carries Bedrock's undeclared padding member `"p"` (seen in
captured Bedrock frames; botocore's parser ignores unknown members), which a reader must never take for
answer text.

Where the HTTP chunks end is scripted (`chunked`): a frame per chunk, or the frames cut on purpose
inside their prelude, headers and payload, or cut at given byte offsets.

`SigV4Check` is the double's gate: when a request arrives it recomputes the caller's SigV4 signature with
botocore's own `SigV4Auth` and the dummy credentials over what arrived (method, path as sent, the headers
the caller listed in `SignedHeaders`, the body), as Bedrock does, and answers Bedrock's 403
`InvalidSignatureException` when it does not match; so a turn that reaches the double and is answered
proves livecheck forwarded the signed request unchanged.
"""

from __future__ import annotations

import binascii
import dataclasses
import hmac
import json
import re
import struct
import threading
from typing import Iterable, Optional, Sequence

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from upstream_double import JSON_HEADERS, Answer, DoubleToolCall, Received, _raw_json

EVENT_STREAM = "application/vnd.amazon.eventstream"
EVENT_STREAM_HEADERS = {"content-type": EVENT_STREAM, "x-amzn-requestid": "double-converse-stream"}
CONVERSE_JSON_HEADERS = {**JSON_HEADERS, "x-amzn-requestid": "double-converse"}
USAGE = {"inputTokens": 31, "outputTokens": 47, "totalTokens": 78}
METRICS = {"latencyMs": 123}
# Bedrock pads each event's payload with an undeclared member of random length.
PADDING = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"

# --- AWS event-stream framing ------------------------------------------------------------------------------


def _header(name: str, value: str) -> bytes:
    """One string-typed header (type 7): name length u8, name, 7, value length u16, value."""
    n, v = name.encode(), value.encode()
    return struct.pack("!B", len(n)) + n + b"\x07" + struct.pack("!H", len(v)) + v


def frame(headers: Sequence[tuple[str, str]], payload: bytes) -> bytes:
    """One event-stream message: prelude (total, headers length, prelude CRC), headers, payload, message CRC."""
    block = b"".join(_header(n, v) for n, v in headers)
    total = 12 + len(block) + len(payload) + 4
    prelude = struct.pack("!II", total, len(block))
    prelude += struct.pack("!I", binascii.crc32(prelude))
    message = prelude + block + payload
    return message + struct.pack("!I", binascii.crc32(message))


def event(event_type: str, payload: dict) -> bytes:
    """A Converse stream event as Bedrock frames it (its header order, its padding member)."""
    body = json.dumps({**payload, "p": PADDING[: 3 + len(event_type) % 20]}, separators=(",", ":")).encode()
    return frame([(":event-type", event_type), (":content-type", "application/json"), (":message-type", "event")],
                 body)


def exception(exception_type: str, message: str) -> bytes:
    """An in-stream exception (`:message-type: exception`), which boto3 raises as EventStreamError."""
    return frame([(":exception-type", exception_type), (":content-type", "application/json"),
                  (":message-type", "exception")], json.dumps({"message": message}).encode())


def unframe(data: bytes) -> list[tuple[dict, bytes]]:
    """The messages of a whole event stream, (headers, payload) each, both CRCs checked (for the tests'
    own reading of what reached the caller; string headers only, which is all Bedrock's events carry)."""
    out, at = [], 0
    while at < len(data):
        total, hlen, pcrc = struct.unpack_from("!III", data, at)
        assert binascii.crc32(data[at:at + 8]) == pcrc, f"prelude CRC at byte {at}"
        message = data[at:at + total]
        assert len(message) == total, f"a message cut short at byte {at}"
        (mcrc,) = struct.unpack_from("!I", message, total - 4)
        assert binascii.crc32(message[:-4]) == mcrc, f"message CRC at byte {at}"
        headers, h = {}, 12
        while h < 12 + hlen:
            (nlen,) = struct.unpack_from("!B", message, h)
            name = message[h + 1:h + 1 + nlen].decode()
            kind = message[h + 1 + nlen]
            assert kind == 7, f"header {name} is not a string"
            (vlen,) = struct.unpack_from("!H", message, h + 2 + nlen)
            headers[name] = message[h + 4 + nlen:h + 4 + nlen + vlen].decode()
            h += 4 + nlen + vlen
        out.append((headers, message[12 + hlen:total - 4]))
        at += total
    return out


# --- where the HTTP chunks end -----------------------------------------------------------------------------


def chunked(frames: Sequence[bytes], how: str = "frames", at: Iterable[int] = ()) -> list[bytes]:
    """The frames as HTTP chunks: `frames` one frame each; `inside` every frame cut in three, inside its
    prelude, inside its headers and inside its payload, the cuts joined to the next frame's start so no chunk
    ends where a frame does; `at` the whole stream cut at the given byte offsets."""
    if how == "frames":
        return list(frames)
    data = b"".join(frames)
    if how == "inside":
        cuts, start = [], 0
        for f in frames:
            (hlen,) = struct.unpack_from("!I", f, 4)
            cuts += [start + 5, start + 12 + hlen // 2, start + 12 + hlen + (len(f) - 16 - hlen) // 2]
            start += len(f)
    elif how == "at":
        cuts = sorted(set(at))
    else:
        raise ValueError(how)
    bounds = [0, *[c for c in cuts if 0 < c < len(data)], len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


# --- the answers ---------------------------------------------------------------------------------------------


def converse_answer(text: str = "", calls: Sequence[DoubleToolCall] = (), stop: str = "",
                    **answer) -> Answer:
    """A whole Converse answer: `text` as a text block, then each call as a `toolUse` block whose `input`
    is the call's arguments as the model wrote them; `stopReason` `tool_use` with calls, else `end_turn`."""
    raw = {f"@@input{i}@@": c.arguments for i, c in enumerate(calls)}
    content = ([{"text": text}] if text else []) + [
        {"toolUse": {"toolUseId": f"tooluse_{i + 1}", "name": c.name, "input": f"@@input{i}@@"}}
        for i, c in enumerate(calls)]
    body = _raw_json({"output": {"message": {"role": "assistant", "content": content}},
                      "stopReason": stop or ("tool_use" if calls else "end_turn"),
                      "usage": USAGE, "metrics": METRICS}, raw)
    return Answer(headers=dict(CONVERSE_JSON_HEADERS), body_chunks=[body], chunked=False, **answer)


def converse_events(pieces: Sequence[str] = (), calls: Sequence[DoubleToolCall] = (), stop: str = "") -> list[bytes]:
    """The frames of a streamed Converse answer: the text in `pieces` (one delta each) in block 0, then each
    call in a block of its own (start with id and name, its input in `deltas()`, stop), `messageStop`,
    `metadata`."""
    out = [event("messageStart", {"role": "assistant"})]
    index = 0
    if pieces:
        out += [event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": p}}) for p in pieces]
        out.append(event("contentBlockStop", {"contentBlockIndex": 0}))
        index = 1
    for n, call in enumerate(calls):
        i = index + n
        out.append(event("contentBlockStart", {"contentBlockIndex": i, "start": {
            "toolUse": {"toolUseId": f"tooluse_{n + 1}", "name": call.name}}}))
        out += [event("contentBlockDelta", {"contentBlockIndex": i, "delta": {"toolUse": {"input": piece}}})
                for piece in call.deltas()]
        out.append(event("contentBlockStop", {"contentBlockIndex": i}))
    out += [event("messageStop", {"stopReason": stop or ("tool_use" if calls else "end_turn")}),
            event("metadata", {"usage": USAGE, "metrics": METRICS})]
    return out


def converse_stream_answer(frames: Sequence[bytes], how: str = "frames", at: Iterable[int] = (),
                           chunk_delay: float = 0.02, **answer) -> Answer:
    """The frames as a `converse-stream` answer, its HTTP chunks ending where `chunked(how, at)` says."""
    return Answer(headers=dict(EVENT_STREAM_HEADERS), body_chunks=chunked(frames, how, at),
                  chunk_delay=chunk_delay, **answer)


# --- the caller's signature, checked as Bedrock checks it ---------------------------------------------------

_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request, "
    r"SignedHeaders=(?P<signed>[a-z0-9;-]+), Signature=(?P<signature>[0-9a-f]{64})$")


def sigv4_mismatch(received: Received, access_key: str, secret_key: str, region: str,
                   service: str = "bedrock") -> Optional[str]:
    """Why `received` does not carry a valid SigV4 signature of the dummy credentials (None: it does).

    The signature is recomputed with botocore's `SigV4Auth` over the request as it arrived: its method,
    its path as sent (botocore's canonical URI encodes it once more), its query, the headers its
    `SignedHeaders` lists with the values that arrived, the SHA-256 of the body that arrived, at its
    `x-amz-date`. Signing name `bedrock` (the service model's `signingName`), not `bedrock-runtime`."""
    found = _AUTHORIZATION.match(received.headers.get("authorization", ""))
    if not found:
        return "no SigV4 Authorization header"
    if (found["key"], found["region"], found["service"]) != (access_key, region, service):
        return f"signed for {found['key']}/{found['region']}/{found['service']}"
    signed = found["signed"].split(";")
    missing = [h for h in signed if h not in received.headers]
    if missing:
        return f"signed headers missing: {missing}"
    timestamp = received.headers.get("x-amz-date", "")
    if not timestamp.startswith(found["date"]):
        return "x-amz-date is not the credential's date"
    request = AWSRequest(method=received.method, url=f"http://{received.headers['host']}{received.path}",
                         headers={h: received.headers[h] for h in signed}, data=received.body)
    request.context["timestamp"] = timestamp
    auth = SigV4Auth(Credentials(access_key, secret_key), service, region)
    canonical = auth.canonical_request(request)
    if auth.signed_headers(auth.headers_to_sign(request)) != found["signed"]:
        return "SignedHeaders is not the canonical list"
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    if not hmac.compare_digest(expected, found["signature"]):
        return "signature does not match"
    return None


@dataclasses.dataclass
class SigV4Check:
    """The double's gate for Bedrock requests (an `Answer.admit`): each request's verdict is recorded in
    `verdicts` (None = valid) and a bad signature is answered as Bedrock answers it."""

    access_key: str
    secret_key: str
    region: str
    verdicts: list = dataclasses.field(default_factory=list)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def __call__(self, received: Received) -> Optional[Answer]:
        why = sigv4_mismatch(received, self.access_key, self.secret_key, self.region)
        with self._lock:
            self.verdicts.append(why)
        if why is None:
            return None
        # Bedrock's answer to a bad signature (aws-beam/aws-erlang#161 shows one: 403, this error type).
        return Answer(status=403, headers={
            "content-type": "application/json", "x-amzn-requestid": "double-denied",
            "x-amzn-errortype": "InvalidSignatureException:http://internal.amazon.com/coral/com.amazon.coral.service/"},
            body_chunks=[json.dumps({"message": "The request signature we calculated does not match the "
                                                "signature you provided."})], chunked=False)
