//! Set-up for the results tests: a database of each kind (a SQLite file in a temp dir; a fresh database
//! on the PostgreSQL server named by `LIVECHECK_TEST_POSTGRES_URL`, else on a throwaway server started
//! here with `postgres.sh`), a whole sidecar on it, and the doubles its alerts and events go to.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use livecheck_judge::{serve, App, Settings};
use livecheck_wire::{Alert, BackgroundCheck, CheckResult, Mode, Outcome, Stage, TurnReport};
use serde_json::Value;
use sqlx::{Connection, Row};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::doubles::BackendDouble;

pub const TOKEN: &str = "op-token-7f3a9c";
/// The filter token (`[filter] token_env`), as the filter sends it in `x-livecheck-token`.
pub const FILTER_TOKEN: &str = "filter-token-5d21b8e4";
pub const HOOK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const POSTGRES_ENV: &str = "LIVECHECK_TEST_POSTGRES_URL";

/// A throwaway PostgreSQL server this test process started; stopped when dropped.
struct PgServer {
    dir: tempfile::TempDir,
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script("postgres.sh"))
            .arg("stop")
            .arg(self.dir.path().join("pg"))
            .status();
    }
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(name)
}

/// A database for one test.
pub struct Db {
    pub kind: &'static str,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    _server: Option<PgServer>,
}

impl Db {
    pub async fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("results.sqlite").display());
        Self {
            kind: "sqlite",
            url,
            _dir: Some(dir),
            _server: None,
        }
    }

    /// A fresh database on the test server. Fails (never skips) when the server cannot be reached.
    pub async fn postgres() -> Self {
        let (base, server) = match std::env::var(POSTGRES_ENV) {
            Ok(url) if !url.is_empty() => (url, None),
            _ => {
                let dir = tempfile::Builder::new()
                    .prefix("livecheck-pg-")
                    .tempdir_in("/tmp")
                    .unwrap();
                let mut perms = std::fs::metadata(dir.path()).unwrap().permissions();
                std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
                std::fs::set_permissions(dir.path(), perms).unwrap();
                let out = Command::new("bash")
                    .arg(script("postgres.sh"))
                    .arg("start")
                    .arg(dir.path().join("pg"))
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "cannot start PostgreSQL for the test (set {POSTGRES_ENV} or install it: make postgres-tools): {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
                (url, Some(PgServer { dir }))
            }
        };
        let mut admin = sqlx::postgres::PgConnection::connect(&base)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {base} is not reachable: {e}"));
        let name = format!(
            "lc_{}",
            livecheck_judge::ids::time_ordered("").get(12..28).unwrap()
        );
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
        let (prefix, _) = base.rsplit_once('/').unwrap();
        Self {
            kind: "postgres",
            url: format!("{prefix}/{name}"),
            _dir: None,
            _server: server,
        }
    }

    /// Every text value in every row of every table, one string per row.
    pub async fn dump(&self) -> Vec<String> {
        livecheck_judge::store::Store::open(&self.url)
            .await
            .unwrap();
        let mut out = Vec::new();
        for table in [
            "turns",
            "results",
            "pending_checks",
            "alert_state",
            "alert_rules",
            "event_outbox",
        ] {
            for row in self.rows(&format!("SELECT * FROM {table}")).await {
                out.push(format!("{table}: {}", row.join(" | ")));
            }
        }
        out
    }

    /// A query's rows, every column as text.
    pub async fn rows(&self, sql: &str) -> Vec<Vec<String>> {
        sqlx::any::install_default_drivers();
        let mut conn = sqlx::AnyConnection::connect(&self.url).await.unwrap();
        let rows = sqlx::query(sql).fetch_all(&mut conn).await.unwrap();
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| {
                        row.try_get::<Option<String>, _>(i)
                            .map(|v| v.unwrap_or_default())
                            .or_else(|_| row.try_get::<Option<i64>, _>(i).map(|v| format!("{v:?}")))
                            .or_else(|_| row.try_get::<Option<f64>, _>(i).map(|v| format!("{v:?}")))
                            .unwrap()
                    })
                    .collect()
            })
            .collect()
    }

    pub async fn execute(&self, sql: &str) {
        sqlx::any::install_default_drivers();
        let mut conn = sqlx::AnyConnection::connect(&self.url).await.unwrap();
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }

    /// Makes the database a sidecar of the first release left: migration 0001 applied and recorded,
    /// nothing after it (the SQLite file is created).
    pub async fn at_migration_0001(&self) {
        sqlx::any::install_default_drivers();
        let url = if self.kind == "sqlite" {
            format!("{}?mode=rwc", self.url)
        } else {
            self.url.clone()
        };
        let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
        sqlx::raw_sql(
            "CREATE TABLE livecheck_migrations (\
             version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::raw_sql(include_str!("../../migrations/0001_results.sql"))
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO livecheck_migrations (version, name, applied_at) VALUES (1, 'results', 1)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
    }
}

