"""Shared pieces of the cut-mechanism measurements (test_cut_mechanism.py, cut_matrix.py).

The upstream double streams one vendor's SSE events, one every 50 ms for ~30 s; event #10 carries the
text `CUT_HERE`, on which the fidelity filter's `cut` case (tests/fidelity-filter/src/cut.rs) writes
the vendor's closing events and applies the mechanism under test. Each SDK path then reports how
long after the cut its call returned, whether it raised, and what the final message/response said;
the double reports when Envoy went away on the upstream side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import time
from typing import Callable, Optional

from upstream_double import Answer, UpstreamDouble

EVENT_DELAY = 0.05
STREAM_SECONDS = 30.0
CUT_AT = 10  # the index of the event that carries the marker
CLIENT_TIMEOUT = 35.0

RESPONSE_ID = "resp_cut"  # the fidelity filter's response.incomplete carries this id


def _sse(event: Optional[str], data: dict | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return ((f"event: {event}\n" if event else "") + f"data: {text}\n\n").encode()


def _words(n: int, cut: bool = True) -> list[str]:
    return ["CUT_HERE " if (cut and i == CUT_AT) else f"w{i} " for i in range(n)]


def anthropic_events(n: int, cut: bool = True, words: Optional[list[str]] = None) -> list[bytes]:
    """`words` (one text delta each) replaces the default `w0 w1 ... CUT_HERE ...` text."""
    words = _words(n, cut) if words is None else words
    head = [
        _sse("message_start", {"type": "message_start", "message": {
            "id": "msg_cut", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
    ]
    body = [_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                         "delta": {"type": "text_delta", "text": w}}) for w in words]
    tail = [
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": {"output_tokens": len(words)}}),
        _sse("message_stop", {"type": "message_stop"}),
    ]
    return head + body + tail


def chat_events(n: int, cut: bool = True, words: Optional[list[str]] = None) -> list[bytes]:
    words = _words(n, cut) if words is None else words

    def chunk(delta: dict, finish: Optional[str] = None) -> bytes:
        return _sse(None, {"id": "chatcmpl-cut", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    return ([chunk({"role": "assistant", "content": ""})] + [chunk({"content": w}) for w in words]
            + [chunk({}, "stop"), _sse(None, "[DONE]")])


def responses_events(n: int, cut: bool = True, words: Optional[list[str]] = None) -> list[bytes]:
    words = _words(n, cut) if words is None else words
    seq = itertools.count()

    def response(status: str) -> dict:
        return {"id": RESPONSE_ID, "object": "response", "created_at": 1, "model": "gpt-4o", "status": status,
                "output": [], "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}

    item = {"id": "msg_cut", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    head = [
        _sse("response.created", {"type": "response.created", "sequence_number": next(seq),
                                  "response": response("in_progress")}),
        _sse("response.output_item.added", {"type": "response.output_item.added", "sequence_number": next(seq),
                                            "output_index": 0, "item": item}),
        _sse("response.content_part.added", {"type": "response.content_part.added", "sequence_number": next(seq),
                                             "item_id": "msg_cut", "output_index": 0, "content_index": 0,
                                             "part": {"type": "output_text", "text": "", "annotations": []}}),
    ]
    body = [_sse("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": next(seq),
                                                "item_id": "msg_cut", "output_index": 0, "content_index": 0,
                                                "delta": w, "logprobs": []}) for w in words]
    text = "".join(words)
    done_item = {**item, "status": "completed",
                 "content": [{"type": "output_text", "text": text, "annotations": []}]}
    tail = [
        _sse("response.output_text.done", {"type": "response.output_text.done", "sequence_number": next(seq),
                                           "item_id": "msg_cut", "output_index": 0, "content_index": 0,
                                           "text": text, "logprobs": []}),
        _sse("response.content_part.done", {"type": "response.content_part.done", "sequence_number": next(seq),
                                            "item_id": "msg_cut", "output_index": 0, "content_index": 0,
                                            "part": {"type": "output_text", "text": text, "annotations": []}}),
        _sse("response.output_item.done", {"type": "response.output_item.done", "sequence_number": next(seq),
                                           "output_index": 0, "item": done_item}),
        _sse("response.completed", {"type": "response.completed", "sequence_number": next(seq),
                                    "response": {**response("completed"), "output": [done_item]}}),
    ]
    return head + body + tail


VENDOR_EVENTS = {"anthropic": anthropic_events, "chat": chat_events, "responses": responses_events}
HEAD_EVENTS = {"anthropic": 2, "chat": 1, "responses": 3}  # events before the first text delta
VENDOR_PATH = {"anthropic": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}


def vendor_answer(vendor: str, seconds: float = STREAM_SECONDS, cut: bool = True) -> Answer:
    n = int(seconds / EVENT_DELAY)
    return Answer(headers={"content-type": "text/event-stream", "cache-control": "no-cache"},
                  body_chunks=VENDOR_EVENTS[vendor](n, cut), chunk_delay=EVENT_DELAY, watch_peer=True, mark=b"CUT_HERE")


# --- the SDK paths ------------------------------------------------------------------------------------------


def _anthropic(base_url: str, headers: dict, **client):
    import anthropic

    options = {"timeout": CLIENT_TIMEOUT, "max_retries": 0, **client}
    return anthropic.Anthropic(base_url=base_url, api_key="test", default_headers=headers, **options)


def _openai(base_url: str, headers: dict, cls: str = "OpenAI", **client):
    import openai

    options = {"timeout": CLIENT_TIMEOUT, "max_retries": 0, **client}
    return getattr(openai, cls)(base_url=base_url + "/v1", api_key="test", default_headers=headers, **options)


MESSAGES = [{"role": "user", "content": "hi"}]

# Every SDK path below is `(base_url, headers, seen, got=None, **client)`: it appends what it saw to
# `seen`, returns a one-line result, and (when given) fills `got` with the decoded answer `text` and its
# normalised `end` (see `END`); `client` goes to the SDK client's constructor (timeout, http_client, ...).

# The normalised end of a stream, per vendor: (normal end, cut end).
END = {"anthropic": ("end_turn", "refusal"), "chat": ("stop", "content_filter"),
       "responses": ("completed", "incomplete/content_filter")}


def _response_end(response) -> Optional[str]:
    if response is None:
        return None
    details = response.incomplete_details
    return response.status + (f"/{details.reason}" if details else "")


def _responses_end(last) -> Optional[str]:
    return _response_end(getattr(last, "response", None))


def anthropic_iter(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    stop = None
    text = []
    for event in _anthropic(base_url, headers, **client).messages.create(
        model="claude-sonnet-4-5", max_tokens=100, messages=MESSAGES, stream=True
    ):
        seen.append(event.type)
        if event.type == "message_delta":
            stop = event.delta.stop_reason
        elif event.type == "content_block_delta" and event.delta.type == "text_delta":
            text.append(event.delta.text)
    if got is not None:
        got.update(text="".join(text), end=stop)
    return f"stop_reason={stop}"


def anthropic_final(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    with _anthropic(base_url, headers, **client).messages.stream(
        model="claude-sonnet-4-5", max_tokens=100, messages=MESSAGES
    ) as stream:
        message = stream.get_final_message()
    seen.append("final")
    if got is not None:
        got.update(text="".join(b.text for b in message.content if b.type == "text"), end=message.stop_reason)
    return f"stop_reason={message.stop_reason}"


def chat_iter(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    finish = None
    text = []
    for chunk in _openai(base_url, headers, **client).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True
    ):
        seen.append("chunk")
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
            if chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
    if got is not None:
        got.update(text="".join(text), end=finish)
    return f"finish_reason={finish}"


def chat_async_iter(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    async def run() -> str:
        client_ = _openai(base_url, headers, "AsyncOpenAI", **client)
        finish = None
        text = []
        stream = await client_.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        async for chunk in stream:
            seen.append("chunk")
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
                if chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
        await client_.close()
        if got is not None:
            got.update(text="".join(text), end=finish)
        return f"finish_reason={finish}"

    return asyncio.run(run())


def responses_iter(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    last = None
    text = []
    for event in _openai(base_url, headers, **client).responses.create(model="gpt-4o", input="hi", stream=True):
        seen.append(event.type)
        last = event
        if event.type == "response.output_text.delta":
            text.append(event.delta)
    reason = getattr(getattr(getattr(last, "response", None), "incomplete_details", None), "reason", None)
    if got is not None:
        got.update(text="".join(text), end=_responses_end(last))
    return f"last={last.type if last else None} reason={reason}"


def responses_stream(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    last = None
    text = []
    with _openai(base_url, headers, **client).responses.stream(model="gpt-4o", input="hi") as stream:
        for event in stream:
            seen.append(event.type)
            last = event
            if event.type == "response.output_text.delta":
                text.append(event.delta)
    reason = getattr(getattr(getattr(last, "response", None), "incomplete_details", None), "reason", None)
    if got is not None:
        got.update(text="".join(text), end=_responses_end(last))
    return f"last={last.type if last else None} reason={reason}"


def responses_final(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    """`responses.stream()` + `get_final_response()`: by the SDK's design this raises RuntimeError
    ("Didn't receive a `response.completed` event.") when a stream ends `response.incomplete`, as it
    does for the vendor's own incomplete answers; it is not in SDK_PATHS for that reason."""
    with _openai(base_url, headers, **client).responses.stream(model="gpt-4o", input="hi") as stream:
        response = stream.get_final_response()
    seen.append("final")
    if got is not None:
        got.update(text=response.output_text, end=_response_end(response))
    return f"status={response.status}"


