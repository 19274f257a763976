"""A streamed answer at wire cost (issue 13, item 2): no padding, and after a cut every official SDK call
returns within 1 s and the upstream stops, for HTTP/1.1 and HTTP/2 (prior knowledge) callers.

The default configuration (RULES_ONLY, unframed, envoy/livecheck.yaml as shipped) through real Envoy and
the real livecheck.wasm; the upstream double streams the vendor's events. A cut writes the vendor's
closing events and then resets the stream (at the next upstream chunk, or from the filter's timer when
the model goes quiet), so the model stops generating. What each SDK then does is the measured matrix in
docs/cut-matrix.md: the Chat Completions calls end at `data: [DONE]` with `finish_reason=content_filter`;
the Anthropic and Responses calls read on to the end of the body and raise a connection error after
the closing events (the opt-in length frame, test_streaming.py, ends those cleanly over HTTP/1.1).
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import threading
import time
from typing import Optional

import httpx2 as httpx
import pytest

from cut_support import (
    BEFORE_MATCH,
    CLEAN,
    END,
    ENDS_AT_CLOSING_EVENTS,
    EVERY_SDK_PATH,
    FORBIDDEN,
    MESSAGES,
    NEVER_SENT,
    VENDOR_EVENTS,
    VENDOR_PATH,
    AsyncTee,
    Tee,
    _anthropic,
    _openai,
    assert_the_sdk_call_ended_as_after_a_cut,
    x_core_check,
)
from envoy_process import STATS, Envoy
from upstream_double import Answer, UpstreamDouble, Written

# What a vendor's closing events carry, to see they arrived before any connection error.
CLOSING = {"anthropic": b'"stop_reason":"refusal"', "chat": b"data: [DONE]", "responses": b"response.incomplete"}

WATCHDOG = 20.0
PROTOCOLS = {"http1": False, "http2": True}
paths = pytest.mark.parametrize("sdk", list(EVERY_SDK_PATH))
protocols = pytest.mark.parametrize("protocol", list(PROTOCOLS))


@dataclasses.dataclass
class Run:
    got: dict
    raised: Optional[BaseException]
    raw: bytes
    http_version: Optional[str]
    headers: httpx.Headers
    returned_at: float
    written: Written


_ids = itertools.count(1)


def run(envoy: Envoy, double: UpstreamDouble, sdk: str, protocol: str, words: list[str], **answer) -> Run:
    """One streamed call of `sdk` over `protocol`; the double streams `words` (one text delta each),
    or what `answer`'s fields say instead."""
    vendor, path_fn, is_async = EVERY_SDK_PATH[sdk]
    http2 = PROTOCOLS[protocol]
    prefix = f"/wire{next(_ids)}"
    stop = threading.Event()
    double.add_path(prefix + VENDOR_PATH[vendor], Answer(**{
        "headers": {"content-type": "text/event-stream"}, "body_chunks": VENDOR_EVENTS[vendor](0, words=words),
        "chunk_delay": 0.02, **answer, "watch_peer": True, "stop": stop}))
    watchdog = threading.Timer(WATCHDOG, stop.set)
    watchdog.daemon = True
    watchdog.start()
    tee = AsyncTee(http2) if is_async else Tee(drain=False, http2=http2)
    http_client = httpx.AsyncClient(transport=tee) if is_async else httpx.Client(transport=tee)
    got: dict = {}
    raised = None
    try:
        path_fn(envoy.url + prefix, {}, [], got, http_client=http_client, timeout=WATCHDOG)
    except Exception as e:  # noqa: BLE001 - what the SDK raised is the measurement
        raised = e
    returned_at = time.monotonic()
    # The upstream is given a moment to see the reset; the watchdog bounds it in any case.
    written = double.written(prefix + VENDOR_PATH[vendor])
    deadline = time.monotonic() + 2.0
    while written and not (written.gone_at or written.completed or written.stopped) and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    watchdog.cancel()
    assert written is not None, "the request never reached the double"
    return Run(got, raised, bytes(tee.body), tee.http_version, tee.headers, returned_at, written)


def within_budget(r: Run) -> bool:
    """Issue 13: at most the upstream's bytes + 2% + 1 KiB reach the caller."""
    return len(r.raw) <= r.written.body_bytes * 1.02 + 1024


