"""Tool-call checks end to end (issue 14): the official SDKs -> real Envoy running livecheck.wasm -> the
model double (upstream_double.py, answering with tool calls in each vendor's format), with the `when`
rows judged by the REAL livecheck-judge sidecar (`POST /v1/tool-check`), whose backend is the judge
backend double (judge_backend_double.py: a `billing` condition holds when the arguments contain
`invoice`; `SLOW`, `GARBAGE`, `BROKEN` conditions are answered late, malformed, with HTTP 500).

Every vendor API (Anthropic Messages, Chat Completions, Responses), non-streamed and streamed, with
the SDK calls an agent loop makes (`messages.create`, `messages.stream().get_final_message()`,
`chat.completions.create` with and without `stream=True` gathering the tool-call deltas,
`responses.create`, `responses.stream()` iterated):

  (a) a clean call arrives whole (non-streamed: byte for byte, no X-Core-Check), and the judge read the
      condition, the tool, the arguments as the model wrote them, with the turn's own key;
  (b) a call a `when` row's judge says the condition holds for never reaches the caller: the row's
      reason does (the only text of a non-streamed answer, the last text of a streamed one), in the
      vendor's refusal shape, with `x-core-check: stage=output, check="<row>", code=tool_call_denied`
      on a non-streamed answer; a row without a reason shows the judge's explanation;
  (c) `allowed_tools` and `args` rows deny without any judge call; unparsable arguments deny;
  (d) a judge that errors, answers garbage or is slower than the row's `timeout_ms` denies, the row's
      result errored (a verdict that the condition holds: failed), streamed answers counted alike; a
      streamed answer still being written is reset after the refusal (the Anthropic and Responses SDKs
      raise, as after any cut), one whose end the verdict was waited for ends cleanly;
  (e) the judge reads the user's last 10 messages, oldest first, and nothing else of the turn;
  (f) two calls in one answer, one denied: the answer is denied, and no call of it reaches the caller
      (in a stream too, when the allowed call was complete before the denied one);
  (g) the results API has one result per row (and `allowed_tools`) and call, naming `tool` and `call`
      (numbered in the answer's order, streamed too), never the arguments;
  (h) Chat's legacy `function_call`, Responses `custom_tool_call` and caller-run items named by type.

No byte of a denied call (its name, its arguments) may reach the caller: every byte the SDK's transport
received, the rest of the body after the SDK stopped reading included, is searched.
"""

from __future__ import annotations

from envoy_process import HOLDS_ANSWER_HEADERS, STATS

import dataclasses
import json
import time
import urllib.request
from fnmatch import fnmatchcase
from typing import Optional

import anthropic
import openai
import pytest

from cut_support import assert_the_sdk_call_ended_as_after_a_cut
from judge_backend_double import TOOL_CLEAR_EXPLANATION, TOOL_HOLDS_EXPLANATION
from tool_check_support import (JUDGE_OWN_KEY, Recorder, ToolCheckStack, generated_masked, start_sidecar,
                                x_core_check)
from upstream_double import DOUBLE_IDS, DOUBLE_MODEL, DoubleToolCall, model_double_tool_answer

ANTHROPIC_KEY = "sk-ant-turn-key-tools-e2e"
OPENAI_KEY = "sk-openai-turn-key-tools-e2e"
CLIENT_TIMEOUT = 10.0

TEXT_BEFORE = "Sending it now."
QUESTION = "Please e-mail Bob about Monday."

REASON_BILLING = "No billing info in email."
REASON_RIVAL = "Never write to a rival."
REASON_CARD = "Card numbers may not leave."
REASON_SLOW = "The slow probe could not be checked in time."
REASON_GARBAGE = "The garbage probe could not be checked."
REASON_BROKEN = "The broken probe could not be checked."
# The filter's fixed sentence for a call `allowed_tools` denies (livecheck_wire::reasons::TOOL_NOT_ALLOWED).
REASON_NOT_ALLOWED = "The tool is not one this agent may call."

AGENT = "mail"
POLICY = {
    "default_agent": AGENT,
    "agents": {
        AGENT: {"published": "1", "versions": {"1": {
            "blocked_reply": "I cannot help with that.",
            "allowed_tools": ["get_*", "send_email", "lookup", "*_probe"],
            "tool_checks": [
                {"name": "no-billing", "tool": "send_email", "when": "The email contains billing information",
                 "reason": REASON_BILLING},
                {"name": "no-rival", "tool": "send_email",
                 "args": [{"pointer": "/to", "not_contains": "@rival.example"}], "reason": REASON_RIVAL},
                {"name": "no-card", "args": [{"pointer": "", "pattern": "[0-9]{16}", "max_match": 16}],
                 "reason": REASON_CARD},
                # No reason: the judge's explanation is shown. Its own judge model.
                {"name": "billing-records", "tool": "get_*", "when": "The call fetches billing records",
                 "judge_model": "claude-judge"},
                {"name": "slow-judge", "tool": "slow_probe", "when": "SLOW: the probe touches production",
                 "timeout_ms": 600, "reason": REASON_SLOW},
                {"name": "garbage-judge", "tool": "garbage_probe", "when": "GARBAGE: the probe is risky",
                 "reason": REASON_GARBAGE},
                {"name": "broken-judge", "tool": "broken_probe", "when": "BROKEN: the probe is risky",
                 "reason": REASON_BROKEN},
            ],
        }}},
    },
}


def _rows_for(tool: str) -> list[str]:
    """The names of the rows (and `allowed_tools`) that apply to a call of `tool`, as the policy says."""
    rows = [r["name"] for r in POLICY["agents"][AGENT]["versions"]["1"]["tool_checks"]
            if fnmatchcase(tool, r.get("tool", "*"))]
    return ["allowed_tools", *rows]


