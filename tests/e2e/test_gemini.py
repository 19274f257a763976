"""Google Gemini end to end: the official google-genai SDK pointed at real Envoy running livecheck.wasm
(`http_options.base_url`), with dummy credentials, -> the model double answering in Gemini's shapes
(gemini_double.py), with every turn's report going to the REAL livecheck-judge sidecar.

Two platforms, as google-genai reaches them: the Gemini API (`genai.Client(api_key=...)`: the key in
`x-goog-api-key`, `/v1/models/{model}:generateContent`) and Vertex AI (`genai.Client(vertexai=True,
project=..., location=..., credentials=<google.oauth2 credentials holding a dummy token>)`: `Authorization:
Bearer`, `/v1beta1/projects/{p}/locations/{l}/publishers/google/models/{model}:generateContent`); streamed,
`:streamGenerateContent?alt=sse` on both. `models.generate_content` and `models.generate_content_stream`,
with and without function calls (function declarations, automatic function calling disabled): a clean
turn (the text as the double sent it), a refused question (the double never receives it; the SDK reads
Google's blocked shape: `prompt_feedback.block_reason`, `candidates[0].finish_reason == SAFETY`, `.text`
the reply), a withheld answer, a streamed answer cut at the match's first character, a denied function
call (`allowed_tools`), a function call whose arguments hold the match. google-genai raises on none of
Google's own stops (a blocked prompt, a candidate stopped for SAFETY), and raises on none of these, but
one: a stream cut while the model goes on is reset after its closing chunk, as shipped (README, "What
the caller sees after a cut"), and google-genai, reading to the body's end, raises httpx's
`RemoteProtocolError` after it; with the opt-in length frame (`stream_frame_bytes`) it raises nothing.
`X-Core-Check` (read where google-genai exposes it, `response.sdk_http_response.headers`) names the check
wherever the answer's headers wait for its checks: a refused question, a non-streamed answer
(`hold_answer_headers`); a stream's headers went on before its text was read. The caller's key or token
is in no stored result and no log line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time
import urllib.error
import urllib.request
from typing import Optional

import google.oauth2.credentials
import httpx2 as httpx
import pytest
from google import genai
from google.genai import types

from cut_support import AsyncTee, Tee, x_core_check
from envoy_process import DELIVERY, Envoy, JudgeSidecar, envoy_for_judge, render_config, wasm_path
from gemini_double import GEMINI_MODEL, RESPONSE_ID, USAGE, gemini_answer, gemini_stream
from upstream_double import DoubleToolCall

# Unique per run, so finding one in a store or a log can only mean this run leaked it.
API_KEY = "AIza-e2e-" + secrets.token_hex(12)
GOOGLE_TOKEN = "ya29.e2e-" + secrets.token_hex(12)
PROJECT = "livecheck-e2e"
LOCATION = "us-central1"
CLIENT_TIMEOUT_MS = 15_000
OPERATOR_TOKEN = "op-" + secrets.token_hex(16)
OPERATOR_TOKEN_ENV = "LIVECHECK_E2E_API_TOKEN"

BLOCKED = "I cannot help with that."
QUESTION = "Where do I pay for order 4711?"
FORBIDDEN_QUESTION = "My password is hunter2, where do I pay?"
CLEAN = ["Your order ", "ships ", "tomorrow", ", promised."]
# The IBAN `no-iban` matches starts at "NL9": the caller gets "Pay to " and nothing after. The model
# goes on writing after the match, as a model does (so the stream is cut before the model ends it).
FORBIDDEN = ["Pay to NL9", "1ABNA04", "17164300", " today.", " Thank you", " for your", " order."]
BEFORE_THE_MATCH = "Pay to "
LOOKUP = DoubleToolCall("lookup", '{"order": "4711"}')
SEND_EMAIL = DoubleToolCall("send_email", '{"to": "bob@example.com"}')
# The filter's fixed sentence for a call `allowed_tools` denies (livecheck_wire::reasons::TOOL_NOT_ALLOWED).
NOT_ALLOWED = "The tool is not one this agent may call."

# The opt-in length frame (`stream_frame_bytes`, its least), on a second Envoy.
FRAME = 64 * 1024

CONFIG = {
    "agent_header": "x-core-agent",
    # A withheld non-streamed answer carries X-Core-Check (envoy/livecheck.yaml allows it).
    "hold_answer_headers": True,
    "default_agent": "checked",
    "agents": {"checked": {"published": "1", "versions": {"1": {
        "blocked_reply": BLOCKED,
        "allowed_tools": ["lookup"],
        "live_checks": [
            {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
            # Rule checks only: answers stream with minimal hold-back and are cut where a match starts.
            {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
             "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18, "recover": False},
        ]}}}},
}
# The frame goes only to streams whose tool calls are not checked (an allowed call may wait for a
# judge, which a fixed length cannot know): the framed Envoy's agent has no `allowed_tools`.
FRAMED_CONFIG = {**CONFIG, "stream_frame_bytes": FRAME, "agents": {"checked": {"published": "1", "versions": {
    "1": {k: v for k, v in CONFIG["agents"]["checked"]["versions"]["1"].items() if k != "allowed_tools"}}}}}


class Stack:
    """The real sidecar (its SQLite store and operator API) and two Envoys whose `livecheck-judge` cluster
    points at it: `envoy` as shipped, `framed` with the opt-in length frame (and one request per
    connection, which the frame needs)."""

    def __init__(self, double, workdir) -> None:
        self.judge = JudgeSidecar(
            workdir / "judge", [{"api": "openai", "base_url": "http://127.0.0.1:9", "models": ["*"]}],
            tables={"api": {"token_env": OPERATOR_TOKEN_ENV}}, env={OPERATOR_TOKEN_ENV: OPERATOR_TOKEN})
        self.envoy = envoy_for_judge(self.judge, double.port, CONFIG, workdir)
        try:
            self.framed = Envoy(render_config(
                wasm_path("livecheck.wasm"), double.port, plugin_configuration=json.dumps(FRAMED_CONFIG),
                extra_clusters={"livecheck-judge": self.judge.port}, one_request_per_connection=True),
                workdir / "envoy-framed")
        except BaseException:
            self.envoy.stop()
            self.judge.close()
            raise

    def close(self) -> None:
        self.framed.stop()
        self.envoy.stop()
        self.judge.close()

    def checks(self, turn: str) -> tuple[Optional[list[dict]], bytes]:
        """A turn's stored results through the operator API (None while there are none), and the body."""
        request = urllib.request.Request(f"{self.judge.url}/responses/{turn}/checks",
                                         headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                body = r.read()
        except urllib.error.HTTPError as e:
            assert e.code == 404, e.code
            return None, e.read()
        return json.loads(body)["items"], body


@pytest.fixture(scope="module")
def stack(double, tmp_path_factory):
    s = Stack(double, tmp_path_factory.mktemp("gemini"))
    yield s
    s.close()


# --- google-genai ------------------------------------------------------------------------------------------


def _client(stack, platform: str, tee: Tee | AsyncTee, framed: bool = False) -> genai.Client:
    """google-genai as a user sets it up, pointed at Envoy; `tee` records every byte it reads (an
    AsyncTee: the client's `aio` calls)."""
    envoy = stack.framed if framed else stack.envoy
    transport = ({"httpx_async_client": httpx.AsyncClient(transport=tee)} if isinstance(tee, AsyncTee)
                 else {"httpx_client": httpx.Client(transport=tee)})
    options = types.HttpOptions(base_url=envoy.url, headers={"x-core-agent": "checked"},
                                timeout=CLIENT_TIMEOUT_MS, **transport)
    if platform == "gemini":
        return genai.Client(api_key=API_KEY, http_options=options)
    credentials = google.oauth2.credentials.Credentials(token=GOOGLE_TOKEN)
    return genai.Client(vertexai=True, project=PROJECT, location=LOCATION, credentials=credentials,
                        http_options=options)


def _path(platform: str, stream: bool) -> str:
    """Where google-genai sends the turn (its default API version on each platform)."""
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    if platform == "gemini":
        return f"/v1/models/{GEMINI_MODEL}:{method}"
    return f"/v1beta1/projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/{GEMINI_MODEL}:{method}"


def _config(tools: bool) -> Optional[types.GenerateContentConfig]:
    if not tools:
        return None
    declarations = [types.FunctionDeclaration(name=name, description=f"The {name} tool.", parameters=types.Schema(
        type=types.Type.OBJECT, properties={field: types.Schema(type=types.Type.STRING)}))
        for name, field in (("lookup", "order"), ("send_email", "to"))]
    return types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=declarations)],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))


