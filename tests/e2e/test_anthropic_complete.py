"""Anthropic's legacy Text Completions (`POST /v1/complete`) end to end: a raw HTTP client (httpx2, which the SDKs bring, as
the anthropic SDK before 2.x sent it; 2.14 has no `completions`) -> real Envoy running livecheck.wasm
-> the scripted upstream double (a test double, not a model), with retries through the REAL
livecheck-judge sidecar (its `[[upstreams]]` naming the double for the turn's host).

The client reads what a client of this API reads: the JSON completion, or the `completion` events of
the stream (pings skipped, an `error` event raised), each text piece in turn until the event that
says the stop reason.
"""

from __future__ import annotations

import json
import threading
from typing import Optional

import httpx2 as httpx
import pytest

from cut_support import BEFORE_MATCH, FORBIDDEN as FORBIDDEN_PIECES
from envoy_process import Envoy, JudgeSidecar, envoy_for_judge
from upstream_double import Answer

PATH = "/v1/complete"
MODEL = "claude-2.1"
RULE = "Never state a bank account number."
BLOCKED = "I cannot help with that."
QUESTION = "Where do I pay for order 4711?"
FORBIDDEN_QUESTION = "My password is hunter2, where do I pay?"
FORBIDDEN = "Pay to NL91ABNA0417164300 today."
GOOD = "I'm not allowed to share bank details; please pay in the shop."
SECRET = "The code is SECRET-42."
CLIENT_TIMEOUT = 15.0

