"""The sidecar's operator pages in headless Chromium, against results seeded through the real path:
turns from the official OpenAI SDK through real Envoy running livecheck.wasm (upstream double behind
it), every turn's report going to the REAL livecheck-judge sidecar, whose judged check asks the judge
backend double. What an operator sees:

  1. the login form: a wrong token gets one sentence and no session; the right one a session cookie
     (HttpOnly, Secure, SameSite=Strict) that is not the token;
  2. agents, an agent's checks with pass / fail / error rates and a chart per check, alert state
     (threshold, last fired), a check's results that did not pass with links to their turns, and
     those links opening the turn's results; the figures agree with the turns sent;
  3. no text of any turn (unique markers in every question and answer), no judge's sentence and no
     token in any page's HTML;
  4. the Content-Security-Policy holds in the browser (an injected inline script does not run);
  5. names from a report that would be markup (`<script>`, an `<img onerror>`) are shown as text and
     nothing runs (the filter refuses such names in its config, so this report is posted to the
     sidecar's results endpoint directly, as the filter posts its reports);
  6. axe-core finds no accessibility violation on any page;
  7. logout ends the session.
Screenshots go to target/ui-screenshots/. The Grafana dashboard in deploy/grafana/ is checked
against the stats this same Envoy emits.
"""

from __future__ import annotations

import json
import pathlib
import re
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request

import openai
import pytest

from envoy_process import JudgeSidecar, envoy_for_judge
from upstream_double import Answer

REPO = pathlib.Path(__file__).resolve().parents[2]
TOKEN = "op-" + secrets.token_hex(16)
TOKEN_ENV = "LIVECHECK_UI_API_TOKEN"
TURN_ID = re.compile(r"lc_[0-9a-f]{32}")
RULE_REASON = "The answer contains text it had to avoid."
JUDGE_SENTENCES = ("The text keeps the rule.", "The text breaks the rule.")  # the judge double's