/// What a sidecar under test is configured with besides its store.
#[derive(Default, Clone)]
pub struct Extras {
    pub backend: Option<String>,
    pub token: bool,
    /// Require the filter token ([`FILTER_TOKEN`]) on the filter's endpoints.
    pub filter_token: bool,
    /// The base URL of the upstream that `/v1/retry` asks for the authority `api.example.com`.
    pub upstream: Option<String>,
    pub slack: Option<String>,
    pub smtp_port: Option<u16>,
    pub webhooks: Vec<String>,
    /// The backend's own key (`api_key_env`).
    pub fallback_key: Option<String>,
    /// The body of a `[limits]` section.
    pub limits: Option<String>,
}

/// The whole sidecar (store, workers, HTTP) in process, with short worker intervals. Its HTTP
/// API is reached through [`Http`] (`sidecar.url`, `sidecar.all_checks(…)`).
pub struct Sidecar {
    pub app: Arc<App>,
    http: Http,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl std::ops::Deref for Sidecar {
    type Target = Http;

    fn deref(&self) -> &Http {
        &self.http
    }
}

/// A sidecar's HTTP API as its callers reach it: one in this process, or a process of its own.
pub struct Http {
    pub url: String,
    client: reqwest::Client,
}

pub fn backend_config(double: &BackendDouble, fallback: bool) -> String {
    format!(
        "[[backends]]\nname = \"double\"\napi = \"{}\"\nbase_url = \"{}\"\nmodels = [\"judge-*\"]\n{}",
        double.vendor.api(),
        double.base_url(),
        if fallback {
            "api_key_env = \"LC_TEST_FALLBACK\"\n"
        } else {
            ""
        }
    )
}

/// The config file of a sidecar with `extras`, its store given by the `[store]` table's lines.
pub fn config_toml(store: &str, extras: &Extras) -> String {
    let mut config = format!("timeout_ms = 3000\n[store]\n{store}");
    if extras.token {
        config.push_str("[api]\ntoken_env = \"LC_TEST_TOKEN\"\n");
    }
    if extras.filter_token {
        config.push_str("[filter]\ntoken_env = \"LC_TEST_FILTER_TOKEN\"\n");
    }
    if let Some(base_url) = &extras.upstream {
        config.push_str(&format!(
            "[[upstreams]]\nauthority = \"api.example.com\"\nbase_url = \"{base_url}\"\n"
        ));
    }
    if extras.slack.is_some() || extras.smtp_port.is_some() {
        config.push_str("[alerts]\n");
        if extras.slack.is_some() {
            config.push_str("slack_webhook_url_env = \"LC_TEST_SLACK\"\n");
        }
        if let Some(port) = extras.smtp_port {
            config.push_str(&format!(
                    "[alerts.smtp]\nhost = \"127.0.0.1\"\nport = {port}\ntls = \"none\"\nfrom = \"livecheck@example.test\"\nto = [\"ops@example.test\", \"oncall@example.test\"]\n"
                ));
        }
    }
    for url in &extras.webhooks {
        config.push_str(&format!(
            "[[webhooks]]\nurl = \"{url}\"\nsecret_env = \"LC_TEST_HOOK_SECRET\"\n"
        ));
    }
    config.push_str(extras.backend.as_deref().unwrap_or(
        "[[backends]]\napi = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\nmodels = [\"*\"]\n",
    ));
    if let Some(limits) = &extras.limits {
        config.push_str(&format!("[limits]\n{limits}\n"));
    }
    config
}

/// The environment [`config_toml`]'s `*_env` settings name, with their values.
pub fn config_env(extras: &Extras) -> Vec<(&'static str, String)> {
    let mut vars = vec![
        ("LC_TEST_TOKEN", TOKEN.to_owned()),
        ("LC_TEST_FILTER_TOKEN", FILTER_TOKEN.to_owned()),
        ("LC_TEST_HOOK_SECRET", HOOK_SECRET.to_owned()),
    ];
    if let Some(slack) = &extras.slack {
        vars.push(("LC_TEST_SLACK", slack.clone()));
    }
    if let Some(key) = &extras.fallback_key {
        vars.push(("LC_TEST_FALLBACK", key.clone()));
    }
    vars
}

impl Sidecar {
    pub async fn start(db: &Db, extras: &Extras) -> Self {
        let config = config_toml(&format!("url = \"{}\"\n", db.url), extras);
        let vars = config_env(extras);
        let env = move |var: &str| {
            vars.iter()
                .find(|(name, _)| *name == var)
                .map(|(_, value)| value.clone())
        };
        let mut settings = Settings::from_toml(&config, &env).unwrap();
        settings.timing.poll_every = Duration::from_millis(100);
        settings.timing.event_retry_base = Duration::from_millis(100);
        settings.timing.event_retry_max = Duration::from_millis(400);
        settings.timing.alert_retry = Duration::from_millis(100);
        // A stopped sidecar's work goes to the next one a second later, not 15.
        settings.timing.replica_lease = Duration::from_secs(1);
        let app = App::start(settings).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, Arc::clone(&app), async move {
            let _ = rx.await;
        }));
        Self {
            app,
            http: Http::new(url),
            shutdown: Some(tx),
        }
    }

    /// Stops the workers and the server and closes the store, as a process exit would.
    pub async fn stop(mut self) {
        self.app.stop();
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(store) = self.app.store() {
            store.close().await;
        }
    }
}

