"""`make chaos-replicas`: three sidecar replicas on one PostgreSQL under a steady load while one replica is
killed and PostgreSQL restarts (issue 52). Loopback only, bounded in time; not part of `make test`.

Real parts: three release `livecheck-judge` processes (tests/e2e/envoy_process.py's JudgeSidecar; another
build from LIVECHECK_BIN_DIR) on a throwaway PostgreSQL server (tests/e2e/postgres_server.py). Doubles, scripted
stand-ins: the JUDGE BACKEND DOUBLE (tests/e2e/judge_backend_double.py) for the judge model, answering after
CHAOS_JUDGE_DELAY (0.5) s; a WEBHOOK RECEIVER DOUBLE (tests/e2e/webhook_receiver_double.py) for the events,
answering after CHAOS_HOOK_DELAY (0.2) s, and another for Slack.

The load plays the filter: CHAOS_RATE turn reports a second for CHAOS_SECONDS (default 300), round robin
over the replicas, each turn with its own key (`authorization: Bearer sk-turn-<n>`), a rule result (failed
for some: an event) and a background judged check (failed for some: an event; alerting). A report not
answered 200 goes to the next replica a moment later, as the filter's outbox and Envoy's retry would, until
it is stored. Meanwhile:

  - at ~1/3 one replica is SIGKILLed; right after, the database says which pending checks it held (as the
    key holder or the claimant) and which outbox events it had claimed: the only ones allowed a keyless
    verdict, a second judge call or a second delivery. It starts again CHAOS_OUTAGE_SECONDS (2) later;
  - at ~2/3 PostgreSQL stops and starts again CHAOS_DB_DOWN_SECONDS (5) later.

After the load, a drain (until nothing is pending or queued, at most CHAOS_DRAIN_SECONDS), then it asserts:
every report stored, with one result row per check and attempt; every background check judged exactly once
at the judge double, with its own turn's key, and its verdict stored (none `errored`), except the killed
replica's (counted: judged without the key, `errored` or with the fallback key CHAOS_FALLBACK=1 configures);
every failed result's event delivered, twice only if the killed replica had claimed it; at most one alert
per agent and check. Figures go to bench/results-replicas.md; CHAOS_QUICK=1 is a 60 s smoke run written to
target/bench/ (CHAOS_OUT for another path). Every process it starts is stopped by its PID.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
import queue
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Optional

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from envoy_process import JudgeSidecar  # noqa: E402
from judge_backend_double import FAIL_MARKER, JudgeBackendDouble  # noqa: E402
from fault_runs import finish, stop_all  # noqa: E402
from postgres_server import Postgres  # noqa: E402
from webhook_receiver_double import WebhookReceiver  # noqa: E402

QUICK = os.environ.get("CHAOS_QUICK") == "1"
SECONDS = float(os.environ.get("CHAOS_SECONDS", "60" if QUICK else "300"))
RATE = float(os.environ.get("CHAOS_RATE", "20"))
JUDGE_DELAY = float(os.environ.get("CHAOS_JUDGE_DELAY", "0.5"))
# How long the webhook receiver takes to answer: events are in flight when the replica dies.
HOOK_DELAY = float(os.environ.get("CHAOS_HOOK_DELAY", "0.2"))
OUTAGE = float(os.environ.get("CHAOS_OUTAGE_SECONDS", "2"))
# How long PostgreSQL stays down at its restart: long enough that verdicts, deliveries and lease renewals
# meet a database that is gone, short of a replica's lease (15 s), so no live replica is taken for dead.
DB_DOWN = float(os.environ.get("CHAOS_DB_DOWN_SECONDS", "5"))
# Past a dead replica's lease (15 s) and a poll (5 s), with room for the backlog.
DRAIN = float(os.environ.get("CHAOS_DRAIN_SECONDS", "120"))
FALLBACK = os.environ.get("CHAOS_FALLBACK") == "1"
OUT = pathlib.Path(os.environ.get("CHAOS_OUT", REPO / ("target/bench" if QUICK else "bench") / "results-replicas.md"))
# The sidecar binary's directory: the release build, or another (LIVECHECK_BIN_DIR, as the e2e tests read it).
BIN_DIR = pathlib.Path(os.environ.get("LIVECHECK_BIN_DIR", REPO / "target" / "release"))
REPLICAS = 3
WORKERS = 16
AGENTS = 5

API_TOKEN = "chaos-operator-" + secrets.token_hex(8)
FILTER_TOKEN = "chaos-filter-" + secrets.token_hex(8)
HOOK_SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
FALLBACK_KEY = "sk-fallback-" + secrets.token_hex(6)
NO_KEY_REASON_START = "The judge had no key for this check"
TURN_MARK = re.compile(r"<turn-(\d+)>")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- the load: turn reports as the filter sends them --------------------------------------------------


@dataclasses.dataclass
class Turn:
    n: int
    turn_id: str
    agent: str
    rule_fails: bool
    tone_fails: bool
    stored: bool = False
    tries: int = 0

    @property
    def key(self) -> str:
        return f"sk-turn-{self.n}"

    def report(self) -> dict:
        now_ms = int(time.time() * 1000)
        rule = {"name": "no-pw", "stage": "output", "kind": "not_contains", "mode": "block", "attempt": 1,
                "outcome": "failed" if self.rule_fails else "passed",
                "reason": "The answer contains text it had to avoid.", "created_at_ms": now_ms}
        answer = f"<turn-{self.n}> " + (f"{FAIL_MARKER} answer." if self.tone_fails else "Kind answer.")
        tone = {"name": "tone", "alert": {"failure_rate": 0.1, "over_last": 10},
                "judge": {"stage": "output", "kind": "polite_tone", "text": answer,
                          "question": "Where is my order?", "judge_model": "judge-model"}}
        return {"turn_id": self.turn_id, "agent": self.agent, "version": "1", "results": [rule],
                "background": [tone]}


def new_turn(n: int) -> Turn:
    return Turn(n, "lc_" + secrets.token_hex(16), f"agent-{n % AGENTS}", rule_fails=n % 5 == 1,
                tone_fails=n % 7 == 3)


def post_report(url: str, turn: Turn) -> Optional[int]:
    """The report to one replica: the HTTP status, or None when the replica was not reached."""
    request = urllib.request.Request(
        url + "/v1/results", data=json.dumps(turn.report()).encode(), method="POST",
        headers={"content-type": "application/json", "x-livecheck-token": FILTER_TOKEN,
                 "authorization": f"Bearer {turn.key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def deliver(replicas: list[JudgeSidecar], turn: Turn, give_up_at: float) -> None:
    """Sends the report until a replica stores it: the next replica after a refusal or an outage."""
    at = turn.n % len(replicas)
    while time.monotonic() < give_up_at:
        turn.tries += 1
        status = post_report(replicas[at % len(replicas)].url, turn)
        if status == 200:
            turn.stored = True
            return
        if status == 400:
            log(f"turn {turn.n}: report refused as bad")
            return
        at += 1
        time.sleep(0.2)


def load(replicas: list[JudgeSidecar], turns: list[Turn], seconds: float) -> None:
    """CHAOS_RATE reports a second, handed to WORKERS senders; returns when every one is stored or given up."""
    work: queue.Queue = queue.Queue()
    give_up_at = time.monotonic() + seconds + 120

    def sender() -> None:
        while (turn := work.get()) is not None:
            deliver(replicas, turn, give_up_at)

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    started = time.monotonic()
    n = 0
    while time.monotonic() < started + seconds:
        while n < (time.monotonic() - started) * RATE:
            turn = new_turn(n)
            turns.append(turn)
            work.put(turn)
            n += 1
        time.sleep(0.01)
    for _ in threads:
        work.put(None)
    for t in threads:
        t.join()


# --- the replicas ---------------------------------------------------------------------------------------


def start_replica(workdir: pathlib.Path, pg: Postgres, judge: JudgeBackendDouble, hooks: WebhookReceiver,
                  slack: WebhookReceiver) -> JudgeSidecar:
    backend = {"name": "double", "api": "openai", "base_url": judge.base_url, "models": ["*"]}
    env = {"LIVECHECK_RESULTS_URL": pg.url, "LIVECHECK_API_TOKEN": API_TOKEN, "LIVECHECK_FILTER_TOKEN": FILTER_TOKEN,
           "LIVECHECK_HOOK_SECRET": HOOK_SECRET, "LIVECHECK_SLACK_URL": slack.url, "RUST_LOG": "info",
           "NO_COLOR": "1"}
    if FALLBACK:
        backend["api_key_env"] = "LIVECHECK_FALLBACK_KEY"
        env["LIVECHECK_FALLBACK_KEY"] = FALLBACK_KEY
    return JudgeSidecar(
        workdir, binary=BIN_DIR / "livecheck-judge", timeout_ms=5000, backends=[backend],
        tables={"store": {"url_env": "LIVECHECK_RESULTS_URL"}, "api": {"token_env": "LIVECHECK_API_TOKEN"},
                "filter": {"token_env": "LIVECHECK_FILTER_TOKEN"},
                "alerts": {"slack_webhook_url_env": "LIVECHECK_SLACK_URL"}},
        arrays={"webhooks": [{"url": hooks.url, "secret_env": "LIVECHECK_HOOK_SECRET"}]},
        env=env,
    )


def replica_id(sidecar: JudgeSidecar) -> str:
    """The id the replica's last start logged ("livecheck-judge listening ... replica=rep_...")."""
    ids = re.findall(r"livecheck-judge listening.*?\breplica=\"?(rep_[0-9A-Za-z]+)", ANSI.sub("", sidecar.log()))
    if not ids:
        raise RuntimeError(f"no replica id in the log:\n{sidecar.log()[-2000:]}")
    return ids[-1]