CONFIG = {
    "default_agent": "orders",
    "agents": {
        "orders": {"published": "1", "versions": {"1": {"blocked_reply": "Not here.", "live_checks": [
            {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
            {"name": "no-classified", "stage": "output", "kind": "not_contains", "expected": "classified",
             "alert": {"failure_rate": 0.2, "over_last": 5}},
        ]}}},
        "support": {"published": "1", "versions": {"1": {"blocked_reply": "Not here.", "live_checks": [
            {"name": "polite", "stage": "output", "kind": "polite_tone", "judge_model": "gpt-judge"},
        ]}}},
    },
}


class Stack:
    def __init__(self, double, judge_backend, workdir: pathlib.Path) -> None:
        self.judge = JudgeSidecar(
            workdir / "judge",
            [{"name": "double-openai", "api": "openai", "base_url": judge_backend.base_url, "models": ["*"]}],
            tables={"api": {"token_env": TOKEN_ENV}},
            env={TOKEN_ENV: TOKEN},
        )
        self.envoy = envoy_for_judge(self.judge, double.port, CONFIG, workdir)
        self.texts: list[str] = []  # every question and answer sent
        self.turns: dict[str, list[str]] = {}  # what each turn was -> its x-core-response-id

    def close(self) -> None:
        self.envoy.stop()
        self.judge.close()

    def turn(self, double, kind: str, agent: str, question: str, answer: str) -> str:
        """One non-streamed Chat Completions turn through Envoy; returns its `x-core-response-id`."""
        marker = "TXT" + secrets.token_hex(8)
        question, answer = question.format(m=marker), answer.format(m=marker)
        self.texts += [question, answer]
        body = {"id": "chatcmpl-" + secrets.token_hex(8), "object": "chat.completion", "created": 1790000000,
                "model": "gpt-4.1-mini",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 17, "completion_tokens": 23, "total_tokens": 40}}
        double.script(default=Answer(headers={"content-type": "application/json"},
                                     body_chunks=[json.dumps(body)], chunked=False))
        client = openai.OpenAI(base_url=self.envoy.url + "/v1", api_key="sk-ui-e2e", max_retries=0, timeout=10,
                               default_headers={"x-core-agent": agent})
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": question}])
        raw.parse()
        turn_id = raw.headers.get("x-core-response-id")
        assert turn_id and TURN_ID.fullmatch(turn_id), turn_id
        self.turns.setdefault(kind, []).append(turn_id)
        return turn_id

    def api(self, path: str) -> dict:
        request = urllib.request.Request(self.judge.url + path, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=5) as r:
            return json.load(r)

    def summary(self, agent: str) -> dict[str, tuple[int, int, int]]:
        items = self.api(f"/agents/{agent}/checks/summary")["items"]
        return {i["name"]: (i["passed"], i["failed"], i["errored"]) for i in items}

    def wait_summary(self, agent: str, expected: dict, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.summary(agent) != expected:
            assert time.monotonic() < deadline, f"{agent}: {self.summary(agent)} != {expected}"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def stack(double, judge_backend, tmp_path_factory):
    s = Stack(double, judge_backend, tmp_path_factory.mktemp("ui"))
    # orders: 4 clean turns, 1 refused question, 2 withheld answers; support: 2 polite, 1 rude.
    for _ in range(4):
        s.turn(double, "clean", "orders", "Where is order {m}?", "Order {m} shipped.")
    s.turn(double, "refused", "orders", "My password is {m}, where is my order?", "-")
    for _ in range(2):
        s.turn(double, "withheld", "orders", "What is in order {m}?", "Order {m} is classified.")
    for _ in range(2):
        s.turn(double, "polite", "support", "Can you help with {m}?", "Gladly, {m} is done.")
    s.turn(double, "rude", "support", "Can you help with {m}?", "RUDE answer about {m}.")
    s.wait_summary("orders", {"no-passwords": (6, 1, 0), "no-classified": (4, 2, 0)})
    s.wait_summary("support", {"polite": (2, 1, 0)})
    yield s
    s.close()


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    p = context.new_page()
    p.on("dialog", lambda d: pytest.fail(f"a dialog opened: {d.message!r}"))
    yield p
    context.close()


def log_in(page, stack: Stack) -> None:
    page.goto(stack.judge.url + "/ui/agents")
    assert page.url == stack.judge.url + "/ui/login"
    page.get_by_label("Operator token").fill(TOKEN)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(stack.judge.url + "/ui/agents")


def check_page(page, stack: Stack, axe_source: str, visited: list[str]) -> None:
    """What holds on every page: no turn text, judge sentence or token in the HTML; no axe violation."""
    html = page.content()
    visited.append(page.url)
    for text in stack.texts:
        for marker in re.findall(r"TXT[0-9a-f]{16}", text):
            assert marker not in html, f"{page.url} shows turn text {marker}"
    for sentence in JUDGE_SENTENCES:
        assert sentence not in html, f"{page.url} shows the judge's sentence"
    assert TOKEN not in html and TOKEN not in page.url
    page.evaluate(axe_source)
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    violations = [(v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3]) for v in result["violations"]]
    assert violations == [], f"{page.url}: {violations}"


def rates_row(page, table: str, name: str) -> list[str]:
    row = page.locator(f"#{table} tbody tr").filter(has=page.get_by_role("rowheader", name=name, exact=True))
    return [c.strip() for c in row.locator("td").all_inner_texts()]


