"""Amazon Bedrock's Converse API end to end: the official `boto3` `bedrock-runtime` client (dummy
credentials, `endpoint_url` at Envoy) -> real Envoy running livecheck.wasm -> the MODEL DOUBLE speaking
Converse (tests/e2e/converse_double.py): `converse` (one JSON answer) and `converse_stream` (AWS
event-stream framing, its HTTP chunks ending inside the frames on purpose).

For each: a clean turn, a refused question (an input rule: the double never receives it), a forbidden
answer (withheld when whole; cut where the match starts when streamed), a tool call `allowed_tools` denies,
and a tool call it allows. Every stop ends as Bedrock ends its own guardrail's stop (`stopReason:
"guardrail_intervened"`), which agent frameworks already handle: `converse` raises nothing, nor does
iterating a refused question's stream; a stream stopped before its upstream ended (a cut, a denied call)
yields every closing event through `metadata` and then raises urllib3's ProtocolError on the reset that
stops the model (see `_assert_reset_after_the_closing_events`). X-Core-Check names the check wherever the
headers wait for the decision (a refusal, a whole answer with `hold_answer_headers`). An inference-profile
ARN as the model id (percent-encoded by boto3 as one path segment) is routed and checked.

The caller signs every request with SigV4 (botocore; signing name `bedrock`), over the method, the path,
`content-type`, `host`, `x-amz-date` and the body's SHA-256. The double recomputes that signature over what
arrived (converse_double.SigV4Check) and answers Bedrock's 403 when it does not match: each answered turn
proves livecheck forwarded the signed request unchanged. boto3 signs the Host it reaches (Envoy at
127.0.0.1), which the test config forwards as it came (envoy_process.render_config drops the shipped
host_rewrite); a deployment's callers sign for Bedrock's host (envoy/bedrock-anthropic.yaml).
"""

from __future__ import annotations

import json
from typing import Optional

import boto3
import botocore.config
import botocore.exceptions
import pytest
import urllib3

from converse_double import (
    EVENT_STREAM,
    USAGE,
    SigV4Check,
    converse_answer,
    converse_events,
    converse_stream_answer,
    exception,
    sigv4_mismatch,
    unframe,
)
from cut_support import x_core_check
from envoy_process import DELIVERY, Envoy, render_config, wasm_path
from upstream_double import DoubleToolCall, Received

REGION = "us-east-1"
ACCESS_KEY = "AKIDLIVECHECKE2E"
SECRET_KEY = "dummy-secret-key"
MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
# A cross-region inference profile by ARN: boto3 sends it as one segment, `:` as %3A and `/` as %2F.
PROFILE_ARN = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0"
ENCODED = {MODEL: "anthropic.claude-3-5-haiku-20241022-v1%3A0",
           PROFILE_ARN: "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2F"
                        "us.anthropic.claude-3-5-haiku-20241022-v1%3A0"}

QUESTION = "Where do I pay for order 4711?"
FORBIDDEN_QUESTION = "My password is hunter2, where is order 4711?"
CLEAN = ["Your order ", "ships ", "tomorrow", ", promised."]
# The IBAN begins inside the first delta and ends in the second: the cut is at its first character.
FORBIDDEN = ["Pay to NL91AB", "NA0417164300", " today."]
BEFORE_MATCH = "Pay to "
NEVER_SENT = [b"NL91", b"ABNA", b"0417164300", b"today"]
BLOCKED = "I cannot help with that. Never share a password in this conversation."
# The filter's fixed sentence for a call `allowed_tools` denies (livecheck_wire::reasons::TOOL_NOT_ALLOWED).
NOT_ALLOWED = "The tool is not one this agent may call."
GUARDRAIL = "guardrail_intervened"
CLIENT_TIMEOUT = 15
FRAME = 64 * 1024  # the smallest `stream_frame_bytes`

