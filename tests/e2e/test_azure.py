"""Azure OpenAI end to end: `openai.AzureOpenAI(azure_endpoint=<Envoy>, api_key=<dummy>, api_version=...)`
-> real Envoy running livecheck.wasm -> the model double answering in Azure's shapes (azure_double.py:
`prompt_filter_results`, `content_filter_results`, the annotation chunks of a stream), with recovery
through the REAL livecheck-judge sidecar (its `[[upstreams]]` naming the double for Envoy's authority).

The SDK calls `/openai/deployments/{deployment}/chat/completions?api-version=...` for chat and
`/openai/responses?api-version=...` for responses, with the key in `api-key`. Chat and Responses,
non-streamed and streamed: a clean turn (Azure's fields reach the SDK), a refused question (it never
reaches the double), a withheld answer, a cut streamed answer, a denied tool call, and a recovered
answer whose retry carries the caller's `api-key` to the double. No forbidden text reaches the SDK.
"""

from __future__ import annotations

import json

import openai
import pytest

from azure_double import PROMPT_FILTER_RESULTS, VERDICTS, azure_chat_answer, azure_chat_stream
from envoy_process import JudgeSidecar, envoy_for_judge
from upstream_double import DoubleToolCall, model_double_tool_answer

API_KEY = "dummy-azure-key"
API_VERSION = "2024-10-21"
DEPLOYMENT = "gpt-4o-prod"
CHAT_PATH = f"/openai/deployments/{DEPLOYMENT}/chat/completions"
RESPONSES_PATH = "/openai/responses"
PATHS = {"chat": CHAT_PATH, "responses": RESPONSES_PATH}
CLIENT_TIMEOUT = 15.0

RULE = "Never state a bank account number."
BLOCKED = "I cannot help with that."
QUESTION = "Where do I pay for order 4711?"
FORBIDDEN_QUESTION = "My password is hunter2, where do I pay?"
CLEAN = ["Your order ", "ships ", "tomorrow", ", promised."]
FORBIDDEN = ["Pay to NL9", "1ABNA04", "17164300", " today."]
GOOD = "I'm not allowed to share bank details; please pay in the shop."
# The filter's fixed sentence for a call `allowed_tools` denies (livecheck_wire::reasons::TOOL_NOT_ALLOWED).
REASON_NOT_ALLOWED = "The tool is not one this agent may call."