# The model double's calls. `never` lists what of a call must not reach the caller when it is denied.
@dataclasses.dataclass
class Case:
    call: DoubleToolCall
    never: list

    @property
    def name(self) -> str:
        return self.call.name


CLEAN_EMAIL = Case(DoubleToolCall("send_email", '{"to": "bob@ok.example", "body": "See you on Monday at ten."}'),
                   [b"send_email", b"bob@ok.example", b"Monday at ten"])
BILLING_EMAIL = Case(DoubleToolCall("send_email", '{"to": "bob@ok.example", "body": "Your invoice 2231 is attached."}',
                                    pieces=['{"to": "bob@ok.ex', 'ample", "body": "Your inv', 'oice 2231 is attached."}']),
                     [b"send_email", b"bob@ok", b"invoice", b"2231", b"oice 2231"])
RIVAL_EMAIL = Case(DoubleToolCall("send_email", '{"to": "eve@rival.example", "body": "Our roadmap, as promised."}'),
                   [b"send_email", b"eve@", b"rival.example", b"roadmap"])
CARD_LOOKUP = Case(DoubleToolCall("lookup", '{"q": "owner of card 4111111111111111"}'),
                   [b"lookup", b"owner of card", b"4111111111111111", b"41111111"])
CLEAN_LOOKUP = Case(DoubleToolCall("lookup", '{"q": "weather in Utrecht"}'), [b"lookup", b"weather in Utrecht"])
UNPARSABLE_LOOKUP = Case(DoubleToolCall("lookup", '{"q": "weather in Zwolle'), [b"lookup", b"Zwolle"])
UNKNOWN_TOOL = Case(DoubleToolCall("delete_account", '{"user": "ann-7731"}'), [b"delete_account", b"ann-7731"])
INVOICE_RECORD = Case(DoubleToolCall("get_record", '{"id": "invoice-8812"}'), [b"get_record", b"invoice-8812", b"8812"])
CLEAN_RECORD = Case(DoubleToolCall("get_record", '{"id": "order-8812"}'), [b"get_record", b"order-8812"])


def _probe(kind: str) -> Case:
    return Case(DoubleToolCall(f"{kind}_probe", '{"target": "db-4490"}'), [f"{kind}_probe".encode(), b"db-4490"])


# --- fixtures ------------------------------------------------------------------------------------------


# `SLOW` judge conditions are answered after this long (the conftest judge_backend fixture).
JUDGE_SLOW_SECONDS = 2.0


@pytest.fixture(scope="module")
def sidecar(judge_backend, tmp_path_factory):
    s = start_sidecar(judge_backend, tmp_path_factory.mktemp("tool-checks-judge"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def stack(double, sidecar, tmp_path_factory):
    s = ToolCheckStack(double, sidecar, tmp_path_factory.mktemp("tool-checks"), POLICY)
    yield s
    s.close()


# --- the SDK calls -------------------------------------------------------------------------------------


@dataclasses.dataclass
class Got:
    """What one SDK call gave the caller."""

    status: int
    headers: object  # httpx headers
    body: bytes  # every byte the caller's transport received
    end: str  # Anthropic stop_reason, Chat finish_reason, Responses status[/incomplete reason]
    texts: list  # the answer's texts in order (blocks, message items; streamed Chat: content deltas)
    calls: list  # (name, arguments as the SDK gave them)
    ident: tuple  # (id, model, usage numbers), non-streamed only
    raised: Optional[BaseException] = None  # the connection error after a cut stream's closing events
    events: list = dataclasses.field(default_factory=list)  # streamed: the SDK's events
    denials: dict = dataclasses.field(default_factory=dict)  # `<row>.failed|errored` -> Envoy's count in the turn


SYSTEM = "SYSTEM-PROMPT-MARK: you are the mail agent."
TOOL_DESCRIPTION = "TOOL-DEFINITION-MARK: sends an e-mail."
_SCHEMA = {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}}}
ANTHROPIC_TOOLS = [{"name": "send_email", "description": TOOL_DESCRIPTION, "input_schema": _SCHEMA}]
CHAT_TOOLS = [{"type": "function", "function": {"name": "send_email", "description": TOOL_DESCRIPTION,
                                                "parameters": _SCHEMA}}]
RESPONSES_TOOLS = [{"type": "function", "name": "send_email", "description": TOOL_DESCRIPTION,
                    "parameters": _SCHEMA, "strict": False}]


def _user(text: str) -> list:
    return [{"role": "user", "content": text}]


def _anthropic_client(envoy, rec: Recorder) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=envoy.url, api_key=ANTHROPIC_KEY, max_retries=0, timeout=CLIENT_TIMEOUT,
                               default_headers={"x-core-agent": AGENT}, http_client=rec.client())


def _openai_client(envoy, rec: Recorder) -> openai.OpenAI:
    return openai.OpenAI(base_url=envoy.url + "/v1", api_key=OPENAI_KEY, max_retries=0, timeout=CLIENT_TIMEOUT,
                         default_headers={"x-core-agent": AGENT}, http_client=rec.client())


def _got(rec: Recorder, **fields) -> Got:
    return Got(status=rec.status, headers=rec.headers, body=bytes(rec.body), **fields)


def anthropic_turn(envoy, stream: bool, messages: Optional[list] = None) -> Got:
    rec = Recorder()
    kwargs = dict(model=DOUBLE_MODEL["anthropic"], max_tokens=256, system=SYSTEM, tools=ANTHROPIC_TOOLS,
                  messages=messages or _user(QUESTION))
    client = _anthropic_client(envoy, rec)
    raised, events = None, []
    if stream:
        with client.messages.stream(**kwargs) as s:
            try:
                for event in s:
                    events.append(event)
                message = s.get_final_message()
            except Exception as e:  # noqa: BLE001 - an agent loop reads the snapshot then (README)
                raised = e
                message = s.current_message_snapshot
    else:
        message = client.messages.create(**kwargs)
    usage = (message.usage.input_tokens, message.usage.output_tokens)
    return _got(rec, end=message.stop_reason, texts=[b.text for b in message.content if b.type == "text"],
                calls=[(b.name, b.input) for b in message.content if b.type == "tool_use"],
                ident=(message.id, message.model, usage), raised=raised, events=events)


