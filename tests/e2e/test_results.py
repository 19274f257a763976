"""Results, pass rates and events end to end: the official SDKs -> real Envoy running livecheck.wasm ->
the scripted upstream double, with every turn's report going to the REAL livecheck-judge sidecar
(its SQLite store in the sidecar's workdir, its operator API behind a bearer token, its signed
`response.check_failed` webhooks to a receiver in this test, background checks judged by the judge
backend double).

  1. a refused question carries `x-core-response-id: lc_<32 hex>`; the API has exactly its one input
     result (fixed reason, attempt 1); an unknown id is 404, no / a wrong token 401;
  2. a clean non-streamed answer's results read the same by the `lc_` id and by the upstream's own id
     the SDK got (message.id / completion.id / response.id), also page by page; a withheld answer's
     failed output result; the upstream id also finds a turn whose agent has no blocking output check
     (only background ones, or input checks only);
  3. a background judged output check (sample 1) is judged after the turn and stored as mode
     `background`, passed and failed;
  4. the summary counts passed / failed per check of an agent;
  5. delivery survives a sidecar outage: the sidecar stopped (by its PID) mid-traffic and restarted on
     the port Envoy points at; every turn answered, every result stored exactly once, and Envoy's
     `livecheck.reports.retried` counter moved;
  6. no text leaks: unique markers in every question and answer appear in no API body, no webhook event
     (each event's Standard Webhooks signature verified), no sidecar log line, no byte of the SQLite store
     (database, WAL, shared memory);
  7. erasing a person (`DELETE /people/{person}/checks`) removes their turns only.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import datetime
import hashlib
import hmac
import json
import re
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, Optional

import anthropic
import openai
import pytest

from envoy_process import STATS, Envoy, JudgeSidecar, envoy_for_judge
from judge_backend_double import FAIL_MARKER
from webhook_receiver_double import Delivery, WebhookReceiver
from upstream_double import Answer

TOKEN = "op-" + secrets.token_hex(16)
TOKEN_ENV = "LIVECHECK_E2E_API_TOKEN"
# Standard Webhooks style: the key is the base64 after `whsec_`.
WEBHOOK_KEY = secrets.token_bytes(24)
WEBHOOK_SECRET = "whsec_" + base64.b64encode(WEBHOOK_KEY).decode()
WEBHOOK_SECRET_ENV = "LIVECHECK_E2E_WEBHOOK_SECRET"

BLOCKED = "I cannot help with that here."
FORBIDDEN_OUT = "classified"  # the output rule check's expected text
RULE_REASON = "The answer contains text it had to avoid."
POLITE_REASON = "The text keeps the rule."  # the judge backend double's sentences
RUDE_REASON = "The text breaks the rule."
TURN_ID = re.compile(r"lc_[0-9a-f]{32}")
CLIENT_TIMEOUT = 10.0
PERSON_HEADER = "x-core-person"

NO_PASSWORDS = {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"}
NO_CLASSIFIED = {"name": "no-classified", "stage": "output", "kind": "not_contains", "expected": FORBIDDEN_OUT}
POLITE_BG = {"name": "polite-bg", "stage": "output", "kind": "polite_tone", "mode": "background",
             "sample": 1, "judge_model": "gpt-judge"}


def _agent(*checks: dict) -> dict:
    return {"published": "1", "versions": {"1": {"blocked_reply": BLOCKED, "live_checks": list(checks)}}}


# One agent per test, so each test's counts are its own (agents are chosen by `x-core-agent`).
CONFIG = {
    "default_agent": "rules",
    "agents": {
        "rules": _agent(NO_PASSWORDS, NO_CLASSIFIED),
        "input-only": _agent(NO_PASSWORDS),
        "summary": _agent(NO_PASSWORDS, NO_CLASSIFIED),
        "background": _agent(NO_PASSWORDS, POLITE_BG),
        "outage": _agent(NO_PASSWORDS, NO_CLASSIFIED),
        "leaks": _agent(NO_PASSWORDS, NO_CLASSIFIED, POLITE_BG),
    },
}


# --- the webhook receiver ------------------------------------------------------------------------------


def signature_ok(delivery: Delivery, key: bytes) -> bool:
    """Standard Webhooks: `v1,<base64 HMAC-SHA256 over "{webhook-id}.{webhook-timestamp}.{body}">`; the
    header may list several space-separated signatures."""
    h = delivery.headers
    signed = f"{h['webhook-id']}.{h['webhook-timestamp']}.".encode() + delivery.body
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(hmac.compare_digest(expected, s) for s in h["webhook-signature"].split())


# --- the stack -------------------------------------------------------------------------------------------


class Stack:
    """The real sidecar (token, webhook, judge backend) and a real Envoy whose `livecheck-judge` cluster
    points at it."""

    def __init__(self, double, judge_backend, receiver: WebhookReceiver, workdir) -> None:
        self.judge = JudgeSidecar(
            workdir / "judge",
            [{"name": "double-openai", "api": "openai", "base_url": judge_backend.base_url, "models": ["*"]}],
            tables={"api": {"token_env": TOKEN_ENV}},
            arrays={"webhooks": [{"url": receiver.url, "secret_env": WEBHOOK_SECRET_ENV}]},
            env={TOKEN_ENV: TOKEN, WEBHOOK_SECRET_ENV: WEBHOOK_SECRET},
        )
        self.envoy = envoy_for_judge(self.judge, double.port, CONFIG, workdir)

    def close(self) -> None:
        self.envoy.stop()
        self.judge.close()

    # The operator API, read with urllib (no SDK of ours in between).
    def api(self, path: str, token: Optional[str] = TOKEN, method: str = "GET") -> tuple[int, bytes]:
        request = urllib.request.Request(self.judge.url + path, method=method)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def checks(self, turn: str, limit: Optional[int] = None) -> tuple[list[dict], list[bytes]]:
        """Every result of a turn, following `next_cursor`; with the raw bodies. Empty when 404."""
        items: list[dict] = []
        bodies: list[bytes] = []
        cursor = None
        for _ in range(100):
            query = {k: v for k, v in (("limit", limit), ("cursor", cursor)) if v is not None}
            path = f"/responses/{urllib.parse.quote(turn, safe='')}/checks"
            status, body = self.api(path + ("?" + urllib.parse.urlencode(query) if query else ""))
            bodies.append(body)
            if status == 404:
                return [], bodies
            assert status == 200, (status, body)
            page = json.loads(body)
            items += page["items"]
            cursor = page["next_cursor"]
            if cursor is None:
                return items, bodies
        raise AssertionError("next_cursor never ended")

    def wait_checks(self, turn: str, count: int, timeout: float = 5.0) -> list[dict]:
        """Polls (bounded) until the turn has at least `count` results; returns them."""
        return wait_for(lambda: (lambda got: got if len(got) >= count else None)(self.checks(turn)[0]),
                        timeout, f"{count} result(s) of {turn}")


def wait_for(probe: Callable, timeout: float, what: str, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(every)


@pytest.fixture(scope="module")
def receiver():
    r = WebhookReceiver()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def stack(double, judge_backend, receiver, tmp_path_factory):
    s = Stack(double, judge_backend, receiver, tmp_path_factory.mktemp("results"))
    yield s
    s.close()


@pytest.fixture
def fresh_stack(double, judge_backend, receiver, tmp_path_factory):
    """A stack of its own, for the test that stops its sidecar."""
    s = Stack(double, judge_backend, receiver, tmp_path_factory.mktemp("results-outage"))
    yield s
    s.close()


# --- turns through the three vendor SDKs -------------------------------------------------------------------


@dataclasses.dataclass
class Turn:
    turn_id: Optional[str]  # x-core-response-id
    sdk_id: str  # the id the SDK parsed: message.id / completion.id / response.id
    end: object
    text: str
    raw_body: bytes


def _headers(agent: str, person: Optional[str]) -> dict:
    return {"x-core-agent": agent, **({PERSON_HEADER: person} if person else {})}


def _anthropic_turn(envoy, agent, question, person=None) -> Turn:
    client = anthropic.Anthropic(base_url=envoy.url, api_key="sk-ant-e2e", max_retries=0, timeout=CLIENT_TIMEOUT,
                                 default_headers=_headers(agent, person))
    raw = client.messages.with_raw_response.create(model="claude-test", max_tokens=256,
                                                   messages=[{"role": "user", "content": question}])
    m = raw.parse()
    return Turn(raw.headers.get("x-core-response-id"), m.id, m.stop_reason,
                "".join(b.text for b in m.content if b.type == "text"), raw.http_response.read())


def _openai(envoy, agent, person) -> openai.OpenAI:
    return openai.OpenAI(base_url=envoy.url + "/v1", api_key="sk-openai-e2e", max_retries=0, timeout=CLIENT_TIMEOUT,
                         default_headers=_headers(agent, person))


def _chat_turn(envoy, agent, question, person=None) -> Turn:
    raw = _openai(envoy, agent, person).chat.completions.with_raw_response.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": question}])
    c = raw.parse()
    return Turn(raw.headers.get("x-core-response-id"), c.id, c.choices[0].finish_reason,
                c.choices[0].message.content or "", raw.http_response.read())


def _responses_turn(envoy, agent, question, person=None) -> Turn:
    raw = _openai(envoy, agent, person).responses.with_raw_response.create(model="gpt-4.1-mini", input=question)
    r = raw.parse()
    end = (r.status, r.incomplete_details.reason if r.incomplete_details else None)
    return Turn(raw.headers.get("x-core-response-id"), r.id, end, r.output_text, raw.http_response.read())


def _anthropic_answer(up_id: str, text: str) -> dict:
    return {"id": up_id, "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 17, "output_tokens": 23}}


def _chat_answer(up_id: str, text: str) -> dict:
    return {"id": up_id, "object": "chat.completion", "created": 1790000000, "model": "gpt-4.1-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 17, "completion_tokens": 23, "total_tokens": 40}}


def _responses_answer(up_id: str, text: str) -> dict:
    return {"id": up_id, "object": "response", "created_at": 1790000000, "status": "completed",
            "model": "gpt-4.1-mini", "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "output": [{"type": "message", "id": "msg_" + secrets.token_hex(6), "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": {"input_tokens": 17, "output_tokens": 23, "total_tokens": 40}}


# name -> (turn, upstream answer, upstream id prefix, clean end, refused / withheld end)
VENDORS: dict[str, tuple] = {
    "anthropic": (_anthropic_turn, _anthropic_answer, "msg_", "end_turn", "refusal"),
    "chat": (_chat_turn, _chat_answer, "chatcmpl-", "stop", "content_filter"),
    "responses": (_responses_turn, _responses_answer, "resp_", ("completed", None), ("incomplete", "content_filter")),
}
vendors = pytest.mark.parametrize("vendor", list(VENDORS))


def turn(envoy, double, vendor: str, agent: str, question: str, answer: str, person: Optional[str] = None
         ) -> tuple[Turn, str]:
    """One non-streamed turn; the upstream answers `answer` under a fresh id. -> (turn, that upstream id)."""
    create, make_answer, prefix, _ok, _stopped = VENDORS[vendor]
    up_id = prefix + secrets.token_hex(12)
    double.script(default=Answer(headers={"content-type": "application/json"},
                                 body_chunks=[json.dumps(make_answer(up_id, answer))], chunked=False))
    t = create(envoy, agent, question, person)
    assert t.turn_id is not None and TURN_ID.fullmatch(t.turn_id), f"x-core-response-id: {t.turn_id!r}"
    return t, up_id


def by_name(items: list[dict]) -> dict[str, dict]:
    names = [i["name"] for i in items]
    assert len(names) == len(set(names)), f"a check has more than one result: {names}"
    return {i["name"]: i for i in items}


def _rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- 1. a refused question ----------------------------------------------------------------------------------


@vendors
def test_a_refused_question_has_one_input_result_under_its_response_id(stack, double, vendor):
    _create, _answer, _prefix, _ok, refused = VENDORS[vendor]
    started = time.time()
    t, _ = turn(stack.envoy, double, vendor, "rules", "My password is hunter2, keep it for me.", "never asked")
    assert (t.end, t.text) == (refused, BLOCKED)
    assert double.requests() == [], "a refused question reached upstream"

    stack.wait_checks(t.turn_id, 1)
    time.sleep(0.3)  # a report sent twice would show by now (the outbox ticks every 200 ms)
    items, _ = stack.checks(t.turn_id)
    assert len(items) == 1, items
    (item,) = items
    assert {k: item[k] for k in ("object", "response_id", "name", "stage", "kind", "mode", "attempt", "outcome",
                                 "score", "reason", "judge_model", "passed_on_error")} == {
        "object": "response.check", "response_id": t.turn_id, "name": "no-passwords", "stage": "input",
        "kind": "not_contains", "mode": "block", "attempt": 1, "outcome": "failed", "score": None,
        "reason": RULE_REASON, "judge_model": None, "passed_on_error": False}
    assert item["id"].startswith("rck_"), item
    created = datetime.datetime.strptime(item["created_at"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    assert started - 2 <= created <= time.time() + 1, item["created_at"]


def test_the_api_needs_the_token_and_knows_only_stored_turns(stack, double):
    t, _ = turn(stack.envoy, double, "chat", "rules", "Is my password safe?", "never asked")
    stack.wait_checks(t.turn_id, 1)
    path = f"/responses/{t.turn_id}/checks"
    assert stack.api(path)[0] == 200
    for token in (None, "", "wrong-" + TOKEN, TOKEN + "x", TOKEN[:-1]):
        status, body = stack.api(path, token=token)
        assert status == 401, (token, status, body)
        assert b"no-passwords" not in body and t.turn_id.encode() not in body
    assert stack.api("/agents/rules/checks/summary", token=None)[0] == 401
    assert stack.api("/people/someone/checks", token="wrong", method="DELETE")[0] == 401
    # Lower-case scheme is still Bearer; a token in another scheme is not.
    request = urllib.request.Request(stack.judge.url + path, headers={"Authorization": f"Basic {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 401

    for unknown in ("lc_" + secrets.token_hex(16), "msg_" + secrets.token_hex(8), "nothing-here"):
        status, body = stack.api(f"/responses/{unknown}/checks")
        assert status == 404, (unknown, status, body)


# --- 2. a clean non-streamed answer --------------------------------------------------------------------------


@vendors
def test_a_clean_answer_reads_the_same_by_either_id(stack, double, vendor):
    _create, _answer, prefix, ok, _refused = VENDORS[vendor]
    answer = "Your order 4711 left the warehouse this morning."
    t, up_id = turn(stack.envoy, double, vendor, "rules", "Where is my order 4711?", answer)
    assert (t.end, t.text) == (ok, answer)
    assert t.sdk_id == up_id, "the SDK got the upstream's own id"

    items = stack.wait_checks(t.turn_id, 2)
    time.sleep(0.3)
    by_lc, _ = stack.checks(t.turn_id)
    by_upstream, _ = stack.checks(t.sdk_id)
    assert by_lc == by_upstream, "the lc_ id and the upstream id name the same turn"
    assert len(by_lc) == 2, by_lc
    assert [(i["name"], i["stage"], i["kind"], i["mode"], i["attempt"], i["outcome"], i["reason"]) for i in by_lc] == [
        ("no-passwords", "input", "not_contains", "block", 1, "passed", by_lc[0]["reason"]),
        ("no-classified", "output", "not_contains", "block", 1, "passed", by_lc[1]["reason"]),
    ], "in the order decided: input, then output"
    assert {i["response_id"] for i in by_lc} == {up_id}, "results name the turn by the upstream's id"
    assert items == by_lc
    # Paged one by one, the same items; the cursor ends.
    paged, bodies = stack.checks(t.turn_id, limit=1)
    assert paged == by_lc and len(bodies) == 2


def test_a_withheld_answer_has_its_failed_output_result(stack, double):
    t, up_id = turn(stack.envoy, double, "anthropic", "rules", "Tell me about order 4711.",
                    f"Order 4711 is {FORBIDDEN_OUT} information.")
    assert (t.end, t.text) == ("refusal", BLOCKED)
    assert FORBIDDEN_OUT.encode() not in t.raw_body
    items = stack.wait_checks(t.turn_id, 2)
    time.sleep(0.3)
    items, _ = stack.checks(t.turn_id)
    assert [(i["name"], i["outcome"], i["attempt"], i["reason"]) for i in items] == [
        ("no-passwords", "passed", 1, items[0]["reason"]),
        ("no-classified", "failed", 1, RULE_REASON),
    ]
    # The upstream answered with an id; the caller never saw that answer, the results still name it.
    assert stack.checks(up_id)[0] == items


# --- 3. a background judged check ----------------------------------------------------------------------------


def test_background_checks_are_judged_after_the_turn_and_stored(stack, double, judge_backend):
    judge_backend.reset()
    polite = "Your order ships tomorrow, thank you for waiting."
    rude = f"Your order ships when it ships, you {FAIL_MARKER} person."
    turns = []
    for vendor, answer in (("chat", polite), ("anthropic", rude)):
        t, up_id = turn(stack.envoy, double, vendor, "background", "When does order 4711 ship?", answer)
        assert t.text == answer, "a background check never holds the answer back"
        turns.append((t, answer))

    for (t, answer), passed in zip(turns, (True, False)):
        stack.wait_checks(t.turn_id, 2)
        time.sleep(0.3)
        items, _ = stack.checks(t.turn_id)
        assert len(items) == 2, items
        results = by_name(items)
        assert results["no-passwords"]["mode"] == "block"
        bg = results["polite-bg"]
        assert {k: bg[k] for k in ("stage", "kind", "mode", "attempt", "outcome", "score", "reason", "judge_model",
                                   "passed_on_error")} == {
            "stage": "output", "kind": "polite_tone", "mode": "background", "attempt": 1,
            "outcome": "passed" if passed else "failed", "score": 0.95 if passed else 0.05,
            "reason": POLITE_REASON if passed else RUDE_REASON, "judge_model": "gpt-judge",
            "passed_on_error": False}
    calls = judge_backend.seen()
    assert sorted(c.judged_text for c in calls) == sorted(a for _, a in turns), "each answer judged once"
    assert all(c.body.get("model") == "gpt-judge" for c in calls)


@pytest.mark.parametrize("agent", ["background", "input-only"])
def test_the_upstream_id_finds_the_turn_whatever_its_output_checks(stack, double, agent):
    """An answer with no blocking output check passes untouched (observed for background checks, or
    not read at all): its turn is still found by the id the SDK got."""
    answer = "Your order ships tomorrow, thank you for waiting."
    t, up_id = turn(stack.envoy, double, "chat", agent, "When does order 4711 ship?", answer)
    assert (t.text, t.sdk_id) == (answer, up_id)
    by_lc = stack.wait_checks(t.turn_id, 2 if agent == "background" else 1)
    by_upstream, _ = stack.checks(up_id)
    assert by_upstream == by_lc, f"GET /responses/{up_id}/checks: the upstream's id does not find turn {t.turn_id}"


# --- 4. pass rates -----------------------------------------------------------------------------------------


def test_the_summary_counts_each_checks_outcomes(stack, double):
    plan = [  # (vendor, question, answer): no-passwords, no-classified
        ("anthropic", "Where is order 1?", "It shipped."),  # passed, passed
        ("chat", "Where is order 2?", "It shipped."),  # passed, passed
        ("responses", "Where is order 3?", "It shipped."),  # passed, passed
        ("chat", "My password is swordfish.", "-"),  # failed, (not run)
        ("anthropic", "Reset the password of order 5.", "-"),  # failed, (not run)
        ("responses", "Where is order 6?", f"That is {FORBIDDEN_OUT}."),  # passed, failed
    ]
    want = [{"name": "no-classified", "passed": 3, "failed": 1, "errored": 0},
            {"name": "no-passwords", "passed": 4, "failed": 2, "errored": 0}]
    before = time.time()
    turns = [turn(stack.envoy, double, v, "summary", q, a)[0] for v, q, a in plan]
    for t, n in zip(turns, (2, 2, 2, 1, 1, 2)):
        stack.wait_checks(t.turn_id, n)
    time.sleep(0.3)

    for query in ("", "?since=" + urllib.parse.quote(_rfc3339(before - 3600))):
        status, body = stack.api("/agents/summary/checks/summary" + query)
        assert status == 200, body
        summary = json.loads(body)
        assert sorted(summary["items"], key=lambda i: i["name"]) == want, (query, summary)
    # Since a minute from now: nothing.
    status, body = stack.api("/agents/summary/checks/summary?since=" + urllib.parse.quote(_rfc3339(time.time() + 60)))
    assert status == 200 and all(i["passed"] + i["failed"] + i["errored"] == 0 for i in json.loads(body)["items"])
    assert stack.api("/agents/summary/checks/summary?since=" + _rfc3339(time.time() - 91 * 86400))[0] == 400
    assert stack.api("/agents/summary/checks/summary?since=yesterday")[0] == 400


# --- 5. delivery survives a sidecar outage -------------------------------------------------------------------


def _report_counter(envoy: Envoy, name: str) -> int:
    """The filter's counter as Envoy's admin names it (`wasmcustom.` + the filter's name); 0 until defined."""
    return envoy.stats(f"{STATS}livecheck.reports.").get(f"{STATS}livecheck.reports.{name}", 0)


def _retried(envoy: Envoy) -> int:
    return _report_counter(envoy, "retried")


def test_results_survive_a_sidecar_outage_exactly_once(fresh_stack, double):
    s = fresh_stack
    # 21 turns of three shapes, each with a known set of results: (vendor, question, answer, results)
    shapes = [
        ("anthropic", "Where is order {n}?", "Order {n} shipped.", {"no-passwords": "passed", "no-classified": "passed"}),
        ("chat", "My password for order {n} is hunter2.", "-", {"no-passwords": "failed"}),
        ("responses", "Where is order {n}?", f"Order {{n}} is {FORBIDDEN_OUT}.",
         {"no-passwords": "passed", "no-classified": "failed"}),
    ]
    plan = [shapes[n % 3] for n in range(21)]
    sent: list[tuple[Turn, dict]] = []
    stopped_at = restarted_at = None
    pid_before = s.judge.pid
    for n, (vendor, question, answer, results) in enumerate(plan):
        if n == 7:
            # Mid-traffic: the reports of the last turns may still be queued or in flight.
            s.judge.stop()  # SIGTERM to the PID this test started
            assert not s.judge.running()
            stopped_at = time.monotonic()
        if n == 14:
            # Down long enough for several delivery attempts (backoff 250 ms, 500 ms, 1 s, ...).
            time.sleep(max(0.0, 1.5 - (time.monotonic() - stopped_at)))
            retried_while_down = _retried(s.envoy)
            s.judge.start(same_port=True)
            restarted_at = time.monotonic()
        t, _ = turn(s.envoy, double, vendor, "outage", question.format(n=n), answer.format(n=n))
        _create, _answer, _prefix, ok, stopped = VENDORS[vendor]
        withheld = "failed" in results.values()
        assert (t.end, t.text) == ((stopped, BLOCKED) if withheld else (ok, answer.format(n=n))), (n, t)
        sent.append((t, results))
        time.sleep(0.05)
    assert s.judge.pid != pid_before
    assert retried_while_down > 0, "no report was retried while the sidecar was down"

    def all_stored():
        counts = [len(s.checks(t.turn_id)[0]) for t, _ in sent]
        return counts if all(c >= len(r) for c, (_, r) in zip(counts, sent)) else None

    wait_for(all_stored, 20.0, "every turn's results stored after the restart", every=0.2)
    stored_after = time.monotonic() - restarted_at
    time.sleep(0.5)  # anything sent again would be stored by now

    for n, (t, results) in enumerate(sent):
        items, _ = s.checks(t.turn_id)
        per_check = collections.Counter((i["name"], i["attempt"]) for i in items)
        assert all(c == 1 for c in per_check.values()), (n, t.turn_id, items)
        assert {i["name"]: i["outcome"] for i in items} == results, (n, items)
        assert all(i["attempt"] == 1 and i["mode"] == "block" for i in items)
    total = sum(len(r) for _, r in sent)
    status, body = s.api("/agents/outage/checks/summary")
    counts = {i["name"]: i for i in json.loads(body)["items"]}
    assert sum(i["passed"] + i["failed"] + i["errored"] for i in counts.values()) == total, (total, counts)
    assert counts["no-passwords"]["failed"] == 7 and counts["no-classified"]["failed"] == 7
    assert _retried(s.envoy) >= retried_while_down > 0
    assert f"{STATS}livecheck.reports.retried" in s.envoy.stats(f"{STATS}")
    assert (_report_counter(s.envoy, "refused"), _report_counter(s.envoy, "dropped")) == (0, 0)
    print(f"outage: {len(sent)} turns, {total} results, retried={_retried(s.envoy)}, "
          f"all stored {stored_after:.2f}s after the restart")


# --- 6. no text leaks -----------------------------------------------------------------------------------------


def test_no_question_or_answer_text_leaks_into_the_api_events_or_store(stack, double, judge_backend, receiver):
    markers: list[str] = []

    def mark() -> str:
        markers.append("LEAKMARK" + secrets.token_hex(8))
        return markers[-1]

    plan = [  # (vendor, question, answer, expected results {name: outcome})
        ("anthropic", f"Where is order {mark()}?", f"Order {mark()} shipped, thank you.",
         {"no-passwords": "passed", "no-classified": "passed", "polite-bg": "passed"}),
        ("chat", f"My password is {mark()}.", f"never sent {mark()}", {"no-passwords": "failed"}),
        ("responses", f"Where is order {mark()}?", f"Order {mark()} is {FORBIDDEN_OUT}.", None),
        ("chat", f"Where is order {mark()}?", f"It ships when it ships, you {FAIL_MARKER} {mark()}.",
         {"no-passwords": "passed", "no-classified": "passed", "polite-bg": "failed"}),
    ]
    turns = []
    for vendor, question, answer, results in plan:
        t, up_id = turn(stack.envoy, double, vendor, "leaks", question, answer)
        turns.append((t, up_id, results))

    # Every result stored (the background ones judged), then the events of the failed ones delivered.
    bodies: list[bytes] = []
    failed = 0
    for t, up_id, results in turns:
        if results is None:  # a withheld answer: whether its background check is drawn is not asserted here
            stack.wait_checks(t.turn_id, 2)
            time.sleep(0.5)
            items, _ = stack.checks(t.turn_id)
            got = by_name(items)
            assert got["no-classified"]["outcome"] == "failed" and got["no-passwords"]["outcome"] == "passed", items
        else:
            stack.wait_checks(t.turn_id, len(results))
            items, _ = stack.checks(t.turn_id)
            assert {i["name"]: i["outcome"] for i in items} == results, items
        failed += sum(i["outcome"] != "passed" for i in items)
        for turn_key in (t.turn_id, up_id):
            bodies += stack.checks(turn_key)[1] + stack.checks(turn_key, limit=1)[1]
    bodies.append(stack.api("/agents/leaks/checks/summary")[1])

    ids = {t.turn_id for t, _, _ in turns} | {up for _, up, _ in turns}

    def events():
        got = [d for d in receiver.seen() if json.loads(d.body)["data"]["response_id"] in ids]
        return got if len(got) >= failed else None

    delivered = wait_for(events, 10.0, f"{failed} response.check_failed events")
    time.sleep(0.3)
    delivered = [d for d in receiver.seen() if json.loads(d.body)["data"]["response_id"] in ids]
    assert len(delivered) == failed, [d.body for d in delivered]
    for d in delivered:
        assert signature_ok(d, WEBHOOK_KEY), d.headers
        assert abs(int(d.headers["webhook-timestamp"]) - time.time()) < 60
        event = json.loads(d.body)
        assert event["type"] == "response.check_failed" and event["id"] == d.headers["webhook-id"]
        assert set(event["data"]) == {"name", "stage", "kind", "outcome", "response_id"}, event
        assert event["data"]["outcome"] == "failed"
    # A tampered body or another key does not verify (the check above is not vacuous).
    d = delivered[0]
    assert not signature_ok(Delivery(d.headers, d.body + b" "), WEBHOOK_KEY)
    assert not signature_ok(d, b"another key")

    def leaks(blob: bytes) -> list[str]:
        return [m for m in markers if m.encode() in blob]

    for body in bodies:
        assert not leaks(body), body
    for d in delivered:
        assert not leaks(d.body) and not leaks(json.dumps(d.headers).encode()), d
    # The judge saw the answers it judged (so the markers did reach the sidecar) ...
    assert any(markers[1] in (c.judged_text or "") for c in judge_backend.seen())
    assert not leaks(stack.judge.log().encode()), "the sidecar's log holds the text of a turn"
    # ... and none of them is in any byte of the store once judged: the database, its WAL and shared
    # memory (the pending background checks held the judged text; their rows are deleted when judged).
    store_files = sorted(stack.judge.workdir.glob("livecheck-judge.sqlite*"))
    assert any(p.name == "livecheck-judge.sqlite" for p in store_files), list(stack.judge.workdir.iterdir())
    for path in store_files:
        found = leaks(path.read_bytes())
        assert not found, f"{path.name} ({path.stat().st_size} bytes) holds the text of a turn: {found}"


def test_erasing_a_person_removes_only_their_turns(stack, double):
    person, other = "person-" + secrets.token_hex(4), "person-" + secrets.token_hex(4)
    mine = [turn(stack.envoy, double, v, "rules", "Where is order 7?", "It shipped.", person=person)
            for v in ("anthropic", "responses")]
    mine.append(turn(stack.envoy, double, "chat", "rules", "My password is 7.", "-", person=person))
    theirs = turn(stack.envoy, double, "chat", "rules", "Where is order 8?", "It shipped.", person=other)
    for (t, _), n in zip(mine + [theirs], (2, 2, 1, 2)):
        stack.wait_checks(t.turn_id, n)
    time.sleep(0.3)

    assert stack.api(f"/people/{person}/checks", method="DELETE")[0] == 204
    for t, up_id in mine:
        assert stack.api(f"/responses/{t.turn_id}/checks")[0] == 404
        assert stack.api(f"/responses/{up_id}/checks")[0] == 404
    t, up_id = theirs
    assert len(stack.checks(t.turn_id)[0]) == 2 and len(stack.checks(up_id)[0]) == 2