def _version(recover: bool) -> dict:
    return {"blocked_reply": BLOCKED, "recover_attempts": 1, "allowed_tools": ["lookup"],
            "live_checks": [
                {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
                {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
                 "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18, "recover": recover, "description": RULE}]}


# `checked`: answers stream with minimal hold-back and are cut; `recovering`: a failed answer is asked again.
CONFIG = {"default_agent": "checked", "agents": {
    "checked": {"published": "1", "versions": {"1": _version(recover=False)}},
    "recovering": {"published": "1", "versions": {"1": _version(recover=True)}}}}


@pytest.fixture(scope="module")
def stack(double, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("azure")
    judge = JudgeSidecar(
        workdir / "judge", [{"api": "openai", "base_url": f"http://127.0.0.1:{double.port}", "models": ["*"]}],
        # Callers reach Envoy at 127.0.0.1:<its port>: an authority without a port matches any.
        arrays={"upstreams": [{"name": "azure", "authority": "127.0.0.1",
                               "base_url": f"http://127.0.0.1:{double.port}", "timeout_ms": 5000}]},
    )
    envoy = envoy_for_judge(judge, double.port, CONFIG, workdir)
    yield envoy
    envoy.stop()
    judge.close()


def _client(envoy, agent: str = "checked") -> openai.AzureOpenAI:
    return openai.AzureOpenAI(azure_endpoint=envoy.url, api_key=API_KEY, api_version=API_VERSION,
                              default_headers={"x-core-agent": agent}, max_retries=0, timeout=CLIENT_TIMEOUT)


def _ask(envoy, api: str, stream: bool, question: str = QUESTION, agent: str = "checked", tools=None):
    """One turn through the SDK: (text, what else the SDK returned, the exception a cut stream raised)."""
    client = _client(envoy, agent)
    extra = {}
    if api == "chat":
        if tools:
            extra["tools"] = [{"type": "function", "function": {"name": t, "parameters": {"type": "object"}}}
                              for t in tools]
        messages = [{"role": "user", "content": question}]
        if not stream:
            c = client.chat.completions.create(model=DEPLOYMENT, messages=messages, **extra)
            return c.choices[0].message.content or "", c, None
        text, chunks, raised = "", [], None
        try:
            for chunk in client.chat.completions.create(model=DEPLOYMENT, messages=messages, stream=True, **extra):
                chunks.append(chunk)
                for choice in chunk.choices:
                    # Azure's annotations of text already sent carry no delta.
                    text += (choice.delta and choice.delta.content) or ""
        except openai.APIConnectionError as e:
            raised = e
        return text, chunks, raised
    if tools:
        extra["tools"] = [{"type": "function", "name": t, "parameters": {"type": "object"}} for t in tools]
    if not stream:
        r = client.responses.create(model=DEPLOYMENT, input=question, **extra)
        return r.output_text, r, None
    text, events, raised = "", [], None
    try:
        for event in client.responses.create(model=DEPLOYMENT, input=question, stream=True, **extra):
            events.append(event)
            if event.type == "response.output_text.delta":
                text += event.delta
    except (openai.APIConnectionError, openai.APIError) as e:
        raised = e
    return text, events, raised


def _answer(api: str, pieces: list[str], stream: bool, calls=()):
    if api == "chat":
        return azure_chat_stream(pieces, calls) if stream else azure_chat_answer("".join(pieces), calls)
    return model_double_tool_answer("responses", list(calls), text="".join(pieces), stream=stream)


def _upstream(double) -> list:
    """The requests that reached the double."""
    return double.requests()


apis = pytest.mark.parametrize("api", ["chat", "responses"])
streams = pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])


@apis
@streams
def test_a_clean_turn_arrives_with_azures_fields_on_its_deployment_path(stack, double, api, stream):
    double.script(sequence=[_answer(api, CLEAN, stream)])
    text, got, raised = _ask(stack, api, stream)
    assert raised is None
    assert text == "".join(CLEAN)
    (request,) = _upstream(double)
    assert request.path == f"{PATHS[api]}?api-version={API_VERSION}", "the api-version query goes on as it came"
    assert request.headers.get("api-key") == API_KEY
    assert json.loads(request.body)["model"] == DEPLOYMENT
    if api == "chat" and not stream:
        assert got.model_extra["prompt_filter_results"] == PROMPT_FILTER_RESULTS
        assert got.choices[0].model_extra["content_filter_results"] == VERDICTS
    if api == "chat" and stream:
        assert got[0].choices == [] and got[0].model_extra["prompt_filter_results"] == PROMPT_FILTER_RESULTS
        assert any(c.choices and c.choices[0].model_extra.get("content_filter_offsets") for c in got)


@apis
@streams
def test_a_refused_question_never_reaches_azure(stack, double, api, stream):
    double.script(sequence=[_answer(api, CLEAN, stream)])
    text, _, raised = _ask(stack, api, stream, question=FORBIDDEN_QUESTION)
    assert raised is None
    assert text == BLOCKED
    assert not any(b"hunter2" in r.body for r in double.requests(callouts=True)), "the question never left"
    assert _upstream(double) == []


@apis
def test_a_forbidden_answer_is_withheld(stack, double, api):
    double.script(sequence=[_answer(api, FORBIDDEN, stream=False)])
    text, got, _ = _ask(stack, api, stream=False)
    assert text == BLOCKED
    assert "NL91" not in got.model_dump_json()
    if api == "chat":
        assert got.choices[0].finish_reason == "content_filter"
    else:
        assert got.status == "incomplete" and got.incomplete_details.reason == "content_filter"


@apis
def test_a_forbidden_streamed_answer_is_cut_where_the_match_starts(stack, double, api):
    double.script(sequence=[_answer(api, FORBIDDEN, stream=True)])
    text, got, raised = _ask(stack, api, stream=True)
    assert text == "Pay to "
    assert "NL9" not in json.dumps([g.model_dump() for g in got])
    if api == "chat":
        # Chat ends at its closing events: the finish names the filter, in the answer's own chunk.
        assert raised is None
        last = [c for c in got if c.choices][-1]
        assert last.choices[0].finish_reason == "content_filter"
        assert last.id == "chatcmpl-azure-double", "the answer's identity, not Azure's empty annotation id"
    else:
        assert raised is not None or got[-1].type == "response.incomplete"


@apis
@streams
def test_a_denied_tool_call_never_reaches_the_caller(stack, double, api, stream):
    call = DoubleToolCall("send_email", '{"to": "bob@example.com"}')
    double.script(sequence=[_answer(api, [], stream, calls=(call,))])
    text, got, _ = _ask(stack, api, stream, tools=["lookup", "send_email"])
    assert REASON_NOT_ALLOWED in text
    dumped = json.dumps([g.model_dump() for g in got]) if stream else got.model_dump_json()
    assert "send_email" not in dumped and "bob@example.com" not in dumped


@apis
@streams
def test_a_recovered_answer_is_asked_again_with_the_callers_api_key(stack, double, api, stream):
    first = _answer(api, FORBIDDEN, stream)
    again = azure_chat_answer(GOOD) if api == "chat" else model_double_tool_answer("responses", [], text=GOOD)
    double.script(sequence=[first, again])
    text, got, raised = _ask(stack, api, stream, agent="recovering")
    assert raised is None
    assert text == GOOD
    dumped = json.dumps([g.model_dump() for g in got]) if stream else got.model_dump_json()
    assert "NL91" not in dumped
    turn, retry = _upstream(double)
    assert RULE.encode() in retry.body and b"NL91" not in retry.body, "the model never sees the rejected answer"
    assert retry.path == turn.path == f"{PATHS[api]}?api-version={API_VERSION}"
    assert retry.headers.get("api-key") == API_KEY, "the retry carries the caller's Azure key"