@dataclasses.dataclass
class Held:
    """What the killed replica held at its death, by the database."""
    replica: str
    checks: set  # turn ids (one background check per turn)
    events: set  # event ids
    taken_over_s: Optional[float] = None  # from the kill until none of its checks is pending


def held_by(pg: Postgres, rid: str) -> tuple[set, set]:
    """The pending checks (turn ids) replica `rid` holds the key of or has claimed, and the outbox events
    it has claimed."""
    quoted = rid.replace("'", "''")
    checks = {r[0] for r in pg.query(
        f"SELECT turn_id FROM pending_checks WHERE key_holder = '{quoted}' OR claimed_by = '{quoted}'")}
    events = {r[0] for r in pg.query(f"SELECT id FROM event_outbox WHERE claimed_by = '{quoted}'")}
    return checks, events


def kill_and_restart(victim: JudgeSidecar, pg: Postgres, timeline: list, t0: float) -> Held:
    rid = replica_id(victim)
    os.kill(victim.pid, signal.SIGKILL)
    victim.process.wait(timeout=10)
    killed_at = time.monotonic()
    timeline.append(f"{killed_at - t0:6.1f} s  replica {rid} killed (SIGKILL)")
    # Read twice, a second apart: a commit the server was finishing at the kill shows in the second.
    checks, events = held_by(pg, rid)
    time.sleep(1)
    later_checks, later_events = held_by(pg, rid)
    checks, events = checks | later_checks, events | later_events
    held = Held(rid, checks, events)
    timeline.append(f"{time.monotonic() - t0:6.1f} s  it held {len(checks)} pending checks and {len(events)} "
                    "claimed events")
    log(f"killed {rid}: held {len(checks)} checks, {len(events)} events")
    time.sleep(OUTAGE)
    victim.start(same_port=True)
    timeline.append(f"{time.monotonic() - t0:6.1f} s  started again on its port as {replica_id(victim)}")
    log("victim restarted")
    if checks:
        listed = ", ".join(f"'{c}'" for c in checks)
        deadline = killed_at + 90
        while time.monotonic() < deadline:
            if pg.count(f"pending_checks WHERE turn_id IN ({listed})") == 0:
                held.taken_over_s = time.monotonic() - killed_at
                timeline.append(f"{time.monotonic() - t0:6.1f} s  its checks all judged, "
                                f"{held.taken_over_s:.1f} s after the kill")
                break
            time.sleep(0.5)
    return held


