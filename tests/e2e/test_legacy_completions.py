"""OpenAI's legacy text completions end to end: the official `openai` SDK's `completions.create`
(streamed and not) on `/v1/completions`, and `openai.AzureOpenAI(...).completions.create` on
`/openai/deployments/{d}/completions`, through real Envoy running livecheck.wasm, to the scripted
upstream double; recovery through the REAL livecheck-judge sidecar, its `[[upstreams]]` naming the
double.

Each test asserts what the caller's SDK returns and what the double received: a refused prompt never
reaches it, a rejected answer never goes back to it, and a retry carries the instruction before the
prompt.
"""

from __future__ import annotations

import json

import openai
import pytest

from cut_support import BEFORE_MATCH, FORBIDDEN as FORBIDDEN_PIECES, IBAN
from envoy_process import DELIVERY, Envoy, JudgeSidecar, envoy_for_judge
from upstream_double import Answer

RULE = "Never state a bank account number."
QUESTION = "Where do I pay for order 4711?"
FORBIDDEN_QUESTION = "My password is hunter2, where do I pay?"
FORBIDDEN = "Pay to NL91ABNA0417164300 today."
ANOTHER_FORBIDDEN = "Use NL02RABO0123456789 instead."
GOOD = "Please pay in the shop."
BLOCKED = "I cannot help with that."
MODEL = "gpt-3.5-turbo-instruct"
DEPLOYMENT = "instruct-prod"
API_VERSION = "2024-10-21"
TIMEOUT = 15.0