SDK_PATHS: dict[str, tuple[str, Callable]] = {
    "anthropic.messages.create(stream=True)": ("anthropic", anthropic_iter),
    "anthropic.messages.stream().get_final_message()": ("anthropic", anthropic_final),
    "openai.chat.completions.create(stream=True)": ("chat", chat_iter),
    "AsyncOpenAI.chat.completions.create(stream=True)": ("chat", chat_async_iter),
    "openai.responses.create(stream=True)": ("responses", responses_iter),
    "openai.responses.stream() iterated": ("responses", responses_stream),
}

EXPECTED_END = {"anthropic": "stop_reason=refusal", "chat": "finish_reason=content_filter",
                "responses": "reason=content_filter"}


@dataclasses.dataclass
class Outcome:
    sdk: str
    how: str
    returned_after: Optional[float]  # seconds from the cut (the double writing the marker) to the call returning
    raised: Optional[str]  # exception type and message, None when the call returned normally
    result: str
    upstream_gone_after: Optional[float]  # seconds from the cut to the double seeing Envoy go away
    upstream_completed: bool
    chunks_after_cut: int

    def row(self) -> str:
        ret = f"{self.returned_after:6.2f}s" if self.returned_after is not None else "   n/a "
        gone = f"{self.upstream_gone_after:6.2f}s" if self.upstream_gone_after is not None else (
            " ended " if self.upstream_completed else " never ")
        raised = self.raised or "no"
        return f"| {self.sdk} | {self.how} | {ret} | {raised} | {self.result} | {gone} | {self.chunks_after_cut} |"