def faults(replicas: list[JudgeSidecar], pg: Postgres, timeline: list, t0: float, out: dict) -> None:
    while time.monotonic() < t0 + SECONDS / 3:
        time.sleep(0.1)
    out["held"] = kill_and_restart(replicas[1], pg, timeline, t0)
    while time.monotonic() < t0 + 2 * SECONDS / 3:
        time.sleep(0.1)
    started = time.monotonic()
    pg.restart(DB_DOWN)
    timeline.append(f"{started - t0:6.1f} s  PostgreSQL stopped and started again "
                    f"({time.monotonic() - started:.1f} s down)")
    log("PostgreSQL restarted")


def drain(pg: Postgres, timeline: list, t0: float) -> None:
    """Until nothing is pending or queued twice in a row (at most DRAIN s), then a moment for what is on
    its way."""
    deadline = time.monotonic() + DRAIN
    quiet = 0
    while time.monotonic() < deadline and quiet < 2:
        try:
            left = pg.count("pending_checks") + pg.count("event_outbox")
        except subprocess.CalledProcessError:
            left = -1
        quiet = quiet + 1 if left == 0 else 0
        time.sleep(1)
    timeline.append(f"{time.monotonic() - t0:6.1f} s  drained" + ("" if quiet >= 2 else " (NOT: time out)"))
    time.sleep(3)


