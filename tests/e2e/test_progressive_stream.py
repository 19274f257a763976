"""Progressive streaming through real Envoy (issue 51, item 1): while the model pauses mid-answer, the
caller already holds every character the model wrote, less only what could still begin a match.

RULES_ONLY's one blocking output check is a pattern (an IBAN, `NL\\d{2}[A-Z]{4}\\d{10}`, 18 characters),
so the answer streams through the shipped envoy/livecheck.yaml and the real livecheck.wasm. The upstream
double writes a few text events, then goes quiet after the event carrying the mark. A thread reads the
official SDK's stream (HTTP/1.1 or HTTP/2 with prior knowledge) and keeps each text delta as it arrives;
the test reads what the caller holds WHILE the upstream is quiet (the double has written nothing since
the mark), then ends the upstream. The text the caller must hold is computed here, independently of the
filter's matcher: everything before the leftmost point from which the text written so far could still
grow into a match. A filter that held a clean stream to its end, or always held back a window of the
longest match, fails here; tests/streaming.rs pins the same event by event in the harness, which has
no flow control.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import threading
import time
from typing import Callable, Iterator, Optional

import httpx2 as httpx
import pytest

from cut_support import MESSAGES, RULES_ONLY, VENDOR_EVENTS, VENDOR_PATH, Tee, _anthropic, _openai
from envoy_process import Envoy
from test_stream_wire import PROTOCOLS
from upstream_double import Answer, UpstreamDouble

# How long the model goes quiet at most; the test ends the upstream as soon as it has read the caller.
PAUSE = 3.0
# How long the caller's text must stay as it is once it reached what it must hold (nothing held may
# follow it during the pause).
SETTLE = 0.1
CLIENT_TIMEOUT = 10.0

# RULES_ONLY's pattern, one character class per position: a text can still grow into a match exactly
# when it fits these classes position by position (the pattern has fixed repeats and no alternation).
IBAN_POSITIONS = ["N", "L"] + [r"\d"] * 2 + ["[A-Z]"] * 4 + [r"\d"] * 10
assert RULES_ONLY["agents"]["a"]["versions"]["1"]["live_checks"][0]["pattern"] == r"NL\d{2}[A-Z]{4}\d{10}", \
    "IBAN_POSITIONS spell RULES_ONLY's pattern"


def could_begin_a_match(tail: str) -> bool:
    return len(tail) <= len(IBAN_POSITIONS) and all(
        re.fullmatch(cls, ch) for cls, ch in zip(IBAN_POSITIONS, tail))


def must_hold(written: str) -> str:
    """What the caller must already have of `written`: all of it before the leftmost position whose
    rest could still become an IBAN (the whole text when there is none)."""
    start = next((i for i in range(len(written)) if could_begin_a_match(written[i:])), len(written))
    return written[:start]


def test_the_reference_hold_back_is_what_the_rule_allows():
    """The oracle itself, on the cases the harness pins (tests/streaming.rs)."""
    assert must_hold("Your order ") == "Your order "
    assert must_hold("Your order ships to NL9") == "Your order ships to "
    assert must_hold("Your order ships to NL9 soon") == "Your order ships to NL9 soon"
    assert must_hold("Go to N") == "Go to "
    assert must_hold("Pay to NL91ABNA041716430") == "Pay to "


# --- the SDKs' text, delta by delta --------------------------------------------------------------------------


def anthropic_text(url: str, http_client) -> Iterator[str]:
    for event in _anthropic(url, {}, http_client=http_client, timeout=CLIENT_TIMEOUT).messages.create(
            model="claude-test", max_tokens=100, messages=MESSAGES, stream=True):
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            yield event.delta.text


def chat_text(url: str, http_client) -> Iterator[str]:
    for chunk in _openai(url, {}, http_client=http_client, timeout=CLIENT_TIMEOUT).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            yield chunk.choices[0].delta.content


def responses_text(url: str, http_client) -> Iterator[str]:
    for event in _openai(url, {}, http_client=http_client, timeout=CLIENT_TIMEOUT).responses.create(
            model="gpt-4o", input="hi", stream=True):
        if event.type == "response.output_text.delta":
            yield event.delta


TEXT_DELTAS: dict[str, Callable[[str, object], Iterator[str]]] = {
    "anthropic": anthropic_text, "chat": chat_text, "responses": responses_text}


class Reader(threading.Thread):
    """Reads one SDK stream to its end (or its error), keeping the text it has so far."""

    def __init__(self, deltas: Iterator[str]) -> None:
        super().__init__(daemon=True)
        self.deltas = deltas
        self._text: list[str] = []
        self._lock = threading.Lock()

    def run(self) -> None:
        try:
            for delta in self.deltas:
                with self._lock:
                    self._text.append(delta)
        except Exception:  # noqa: BLE001 - the test ends the upstream mid-answer on purpose
            pass

    def text(self) -> str:
        with self._lock:
            return "".join(self._text)


# --- one paused stream -------------------------------------------------------------------------------------


@dataclasses.dataclass
class Paused:
    held: str  # the caller's text while the upstream was quiet
    upstream_wrote: int  # chunks the double had written when `held` was read
    marked_chunk: int  # chunks up to and including the one before the pause
    http_version: Optional[str]


_ids = itertools.count(1)


def read_during_the_pause(envoy: Envoy, double: UpstreamDouble, vendor: str, protocol: str,
                          before: list[str], after: list[str], expected: str) -> Paused:
    """The double streams `before` (one text delta each), goes quiet for up to PAUSE, then `after`. The
    caller's text is read once the double went quiet: as soon as it reached `expected`'s length (and
    then once more SETTLE later), else at the end of the pause."""
    path = f"/progressive{next(_ids)}" + VENDOR_PATH[vendor]
    events = VENDOR_EVENTS[vendor](0, words=before + after)
    # The last delta before the pause as its JSON string: only its own event carries it quoted so.
    mark = json.dumps(before[-1]).encode()
    marked_chunk = next(i for i, e in enumerate(events) if mark in e) + 1
    stop = threading.Event()
    double.add_path(path, Answer(headers={"content-type": "text/event-stream"}, body_chunks=events,
                                 chunk_delay=0.02, mark=mark, pause_after_mark=PAUSE, watch_peer=True, stop=stop))
    tee = Tee(drain=False, http2=PROTOCOLS[protocol])
    client = httpx.Client(transport=tee)
    reader = Reader(TEXT_DELTAS[vendor](envoy.url + path.removesuffix(VENDOR_PATH[vendor]), client))
    reader.start()
    try:
        written = wait_until(lambda: (w := double.written(path)) and w.marked_at and w, 10.0, "the mark written")
        quiet_until = written.marked_at + PAUSE - 0.2
        while len(reader.text()) < len(expected) and time.monotonic() < quiet_until:
            time.sleep(0.005)
        time.sleep(SETTLE)
        held, upstream_wrote = reader.text(), written.chunks_written
    finally:
        stop.set()
        reader.join(CLIENT_TIMEOUT)
        client.close()
    return Paused(held, upstream_wrote, marked_chunk, tee.http_version)


def wait_until(probe: Callable, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (got := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.005)
    return got


# (the text deltas before the pause, those after it); what the caller must hold is computed (must_hold).
TEXTS = {
    # Nothing at the end could begin an IBAN: the caller holds every character written.
    "nothing-could-begin-a-match": (["Your order ", "ships ", "tomorrow"], [", promised."]),
    # "NL9 " was a possible start once and no longer is; "NL91AB" still could be one: only it is held.
    "a-possible-start-is-held-back": (["Your order ", "ships to NL9", " or to NL91AB"], [" soon."]),
}


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("vendor", ["anthropic", "chat", "responses"])
@pytest.mark.parametrize("text", list(TEXTS))
def test_while_the_model_pauses_the_caller_holds_all_text_that_cannot_begin_a_match(rules_envoy, double, vendor,
                                                                                   protocol, text):
    before, after = TEXTS[text]
    written = "".join(before)
    expected = must_hold(written)
    r = read_during_the_pause(rules_envoy, double, vendor, protocol, before, after, expected)

    assert r.http_version == ("HTTP/2" if PROTOCOLS[protocol] else "HTTP/1.1")
    held_back = written[len(expected):]
    assert r.held == expected, (
        f"while the model paused after {written!r}, the caller held {r.held!r}; it must hold {expected!r} ("
        + (f"all but {held_back!r}, which could still begin an IBAN)" if held_back else "all of it)"))
    assert r.upstream_wrote == r.marked_chunk, "read while the upstream was quiet"
