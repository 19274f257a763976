"""Recovery end to end: the official SDKs -> real Envoy running livecheck.wasm -> the scripted upstream
double, with the retry going through the REAL livecheck-judge sidecar (started here, its `[[upstreams]]`
naming the double for the turn's host).

The double (a test double, not a model) first answers with a forbidden IBAN, then, asked again, with an
acceptable answer. The SDK gets only the second answer, with the usage of both; the retry the double
received carries the broken rule and never the rejected answer or a tool; streamed turns get the
second answer re-emitted as the vendor's events. When every retry fails too, the first answer is
withheld with X-Core-Check naming the check that stopped it.
"""

from __future__ import annotations

import json
import time

import anthropic
import openai
import pytest

from cut_support import x_core_check
from envoy_process import DELIVERY, HOLDS_ANSWER_HEADERS, STATS, Envoy, JudgeSidecar, envoy_for_judge
from upstream_double import Answer

RULE = "Never state a bank account number."
QUESTION = "Where do I pay for order 4711?"
FORBIDDEN = "Pay to NL91ABNA0417164300 today."
ANOTHER_FORBIDDEN = "Use NL02RABO0123456789 instead."
GOOD = "I'm not allowed to share bank details; please pay in the shop."
BLOCKED = "I cannot help with that."
CLIENT_TIMEOUT = 15.0

CONFIG = {
    "default_agent": "pay",
    "agents": {
        "pay": {"published": "1", "versions": {"1": {
            "blocked_reply": BLOCKED,
            "recover_attempts": 2,
            "live_checks": [
                {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
                 "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18, "recover": True, "description": RULE},
            ],
        }}},
    },
}

TOOL = {"name": "refund", "description": "Refund an order.",
        "input_schema": {"type": "object", "properties": {"order": {"type": "string"}}}}
OPENAI_TOOL = {"type": "function", "function": {"name": "refund", "parameters": TOOL["input_schema"]}}


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
    s = Stack(double, tmp_path_factory.mktemp("recovery"))
    yield s
    s.close()


# --- what the double answers ---------------------------------------------------------------------------


def _answer(vendor: str, text: str) -> dict:
    if vendor == "anthropic":
        return {"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-test",
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": 17, "output_tokens": 23}}
    if vendor == "chat":
        return {"id": "chatcmpl-up", "object": "chat.completion", "created": 1790000000, "model": "gpt-4.1-mini",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 17, "completion_tokens": 23, "total_tokens": 40}}
    return {"id": "resp_up", "object": "response", "created_at": 1790000000, "status": "completed",
            "model": "gpt-4.1-mini", "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "output": [{"type": "message", "id": "msg_up", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": {"input_tokens": 17, "output_tokens": 23, "total_tokens": 40}}


def _json(body: dict) -> Answer:
    return Answer(headers={"content-type": "application/json"}, body_chunks=[json.dumps(body)], chunked=False)


def _sse(event, data) -> str:
    text = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "") + f"data: {text}\n\n"