POLICY = {
    "agent_header": "x-core-agent",
    # A withheld non-streamed answer's headers are held with its body, so it carries X-Core-Check.
    "hold_answer_headers": True,
    "default_agent": "plain",
    "agents": {"plain": {"published": "1", "versions": {"1": {
        "blocked_reply": BLOCKED,
        "allowed_tools": ["lookup"],
        "live_checks": [
            {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
            {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
             "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18},
        ],
    }}}},
}
TOOLS = {"tools": [
    {"toolSpec": {"name": "send_email", "inputSchema": {"json": {"type": "object"}}}},
    {"toolSpec": {"name": "lookup", "inputSchema": {"json": {"type": "object"}}}}]}

STREAMED = pytest.mark.parametrize("streamed", [False, True], ids=["converse", "converse_stream"])


@pytest.fixture(scope="module")
def envoy(double, tmp_path_factory):
    config = render_config(wasm_path("livecheck.wasm"), double.port, plugin_configuration=json.dumps(POLICY))
    e = Envoy(config, tmp_path_factory.mktemp("envoy-converse"))
    yield e
    e.stop()


@pytest.fixture(scope="module")
def framed_envoy(double, tmp_path_factory):
    """As `envoy`, with the opt-in length frame (and one request per connection, which it needs), and no tool
    checks: a stream whose tool calls are checked is never framed (README: Streamed answers)."""
    policy = json.loads(json.dumps(POLICY))
    del policy["agents"]["plain"]["versions"]["1"]["allowed_tools"]
    config = render_config(wasm_path("livecheck.wasm"), double.port, one_request_per_connection=True,
                           plugin_configuration=json.dumps({"stream_frame_bytes": FRAME, **policy}))
    e = Envoy(config, tmp_path_factory.mktemp("envoy-converse-framed"))
    yield e
    e.stop()


@pytest.fixture
def sigv4():
    """The double's signature check for this test's requests (dummy credentials, as the client's)."""
    return SigV4Check(ACCESS_KEY, SECRET_KEY, REGION)


def _client(envoy: Envoy, secret_key: str = SECRET_KEY):
    return boto3.client(
        "bedrock-runtime", endpoint_url=envoy.url, region_name=REGION, aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=secret_key,
        config=botocore.config.Config(retries={"total_max_attempts": 1}, read_timeout=CLIENT_TIMEOUT,
                                      connect_timeout=5))


# --- one turn, as boto3 reports it ------------------------------------------------------------------------


class Turn:
    """What a `converse` or `converse_stream` call gave the caller: the answer's text blocks and tool uses
    (from the message, or put together from the events), its stop reason and usage, the events of a stream
    as boto3 yielded them, and the response's HTTP headers."""

    def __init__(self, response: dict, streamed: bool) -> None:
        self.headers: dict = response["ResponseMetadata"]["HTTPHeaders"]
        self.events: list[dict] = []
        self.texts: dict[int, str] = {}
        self.tool_uses: list[dict] = []
        self.raised: Optional[BaseException] = None
        if not streamed:
            blocks = response["output"]["message"]["content"]
            self.texts = {i: b["text"] for i, b in enumerate(blocks) if "text" in b}
            self.tool_uses = [b["toolUse"] for b in blocks if "toolUse" in b]
            self.stop_reason: Optional[str] = response["stopReason"]
            self.usage: Optional[dict] = response["usage"]
            return
        self.stop_reason, self.usage = None, None
        inputs: dict[int, str] = {}
        try:
            for e in response["stream"]:
                self._read(e, inputs)
        except Exception as e:  # noqa: BLE001 - what iterating raised is what the tests judge
            self.raised = e
        for use, text in zip(self.tool_uses, inputs.values()):
            use["input"] = json.loads(text or "{}")

    def _read(self, e: dict, inputs: dict[int, str]) -> None:
        self.events.append(e)
        ((kind, body),) = e.items()
        if kind == "contentBlockStart" and "toolUse" in body["start"]:
            self.tool_uses.append(dict(body["start"]["toolUse"]))
            inputs[body["contentBlockIndex"]] = ""
        elif kind == "contentBlockDelta" and "text" in body["delta"]:
            i = body["contentBlockIndex"]
            self.texts[i] = self.texts.get(i, "") + body["delta"]["text"]
        elif kind == "contentBlockDelta" and "toolUse" in body["delta"]:
            inputs[body["contentBlockIndex"]] += body["delta"]["toolUse"]["input"]
        elif kind == "messageStop":
            self.stop_reason = body["stopReason"]
        elif kind == "metadata":
            self.usage = body["usage"]

    @property
    def text(self) -> str:
        return "".join(self.texts[i] for i in sorted(self.texts))

    def kinds(self) -> list[str]:
        return [next(iter(e)) for e in self.events]


def _turn(envoy: Envoy, streamed: bool, question: str = QUESTION, model: str = MODEL,
          secret_key: str = SECRET_KEY, may_raise: bool = False, **request) -> Turn:
    """One call; iterating its stream raises nothing unless `may_raise` (then `Turn.raised` says what)."""
    client = _client(envoy, secret_key)
    call = client.converse_stream if streamed else client.converse
    response = call(modelId=model, messages=[{"role": "user", "content": [{"text": question}]}],
                    inferenceConfig={"maxTokens": 256}, **request)
    turn = Turn(response, streamed)
    assert may_raise or turn.raised is None, repr(turn.raised)
    return turn


def _answer(streamed: bool, sigv4: SigV4Check, pieces: list[str], calls: tuple = ()):
    """The double's answer saying `pieces`, then making `calls`; a stream's HTTP chunks end inside its frames."""
    if streamed:
        return converse_stream_answer(converse_events(pieces, calls), how="inside", admit=sigv4)
    return converse_answer("".join(pieces), calls, admit=sigv4)


def _upstream(double) -> list[Received]:
    return double.requests()


def _events_sent(pieces: list[str], calls: tuple = ()) -> list[dict]:
    """The double's events as boto3 parses them (Bedrock's padding member `p` is not in the model)."""
    out = []
    for headers, payload in unframe(b"".join(converse_events(pieces, calls))):
        body = json.loads(payload)
        body.pop("p")
        out.append({headers[":event-type"]: body})
    return out


def _assert_stopped(turn: Turn, streamed: bool, check: str, code: str) -> None:
    """The stop every caller reads as Bedrock's own guardrail's, with the check named where it can be: in
    the headers of a refusal and of a whole answer (held with its body); a stream's headers went on before
    its answer was decided (README: X-Core-Check), so there the stop reason is all the caller has."""
    assert turn.stop_reason == GUARDRAIL
    if streamed:
        assert turn.headers["content-type"] == EVENT_STREAM
        assert turn.kinds()[-2:] == ["messageStop", "metadata"], turn.kinds()
    if streamed and code != "input_check_failed":
        assert x_core_check(turn.headers) is None
        return
    stage = "input" if code == "input_check_failed" else "output"
    assert x_core_check(turn.headers) == {"stage": stage, "check": check, "code": code}, turn.headers


# --- a clean turn -------------------------------------------------------------------------------------------


@STREAMED
def test_a_clean_turn_reaches_bedrock_signed_as_the_caller_signed_it(envoy, double, sigv4, streamed):
    double.script(sequence=[_answer(streamed, sigv4, CLEAN)])
    turn = _turn(envoy, streamed)
    assert turn.text == "".join(CLEAN)
    assert turn.stop_reason == "end_turn"
    assert turn.usage == USAGE
    assert "x-core-check" not in turn.headers
    if streamed:
        assert turn.events == _events_sent(CLEAN), "every event arrives as Bedrock sent it"
    (seen,) = _upstream(double)
    assert seen.path == f"/model/{ENCODED[MODEL]}/converse" + ("-stream" if streamed else "")
    assert seen.headers["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/")
    assert sigv4.verdicts == [None], "the double found the caller's signature valid over what arrived"
    assert json.loads(seen.body)["messages"][0]["content"][0]["text"] == QUESTION


def test_the_doubles_signature_check_refuses_what_the_caller_did_not_sign(envoy, double, sigv4):
    """The gate above can fail: a request signed with another secret is answered with Bedrock's 403 (boto3
    raises it), and a signed request changed in its body, path or a signed header is refused."""
    double.script(sequence=[_answer(False, sigv4, CLEAN)])
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        _turn(envoy, False, secret_key="not-the-dummy-secret")
    assert raised.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert sigv4.verdicts == ["signature does not match"]

    double.script(sequence=[_answer(False, sigv4, CLEAN)])
    _turn(envoy, False)
    (seen,) = _upstream(double)
    assert sigv4_mismatch(seen, ACCESS_KEY, SECRET_KEY, REGION) is None
    changed = [
        Received(seen.method, seen.path, seen.headers, seen.body.replace(b"4711", b"4712")),
        Received(seen.method, seen.path.replace("%3A", ":"), seen.headers, seen.body),
        Received(seen.method, seen.path, {**seen.headers, "content-type": "application/json; charset=utf-8"},
                 seen.body),
        Received(seen.method, seen.path, {**seen.headers, "host": "bedrock-runtime.us-east-1.amazonaws.com"},
                 seen.body),
    ]
    for request in changed:
        assert sigv4_mismatch(request, ACCESS_KEY, SECRET_KEY, REGION) == "signature does not match"


# --- a refused question -------------------------------------------------------------------------------------


@STREAMED
def test_a_forbidden_question_is_refused_as_bedrocks_guardrail_and_never_reaches_the_model(envoy, double, sigv4,
                                                                                         streamed):
    double.script(sequence=[_answer(streamed, sigv4, CLEAN)])
    turn = _turn(envoy, streamed, FORBIDDEN_QUESTION)
    assert turn.text == BLOCKED
    assert turn.tool_uses == []
    _assert_stopped(turn, streamed, "no-passwords", "input_check_failed")
    assert _upstream(double) == [], "no model was asked"


# --- a forbidden answer -------------------------------------------------------------------------------------


def test_a_forbidden_answer_is_withheld(envoy, double, sigv4):
    double.script(sequence=[_answer(False, sigv4, FORBIDDEN)])
    turn = _turn(envoy, False)
    assert turn.text == BLOCKED
    assert "NL91" not in json.dumps(turn.texts)
    _assert_stopped(turn, False, "no-iban", "output_check_failed")
    assert turn.usage == USAGE, "the model's usage is kept"
    assert sigv4.verdicts == [None]


def _assert_reset_after_the_closing_events(turn: Turn) -> None:
    """How boto3 ends a stream livecheck stopped before its upstream ended: it yields every closing event
    (through `messageStop` and `metadata`), then the reset that stops the model makes urllib3 raise as the
    iterator reads on. Envoy's wasm ABI ends a response early only by a reset (README: Streamed answers;
    the Anthropic and Responses SDKs raise a connection error there too); with `stream_frame_bytes` the
    stream ends cleanly instead (the test below)."""
    assert turn.kinds()[-2:] == ["messageStop", "metadata"], turn.kinds()
    if DELIVERY == "module":
        # The module ends the response after the closing events: boto3's iterator ends normally.
        assert turn.raised is None, repr(turn.raised)
    else:
        assert isinstance(turn.raised, urllib3.exceptions.ProtocolError), repr(turn.raised)


@pytest.mark.parametrize("how", ["frames", "inside"])
def test_a_streamed_answer_is_cut_at_the_matchs_first_character(envoy, double, sigv4, how):
    """`how` the HTTP chunks end: a whole frame each, or inside every frame's prelude, headers and payload."""
    double.script(sequence=[converse_stream_answer(converse_events(FORBIDDEN), how=how, admit=sigv4)])
    turn = _turn(envoy, True, may_raise=True)
    assert turn.text == BEFORE_MATCH, "exactly the text before the match, then the stop"
    dumped = json.dumps(turn.events).encode()
    for piece in NEVER_SENT:
        assert piece not in dumped, f"{piece!r} reached the caller"
    _assert_stopped(turn, True, "no-iban", "output_check_failed")
    _assert_reset_after_the_closing_events(turn)
    assert sigv4.verdicts == [None]


def test_bedrocks_own_exception_in_a_stream_reaches_boto3_as_bedrocks(envoy, double, sigv4):
    """An in-stream exception is the round's end, passed as it came: boto3 raises it as it raises
    Bedrock's own (EventStreamError with the exception's type as its code), after the text before it."""
    frames = converse_events(CLEAN[:2])[:3] + [exception("throttlingException", "Too many tokens, slow down.")]
    double.script(sequence=[converse_stream_answer(frames, how="inside", admit=sigv4)])
    turn = _turn(envoy, True, may_raise=True)
    assert turn.text == "".join(CLEAN[:2])
    assert isinstance(turn.raised, botocore.exceptions.EventStreamError), repr(turn.raised)
    assert turn.raised.response["Error"] == {"Code": "throttlingException", "Message": "Too many tokens, slow down."}


def test_with_stream_frame_bytes_a_converse_stream_ends_cleanly_clean_or_cut(framed_envoy, double, sigv4):
    """The opt-in length frame: the stream's length announced, the answer (or the cut's closing events)
    followed by whole event-stream messages of a type no service model declares, which boto3 skips; so a
    cut converse_stream ends normally in boto3, nothing raised, as Bedrock's own guardrail stop does."""
    double.script(sequence=[_answer(True, sigv4, CLEAN)])
    turn = _turn(framed_envoy, True)
    assert turn.events == _events_sent(CLEAN)
    assert turn.headers["content-length"] == str(FRAME)
    assert turn.raised is None
    double.script(sequence=[converse_stream_answer(converse_events(FORBIDDEN), how="inside", admit=sigv4)])
    turn = _turn(framed_envoy, True, may_raise=True)
    assert turn.raised is None, repr(turn.raised)
    assert turn.text == BEFORE_MATCH
    assert turn.kinds()[-2:] == ["messageStop", "metadata"], turn.kinds()
    assert turn.stop_reason == "guardrail_intervened"


# --- tool calls ---------------------------------------------------------------------------------------------


@STREAMED
def test_a_tool_call_allowed_tools_does_not_list_is_denied(envoy, double, sigv4, streamed):
    call = DoubleToolCall("send_email", '{"to": "bob@example.com", "body": "hi"}')
    double.script(sequence=[_answer(streamed, sigv4, ["Sending it."], (call,))])
    turn = _turn(envoy, streamed, toolConfig=TOOLS, may_raise=streamed)
    assert turn.tool_uses == [], "the denied call never reaches the caller"
    assert "send_email" not in json.dumps(turn.events) + json.dumps(turn.texts)
    assert turn.texts == {0: "Sending it.", 1: NOT_ALLOWED} if streamed else {0: NOT_ALLOWED}
    _assert_stopped(turn, streamed, "allowed_tools", "tool_call_denied")
    if streamed:
        # Denied as soon as the call was whole: the stream is stopped before the upstream's own end.
        _assert_reset_after_the_closing_events(turn)


@STREAMED
def test_a_tool_call_allowed_tools_lists_arrives_whole(envoy, double, sigv4, streamed):
    call = DoubleToolCall("lookup", '{"order": 4711}', pieces=['{"ord', 'er": 47', '11}'])
    double.script(sequence=[_answer(streamed, sigv4, ["Looking it up."], (call,))])
    turn = _turn(envoy, streamed, toolConfig=TOOLS)
    assert turn.text == "Looking it up."
    assert turn.tool_uses == [{"toolUseId": "tooluse_1", "name": "lookup", "input": {"order": 4711}}]
    assert turn.stop_reason == "tool_use"
    assert "x-core-check" not in turn.headers
    if streamed:
        assert turn.events == _events_sent(["Looking it up."], (call,))


# --- an inference-profile ARN as the model id ---------------------------------------------------------------


@STREAMED
def test_an_inference_profile_arn_is_routed_and_checked(envoy, double, sigv4, streamed):
    double.script(sequence=[_answer(streamed, sigv4, CLEAN)])
    turn = _turn(envoy, streamed, model=PROFILE_ARN)
    assert turn.text == "".join(CLEAN)
    (seen,) = _upstream(double)
    assert seen.path == f"/model/{ENCODED[PROFILE_ARN]}/converse" + ("-stream" if streamed else ""), \
        "the path reaches Bedrock as boto3 encoded it"
    assert sigv4.verdicts == [None]

    double.script(sequence=[_answer(streamed, sigv4, CLEAN)])
    turn = _turn(envoy, streamed, FORBIDDEN_QUESTION, model=PROFILE_ARN)
    assert turn.text == BLOCKED
    _assert_stopped(turn, streamed, "no-passwords", "input_check_failed")
    assert _upstream(double) == []
