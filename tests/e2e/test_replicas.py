"""Two sidecar replicas on one PostgreSQL behind real Envoy: issue 52's own reproduction, in small.

`deploy/judge` runs the sidecar as two replicas on one database. Here: real Envoy running livecheck.wasm,
its `livecheck-judge` cluster holding TWO real `livecheck-judge` processes (both endpoints, round robin)
on ONE throwaway PostgreSQL (judge/tests/postgres.sh); two agents, each with two background judged
checks at `sample: 1` (one with an `alert`, one whose judge backend has a key of its own as a fallback);
the JUDGE BACKEND DOUBLE (it fails answers that hold `RUDE`), a WEBHOOK RECEIVER DOUBLE for the events
and another for Slack's incoming webhook (alerts). TURNS turns go through the official anthropic and
openai SDKs, each with its own api key, spread by Envoy over both replicas.

The judge double answers each check JUDGE_DELAY late, so while one replica waits for a verdict the other
receives the next report, which wakes its judge loop and its outbox: before issue 52 that replica read
the other's pending checks, found no key for them and stored them `errored` (the real verdict then lost)
or judged them a second time with the fallback key, and delivered the other's events too. Checked once
everything settled (nothing pending, the outbox empty):
  - every background check was judged exactly once at the judge double, with its own turn's key;
  - each turn has one result per check and attempt, none `errored`, background verdicts as judged;
  - every failed result's `response.check_failed` event arrived exactly once (by `webhook-id`);
  - the failing agent's check alerted exactly once, the passing agent's never;
  - `GET /responses/{id}/checks` answers the same from both replicas.
Every process started here (PostgreSQL, the two sidecars, Envoy) is stopped by its PID in teardown.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request

import anthropic
import openai
import pytest

from envoy_process import Envoy, JudgeSidecar, render_config, wasm_path
from judge_backend_double import FAIL_MARKER, JudgeBackendDouble
from postgres_server import Postgres
from tool_check_support import wait_for
from upstream_double import Answer, model_double_tool_answer
from webhook_receiver_double import WebhookReceiver

API_TOKEN = "op-replicas-" + secrets.token_hex(8)
HOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# Longer than the time between two turns' reports (tens of ms), far shorter than the 5 s poll.
JUDGE_DELAY = 0.5
# The webhook receiver double takes this long to answer: an event is in flight while the other replica's
# outbox is woken by a report of its own.
HOOK_DELAY = 0.2
TURNS = 12
# SDK -> the prefix of the upstream's own id for an answer; events and results name a turn by that id.
VENDORS = {"anthropic": "msg_", "chat": "chatcmpl-", "responses": "resp_"}
# `curt` (every third turn; three of its four answers fail) alerts; `kind` (all its answers pass) must not.
PASSING, FAILING = "kind", "curt"
# Two background judged checks, both judged with the turn's key (the judge double says which API asked):
# `tone` on the OpenAI judge API, whose backend has no key of its own (judged without the turn's key it
# would be stored `errored`), with the alert; `courtesy` on the Anthropic judge API, whose backend has the
# sidecar's own key as a fallback (judged without the turn's key it would be judged a second time).
TONE = {"name": "tone", "stage": "output", "kind": "polite_tone", "mode": "background", "sample": 1.0,
        "judge_model": "gpt-judge", "alert": {"failure_rate": 0.5, "over_last": 2}}
COURTESY = {"name": "courtesy", "stage": "output", "kind": "polite_tone", "mode": "background", "sample": 1.0,
            "judge_model": "claude-judge"}
BACKGROUND = {"tone": "/v1/chat/completions", "courtesy": "/v1/messages"}  # check -> the judge API it asks
NO_PASSWORDS = {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"}
CHECKS = {("no-passwords", 1), ("tone", 1), ("courtesy", 1)}
POLICY = {"agent_header": "x-core-agent", "default_agent": PASSING, "agents": {
    agent: {"published": "1", "versions": {"1": {"blocked_reply": "I cannot help with that.",
                                                 "live_checks": [NO_PASSWORDS, TONE, COURTESY]}}}
    for agent in (PASSING, FAILING)}}
JUDGE_OWN_KEY = "sk-judge-own-" + secrets.token_hex(6)
SETTLE_TIMEOUT = 20.0


@dataclasses.dataclass
class Turn:
    n: int
    vendor: str
    agent: str
    rude: bool
    key: str = dataclasses.field(default_factory=lambda: "sk-turn-" + secrets.token_hex(8))
    turn_id: str = ""  # x-core-response-id

    @property
    def upstream_id(self) -> str:
        return VENDORS[self.vendor] + self.key[-16:]

    @property
    def mark(self) -> str:
        """In the answer, so the judge double's call names its turn."""
        return f"<turn-{self.n}-{self.key[-6:]}>"

    @property
    def answer(self) -> str:
        return f"{self.mark} Your order ships tomorrow" + (f", you {FAIL_MARKER} person." if self.rude else ", thank you.")