def chat_turn(envoy, stream: bool, messages: Optional[list] = None) -> Got:
    rec = Recorder()
    messages = [{"role": "system", "content": SYSTEM}, *(messages or _user(QUESTION))]
    client = _openai_client(envoy, rec)
    if not stream:
        c = client.chat.completions.create(model=DOUBLE_MODEL["chat"], messages=messages, tools=CHAT_TOOLS)
        m = c.choices[0].message
        calls = [(t.function.name, t.function.arguments) for t in m.tool_calls or []]
        if m.function_call is not None:
            calls.append((m.function_call.name, m.function_call.arguments))
        usage = (c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens)
        return _got(rec, end=c.choices[0].finish_reason, texts=[m.content] if m.content else [], calls=calls,
                    ident=(c.id, c.model, usage))
    # As an agent loop gathers a streamed answer: text deltas, each call's name and arguments by index.
    texts, calls, legacy, finish, events = [], {}, None, None, []
    for chunk in client.chat.completions.create(model=DOUBLE_MODEL["chat"], messages=messages, tools=CHAT_TOOLS,
                                                stream=True):
        events.append(chunk)
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                texts.append(delta.content)
            for t in delta.tool_calls or []:
                entry = calls.setdefault(t.index, ["", ""])
                entry[0] += (t.function.name or "") if t.function else ""
                entry[1] += (t.function.arguments or "") if t.function else ""
            if delta.function_call is not None:
                legacy = legacy or ["", ""]
                legacy[0] += delta.function_call.name or ""
                legacy[1] += delta.function_call.arguments or ""
            finish = choice.finish_reason or finish
    gathered = [tuple(calls[i]) for i in sorted(calls)] + ([tuple(legacy)] if legacy else [])
    return _got(rec, end=finish, texts=texts, calls=gathered, ident=(), events=events)


def _item_call(item) -> Optional[tuple]:
    if item.type == "function_call":
        return (item.name, item.arguments)
    if item.type == "custom_tool_call":
        return (item.name, item.input)
    if item.type in ("message", "reasoning"):
        return None
    return (item.type, item.model_dump(exclude={"id", "call_id", "status", "type"}))


def _responses_end(response) -> str:
    details = response.incomplete_details
    return response.status + (f"/{details.reason}" if details else "")


def responses_turn(envoy, stream: bool, messages: Optional[list] = None) -> Got:
    rec = Recorder()
    kwargs = dict(model=DOUBLE_MODEL["responses"], instructions=SYSTEM, tools=RESPONSES_TOOLS,
                  input=messages or _user(QUESTION))
    client = _openai_client(envoy, rec)
    if not stream:
        r = client.responses.create(**kwargs)
        texts = [c.text for item in r.output if item.type == "message" for c in item.content if c.type == "output_text"]
        calls = [c for c in (_item_call(item) for item in r.output) if c is not None]
        usage = (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens)
        return _got(rec, end=_responses_end(r), texts=texts, calls=calls, ident=(r.id, r.model, usage))
    events, raised = [], None
    with client.responses.stream(**kwargs) as s:
        try:
            for event in s:
                events.append(event)
        except Exception as e:  # noqa: BLE001 - the SDK raises on the reset after a cut (README)
            raised = e
    texts: dict = {}
    calls: dict = {}
    for e in events:
        if e.type == "response.output_text.delta":
            texts[e.item_id] = texts.get(e.item_id, "") + e.delta
        elif e.type in ("response.output_item.added", "response.output_item.done"):
            call = _item_call(e.item)
            if call is not None and (e.type == "response.output_item.done" or e.item.id not in calls):
                calls[e.item.id] = call
    final = next((e.response for e in reversed(events) if e.type in ("response.completed", "response.incomplete",
                                                                     "response.failed")), None)
    return _got(rec, end=_responses_end(final) if final else "no end", texts=list(texts.values()),
                calls=list(calls.values()), ident=(), raised=raised, events=events)


TURN = {"anthropic": anthropic_turn, "chat": chat_turn, "responses": responses_turn}
END_ALLOWED = {"anthropic": "tool_use", "chat": "tool_calls", "responses": "completed"}
END_DENIED = {"anthropic": "refusal", "chat": "content_filter", "responses": "incomplete/content_filter"}
DOUBLE_USAGE_SEEN = {"anthropic": (31, 47), "chat": (31, 47, 78), "responses": (31, 47, 78)}

VENDORS = ["anthropic", "chat", "responses"]
MODES = [pytest.param(False, id="non-streamed"), pytest.param(True, id="streamed")]
every_path = pytest.mark.parametrize("stream", MODES)
every_vendor = pytest.mark.parametrize("vendor", VENDORS)