@dataclasses.dataclass
class Turn:
    text: str  # every response's `.text`, joined (a stream's chunks in order)
    responses: list  # the GenerateContentResponse (one, or one per chunk)
    raised: Optional[BaseException]
    raw: bytes  # every body byte the SDK read

    @property
    def last(self):
        return self.responses[-1]

    @property
    def headers(self) -> dict:
        return self.responses[0].sdk_http_response.headers

    def calls(self) -> list[tuple[str, dict]]:
        return [(c.name, c.args) for r in self.responses for c in (r.function_calls or [])]


def _ask(stack, platform: str, stream: bool, question: str = QUESTION, tools: bool = False,
         framed: bool = False, aio: bool = False) -> Turn:
    """One turn through google-genai (`aio`: its async client); an exception it raises is kept, not raised."""
    tee = AsyncTee() if aio else Tee()
    client = _client(stack, platform, tee, framed)
    asked = {"model": GEMINI_MODEL, "contents": question, "config": _config(tools)}
    responses: list = []
    raised = None
    try:
        if aio:
            asyncio.run(_ask_async(client, stream, asked, responses))
        elif stream:
            for chunk in client.models.generate_content_stream(**asked):
                responses.append(chunk)  # each kept as it comes: a stream may raise after its closing chunk
        else:
            responses.append(client.models.generate_content(**asked))
    except Exception as e:  # noqa: BLE001 -- whether the SDK raises is what is asserted
        raised = e
    return Turn("".join(r.text or "" for r in responses), responses, raised, bytes(tee.body))


