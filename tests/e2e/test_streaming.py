"""Streamed answers end to end (issue 4): the official SDKs streaming -> real Envoy running the real
livecheck.wasm -> the scripted upstream double streaming the vendor's SSE events.

Three livecheck configurations:
  - RULES_ONLY (as tests/streaming.rs): one blocking pattern check without recovery, so the answer
    streams, holding back only text that could begin an IBAN, and a match is cut where it starts;
    unframed (the default; how each SDK ends after such a cut: test_stream_wire.py);
  - RULES_ONLY with the opt-in length frame (`stream_frame_bytes`, and Envoy's
    `max_requests_per_connection: 1`): every SDK call ends cleanly after a cut;
  - the seed (examples/seed.json, conftest's `livecheck_envoy`): its `no-iban` asks for recovery, so
    nothing of the round shows until it is decided, and a failed round is answered with the blocked reply.

What the caller sees is read through the SDKs' own stream iterators / final-message helpers (the
cut_support.py SDK paths); the raw bytes the SDK read are recorded by a tee transport under the SDK's
httpx client. Every client call has a timeout and every upstream answer a watchdog that stops it.
Run with `-s` to see the measured cut timings.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import json
import threading
import time
from typing import Callable, Optional

import anthropic
import httpx2 as httpx
import openai
import pytest

from cut_support import (
    BEFORE_MATCH,
    CLEAN,
    END,
    FORBIDDEN,
    NEVER_SENT,
    RULES_ONLY,
    Tee,
    MESSAGES,
    VENDOR_EVENTS,
    VENDOR_PATH,
    anthropic_final,
    anthropic_iter,
    chat_iter,
    responses_final,
    responses_iter,
    _anthropic,
    _openai,
    _sse,
)
from envoy_process import DELIVERY, SEED_CONFIG, Envoy, render_config, wasm_path
from upstream_double import Answer, UpstreamDouble, Written

SEED = json.loads(SEED_CONFIG.read_text())
BLOCKED_REPLY = SEED["agents"]["orders"]["versions"]["1"]["blocked_reply"]
FRAME = 4 * 1024 * 1024  # the opt-in `stream_frame_bytes`

CLIENT_TIMEOUT = 10.0  # every SDK call: connect / read timeout
WATCHDOG = 8.0  # every scripted upstream answer is stopped after this long, whatever happens
EVENT_DELAY = 0.02

# The SDK paths (cut_support.py) and the vendor each speaks. `responses.stream().get_final_response()`
# is kept apart: it raises on a cut stream by the SDK's design (see the test below).
SDK_PATHS: dict[str, tuple[str, Callable]] = {
    "anthropic.messages.create(stream=True)": ("anthropic", anthropic_iter),
    "anthropic.messages.stream().get_final_message()": ("anthropic", anthropic_final),
    "openai.chat.completions.create(stream=True)": ("chat", chat_iter),
    "openai.responses.create(stream=True)": ("responses", responses_iter),
}
RESPONSES_FINAL = "openai.responses.stream().get_final_response()"
ALL_PATHS = {**SDK_PATHS, RESPONSES_FINAL: ("responses", responses_final)}
sdk_paths = pytest.mark.parametrize("sdk", list(SDK_PATHS))

SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache"}


# --- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def framed_envoy(double, tmp_path_factory):
    """As rules_envoy, with the opt-in length frame (and one request per connection, which it needs)."""
    config = render_config(wasm_path("livecheck.wasm"), double.port,
                           plugin_configuration=json.dumps({"stream_frame_bytes": FRAME, **RULES_ONLY}),
                           one_request_per_connection=True)
    envoy = Envoy(config, tmp_path_factory.mktemp("envoy-streaming-framed"))
    yield envoy
    envoy.stop()


@pytest.fixture(scope="module")
def timings():
    """The measured cut timings, printed as a table at the end of the module (run with -s)."""
    rows: list[str] = []
    yield rows
    if rows:
        print("\n| SDK path | cut→SDK call returned | cut→upstream gone |\n|---|---|---|")
        print("\n".join(rows))


# --- one streamed call -------------------------------------------------------------------------------


@dataclasses.dataclass
class Call:
    got: dict  # `text` and normalised `end` as the SDK reported them
    raw: bytes  # the response body bytes the SDK read
    headers: httpx.Headers
    sent_at: float
    headers_at: float
    returned_at: float
    written: Written  # how the double's answer went out
    raised: Optional[BaseException] = None  # with `allow_raise`: what the SDK call raised


_ids = itertools.count(1)


def _upstream(double: UpstreamDouble, vendor: str, words: list[str], stop: threading.Event,
              **answer) -> tuple[str, threading.Timer]:
    """Scripts the double to stream `words` (one text delta each) on a fresh path; returns its prefix
    and a watchdog that sets `stop` after WATCHDOG seconds, so no answer outlives its test by much."""
    prefix = f"/streaming{next(_ids)}"
    answer = {"chunk_delay": EVENT_DELAY, "watch_peer": True, **answer}
    double.add_path(prefix + VENDOR_PATH[vendor],
                    Answer(headers=SSE_HEADERS, body_chunks=VENDOR_EVENTS[vendor](0, words=words), stop=stop, **answer))
    watchdog = threading.Timer(WATCHDOG, stop.set)
    watchdog.daemon = True
    watchdog.start()
    return prefix, watchdog


def call(envoy: Envoy, double: UpstreamDouble, sdk: str, words: list[str], stop: Optional[threading.Event] = None,
         keep_streaming: bool = False, drain: bool = True, allow_raise: bool = False, **answer) -> Call:
    """One streamed SDK call through `envoy`; the double streams `words` in `sdk`'s vendor format.

    The double's answer is stopped when the call returns, unless `keep_streaming` (the caller then
    stops it with `stop`; the watchdog does in any case). `drain`: see Tee. `allow_raise`: what the
    SDK call raises is recorded in `Call.raised` instead."""
    vendor, path_fn = ALL_PATHS[sdk]
    stop = stop or threading.Event()
    prefix, watchdog = _upstream(double, vendor, words, stop, **answer)
    tee = Tee(drain)
    got: dict = {}
    sent_at = time.monotonic()
    raised = None
    try:
        path_fn(envoy.url + prefix, {}, [], got, timeout=CLIENT_TIMEOUT, http_client=httpx.Client(transport=tee))
    except Exception as e:  # noqa: BLE001 - recorded for the test to judge
        if not allow_raise:
            raise
        raised = e
    finally:
        returned_at = time.monotonic()
        if not keep_streaming:
            stop.set()
            watchdog.cancel()
    written = double.written(prefix + VENDOR_PATH[vendor])
    assert written is not None, "the request never reached the double"
    return Call(got, bytes(tee.body), tee.headers, sent_at, tee.headers_at, returned_at, written, raised)


def _assert_framed(c: Call, drained: bool = True) -> None:
    assert c.headers["content-length"] == str(FRAME), dict(c.headers)
    assert "transfer-encoding" not in c.headers, dict(c.headers)
    if drained:
        assert len(c.raw) == FRAME, "the body is exactly the announced length"
    else:
        assert len(c.raw) <= FRAME


def _assert_unframed(c: Call, wire_budget: bool = True) -> None:
    """No frame, no padding; with `wire_budget`, at most the upstream's bytes + 2% + 1 KiB reached the
    caller (not for a blocked reply written in place of an answer cut short: it can be the longer)."""
    assert "content-length" not in c.headers, dict(c.headers)
    assert b":...." not in c.raw, "no frame padding"
    if wire_budget:
        assert len(c.raw) <= c.written.body_bytes * 1.02 + 1024, (len(c.raw), c.written.body_bytes)


# --- (1) a clean streamed answer ---------------------------------------------------------------------


@pytest.mark.parametrize("sdk", list(ALL_PATHS))
def test_a_clean_streamed_answer_arrives_complete_and_ends_normally(rules_envoy, double, sdk):
    vendor = ALL_PATHS[sdk][0]
    c = call(rules_envoy, double, sdk, CLEAN)

    assert c.got == {"text": "".join(CLEAN), "end": END[vendor][0]}
    _assert_unframed(c)
    # The double marks its answer completed just after writing the last bytes, which the caller may
    # already have read: wait a moment for the mark.
    deadline = time.monotonic() + 2.0
    while not c.written.completed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert c.written.completed, "the upstream ran to its own end"


@pytest.mark.parametrize("sdk", list(SDK_PATHS))
def test_framed_opt_in_a_clean_answer_is_padded_to_its_frame(framed_envoy, double, sdk):
    vendor = ALL_PATHS[sdk][0]
    c = call(framed_envoy, double, sdk, CLEAN)

    assert c.got == {"text": "".join(CLEAN), "end": END[vendor][0]}
    _assert_framed(c)


# --- (2) a match split across three events -------------------------------------------------------------


@sdk_paths
def test_framed_a_match_across_three_events_is_cut_where_it_starts(framed_envoy, double, sdk):
    vendor = SDK_PATHS[sdk][0]
    c = call(framed_envoy, double, sdk, FORBIDDEN)  # raises nothing: the SDK's iterator ended normally

    assert c.got == {"text": BEFORE_MATCH, "end": END[vendor][1]}
    for piece in NEVER_SENT:
        assert piece not in c.raw, f"{piece!r} reached the caller"
    _assert_framed(c)


def test_responses_get_final_response_raises_on_a_cut_stream_by_the_sdks_design(framed_envoy, double):
    """`responses.stream().get_final_response()` raises RuntimeError("Didn't receive a
    `response.completed` event.") for any stream that ends `response.incomplete`, the vendor's own
    incomplete answers included (openai/lib/streaming/responses/_responses.py): documented SDK
    behaviour, not a livecheck failure. The stream itself still ended normally and promptly."""
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="response.completed"):
        call(framed_envoy, double, RESPONSES_FINAL, FORBIDDEN)
    assert time.monotonic() - started < 3.0


# --- (3) after a cut the SDK call returns at once and the upstream stops ----------------------------------


@sdk_paths
def test_framed_after_a_cut_the_call_returns_at_once_and_the_upstream_stops(framed_envoy, double, sdk, timings):
    vendor = SDK_PATHS[sdk][0]
    # ~30 s of events after the match, one every 50 ms; the cut is timed from the write of the event
    # that completes the IBAN.
    words = FORBIDDEN[:3] + [f" w{i}" for i in range(600)]
    stop = threading.Event()
    try:
        c = call(framed_envoy, double, sdk, words, stop=stop, chunk_delay=0.05, mark=b"17164300", keep_streaming=True,
                 drain=False)
        w = c.written
        deadline = time.monotonic() + 3.0
        while w.gone_at is None and not w.completed and not w.stopped and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()  # measured: the 30 s answer must not run out its time

    assert w.marked_at is not None, "the double never wrote the end of the match"
    returned, gone = c.returned_at - w.marked_at, (w.gone_at - w.marked_at) if w.gone_at else None
    timings.append(f"| {sdk} | {returned:.3f} s | " + (f"{gone:.3f} s |" if gone is not None else "never |"))
    print(f"\n{sdk}: cut→return {returned:.3f} s, cut→upstream gone "
          + (f"{gone:.3f} s" if gone is not None else "never") + f", events after the cut {w.chunks_written - 3}")
    assert c.got == {"text": BEFORE_MATCH, "end": END[vendor][1]}
    for piece in NEVER_SENT:
        assert piece not in c.raw, f"{piece!r} reached the caller"
    _assert_framed(c, drained=False)  # timed as the SDK reads: the OpenAI SDK stops at [DONE]
    assert returned < 2.0, f"the SDK call returned {returned:.2f} s after the cut"
    assert gone is not None and gone < 2.0, f"the upstream kept generating (gone after {gone})"
    assert not w.completed


# --- (4) the seed: recovery asked, so the round is held until decided -------------------------------------


@pytest.mark.parametrize("sdk", list(ALL_PATHS))
def test_held_round_a_clean_answer_arrives_whole(livecheck_envoy, double, sdk):
    vendor = ALL_PATHS[sdk][0]
    c = call(livecheck_envoy, double, sdk, CLEAN)

    assert c.got == {"text": "".join(CLEAN), "end": END[vendor][0]}
    _assert_unframed(c)


@sdk_paths
def test_held_round_a_forbidden_answer_shows_none_of_it_and_the_blocked_reply(livecheck_envoy, double, sdk):
    """The round is decided once its text holds the IBAN, before the answer ended: the model is
    asked again (the sidecar is unreachable here, so the round is withheld with the blocked reply)
    and the doomed answer is not read on: the stream is reset after the blocked reply. The Chat SDKs
    end at its `[DONE]`; the Anthropic and Responses SDKs raise a connection error after it, as after
    any cut (README: Streamed answers)."""
    vendor = SDK_PATHS[sdk][0]
    c = call(livecheck_envoy, double, sdk, FORBIDDEN, allow_raise=True, drain=False)

    if vendor == "chat" or DELIVERY == "module":
        # (The module ends the response after the blocked reply: every SDK call returns.)
        assert c.raised is None, repr(c.raised)
        assert c.got == {"text": BLOCKED_REPLY, "end": END[vendor][1]}
    else:
        assert isinstance(c.raised, (httpx.TransportError, openai.APIConnectionError, anthropic.APIConnectionError)), \
            repr(c.raised)
        assert json.dumps(BLOCKED_REPLY).encode() in c.raw
    for piece in [b"Pay to", *NEVER_SENT]:
        assert piece not in c.raw, f"{piece!r} reached the caller"
    _assert_unframed(c, wire_budget=False)


# --- (5) time to first byte --------------------------------------------------------------------------------


def test_response_headers_reach_the_caller_before_the_first_event(rules_envoy, double):
    """The double sends its headers at once and its first event 1 s later: the caller has the
    headers before that first event is written (the filter does not wait for the body)."""
    sdks = ["anthropic.messages.create(stream=True)", "openai.chat.completions.create(stream=True)",
            "openai.responses.create(stream=True)"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(sdks)) as pool:
        calls = dict(zip(sdks, pool.map(lambda s: call(rules_envoy, double, s, CLEAN, first_delay=1.0), sdks)))
    for sdk, c in calls.items():
        vendor = ALL_PATHS[sdk][0]
        headers_after = c.headers_at - c.written.started
        print(f"\n{sdk}: headers {headers_after * 1000:.1f} ms after the double answered, "
              f"{(c.written.first_write - c.headers_at) * 1000:.0f} ms before its first event")
        assert c.headers_at < c.written.first_write, sdk
        assert headers_after < 0.5, f"{sdk}: headers took {headers_after:.2f} s"
        assert c.got == {"text": "".join(CLEAN), "end": END[vendor][0]}


# --- (n) a tool call is never shown in part ----------------------------------------------------------

# The model writes a sentence, then calls a tool whose arguments carry the IBAN, split across deltas.
TOOL_TEXT = "Sending it now."
TOOL_ARGS = ["{\"to\": \"Bob\", ", "\"iban\": \"NL91AB", "NA0417164300\"}"]


def _tool_call_events(vendor: str) -> list[bytes]:
    if vendor == "anthropic":
        return [
            _sse("message_start", {"type": "message_start", "message": {
                "id": "msg_tool", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "text", "text": ""}}),
            _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                         "delta": {"type": "text_delta", "text": TOOL_TEXT}}),
            _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            _sse("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
                "type": "tool_use", "id": "toolu_1", "name": "send_money", "input": {}}}),
            *[_sse("content_block_delta", {"type": "content_block_delta", "index": 1,
                                           "delta": {"type": "input_json_delta", "partial_json": a}})
              for a in TOOL_ARGS],
            _sse("content_block_stop", {"type": "content_block_stop", "index": 1}),
            _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                   "usage": {"output_tokens": 20}}),
            _sse("message_stop", {"type": "message_stop"}),
        ]
    if vendor == "chat":
        def chunk(delta: dict, finish=None) -> bytes:
            return _sse(None, {"id": "chatcmpl-tool", "object": "chat.completion.chunk", "created": 1,
                               "model": "gpt-4.1-mini",
                               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        return [
            chunk({"role": "assistant", "content": TOOL_TEXT}),
            chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                   "function": {"name": "send_money", "arguments": ""}}]}),
            *[chunk({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}) for a in TOOL_ARGS],
            chunk({}, "tool_calls"),
            _sse(None, "[DONE]"),
        ]
    response = {"id": "resp_tool", "object": "response", "created_at": 1, "status": "in_progress",
                "model": "gpt-4.1-mini", "output": []}
    message = {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": TOOL_TEXT, "annotations": []}]}
    call = {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1",
            "name": "send_money", "arguments": "".join(TOOL_ARGS)}
    events = [
        ("response.created", {"response": response}),
        ("response.output_item.added", {"output_index": 0, "item": {**message, "status": "in_progress", "content": []}}),
        ("response.content_part.added", {"output_index": 0, "item_id": "msg_1", "content_index": 0,
                                         "part": {"type": "output_text", "text": "", "annotations": []}}),
        ("response.output_text.delta", {"output_index": 0, "item_id": "msg_1", "content_index": 0,
                                         "delta": TOOL_TEXT}),
        ("response.output_text.done", {"output_index": 0, "item_id": "msg_1", "content_index": 0, "text": TOOL_TEXT}),
        ("response.content_part.done", {"output_index": 0, "item_id": "msg_1", "content_index": 0,
                                        "part": message["content"][0]}),
        ("response.output_item.done", {"output_index": 0, "item": message}),
        ("response.output_item.added", {"output_index": 1, "item": {**call, "status": "in_progress", "arguments": ""}}),
        *[("response.function_call_arguments.delta", {"output_index": 1, "item_id": "fc_1", "delta": a})
          for a in TOOL_ARGS],
        ("response.function_call_arguments.done", {"output_index": 1, "item_id": "fc_1", "arguments": call["arguments"]}),
        ("response.output_item.done", {"output_index": 1, "item": call}),
        ("response.completed", {"response": {**response, "status": "completed", "output": [message, call],
                                             "usage": {"input_tokens": 1, "output_tokens": 20, "total_tokens": 21}}}),
    ]
    return [_sse(name, {"type": name, "sequence_number": i, **data}) for i, (name, data) in enumerate(events)]


def _tool_calls_seen(vendor: str, base_url: str) -> tuple[str, list, str]:
    """(text, the tool calls the SDK's own accumulator built, the normalised end) for one streamed call."""
    if vendor == "anthropic":
        with _anthropic(base_url, {}).messages.stream(model="claude-sonnet-4-5", max_tokens=100,
                                                        messages=MESSAGES) as stream:
            message = stream.get_final_message()
        calls = [b.input for b in message.content if b.type == "tool_use"]
        return "".join(b.text for b in message.content if b.type == "text"), calls, message.stop_reason
    if vendor == "chat":
        # As an agent loop gathers them: each call's arguments from its deltas, by index.
        text, args, finish = [], {}, None
        for chunk in _openai(base_url, {}).chat.completions.create(model="gpt-4.1-mini", messages=MESSAGES,
                                                                   stream=True):
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                for call in choice.delta.tool_calls or []:
                    args[call.index] = args.get(call.index, "") + (call.function.arguments or "")
                finish = choice.finish_reason or finish
        return "".join(text), list(args.values()), finish
    events = list(_openai(base_url, {}).responses.create(model="gpt-4.1-mini", input="hi", stream=True))
    final = events[-1].response
    calls = [item.arguments for item in final.output if item.type == "function_call"]
    calls += [e.item.arguments for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    details = final.incomplete_details
    return text, calls, final.status + (f"/{details.reason}" if details else "")


@pytest.mark.parametrize("vendor", ["anthropic", "chat", "responses"])
def test_a_tool_call_whose_arguments_match_is_never_shown_in_part(framed_envoy, double, vendor):
    """Framed, so that every SDK ends normally and its own accumulator can be read (unframed, the
    Anthropic and Responses SDKs raise after the closing events: test_stream_wire.py)."""
    prefix = f"/toolcall{next(_ids)}"
    double.add_path(prefix + VENDOR_PATH[vendor],
                    Answer(headers=SSE_HEADERS, body_chunks=_tool_call_events(vendor), chunk_delay=EVENT_DELAY))

    text, calls, end = _tool_calls_seen(vendor, framed_envoy.url + prefix)

    assert text == TOOL_TEXT  # the text before the call streamed
    assert calls == [], f"the SDK built a tool call from what it received: {calls}"
    assert end == END[vendor][1]


@pytest.mark.parametrize("vendor", ["anthropic", "chat", "responses"])
def test_a_clean_tool_call_arrives_whole(rules_envoy, double, vendor):
    prefix = f"/toolcall{next(_ids)}"
    events = [e.replace(b"NL91AB", b"nowhe").replace(b"NA0417164300", b"re") for e in _tool_call_events(vendor)]
    double.add_path(prefix + VENDOR_PATH[vendor],
                    Answer(headers=SSE_HEADERS, body_chunks=events, chunk_delay=EVENT_DELAY))

    text, calls, _end = _tool_calls_seen(vendor, rules_envoy.url + prefix)

    assert text == TOOL_TEXT
    whole = {"to": "Bob", "iban": "nowhere"}
    first = calls[0]  # Responses: the final response's call first, then the one announced when added
    assert (first if isinstance(first, dict) else json.loads(first)) == whole