def _arguments(value):
    """Arguments as comparable values: JSON text parsed, an object kept, free text as is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _same_calls(got: list, expected: list[DoubleToolCall]) -> bool:
    return [(n, _arguments(a)) for n, a in got] == [(c.name, _arguments(c.arguments)) for c in expected]


# A streamed answer is cut as test_stream_wire.py's are only while the model still writes: the refusal's
# closing events go out, then the next upstream chunk (or, when none comes within 50 ms, the filter's timer)
# resets the stream. A refusal written with the model's last event ends the stream cleanly instead. So the
# model double's Anthropic and Responses streams below are timed for one outcome (a Chat call ends at
# `data: [DONE]` either way): after its last call the model goes quiet, QUIET when every row decides as the
# call completes; when a `when` row reads a call, long enough for its judge (the row's `timeout_ms`, else
# JUDGE_WAIT), and then it sends an SSE comment (skipped by the filter and the SDKs, as a vendor's keep-alive
# is) and, QUIET later, the events that end its answer. Either way the refusal goes out while the model still
# writes, and the stream is reset.
TAIL_EVENTS = {"anthropic": 2, "responses": 1}  # what the model double sends after its last call
KEEP_ALIVE = b": keep-alive\n\n"
QUIET = 0.1  # more than the filter's close grace (50 ms, src/root/timers.rs CLOSE_GRACE_MS)
JUDGE_WAIT = 0.3


def _judge_wait(calls: list[DoubleToolCall]) -> Optional[float]:
    """How long the judges of `calls` may take; None when no `when` row reads any of them."""
    judged = [r for r in POLICY["agents"][AGENT]["versions"]["1"]["tool_checks"] if "when" in r
              and any(fnmatchcase(c.name, r.get("tool", "*")) for c in calls)]
    if not judged:
        return None
    return max(r.get("timeout_ms", 0) / 1000 for r in judged) + JUDGE_WAIT


def _model_double_answer(vendor: str, calls: list[DoubleToolCall], text: str, stream: bool, timed: bool):
    answer = model_double_tool_answer(vendor, calls, text=text, stream=stream)
    if stream and timed and vendor in TAIL_EVENTS:
        tail, wait = TAIL_EVENTS[vendor], _judge_wait(calls)
        if wait is None:
            answer.delays = {-tail: QUIET}
        else:
            answer.body_chunks.insert(len(answer.body_chunks) - tail, KEEP_ALIVE)
            answer.delays = {-tail - 1: wait, -tail: QUIET}
    return answer


def turn(stack, double, vendor: str, stream: bool, cases: list, messages: Optional[list] = None,
         text: str = TEXT_BEFORE, timed: bool = True) -> Got:
    """One turn; `timed=False`: a streamed answer as the model double writes it, its events 10 ms apart."""
    calls = [c.call if isinstance(c, Case) else c for c in cases]
    double.script(default=_model_double_answer(vendor, calls, text, stream, timed))
    before = _outcomes(stack)
    got = TURN[vendor](stack.envoy, stream, messages)
    after = _outcomes(stack)
    got.denials = {name: after[name] - before.get(name, 0) for name in after if after[name] != before.get(name, 0)}
    return got


def _outcomes(stack) -> dict:
    """The filter's denying outcomes by row (`<row>.failed` / `<row>.errored`), as Envoy counts them."""
    prefix = f"{STATS}livecheck.{AGENT}."
    return {name[len(prefix):]: value for name, value in stack.envoy.stats(prefix).items()
            if name.endswith((".failed", ".errored"))}


# --- what a caller sees ----------------------------------------------------------------------------------


def assert_allowed(got: Got, vendor: str, stream: bool, calls: list[DoubleToolCall], double) -> None:
    assert got.status == 200
    assert got.raised is None, got.raised
    assert got.end == END_ALLOWED[vendor], got.end
    assert got.texts == [TEXT_BEFORE], got.texts
    assert _same_calls(got.calls, calls), got.calls
    for name, arguments in got.calls:
        if isinstance(arguments, str):  # Chat and Responses hand the text over: as the model wrote it
            assert arguments in [c.arguments for c in calls]
    if not stream:
        assert x_core_check(got.headers) is None
        assert len(double.writes) == 1, "asked upstream once"
        upstream = b"".join(c.encode() if isinstance(c, str) else c for c in double.default.body_chunks)
        assert got.body == upstream, "an allowed non-streamed answer arrives unchanged"


ANTHROPIC_WIRE_EVENTS = {"message_start", "content_block_start", "content_block_delta", "content_block_stop",
                         "message_delta", "message_stop"}


