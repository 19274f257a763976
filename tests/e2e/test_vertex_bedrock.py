"""Anthropic's Messages API on Google Vertex AI and Amazon Bedrock, end to end: the official
`anthropic.AnthropicVertex` and `anthropic.AnthropicBedrock` clients (dummy credentials) -> real Envoy
running livecheck.wasm -> the scripted upstream double (a test double, not a model) speaking the
Messages shape, with recovery through the REAL livecheck-judge sidecar.

Vertex requests go to `…/publishers/anthropic/models/{model}:rawPredict` (`:streamRawPredict` when
streamed) with the caller's Google token; Bedrock requests to `/model/{model}/invoke`, signed by the
caller with SigV4 (the SDK signs with botocore). Each: a clean turn, a refused question, a withheld
answer, a denied tool call; on Vertex a cut streamed answer and a recovered answer (the caller's token
reaching the double on the retry, at `:rawPredict`); on Bedrock the answer withheld when the sidecar
has no key of its own for the upstream, and recovered when it has one (the double sees
`Authorization: Bearer <key>`, never the caller's signature). The forbidden text never reaches the
double on a refused question, nor the SDK on a stopped answer.

Bedrock's SigV4 signs the Host: the keyed Bedrock client signs for the real host
(`bedrock-runtime.us-east-1.amazonaws.com`, sent as the Host header to Envoy), as
envoy/bedrock-anthropic.yaml asks; the sidecar's `[[upstreams]]` entry for that host has the key. The
unkeyed one reaches Envoy as 127.0.0.1, whose entry has none.
"""

from __future__ import annotations

import json

import anthropic
import httpx2 as httpx
import pytest

from cut_support import Tee, assert_the_sdk_call_ended_as_after_a_cut
from envoy_process import JudgeSidecar, envoy_for_judge
from upstream_double import Answer, DoubleToolCall, model_double_tool_answer

PROJECT = "livecheck-e2e"
REGION = "us-east5"
VERTEX_MODEL = "claude-sonnet-4@20250514"
BEDROCK_MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
BEDROCK_HOST = "bedrock-runtime.us-east-1.amazonaws.com"
GOOGLE_TOKEN = "ya29.dummy-google-token"
BEDROCK_KEY = "bedrock-api-key-e2e"
BEDROCK_KEY_ENV = "LIVECHECK_E2E_BEDROCK_KEY"

RULE = "Never state a bank account number."
QUESTION = "Where do I pay for order 4711?"
FORBIDDEN_QUESTION = "My password is hunter2, where is order 4711?"
FORBIDDEN = "Pay to NL91ABNA0417164300 today."
GOOD = "I'm not allowed to share bank details; please pay in the shop."
CLEAN = "Your order ships tomorrow."
BLOCKED = "I cannot help with that. Never share a password in this conversation."
# The filter's fixed sentence for a call `allowed_tools` denies (livecheck_wire::reasons::TOOL_NOT_ALLOWED).
NOT_ALLOWED = "The tool is not one this agent may call."
CLIENT_TIMEOUT = 15.0