def _stream(vendor: str, pieces: list[str]) -> Answer:
    """A streamed first answer saying `pieces`, with usage 10 in / 5 out."""
    if vendor == "anthropic":
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
    elif vendor == "chat":
        def chunk(delta, finish=None):
            return _sse(None, {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1,
                               "model": "gpt-4.1-mini", "choices": [{"index": 0, "delta": delta,
                                                                     "finish_reason": finish}]})
        events = [chunk({"role": "assistant", "content": ""})] + [chunk({"content": p}) for p in pieces]
        events += [chunk({}, "stop"),
                   _sse(None, {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1,
                               "model": "gpt-4.1-mini", "choices": [],
                               "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
                   _sse(None, "[DONE]")]
    else:
        text = "".join(pieces)
        item = {"type": "message", "id": "msg_s", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}

        def response(status, output, usage=None):
            return {"id": "resp_s", "object": "response", "created_at": 1, "status": status, "model": "gpt-4.1-mini",
                    "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                    "usage": usage}
        seq = iter(range(1000))
        events = [_sse("response.created", {"type": "response.created", "sequence_number": next(seq),
                                            "response": response("in_progress", [])}),
                  _sse("response.output_item.added", {"type": "response.output_item.added", "sequence_number": next(seq),
                                                      "output_index": 0, "item": {**item, "status": "in_progress",
                                                                                  "content": []}}),
                  _sse("response.content_part.added", {"type": "response.content_part.added",
                                                       "sequence_number": next(seq), "item_id": "msg_s",
                                                       "output_index": 0, "content_index": 0,
                                                       "part": {"type": "output_text", "text": "",
                                                                "annotations": []}})]
        events += [_sse("response.output_text.delta", {"type": "response.output_text.delta",
                                                       "sequence_number": next(seq), "item_id": "msg_s",
                                                       "output_index": 0, "content_index": 0, "delta": p,
                                                       "logprobs": []}) for p in pieces]
        events += [_sse("response.output_text.done", {"type": "response.output_text.done", "sequence_number": next(seq),
                                                      "item_id": "msg_s", "output_index": 0, "content_index": 0,
                                                      "text": text, "logprobs": []}),
                   _sse("response.output_item.done", {"type": "response.output_item.done", "sequence_number": next(seq),
                                                      "output_index": 0, "item": item}),
                   _sse("response.completed", {"type": "response.completed", "sequence_number": next(seq),
                                               "response": response("completed", [item],
                                                                    {"input_tokens": 10, "output_tokens": 5,
                                                                     "total_tokens": 15})})]
    return Answer(headers={"content-type": "text/event-stream"}, body_chunks=events, chunk_delay=0.01)


# --- the SDKs ------------------------------------------------------------------------------------------


def _anthropic(envoy: Envoy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=envoy.url, api_key="sk-ant-e2e", max_retries=0, timeout=CLIENT_TIMEOUT)


def _openai(envoy: Envoy) -> openai.OpenAI:
    return openai.OpenAI(base_url=envoy.url + "/v1", api_key="sk-openai-e2e", max_retries=0, timeout=CLIENT_TIMEOUT)


def _create(envoy: Envoy, vendor: str):
    """One non-streamed turn with a tool on offer: (raw response, text, (input, output) usage)."""
    if vendor == "anthropic":
        raw = _anthropic(envoy).messages.with_raw_response.create(
            model="claude-test", max_tokens=256, tools=[TOOL], messages=[{"role": "user", "content": QUESTION}])
        m = raw.parse()
        return raw, "".join(b.text for b in m.content if b.type == "text"), (m.usage.input_tokens, m.usage.output_tokens)
    if vendor == "chat":
        raw = _openai(envoy).chat.completions.with_raw_response.create(
            model="gpt-4.1-mini", tools=[OPENAI_TOOL], messages=[{"role": "user", "content": QUESTION}])
        c = raw.parse()
        return raw, c.choices[0].message.content, (c.usage.prompt_tokens, c.usage.completion_tokens)
    raw = _openai(envoy).responses.with_raw_response.create(
        model="gpt-4.1-mini", input=QUESTION,
        tools=[{"type": "function", "name": "refund", "parameters": TOOL["input_schema"]}])
    r = raw.parse()
    return raw, r.output_text, (r.usage.input_tokens, r.usage.output_tokens)


def _stream_turn(envoy: Envoy, vendor: str):
    """One streamed turn through the SDK's own stream accumulation: (text, (input, output) usage)."""
    if vendor == "anthropic":
        with _anthropic(envoy).messages.stream(model="claude-test", max_tokens=256,
                                               messages=[{"role": "user", "content": QUESTION}]) as stream:
            m = stream.get_final_message()
        return "".join(b.text for b in m.content if b.type == "text"), (m.usage.input_tokens, m.usage.output_tokens)
    if vendor == "chat":
        text, usage = "", None
        for chunk in _openai(envoy).chat.completions.create(
                model="gpt-4.1-mini", stream=True, stream_options={"include_usage": True},
                messages=[{"role": "user", "content": QUESTION}]):
            for choice in chunk.choices:
                text += choice.delta.content or ""
            if chunk.usage is not None:
                usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        return text, usage
    with _openai(envoy).responses.stream(model="gpt-4.1-mini", input=QUESTION) as stream:
        r = stream.get_final_response()
    return r.output_text, (r.usage.input_tokens, r.usage.output_tokens)


def _retry_requests(double) -> list[dict]:
    """The requests the double got from the sidecar (the retries): each carries the rule's instruction."""
    return [json.loads(r.body) for r in double.requests() if RULE.encode() in r.body]


vendors = pytest.mark.parametrize("vendor", ["anthropic", "chat", "responses"])


@vendors
def test_the_sdk_gets_only_the_answer_that_passed_with_the_usage_of_both(stack, double, vendor):
    double.script(sequence=[_json(_answer(vendor, FORBIDDEN)), _json(_answer(vendor, GOOD))])
    raw, text, usage = _create(stack.envoy, vendor)
    assert text == GOOD
    assert usage == (34, 46), "both attempts count"
    assert raw.headers.get("x-core-check") is None, "a recovered turn names no check"
    assert raw.headers.get("x-core-response-id", "").startswith("lc_")
    upstream = double.requests()
    assert len(upstream) == 2, "the turn, then one retry"
    (retry,) = _retry_requests(double)
    dumped = json.dumps(retry)
    assert "NL91" not in dumped, "the model never sees the rejected answer"
    assert "refund" not in dumped and "tools" not in retry, "a retry can call no tool"
    assert not retry.get("stream")
    assert QUESTION in dumped, "the same conversation"


@vendors
def test_a_streamed_turn_gets_the_passing_answer_as_events(stack, double, vendor):
    double.script(sequence=[_stream(vendor, ["Pay to NL91ABNA04", "17164300 today."]),
                            _json(_answer(vendor, GOOD))])
    text, usage = _stream_turn(stack.envoy, vendor)
    assert text == GOOD
    if DELIVERY == "module":
        # The module sends the passing retry at once and stops the first answer, whose usage then counts
        # as far as its events carried it (Anthropic's message_start; Chat and Responses send usage
        # last); had the short first answer already ended when the retry passed, both count in full.
        stopped = {"anthropic": (27, 24), "chat": (17, 23), "responses": (17, 23)}[vendor]
        assert usage in (stopped, (27, 28)), usage
    else:
        assert usage == (27, 28), "the streamed attempt's usage plus the retry's"
    assert len(_retry_requests(double)) == 1


@pytest.mark.module_only
@vendors
def test_a_recovered_round_goes_out_as_soon_as_it_passed_and_the_first_model_is_stopped(stack, double, vendor):
    """Through the module a passing retry does not wait for the doomed first answer (here 10 s more of
    events after the IBAN): the caller has the recovered answer at once, its stream ends normally, and
    the first model is stopped. (The wasm filter must let the first answer run to its end: a reset would
    make the Anthropic and Responses SDKs raise; README, "Asking the model again".)"""
    first = _stream(vendor, ["Pay to NL91ABNA04", "17164300 today."] + [" more"] * 200)
    first.chunk_delay, first.watch_peer = 0.05, True
    double.script(sequence=[first, _json(_answer(vendor, GOOD))])
    started = time.monotonic()
    text, _usage = _stream_turn(stack.envoy, vendor)
    took = time.monotonic() - started
    assert text == GOOD
    # (0.3-3.3 s measured: the retry's own round trip through the sidecar, on a loaded machine.)
    assert took < 5.0, f"the recovered answer waited {took:.1f} s for the first one (10 s long)"
    first_written = double.writes[0]
    assert not first_written.completed, "the first model ran to its end"
    assert first_written.chunks_written < 40, f"the first model wrote {first_written.chunks_written} of 207 events"


@vendors
def test_when_no_attempt_passes_the_first_stop_is_named(stack, double, vendor):
    double.script(sequence=[_json(_answer(vendor, FORBIDDEN)), _json(_answer(vendor, ANOTHER_FORBIDDEN))])
    failed = f"{STATS}livecheck.pay.no-iban.failed"
    before = stack.envoy.stats(failed).get(failed, 0)
    raw, text, usage = _create(stack.envoy, vendor)
    assert text == BLOCKED
    if HOLDS_ANSWER_HEADERS:
        assert x_core_check(raw.headers) == {"stage": "output", "check": "no-iban", "code": "output_check_failed"}
    else:
        # The answer's headers went on when they came: the stop is named in the stats and results.
        assert "x-core-check" not in raw.headers
    assert stack.envoy.stats(failed)[failed] - before == 3, "every attempt failed no-iban"
    assert len(_retry_requests(double)) == 2, "recover_attempts"
    assert usage == (51, 69), "three attempts count"
    assert "NL" not in raw.http_response.text
