"""Judged checks end to end: the official SDKs -> real Envoy running livecheck.wasm -> the scripted
upstream double, with the judge callouts going to the REAL livecheck-judge binary (started here on a
free loopback port, with a config file written here), whose backend is the judge backend double
(judge_backend_double.py: OpenAI-compatible and Anthropic; a judged text containing RUDE fails).

  (a) a judged input check (custom_rule): a clean question goes upstream and the SDK gets the answer;
      a question with the fail marker is refused in the vendor's shape with X-Core-Check
      `stage=input, check="on-topic", code=input_check_failed` and nothing reaches upstream; the turn's
      own API key reached the judge backend, in that backend's style;
  (a') a judged non-streamed output check: the answer comes whole when passed, withheld when failed;
  (b) a judged streamed output check (polite_tone with a judge_model, both judge APIs) through four SDK
      stream paths: a polite answer arrives whole and the stream ends normally; a rude one shows only the
      blocked reply and ends refusal / content_filter / incomplete, none of its text in the raw bytes;
  (c) faults: the sidecar stopped (by its PID) and a judge slower than the check's timeout_ms both block
      the turn with code=check_errored; with on_error "pass" the same turn goes through.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable, Optional

import anthropic
import httpx2 as httpx
import openai
import pytest

from cut_support import VENDOR_EVENTS, VENDOR_PATH, Tee, anthropic_final, anthropic_iter, chat_iter, responses_iter, x_core_check
from envoy_process import HOLDS_ANSWER_HEADERS, STATS, Envoy, JudgeSidecar, envoy_for_judge
from judge_backend_double import FAIL_MARKER, SLOW_MARKER, JudgeBackendDouble
import raw_client
from upstream_double import Answer

BLOCKED = "I can only help with orders."
RULE = "The question is about orders."
CLEAN_QUESTION = "Where is my order 4711?"
RUDE_QUESTION = f"Where is my order 4711, you {FAIL_MARKER} bot?"
SLOW_QUESTION = f"Where is my order 4711? {SLOW_MARKER}"
CLEAN_ANSWER = "Your order 4711 left the warehouse this morning."
POLITE = ["Your order ", "ships ", "tomorrow, ", "thank you for waiting."]
RUDE = ["Your order ships ", "when it ships, ", f"you {FAIL_MARKER} ", "impatient person."]
NEVER_SENT = [b"when it ships", FAIL_MARKER.encode(), b"impatient"]

ANTHROPIC_KEY = "sk-ant-turn-key-e2e"
OPENAI_KEY = "sk-openai-turn-key-e2e"
CLIENT_TIMEOUT = 10.0


def _agent(*checks: dict) -> dict:
    return {"published": "1", "versions": {"1": {"blocked_reply": BLOCKED, "live_checks": list(checks)}}}


def _on_topic(**extra) -> dict:
    return {"name": "on-topic", "stage": "input", "kind": "custom_rule", "expected": RULE, **extra}


def _polite(judge_model: str) -> dict:
    return {"name": "polite-out", "stage": "output", "kind": "polite_tone", "judge_model": judge_model,
            "timeout_ms": 3000}


# Agents are chosen per request by the `x-core-agent` header.
CONFIG = {
    "default_agent": "ask",
    "agents": {
        # (a): the judge model is the turn's: claude-* -> the Anthropic judge API, else OpenAI's.
        "ask": _agent(_on_topic(timeout_ms=3000)),
        # (b): the check's own judge model, one per judge API.
        "tone-openai-judge": _agent(_polite("gpt-judge")),
        "tone-anthropic-judge": _agent(_polite("claude-judge")),
        # (c): short timeouts; fail closed, and the same with on_error "pass".
        "fault": _agent(_on_topic(timeout_ms=600)),
        "fault-pass": _agent(_on_topic(timeout_ms=600, on_error="pass")),
    },
}


def _backends(double: JudgeBackendDouble) -> list[dict]:
    return [
        {"name": "double-anthropic", "api": "anthropic", "base_url": double.base_url, "models": ["claude-*"]},
        {"name": "double-openai", "api": "openai", "base_url": double.base_url, "models": ["*"]},
    ]


# --- fixtures ------------------------------------------------------------------------------------------


# `SLOW` judge conditions are answered after this long (the conftest judge_backend fixture).
JUDGE_SLOW_SECONDS = 2.0


class Stack:
    """The real sidecar and a real Envoy whose `livecheck-judge` cluster points at it."""

    def __init__(self, double, judge_backend, workdir) -> None:
        self.judge = JudgeSidecar(workdir / "judge", _backends(judge_backend))
        self.envoy = envoy_for_judge(self.judge, double.port, CONFIG, workdir)

    def close(self) -> None:
        self.envoy.stop()
        self.judge.close()


@pytest.fixture(scope="module")
def stack(double, judge_backend, tmp_path_factory):
    s = Stack(double, judge_backend, tmp_path_factory.mktemp("judged"))
    yield s
    s.close()


@pytest.fixture
def fresh_stack(double, judge_backend, tmp_path_factory):
    """A stack of its own, for a test that stops its sidecar."""
    s = Stack(double, judge_backend, tmp_path_factory.mktemp("judged-fault"))
    yield s
    s.close()


# --- the three vendor APIs, non-streamed ---------------------------------------------------------------


def _anthropic(envoy: Envoy, agent: str, **client) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=envoy.url, api_key=ANTHROPIC_KEY, max_retries=0, timeout=CLIENT_TIMEOUT,
                               default_headers={"x-core-agent": agent}, **client)


def _openai(envoy: Envoy, agent: str, **client) -> openai.OpenAI:
    return openai.OpenAI(base_url=envoy.url + "/v1", api_key=OPENAI_KEY, max_retries=0, timeout=CLIENT_TIMEOUT,
                         default_headers={"x-core-agent": agent}, **client)


def _anthropic_create(envoy, agent, question):
    raw = _anthropic(envoy, agent).messages.with_raw_response.create(
        model="claude-test", max_tokens=256, messages=[{"role": "user", "content": question}])
    m = raw.parse()
    return raw, m.stop_reason, "".join(b.text for b in m.content if b.type == "text")


def _chat_create(envoy, agent, question):
    raw = _openai(envoy, agent).chat.completions.with_raw_response.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": question}])
    c = raw.parse()
    return raw, c.choices[0].finish_reason, c.choices[0].message.content


def _responses_create(envoy, agent, question):
    raw = _openai(envoy, agent).responses.with_raw_response.create(model="gpt-4.1-mini", input=question)
    r = raw.parse()
    return raw, (r.status, r.incomplete_details.reason if r.incomplete_details else None), r.output_text


def _anthropic_answer(text: str) -> dict:
    return {"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 17, "output_tokens": 23}}


def _chat_answer(text: str) -> dict:
    return {"id": "chatcmpl-up", "object": "chat.completion", "created": 1790000000, "model": "gpt-4.1-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 17, "completion_tokens": 23, "total_tokens": 40}}


def _responses_answer(text: str) -> dict:
    return {"id": "resp_up", "object": "response", "created_at": 1790000000, "status": "completed",
            "model": "gpt-4.1-mini", "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "output": [{"type": "message", "id": "msg_up", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": {"input_tokens": 17, "output_tokens": 23, "total_tokens": 40}}


# name -> (create, upstream answer, refused marker, clean marker, the judge API the turn's model goes to,
#          the key header and value that API must receive)
VENDORS: dict[str, tuple] = {
    "anthropic": (_anthropic_create, _anthropic_answer, "refusal", "end_turn",
                  "/v1/messages", ("x-api-key", ANTHROPIC_KEY)),
    "chat": (_chat_create, _chat_answer, "content_filter", "stop",
             "/v1/chat/completions", ("authorization", f"Bearer {OPENAI_KEY}")),
    "responses": (_responses_create, _responses_answer, ("incomplete", "content_filter"), ("completed", None),
                  "/v1/chat/completions", ("authorization", f"Bearer {OPENAI_KEY}")),
}
vendors = pytest.mark.parametrize("vendor", list(VENDORS))


def _json_answer(body: dict) -> Answer:
    return Answer(headers={"content-type": "application/json"}, body_chunks=[json.dumps(body)], chunked=False)


def _input_refused(check: str, code: str) -> dict:
    return {"stage": "input", "check": check, "code": code}


# --- (a) a judged input check --------------------------------------------------------------------------


@vendors
def test_a_clean_question_is_judged_then_answered(stack, double, judge_backend, vendor):
    create, answer, _refused, ok, judge_path, (key_header, key) = VENDORS[vendor]
    double.script(default=_json_answer(answer(CLEAN_ANSWER)))
    judge_backend.reset()

    raw, stop, text = create(stack.envoy, "ask", CLEAN_QUESTION)

    assert (stop, text) == (ok, CLEAN_ANSWER)
    assert x_core_check(raw.headers) is None
    assert len(double.requests()) == 1, "the question went upstream once judged"
    (call,) = judge_backend.seen()
    assert call.path == judge_path, "the turn's model picks the judge API"
    assert call.judged_text is not None and CLEAN_QUESTION in call.judged_text
    assert RULE in call.body["messages"][-1]["content"], "the custom rule is the rule judged"
    assert call.headers.get(key_header) == key, "the turn's own key reached the judge backend"


@vendors
def test_a_question_the_judge_fails_is_refused_and_never_reaches_upstream(stack, double, judge_backend, vendor):
    create, answer, refused, _ok, judge_path, (key_header, key) = VENDORS[vendor]
    double.script(default=_json_answer(answer(CLEAN_ANSWER)))
    judge_backend.reset()

    raw, stop, text = create(stack.envoy, "ask", RUDE_QUESTION)

    assert raw.status_code == 200
    assert (stop, text) == (refused, BLOCKED)
    assert x_core_check(raw.headers) == _input_refused("on-topic", "input_check_failed")
    assert double.requests() == [], "a refused question reached upstream"
    (call,) = judge_backend.seen()
    assert (call.path, call.passed) == (judge_path, False)
    assert call.headers.get(key_header) == key, "the turn's own key reached the judge backend"


def test_a_refused_streamed_question_streams_the_blocked_reply(stack, double, judge_backend):
    double.script(default=_json_answer(_chat_answer(CLEAN_ANSWER)))
    raw = _openai(stack.envoy, "ask").chat.completions.with_raw_response.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": RUDE_QUESTION}], stream=True)
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert (finish, text) == (["content_filter"], BLOCKED)
    assert x_core_check(raw.headers) == _input_refused("on-topic", "input_check_failed")
    assert double.requests() == []


# --- (a') a judged non-streamed output check -----------------------------------------------------------


@vendors
@pytest.mark.parametrize("judge", ["tone-openai-judge", "tone-anthropic-judge"])
def test_a_non_streamed_answer_is_held_until_judged(stack, double, judge_backend, vendor, judge):
    create, answer, refused, ok, _judge_path, _key = VENDORS[vendor]
    for words, passed in ((POLITE, True), (RUDE, False)):
        double.script(default=_json_answer(answer("".join(words))))
        judge_backend.reset()

        raw, stop, text = create(stack.envoy, judge, CLEAN_QUESTION)
        body = raw.http_response.read()

        (call,) = judge_backend.seen()
        assert call.judged_text == "".join(words), "the whole answer was judged"
        assert call.path == ("/v1/messages" if judge == "tone-anthropic-judge" else "/v1/chat/completions")
        if passed:
            assert (stop, text) == (ok, "".join(words))
            assert x_core_check(raw.headers) is None
        else:
            assert (stop, text) == (refused, BLOCKED)
            if HOLDS_ANSWER_HEADERS:
                assert x_core_check(raw.headers) == {"stage": "output", "check": "polite-out", "code": "output_check_failed"}
            else:
                # The answer's headers went on when they came: the stats and results name the check.
                assert x_core_check(raw.headers) is None
            for never in NEVER_SENT:
                assert never not in body, body


# --- (b) a judged streamed output check ----------------------------------------------------------------


# The SDK paths of cut_support.py: (base_url, headers, seen, got, **client) -> fills got{text, end}.
SDK_PATHS: dict[str, tuple[str, Callable]] = {
    "anthropic.messages.stream()": ("anthropic", anthropic_final),
    "anthropic.messages.create(stream=True)": ("anthropic", anthropic_iter),
    "openai.chat.completions.create(stream=True)": ("chat", chat_iter),
    "openai.responses.create(stream=True)": ("responses", responses_iter),
}
END = {"anthropic": ("end_turn", "refusal"), "chat": ("stop", "content_filter"),
       "responses": ("completed", "incomplete/content_filter")}
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache"}


class EnvoyCrashed(Exception):
    """Envoy itself died during a turn (not a refusal, not a reset of one stream)."""


def test_a_streamed_answer_arrives_whole_after_the_judge_passed_it(fresh_stack, double, judge_backend):
    """Every SDK stream path x both judge APIs x (polite, rude), on a stack of its own (a crash must not
    take the other tests' Envoy with it)."""
    for judge in ("tone-openai-judge", "tone-anthropic-judge"):
        for sdk, (vendor, path_fn) in SDK_PATHS.items():
            for words, passed in ((POLITE, True), (RUDE, False)):
                what = f"{sdk} via {judge}, {'polite' if passed else 'rude'}"
                stop = threading.Event()
                double.script(default=Answer(headers=SSE_HEADERS, body_chunks=VENDOR_EVENTS[vendor](0, words=words),
                                             chunk_delay=0.01, watch_peer=True, stop=stop))
                judge_backend.reset()
                tee = Tee()
                got: dict = {}
                try:
                    path_fn(fresh_stack.envoy.url, {"x-core-agent": judge}, [], got, timeout=CLIENT_TIMEOUT,
                            http_client=httpx.Client(transport=tee))
                except Exception as e:
                    time.sleep(0.3)
                    if fresh_stack.envoy.process.poll() is not None:
                        raise EnvoyCrashed(f"{what}: Envoy exited with {fresh_stack.envoy.process.returncode} "
                                           f"({type(e).__name__}: {e})") from e
                    raise
                finally:
                    stop.set()

                (call,) = judge_backend.seen()
                assert call.judged_text == "".join(words), f"{what}: the whole answer was judged, once"
                assert call.path == ("/v1/messages" if judge == "tone-anthropic-judge" else "/v1/chat/completions")
                assert tee.headers["content-type"].startswith("text/event-stream"), what
                if passed:
                    assert got == {"text": "".join(words), "end": END[vendor][0]}, what
                else:
                    assert got == {"text": BLOCKED, "end": END[vendor][1]}, what
                    for never in NEVER_SENT:
                        assert never not in tee.body, (what, never, bytes(tee.body))


# --- (c) faults ----------------------------------------------------------------------------------------


def test_a_stopped_sidecar_fails_closed_unless_on_error_pass(fresh_stack, double, judge_backend):
    double.script(default=_json_answer(_anthropic_answer(CLEAN_ANSWER)))
    # Up: the fault agents pass a clean question.
    raw, stop, text = _anthropic_create(fresh_stack.envoy, "fault", CLEAN_QUESTION)
    assert (stop, text) == ("end_turn", CLEAN_ANSWER)

    pid = fresh_stack.judge.pid
    fresh_stack.judge.stop()  # SIGTERM to the PID this test started
    assert not fresh_stack.judge.running(), f"sidecar {pid} still running"
    double.script(default=_json_answer(_anthropic_answer(CLEAN_ANSWER)))

    started = time.monotonic()
    raw, stop, text = _anthropic_create(fresh_stack.envoy, "fault", CLEAN_QUESTION)
    assert (stop, text) == ("refusal", BLOCKED)
    assert x_core_check(raw.headers) == _input_refused("on-topic", "check_errored")
    assert double.requests() == [], "an undecided question reached upstream"
    assert time.monotonic() - started < 2.0, "a refused connection is errored at once, not after a timeout"

    raw, stop, text = _anthropic_create(fresh_stack.envoy, "fault-pass", CLEAN_QUESTION)
    assert (stop, text) == ("end_turn", CLEAN_ANSWER)
    assert x_core_check(raw.headers) is None
    assert len(double.requests()) == 1, "on_error pass: the question went upstream"


def test_a_judge_slower_than_the_checks_timeout_fails_closed_unless_on_error_pass(stack, double, judge_backend):
    double.script(default=_json_answer(_chat_answer(CLEAN_ANSWER)))
    judge_backend.reset()

    started = time.monotonic()
    raw, stop, text = _chat_create(stack.envoy, "fault", SLOW_QUESTION)
    took = time.monotonic() - started
    assert (stop, text) == ("content_filter", BLOCKED)
    assert x_core_check(raw.headers) == _input_refused("on-topic", "check_errored")
    assert double.requests() == []
    assert 0.5 <= took < 1.8, f"errored at the check's 600 ms timeout, not the judge's 2 s ({took:.2f}s)"

    raw, stop, text = _chat_create(stack.envoy, "fault-pass", SLOW_QUESTION)
    assert (stop, text) == ("stop", CLEAN_ANSWER)
    assert x_core_check(raw.headers) is None
    assert len(double.requests()) == 1


def test_a_held_stream_past_max_body_bytes_ends_with_the_blocked_reply_and_no_judge_call(double, judge_backend,
                                                                                         tmp_path):
    """A streamed answer held whole for a judged check is kept in the filter's memory, so it is bounded by
    `max_body_bytes` as a non-streamed answer is: past it the check cannot decide (fail closed), the
    caller gets the blocked reply, nothing of the answer, and the judge is never asked. The OpenAI SDK
    ends at `[DONE]` (docs/cut-matrix.md); the raw bytes are read by a raw client."""
    config = {"default_agent": "tone", "max_body_bytes": 16384, "agents": {"tone": _agent(_polite("gpt-judge"))}}
    judge = JudgeSidecar(tmp_path / "judge", _backends(judge_backend))
    envoy = envoy_for_judge(judge, double.port, config, tmp_path)
    words = [f"Your order {i} ships tomorrow. " for i in range(600)]
    try:
        for client in ("sdk", "raw"):
            stop = threading.Event()
            double.script(default=Answer(headers=SSE_HEADERS, body_chunks=VENDOR_EVENTS["chat"](0, words=words),
                                         chunk_delay=0.001, watch_peer=True, stop=stop))
            judge_backend.reset()
            began = time.monotonic()
            try:
                if client == "sdk":
                    got: dict = {}
                    chat_iter(envoy.url, {}, [], got, timeout=CLIENT_TIMEOUT)
                    assert got == {"text": BLOCKED, "end": "content_filter"}
                else:
                    body = json.dumps({"model": "gpt-4o", "stream": True,
                                       "messages": [{"role": "user", "content": CLEAN_QUESTION}]}).encode()
                    reply = raw_client.send(envoy.port, "POST", "/v1/chat/completions",
                                            {"content-type": "application/json"}, [body])
                    assert reply.status == 200
                    assert BLOCKED.encode() in reply.body and b"data: [DONE]" in reply.body
                    assert b"ships tomorrow" not in reply.body
            finally:
                stop.set()
            assert time.monotonic() - began < 5, f"{client}: ended at the limit, not at the model's end"
            assert judge_backend.seen() == [], client
    finally:
        envoy.stop()
        judge.close()


def test_a_held_stream_past_max_body_bytes_streams_on_unjudged_when_its_judged_check_passes_on_error(
        double, judge_backend, tmp_path):
    """The same stream with `on_error: "pass"` on the judged check: past `max_body_bytes` the check cannot
    decide and lets the answer through (as a non-streamed answer over the limit passes): the caller gets
    all of it and its own end, the judge is never asked, and the check counts as errored."""
    config = {"default_agent": "tone", "max_body_bytes": 16384,
              "agents": {"tone": _agent({**_polite("gpt-judge"), "on_error": "pass"})}}
    judge = JudgeSidecar(tmp_path / "judge", _backends(judge_backend))
    envoy = envoy_for_judge(judge, double.port, config, tmp_path)
    words = [f"Your order {i} ships tomorrow. " for i in range(600)]
    errored = f"{STATS}livecheck.tone.polite-out.errored"
    try:
        double.script(default=Answer(headers=SSE_HEADERS, body_chunks=VENDOR_EVENTS["chat"](0, words=words),
                                     chunk_delay=0.001))
        judge_backend.reset()
        got: dict = {}
        chat_iter(envoy.url, {}, [], got, timeout=CLIENT_TIMEOUT)
        assert got == {"text": "".join(words), "end": "stop"}
        assert judge_backend.seen() == []
        assert envoy.stats(errored).get(errored) == 1
    finally:
        envoy.stop()
        judge.close()