def _version(recover: bool) -> dict:
    return {"1": {
        "blocked_reply": BLOCKED,
        "recover_attempts": 1,
        "allowed_tools": ["lookup"],
        "live_checks": [
            {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
            {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
             "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18, "recover": recover, "description": RULE},
        ],
    }}


# `plain` withholds and cuts; `recovers` asks again.
POLICY = {
    "agent_header": "x-core-agent",
    "default_agent": "plain",
    "agents": {
        "plain": {"published": "1", "versions": _version(False)},
        "recovers": {"published": "1", "versions": _version(True)},
    },
}


class Stack:
    def __init__(self, double, workdir) -> None:
        upstream = {"base_url": f"http://127.0.0.1:{double.port}", "timeout_ms": 5000}
        self.judge = JudgeSidecar(
            workdir / "judge", [{"api": "openai", "base_url": "http://127.0.0.1:9", "models": ["*"]}],
            arrays={"upstreams": [
                # Callers that reach Envoy at 127.0.0.1: no key of the sidecar's own.
                {"name": "loopback", "authority": "127.0.0.1", **upstream},
                # Bedrock callers that sign for the real host: the sidecar's own Bedrock API key.
                {"name": "bedrock", "authority": BEDROCK_HOST, "api_key_env": BEDROCK_KEY_ENV, **upstream},
            ]},
            env={BEDROCK_KEY_ENV: BEDROCK_KEY},
        )
        self.envoy = envoy_for_judge(self.judge, double.port, POLICY, workdir)

    def close(self) -> None:
        self.envoy.stop()
        self.judge.close()


@pytest.fixture(scope="module")
def stack(double, tmp_path_factory):
    s = Stack(double, tmp_path_factory.mktemp("vertex-bedrock"))
    yield s
    s.close()


# --- the SDKs -----------------------------------------------------------------------------------------


def _vertex(stack, agent: str = "plain", http_client=None) -> anthropic.AnthropicVertex:
    return anthropic.AnthropicVertex(
        base_url=stack.envoy.url + "/v1", project_id=PROJECT, region=REGION, access_token=GOOGLE_TOKEN,
        max_retries=0, timeout=CLIENT_TIMEOUT, default_headers={"x-core-agent": agent}, http_client=http_client)


def _bedrock(stack, agent: str = "plain", real_host: bool = False) -> anthropic.AnthropicBedrock:
    headers = {"x-core-agent": agent}
    if real_host:
        # Signed for the real host, as a caller behind envoy/bedrock-anthropic.yaml must.
        headers["host"] = BEDROCK_HOST
    return anthropic.AnthropicBedrock(
        base_url=stack.envoy.url, aws_access_key="dummy", aws_secret_key="dummy", aws_region="us-east-1",
        max_retries=0, timeout=CLIENT_TIMEOUT, default_headers=headers)


def _client(stack, platform: str, agent: str = "plain"):
    return _vertex(stack, agent) if platform == "vertex" else _bedrock(stack, agent)


def _model(platform: str) -> str:
    return VERTEX_MODEL if platform == "vertex" else BEDROCK_MODEL


def _create(client, platform: str, question: str = QUESTION, **kwargs):
    raw = client.messages.with_raw_response.create(
        model=_model(platform), max_tokens=256, messages=[{"role": "user", "content": question}], **kwargs)
    return raw, raw.parse()


def _text(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


# --- what the double answers ----------------------------------------------------------------------------


def _json(text: str) -> Answer:
    body = {"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 17, "output_tokens": 23}}
    return Answer(headers={"content-type": "application/json"}, body_chunks=[json.dumps(body)], chunked=False)


def _sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def _stream(pieces: list[str]) -> Answer:
    events = [_sse("message_start", {"type": "message_start", "message": {
        "id": "msg_s", "type": "message", "role": "assistant", "model": "claude-test", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}})]
    events += [_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": p}}) for p in pieces]
    events += [_sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
               _sse("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                      "usage": {"output_tokens": 5}}),
               _sse("message_stop", {"type": "message_stop"})]
    return Answer(headers={"content-type": "text/event-stream"}, body_chunks=events, chunk_delay=0.01)


def _turns(double) -> list:
    """The requests the double got as the model: the callers' turns and the sidecar's retries."""
    return double.requests()


def _retries(double) -> list:
    return [r for r in double.requests() if RULE.encode() in r.body]


platforms = pytest.mark.parametrize("platform", ["vertex", "bedrock"])


# --- every platform ---------------------------------------------------------------------------------------


@platforms
def test_a_clean_turn_reaches_the_model_on_the_platforms_path(stack, double, platform):
    double.script(sequence=[_json(CLEAN)])
    raw, message = _create(_client(stack, platform), platform)
    assert _text(message) == CLEAN
    assert raw.headers.get("x-core-check") is None
    (seen,) = _turns(double)
    body = json.loads(seen.body)
    assert "model" not in body, "the path names the model"
    assert isinstance(body["anthropic_version"], str)
    if platform == "vertex":
        assert seen.path == (f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/anthropic/models/"
                             f"{VERTEX_MODEL}:rawPredict")
        assert seen.headers["authorization"] == f"Bearer {GOOGLE_TOKEN}"
    else:
        assert seen.path == f"/model/{BEDROCK_MODEL}/invoke"
        assert seen.headers["authorization"].startswith("AWS4-HMAC-SHA256 ")
        assert "x-amz-date" in seen.headers


@platforms
def test_a_forbidden_question_is_refused_and_never_reaches_the_model(stack, double, platform):
    double.script(sequence=[_json(CLEAN)])
    raw, message = _create(_client(stack, platform), platform, FORBIDDEN_QUESTION)
    assert _text(message) == BLOCKED
    assert message.stop_reason == "refusal"
    assert message.model == _model(platform), "the refusal names the path's model"
    assert 'check="no-passwords"' in raw.headers["x-core-check"]
    assert _turns(double) == [], "no model was asked"


@platforms
def test_a_forbidden_answer_is_withheld(stack, double, platform):
    double.script(sequence=[_json(FORBIDDEN)])
    raw, message = _create(_client(stack, platform), platform)
    assert "NL91" not in raw.http_response.text
    assert message.stop_reason == "refusal"
    assert _retries(double) == [], "plain does not recover"


@platforms
def test_a_tool_call_allowed_tools_does_not_list_is_denied(stack, double, platform):
    double.script(sequence=[model_double_tool_answer(
        "anthropic", [DoubleToolCall("send_email", '{"to": "bob@example.com"}')], text="Sending it.")])
    raw, message = _create(_client(stack, platform), platform, tools=[
        {"name": "send_email", "input_schema": {"type": "object"}},
        {"name": "lookup", "input_schema": {"type": "object"}}])
    assert not any(b.type == "tool_use" for b in message.content)
    assert "send_email" not in raw.http_response.text
    assert NOT_ALLOWED in _text(message)


# --- Vertex: streaming and recovery ---------------------------------------------------------------------


def test_a_streamed_vertex_answer_is_cut_before_the_forbidden_text(stack, double):
    double.script(sequence=[_stream(["Pay to NL91AB", "NA0417164300 today."])])
    tee = Tee()
    client = _vertex(stack, http_client=httpx.Client(transport=tee))
    raised = None
    try:
        with client.messages.stream(model=VERTEX_MODEL, max_tokens=256,
                                    messages=[{"role": "user", "content": QUESTION}]) as stream:
            for _ in stream.text_stream:
                pass
    except Exception as e:  # noqa: BLE001 — the SDK's reaction to a cut is what is asserted
        raised = e
    assert_the_sdk_call_ended_as_after_a_cut("anthropic", raised)
    (seen,) = _turns(double)
    assert seen.path.endswith(f"/models/{VERTEX_MODEL}:streamRawPredict")
    assert b"Pay to " in tee.body
    assert b"NL91" not in tee.body


def test_a_vertex_answer_is_recovered_with_the_callers_token(stack, double):
    double.script(sequence=[_json(FORBIDDEN), _json(GOOD)])
    raw, message = _create(_vertex(stack, "recovers"), "vertex")
    assert _text(message) == GOOD
    assert raw.headers.get("x-core-check") is None
    (retry,) = _retries(double)
    assert retry.headers["authorization"] == f"Bearer {GOOGLE_TOKEN}"
    assert retry.path.endswith(f"/models/{VERTEX_MODEL}:rawPredict")
    assert b"NL91" not in retry.body


def test_a_streamed_vertex_answer_is_recovered_at_raw_predict(stack, double):
    double.script(sequence=[_stream(["Pay to NL91ABNA04", "17164300 today."]), _json(GOOD)])
    with _vertex(stack, "recovers").messages.stream(model=VERTEX_MODEL, max_tokens=256,
                                                    messages=[{"role": "user", "content": QUESTION}]) as stream:
        message = stream.get_final_message()
    assert _text(message) == GOOD
    first, retry = _turns(double)
    assert first.path.endswith(":streamRawPredict")
    assert retry.path.endswith(f"/models/{VERTEX_MODEL}:rawPredict"), "a retry is never streamed"
    assert retry.headers["authorization"] == f"Bearer {GOOGLE_TOKEN}"
    assert "stream" not in json.loads(retry.body)


# --- Bedrock: recovery only with the sidecar's own key --------------------------------------------------


def test_a_bedrock_answer_is_withheld_when_the_sidecar_has_no_key_of_its_own(stack, double):
    double.script(sequence=[_json(FORBIDDEN), _json(GOOD)])
    raw, message = _create(_bedrock(stack, "recovers"), "bedrock")
    assert "NL91" not in raw.http_response.text
    assert GOOD not in raw.http_response.text
    assert message.stop_reason == "refusal"
    assert len(_turns(double)) == 1, "no retry was sent: the caller's signature cannot sign it"


def test_a_bedrock_answer_is_recovered_with_the_sidecars_own_key(stack, double):
    double.script(sequence=[_json(FORBIDDEN), _json(GOOD)])
    raw, message = _create(_bedrock(stack, "recovers", real_host=True), "bedrock")
    assert _text(message) == GOOD
    first, retry = _turns(double)
    assert first.headers["authorization"].startswith("AWS4-HMAC-SHA256 ")
    assert retry.headers["authorization"] == f"Bearer {BEDROCK_KEY}"
    assert "AWS4-HMAC-SHA256" not in json.dumps(retry.headers)
    assert retry.path == f"/model/{BEDROCK_MODEL}/invoke"
    assert b"NL91" not in retry.body