def test_an_operator_logs_in_reads_rates_failures_and_turns_and_logs_out(page, stack, axe_source, screenshots):
    visited: list[str] = []
    base = stack.judge.url

    # 1. Login: a wrong token, then the right one.
    page.goto(base + "/ui/agents")
    assert page.url == base + "/ui/login"
    check_page(page, stack, axe_source, visited)
    page.screenshot(path=str(screenshots / "login.png"))
    page.get_by_label("Operator token").fill(TOKEN[:-1] + ("0" if TOKEN[-1] != "0" else "1"))
    page.get_by_role("button", name="Log in").click()
    assert page.get_by_role("alert").inner_text() == "That token is not valid."
    assert not [c for c in page.context.cookies() if c["name"] == "__Host-livecheck-session"]
    check_page(page, stack, axe_source, visited)
    page.get_by_label("Operator token").fill(TOKEN)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(base + "/ui/agents")
    [session] = [c for c in page.context.cookies() if c["name"] == "__Host-livecheck-session"]
    assert session["httpOnly"] and session["secure"] and session["sameSite"] == "Strict"
    assert TOKEN not in session["value"] and re.fullmatch(r"[0-9a-f]{64}", session["value"])

    # 2. Agents: turns and results per agent over the default window (24 h).
    assert page.get_by_role("heading", level=1).inner_text() == "Agents"
    assert rates_row(page, "agents", "orders") == ["7", "10", "3", "0", "76.9%", "23.1%", "0.0%"]
    assert rates_row(page, "agents", "support") == ["3", "2", "1", "0", "66.7%", "33.3%", "0.0%"]
    check_page(page, stack, axe_source, visited)
    page.screenshot(path=str(screenshots / "agents.png"), full_page=True)

    # An agent: each check's rates and chart, and its alert.
    page.get_by_role("link", name="orders", exact=True).click()
    assert page.get_by_role("heading", level=1).inner_text() == "Agent orders"
    assert rates_row(page, "checks", "no-passwords")[:6] == ["6", "1", "0", "85.7%", "14.3%", "0.0%"]
    assert rates_row(page, "checks", "no-classified")[:6] == ["4", "2", "0", "66.7%", "33.3%", "0.0%"]
    chart = page.get_by_role("img", name="no-classified: 4 passed, 2 failed, 0 errored")
    assert chart.count() == 1
    # 2 of the latest 5 did not pass: at or above 20%, so the alert fired (today, so not "never").
    alert = rates_row(page, "alerts", "no-classified")
    assert alert[:2] == ["20% not passed of the last 5", "2 of the last 5 not passed"], alert
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", alert[2]), alert
    check_page(page, stack, axe_source, visited)
    page.screenshot(path=str(screenshots / "agent.png"), full_page=True)

    # The window chooser is a GET form: the last hour holds the same turns.
    page.get_by_label("Window").select_option("1h")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url(re.compile(r".*/ui/agents/orders\?window=1h$"))
    assert rates_row(page, "checks", "no-classified")[:3] == ["4", "2", "0"]

    # A check: its results that did not pass, newest first, each linking to its turn.
    page.get_by_role("link", name="no-classified", exact=True).click()
    assert page.get_by_role("heading", level=1).inner_text() == "Check no-classified of agent orders"
    rows = page.locator("#failures tbody tr")
    assert rows.count() == 2
    linked = rows.locator("a").all_inner_texts()
    assert linked == list(reversed(stack.turns["withheld"]))
    assert set(rows.locator("td:nth-child(3)").all_inner_texts()) == {"failed"}
    assert set(rows.locator("td:nth-child(7)").all_inner_texts()) == {RULE_REASON}
    assert page.get_by_role("img", name="no-classified: 4 passed, 2 failed, 0 errored").count() == 1
    check_page(page, stack, axe_source, visited)
    page.screenshot(path=str(screenshots / "check.png"), full_page=True)

    # The link opens that turn's results.
    first = linked[0]
    rows.get_by_role("link", name=first).click()
    page.wait_for_url(base + "/ui/turns/" + first)
    assert page.get_by_role("heading", level=1).inner_text().startswith("Turn ")
    results = page.locator("#results tbody tr")
    assert results.count() == 2  # no-passwords passed, no-classified failed
    outcomes = dict(zip(results.locator("th").all_inner_texts(), results.locator("td:nth-child(7)").all_inner_texts()))
    assert outcomes == {"no-passwords": "passed", "no-classified": "failed"}
    check_page(page, stack, axe_source, visited)
    page.screenshot(path=str(screenshots / "turn.png"), full_page=True)

    # A judged check's failure: its turn is linked, the judge's own sentence is not shown.
    page.goto(base + "/ui/agents/support/checks/polite")
    [rude] = stack.turns["rude"]
    assert page.locator("#failures tbody tr a").all_inner_texts() == [rude]
    assert "not shown" in page.locator("#failures tbody tr td:nth-child(7)").inner_text()
    check_page(page, stack, axe_source, visited)

    # 4. The policy holds in the browser: an inline script injected into the page does not run.
    try:
        page.add_script_tag(content="window.__injected = 1")
    except Exception:
        pass  # Playwright may report the refusal itself
    assert page.evaluate("typeof window.__injected") == "undefined"

    # 7. Logout, then the pages want a login again.
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(base + "/ui/login")
    assert not [c for c in page.context.cookies() if c["name"] == "__Host-livecheck-session"]
    page.goto(base + "/ui/agents")
    assert page.url == base + "/ui/login"
    assert len(visited) == 7


