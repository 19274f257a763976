"""Anthropic's Messages streamed on Amazon Bedrock (`/model/{model}/invoke-with-response-stream`), end
to end: the official `anthropic.AnthropicBedrock` client (dummy AWS credentials; it signs with botocore
and reads the answer with botocore's event-stream decoder) -> real Envoy running livecheck.wasm -> the
UPSTREAM DOUBLE answering Messages events inside AWS event-stream `chunk` messages
(bedrock_stream_double.py), with recovery through the REAL livecheck-judge sidecar.

Each through `messages.create(stream=True)` and `messages.stream(...)`: a clean stream (the bytes reach
the SDK as the double wrote them), a refused question (a stream in chunks, the model never asked), a
cut at the match's first character (what the SDK read decodes as a well-framed stream ending in
Anthropic's closing events; the SDK then raises the connection error it raises after any cut, as on
`/v1/messages`), a held round recovered with the sidecar's own key, asked again at `invoke`, and an
exception Bedrock sends mid-stream, which reaches the SDK as it came (the SDK raises it, as without
livecheck).
"""

from __future__ import annotations

import json

import anthropic
import httpx2 as httpx
import pytest

from bedrock_stream_double import CONTENT_TYPE, chunk_stream, exception, read_chunks
from cut_support import Tee, assert_the_sdk_call_ended_as_after_a_cut
from envoy_process import Envoy, render_config, wasm_path
from test_vertex_bedrock import (BEDROCK_HOST, BEDROCK_KEY, BEDROCK_MODEL, BLOCKED, CLEAN, CLIENT_TIMEOUT,
                                 FORBIDDEN_QUESTION, GOOD, QUESTION, RULE, Stack, _json, _version)

STREAM_PATH = f"/model/{BEDROCK_MODEL}/invoke-with-response-stream"


@pytest.fixture(scope="module")
def stack(double, tmp_path_factory):
    s = Stack(double, tmp_path_factory.mktemp("bedrock-stream"))
    yield s
    s.close()


def _bedrock(stack, agent: str = "plain", real_host: bool = False, tee: Tee | None = None):
    headers = {"x-core-agent": agent}
    if real_host:
        headers["host"] = BEDROCK_HOST
    return anthropic.AnthropicBedrock(
        base_url=stack.envoy.url, aws_access_key="dummy", aws_secret_key="dummy", aws_region="us-east-1",
        max_retries=0, timeout=CLIENT_TIMEOUT, default_headers=headers,
        http_client=httpx.Client(transport=tee) if tee else None)


class Got:
    """What one streamed call gave: the text, the stop reason, what it raised, the response headers."""

    def __init__(self) -> None:
        self.text = ""
        self.stop_reason = None
        self.raised: BaseException | None = None
        self.headers: dict = {}


def _call(client, how: str, question: str = QUESTION) -> Got:
    got = Got()
    args = dict(model=BEDROCK_MODEL, max_tokens=256, messages=[{"role": "user", "content": question}])
    try:
        if how == "create":
            raw = client.messages.with_raw_response.create(stream=True, **args)
            got.headers = dict(raw.headers)
            for event in raw.parse():
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    got.text += event.delta.text
                elif event.type == "message_delta":
                    got.stop_reason = event.delta.stop_reason
        else:
            with client.messages.stream(**args) as stream:
                got.headers = dict(stream.response.headers)
                for text in stream.text_stream:
                    got.text += text
                got.stop_reason = stream.get_final_message().stop_reason
    except Exception as e:  # noqa: BLE001 — what the SDK raises is what is asserted
        got.raised = e
    return got


hows = pytest.mark.parametrize("how", ["create", "stream"])


@hows
def test_a_clean_stream_reaches_the_sdk_as_bedrock_sent_it(stack, double, how):
    answer = chunk_stream(["Your order ", "ships tomorrow."])
    double.script(sequence=[answer])
    tee = Tee()
    got = _call(_bedrock(stack, tee=tee), how)
    assert got.raised is None, repr(got.raised)
    assert (got.text, got.stop_reason) == (CLEAN, "end_turn")
    assert got.headers["content-type"] == CONTENT_TYPE
    assert "x-core-check" not in got.headers
    assert bytes(tee.body) == b"".join(answer.body_chunks), "byte for byte, Bedrock's padding included"
    (seen,) = double.requests()
    assert seen.path == STREAM_PATH
    assert seen.headers["authorization"].startswith("AWS4-HMAC-SHA256 ")
    assert "stream" not in json.loads(seen.body)


@hows
def test_a_forbidden_question_is_refused_in_chunks_and_never_reaches_the_model(stack, double, how):
    double.script(sequence=[chunk_stream([CLEAN])])
    tee = Tee()
    got = _call(_bedrock(stack, tee=tee), how, FORBIDDEN_QUESTION)
    assert got.raised is None, repr(got.raised)
    assert (got.text, got.stop_reason) == (BLOCKED, "refusal")
    assert 'check="no-passwords"' in got.headers["x-core-check"]
    assert got.headers["content-type"] == CONTENT_TYPE
    events, rest = read_chunks(bytes(tee.body))
    assert rest == b""
    assert events[0]["message"]["model"] == BEDROCK_MODEL, "the refusal names the path's model"
    assert double.requests() == [], "no model was asked"