@protocols
@paths
def test_a_clean_streamed_answer_arrives_whole_at_wire_cost(rules_envoy, double, sdk, protocol):
    vendor = EVERY_SDK_PATH[sdk][0]
    r = run(rules_envoy, double, sdk, protocol, CLEAN)

    assert r.raised is None, repr(r.raised)
    assert r.http_version == ("HTTP/2" if PROTOCOLS[protocol] else "HTTP/1.1")
    assert r.got == {"text": "".join(CLEAN), "end": END[vendor][0]}
    assert "content-length" not in r.headers
    assert r.written.completed
    assert within_budget(r), f"{len(r.raw)} bytes for the upstream's {r.written.body_bytes}"


# SDK paths this test process has already run once through a cut (see `_warm`).
_WARMED: set[str] = set()


def _warm(envoy: Envoy, double: UpstreamDouble, sdk: str, protocol: str) -> None:
    """Runs `sdk` through one short cut first, unmeasured: its first use in a process costs a one-off
    0.7-0.8 s (the openai SDK builds the Responses event types on first parse), which a cut that ends
    at once would otherwise charge to livecheck."""
    if sdk not in _WARMED:
        _WARMED.add(sdk)
        run(envoy, double, sdk, protocol, FORBIDDEN)


@protocols
@paths
def test_after_a_cut_the_call_returns_within_a_second_and_the_upstream_stops(rules_envoy, double, sdk, protocol):
    vendor = EVERY_SDK_PATH[sdk][0]
    _warm(rules_envoy, double, sdk, protocol)
    # ~30 s of events after the match; the cut is timed from the write of the event that confirms it.
    words = FORBIDDEN + [f" w{i}" for i in range(600)]
    r = run(rules_envoy, double, sdk, protocol, words, chunk_delay=0.05, mark=b"today")
    w = r.written

    assert w.marked_at is not None
    returned, gone = r.returned_at - w.marked_at, (w.gone_at - w.marked_at) if w.gone_at else None
    print(f"\n{sdk} over {protocol}: cut→return {returned:.3f} s, cut→upstream gone {gone}, "
          f"raised {type(r.raised).__name__ if r.raised else 'nothing'}, {len(r.raw)} bytes")
    for piece in NEVER_SENT:
        assert piece not in r.raw, f"{piece!r} reached the caller"
    assert CLOSING[vendor] in r.raw, "the closing events reached the caller"
    assert json.dumps(BEFORE_MATCH).encode() in r.raw, "the text before the match reached the caller"
    assert_the_sdk_call_ended_as_after_a_cut(vendor, r.raised)
    if vendor in ENDS_AT_CLOSING_EVENTS:
        assert r.got == {"text": BEFORE_MATCH, "end": END[vendor][1]}
    assert returned < 1.0, f"the SDK call returned {returned:.2f} s after the cut"
    assert gone is not None and gone < 1.0, f"the upstream kept generating (gone after {gone})"
    assert not w.completed
    assert within_budget(r)


@protocols
@pytest.mark.parametrize("sdk", ["anthropic.messages.create(stream=True)", "openai.chat.completions.create(stream=True)",
                                 "openai.responses.create(stream=True)"])
def test_after_a_cut_a_model_gone_quiet_is_closed_by_the_filters_timer(rules_envoy, double, sdk, protocol):
    """The model sends nothing for 5 s after the event that confirms the match: no upstream chunk can
    carry the close, so the filter's timer (the root context's tick) resets the stream."""
    r = run(rules_envoy, double, sdk, protocol, FORBIDDEN + [" more"], mark=b"today", pause_after_mark=5.0)
    w = r.written

    returned, gone = r.returned_at - w.marked_at, (w.gone_at - w.marked_at) if w.gone_at else None
    assert returned < 1.0, f"the SDK call returned {returned:.2f} s after the cut"
    assert gone is not None and gone < 1.0, f"the upstream was closed after {gone}"
    assert CLOSING[EVERY_SDK_PATH[sdk][0]] in r.raw


