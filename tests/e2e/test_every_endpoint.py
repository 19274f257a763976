"""Every generating endpoint is checked or refused: a question holding the forbidden word POSTed to each
path that makes the vendors' models generate (and to made-up and disguised ones), through real Envoy
running the shipped envoy/livecheck.yaml with its own policy (input: no "password"). Each request is
either read and refused by the input check, or refused as a path livecheck does not read; the upstream
double never receives the forbidden text.
"""

from __future__ import annotations

import json

import pytest

import raw_client
from envoy_process import Envoy, render_config, wasm_path
from upstream_double import Answer

FORBIDDEN = "my password is hunter2"


def _anthropic(**extra) -> dict:
    return {"max_tokens": 16, "messages": [{"role": "user", "content": FORBIDDEN}], **extra}


CHAT = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": FORBIDDEN}]}
COMPLETIONS = {"model": "gpt-3.5-turbo-instruct", "prompt": FORBIDDEN, "max_tokens": 16}
GEMINI = {"contents": [{"role": "user", "parts": [{"text": FORBIDDEN}]}]}
CONVERSE = {"messages": [{"role": "user", "content": [{"text": FORBIDDEN}]}]}
BEDROCK_CLAUDE = "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0"
VERTEX_CLAUDE = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514"
VERTEX_GEMINI = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash"
AZURE = "/openai/deployments/prod-4o"
API_VERSION = "?api-version=2024-10-21"

# Paths livecheck reads: the input check refuses the question.
READ = [
    ("/v1/messages", _anthropic(model="claude-sonnet-4-5")),
    ("/v1/messages?beta=true", _anthropic(model="claude-sonnet-4-5", stream=True)),
    ("/v1/chat/completions", CHAT),
    ("/openai/v1/chat/completions", {**CHAT, "stream": True}),
    ("/v1/responses", {"model": "gpt-4.1-mini", "input": FORBIDDEN}),
    ("/v1/completions", COMPLETIONS),
    ("/v1/completions", {**COMPLETIONS, "stream": True}),
    ("/v1/complete", {"model": "claude-2.1", "prompt": f"\n\nHuman: {FORBIDDEN}\n\nAssistant:",
                      "max_tokens_to_sample": 16}),
    ("/v1/embeddings", {"model": "text-embedding-3-small", "input": FORBIDDEN}),
    ("/v1/messages/batches", {"requests": [
        {"custom_id": "clean-1", "params": {**_anthropic(model="claude-sonnet-4-5"),
                                            "messages": [{"role": "user", "content": "hello"}]}},
        {"custom_id": "forbidden-2", "params": _anthropic(model="claude-sonnet-4-5")}]}),
    (f"{AZURE}/chat/completions{API_VERSION}", CHAT),
    (f"{AZURE}/chat/completions{API_VERSION}", {**CHAT, "stream": True}),
    (f"{AZURE}/completions{API_VERSION}", COMPLETIONS),
    (f"{AZURE}/embeddings{API_VERSION}", {"input": [FORBIDDEN]}),
    (f"{AZURE}/responses{API_VERSION}", {"model": "prod-4o", "input": FORBIDDEN}),
    (f"/openai/responses{API_VERSION}", {"model": "prod-4o", "input": FORBIDDEN}),
    (f"{VERTEX_CLAUDE}:rawPredict", _anthropic(anthropic_version="vertex-2023-10-16")),
    (f"{VERTEX_CLAUDE}:streamRawPredict", _anthropic(anthropic_version="vertex-2023-10-16", stream=True)),
    (f"{BEDROCK_CLAUDE}/invoke", _anthropic(anthropic_version="bedrock-2023-05-31")),
    (f"{BEDROCK_CLAUDE}/invoke-with-response-stream", _anthropic(anthropic_version="bedrock-2023-05-31")),
    ("/v1beta/models/gemini-2.5-flash:generateContent?key=AIza-dummy", GEMINI),
    ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", GEMINI),
    ("/v1/models/gemini-2.5-flash:generateContent", GEMINI),
    (f"{VERTEX_GEMINI}:generateContent", GEMINI),
    (f"{VERTEX_GEMINI}:streamGenerateContent?alt=sse", GEMINI),
    # Without `alt=sse`: one JSON array.
    ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?key=AIza-dummy", GEMINI),
    (f"{VERTEX_GEMINI}:streamGenerateContent", GEMINI),
    # An inference-profile ARN as the model id, encoded as one segment as the SDKs encode it.
    ("/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A111122223333%3Ainference-profile%2F"
     "us.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke", _anthropic(anthropic_version="bedrock-2023-05-31")),
    ("/model/amazon.nova-pro-v1%3A0/converse", CONVERSE),
    ("/model/amazon.nova-pro-v1%3A0/converse-stream", CONVERSE),
]