_run_ids = itertools.count(1)


def measure(envoy_url: str, double: UpstreamDouble, sdk: str, how: str, extra_headers: Optional[dict] = None,
            seconds: float = STREAM_SECONDS, cut: bool = True) -> Outcome:
    """One SDK call through Envoy with the fidelity filter's `cut` case; the double streams on its own path."""
    vendor, call = SDK_PATHS[sdk]
    prefix = f"/run{next(_run_ids)}"
    path = prefix + VENDOR_PATH[vendor]
    double.add_path(path, vendor_answer(vendor, seconds, cut))
    headers = {"x-fidelity-case": "cut", "x-fidelity-cut-vendor": vendor, "x-fidelity-cut-how": how,
               **(extra_headers or {})}
    seen: list = []
    raised = None
    result = ""
    try:
        result = call(envoy_url + prefix, headers, seen)
    except Exception as e:  # noqa: BLE001 - the measurement is what was raised
        raised = f"{type(e).__module__}.{type(e).__name__}: {str(e)[:80]}"
        result = f"events before raising: {seen[-3:]}"
    returned = time.monotonic()
    # Give the double a moment to notice Envoy going away (it checks before each 50 ms write).
    deadline = time.monotonic() + 3
    written = double.written(path)
    while written is not None and written.gone_at is None and not written.completed and time.monotonic() < deadline:
        time.sleep(0.02)
    cut = written.marked_at if written else None
    return Outcome(
        sdk=sdk,
        how=how,
        returned_after=(returned - cut) if cut else None,
        raised=raised,
        result=result,
        upstream_gone_after=(written.gone_at - cut) if (written and cut and written.gone_at) else None,
        upstream_completed=bool(written and written.completed),
        chunks_after_cut=max(0, written.chunks_written - CUT_AT - HEAD_EVENTS[vendor] - 1) if (written and cut) else 0,
    )


def start_envoy(double: UpstreamDouble, workdir, one_request_per_connection: bool = False):
    """Envoy (envoy/livecheck.yaml re-pointed at the double) running the fidelity filter.

    `one_request_per_connection` sets the HTTP connection manager's
    `common_http_protocol_options.max_requests_per_connection: 1`: Envoy then answers every HTTP/1.1
    request with `connection: close` (a filter cannot: Envoy strips a `connection` header a filter sets),
    so a caller never reuses a connection that the reset after a cut is about to close.
    """
    from envoy_process import Envoy, render_config, wasm_path

    config = render_config(wasm_path("fidelity_filter.wasm"), double.port, plugin_name="fidelity",
                           plugin_configuration="{}")
    if one_request_per_connection:
        (listener,) = config["static_resources"]["listeners"]
        (hcm,) = listener["filter_chains"][0]["filters"]
        hcm["typed_config"].setdefault("common_http_protocol_options", {})["max_requests_per_connection"] = 1
    return Envoy(config, workdir)