async def _ask_async(client: genai.Client, stream: bool, asked: dict, responses: list) -> None:
    if stream:
        async for chunk in await client.aio.models.generate_content_stream(**asked):
            responses.append(chunk)
    else:
        responses.append(await client.aio.models.generate_content(**asked))


def _answer(pieces: list[str], stream: bool, calls: tuple[DoubleToolCall, ...] = ()):
    return gemini_stream(pieces, calls) if stream else gemini_answer("".join(pieces), calls)


def _blocked_shape(response) -> None:
    """Google's stop as google-genai reads it: the candidate stopped for safety."""
    assert response.candidates[0].finish_reason == types.FinishReason.SAFETY
    assert not response.function_calls


platforms = pytest.mark.parametrize("platform", ["gemini", "vertex"])
streams = pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
with_calls = pytest.mark.parametrize("tools", [False, True], ids=["text", "function-calls"])


# --- the turns --------------------------------------------------------------------------------------------


@platforms
@streams
@with_calls
def test_a_clean_turn_arrives_as_the_double_sent_it(stack, double, platform, stream, tools):
    calls = (LOOKUP,) if tools else ()
    double.script(sequence=[_answer(CLEAN, stream, calls)])
    turn = _ask(stack, platform, stream, tools=tools)
    assert turn.raised is None
    assert turn.text == "".join(CLEAN)
    assert turn.calls() == ([("lookup", {"order": "4711"})] if tools else [])
    assert turn.last.candidates[0].finish_reason == types.FinishReason.STOP
    assert turn.last.response_id == RESPONSE_ID
    assert turn.last.usage_metadata.total_token_count == USAGE["totalTokenCount"]
    assert x_core_check(turn.headers) is None
    (request,) = double.requests()
    assert request.path == _path(platform, stream)
    if platform == "gemini":
        assert request.headers["x-goog-api-key"] == API_KEY
    else:
        assert request.headers["authorization"] == f"Bearer {GOOGLE_TOKEN}"
    body = json.loads(request.body)
    assert body["contents"] == [{"role": "user", "parts": [{"text": QUESTION}]}]
    assert ("tools" in body) == tools