# --- the verdict ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Figures:
    turns: int = 0
    stored_reports: int = 0
    not_stored: int = 0
    retried_reports: int = 0
    result_rows: int = 0
    results_missing: int = 0
    results_duplicated: int = 0
    checks: int = 0
    judged_once_own_key: int = 0
    held: int = 0
    held_errored_no_key: int = 0
    held_fallback: int = 0
    held_asked_twice: int = 0
    held_other: int = 0
    bad_checks: list = dataclasses.field(default_factory=list)
    events_expected: int = 0
    events_delivered: int = 0
    events_missing: int = 0
    duplicates_allowed: int = 0
    duplicates_not_allowed: int = 0
    held_events: int = 0
    alerts: int = 0
    alerts_twice: list = dataclasses.field(default_factory=list)


def judge_calls(judge: JudgeBackendDouble) -> dict:
    """The `authorization` of every judge call, by turn number."""
    calls: dict = collections.defaultdict(list)
    for call in judge.seen():
        found = TURN_MARK.search(call.judged_text or "")
        if found:
            calls[int(found.group(1))].append(call.headers.get("authorization", ""))
    return calls


def count_up(turns: list[Turn], pg: Postgres, judge: JudgeBackendDouble, hooks: WebhookReceiver,
             slack: WebhookReceiver, held: Held) -> Figures:
    f = Figures(turns=len(turns))
    f.stored_reports = sum(t.stored for t in turns)
    f.not_stored = f.turns - f.stored_reports
    f.retried_reports = sum(t.tries > 1 for t in turns)
    rows = pg.query("SELECT turn_id, name, attempt, count(*), min(outcome), min(reason) FROM results "
                    "GROUP BY turn_id, name, attempt")
    results = {(r[0], r[1], r[2]): (int(r[3]), r[4], r[5]) for r in rows}
    f.result_rows = sum(n for n, _, _ in results.values())
    f.results_duplicated = sum(n > 1 for n, _, _ in results.values())

    calls = judge_calls(judge)
    for t in turns:
        for name in ("no-pw", "tone"):
            if (t.turn_id, name, "1") not in results:
                f.results_missing += 1
        tone = results.get((t.turn_id, "tone", "1"))
        if tone is None:
            continue
        f.checks += 1
        _, outcome, reason = tone
        asked = calls.get(t.n, [])
        own = f"Bearer sk-turn-{t.n}"
        verdict = "failed" if t.tone_fails else "passed"
        if t.turn_id in held.checks:
            f.held += 1
            keyless = [a for a in asked if a != own]
            if outcome == "errored" and reason.startswith(NO_KEY_REASON_START) and not keyless:
                f.held_errored_no_key += 1
            elif FALLBACK and outcome == verdict and keyless == [f"Bearer {FALLBACK_KEY}"]:
                f.held_fallback += 1
            elif asked == [own] and outcome == verdict:
                pass  # judged by the key holder after all (counted as once, with its key)
            else:
                f.held_other += 1
            f.held_asked_twice += len(asked) > 1
            if asked == [own] and outcome == verdict:
                f.judged_once_own_key += 1
            continue
        if asked == [own] and outcome == verdict:
            f.judged_once_own_key += 1
        else:
            keys = ["own" if a == own else "fallback" if a == f"Bearer {FALLBACK_KEY}" else "other" for a in asked]
            f.bad_checks.append((t.n, outcome, reason[:60], keys))

    # Every result that did not pass queues one event (no response id: the event names the turn id).
    expected = {(r[0], r[1]) for r in pg.query("SELECT turn_id, name FROM results WHERE outcome <> 'passed'")}
    f.events_expected = len(expected)
    by_event: dict = collections.defaultdict(list)
    for d in hooks.seen():
        body = json.loads(d.body)
        by_event[(body["data"]["response_id"], body["data"]["name"])].append(d.headers.get("webhook-id"))
    f.events_delivered = sum(len(ids) for ids in by_event.values())
    f.held_events = len(held.events)
    for key in expected:
        ids = by_event.get(key, [])
        if not ids:
            f.events_missing += 1
        elif len(ids) > 1:
            if len(set(ids)) == 1 and ids[0] in held.events:
                f.duplicates_allowed += len(ids) - 1
            else:
                f.duplicates_not_allowed += len(ids) - 1
    alerts = collections.Counter()
    for d in slack.seen():
        text = json.loads(d.body)["text"]
        found = re.search(r'check "([^"]+)" of agent "([^"]+)"', text)
        alerts[found.groups() if found else text] += 1
    f.alerts = sum(alerts.values())
    f.alerts_twice = [k for k, n in alerts.items() if n > 1]
    return f


