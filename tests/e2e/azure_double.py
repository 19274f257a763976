"""The model double's answers in Azure OpenAI's Chat Completions shapes, content-filter fields included.

Azure adds to OpenAI's shapes (https://learn.microsoft.com/azure/foundry/openai/concepts/content-filter,
.../content-streaming): `prompt_filter_results` (one verdict per prompt) beside `choices`, and
`content_filter_results` in each choice. Streamed, a first chunk of `choices: []` with an empty id and
model and `created: 0` holds `prompt_filter_results`; the text chunks carry `content_filter_results`;
chunks of the same empty identity annotate text already sent (`content_filter_results`,
`content_filter_offsets`, no delta). Azure's own filter stopping the answer says
`finish_reason: "content_filter"`. Responses answers are OpenAI's (`model_double_tool_answer`): Azure
documents content-filter fields for them only in its errors.
"""

from __future__ import annotations

import json

from upstream_double import JSON_HEADERS, SSE_HEADERS, Answer, DoubleToolCall, sse_event

AZURE_ID = "chatcmpl-azure-double"
AZURE_MODEL = "gpt-4o-2024-11-20"
USAGE = {"prompt_tokens": 31, "completion_tokens": 47, "total_tokens": 78}
SAFE = {"filtered": False, "severity": "safe"}
VERDICTS = {"hate": SAFE, "self_harm": SAFE, "sexual": SAFE, "violence": SAFE}
PROMPT_FILTER_RESULTS = [{"prompt_index": 0, "content_filter_results": VERDICTS}]


def azure_chat_answer(text: str, calls: tuple[DoubleToolCall, ...] = (), finish: str = "") -> Answer:
    """A whole answer saying `text`, then making `calls`, with the prompt's and the answer's verdicts."""
    message: dict = {"annotations": [], "content": text or None, "refusal": None, "role": "assistant"}
    if calls:
        message["tool_calls"] = [{"id": f"call_{i + 1}", "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for i, c in enumerate(calls)]
    body = {"choices": [{"content_filter_results": VERDICTS,
                         "finish_reason": finish or ("tool_calls" if calls else "stop"), "index": 0,
                         "logprobs": None, "message": message}],
            "created": 1790000000, "id": AZURE_ID, "model": AZURE_MODEL, "object": "chat.completion",
            "prompt_filter_results": PROMPT_FILTER_RESULTS, "system_fingerprint": "fp_azure", "usage": USAGE}
    return Answer(headers=dict(JSON_HEADERS), body_chunks=[json.dumps(body)], chunked=False)


def azure_chat_stream(pieces: list[str], calls: tuple[DoubleToolCall, ...] = (), finish: str = "") -> Answer:
    """A streamed answer saying `pieces` (one chunk each), then making `calls`, one SSE event per HTTP
    chunk, with Azure's annotations: the prompt's verdicts first, one annotation after the second
    piece, and one of the whole text after the finish."""
    def chunk(choice: dict, usage=None) -> bytes:
        body = {"choices": [{"content_filter_results": {}, "finish_reason": None, "index": 0, "logprobs": None,
                             **choice}],
                "created": 1790000000, "id": AZURE_ID, "model": AZURE_MODEL, "object": "chat.completion.chunk",
                "system_fingerprint": "fp_azure"}
        if usage is not None:
            body["usage"] = usage
        return sse_event(None, body)

    def annotation(choice: dict) -> bytes:
        return sse_event(None, {"choices": [{"content_filter_results": VERDICTS, "finish_reason": None, "index": 0,
                                             **choice}], "created": 0, "id": "", "model": "", "object": ""})

    events = [sse_event(None, {"choices": [], "created": 0, "id": "", "model": "", "object": "",
                               "prompt_filter_results": PROMPT_FILTER_RESULTS}),
              chunk({"delta": {"content": "", "refusal": None, "role": "assistant"}})]
    for i, piece in enumerate(pieces):
        events.append(chunk({"content_filter_results": VERDICTS, "delta": {"content": piece}}))
        if i == 1:
            events.append(annotation({"delta": {}}))
    for i, call in enumerate(calls):
        events.append(chunk({"delta": {"tool_calls": [{"index": i, "id": f"call_{i + 1}", "type": "function",
                                                       "function": {"name": call.name, "arguments": ""}}]}}))
        events += [chunk({"delta": {"tool_calls": [{"index": i, "function": {"arguments": piece}}]}})
                   for piece in call.deltas()]
    sent = len("".join(pieces))
    events += [chunk({"delta": {}, "finish_reason": finish or ("tool_calls" if calls else "stop")}),
               annotation({"content_filter_offsets": {"check_offset": sent, "start_offset": 0, "end_offset": sent}}),
               sse_event(None, "[DONE]")]
    return Answer(headers=dict(SSE_HEADERS), body_chunks=events, chunk_delay=0.01)