CONFIG = {
    "default_agent": "pay",
    "agents": {"pay": {"published": "1", "versions": {"1": {
        "blocked_reply": BLOCKED,
        "recover_attempts": 1,
        "live_checks": [
            {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
            {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
             "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18, "recover": True, "description": RULE},
        ],
    }}}},
}


class Stack:
    def __init__(self, double, workdir) -> None:
        self.judge = JudgeSidecar(
            workdir / "judge", [{"api": "openai", "base_url": f"http://127.0.0.1:{double.port}", "models": ["*"]}],
            arrays={"upstreams": [{"name": "double", "authority": "127.0.0.1",
                                   "base_url": f"http://127.0.0.1:{double.port}", "timeout_ms": 5000}]},
        )
        self.envoy = envoy_for_judge(self.judge, double.port, CONFIG, workdir)

    def close(self) -> None:
        self.envoy.stop()
        self.judge.close()


@pytest.fixture(scope="module")
def stack(double, tmp_path_factory):
    s = Stack(double, tmp_path_factory.mktemp("legacy-completions"))
    yield s
    s.close()


# --- the double's answers --------------------------------------------------------------------------


def _body(text: str) -> dict:
    return {"id": "cmpl-up", "object": "text_completion", "created": 1790000000, "model": MODEL,
            "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 17, "completion_tokens": 23, "total_tokens": 40}}


def _json(text: str) -> Answer:
    return Answer(headers={"content-type": "application/json"}, body_chunks=[json.dumps(_body(text))],
                  chunked=False)


def _stream(pieces: list[str]) -> Answer:
    """A streamed answer, one SSE chunk per piece (one HTTP chunk each), usage 10 in / 5 out."""
    def chunk(text, finish=None):
        data = {"id": "cmpl-s", "object": "text_completion", "created": 1, "model": MODEL,
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}]}
        return f"data: {json.dumps(data)}\n\n"
    usage = {"id": "cmpl-s", "object": "text_completion", "created": 1, "model": MODEL, "choices": [],
             "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
    events = [chunk(p) for p in pieces] + [chunk("", "stop"), f"data: {json.dumps(usage)}\n\n", "data: [DONE]\n\n"]
    return Answer(headers={"content-type": "text/event-stream"}, body_chunks=events, chunk_delay=0.01)


# --- the SDKs ----------------------------------------------------------------------------------------


def _openai(envoy: Envoy) -> openai.OpenAI:
    return openai.OpenAI(base_url=envoy.url + "/v1", api_key="sk-openai-e2e", max_retries=0, timeout=TIMEOUT)


def _azure(envoy: Envoy) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(azure_endpoint=envoy.url, api_key="azure-e2e", api_version=API_VERSION,
                              max_retries=0, timeout=TIMEOUT)


def _client(envoy: Envoy, platform: str):
    return _azure(envoy) if platform == "azure" else _openai(envoy)


def _model(platform: str) -> str:
    # Azure's SDK puts the model in the path as the deployment.
    return DEPLOYMENT if platform == "azure" else MODEL


def _create(envoy: Envoy, platform: str, prompt):
    """A non-streamed turn: (raw response, the completion)."""
    raw = _client(envoy, platform).completions.with_raw_response.create(
        model=_model(platform), prompt=prompt, max_tokens=64)
    return raw, raw.parse()


def _stream_turn(envoy: Envoy, platform: str, prompt):
    """A streamed turn, read as the SDK yields it: (text, last finish_reason, usage)."""
    text, finish, usage = "", None, None
    for chunk in _client(envoy, platform).completions.create(
            model=_model(platform), prompt=prompt, max_tokens=64, stream=True,
            stream_options={"include_usage": True}):
        for choice in chunk.choices:
            text += choice.text or ""
            finish = choice.finish_reason or finish
        if chunk.usage is not None:
            usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
    return text, finish, usage


def _upstream(double) -> list[dict]:
    return [json.loads(r.body) for r in double.requests()]


def _expected_path(platform: str) -> str:
    if platform == "azure":
        return f"/openai/deployments/{DEPLOYMENT}/completions?api-version={API_VERSION}"
    return "/v1/completions"


platforms = pytest.mark.parametrize("platform", ["openai", "azure"])


@platforms
def test_a_clean_turn_reaches_the_model_and_comes_back_unchanged(stack, double, platform):
    double.script(sequence=[_json(GOOD)])
    raw, completion = _create(stack.envoy, platform, QUESTION)
    assert completion.choices[0].text == GOOD
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (17, 23)
    assert raw.headers.get("x-core-check") is None
    (received,) = double.requests()
    assert received.path == _expected_path(platform)
    assert json.loads(received.body)["prompt"] == QUESTION


@platforms
def test_a_clean_streamed_turn_arrives_whole(stack, double, platform):
    double.script(sequence=[_stream(["Please pay ", "in the ", "shop."])])
    # Recovery holds a round whole; the answer is then released as it came.
    text, finish, usage = _stream_turn(stack.envoy, platform, QUESTION)
    assert (text, finish, usage) == (GOOD, "stop", (10, 5))


@platforms
def test_a_forbidden_prompt_is_refused_as_a_filtered_completion_and_never_reaches_the_model(stack, double, platform):
    double.script(sequence=[_json(GOOD)])
    raw, completion = _create(stack.envoy, platform, FORBIDDEN_QUESTION)
    assert completion.choices[0].text == BLOCKED
    assert completion.choices[0].finish_reason == "content_filter"
    assert completion.object == "text_completion"
    assert raw.headers.get("x-core-check") == 'stage=input, check="no-passwords", code=input_check_failed'
    text, finish, _ = _stream_turn(stack.envoy, platform, ["Hello", FORBIDDEN_QUESTION])
    assert (text, finish) == (BLOCKED, "content_filter")
    assert double.requests() == [], "the forbidden prompt never reached the model"


def test_a_token_prompt_is_refused_400_naming_the_field(stack, double):
    double.script(sequence=[_json(GOOD)])
    with pytest.raises(openai.BadRequestError) as refused:
        _openai(stack.envoy).completions.create(model=MODEL, prompt=[1212, 318, 257])
    assert "prompt[0] must be a string" in str(refused.value)
    assert double.requests() == []


@platforms
def test_a_failed_answer_is_recovered_and_only_the_passing_one_is_shown(stack, double, platform):
    double.script(sequence=[_json(FORBIDDEN), _json(GOOD)])
    raw, completion = _create(stack.envoy, platform, QUESTION)
    assert completion.choices[0].text == GOOD
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (34, 46), "both attempts"
    assert raw.headers.get("x-core-check") is None
    first, retry = double.requests()
    assert first.path == retry.path == _expected_path(platform)
    asked = json.loads(retry.body)
    assert asked["prompt"].endswith("\n\n" + QUESTION) and RULE in asked["prompt"], "the instruction, then the prompt"
    assert "NL91" not in retry.body.decode(), "the model never sees the rejected answer"
    assert "stream" not in asked


@platforms
def test_a_streamed_turn_gets_the_passing_answer_as_chunks(stack, double, platform):
    double.script(sequence=[_stream(["Pay to NL91ABNA04", "17164300 today."]), _json(GOOD)])
    text, finish, usage = _stream_turn(stack.envoy, platform, QUESTION)
    assert (text, finish) == (GOOD, "stop")
    if DELIVERY == "module":
        # The module sends the passing retry at once and stops the first answer, whose usage would
        # have come last: only the retry's counts (both, had the short first answer already ended).
        assert usage in ((17, 23), (27, 28)), usage
    else:
        assert usage == (27, 28), "the streamed attempt's usage plus the retry's"
    assert len(double.requests()) == 2


@platforms
def test_an_answer_that_fails_again_is_withheld_with_its_id_and_usage(stack, double, platform):
    double.script(sequence=[_json(FORBIDDEN), _json(ANOTHER_FORBIDDEN)])
    raw, completion = _create(stack.envoy, platform, QUESTION)
    assert completion.id == "cmpl-up"
    assert completion.choices[0].text == BLOCKED
    assert completion.choices[0].finish_reason == "content_filter"
    assert "NL" not in raw.http_response.text
    assert len(double.requests()) == 2, "the turn and one retry"


def test_several_prompts_have_no_one_place_for_the_instruction_and_are_withheld(stack, double):
    double.script(sequence=[_json(FORBIDDEN), _json(GOOD)])
    _, completion = _create(stack.envoy, "openai", [QUESTION, "And order 4712?"])
    assert completion.choices[0].text == BLOCKED
    assert completion.choices[0].finish_reason == "content_filter"
    assert len(double.requests()) == 1, "the sidecar asked no one again"


# --- a rules-only stream: cut where the match starts ------------------------------------------------------


@platforms
def test_a_streamed_answer_is_cut_where_the_match_starts(rules_envoy, double, platform):
    double.script(sequence=[_stream(FORBIDDEN_PIECES)])
    text, finish, usage = _stream_turn(rules_envoy, platform, QUESTION)
    assert text == BEFORE_MATCH
    assert finish == "content_filter", "closed as the vendor closes a filtered answer"
    assert usage is not None
    written = double.writes[0]
    assert written.path.startswith(_expected_path(platform).split("?")[0])
    assert IBAN not in text
