"""The input-only APIs end to end: the official SDKs -> real Envoy running livecheck with the seed
config (examples/seed.json) -> the scripted upstream double.

Embeddings (`openai.OpenAI` on `/v1/embeddings`, `openai.AzureOpenAI` on
`/openai/deployments/{d}/embeddings`) and Anthropic Message Batches (`messages.batches.create`): the
input is checked like any question's; the answer is not the model's words, so it comes back as the
vendor sent it; a refused input is the vendor's error (400) with X-Core-Check naming the check, and
the double never receives it.
"""

from __future__ import annotations

import base64
import json
import struct

import anthropic
import openai
import pytest

from envoy_process import SEED_CONFIG
from upstream_double import Answer

SEED = json.loads(SEED_CONFIG.read_text())
BLOCKED_REPLY = SEED["agents"]["orders"]["versions"]["1"]["blocked_reply"]
REFUSED_HEADER = 'stage=input, check="no-passwords", code=input_check_failed'

FORBIDDEN = "My password is hunter2. Can you remember it for my next order?"
CLEAN = "Where is my order 4711?"
# Text the seed's output rule (`no-iban`) would withhold from an answer: no output check reads
# these answers, so it comes back as sent.
IBAN = "NL91ABNA0417164300"

EMBEDDINGS_ANSWER = json.dumps({
    "object": "list",
    "data": [
        {"object": "embedding", "index": 0, "embedding": [0.25, -0.5, 0.125]},
        {"object": "embedding", "index": 1, "embedding": [1.0, 0.0, -1.0]},
    ],
    "model": "text-embedding-3-small",
    "usage": {"prompt_tokens": 9, "total_tokens": 9},
    "note": IBAN,
})

BATCH_ANSWER = json.dumps({
    "id": "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF",
    "type": "message_batch",
    "processing_status": "in_progress",
    "request_counts": {"processing": 2, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
    "ended_at": None,
    "created_at": "2026-12-07T17:00:00Z",
    "expires_at": "2026-12-08T17:00:00Z",
    "cancel_initiated_at": None,
    "archived_at": None,
    "results_url": None,
    "note": IBAN,
})


def _answer(body: str) -> Answer:
    return Answer(headers={"content-type": "application/json"}, body_chunks=[body], chunked=False)


def _openai(envoy) -> openai.OpenAI:
    return openai.OpenAI(base_url=envoy.url + "/v1", api_key="test", max_retries=0)


def _azure(envoy) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(azure_endpoint=envoy.url, api_key="test", api_version="2024-10-21", max_retries=0)


# (client factory, the model or deployment, the upstream path it calls)
CLIENTS = {
    "openai": (_openai, "text-embedding-3-small", "/v1/embeddings"),
    "azure": (_azure, "emb-small", "/openai/deployments/emb-small/embeddings?api-version=2024-10-21"),
}
clients = pytest.mark.parametrize("client", sorted(CLIENTS))


def _anthropic(envoy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=envoy.url, api_key="test", max_retries=0)


def _batch(*requests: tuple[str, str]) -> list[dict]:
    return [
        {"custom_id": custom_id, "params": {"model": "claude-sonnet-4-5", "max_tokens": 64,
                                            "messages": [{"role": "user", "content": question}]}}
        for custom_id, question in requests
    ]


@clients
def test_a_clean_embeddings_input_is_forwarded_and_its_answer_returned_untouched(livecheck_envoy, double, client):
    make, model, path = CLIENTS[client]
    double.script(default=_answer(EMBEDDINGS_ANSWER))

    raw = make(livecheck_envoy).embeddings.with_raw_response.create(
        model=model, input=[CLEAN, "a second text"], encoding_format="float")

    assert raw.http_response.content == EMBEDDINGS_ANSWER.encode()
    assert "x-core-check" not in raw.headers
    assert raw.headers["x-core-response-id"].startswith("lc_")
    result = raw.parse()
    assert [d.embedding for d in result.data] == [[0.25, -0.5, 0.125], [1.0, 0.0, -1.0]]
    (received,) = double.requests()
    assert received.path == path
    assert json.loads(received.body)["input"] == [CLEAN, "a second text"]


@clients
def test_the_sdks_default_base64_embeddings_come_back_as_sent(livecheck_envoy, double, client):
    """Without `encoding_format` the SDK asks for base64 and decodes it itself: the answer's bytes
    reach it untouched."""
    make, model, _path = CLIENTS[client]
    vector = [0.5, -0.25]
    encoded = base64.b64encode(struct.pack("<2f", *vector)).decode()
    answer = json.dumps({"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": encoded}],
                         "model": model, "usage": {"prompt_tokens": 5, "total_tokens": 5}})
    double.script(default=_answer(answer))

    result = make(livecheck_envoy).embeddings.create(model=model, input=CLEAN)

    assert result.data[0].embedding == vector
    (received,) = double.requests()
    assert json.loads(received.body)["encoding_format"] == "base64"