def failures_of(f: Figures) -> list[str]:
    counted = [
        (f.not_stored, "reports never stored"),
        (f.results_missing, "results lost"),
        (f.results_duplicated, "results stored twice"),
        (len(f.bad_checks), "background checks not judged exactly once with their turn's key, or not stored as "
                            f"judged (first: {f.bad_checks[:5]})"),
        (f.held_other, "checks of the killed replica neither judged without its key nor by it"),
        (f.events_missing, "events never delivered"),
        (f.duplicates_not_allowed, "second deliveries of events the killed replica had not claimed"),
        (len(f.alerts_twice), f"agents' checks alerted more than once a day: {f.alerts_twice}"),
    ]
    return [f"{n} {what}" for n, what in counted if n]


def write_report(f: Figures, held: Held, timeline: list, failures: list[str], seconds: float) -> str:
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    env = " ".join(f"{k}={os.environ[k]}" for k in sorted(os.environ) if k.startswith("CHAOS_"))
    lines = [
        "# Replicas under chaos (`make chaos-replicas`, benches/chaos_replicas.py)",
        "",
        f"Command: `{(env + ' ') if env else ''}make chaos-replicas`; {time.strftime('%Y-%m-%d')}, git {git}"
        f"{' with local changes' if dirty else ''}; {os.cpu_count()} cores shared with other work (builds, tests).",
        "",
        f"Three sidecars ({BIN_DIR.relative_to(REPO) if BIN_DIR.is_relative_to(REPO) else BIN_DIR}/livecheck-judge) "
        f"on one throwaway PostgreSQL; {RATE:g} turn reports a second for {SECONDS:.0f} s, "
        "round robin, each turn with its own key, a rule result and a background judged check; the judge backend "
        f"double answers in {JUDGE_DELAY:g} s, the webhook receiver double in {HOOK_DELAY:g} s, a Slack receiver double; "
        f"the backend's fallback key "
        f"{'configured' if FALLBACK else 'not configured'}. Loopback only. The whole run took {seconds:.0f} s.",
        "",
        "## Faults",
        "",
        *[f"- {e}" for e in timeline],
        "",
        "## Results",
        "",
        "| what | count |",
        "| --- | ---: |",
        f"| turn reports sent | {f.turns} |",
        f"| stored (200 from a replica) | {f.stored_reports} |",
        f"| sent again after a refusal or outage | {f.retried_reports} |",
        f"| never stored | {f.not_stored} |",
        f"| result rows | {f.result_rows} |",
        f"| results lost | {f.results_missing} |",
        f"| results stored twice | {f.results_duplicated} |",
        f"| background checks | {f.checks} |",
        f"| judged once, with the turn's key, verdict stored | {f.judged_once_own_key} |",
        f"| not so, outside the killed replica's | {len(f.bad_checks)} |",
        f"| held by the killed replica | {f.held} |",
        f"| of those, `errored` without a key | {f.held_errored_no_key} |",
        f"| of those, judged with the fallback key | {f.held_fallback} |",
        f"| of those, asked of the judge twice (before the kill and after) | {f.held_asked_twice} |",
        f"| of those, anything else | {f.held_other} |",
        f"| killed replica's checks all judged, after the kill | "
        f"{'-' if held.taken_over_s is None else f'{held.taken_over_s:.1f} s'} |",
        f"| events expected (results not passed) | {f.events_expected} |",
        f"| deliveries | {f.events_delivered} |",
        f"| events never delivered | {f.events_missing} |",
        f"| events the killed replica had claimed | {f.held_events} |",
        f"| second deliveries of those | {f.duplicates_allowed} |",
        f"| second deliveries of any other | {f.duplicates_not_allowed} |",
        f"| alerts (Slack) | {f.alerts} |",
        f"| alerts sent twice for one agent and check | {len(f.alerts_twice)} |",
        "",
        "## Verdict",
        "",
        *([f"- FAILED: {x}" for x in failures] or [
            "- Passed: nothing lost or stored twice; every background check judged once with its turn's key except "
            "the killed replica's, judged without it; duplicates only of events the killed replica had claimed; "
            "at most one alert per check."]),
        "",
    ]
    text = "\n".join(lines)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    return text