def assert_denied(got: Got, vendor: str, stream: bool, check: str, reason: str, cases: list,
                  held_headers: bool = False, outcome: str = "failed", reset: bool = True) -> None:
    """The vendor's refusal with `reason` as the only (non-streamed) or last (streamed) text, and
    nothing of the denied calls; Envoy counted one `outcome` (`failed`: the row denied, `errored`:
    it could not decide) of `check` and no other denying outcome. `held_headers`: the policy holds a
    non-streamed answer's headers; `reset`: a streamed answer was still being written when it was
    denied, so the stream is reset after its closing events."""
    assert got.status == 200
    assert got.end == END_DENIED[vendor], (got.end, got.texts, got.raised)
    assert got.calls == [], f"the caller got a tool call: {got.calls}"
    for case in cases:
        for never in case.never:
            assert never not in got.body, f"{never!r} of the denied call reached the caller: {got.body[-1500:]!r}"
    assert got.denials == {f"{check}.{outcome}": 1}, got.denials
    if not stream:
        assert got.texts == [reason], got.texts
        if held_headers or HOLDS_ANSWER_HEADERS:
            assert x_core_check(got.headers) == {"stage": "output", "check": check, "code": "tool_call_denied"}
            assert got.headers["content-length"] == str(len(got.body))
        else:
            # The answer's headers went on when they came: the row is named in the stats and results.
            assert x_core_check(got.headers) is None
        assert got.ident == (DOUBLE_IDS[vendor], DOUBLE_MODEL[vendor], DOUBLE_USAGE_SEEN[vendor]), \
            "the answer keeps its id, model and usage"
        body = json.loads(got.body)
        if vendor == "anthropic":
            assert body["content"] == [{"type": "text", "text": reason}]
            assert body["stop_reason"] == "refusal"
        elif vendor == "chat":
            (choice,) = body["choices"]
            assert choice["message"]["content"] == reason and choice["finish_reason"] == "content_filter"
            assert not choice["message"].get("tool_calls") and not choice["message"].get("function_call")
        else:
            assert (body["status"], body["incomplete_details"]) == ("incomplete", {"reason": "content_filter"})
            (item,) = body["output"]
            assert item["type"] == "message"
            assert [c["text"] for c in item["content"] if c["type"] == "output_text"] == [reason]
        return
    # Streamed: the text before the call streamed, then the reason as the last text, then the end.
    assert got.texts and got.texts[-1] == reason, got.texts
    assert "".join(got.texts[:-1]) == TEXT_BEFORE, got.texts
    if vendor == "anthropic":
        # The wire's events (the SDK adds its own `text`, `input_json`, ... events between them).
        wire = [e.type for e in got.events if e.type in ANTHROPIC_WIRE_EVENTS]
        assert wire[-5:] == ["content_block_start", "content_block_delta", "content_block_stop",
                             "message_delta", "message_stop"], wire
        start = [e for e in got.events if e.type == "content_block_start"][-1]
        assert start.content_block.type == "text", "the reason comes in a new text block"
        assert not any(e.type == "content_block_start" and e.content_block.type == "tool_use" for e in got.events)
    elif vendor == "chat":
        last = [c for c in got.events if c.choices][-1].choices[0]
        assert last.finish_reason == "content_filter"
        assert b"data: [DONE]" in got.body, "Chat ends at [DONE]"
        assert not any(ch.delta.tool_calls or ch.delta.function_call for c in got.events for ch in c.choices)
    else:
        assert got.events[-1].type == "response.incomplete", [e.type for e in got.events[-4:]]
        added = [e.item for e in got.events if e.type == "response.output_item.added"]
        assert all(item.type == "message" for item in added), [item.type for item in added]
    # As test_stream_wire.py pins for a cut: the Chat SDK ends at `data: [DONE]`; the Anthropic and
    # Responses SDKs read on and raise a connection error on the reset after the closing events (asserted
    # above to have arrived). A stream not reset ends as the vendor's own does: nothing raises.
    if reset:
        assert_the_sdk_call_ended_as_after_a_cut(vendor, got.raised)
    else:
        assert got.raised is None, repr(got.raised)


# --- the judge backend double through the real sidecar (no filter involved) -------------------------------


def test_the_judge_double_answers_tool_checks_through_the_real_sidecar(sidecar, judge_backend):
    """POST /v1/tool-check straight to the sidecar, on both judge APIs: the double reads the fenced
    sections (the sidecar keeps the last 10 user messages) and decides per its documented rules."""
    intent = [f"user message {i:02d}" for i in range(1, 13)]
    cases = [
        ("The email contains billing information", '{"body": "invoice 7"}', "failed", TOOL_HOLDS_EXPLANATION),
        ("The email contains billing information", '{"body": "hello"}', "passed", TOOL_CLEAR_EXPLANATION),
        ("Anything else", '{"x": "HOLDS-FOR-JUDGE"}', "failed", TOOL_HOLDS_EXPLANATION),
        ("GARBAGE please", "{}", "errored", None),
        ("BROKEN please", "{}", "errored", None),
    ]
    for model, path in (("gpt-judge", "/v1/chat/completions"), ("claude-judge", "/v1/messages")):
        for condition, arguments, outcome, reason in cases:
            judge_backend.reset()
            body = json.dumps({"condition": condition, "tool": "send_email", "arguments": arguments,
                               "intent": intent, "judge_model": model}).encode()
            request = urllib.request.Request(sidecar.url + "/v1/tool-check", data=body, method="POST",
                                             headers={"content-type": "application/json"})
            with urllib.request.urlopen(request, timeout=5) as r:
                verdict = json.load(r)
            assert verdict["outcome"] == outcome, (model, condition, verdict)
            if reason is not None:
                assert verdict["reason"] == reason
            (call,) = judge_backend.seen()
            assert call.path == path
            seen = call.tool_check
            assert (seen.condition, seen.tool, seen.arguments) == (condition, "send_email", arguments)
            assert seen.intent == intent[2:], "the last 10, oldest first"
            assert call.judged_text is None
            # No key came with the request: the backend's own.
            key = call.headers.get("x-api-key") or call.headers.get("authorization", "").removeprefix("Bearer ")
            assert key == JUDGE_OWN_KEY


# --- (a) a clean call ------------------------------------------------------------------------------------


@every_vendor
@every_path
def test_a_clean_call_arrives_whole(stack, double, judge_backend, vendor, stream):
    judge_backend.reset()
    got = turn(stack, double, vendor, stream, [CLEAN_EMAIL])

    assert_allowed(got, vendor, stream, [CLEAN_EMAIL.call], double)
    (call,) = judge_backend.tool_checks()
    seen = call.tool_check
    assert seen.condition == "The email contains billing information"
    assert (seen.tool, seen.arguments) == ("send_email", CLEAN_EMAIL.call.arguments), \
        "the judge read the arguments as the model wrote them"
    assert seen.intent == [QUESTION]
    # The turn's own key, in the judge API's style (the turn's model picks the API).
    if vendor == "anthropic":
        assert call.path == "/v1/messages" and call.headers.get("x-api-key") == ANTHROPIC_KEY
    else:
        assert call.path == "/v1/chat/completions"
        assert call.headers.get("authorization") == f"Bearer {OPENAI_KEY}"
    assert call.body["model"] == DOUBLE_MODEL[vendor], "the judge model is the turn's"


# --- (b) a `when` row whose condition holds --------------------------------------------------------------


@every_vendor
@every_path
def test_a_call_the_judge_says_the_condition_holds_for_is_denied_with_the_rows_reason(
        stack, double, judge_backend, vendor, stream):
    judge_backend.reset()
    got = turn(stack, double, vendor, stream, [BILLING_EMAIL])

    assert_denied(got, vendor, stream, "no-billing", REASON_BILLING, [BILLING_EMAIL])
    (call,) = judge_backend.tool_checks()
    assert call.tool_check.arguments == BILLING_EMAIL.call.arguments
    assert call.tool_check.answered == "holds"