@protocols
@pytest.mark.parametrize("vendor", ["anthropic", "chat", "responses"])
def test_a_plain_turn_works_for_http1_and_http2_callers(rules_envoy, double, vendor, protocol):
    """Non-streamed: the shipped config serves HTTP/2 callers too (it had `max_requests_per_connection: 1`,
    on which every HTTP/2 call failed)."""
    prefix = f"/plain{next(_ids)}"
    bodies = {
        "anthropic": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                      "content": [{"type": "text", "text": "Hello."}], "stop_reason": "end_turn",
                      "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 2}},
        "chat": {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."},
                              "finish_reason": "stop"}]},
        "responses": {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-4o", "status": "completed",
                      "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                                  "content": [{"type": "output_text", "text": "Hello.", "annotations": []}]}],
                      "parallel_tool_calls": True, "tool_choice": "auto", "tools": []},
    }
    double.add_path(prefix + VENDOR_PATH[vendor], Answer(headers={"content-type": "application/json"},
                                                         body_chunks=[json.dumps(bodies[vendor]).encode()],
                                                         chunked=False))
    tee = Tee(http2=PROTOCOLS[protocol])
    url = rules_envoy.url + prefix
    for _ in range(2):  # twice: the connection is reused
        if vendor == "anthropic":
            message = _anthropic(url, {}, http_client=httpx.Client(transport=tee)).messages.create(
                model="claude-sonnet-4-5", max_tokens=10, messages=MESSAGES)
            text = message.content[0].text
        elif vendor == "chat":
            completion = _openai(url, {}, http_client=httpx.Client(transport=tee)).chat.completions.create(
                model="gpt-4o", messages=MESSAGES)
            text = completion.choices[0].message.content
        else:
            text = _openai(url, {}, http_client=httpx.Client(transport=tee)).responses.create(
                model="gpt-4o", input="hi").output_text
        assert text == "Hello."
        assert tee.http_version == ("HTTP/2" if PROTOCOLS[protocol] else "HTTP/1.1")


@pytest.mark.parametrize("sdk", ["anthropic.messages.create(stream=True)", "openai.chat.completions.create(stream=True)",
                                 "AsyncOpenAI.responses.create(stream=True)"])
def test_a_held_round_whose_text_already_failed_ends_without_waiting_for_the_model(livecheck_envoy, double, sdk):
    """The seed's `no-iban` asks for recovery, so the round is held whole. Once its text holds an IBAN
    the round is decided: the model is asked again (here the sidecar is not reachable, so the round is
    withheld with the blocked reply) without reading the rest of the doomed answer, ~30 s of it."""
    vendor = EVERY_SDK_PATH[sdk][0]
    words = FORBIDDEN + [f" w{i}" for i in range(600)]
    r = run(livecheck_envoy, double, sdk, "http1", words, chunk_delay=0.05, mark=b"today")
    w = r.written

    returned, gone = r.returned_at - w.marked_at, (w.gone_at - w.marked_at) if w.gone_at else None
    print(f"\n{sdk}: held round decided early: cut→return {returned:.3f} s, cut→upstream gone {gone}")
    assert b"Never share a password" in r.raw, "the blocked reply"
    for piece in [b"Pay to", *NEVER_SENT]:
        assert piece not in r.raw, f"{piece!r} reached the caller"
    assert_the_sdk_call_ended_as_after_a_cut(vendor, r.raised)
    assert returned < 1.0, f"the caller waited {returned:.2f} s after the round was doomed"
    assert gone is not None and gone < 1.0, f"the upstream kept generating (gone after {gone})"
    assert not w.completed


def _gzipped(events: list[bytes], pieces: int = 4) -> list[bytes]:
    """The events gzipped whole, as an upstream that ignored `accept-encoding: identity` sends them, in
    `pieces` chunks."""
    body = gzip.compress(b"".join(events))
    step = -(-len(body) // pieces)
    return [body[i:i + step] for i in range(0, len(body), step)]


@paths
def test_a_compressed_stream_is_refused_as_errored_in_the_callers_shape(rules_envoy, double, sdk):
    """The filter cannot read a compressed stream, so it refuses it at once (as the harness pins:
    tests/streaming.rs `a_compressed_stream_is_refused_as_errored_in_the_callers_shape`): 200 with
    X-Core-Check naming the blocking check as errored, no content-encoding, the blocked reply as the
    vendor's refusal events, nothing of the compressed body, and the stream closed as after a cut."""
    vendor = EVERY_SDK_PATH[sdk][0]
    errored = f"{STATS}livecheck.a.no-iban.errored"
    before = rules_envoy.stats(errored).get(errored, 0)
    r = run(rules_envoy, double, sdk, "http1", FORBIDDEN,
            headers={"content-type": "text/event-stream", "content-encoding": "gzip"},
            body_chunks=_gzipped(VENDOR_EVENTS[vendor](0, words=FORBIDDEN)))

    assert x_core_check(r.headers) == {"stage": "output", "check": "no-iban", "code": "check_errored"}
    assert "content-encoding" not in r.headers
    assert b"Not allowed." in r.raw and CLOSING[vendor] in r.raw, r.raw[-600:]
    assert b"\x1f\x8b" not in r.raw, "the compressed answer reached the caller"
    assert_the_sdk_call_ended_as_after_a_cut(vendor, r.raised)
    if vendor in ENDS_AT_CLOSING_EVENTS:
        assert r.got == {"text": "Not allowed.", "end": END[vendor][1]}
    assert rules_envoy.stats(errored)[errored] == before + 1