CONFIG = {
    "default_agent": "pay",
    "agents": {
        "pay": {"published": "1", "versions": {"1": {
            "blocked_reply": BLOCKED,
            "recover_attempts": 2,
            "live_checks": [
                {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
                {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
                 "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18, "recover": True, "description": RULE},
                {"name": "no-secret", "stage": "output", "kind": "not_contains", "expected": "SECRET"},
            ],
        }}},
    },
}


class Stack:
    def __init__(self, double, workdir) -> None:
        self.judge = JudgeSidecar(
            workdir / "judge", [{"api": "openai", "base_url": f"http://127.0.0.1:{double.port}", "models": ["*"]}],
            # Callers reach Envoy at 127.0.0.1:<its port>: an authority without a port matches any.
            arrays={"upstreams": [{"name": "double", "authority": "127.0.0.1",
                                   "base_url": f"http://127.0.0.1:{double.port}", "timeout_ms": 5000}]},
        )
        self.envoy = envoy_for_judge(self.judge, double.port, CONFIG, workdir)

    def close(self) -> None:
        self.envoy.stop()
        self.judge.close()


@pytest.fixture(scope="module")
def stack(double, tmp_path_factory):
    s = Stack(double, tmp_path_factory.mktemp("anthropic-complete"))
    yield s
    s.close()


# --- what the double answers ---------------------------------------------------------------------------


def _completion(text: str) -> Answer:
    body = {"type": "completion", "id": "compl_up", "completion": text, "stop_reason": "stop_sequence",
            "model": MODEL, "stop": "\n\nHuman:", "log_id": "compl_up"}
    return Answer(headers={"content-type": "application/json"}, body_chunks=[json.dumps(body)], chunked=False)


def _events(pieces: list[str]) -> Answer:
    """The double's stream: a `completion` event per piece (a ping after the first), then the last one."""
    def completion(text: str, stop: Optional[str]) -> str:
        data = {"type": "completion", "id": "compl_up", "completion": text, "stop_reason": stop, "model": MODEL}
        return f"event: completion\ndata: {json.dumps(data)}\n\n"

    events = [completion(p, None) for p in pieces]
    events.insert(1, 'event: ping\ndata: {"type": "ping"}\n\n')
    events.append(completion("", "stop_sequence"))
    return Answer(headers={"content-type": "text/event-stream"}, body_chunks=events, chunk_delay=0.02)


# --- the client ----------------------------------------------------------------------------------------


class Streamed:
    def __init__(self) -> None:
        self.status: Optional[int] = None
        self.headers: dict = {}
        self.text = ""
        self.stop_reason: Optional[str] = None
        self.raw = b""


def _request(question: str, stream: bool) -> dict:
    body = {"model": MODEL, "prompt": f"You help with orders.\n\nHuman: {question}\n\nAssistant:",
            "max_tokens_to_sample": 256}
    if stream:
        body["stream"] = True
    return body


HEADERS = {"x-api-key": "sk-ant-e2e", "anthropic-version": "2023-06-01"}


def complete(envoy: Envoy, body: dict) -> httpx.Response:
    with httpx.Client(timeout=CLIENT_TIMEOUT) as client:
        return client.post(envoy.url + PATH, json=body, headers=HEADERS)


def complete_stream(envoy: Envoy, body: dict) -> Streamed:
    """Reads the stream as a client of this API does, until the event that says the stop reason."""
    out = Streamed()
    with httpx.Client(timeout=CLIENT_TIMEOUT) as client, \
            client.stream("POST", envoy.url + PATH, json=body, headers=HEADERS) as r:
        out.status, out.headers = r.status_code, dict(r.headers)
        name, data = None, []
        for line in r.iter_lines():
            out.raw += line.encode() + b"\n"
            if line.startswith("event:"):
                name = line[len("event:"):].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:"):].strip())
            elif line == "" and data:
                event = json.loads("\n".join(data))
                name, data = name or event.get("type"), []
                assert event.get("type") == name, "an event is named by its type"
                if name == "error":
                    raise RuntimeError(f"error event: {event}")
                if name == "completion":
                    out.text += event["completion"]
                    if event.get("stop_reason") is not None:
                        out.stop_reason = event["stop_reason"]
                        break
                name = None
    return out


def _retry_requests(double) -> list[dict]:
    """The requests the double got from the sidecar (the retries): each carries the rule's instruction."""
    return [json.loads(r.body) for r in double.requests() if RULE.encode() in r.body]


# --- the turns -----------------------------------------------------------------------------------------


def test_a_clean_turn_passes_both_ways(stack, double):
    double.script(default=_completion(GOOD))
    r = complete(stack.envoy, _request(QUESTION, False))
    assert r.status_code == 200
    assert r.json()["completion"] == GOOD
    assert r.json()["stop_reason"] == "stop_sequence"
    assert "x-core-check" not in r.headers
    (up,) = double.requests()
    assert up.path == PATH
    assert json.loads(up.body) == _request(QUESTION, False), "the question went as it was written"


def test_a_clean_streamed_turn_arrives_whole(stack, double):
    double.script(default=_events(["Your order ", "ships ", "tomorrow."]))
    got = complete_stream(stack.envoy, _request(QUESTION, True))
    assert got.status == 200
    assert got.text == "Your order ships tomorrow."
    assert got.stop_reason == "stop_sequence"


@pytest.mark.parametrize("stream", [False, True])
def test_a_forbidden_question_is_refused_and_never_reaches_the_model(stack, double, stream):
    double.script(default=_completion(GOOD))
    body = _request(FORBIDDEN_QUESTION, stream)
    if stream:
        got = complete_stream(stack.envoy, body)
        text, stop_reason, headers = got.text, got.stop_reason, got.headers
        assert headers["content-type"] == "text/event-stream"
    else:
        r = complete(stack.envoy, body)
        text, stop_reason, headers = r.json()["completion"], r.json()["stop_reason"], r.headers
        assert r.json()["type"] == "completion" and r.json()["model"] == MODEL
    assert text == BLOCKED
    assert stop_reason == "stop_sequence"
    assert headers["x-core-check"] == 'stage=input, check="no-passwords", code=input_check_failed'
    assert not any(b"hunter2" in r.body for r in double.requests()), "the forbidden text never reached it"
    assert not [r for r in double.requests() if r.path == PATH and r.body]


def test_a_prompt_that_is_not_a_string_is_refused_in_anthropics_error_shape(stack, double):
    double.script(default=_completion(GOOD))
    r = complete(stack.envoy, {"model": MODEL, "prompt": ["\n\nHuman: my password\n\nAssistant:"],
                               "max_tokens_to_sample": 9})
    assert r.status_code == 400
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "prompt" in r.json()["error"]["message"]
    assert not any(b"password" in r.body for r in double.requests())


def test_an_answer_failing_a_check_that_does_not_recover_is_withheld(stack, double):
    double.script(default=_completion(SECRET))
    r = complete(stack.envoy, _request(QUESTION, False))
    assert r.status_code == 200
    body = r.json()
    assert body["completion"] == BLOCKED
    assert body["stop_reason"] == "stop_sequence"
    assert body["id"] == "compl_up", "the upstream's id is kept"
    assert "SECRET" not in r.text
    assert _retry_requests(double) == []


def test_a_failed_answer_is_asked_again_and_only_the_passing_one_is_shown(stack, double):
    double.script(sequence=[_completion(FORBIDDEN), _completion(GOOD)])
    r = complete(stack.envoy, _request(QUESTION, False))
    assert r.json()["completion"] == GOOD
    assert "usage" not in r.json(), "this API states no usage"
    assert "x-core-check" not in r.headers, "a recovered turn names no check"
    assert len(double.requests()) == 2, "the turn, then one retry"
    (retry,) = _retry_requests(double)
    assert "NL91" not in json.dumps(retry), "the model never sees the rejected answer"
    assert not retry.get("stream")
    prompt = retry["prompt"]
    assert prompt.startswith("You help with orders.\n\n"), "the instruction follows the system text"
    assert prompt.index(RULE) < prompt.index("\n\nHuman:"), "before the first Human turn"
    assert prompt.endswith(f"\n\nHuman: {QUESTION}\n\nAssistant:"), "the conversation as written"


def test_a_streaming_caller_gets_the_recovered_answer_as_events(stack, double):
    double.script(sequence=[_events(["Pay to NL91ABNA04", "17164300 today."]), _completion(GOOD)])
    got = complete_stream(stack.envoy, _request(QUESTION, True))
    assert got.text == GOOD
    assert got.stop_reason == "stop_sequence"
    assert b"NL91" not in got.raw
    assert len(_retry_requests(double)) == 1


def test_a_streamed_match_is_cut_where_it_starts(rules_envoy, double):
    stop = threading.Event()
    answer = _events(FORBIDDEN_PIECES)
    answer.stop = stop
    answer.watch_peer = True
    double.script(default=answer)
    timer = threading.Timer(10.0, stop.set)
    timer.daemon = True
    timer.start()
    try:
        got = complete_stream(rules_envoy, _request(QUESTION, True))
    finally:
        stop.set()
        timer.cancel()
    assert got.text == BEFORE_MATCH
    assert got.stop_reason == "stop_sequence"
    assert b"NL9" not in got.raw