def main() -> int:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-chaos-"))
    workdir.chmod(0o755)  # PostgreSQL runs as `nobody` when this runs as root
    log(f"{RATE:g} reports/s for {SECONDS:.0f} s over {REPLICAS} replicas; work in {workdir}")
    started: list = []
    failures: list[str] = []
    began = time.monotonic()
    try:
        pg = Postgres(workdir)
        started.append(pg)
        judge = JudgeBackendDouble(delay=JUDGE_DELAY).start()
        started.append(judge)
        hooks, slack = WebhookReceiver(delay=HOOK_DELAY), WebhookReceiver()
        started += [hooks, slack]
        replicas = []
        for i in range(REPLICAS):
            replicas.append(start_replica(workdir / f"replica-{i}", pg, judge, hooks, slack))
            started.append(replicas[-1])
        timeline: list[str] = []
        turns: list[Turn] = []
        t0 = time.monotonic()
        out: dict = {}
        chaos = threading.Thread(target=faults, args=(replicas, pg, timeline, t0, out), daemon=True)
        chaos.start()
        load(replicas, turns, SECONDS)
        chaos.join(timeout=120)
        log(f"load over: {len(turns)} reports; draining")
        drain(pg, timeline, t0)
        held = out.get("held") or Held("-", set(), set())
        figures = count_up(turns, pg, judge, hooks, slack, held)
        failures = failures_of(figures)
        if "held" not in out:
            failures.append("the kill did not happen")
        print(write_report(figures, held, timeline, failures, time.monotonic() - began))
    finally:
        stop_all(started)
    return finish("CHAOS", failures, workdir)


if __name__ == "__main__":
    sys.exit(main())
