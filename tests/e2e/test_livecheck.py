"""livecheck in real Envoy, driven by the official SDKs through envoy/livecheck.yaml's shape.

Envoy runs the seed configuration (examples/seed.json): these turns pass its checks (no "password" in
a question, no Dutch IBAN in an answer). The rule checks themselves are in test_rule_checks.py.
"""

from __future__ import annotations

import json
import re

import anthropic
import openai
import pytest
import yaml

from envoy_process import LIVECHECK_YAML, SEED_CONFIG
from upstream_double import Answer

MESSAGES_ANSWER = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [{"type": "text", "text": "Hello from the double."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 5, "output_tokens": 6},
}

CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "gpt-test",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Hello from the double."}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
}


def _chat_chunk(delta: dict, finish_reason=None) -> str:
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return f"data: {json.dumps(chunk)}\n\n"


def _json_answer(body: dict) -> Answer:
    return Answer(headers={"content-type": "application/json"}, body_chunks=[json.dumps(body)], chunked=False)


def test_envoy_loads_the_filter_and_logs_its_banner(livecheck_envoy):
    assert re.search(r"livecheck \d+\.\d+\.\d+ \(git [0-9a-f]{7,}(-dirty)?\)", livecheck_envoy.log()), livecheck_envoy.log()[-3000:]


def test_the_shipped_config_carries_the_seed_configuration():
    config = yaml.safe_load(LIVECHECK_YAML.read_text())
    (listener,) = config["static_resources"]["listeners"]
    (hcm,) = listener["filter_chains"][0]["filters"]
    wasm = next(f for f in hcm["typed_config"]["http_filters"] if f["name"] == "envoy.filters.http.wasm")
    shipped = json.loads(wasm["typed_config"]["config"]["configuration"]["value"])
    # The one setting it adds to the seed holds answer headers, which the flag beside it allows.
    assert shipped.pop("hold_answer_headers") is True
    assert wasm["typed_config"]["config"]["allow_on_headers_stop_iteration"] is True
    assert shipped == json.loads(SEED_CONFIG.read_text())


def test_envoy_configured_livecheck_with_the_seed(livecheck_envoy):
    log = livecheck_envoy.log()
    assert "livecheck configured: 1 agent(s)" in log, log[-3000:]
    assert "config refused" not in log


def test_anthropic_sdk_gets_the_messages_answer_through_envoy(livecheck_envoy, double):
    double.script(default=_json_answer(MESSAGES_ANSWER))
    client = anthropic.Anthropic(base_url=livecheck_envoy.url, api_key="test-key", max_retries=0)

    message = client.messages.create(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "Say hello."}]
    )

    assert message.content[0].text == "Hello from the double."
    assert message.usage.output_tokens == 6
    (sent,) = double.requests()
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    # anthropic 2.x sends the key as a bearer token (1.x used x-api-key); Envoy passes it on untouched.
    assert sent.headers["authorization"] == "Bearer test-key"
    assert "anthropic-version" in sent.headers
    assert sent.headers["accept-encoding"] == "identity"  # the route asks the vendor not to compress
    assert json.loads(sent.body)["messages"] == [{"role": "user", "content": "Say hello."}]


def test_openai_sdk_gets_the_chat_completion_through_envoy(livecheck_envoy, double):
    double.script(default=_json_answer(CHAT_ANSWER))
    client = openai.OpenAI(base_url=livecheck_envoy.url + "/v1", api_key="test-key", max_retries=0)

    completion = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "Say hello."}])

    assert completion.choices[0].message.content == "Hello from the double."
    (sent,) = double.requests()
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == "Bearer test-key"


def test_openai_sdk_streams_the_chat_completion_through_envoy(livecheck_envoy, double):
    words = ["Hello", " from", " the", " double."]
    events = [_chat_chunk({"role": "assistant", "content": ""})]
    events += [_chat_chunk({"content": w}) for w in words]
    events += [_chat_chunk({}, finish_reason="stop"), "data: [DONE]\n\n"]
    double.script(default=Answer(headers={"content-type": "text/event-stream"}, body_chunks=events, chunk_delay=0.01))
    client = openai.OpenAI(base_url=livecheck_envoy.url + "/v1", api_key="test-key", max_retries=0)

    stream = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "Say hello."}], stream=True
    )
    chunks = list(stream)

    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello from the double."
    assert chunks[-1].choices[0].finish_reason == "stop"
    (sent,) = double.requests()
    assert json.loads(sent.body)["stream"] is True