impl Http {
    pub fn new(url: String) -> Self {
        Self {
            url,
            client: reqwest::Client::new(),
        }
    }

    pub async fn post_report_with(&self, body: &str, headers: &[(&str, &str)]) -> (u16, Value) {
        self.post_with("/v1/results", body, headers).await
    }

    /// Posts a raw body to `path`; returns the status and the body as JSON (null when it is not).
    pub async fn post_with(
        &self,
        path: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut req = self
            .client
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .body(body.to_owned());
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn post_report(&self, report: &TurnReport) -> (u16, Value) {
        self.post_report_with(&serde_json::to_string(report).unwrap(), &[])
            .await
    }

    /// A request to the operator API with the right token.
    pub async fn api(&self, method: reqwest::Method, path: &str) -> (u16, Value) {
        self.api_with(method, path, Some(TOKEN)).await
    }

    pub async fn api_with(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
    ) -> (u16, Value) {
        let mut req = self.client.request(method, format!("{}{path}", self.url));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Every result of a turn, following the cursor.
    pub async fn all_checks(&self, id: &str) -> Vec<Value> {
        let mut items = Vec::new();
        let mut cursor = String::new();
        loop {
            let (status, page) = self
                .api(
                    reqwest::Method::GET,
                    &format!("/responses/{id}/checks?limit=100&cursor={cursor}"),
                )
                .await;
            assert_eq!(status, 200, "{page}");
            items.extend(page["items"].as_array().unwrap().iter().cloned());
            match page["next_cursor"].as_str() {
                Some(next) => cursor = next.to_owned(),
                None => return items,
            }
        }
    }
}

/// A result of a rule check.
pub fn result(name: &str, outcome: Outcome, attempt: u32) -> CheckResult {
    CheckResult {
        name: name.into(),
        stage: Stage::Output,
        kind: "not_contains".into(),
        mode: Mode::Block,
        attempt,
        outcome,
        score: None,
        reason: "The answer contains text it had to avoid.".into(),
        judge_model: None,
        passed_on_error: false,
        created_at_ms: livecheck_judge::ids::now_ms() as u64,
        alert: None,
        tool: None,
        call: None,
    }
}

/// A tool-call check's result on call `call` of the answer, for tool `tool`.
pub fn tool_result(name: &str, outcome: Outcome, tool: &str, call: u32) -> CheckResult {
    CheckResult {
        kind: "tool_check".into(),
        reason: "No billing information in email.".into(),
        judge_model: Some("judge-model".into()),
        tool: Some(tool.into()),
        call: Some(call),
        ..result(name, outcome, 1)
    }
}

pub fn alerting(mut r: CheckResult, failure_rate: f64, over_last: u32) -> CheckResult {
    r.alert = Some(Alert {
        failure_rate,
        over_last,
    });
    r
}

pub fn turn_id() -> String {
    livecheck_judge::ids::time_ordered("lc_")
}

pub fn report(turn_id: &str, agent: &str, results: Vec<CheckResult>) -> TurnReport {
    TurnReport {
        turn_id: turn_id.into(),
        response_id: None,
        agent: agent.into(),
        version: "1".into(),
        person: None,
        results,
        background: Vec::new(),
    }
}

pub fn background(name: &str, judge: livecheck_wire::JudgeRequest) -> BackgroundCheck {
    BackgroundCheck {
        name: name.into(),
        judge,
        alert: None,
    }
}

/// Waits until `done` holds (at most 10 s).
pub async fn wait_until(what: &str, done: impl AsyncFnMut() -> bool) {
    wait_within(Duration::from_secs(10), what, done).await
}

/// Waits until `done` holds, at most `within`.
pub async fn wait_within(within: Duration, what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

type Received = Arc<Mutex<Vec<(HeaderMap, String)>>>;

/// An HTTP receiver double (a Slack incoming webhook, a webhook endpoint): records every POST.
#[derive(Clone, Default)]
pub struct Recorder {
    pub seen: Received,
    pub url: String,
}

impl Recorder {
    pub async fn start() -> Self {
        Self::answering_after(Duration::ZERO).await
    }

    /// A receiver that records each POST when it arrives and answers it `delay` later, as a
    /// receiver doing its own work would.
    pub async fn answering_after(delay: Duration) -> Self {
        let seen: Received = Arc::default();
        let app = Router::new()
            .route(
                "/hook",
                post(
                    move |State(seen): State<Received>, headers: HeaderMap, body: Bytes| async move {
                        seen.lock()
                            .unwrap()
                            .push((headers, String::from_utf8_lossy(&body).into_owned()));
                        tokio::time::sleep(delay).await;
                        StatusCode::OK
                    },
                ),
            )
            .with_state(Arc::clone(&seen));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { seen, url }
    }

    pub fn bodies(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }
}

/// A minimal SMTP server double (no TLS, no auth): accepts every mail and keeps its DATA.
#[derive(Clone, Default)]
pub struct SmtpDouble {
    pub mails: Arc<Mutex<Vec<String>>>,
    pub port: u16,
}

impl SmtpDouble {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mails: Arc<Mutex<Vec<String>>> = Arc::default();
        let kept = Arc::clone(&mails);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let kept = Arc::clone(&kept);
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut lines = BufReader::new(read).lines();
                    write.write_all(b"220 double ESMTP\r\n").await.unwrap();
                    let mut data: Option<String> = None;
                    while let Ok(Some(line)) = lines.next_line().await {
                        if let Some(body) = data.as_mut() {
                            if line == "." {
                                kept.lock().unwrap().push(data.take().unwrap());
                                write.write_all(b"250 2.0.0 queued\r\n").await.unwrap();
                            } else {
                                body.push_str(&line);
                                body.push('\n');
                            }
                            continue;
                        }
                        let verb = line
                            .split_whitespace()
                            .next()
                            .unwrap_or("")
                            .to_ascii_uppercase();
                        let reply: &[u8] = match verb.as_str() {
                            "EHLO" => b"250-double\r\n250 8BITMIME\r\n",
                            "HELO" | "MAIL" | "RCPT" | "RSET" | "NOOP" => b"250 2.0.0 ok\r\n",
                            "DATA" => {
                                data = Some(String::new());
                                b"354 go ahead\r\n"
                            }
                            "QUIT" => {
                                let _ = write.write_all(b"221 2.0.0 bye\r\n").await;
                                return;
                            }
                            _ => b"502 5.5.2 not implemented\r\n",
                        };
                        write.write_all(reply).await.unwrap();
                    }
                });
            }
        });
        Self { mails, port }
    }

    pub fn mails(&self) -> Vec<String> {
        self.mails.lock().unwrap().clone()
    }
}