@platforms
@streams
@with_calls
def test_a_refused_question_never_reaches_google_and_reads_as_a_blocked_prompt(stack, double, platform, stream,
                                                                                 tools):
    double.script(sequence=[_answer(CLEAN, stream)])
    turn = _ask(stack, platform, stream, question=FORBIDDEN_QUESTION, tools=tools)
    assert turn.raised is None
    assert double.requests() == [], "no model was asked"
    assert turn.text == BLOCKED
    assert len(turn.responses) == 1, "streamed: one chunk, the whole refusal"
    assert turn.last.prompt_feedback.block_reason == types.BlockedReason.SAFETY
    _blocked_shape(turn.last)
    assert turn.last.model_version == GEMINI_MODEL, "the path names the model"
    assert x_core_check(turn.headers) == {"stage": "input", "check": "no-passwords", "code": "input_check_failed"}
    assert b"hunter2" not in turn.raw


@platforms
@with_calls
def test_a_forbidden_answer_is_withheld(stack, double, platform, tools):
    double.script(sequence=[_answer(FORBIDDEN, stream=False, calls=(LOOKUP,) if tools else ())])
    turn = _ask(stack, platform, stream=False, tools=tools)
    assert turn.raised is None
    assert turn.text == BLOCKED
    _blocked_shape(turn.last)
    assert turn.last.response_id == RESPONSE_ID, "the answer's id is kept"
    assert turn.last.usage_metadata.total_token_count == USAGE["totalTokenCount"]
    assert b"NL91" not in turn.raw and b"lookup" not in turn.raw
    assert x_core_check(turn.headers) == {"stage": "output", "check": "no-iban", "code": "output_check_failed"}


framings = pytest.mark.parametrize("framed", [False, True], ids=["as-shipped", "framed"])


@platforms
@with_calls
@framings
@pytest.mark.parametrize("aio", [False, True], ids=["sync", "async"])
def test_a_streamed_answer_is_cut_at_the_matchs_first_character(stack, double, platform, tools, framed, aio):
    double.script(sequence=[_answer(FORBIDDEN, stream=True, calls=(LOOKUP,) if tools else ())])
    turn = _ask(stack, platform, stream=True, tools=tools, framed=framed, aio=aio)
    assert turn.text == BEFORE_THE_MATCH
    _blocked_shape(turn.last)
    assert turn.calls() == [], "nothing after the cut, the call included"
    assert b"NL9" not in turn.raw and b"lookup" not in turn.raw
    assert turn.last.response_id == RESPONSE_ID
    finishes = [r.candidates[0].finish_reason for r in turn.responses if r.candidates and r.candidates[0].finish_reason]
    assert finishes == [types.FinishReason.SAFETY], "the candidate finishes once"
    assert x_core_check(turn.headers) is None, "the stream's headers went on before its text was read"
    if framed:
        # The frame's padding is blank lines, which google-genai skips: the call returns as after
        # Google's own stop.
        assert turn.raised is None
        assert len(turn.raw) == FRAME
    elif DELIVERY == "module":
        # The module ends the response after the closing chunk: the call returns as after Google's stop.
        assert turn.raised is None, repr(turn.raised)
    else:
        # As shipped, the stream is reset after its closing chunk so the model stops (README, "What the
        # caller sees after a cut"): google-genai reads on to the body's end, as the Anthropic and
        # Responses SDKs do, and raises httpx's connection error once it has the closing chunk.
        assert isinstance(turn.raised, httpx.RemoteProtocolError), repr(turn.raised)


@platforms
@with_calls
def test_a_clean_framed_stream_arrives_whole_and_the_sdk_ends_normally(stack, double, platform, tools):
    calls = (LOOKUP,) if tools else ()
    double.script(sequence=[_answer(CLEAN, stream=True, calls=calls)])
    turn = _ask(stack, platform, stream=True, tools=tools, framed=True)
    assert turn.raised is None
    assert turn.text == "".join(CLEAN)
    assert turn.calls() == ([("lookup", {"order": "4711"})] if tools else [])
    assert turn.last.candidates[0].finish_reason == types.FinishReason.STOP
    assert len(turn.raw) == FRAME