@clients
def test_a_refused_embeddings_input_raises_bad_request_and_never_reaches_the_double(livecheck_envoy, double, client):
    make, model, _path = CLIENTS[client]
    double.script(default=_answer(EMBEDDINGS_ANSWER))

    with pytest.raises(openai.BadRequestError) as caught:
        make(livecheck_envoy).embeddings.create(model=model, input=["fine", FORBIDDEN], encoding_format="float")

    error = caught.value
    assert error.status_code == 400
    assert error.response.headers["x-core-check"] == REFUSED_HEADER
    assert error.response.json() == {"error": {"message": BLOCKED_REPLY, "type": "invalid_request_error",
                                               "param": None, "code": None}}
    assert double.requests() == [], "a refused input reached upstream"


@clients
def test_token_arrays_cannot_be_read_and_are_refused(livecheck_envoy, double, client):
    make, model, _path = CLIENTS[client]
    double.script(default=_answer(EMBEDDINGS_ANSWER))

    with pytest.raises(openai.BadRequestError) as caught:
        make(livecheck_envoy).embeddings.create(model=model, input=[[9906, 1917]], encoding_format="float")

    message = caught.value.response.json()["error"]["message"]
    assert message.startswith("input[0] must be a string or an array of strings"), message
    assert "x-core-check" not in caught.value.response.headers
    assert double.requests() == []


def test_a_clean_batch_is_forwarded_and_its_answer_returned_untouched(livecheck_envoy, double):
    double.script(default=_answer(BATCH_ANSWER))
    requests = _batch(("order-1", CLEAN), ("order-2", "And order 4712?"))
    # A request may ask for a stream: a batch never streams.
    requests[1]["params"]["stream"] = True

    raw = _anthropic(livecheck_envoy).messages.batches.with_raw_response.create(requests=requests)

    assert raw.http_response.content == BATCH_ANSWER.encode()
    assert "x-core-check" not in raw.headers
    batch = raw.parse()
    assert (batch.id, batch.processing_status) == ("msgbatch_013Zva2CMHLNnXjNJJKqJ2EF", "in_progress")
    (received,) = double.requests()
    assert received.path == "/v1/messages/batches"
    assert json.loads(received.body) == {"requests": requests}


def test_a_batch_with_one_forbidden_request_is_refused_whole_naming_its_custom_id(livecheck_envoy, double):
    double.script(default=_answer(BATCH_ANSWER))
    requests = _batch(("order-1", CLEAN), ("order-2", FORBIDDEN), ("order-3", "Thanks!"))

    with pytest.raises(anthropic.BadRequestError) as caught:
        _anthropic(livecheck_envoy).messages.batches.create(requests=requests)

    error = caught.value
    assert error.status_code == 400
    assert error.response.headers["x-core-check"] == REFUSED_HEADER
    body = error.response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    message = body["error"]["message"]
    assert 'custom_id "order-2"' in message, message
    assert "hunter2" not in message and BLOCKED_REPLY not in message
    assert double.requests() == [], "a request of a refused batch reached upstream"
