"""Gemini's `:streamGenerateContent` without `alt=sse`, end to end over raw HTTP: real Envoy running
livecheck.wasm with RULES_ONLY (one blocking output pattern) -> the scripted upstream double (a test
double, not a model) answering Google's JSON-array stream: one JSON array sent piece by piece, `[{…}`
then `,\r\n{…}` per chunk then `]`, as `application/json` (symfony/ai#1988,
kgateway-dev/kgateway#10804). The double's HTTP chunks split the array anywhere, separators and
strings included. A clean stream reaches the caller byte for byte; a streamed cut leaves the caller
one JSON array (`json.loads`) whose last chunk stops for safety, and nothing of the match.
"""

from __future__ import annotations

import json

import pytest

import raw_client
from cut_support import BEFORE_MATCH, CLEAN, FORBIDDEN, NEVER_SENT
from upstream_double import Answer

MODEL = "gemini-2.5-flash"
PATHS = [
    f"/v1beta/models/{MODEL}:streamGenerateContent?key=AIza-dummy",
    f"/v1/projects/p/locations/us-central1/publishers/google/models/{MODEL}:streamGenerateContent",
]
REQUEST = {"contents": [{"role": "user", "parts": [{"text": "Where is order 4711?"}]}]}
JSON = "application/json; charset=UTF-8"


def _array(pieces: list[str]) -> bytes:
    """Google's stream saying `pieces`: each chunk its new text and the usage so far, pretty-printed
    as Google writes it, the last with the finish."""
    chunks = []
    for i, piece in enumerate(pieces):
        candidate = {"content": {"parts": [{"text": piece}], "role": "model"}, "index": 0}
        if i == len(pieces) - 1:
            candidate["finishReason"] = "STOP"
        chunks.append({
            "candidates": [candidate],
            "usageMetadata": {"promptTokenCount": 6, "candidatesTokenCount": i + 1, "totalTokenCount": 7 + i},
            "modelVersion": MODEL,
            "responseId": "resp-e2e",
        })
    return ("[" + ",\r\n".join(json.dumps(c, indent=2) for c in chunks) + "]").encode()


def _split(body: bytes, size: int = 23) -> list[bytes]:
    return [body[i:i + size] for i in range(0, len(body), size)]


def _ask(envoy, double, body: bytes, path: str) -> raw_client.Reply:
    double.script(default=Answer(body_chunks=_split(body), headers={"content-type": JSON}, chunk_delay=0.01))
    headers = {"content-type": "application/json"}
    return raw_client.send(envoy.port, "POST", path, headers, [json.dumps(REQUEST).encode()], chunk_delay=0)


def _text(chunks: list) -> str:
    return "".join(
        part.get("text", "")
        for chunk in chunks
        for part in ((chunk.get("candidates") or [{}])[0].get("content") or {}).get("parts", [])
        if not part.get("thought")
    )


@pytest.mark.parametrize("path", PATHS, ids=["gemini-api", "vertex"])
def test_a_clean_json_array_stream_reaches_the_caller_byte_for_byte(rules_envoy, double, path):
    body = _array(CLEAN)
    reply = _ask(rules_envoy, double, body, path)
    assert reply.status == 200, (reply.status, reply.body[:300])
    assert "x-core-check" not in reply.headers
    assert reply.body == body
    assert double.requests()[-1].path == path


@pytest.mark.parametrize("path", PATHS, ids=["gemini-api", "vertex"])
def test_a_streamed_cut_leaves_the_caller_one_json_array_stopped_for_safety(rules_envoy, double, path):
    reply = _ask(rules_envoy, double, _array(FORBIDDEN), path)
    assert reply.status == 200, (reply.status, reply.body[:300])
    for never in NEVER_SENT:
        assert never not in reply.body, (never, reply.body)
    chunks = json.loads(reply.body)
    assert isinstance(chunks, list) and all(isinstance(c, dict) for c in chunks), chunks
    assert _text(chunks) == BEFORE_MATCH
    assert chunks[-1]["candidates"][0]["finishReason"] == "SAFETY"
    assert chunks[-1]["responseId"] == "resp-e2e"
    finishes = [c for c in chunks if (c.get("candidates") or [{}])[0].get("finishReason")]
    assert len(finishes) == 1, chunks