/// The Python webhook receiver (`webhook_receiver.py`), verifying signatures; killed when dropped.
pub struct PyReceiver {
    child: Child,
    pub url: String,
}

impl PyReceiver {
    pub fn start(fail_first: u32) -> Self {
        let mut child = Command::new("python3")
            .arg(script("webhook_receiver.py"))
            .arg(HOOK_SECRET)
            .arg("--fail-first")
            .arg(fail_first.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut port = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut port,
        )
        .unwrap();
        Self {
            child,
            url: format!("http://127.0.0.1:{}/", port.trim()),
        }
    }

    pub async fn log(&self) -> Value {
        let text = reqwest::get(format!("{}log", self.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

impl Drop for PyReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Captures every log line of this process (installed once; the buffer is shared by the tests of
/// the process).
pub fn capture_logs() -> Arc<Mutex<String>> {
    static LOGS: std::sync::OnceLock<Arc<Mutex<String>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs: Arc<Mutex<String>> = Arc::default();
        let sink = Arc::clone(&logs);
        let _ = tracing_subscriber::fmt()
            .with_env_filter("debug")
            .with_ansi(false)
            .with_writer(move || LogSink(Arc::clone(&sink)))
            .try_init();
        logs
    })
    .clone()
}

struct LogSink(Arc<Mutex<String>>);

impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap()
            .push_str(&String::from_utf8_lossy(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