@platforms
@streams
def test_a_denied_function_call_never_reaches_the_caller(stack, double, platform, stream):
    double.script(sequence=[_answer(["Sending it."], stream, calls=(SEND_EMAIL,))])
    turn = _ask(stack, platform, stream, tools=True)
    assert turn.raised is None
    assert turn.calls() == []
    assert NOT_ALLOWED in turn.text
    _blocked_shape(turn.last)
    assert b"send_email" not in turn.raw and b"bob@example.com" not in turn.raw
    if not stream:
        assert x_core_check(turn.headers) == {"stage": "output", "check": "allowed_tools",
                                              "code": "tool_call_denied"}


@platforms
@streams
def test_a_function_call_whose_arguments_hold_the_match_is_never_shown(stack, double, platform, stream):
    leaky = DoubleToolCall("lookup", '{"order": "4711", "pay_to": "NL91ABNA0417164300"}')
    double.script(sequence=[_answer(["Looking it up."], stream, calls=(leaky,))])
    turn = _ask(stack, platform, stream, tools=True)
    assert turn.raised is None
    assert turn.calls() == []
    _blocked_shape(turn.last)
    assert b"NL91" not in turn.raw and b"pay_to" not in turn.raw
    if stream:
        assert turn.text == "Looking it up.", "the text before the call streamed"
    else:
        assert turn.text == BLOCKED
        assert x_core_check(turn.headers) == {"stage": "output", "check": "no-iban", "code": "output_check_failed"}


# --- what is recorded -----------------------------------------------------------------------------------


def _wait_checks(stack, turn: str, timeout: float = 5.0) -> tuple[list[dict], bytes]:
    deadline = time.monotonic() + timeout
    while True:
        items, body = stack.checks(turn)
        if items:
            return items, body
        assert time.monotonic() < deadline, f"no result of {turn} stored"
        time.sleep(0.05)


def _raw_turn(stack, path: str, question: str) -> tuple[int, dict, bytes]:
    """A generateContent call without an SDK (the key in the query: `?key=`, as Google's curl examples)."""
    request = urllib.request.Request(
        stack.envoy.url + path, method="POST", headers={"content-type": "application/json"},
        data=json.dumps({"contents": [{"role": "user", "parts": [{"text": question}]}]}).encode())
    with urllib.request.urlopen(request, timeout=CLIENT_TIMEOUT_MS / 1000) as r:
        return r.status, dict(r.headers), r.read()


def test_the_callers_key_and_token_are_in_no_record_and_no_log(stack, double):
    turns: list[str] = []
    for platform in ("gemini", "vertex"):
        double.script(sequence=[gemini_answer("".join(FORBIDDEN))])
        turn = _ask(stack, platform, stream=False)
        assert turn.text == BLOCKED
        turns.append(turn.headers["x-core-response-id"])
    double.script(sequence=[gemini_answer("".join(FORBIDDEN))])
    status, headers, body = _raw_turn(stack, f"/v1beta/models/{GEMINI_MODEL}:generateContent?key={API_KEY}", QUESTION)
    assert status == 200 and b"NL91" not in body
    (request,) = double.requests()
    assert request.path.endswith(f"?key={API_KEY}"), "the request goes on unchanged"
    turns.append(headers["x-core-response-id"])

    bodies = []
    for turn in turns:
        items, body = _wait_checks(stack, turn)
        bodies.append(body)
        assert {i["name"]: i["outcome"] for i in items} == {"no-passwords": "passed", "no-iban": "failed"}, items
    secrets_ = [API_KEY.encode(), GOOGLE_TOKEN.encode()]
    store = sorted(stack.judge.workdir.glob("livecheck-judge.sqlite*"))
    assert any(p.name == "livecheck-judge.sqlite" for p in store), list(stack.judge.workdir.iterdir())
    for name, blob in ([("result", b) for b in bodies] + [(p.name, p.read_bytes()) for p in store]
                       + [("sidecar log", stack.judge.log().encode()), ("envoy log", stack.envoy.log().encode())]):
        assert not [s for s in secrets_ if s in blob], f"{name} holds the caller's credentials"