@hows
def test_a_stream_is_cut_at_the_matchs_first_character(stack, double, how):
    double.script(sequence=[chunk_stream(["Pay to NL91AB", "NA0417164300 today."])])
    tee = Tee()
    got = _call(_bedrock(stack, tee=tee), how)
    # The SDK reads the closing events, then the reset that ends every cut stream without a frame:
    # the same connection error as a cut `/v1/messages` stream.
    assert_the_sdk_call_ended_as_after_a_cut("anthropic", got.raised)
    assert got.text == "Pay to "
    events, rest = read_chunks(bytes(tee.body))
    assert rest == b"", "the caller's bytes end on a whole message"
    assert "NL91" not in json.dumps(events)
    assert [e["type"] for e in events][-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[-2]["delta"]["stop_reason"] == "refusal"


@hows
def test_a_held_round_is_recovered_with_the_sidecars_own_key_at_invoke(stack, double, how):
    double.script(sequence=[chunk_stream(["Pay to NL91ABNA04", "17164300 today."]), _json(GOOD)])
    tee = Tee()
    got = _call(_bedrock(stack, "recovers", real_host=True, tee=tee), how)
    assert got.raised is None, repr(got.raised)
    assert (got.text, got.stop_reason) == (GOOD, "end_turn")
    first, retry = double.requests()
    assert first.path == STREAM_PATH
    assert retry.path == f"/model/{BEDROCK_MODEL}/invoke", "a retry is never streamed"
    assert retry.headers["authorization"] == f"Bearer {BEDROCK_KEY}"
    assert RULE.encode() in retry.body
    events, rest = read_chunks(bytes(tee.body))
    assert rest == b"" and "NL91" not in json.dumps(events)


@hows
def test_a_held_round_the_sidecar_cannot_ask_again_ends_as_the_blocked_reply(stack, double, how):
    double.script(sequence=[chunk_stream(["Pay to NL91ABNA04", "17164300 today."]), _json(GOOD)])
    tee = Tee()
    got = _call(_bedrock(stack, "recovers", tee=tee), how)
    # The round is cut with the blocked reply as its answer, then the stream is reset, as any cut.
    assert_the_sdk_call_ended_as_after_a_cut("anthropic", got.raised)
    assert got.text == BLOCKED
    assert len(double.requests()) == 1, "no retry: the caller's signature cannot sign it"
    events, rest = read_chunks(bytes(tee.body))
    assert rest == b"" and "NL91" not in json.dumps(events) and "Pay to" not in json.dumps(events)
    assert events[-2]["delta"]["stop_reason"] == "refusal"


@hows
def test_an_exception_mid_stream_reaches_the_sdk_as_bedrock_sent_it(stack, double, how):
    answer = chunk_stream(["Your order "])
    # The model fails after its first delta: the rest of its events never come.
    answer.body_chunks = answer.body_chunks[:3] + [exception("modelStreamErrorException", "The model failed.")]
    double.script(sequence=[answer])
    tee = Tee()
    got = _call(_bedrock(stack, tee=tee), how)
    assert isinstance(got.raised, anthropic.APIStatusError), repr(got.raised)
    assert "modelStreamErrorException" in str(got.raised)
    assert got.text == "Your order "
    assert bytes(tee.body).endswith(answer.body_chunks[-1]), "the exception as it came"


@pytest.fixture(scope="module")
def framed_envoy(double, tmp_path_factory):
    """Envoy with the opt-in length frame (`stream_frame_bytes`, one request per connection, as it needs) and
    the `plain` rules without tool checks (a stream whose calls are checked is never framed)."""
    version = _version(False)
    del version["1"]["allowed_tools"]
    policy = {"agent_header": "x-core-agent", "default_agent": "plain", "stream_frame_bytes": 64 * 1024,
              "agents": {"plain": {"published": "1", "versions": version}}}
    config = render_config(wasm_path("livecheck.wasm"), double.port, one_request_per_connection=True,
                           plugin_configuration=json.dumps(policy))
    envoy = Envoy(config, tmp_path_factory.mktemp("envoy-bedrock-stream-framed"))
    yield envoy
    envoy.stop()


@hows
def test_with_stream_frame_bytes_a_cut_stream_ends_normally_in_the_sdk(framed_envoy, double, how):
    """The frame pads the cut's closing chunks with whole event-stream messages of a type no service model
    declares, to the announced length: the SDK's Bedrock decoder skips them and the call ends normally,
    the refusal handed over as Anthropic's own (`stop_reason: refusal`)."""
    double.script(sequence=[chunk_stream(["Pay to NL91AB", "NA0417164300 today."])])
    tee = Tee()
    client = anthropic.AnthropicBedrock(
        base_url=f"http://127.0.0.1:{framed_envoy.port}", aws_access_key="dummy", aws_secret_key="dummy",
        aws_region="us-east-1", max_retries=0, timeout=CLIENT_TIMEOUT, http_client=httpx.Client(transport=tee))
    got = _call(client, how)
    assert got.raised is None, repr(got.raised)
    assert (got.text, got.stop_reason) == ("Pay to ", "refusal")
    assert got.headers["content-length"] == str(64 * 1024)
    assert len(bytes(tee.body)) == 64 * 1024
