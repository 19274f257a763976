"""Recovery for Google Gemini and Amazon Bedrock Converse, end to end: the official google-genai client
(a dummy API key) and boto3's `bedrock-runtime` client (dummy AWS credentials) -> real Envoy running
livecheck.wasm -> the scripted upstream double (a test double, not a model) speaking each vendor's
shape, with recovery through the REAL livecheck-judge sidecar.

Gemini: an answer failing `no-iban` (which recovers) is asked again by the sidecar at
`:generateContent` with the caller's own `x-goog-api-key`, streamed or not, and google-genai gets the
second answer. Converse: the caller signs each request (SigV4 over the body), so the sidecar asks
again only with its own key for the upstream (`[[upstreams]] api_key_env`, sent as `Authorization:
Bearer`); without one nothing is sent and the answer is withheld as Bedrock's guardrail stop.

The keyed Converse client signs for the real Bedrock host (sent as the Host header to Envoy, as
envoy/bedrock-anthropic.yaml asks of callers), whose `[[upstreams]]` entry has the key; the unkeyed
one reaches Envoy as 127.0.0.1, whose entry has none.
"""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.config import Config
from google import genai
from google.genai import types

from envoy_process import JudgeSidecar, envoy_for_judge
from upstream_double import Answer

GEMINI_MODEL = "gemini-2.5-flash"
GEMINI_KEY = "AIza-dummy-e2e-key"
BEDROCK_MODEL = "us.anthropic.claude-3-5-sonnet-20241022-v2:0"
BEDROCK_HOST = "bedrock-runtime.us-east-1.amazonaws.com"
BEDROCK_KEY = "bedrock-api-key-e2e"
BEDROCK_KEY_ENV = "LIVECHECK_E2E_BEDROCK_KEY"

RULE = "Never state a bank account number."
QUESTION = "Where do I pay for order 4711?"
FORBIDDEN = "Pay to NL91ABNA0417164300 today."
GOOD = "I'm not allowed to share bank details; please pay in the shop."
BLOCKED = "I cannot help with that."
CLIENT_TIMEOUT = 15.0