def plan() -> list[Turn]:
    """Every SDK for both agents; the failing agent's turns (every third: 0, 3, 6, 9; those after the first
    fail) alternate between odd and even, so round robin gives each replica some of them."""
    return [Turn(n, list(VENDORS)[n // 3 % 3], FAILING if n % 3 == 0 else PASSING, rude=n % 3 == 0 and n > 0)
            for n in range(TURNS)]


# --- the processes --------------------------------------------------------------------------------------


def start_replica(workdir, pg: Postgres, judge: JudgeBackendDouble, hooks: WebhookReceiver,
                  slack: WebhookReceiver) -> JudgeSidecar:
    """One replica as deploy/judge configures it: the store on PostgreSQL, the operator API, a webhook and
    Slack alerts; claude-* judge models on the Anthropic judge API with a key of its own, every other on
    the OpenAI one without."""
    backends = [{"name": "double-anthropic", "api": "anthropic", "base_url": judge.base_url, "models": ["claude-*"],
                 "api_key_env": "LIVECHECK_E2E_JUDGE_OWN_KEY"},
                {"name": "double-openai", "api": "openai", "base_url": judge.base_url, "models": ["*"]}]
    return JudgeSidecar(
        workdir, backends,
        tables={"store": {"url_env": "LIVECHECK_RESULTS_URL"}, "api": {"token_env": "LIVECHECK_API_TOKEN"},
                "alerts": {"slack_webhook_url_env": "LIVECHECK_SLACK_URL"}},
        arrays={"webhooks": [{"url": hooks.url, "secret_env": "LIVECHECK_HOOK_SECRET"}]},
        env={"LIVECHECK_RESULTS_URL": pg.url, "LIVECHECK_API_TOKEN": API_TOKEN, "LIVECHECK_SLACK_URL": slack.url,
             "LIVECHECK_HOOK_SECRET": HOOK_SECRET, "LIVECHECK_E2E_JUDGE_OWN_KEY": JUDGE_OWN_KEY, "NO_COLOR": "1"},
    )


@pytest.fixture(scope="module")
def postgres():
    pg = Postgres()
    yield pg
    pg.stop()


@pytest.fixture(scope="module")
def slow_judge():
    judge = JudgeBackendDouble(delay=JUDGE_DELAY).start()
    yield judge
    judge.stop()


@pytest.fixture(scope="module")
def hooks():
    receiver = WebhookReceiver(delay=HOOK_DELAY)
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def slack():
    receiver = WebhookReceiver()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def replicas(postgres, slow_judge, hooks, slack, tmp_path_factory):
    started: list[JudgeSidecar] = []
    try:
        for i in range(2):
            started.append(start_replica(tmp_path_factory.mktemp(f"replica-{i}"), postgres, slow_judge, hooks, slack))
        yield started
    finally:
        for sidecar in started:
            sidecar.close()


@pytest.fixture(scope="module")
def envoy(double, replicas, tmp_path_factory):
    config = render_config(wasm_path("livecheck.wasm"), double.port, plugin_configuration=json.dumps(POLICY),
                           extra_clusters={"livecheck-judge": [r.port for r in replicas]})
    proxy = Envoy(config, tmp_path_factory.mktemp("envoy-replicas"))
    yield proxy
    proxy.stop()


# --- turns through the official SDKs ----------------------------------------------------------------------


def upstream_answer(turn: Turn) -> Answer:
    """The model double's non-streamed answer of the turn, under the turn's own upstream id."""
    answer = model_double_tool_answer(turn.vendor, [], text=turn.answer)
    body = json.loads(answer.body_chunks[0])
    answer.body_chunks = [json.dumps({**body, "id": turn.upstream_id})]
    return answer


def ask(envoy: Envoy, turn: Turn) -> tuple[str, str, str]:
    """One non-streamed turn with the turn's own key. -> (x-core-response-id, the id and the text the
    caller got)."""
    headers = {"x-core-agent": turn.agent}
    question = [{"role": "user", "content": "When does order 4711 ship?"}]
    if turn.vendor == "anthropic":
        client = anthropic.Anthropic(base_url=envoy.url, api_key=turn.key, max_retries=0, timeout=10,
                                     default_headers=headers)
        raw = client.messages.with_raw_response.create(model="claude-test", max_tokens=256, messages=question)
        got = raw.parse()
        text = "".join(b.text for b in got.content if b.type == "text")
    else:
        client = openai.OpenAI(base_url=envoy.url + "/v1", api_key=turn.key, max_retries=0, timeout=10,
                               default_headers=headers)
        if turn.vendor == "chat":
            raw = client.chat.completions.with_raw_response.create(model="gpt-4.1-mini", messages=question)
            got = raw.parse()
            text = got.choices[0].message.content or ""
        else:
            raw = client.responses.with_raw_response.create(model="gpt-4.1-mini", input=question[0]["content"])
            got = raw.parse()
            text = got.output_text
    return raw.headers.get("x-core-response-id") or "", got.id, text


def checks(sidecar: JudgeSidecar, turn_id: str) -> list[dict]:
    """A turn's results from one replica's operator API (one page holds a turn's three); [] when unknown."""
    request = urllib.request.Request(f"{sidecar.url}/responses/{urllib.parse.quote(turn_id)}/checks",
                                     headers={"Authorization": f"Bearer {API_TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            page = json.load(r)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise
    assert page["next_cursor"] is None, page
    return page["items"]


def events_of(receiver: WebhookReceiver, turns: list[Turn]) -> list[dict]:
    """The `response.check_failed` events of these turns: {webhook-id, response_id (the upstream's id),
    name}."""
    ids = {t.upstream_id for t in turns}
    out = []
    for d in receiver.seen():
        data = json.loads(d.body)["data"]
        if data["response_id"] in ids:
            out.append({"webhook_id": d.headers.get("webhook-id"), "response_id": data["response_id"],
                        "name": data["name"]})
    return out


def alerts_by_agent(receiver: WebhookReceiver) -> collections.Counter:
    """Slack messages per agent ("... check "tone" of agent "curt": ...")."""
    found = (re.search(r'of agent "([^"]+)"', json.loads(d.body)["text"]) for d in receiver.seen())
    return collections.Counter(m.group(1) if m else "?" for m in found)


@dataclasses.dataclass
class Run:
    turns: list[Turn]
    settled_s: float


@pytest.fixture(scope="module")
def run(envoy, double, replicas, postgres, hooks, slack) -> Run:
    """Sends the turns one after another, then waits (bounded) until they settled: every result stored,
    nothing pending, the outbox empty, the failing agent's alert and every event in; then a moment more,
    in which a second delivery already on its way would arrive."""
    turns = plan()
    started = time.monotonic()
    for turn in turns:
        double.script(default=upstream_answer(turn))
        turn.turn_id, sdk_id, text = ask(envoy, turn)
        assert re.fullmatch(r"lc_[0-9a-f]{32}", turn.turn_id), turn.turn_id
        assert (sdk_id, text) == (turn.upstream_id, turn.answer), "background checks never hold the answer back"

    # From any replica: which of them answers alike is a test of its own.
    wait_for(lambda: all(any(len(checks(r, t.turn_id)) >= len(CHECKS) for r in replicas) for t in turns),
             SETTLE_TIMEOUT, "every turn's results, the background verdicts included", every=0.1)
    wait_for(lambda: postgres.count("pending_checks") == 0 and postgres.count("event_outbox") == 0,
             SETTLE_TIMEOUT, "nothing pending, the outbox empty", every=0.1)
    failed = sum(t.rude for t in turns) * len(BACKGROUND)
    wait_for(lambda: len(events_of(hooks, turns)) >= failed, SETTLE_TIMEOUT, f"{failed} events delivered")
    wait_for(lambda: alerts_by_agent(slack)[FAILING] >= 1, SETTLE_TIMEOUT, f"the alert of agent {FAILING}")
    settled = time.monotonic() - started
    time.sleep(0.5)
    print(f"replicas: {len(turns)} turns settled in {settled:.2f}s")
    return Run(turns, settled)


# --- what replicas guarantee --------------------------------------------------------------------------------


def test_the_turns_reports_reached_both_replicas_and_both_judged(run, replicas):
    """The test is about two replicas only if Envoy spread the work: each replica recorded background
    verdicts of its own."""
    recorded = [s.log().count("background check recorded") for s in replicas]
    assert all(n > 0 for n in recorded), f"background results recorded per replica: {recorded}"


def test_every_background_check_is_judged_once_with_its_own_turns_key(run, slow_judge):
    """One call per turn and check, each with the turn's key in the header its judge API reads."""
    calls = collections.defaultdict(list)
    for call in slow_judge.seen():
        turn = next((t for t in run.turns if t.mark in (call.judged_text or "")), None)
        assert turn is not None, f"a judge call for no turn of this test: {call.judged_text!r}"
        calls[turn.n].append((call.path, call.headers.get("authorization") or call.headers.get("x-api-key")))
    want = {t.n: sorted([(BACKGROUND["tone"], f"Bearer {t.key}"), (BACKGROUND["courtesy"], t.key)]) for t in run.turns}
    wrong = {n: sorted(calls.get(n, [])) for n in want if sorted(calls.get(n, [])) != want[n]}
    assert not wrong, (f"turns whose checks were not judged exactly once with their own key (turn: [(judge API, "
                       f"key sent)]; the fallback key is {JUDGE_OWN_KEY}): {wrong}")


def test_each_turn_has_one_result_per_check_and_attempt_none_errored(run, replicas):
    for turn in run.turns:
        items = checks(replicas[0], turn.turn_id)
        per_check = collections.Counter((i["name"], i["attempt"]) for i in items)
        assert per_check == {c: 1 for c in CHECKS}, (turn.n, items)
        outcomes = {i["name"]: (i["mode"], i["outcome"], i["reason"]) for i in items}
        assert outcomes["no-passwords"][:2] == ("block", "passed"), (turn.n, items)
        verdict = "failed" if turn.rude else "passed"
        for name in BACKGROUND:
            assert outcomes[name][:2] == ("background", verdict), \
                f"turn {turn.n} ({turn.agent}): its check {name} is stored as {outcomes[name]}, judged {verdict}"


def test_each_failed_results_event_is_delivered_exactly_once(run, hooks):
    delivered = events_of(hooks, run.turns)
    by_id = collections.Counter(e["webhook_id"] for e in delivered)
    assert [i for i, n in by_id.items() if n > 1] == [], f"events delivered more than once: {by_id}"
    got = sorted((e["response_id"], e["name"]) for e in delivered)
    assert got == sorted((t.upstream_id, name) for t in run.turns if t.rude for name in BACKGROUND), delivered


def test_the_failing_agent_alerts_once_and_the_passing_agent_never(run, slack):
    assert alerts_by_agent(slack) == {FAILING: 1}, [json.loads(d.body)["text"] for d in slack.seen()]


def test_both_replicas_answer_the_same_results(run, replicas):
    for turn in run.turns:
        first, second = (checks(r, turn.turn_id) for r in replicas)
        assert first and first == second, (turn.n, first, second)