@every_vendor
@every_path
def test_a_row_without_a_reason_shows_the_judges_explanation(stack, double, judge_backend, vendor, stream):
    judge_backend.reset()
    got = turn(stack, double, vendor, stream, [INVOICE_RECORD])

    assert_denied(got, vendor, stream, "billing-records", TOOL_HOLDS_EXPLANATION, [INVOICE_RECORD])
    (call,) = judge_backend.tool_checks()
    assert (call.path, call.body["model"]) == ("/v1/messages", "claude-judge"), "the row's own judge model"


@every_vendor
def test_a_call_the_rows_judge_clears_passes(stack, double, judge_backend, vendor):
    judge_backend.reset()
    got = turn(stack, double, vendor, False, [CLEAN_RECORD])
    assert_allowed(got, vendor, False, [CLEAN_RECORD.call], double)
    assert [c.tool_check.answered for c in judge_backend.tool_checks()] == ["clear"]


# --- (c) decided in the filter: allowed_tools and args rows ----------------------------------------------


@every_vendor
@every_path
def test_allowed_tools_denies_a_tool_not_listed_without_asking_the_judge(stack, double, judge_backend, vendor, stream):
    judge_backend.reset()
    got = turn(stack, double, vendor, stream, [UNKNOWN_TOOL])

    assert judge_backend.seen() == [], "a call the list denies costs no judge call"
    # The reason allowed_tools shows is the filter's own sentence (the spec does not fix it); whether
    # it names the tool is the next test's question.
    assert_denied(got, vendor, stream, "allowed_tools", REASON_NOT_ALLOWED,
                  [Case(UNKNOWN_TOOL.call, [n for n in UNKNOWN_TOOL.never if n != b"delete_account"])])


@every_vendor
@every_path
def test_allowed_tools_reason_does_not_name_the_denied_tool(stack, double, judge_backend, vendor, stream):
    """Spec: no byte of a denied call, its name included, reaches the caller."""
    got = turn(stack, double, vendor, stream, [UNKNOWN_TOOL])
    assert got.end == END_DENIED[vendor]
    assert b"delete_account" not in got.body, f"the denial names the denied tool: {got.texts}"


@every_vendor
@every_path
@pytest.mark.parametrize("case, check, reason", [
    pytest.param(RIVAL_EMAIL, "no-rival", REASON_RIVAL, id="not_contains-at-pointer"),
    pytest.param(CARD_LOOKUP, "no-card", REASON_CARD, id="pattern-over-all-arguments"),
])
def test_an_args_row_denies_without_asking_the_judge(stack, double, judge_backend, vendor, stream, case, check, reason):
    judge_backend.reset()
    got = turn(stack, double, vendor, stream, [case])

    assert_denied(got, vendor, stream, check, reason, [case])
    assert judge_backend.seen() == [], "an args row is decided in the filter; a denied call asks no judge"


@pytest.fixture(scope="module")
def held_stack(double, sidecar, tmp_path_factory):
    """POLICY with `hold_answer_headers` (envoy/livecheck.yaml's wasm filter sets the flag it needs)."""
    s = ToolCheckStack(double, sidecar, tmp_path_factory.mktemp("tool-checks-held"), dict(POLICY, hold_answer_headers=True))
    yield s
    s.close()


@every_vendor
@pytest.mark.parametrize("case, check, reason", [
    pytest.param(BILLING_EMAIL, "no-billing", REASON_BILLING, id="judged"),
    pytest.param(RIVAL_EMAIL, "no-rival", REASON_RIVAL, id="args-row"),
])
def test_with_hold_answer_headers_a_denied_answer_names_its_row(held_stack, double, judge_backend, vendor, case, check,
                                                                reason):
    judge_backend.reset()
    got = turn(held_stack, double, vendor, False, [case])

    assert_denied(got, vendor, False, check, reason, [case], held_headers=True)
    clean = turn(held_stack, double, vendor, False, [CLEAN_EMAIL])
    assert clean.calls and x_core_check(clean.headers) is None
    # Passed as it came, framed as the vendor framed it: its length, not chunked.
    assert clean.headers.get("content-length") == str(len(clean.body)), dict(clean.headers)


@pytest.mark.parametrize("vendor, stream", [
    pytest.param("anthropic", True, id="anthropic-streamed"),  # a non-streamed tool_use input is always JSON
    pytest.param("chat", False, id="chat-non-streamed"),
    pytest.param("chat", True, id="chat-streamed"),
    pytest.param("responses", False, id="responses-non-streamed"),
    pytest.param("responses", True, id="responses-streamed"),
])
def test_arguments_that_are_not_json_deny_an_args_row(stack, double, judge_backend, vendor, stream):
    judge_backend.reset()
    got = turn(stack, double, vendor, stream, [UNPARSABLE_LOOKUP])
    # The row cannot read them: undecided, so errored (and denied: a tool check has no `on_error`).
    assert_denied(got, vendor, stream, "no-card", REASON_CARD, [UNPARSABLE_LOOKUP], outcome="errored")
    assert judge_backend.seen() == []


# --- (d) a judge that cannot decide denies ---------------------------------------------------------------


