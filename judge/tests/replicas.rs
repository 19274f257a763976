//! Three real `livecheck-judge` processes on one PostgreSQL database, as `deploy/judge` runs them
//! (issue 52): turn reports spread over them, each turn with its own key, background checks, webhook
//! events and alerts. Every background check is judged once, by the replica holding its turn's key;
//! every result is stored once and none falsely `errored`; every event is delivered once; an alert
//! fires once; and every replica answers the operator API alike. A replica stopped while it holds
//! keys leaves its checks to the others, judged without the key, and nothing is lost.
//!
//! The replicas run with the shipped timing (the judge loop reads the pending checks every 5 s, the
//! replica that received a report at once): the judge DOUBLE takes longer than that poll, so every
//! other replica reads the pending checks at least once while each check waits for its verdict.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::doubles::{Answer, BackendDouble, Vendor};
use common::output;
use common::results::*;
use livecheck_wire::{Alert, Outcome, FILTER_TOKEN_HEADER};
use serde_json::{json, Value};

/// How often a replica reads the pending checks and the outbox when nothing woke it (`Timing`).
const POLL: Duration = Duration::from_secs(5);
/// How long the judge double takes to answer the main case's checks: longer than [`POLL`].
const JUDGE_TAKES: Duration = Duration::from_millis(5_500);
/// Judged texts holding this fail at the judge double.
const RUDE: &str = "RUDE-4c1f";
const SLOW_VERDICT: &str = "Slow double verdict.";
const FALLBACK_KEY: &str = "sk-fallback-7c1d";
/// Each turn's checks: a rule result in the report, and the background judged check.
const CHECKS: [&str; 2] = ["no-pw", "tone"];

