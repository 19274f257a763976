"""The MODEL DOUBLE's answers in Google Gemini's `generateContent` shapes (the Gemini API and Vertex AI
answer alike), with text and with `functionCall` parts.

Whole (`:generateContent`): one `GenerateContentResponse`, `candidates[0].content.parts` the text part
then one part per function call, `finishReason: "STOP"` (a turn that calls a function too: Google's
`FinishReason` has no value for a call made as asked, python-genai `types.py`), `usageMetadata`, `modelVersion`,
`responseId` (https://ai.google.dev/api/generate-content, GenerateContentResponse;
https://ai.google.dev/gemini-api/docs/function-calling for the call's shape).
Streamed (`:streamGenerateContent?alt=sse`): one SSE `data:` event per HTTP chunk, each a
GenerateContentResponse holding only its new parts (a text piece, or a function call whole: Gemini
never splits a call), repeating `modelVersion` and `responseId`; the last holds `finishReason: "STOP"`
and the usage. No event names, no end marker (https://ai.google.dev/api/generate-content,
models.streamGenerateContent; google-genai's `_api_client.py` reads each `data:` event as one response).
"""

from __future__ import annotations

import json

from upstream_double import JSON_HEADERS, SSE_HEADERS, Answer, DoubleToolCall, sse_event

GEMINI_MODEL = "gemini-2.5-flash"
# What Google writes in `modelVersion` and `responseId` (both repeated on every chunk of a stream).
MODEL_VERSION = "gemini-2.5-flash"
RESPONSE_ID = "gemini-double-response"
USAGE = {"promptTokenCount": 31, "candidatesTokenCount": 47, "totalTokenCount": 78}


def _call_part(call: DoubleToolCall) -> dict:
    """A `functionCall` part: Gemini's `args` is a JSON object (a proto Struct), never text."""
    return {"functionCall": {"name": call.name, "args": json.loads(call.arguments)}}


def _response(parts: list[dict], finish: str = "", usage: bool = True) -> dict:
    candidate: dict = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    body: dict = {"candidates": [candidate], "modelVersion": MODEL_VERSION, "responseId": RESPONSE_ID}
    if usage:
        body["usageMetadata"] = USAGE
    return body


def gemini_answer(text: str, calls: tuple[DoubleToolCall, ...] = ()) -> Answer:
    """A whole answer saying `text`, then making `calls`."""
    parts = ([{"text": text}] if text else []) + [_call_part(c) for c in calls]
    return Answer(headers=dict(JSON_HEADERS), body_chunks=[json.dumps(_response(parts, "STOP"))], chunked=False)


def gemini_stream(pieces: list[str], calls: tuple[DoubleToolCall, ...] = ()) -> Answer:
    """A streamed answer saying `pieces` (one chunk each), then making `calls` (one chunk each, whole),
    the last chunk finishing with the usage; one SSE event per HTTP chunk."""
    parts = [[{"text": piece}] for piece in pieces] + [[_call_part(c)] for c in calls]
    last = len(parts) - 1
    events = [sse_event(None, _response(p, "STOP" if i == last else "", usage=i == last)) for i, p in enumerate(parts)]
    return Answer(headers=dict(SSE_HEADERS), body_chunks=events, chunk_delay=0.01)