@every_vendor
@every_path
@pytest.mark.parametrize("kind, check, reason", [
    pytest.param("slow", "slow-judge", REASON_SLOW, id="slower-than-timeout_ms"),
    pytest.param("garbage", "garbage-judge", REASON_GARBAGE, id="malformed-verdict"),
    pytest.param("broken", "broken-judge", REASON_BROKEN, id="backend-error"),
])
def test_a_judge_that_cannot_decide_denies(stack, double, judge_backend, vendor, stream, kind, check, reason):
    judge_backend.reset()
    case = _probe(kind)
    started = time.monotonic()
    got = turn(stack, double, vendor, stream, [case])
    took = time.monotonic() - started

    # Undecided, not denied by a verdict: the row's result is errored.
    assert_denied(got, vendor, stream, check, reason, [case], outcome="errored")
    (call,) = judge_backend.tool_checks()
    assert call.tool_check.answered == ("clear" if kind == "slow" else kind), "the judge was asked"
    if kind == "slow":
        # The row's 600 ms, not the double's 2 s (nor the sidecar's 5 s).
        assert 0.5 <= took < 1.8, f"denied after {took:.2f}s"


@pytest.mark.parametrize("vendor", ["anthropic", "responses"])
def test_a_denial_written_into_the_held_end_of_a_stream_ends_it_cleanly(stack, double, judge_backend, vendor):
    """The model ended its answer (its events 10 ms apart) long before the judge decided (the row's 600 ms
    ran out): the upstream's end is held for the verdict, the refusal is written into it, and the stream
    ends as the vendor's own would, with nothing for the SDK to raise on (contrast the cuts above)."""
    judge_backend.reset()
    case = _probe("slow")
    got = turn(stack, double, vendor, True, [case], timed=False)
    assert_denied(got, vendor, True, "slow-judge", REASON_SLOW, [case], outcome="errored", reset=False)


# --- (e) what the judge reads ----------------------------------------------------------------------------

ASSISTANT_MARK = "ASSISTANT-SAID"


def _long_conversation(vendor: str) -> tuple[list, list[str]]:
    """12 user messages with the assistant's answers between them; the user texts in order."""
    users = [f"INTENT-{i:02d}: step {i} of the plan" for i in range(1, 13)]
    messages = []
    for i, text in enumerate(users):
        if i:
            messages.append({"role": "assistant", "content": f"{ASSISTANT_MARK}-{i:02d}"})
        # A user message as a list of text parts in Anthropic's and Responses' shapes, once.
        if i == 5 and vendor == "anthropic":
            messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
        elif i == 5 and vendor == "responses":
            messages.append({"role": "user", "content": [{"type": "input_text", "text": text}]})
        else:
            messages.append({"role": "user", "content": text})
    return messages, users


@every_vendor
@every_path
def test_the_judge_reads_the_last_ten_user_messages_and_nothing_else_of_the_turn(
        stack, double, judge_backend, vendor, stream):
    judge_backend.reset()
    messages, users = _long_conversation(vendor)
    got = turn(stack, double, vendor, stream, [CLEAN_EMAIL], messages=messages, text="ANSWER-TEXT-MARK before.")
    assert got.end == END_ALLOWED[vendor]

    (call,) = judge_backend.tool_checks()
    assert call.tool_check.intent == users[2:], "the last 10 user messages, oldest first"
    everything = json.dumps(call.body)
    for absent in ("INTENT-01", "INTENT-02", ASSISTANT_MARK, "SYSTEM-PROMPT-MARK", "TOOL-DEFINITION-MARK",
                   "ANSWER-TEXT-MARK"):
        assert absent not in everything, f"the judge saw {absent}"


# --- (f) several calls in one answer ---------------------------------------------------------------------


@every_vendor
@every_path
def test_two_calls_one_denied_deny_the_answer(stack, double, judge_backend, vendor, stream):
    judge_backend.reset()
    got = turn(stack, double, vendor, stream, [BILLING_EMAIL, CLEAN_LOOKUP])
    assert_denied(got, vendor, stream, "no-billing", REASON_BILLING, [BILLING_EMAIL, CLEAN_LOOKUP])


@every_vendor
def test_a_denied_second_call_denies_the_whole_non_streamed_answer(stack, double, judge_backend, vendor):
    judge_backend.reset()
    got = turn(stack, double, vendor, False, [CLEAN_LOOKUP, RIVAL_EMAIL])
    assert_denied(got, vendor, False, "no-rival", REASON_RIVAL, [CLEAN_LOOKUP, RIVAL_EMAIL])


@every_vendor
def test_a_denied_later_call_denies_a_streamed_answer_whose_earlier_call_was_allowed(stack, double, judge_backend,
                                                                                      vendor):
    """Spec: one denied call denies the answer. In a stream an earlier call can be complete (and
    allowed) before a later one is denied; the caller must still get no call to run: an agent loop
    that runs the calls it gathered would otherwise run the first one of a denied answer."""
    got = turn(stack, double, vendor, True, [CLEAN_LOOKUP, CARD_LOOKUP])
    assert_denied(got, vendor, True, "no-card", REASON_CARD, [CARD_LOOKUP])  # the card never arrives
    assert got.calls == [], f"a call of the denied answer reached the caller: {got.calls}"


@every_vendor
@every_path
def test_two_clean_calls_arrive_whole(stack, double, judge_backend, vendor, stream):
    judge_backend.reset()
    got = turn(stack, double, vendor, stream, [CLEAN_EMAIL, CLEAN_LOOKUP])
    assert_allowed(got, vendor, stream, [CLEAN_EMAIL.call, CLEAN_LOOKUP.call], double)


# --- (g) results -----------------------------------------------------------------------------------------


