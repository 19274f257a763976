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

import http_sfv
import httpx2 as httpx

from envoy_process import DELIVERY
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


def _anthropic_async(base_url: str, headers: dict, **client):
    import anthropic

    options = {"timeout": CLIENT_TIMEOUT, "max_retries": 0, **client}
    return anthropic.AsyncAnthropic(base_url=base_url, api_key="test", default_headers=headers, **options)


def anthropic_async_iter(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    async def run() -> str:
        stop, text = None, []
        stream = await _anthropic_async(base_url, headers, **client).messages.create(
            model="claude-sonnet-4-5", max_tokens=100, messages=MESSAGES, stream=True)
        async for event in stream:
            seen.append(event.type)
            if event.type == "message_delta":
                stop = event.delta.stop_reason
            elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                text.append(event.delta.text)
        if got is not None:
            got.update(text="".join(text), end=stop)
        return f"stop_reason={stop}"

    return asyncio.run(run())


def anthropic_async_final(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    async def run() -> str:
        async with _anthropic_async(base_url, headers, **client).messages.stream(
            model="claude-sonnet-4-5", max_tokens=100, messages=MESSAGES
        ) as stream:
            message = await stream.get_final_message()
        seen.append("final")
        if got is not None:
            got.update(text="".join(b.text for b in message.content if b.type == "text"), end=message.stop_reason)
        return f"stop_reason={message.stop_reason}"

    return asyncio.run(run())


def _chat_helper_event(event, seen: list, text: list, finish: list) -> None:
    """One event of `chat.completions.stream()`: its `chunk` events carry what the caller decodes."""
    seen.append(event.type)
    if event.type == "chunk" and event.chunk.choices:
        choice = event.chunk.choices[0]
        text.append(choice.delta.content or "")
        if choice.finish_reason:
            finish.append(choice.finish_reason)


def chat_stream(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    """`chat.completions.stream()` iterated (its `get_final_completion()` raises
    ContentFilterFinishReasonError for any `content_filter` end, the vendor's own included)."""
    text, finish = [], []
    with _openai(base_url, headers, **client).chat.completions.stream(model="gpt-4o", messages=MESSAGES) as stream:
        for event in stream:
            _chat_helper_event(event, seen, text, finish)
    if got is not None:
        got.update(text="".join(text), end=finish[-1] if finish else None)
    return f"finish_reason={finish[-1] if finish else None}"


def chat_async_stream(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    async def run() -> str:
        text, finish = [], []
        async with _openai(base_url, headers, "AsyncOpenAI", **client).chat.completions.stream(
            model="gpt-4o", messages=MESSAGES
        ) as stream:
            async for event in stream:
                _chat_helper_event(event, seen, text, finish)
        if got is not None:
            got.update(text="".join(text), end=finish[-1] if finish else None)
        return f"finish_reason={finish[-1] if finish else None}"

    return asyncio.run(run())


def responses_async_iter(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    async def run() -> str:
        last, text = None, []
        stream = await _openai(base_url, headers, "AsyncOpenAI", **client).responses.create(
            model="gpt-4o", input="hi", stream=True)
        async for event in stream:
            seen.append(event.type)
            last = event
            if event.type == "response.output_text.delta":
                text.append(event.delta)
        if got is not None:
            got.update(text="".join(text), end=_responses_end(last))
        return f"last={last.type if last else None}"

    return asyncio.run(run())


def responses_async_stream(base_url: str, headers: dict, seen: list, got: Optional[dict] = None, **client) -> str:
    async def run() -> str:
        last, text = None, []
        async with _openai(base_url, headers, "AsyncOpenAI", **client).responses.stream(
            model="gpt-4o", input="hi"
        ) as stream:
            async for event in stream:
                seen.append(event.type)
                last = event
                if event.type == "response.output_text.delta":
                    text.append(event.delta)
        if got is not None:
            got.update(text="".join(text), end=_responses_end(last))
        return f"last={last.type if last else None}"

    return asyncio.run(run())


# Every official SDK streaming call issue 13 names, sync and async: name -> (vendor, path, async?).
EVERY_SDK_PATH: dict[str, tuple[str, Callable, bool]] = {
    "anthropic.messages.create(stream=True)": ("anthropic", anthropic_iter, False),
    "anthropic.messages.stream().get_final_message()": ("anthropic", anthropic_final, False),
    "AsyncAnthropic.messages.create(stream=True)": ("anthropic", anthropic_async_iter, True),
    "AsyncAnthropic.messages.stream().get_final_message()": ("anthropic", anthropic_async_final, True),
    "openai.chat.completions.create(stream=True)": ("chat", chat_iter, False),
    "openai.chat.completions.stream() iterated": ("chat", chat_stream, False),
    "AsyncOpenAI.chat.completions.create(stream=True)": ("chat", chat_async_iter, True),
    "AsyncOpenAI.chat.completions.stream() iterated": ("chat", chat_async_stream, True),
    "openai.responses.create(stream=True)": ("responses", responses_iter, False),
    "openai.responses.stream() iterated": ("responses", responses_stream, False),
    "AsyncOpenAI.responses.create(stream=True)": ("responses", responses_async_iter, True),
    "AsyncOpenAI.responses.stream() iterated": ("responses", responses_async_stream, True),
}


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
    """Envoy (envoy/livecheck.yaml re-pointed at the double) running the fidelity filter
    (`one_request_per_connection`: see envoy_process.render_config)."""
    from envoy_process import Envoy, render_config, wasm_path

    config = render_config(wasm_path("fidelity_filter.wasm"), double.port, plugin_name="fidelity",
                           plugin_configuration="{}", one_request_per_connection=one_request_per_connection)
    return Envoy(config, workdir)


# --- the answers the streaming tests script -----------------------------------------------------------

# One blocking pattern check without recovery (as tests/streaming.rs): the answer streams, holding back
# only text that could begin an IBAN, and a match is cut where it starts.
RULES_ONLY = {
    "default_agent": "a",
    "agents": {"a": {"published": "1", "versions": {"1": {
        "blocked_reply": "Not allowed.",
        "live_checks": [{"name": "no-iban", "stage": "output", "kind": "matches_pattern",
                         "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18}],
    }}}},
}
IBAN = "NL91ABNA0417164300"
CLEAN = ["Your order ", "ships ", "tomorrow", ", promised."]
# The IBAN split across three events; the text before the match is what the caller must get.
FORBIDDEN = ["Pay to NL9", "1ABNA04", "17164300", " today."]
BEFORE_MATCH = "Pay to "
# Nothing of the match, nor anything after it, may reach the caller.
NEVER_SENT = [b"NL9", b"1ABNA04", b"17164300", b"ABNA", b"0417", IBAN.encode(), b"today"]


# After a cut (docs/cut-matrix.md) through the wasm filter the Chat SDK calls end at `data: [DONE]`; the
# Anthropic and Responses calls read on to the end of the body and raise a connection error on the reset
# after the closing events. The dynamic module ends the response itself after the closing events, so
# every SDK call ends normally (docs/design/028-native-module.md).
ENDS_AT_CLOSING_EVENTS = {"chat"} if DELIVERY == "wasm" else {"anthropic", "chat", "responses"}


def is_connection_error(e: BaseException) -> bool:
    import anthropic
    import openai

    return isinstance(e, (httpx.TransportError, anthropic.APIConnectionError, openai.APIConnectionError))


def assert_the_sdk_call_ended_as_after_a_cut(vendor: str, raised: Optional[BaseException]) -> None:
    """What an SDK call does once a stream was cut: through the wasm filter (closing events, then a reset)
    the Chat calls return, the Anthropic and Responses calls raise a connection error; through the module
    (closing events, then the end of the response) every call returns."""
    if vendor in ENDS_AT_CLOSING_EVENTS:
        assert raised is None, repr(raised)
    else:
        assert raised is not None and is_connection_error(raised), repr(raised)


# --- what the SDK read ------------------------------------------------------------------------------------


class Tee(httpx.BaseTransport):
    """An SDK's transport (HTTP/1.1, or HTTP/2 with prior knowledge), recording when each response's
    headers arrived and every body byte read.

    With `drain`, the rest of a body the SDK did not read is read (and recorded) when the SDK closes
    the response: the OpenAI SDK stops reading at `data: [DONE]`, and the tests check every byte."""

    def __init__(self, drain: bool = True, http2: bool = False) -> None:
        self.inner = httpx.HTTPTransport(http1=not http2, http2=http2)
        self.drain = drain
        self.headers_at: Optional[float] = None
        self.headers: Optional[httpx.Headers] = None
        self.http_version: Optional[str] = None
        self.body = bytearray()

    def handle_request(self, request):
        response = self.inner.handle_request(request)
        self.headers_at = time.monotonic()
        self.headers = response.headers
        self.http_version = response.extensions.get("http_version", b"").decode()
        inner, body, drain = response.stream, self.body, self.drain
        chunks = iter(inner)

        class Recorded(httpx.SyncByteStream):
            def __iter__(self):
                for chunk in chunks:
                    body.extend(chunk)
                    yield chunk

            def close(self) -> None:
                if drain:
                    for chunk in chunks:
                        body.extend(chunk)
                inner.close()

        return httpx.Response(response.status_code, headers=response.headers, stream=Recorded(),
                              extensions=response.extensions)

    def close(self) -> None:
        self.inner.close()


class AsyncTee(httpx.AsyncBaseTransport):
    """Tee for the async clients: every body byte the SDK read (no drain)."""

    def __init__(self, http2: bool = False) -> None:
        self.http2 = http2
        self.inner: Optional[httpx.AsyncHTTPTransport] = None
        self.headers_at: Optional[float] = None
        self.headers: Optional[httpx.Headers] = None
        self.http_version: Optional[str] = None
        self.body = bytearray()

    async def handle_async_request(self, request):
        if self.inner is None:  # made in the event loop that uses it
            self.inner = httpx.AsyncHTTPTransport(http1=not self.http2, http2=self.http2)
        response = await self.inner.handle_async_request(request)
        self.headers_at = time.monotonic()
        self.headers = response.headers
        self.http_version = response.extensions.get("http_version", b"").decode()
        inner, body = response.stream, self.body

        class Recorded(httpx.AsyncByteStream):
            async def __aiter__(self):
                async for chunk in inner:
                    body.extend(chunk)
                    yield chunk

            async def aclose(self) -> None:
                await inner.aclose()

        return httpx.Response(response.status_code, headers=response.headers, stream=Recorded(),
                              extensions=response.extensions)

    async def aclose(self) -> None:
        if self.inner is not None:
            await self.inner.aclose()


def x_core_check(headers) -> Optional[dict]:
    """X-Core-Check parsed as an RFC 8941 dictionary (http-sfv): {key: value as str}, None if absent."""
    values = headers.get_list("x-core-check") if hasattr(headers, "get_list") else (
        [headers["x-core-check"]] if "x-core-check" in headers else [])
    if not values:
        return None
    assert len(values) == 1, values
    parsed = http_sfv.Dictionary()
    parsed.parse(values[0].encode("ascii"))
    return {key: str(member.value) for key, member in parsed.items()}