/// A process this test started: killed (SIGKILL, by its PID) when dropped, so a failing test
/// leaves nothing running.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// One `livecheck-judge` process with a config file of its own.
struct Replica {
    process: Process,
    http: Http,
    /// The replica id from its "livecheck-judge listening" line (`replica=rep_…`).
    id: Option<String>,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Replica {
    type Target = Http;

    fn deref(&self) -> &Http {
        &self.http
    }
}

/// A process started and the lines of its log, until it said where it listens.
struct Starting {
    process: Process,
    listening: mpsc::Receiver<String>,
    log: Arc<Mutex<String>>,
    dir: tempfile::TempDir,
}

impl Starting {
    /// Starts the sidecar binary on `db` (through `[store] url_env`), on a port of its choosing.
    fn spawn(db: &Db, extras: &Extras, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("judge.toml");
        std::fs::write(
            &config,
            config_toml("url_env = \"LC_TEST_STORE_URL\"\n", extras),
        )
        .unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_livecheck-judge"));
        command.arg("--config").arg(&config);
        for (var, _) in std::env::vars() {
            if var.starts_with("LIVECHECK_JUDGE_") {
                command.env_remove(var);
            }
        }
        let child = command
            .envs(config_env(extras))
            .env("LC_TEST_STORE_URL", &db.url)
            .env("LIVECHECK_JUDGE_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut process = Process(child);
        let stderr = process.0.stderr.take().unwrap();
        let log: Arc<Mutex<String>> = Arc::default();
        let (tx, listening) = mpsc::channel();
        let kept = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                let line = without_ansi(&line);
                if line.contains("livecheck-judge listening") {
                    let _ = tx.send(line.clone());
                }
                let mut log = kept.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        Self {
            process,
            listening,
            log,
            dir,
        }
    }

    /// Waits for the "listening" line: the process is serving from then on.
    fn ready(self) -> Replica {
        let Ok(line) = self.listening.recv_timeout(Duration::from_secs(30)) else {
            panic!(
                "a replica did not start:\n{}",
                self.log.lock().unwrap().clone()
            );
        };
        let listen = field(&line, "listen").unwrap_or_else(|| panic!("no listen= in {line:?}"));
        Replica {
            process: self.process,
            http: Http::new(format!("http://{listen}")),
            id: field(&line, "replica").map(str::to_owned),
            log: self.log,
            _dir: self.dir,
        }
    }
}

impl Replica {
    /// Asks the process to stop cleanly: SIGTERM to its PID.
    fn sigterm(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.process.0.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits until the process exited (at most 30 s, Kubernetes' default grace period).
    async fn exited(&mut self) {
        for _ in 0..600 {
            if self.process.0.try_wait().unwrap().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "the replica did not exit within 30 s of SIGTERM:\n{}",
            self.log()
        );
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Posts a turn report as the filter does: the filter token, and the turn's key as the caller's.
    async fn report(&self, turn: &Turn) {
        let auth = format!("Bearer {}", turn.key());
        let (status, body) = self
            .post_report_with(
                &serde_json::to_string(&turn.report()).unwrap(),
                &[
                    (FILTER_TOKEN_HEADER, FILTER_TOKEN),
                    ("authorization", &auth),
                ],
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
}

/// Three replicas started at once on `db`, as a Deployment's pods start.
fn three_replicas(db: &Db, extras: &Extras, env: &[(&str, &str)]) -> Vec<Replica> {
    let starting: Vec<Starting> = (0..3).map(|_| Starting::spawn(db, extras, env)).collect();
    starting.into_iter().map(Starting::ready).collect()
}

/// `name=value` of a log line (the value runs to the next space).
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {name}="))? + name.len() + 2;
    let value = line.get(at..)?.split_whitespace().next()?;
    Some(value.trim_matches('"'))
}

/// The line without terminal colour codes (`ESC [ … letter`), whatever the log's settings.
fn without_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// One turn of the load: its own key, a rule result and a background judged check (`tone`).
struct Turn {
    n: usize,
    id: String,
    agent: &'static str,
    rule_fails: bool,
    tone_fails: bool,
    alert: Option<Alert>,
}

impl Turn {
    fn new(n: usize) -> Self {
        Self {
            n,
            id: turn_id(),
            agent: "orders",
            rule_fails: false,
            tone_fails: false,
            alert: None,
        }
    }

    fn fails(&self, check: &str) -> bool {
        match check {
            "no-pw" => self.rule_fails,
            _ => self.tone_fails,
        }
    }

    /// How many of its checks fail: each queues one event.
    fn failing(&self) -> usize {
        CHECKS.iter().filter(|c| self.fails(c)).count()
    }

    fn key(&self) -> String {
        format!("sk-turn-{}", self.n)
    }

    /// The text the judge reads names the turn, so the judge double's requests say whose they are.
    fn marker(&self) -> String {
        format!("<turn-{}>", self.n)
    }

    fn report(&self) -> livecheck_wire::TurnReport {
        let rule = if self.rule_fails {
            Outcome::Failed
        } else {
            Outcome::Passed
        };
        let mut r = report(&self.id, self.agent, vec![result("no-pw", rule, 1)]);
        let answer = format!(
            "{} {}",
            self.marker(),
            if self.tone_fails { RUDE } else { "Kindly." }
        );
        r.background.push(background(
            "tone",
            output("polite_tone", "Where is my order?", &answer),
        ));
        r.background[0].alert = self.alert;
        r
    }
}

/// What the judge double was asked, by turn: the `authorization` of each request for that turn.
fn judge_calls(judge: &BackendDouble, turns: &[Turn]) -> BTreeMap<usize, Vec<String>> {
    let mut calls: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for seen in judge.seen() {
        let body = seen.body.to_string();
        let of: Vec<&Turn> = turns
            .iter()
            .filter(|t| body.contains(&t.marker()))
            .collect();
        assert_eq!(of.len(), 1, "a judge request of one turn: {body}");
        calls
            .entry(of[0].n)
            .or_default()
            .push(seen.header("authorization").unwrap_or("").to_owned());
    }
    calls
}

/// Every result row: (turn, check, attempt) → (outcome, reason).
async fn results(db: &Db) -> BTreeMap<(String, String, String), (String, String)> {
    db.rows("SELECT turn_id, name, CAST(attempt AS TEXT), outcome, reason FROM results")
        .await
        .into_iter()
        .map(|r| {
            (
                (r[0].clone(), r[1].clone(), r[2].clone()),
                (r[3].clone(), r[4].clone()),
            )
        })
        .collect()
}

/// The background checks' results only.
async fn tone_results(db: &Db) -> BTreeMap<(String, String, String), (String, String)> {
    let mut rows = results(db).await;
    rows.retain(|(_, check, _), _| check == "tone");
    rows
}

async fn count(db: &Db, table: &str) -> usize {
    db.rows(&format!("SELECT CAST(count(*) AS TEXT) FROM {table}"))
        .await[0][0]
        .parse()
        .unwrap()
}

/// Deliveries per event `(response id, check)`, each delivery's `webhook-id` checked against the
/// event id its body carries.
fn deliveries(hook: &Recorder) -> BTreeMap<(String, String), Vec<String>> {
    let mut by_event: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (headers, body) in hook.seen.lock().unwrap().iter() {
        let body: Value = serde_json::from_str(body).unwrap();
        let id = headers.get("webhook-id").unwrap().to_str().unwrap();
        assert_eq!(body["id"], json!(id), "the webhook-id is the event's id");
        let data = &body["data"];
        by_event
            .entry((
                data["response_id"].as_str().unwrap().to_owned(),
                data["name"].as_str().unwrap().to_owned(),
            ))
            .or_default()
            .push(id.to_owned());
    }
    by_event
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_judge_each_check_once_with_its_turns_key_and_send_each_event_once() {
    let db = Db::postgres().await;
    let judge = BackendDouble::deciding(Vendor::OpenAi, |body| {
        let rude = body.to_string().contains(RUDE);
        Answer::VerdictAfter(
            JUDGE_TAKES,
            json!({"passed": !rude, "score": if rude { 0.1 } else { 0.9 },
                   "reason": if rude { "Rude." } else { "Polite." }}),
        )
    })
    .await;
    // A receiver that takes 100 ms an event, as one doing its own work does.
    let hook = Recorder::answering_after(Duration::from_millis(100)).await;
    let slack = Recorder::start().await;
    let extras = Extras {
        backend: Some(backend_config(&judge, false)),
        token: true,
        filter_token: true,
        slack: Some(slack.url.clone()),
        webhooks: vec![hook.url.clone()],
        ..Extras::default()
    };
    let replicas = three_replicas(&db, &extras, &[("LIVECHECK_JUDGE_TIMEOUT_MS", "15000")]);

    // Two agents, both alerting on the first `tone` that does not pass: `orders` has rude answers
    // (one alert, however many replicas see them), `billing` none (no alert).
    let alert = Some(Alert {
        failure_rate: 0.5,
        over_last: 1,
    });
    let turns: Vec<Turn> = (0..40)
        .map(|n| Turn {
            agent: if n % 2 == 0 { "orders" } else { "billing" },
            tone_fails: n % 4 == 0,
            rule_fails: n % 4 == 2,
            alert,
            ..Turn::new(n)
        })
        .collect();
    for turn in &turns {
        replicas[turn.n % replicas.len()].report(turn).await;
    }

    let events: usize = turns.iter().map(Turn::failing).sum();
    wait_within(
        JUDGE_TAKES + Duration::from_secs(15),
        "every check is judged and every event delivered",
        async || {
            count(&db, "pending_checks").await == 0
                && count(&db, "event_outbox").await == 0
                && hook.bodies().len() >= events
                && !slack.bodies().is_empty()
        },
    )
    .await;
    // A delivery or an alert already on its way still arrives; nothing new can start (the
    // outbox and the pending checks are empty).
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Every property is checked before the test fails: a failing run shows all that went wrong.
    let mut problems = Vec::new();
    let rows = results(&db).await;
    if rows.len() != 2 * turns.len() {
        problems.push(format!("{} result rows, not one per check", rows.len()));
    }
    for turn in &turns {
        for check in CHECKS {
            let expected = if turn.fails(check) {
                "failed"
            } else {
                "passed"
            };
            match rows.get(&(turn.id.clone(), check.to_owned(), "1".to_owned())) {
                None => problems.push(format!("turn {}: {check} lost", turn.n)),
                Some((outcome, reason)) if outcome != expected => problems.push(format!(
                    "turn {}: {check} stored {outcome} ({reason:?}), not {expected}",
                    turn.n
                )),
                Some(_) => {}
            }
        }
    }

    let calls = judge_calls(&judge, &turns);
    for turn in &turns {
        let asked = calls.get(&turn.n).cloned().unwrap_or_default();
        if asked != [format!("Bearer {}", turn.key())] {
            problems.push(format!(
                "turn {}: the judge was asked with {asked:?}, not once with the turn's key",
                turn.n
            ));
        }
    }

    let delivered = deliveries(&hook);
    for turn in &turns {
        for check in CHECKS {
            let times = delivered
                .get(&(turn.id.clone(), check.to_owned()))
                .map_or(0, Vec::len);
            let once = usize::from(turn.fails(check));
            if times != once {
                problems.push(format!(
                    "turn {}: {check}'s event delivered {times} times, not {once}",
                    turn.n
                ));
            }
        }
    }
    let strangers = delivered
        .keys()
        .filter(|(id, _)| !turns.iter().any(|t| t.id == *id))
        .count();
    if strangers > 0 {
        problems.push(format!("{strangers} events of turns never reported"));
    }

    let alerts: Vec<String> = slack
        .bodies()
        .iter()
        .map(|b| {
            serde_json::from_str::<Value>(b).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    if alerts.len() != 1 || !alerts[0].contains(r#"check "tone" of agent "orders""#) {
        problems.push(format!("alerts {alerts:?}, not one for tone of orders"));
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );

    for turn in &turns {
        let first = replicas[0].all_checks(&turn.id).await;
        assert_eq!(first.len(), 2);
        for other in &replicas[1..] {
            assert_eq!(other.all_checks(&turn.id).await, first, "{}", turn.id);
        }
    }

    let ids: BTreeSet<Option<String>> = replicas.iter().map(|r| r.id.clone()).collect();
    assert!(
        ids.len() == 3
            && ids
                .iter()
                .all(|id| id.as_deref().is_some_and(|i| i.starts_with("rep_"))),
        "each replica logs an id of its own: {ids:?}"
    );
    // The turns' keys stayed in memory: not in the database, not in any replica's log.
    let dump = db.dump().await.join("\n");
    assert!(!dump.contains("sk-turn-"), "{dump}");
    for replica in &replicas {
        assert!(!replica.log().contains("sk-turn-"), "{}", replica.log());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_holding_keys_leaves_its_checks_to_the_others_judged_without_a_key() {
    a_replica_stopped_holding_keys_leaves_its_checks_to_the_others(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_holding_keys_leaves_its_checks_to_the_others_judged_with_the_fallback() {
    a_replica_stopped_holding_keys_leaves_its_checks_to_the_others(true).await;
}

/// Replica 0 receives every turn and judges one check at a time (`max_concurrent = 2`: one slot
/// for background checks) at the slow judge double; it is stopped with checks still waiting.
async fn a_replica_stopped_holding_keys_leaves_its_checks_to_the_others(fallback: bool) {
    let db = Db::postgres().await;
    let judge = BackendDouble::start(Vendor::OpenAi, Answer::Slow(Duration::from_secs(2))).await;
    let extras = Extras {
        backend: Some(backend_config(&judge, fallback)),
        fallback_key: fallback.then(|| FALLBACK_KEY.to_owned()),
        token: true,
        filter_token: true,
        ..Extras::default()
    };
    let mut replicas = three_replicas(
        &db,
        &extras,
        &[
            ("LIVECHECK_JUDGE_TIMEOUT_MS", "10000"),
            ("LIVECHECK_JUDGE_MAX_CONCURRENT", "2"),
        ],
    );
    let turns: Vec<Turn> = (0..5).map(Turn::new).collect();
    for turn in &turns {
        replicas[0].report(turn).await;
    }
    // Every other replica reads the pending checks at least once while their key holder lives.
    tokio::time::sleep(POLL + Duration::from_millis(500)).await;
    let before = tone_results(&db).await;
    assert!(
        before
            .values()
            .all(|(o, r)| o == "passed" && r == SLOW_VERDICT),
        "only the key holder judged, with the turn's key, while it lived: {before:#?}"
    );
    let calls = judge_calls(&judge, &turns);
    assert!(
        turns.iter().all(|t| calls
            .get(&t.n)
            .is_none_or(|k| *k == [format!("Bearer {}", t.key())])),
        "no check was judged without its key while its key holder lived: {calls:?}"
    );
    assert!(
        count(&db, "pending_checks").await >= 2,
        "the holder still holds checks"
    );
    let judged_before: BTreeSet<String> = before.keys().map(|(turn, ..)| turn.clone()).collect();

    let holder = replicas[0].id.clone();
    replicas[0].sigterm();
    // A stopping replica finishes the judge calls it started, and starts none.
    let started_before_stop = judge.seen().len();
    replicas[0].exited().await;
    wait_within(
        POLL + Duration::from_secs(12),
        "the other replicas judged the stopped replica's checks",
        async || count(&db, "pending_checks").await == 0,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let rows = tone_results(&db).await;
    assert_eq!(rows.len(), turns.len(), "one result per check: {rows:#?}");
    let calls = judge_calls(&judge, &turns);
    let own = |t: &Turn| format!("Bearer {}", t.key());
    let fallback_auth = format!("Bearer {FALLBACK_KEY}");
    let mut taken_over = 0;
    let mut judged_twice = Vec::new();
    for turn in &turns {
        let (outcome, reason) = &rows[&(turn.id.clone(), "tone".to_owned(), "1".to_owned())];
        let asked = calls.get(&turn.n).cloned().unwrap_or_default();
        let with_own = asked.iter().filter(|a| **a == own(turn)).count();
        let with_fallback = asked.iter().filter(|a| **a == fallback_auth).count();
        assert_eq!(
            with_own + with_fallback,
            asked.len(),
            "only the turn's key or the fallback: {asked:?}"
        );
        assert!(with_own <= 1 && with_fallback <= 1, "{asked:?}");
        if judged_before.contains(&turn.id) {
            assert_eq!(
                with_fallback, 0,
                "judged again after its verdict: {asked:?}"
            );
            continue;
        }
        if with_own == 1 && with_fallback == 1 {
            // The check the holder was judging when it stopped: its verdict never stored.
            judged_twice.push(turn.n);
        }
        let keyless = if fallback {
            with_fallback == 1 && outcome == "passed" && reason == SLOW_VERDICT
        } else {
            outcome == "errored" && reason == livecheck_judge::pending::NO_KEY_REASON
        };
        let by_holder = with_own == 1 && with_fallback == 0 && outcome == "passed";
        assert!(
            keyless || by_holder,
            "turn {}: {outcome} {reason:?}, asked {asked:?}",
            turn.n
        );
        taken_over += usize::from(keyless);
    }
    let with_turn_keys = judge
        .seen()
        .iter()
        .filter(|s| s.header("authorization") != Some(fallback_auth.as_str()))
        .count();
    assert_eq!(
        with_turn_keys, started_before_stop,
        "the stopped replica started no judge call after SIGTERM: {calls:?}"
    );
    assert!(
        taken_over >= 1,
        "the others took over the stopped replica's checks: {rows:#?}, the judge asked {calls:?}"
    );
    assert!(
        judged_twice.len() <= 1,
        "only a check in flight at the stop is asked again: {judged_twice:?}"
    );
    // A clean stop leaves no lease behind: the others need not wait for it to expire.
    let live: Vec<String> = db
        .rows("SELECT id FROM replicas")
        .await
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert!(
        holder.is_some() && !live.contains(holder.as_ref().unwrap()) && live.len() == 2,
        "the stopped replica {holder:?} removed its lease: {live:?}"
    );
}