@every_vendor
@pytest.mark.parametrize("denied, stream", [
    pytest.param(True, False, id="denied-non-streamed"),
    pytest.param(False, False, id="allowed-non-streamed"),
    # (A streamed answer denied at its first call may end before its second call was checked.)
    pytest.param(False, True, id="allowed-streamed"),
])
def test_results_one_per_row_and_call_naming_tool_and_call_never_the_arguments(stack, double, judge_backend,
                                                                               vendor, denied, stream):
    first = BILLING_EMAIL if denied else CLEAN_EMAIL
    got = turn(stack, double, vendor, stream, [first, CLEAN_LOOKUP])
    assert got.end == (END_DENIED if denied else END_ALLOWED)[vendor]
    turn_id = got.headers.get("x-core-response-id")
    assert turn_id, "every checked turn carries its id"

    expected = {(name, "send_email", 1) for name in _rows_for("send_email")}
    expected |= {(name, "lookup", 2) for name in _rows_for("lookup")}
    items, raw = stack.wait_checks(turn_id, len(expected))

    assert sorted((i["name"], i.get("tool"), i.get("call")) for i in items) == sorted(expected), \
        "one result per row and call"
    assert all(i["stage"] == "output" for i in items)
    outcomes = {(i["name"], i["call"]): i["outcome"] for i in items}
    assert outcomes[("no-billing", 1)] == ("failed" if denied else "passed")
    assert all(o == "passed" for k, o in outcomes.items() if k != ("no-billing", 1)), outcomes
    recorded = generated_masked(raw)
    for case in (first, CLEAN_LOOKUP):
        for never in case.never[1:]:
            assert never not in recorded, f"{never!r}: the results carry a call's arguments"


@pytest.fixture(scope="module")
def small_stack(double, sidecar, tmp_path_factory):
    """The same policy with `max_body_bytes` at 4 KiB: an answer with a long call cannot be read."""
    policy = json.loads(json.dumps(POLICY))
    policy["max_body_bytes"] = 4096
    s = ToolCheckStack(double, sidecar, tmp_path_factory.mktemp("tool-checks-small"), policy)
    yield s
    s.close()


LONG_CALL = Case(DoubleToolCall("delete_account", json.dumps({"user": "ann-7731", "note": "word " * 2000})),
                 [b"delete_account", b"ann-7731"])


@every_vendor
@every_path
def test_an_answer_whose_calls_are_too_long_to_read_is_withheld(small_stack, double, judge_backend, vendor, stream):
    """Tool checks have no `on_error`: an answer past `max_body_bytes` cannot have its calls read, so it is
    withheld (it passed unchecked before, non-streamed), and every tool check counts one errored result
    for the turn, with no tool or call named (none could be read)."""
    judge_backend.reset()
    got = turn(small_stack, double, vendor, stream, [LONG_CALL])
    assert got.calls == [], f"an unchecked call reached the caller: {got.calls}"
    for never in LONG_CALL.never:
        assert never not in got.body, never
    assert judge_backend.seen() == []
    rows = ["allowed_tools", *(r["name"] for r in POLICY["agents"][AGENT]["versions"]["1"]["tool_checks"])]
    assert got.denials == {f"{name}.errored": 1 for name in rows}, got.denials
    turn_id = got.headers.get("x-core-response-id")
    items, _ = small_stack.wait_checks(turn_id, len(rows))
    assert sorted((i["name"], i["outcome"], i.get("tool"), i.get("call")) for i in items) == \
        sorted((name, "errored", None, None) for name in rows)


# --- (h) the other shapes of a call ----------------------------------------------------------------------


LEGACY_CLEAN = DoubleToolCall("send_email", CLEAN_EMAIL.call.arguments, kind="legacy")
LEGACY_BILLING = DoubleToolCall("send_email", BILLING_EMAIL.call.arguments, kind="legacy")


@every_path
def test_chat_legacy_function_call(stack, double, judge_backend, stream):
    judge_backend.reset()
    got = turn(stack, double, "chat", stream, [LEGACY_CLEAN])
    assert got.end == "function_call"
    assert _same_calls(got.calls, [LEGACY_CLEAN]) and got.texts == [TEXT_BEFORE]
    assert [c.tool_check.tool for c in judge_backend.tool_checks()] == ["send_email"]

    got = turn(stack, double, "chat", stream, [LEGACY_BILLING])
    assert_denied(got, "chat", stream, "no-billing", REASON_BILLING, [Case(LEGACY_BILLING, BILLING_EMAIL.never)])


CUSTOM_CLEAN = DoubleToolCall("lookup", "weather in Utrecht, please", kind="custom_tool_call")
CUSTOM_CARD = DoubleToolCall("lookup", "card 4111111111111111 owner", kind="custom_tool_call")


@every_path
def test_responses_custom_tool_call_free_text_is_what_the_pointer_reads(stack, double, judge_backend, stream):
    got = turn(stack, double, "responses", stream, [CUSTOM_CLEAN])
    assert got.end == "completed" and got.calls == [("lookup", CUSTOM_CLEAN.arguments)]

    got = turn(stack, double, "responses", stream, [CUSTOM_CARD])
    assert_denied(got, "responses", stream, "no-card", REASON_CARD,
                  [Case(CUSTOM_CARD, [b"4111111111111111", b"card 41", b"lookup"])])


SHELL_CALL = DoubleToolCall("", "", kind="local_shell_call", item={
    "action": {"type": "exec", "command": ["rm", "-rf", "/srv/unique-dir-5521"], "env": {}}})


@every_path
def test_responses_caller_run_items_are_named_by_their_type(stack, double, judge_backend, stream):
    """A `local_shell_call` item is a call to the tool `local_shell_call`, which `allowed_tools` does
    not list (whether the reason may name it: test_allowed_tools_reason_does_not_name_the_denied_tool)."""
    judge_backend.reset()
    got = turn(stack, double, "responses", stream, [SHELL_CALL])
    assert_denied(got, "responses", stream, "allowed_tools", REASON_NOT_ALLOWED,
                  [Case(SHELL_CALL, [b"unique-dir-5521", b"-rf"])])
    assert judge_backend.seen() == []
    items, _raw = stack.wait_checks(got.headers.get("x-core-response-id"), 1)
    assert ("allowed_tools", "local_shell_call", 1, "failed") in [
        (i["name"], i.get("tool"), i.get("call"), i["outcome"]) for i in items], items