POLICY = {
    "agent_header": "x-core-agent",
    "default_agent": "recovers",
    "agents": {"recovers": {"published": "1", "versions": {"1": {
        "blocked_reply": BLOCKED,
        "recover_attempts": 1,
        "live_checks": [
            {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
             "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18, "recover": True, "description": RULE},
        ],
    }}}},
}


class Stack:
    def __init__(self, double, workdir) -> None:
        upstream = {"base_url": f"http://127.0.0.1:{double.port}", "timeout_ms": 5000}
        self.judge = JudgeSidecar(
            workdir / "judge", [{"api": "openai", "base_url": "http://127.0.0.1:9", "models": ["*"]}],
            arrays={"upstreams": [
                # Callers that reach Envoy at 127.0.0.1 (google-genai; the unkeyed Bedrock caller).
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
    s = Stack(double, tmp_path_factory.mktemp("gemini-converse-recovery"))
    yield s
    s.close()


def _retries(double) -> list:
    """The sidecar's retries among the requests the double got as the model: they carry the rule."""
    return [r for r in double.requests() if RULE.encode() in r.body]


# --- Gemini -----------------------------------------------------------------------------------------------


def _gemini(stack) -> genai.Client:
    return genai.Client(api_key=GEMINI_KEY, http_options=types.HttpOptions(
        base_url=stack.envoy.url, timeout=int(CLIENT_TIMEOUT * 1000)))


def _gemini_body(text: str, finish: str | None = "STOP") -> dict:
    candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 7, "totalTokenCount": 16},
            "modelVersion": GEMINI_MODEL, "responseId": "resp-e2e"}


def _gemini_json(text: str) -> Answer:
    return Answer(headers={"content-type": "application/json"}, body_chunks=[json.dumps(_gemini_body(text))],
                  chunked=False)


def _gemini_sse(pieces: list[str]) -> Answer:
    last = len(pieces) - 1
    chunks = [f"data: {json.dumps(_gemini_body(p, 'STOP' if i == last else None))}\r\n\r\n"
              for i, p in enumerate(pieces)]
    return Answer(headers={"content-type": "text/event-stream"}, body_chunks=chunks, chunk_delay=0.01)


def test_a_gemini_answer_is_recovered_with_the_callers_key(stack, double):
    double.script(sequence=[_gemini_json(FORBIDDEN), _gemini_json(GOOD)])
    client = _gemini(stack)  # kept: a Client closes its connections once collected
    response = client.models.generate_content(model=GEMINI_MODEL, contents=QUESTION)
    assert response.text == GOOD
    assert response.candidates[0].finish_reason == types.FinishReason.STOP
    first, retry = double.requests()
    assert first.path.endswith(f"/models/{GEMINI_MODEL}:generateContent")
    assert retry.path == first.path
    assert retry.headers["x-goog-api-key"] == GEMINI_KEY
    assert b"NL91" not in retry.body, "the rejected answer is never part of the retry"
    body = json.loads(retry.body)
    assert RULE in json.dumps(body.get("systemInstruction") or body.get("system_instruction"))
    assert body["contents"] == json.loads(first.body)["contents"]


def test_a_streamed_gemini_answer_is_recovered_as_its_chunks(stack, double):
    double.script(sequence=[_gemini_sse(["Pay to NL91AB", "NA0417164300 today."]), _gemini_json(GOOD)])
    client = _gemini(stack)
    chunks = list(client.models.generate_content_stream(model=GEMINI_MODEL, contents=QUESTION))
    assert "".join(c.text or "" for c in chunks) == GOOD
    assert not any("NL91" in (c.text or "") for c in chunks)
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    first, retry = double.requests()
    assert first.path.endswith(f"/models/{GEMINI_MODEL}:streamGenerateContent?alt=sse")
    assert retry.path == first.path.replace(":streamGenerateContent?alt=sse", ":generateContent"), \
        "a retry is never streamed"
    assert retry.headers["x-goog-api-key"] == GEMINI_KEY


# --- Converse ---------------------------------------------------------------------------------------------


def _bedrock(stack, real_host: bool):
    client = boto3.client(
        "bedrock-runtime", endpoint_url=stack.envoy.url, region_name="us-east-1",
        aws_access_key_id="dummy", aws_secret_access_key="dummy",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=CLIENT_TIMEOUT))
    if real_host:
        # Signed for the real host, as a caller behind envoy/bedrock-anthropic.yaml must.
        def host(request, **_):
            request.headers["host"] = BEDROCK_HOST
        client.meta.events.register("before-sign.bedrock-runtime.Converse", host)
    return client


def _converse_json(text: str) -> Answer:
    body = {"output": {"message": {"role": "assistant", "content": [{"text": text}]}}, "stopReason": "end_turn",
            "usage": {"inputTokens": 9, "outputTokens": 7, "totalTokens": 16}, "metrics": {"latencyMs": 120}}
    return Answer(headers={"content-type": "application/json"}, body_chunks=[json.dumps(body)], chunked=False)


def _converse(client):
    return client.converse(modelId=BEDROCK_MODEL, messages=[{"role": "user", "content": [{"text": QUESTION}]}],
                           system=[{"text": "You answer questions about orders."}])


def _converse_text(response) -> str:
    return "".join(b.get("text", "") for b in response["output"]["message"]["content"])


def test_a_converse_answer_is_recovered_with_the_sidecars_own_key(stack, double):
    double.script(sequence=[_converse_json(FORBIDDEN), _converse_json(GOOD)])
    response = _converse(_bedrock(stack, real_host=True))
    assert _converse_text(response) == GOOD
    assert response["stopReason"] == "end_turn"
    assert response["usage"]["totalTokens"] == 32, "both answers' tokens"
    first, retry = double.requests()
    assert first.headers["authorization"].startswith("AWS4-HMAC-SHA256 ")
    assert retry.headers["authorization"] == f"Bearer {BEDROCK_KEY}"
    assert "AWS4-HMAC-SHA256" not in json.dumps(retry.headers)
    assert retry.path == first.path
    assert retry.path.endswith("/converse")
    assert b"NL91" not in retry.body
    system = json.loads(retry.body)["system"]
    assert system[0] == {"text": "You answer questions about orders."}
    assert RULE in system[-1]["text"]


def test_a_converse_answer_is_withheld_when_the_sidecar_has_no_key_of_its_own(stack, double):
    double.script(sequence=[_converse_json(FORBIDDEN), _converse_json(GOOD)])
    response = _converse(_bedrock(stack, real_host=False))
    assert response["stopReason"] == "guardrail_intervened"
    assert _converse_text(response) == BLOCKED
    assert len(double.requests()) == 1, "no retry was sent: the caller's signature cannot sign it"
    assert _retries(double) == []