# Paths livecheck does not read (yet): refused, whatever they hold.
REFUSED = [
    ("POST", "/v1beta/models/gemini-2.5-flash:countTokens", GEMINI),
    ("POST", f"{VERTEX_GEMINI}:streamGenerateContent?alt=proto", GEMINI),
    ("POST", "/v1/batches", {"input_file_id": "file-1", "endpoint": "/v1/chat/completions",
                             "completion_window": "24h"}),
    ("POST", "/v1/files", {"purpose": "batch", "text": FORBIDDEN}),
    ("POST", "/v1/conversations", {"items": [{"type": "message", "role": "user", "content": FORBIDDEN}]}),
    ("POST", "/v1/images/generations", {"prompt": FORBIDDEN}),
    ("POST", f"{AZURE}/images/generations{API_VERSION}", {"prompt": FORBIDDEN}),
    # Made up, or a read path disguised.
    ("POST", "/v1/made-up", CHAT),
    ("POST", "/v2/messages", _anthropic(model="m")),
    ("POST", "/V1/MESSAGES", _anthropic(model="m")),
    ("POST", "/v1/messages/extra", _anthropic(model="m")),
    ("POST", "/v1/chat/completions/x", CHAT),
    ("POST", "/v1/chat%2Fcompletions", CHAT),
    ("POST", "/v1/messages;v=1", _anthropic(model="m")),
    ("POST", "/v1/messages/count_tokens/../../messages", _anthropic(model="m")),
    ("PUT", "/v1/messages", _anthropic(model="m")),
    ("PATCH", "/v1/chat/completions", CHAT),
    ("post", "/v1/messages", _anthropic(model="m")),
]


@pytest.fixture(scope="module")
def shipped_envoy(double, tmp_path_factory):
    """envoy/livecheck.yaml as shipped (its own policy), re-pointed at the double."""
    envoy = Envoy(render_config(wasm_path("livecheck.wasm"), double.port), tmp_path_factory.mktemp("envoy-shipped"))
    yield envoy
    envoy.stop()


def _send(envoy: Envoy, method: str, path: str, body: dict) -> raw_client.Reply:
    headers = {"content-type": "application/json"}
    if "messages" in body and "model" not in body or "/v1/messages" in path or "/v1/complete" in path:
        headers["anthropic-version"] = "2023-06-01"
    return raw_client.send(envoy.port, method, path, headers, [json.dumps(body).encode()], chunk_delay=0)


def _no_forbidden_text_upstream(double) -> None:
    reached = [r.path for r in double.requests() if FORBIDDEN.encode() in r.body]
    assert reached == [], f"the forbidden text reached the upstream on {reached}"


@pytest.mark.parametrize("path,body", READ, ids=[f"{p}{' stream' if b.get('stream') else ''}" for p, b in READ])
def test_a_read_endpoint_refuses_the_forbidden_question(shipped_envoy, double, path, body):
    double.script(default=Answer(body_chunks=['{"never": "asked"}'], headers={"content-type": "application/json"}))
    reply = _send(shipped_envoy, "POST", path, body)
    check = reply.headers.get("x-core-check", "")
    assert 'check="no-passwords"' in check and "input_check_failed" in check, (reply.status, check, reply.body[:300])
    assert reply.status in (200, 400), reply.status
    _no_forbidden_text_upstream(double)


@pytest.mark.parametrize("method,path,body", REFUSED, ids=[f"{m} {p}" for m, p, _ in REFUSED])
def test_an_unread_endpoint_is_refused(shipped_envoy, double, method, path, body):
    double.script(default=Answer(body_chunks=['{"never": "asked"}'], headers={"content-type": "application/json"}))
    reply = _send(shipped_envoy, method, path, body)
    if reply.status == 400 and "x-core-check" not in reply.headers:
        # Envoy itself refused a path it cannot parse; nothing went upstream either.
        assert double.requests() == []
    else:
        assert reply.status == 403, (reply.status, reply.body[:300])
        assert reply.headers.get("x-core-check") == "code=unread_path"
        assert b"livecheck does not check" in reply.body
        assert b"AIza-dummy" not in reply.body, "the query is never echoed"
    _no_forbidden_text_upstream(double)
    assert [r.path for r in double.requests()] == [], "nothing of a refused request reaches the upstream"


def test_reading_methods_and_token_counting_still_pass(shipped_envoy, double):
    double.script(default=Answer(body_chunks=['{"data": []}'], headers={"content-type": "application/json"}))
    reply = raw_client.send(shipped_envoy.port, "GET", "/v1/models", {}, [], chunk_delay=0)
    assert (reply.status, reply.body) == (200, b'{"data": []}')
    assert [r.path for r in double.requests()] == ["/v1/models"]
    double.script(default=Answer(body_chunks=['{"input_tokens": 12}'], headers={"content-type": "application/json"}))
    reply = _send(shipped_envoy, "POST", "/v1/messages/count_tokens", _anthropic(model="m"))
    assert (reply.status, reply.body) == (200, b'{"input_tokens": 12}')
    assert [r.path for r in double.requests()] == ["/v1/messages/count_tokens"]


def test_refusals_and_passes_are_counted_in_envoys_stats(shipped_envoy, double):
    double.script(default=Answer(body_chunks=["{}"], headers={"content-type": "application/json"}))
    before = shipped_envoy.stats()
    _send(shipped_envoy, "POST", "/v1/files", {})
    _send(shipped_envoy, "POST", "/v1/messages/batches/b1/cancel", {})
    after = shipped_envoy.stats()
    for name in ("livecheck.unread.refused", "livecheck.unread.forwarded"):
        key = next(k for k in after if k.endswith(name))
        assert after[key] - before.get(key, 0) == 1, name