def test_names_that_look_like_markup_are_shown_as_text(page, stack, axe_source, screenshots):
    agent = "<script>window.__xss = 1</script>"
    check = '"><img src=x onerror="window.__xss = 2">'
    now = int(time.time() * 1000)
    report = {"turn_id": "lc_" + secrets.token_hex(16), "agent": agent, "version": "1",
              "results": [{"name": check, "stage": "output", "kind": "not_contains", "mode": "block",
                           "attempt": 1, "outcome": "failed", "reason": RULE_REASON, "created_at_ms": now}]}
    request = urllib.request.Request(stack.judge.url + "/v1/results", data=json.dumps(report).encode(),
                                     headers={"content-type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=5) as r:
        assert json.load(r) == {"stored": 1}

    log_in(page, stack)
    page.get_by_role("link", name=agent, exact=True).click()
    assert page.get_by_role("heading", level=1).inner_text() == f"Agent {agent}"
    page.get_by_role("link", name=check, exact=True).click()
    assert page.get_by_role("heading", level=1).inner_text() == f"Check {check} of agent {agent}"
    page.get_by_role("link", name=report["turn_id"]).click()
    assert page.get_by_role("rowheader", name=check).count() == 1
    html = page.content()
    assert "<script>window" not in html and "<img src" not in html
    assert page.evaluate("typeof window.__xss") == "undefined"
    check_page(page, stack, axe_source, [])
    page.screenshot(path=str(screenshots / "escaped.png"), full_page=True)


def test_grafana_dashboard_names_only_metrics_the_filter_emits(stack):
    """deploy/grafana/livecheck-dashboard.json against this Envoy's Prometheus stats and the filter's
    source. Envoy shows a counter once it was first counted, so: the per-check counters the turns
    above counted, the same checks' other outcomes as the source names them
    (`["passed", "failed", "errored"].map(|outcome| format!("livecheck.{agent}.…{outcome}"))`), and
    the report counters the source counts (`increment_counter("livecheck.reports.…")`, `count("livecheck.reports.lost", n)`)."""
    with urllib.request.urlopen(stack.envoy.admin + "/stats/prometheus", timeout=5) as r:
        exposition = r.read().decode()
    emitted = {m for m in re.findall(r"^(livecheck_[a-z0-9_]+)", exposition, re.M)}
    assert "livecheck_orders_no_classified_failed" in emitted, sorted(emitted)
    config_source = "".join(p.read_text() for p in sorted((REPO / "src" / "config").glob("*.rs")))
    outcome_lists = re.findall(r'\[((?:"[a-z]+",\s*)+"[a-z]+")\]\s*\.map\(\|outcome\|\s*format!\("livecheck\.\{agent\}\.',
                               config_source)
    assert outcome_lists, "the per-check counters' outcomes are no longer where this test reads them"
    outcomes = {o for found in outcome_lists for o in re.findall(r'"([a-z]+)"', found)}
    assert outcomes == {"passed", "failed", "errored"}, outcomes
    per_check_prefixes = {m.group(1) for n in emitted
                          if (m := re.fullmatch(r"(livecheck_.+)_(%s)" % "|".join(outcomes), n))}
    assert "livecheck_orders_no_passwords" in per_check_prefixes and "livecheck_support_polite" in per_check_prefixes
    proxy_source = (REPO / "src" / "root" / "mod.rs").read_text()
    reports = {n.replace(".", "_")
               for n in re.findall(r'(?:increment_counter|\.count)\(\s*"(livecheck\.[a-z.]+)"', proxy_source)}
    assert reports >= {"livecheck_reports_retried", "livecheck_reports_refused", "livecheck_reports_dropped",
                       "livecheck_reports_lost"}
    names = emitted | reports | {f"{p}_{o}" for p in per_check_prefixes for o in outcomes}

    dashboard = json.loads((REPO / "deploy" / "grafana" / "livecheck-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert exprs
    exact, patterns = set(), set()
    for expr in exprs:
        patterns |= set(re.findall(r'__name__=~"([^"]+)"', expr))
        without_strings = re.sub(r'"[^"]*"', '""', expr)
        exact |= set(re.findall(r"\b(livecheck_[a-z0-9_]+)\b", without_strings))
    assert exact and patterns
    assert exact <= names, exact - names
    for pattern in patterns:
        matched = {n for n in names if re.fullmatch(pattern, n)}
        assert pattern.startswith("livecheck_") and matched, (pattern, sorted(names))
    # Every per-check counter this Envoy has is on the dashboard.
    per_check = {n for n in emitted if re.fullmatch(r"livecheck_.+_(passed|failed|errored)", n)}
    assert per_check and all(any(re.fullmatch(p, n) for p in patterns) for n in per_check)
