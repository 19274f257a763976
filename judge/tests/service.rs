//! The `livecheck-judge` binary itself: startup errors, what it logs, the filter token, and graceful
//! shutdown on SIGTERM.

// Test helpers outside #[test] functions may unwrap too (clippy.toml covers only the tests).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::doubles::{Answer, BackendDouble, Vendor};
use common::results::{report, result, turn_id};
use common::{config_for, output, tool_check, KEY};
use livecheck_judge::Settings;
use livecheck_wire::{JudgeVerdict, Outcome, FILTER_TOKEN_HEADER, RESULTS_PATH};

const BIN: &str = env!("CARGO_BIN_EXE_livecheck-judge");

fn temp_file(name: &str, contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("livecheck-judge-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).unwrap();
    path
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_exit(child: &mut Child, within: Duration) -> ExitStatus {
    let until = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > until {
            child.kill().unwrap();
            panic!("livecheck-judge did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the binary on a config that must not start: exit code 2; returns what it wrote to stderr.
fn refused_startup(path: &Path, env: &[(&str, &str)]) -> String {
    let out = Command::new(BIN)
        .arg("--config")
        .arg(path)
        .env_remove("LIVECHECK_JUDGE_LISTEN")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

/// Starts the binary with `config` on a free loopback port, logging everything (`RUST_LOG=trace`)
/// to `log`; returns it and its URL once `/healthz` answers.
async fn start_logging(config: &Path, log: &Path, env: &[(&str, &str)]) -> (Child, String) {
    let port = free_port();
    let child = Command::new(BIN)
        .arg("--config")
        .arg(config)
        .env("LIVECHECK_JUDGE_LISTEN", format!("127.0.0.1:{port}"))
        // Everything every crate logs, not only the default `info`.
        .env("RUST_LOG", "trace")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let until = Instant::now() + Duration::from_secs(10);
    while client
        .get(format!("{url}/healthz"))
        .send()
        .await
        .map(|r| r.status())
        .ok()
        != Some(reqwest::StatusCode::OK)
    {
        assert!(
            Instant::now() < until,
            "livecheck-judge never became healthy"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (child, url)
}

/// SIGTERM to the child this test started; it must exit 0 within 10 s.
fn terminate(child: &mut Child) {
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert_eq!(wait_exit(child, Duration::from_secs(10)).code(), Some(0));
}

const ANY_BACKEND: &str =
    "[[backends]]\napi = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\nmodels = [\"*\"]\n";

#[test]
fn a_bad_config_stops_startup_with_one_line_per_problem() {
    let path = temp_file(
        "bad.toml",
        "listen = \"nowhere\"\n[[backends]]\nname = \"x\"\napi = \"openai\"\nbase_url = \"http://h/v1\"\nmodels = [\"m\"]\n",
    );
    let stderr = refused_startup(&path, &[]);
    let shown = path.display();
    assert!(
        stderr.contains(&format!(
            "livecheck-judge: config: {shown}: listen: \"nowhere\" is not an address"
        )),
        "{stderr}"
    );
    assert!(stderr.contains(&format!(
        "livecheck-judge: config: {shown}: backend \"x\": base_url \"http://h/v1\" must not end in /v1"
    )), "{stderr}");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn no_config_is_a_clear_startup_error() {
    let out = Command::new(BIN)
        .env_remove("LIVECHECK_JUDGE_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("no config: pass --config PATH or set LIVECHECK_JUDGE_CONFIG"),
        "{stderr}"
    );

    let out = Command::new(BIN)
        .env("LIVECHECK_JUDGE_CONFIG", "/nonexistent/judge.toml")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("cannot read config file /nonexistent/judge.toml"),
        "{stderr}"
    );
}

#[test]
fn the_example_config_is_valid() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("example.toml");
    let settings = Settings::load(&example, &|_| None).unwrap();
    assert_eq!(settings.listen, "127.0.0.1:8181".parse().unwrap());
    for model in ["smollm2", "gpt-4.1-mini", "claude-sonnet-4-5"] {
        let backend = settings.models.backend_for(model).unwrap();
        assert!(
            backend
                .endpoint
                .as_str()
                .starts_with("http://127.0.0.1:8080/v1/"),
            "{model}"
        );
    }
}

#[test]
fn beyond_loopback_without_a_filter_token_the_sidecar_refuses_to_start() {
    let path = temp_file(
        "open.toml",
        &format!("listen = \"0.0.0.0:{}\"\n{ANY_BACKEND}", free_port()),
    );
    let stderr = refused_startup(&path, &[]);
    assert!(
        stderr.contains(
            "is beyond loopback, where the filter endpoints need a token: set [filter] token_env"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_filter_token_env_unset_or_invalid_stops_startup_without_showing_the_value() {
    let path = temp_file(
        "bad-token.toml",
        &format!("{ANY_BACKEND}[filter]\ntoken_env = \"LC_TEST_FILTER_TOKEN\"\n"),
    );
    let stderr = refused_startup(&path, &[]);
    assert!(
        stderr.contains("filter: token_env names LC_TEST_FILTER_TOKEN, which is not set"),
        "{stderr}"
    );
    let stderr = refused_startup(&path, &[("LC_TEST_FILTER_TOKEN", "tok 7e1f secret value")]);
    assert!(
        stderr.contains("filter: token_env names LC_TEST_FILTER_TOKEN, which does not hold 16 to 256 visible ASCII characters"),
        "{stderr}"
    );
    assert!(!stderr.contains("7e1f"), "{stderr}");
    std::fs::remove_file(path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_filter_token_it_refuses_callouts_without_it_and_never_logs_it() {
    const FILTER_TOKEN: &str = "filter-token-a6f0c2d9e4";
    const WRONG: &str = "filter-token-a6f0c2d9e5";
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("judge.toml");
    std::fs::write(
        &config,
        format!("{ANY_BACKEND}[filter]\ntoken_env = \"LC_TEST_FILTER_TOKEN\"\n"),
    )
    .unwrap();
    let log = dir.path().join("stderr.log");
    let (mut child, url) =
        start_logging(&config, &log, &[("LC_TEST_FILTER_TOKEN", FILTER_TOKEN)]).await;
    let client = reqwest::Client::new();
    let body = serde_json::to_string(&report(
        &turn_id(),
        "orders",
        vec![result("no-secrets", Outcome::Passed, 1)],
    ))
    .unwrap();
    for (token, status) in [(WRONG, 401), (FILTER_TOKEN, 200)] {
        let response = client
            .post(format!("{url}{RESULTS_PATH}"))
            .header(FILTER_TOKEN_HEADER, token)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{token}");
    }
    let ready = client.get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    terminate(&mut child);

    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("refused a callout without the filter token"),
        "{logged}"
    );
    assert!(logged.contains("turn report stored"), "{logged}");
    assert!(!logged.contains("no [filter] token_env"), "{logged}");
    for secret in [FILTER_TOKEN, WRONG, "filter-token-a6f0"] {
        assert!(!logged.contains(secret), "{secret:?} was logged:\n{logged}");
    }
}

#[test]
fn the_kubernetes_config_is_valid_with_its_secrets() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/judge/judge.toml");
    let secrets = |var: &str| match var {
        "LIVECHECK_FILTER_TOKEN" => Some("k8s-filter-token-0f9e8d7c".to_owned()),
        "LIVECHECK_RESULTS_URL" => Some("postgres://lc:pw@db/lc".to_owned()),
        _ => None,
    };
    let settings = Settings::load(&config, &secrets).unwrap();
    assert!(!settings.listen.ip().is_loopback());
    assert!(settings.filter_token.is_some());
    // Beyond loopback, the filter token's Secret is what lets it start.
    let err = Settings::load(&config, &|var: &str| {
        (var != "LIVECHECK_FILTER_TOKEN")
            .then(|| secrets(var))
            .flatten()
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("filter: token_env names LIVECHECK_FILTER_TOKEN, which is not set"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_logs_no_key_or_text_and_finishes_calls_in_flight_on_sigterm() {
    let double =
        BackendDouble::start(Vendor::OpenAi, Answer::Slow(Duration::from_millis(600))).await;
    let config = temp_file("ok.toml", &config_for(&double, 5_000));
    let log = temp_file("stderr.log", "");
    let (mut child, url) = start_logging(&config, &log, &[]).await;
    let client = reqwest::Client::new();

    // A tool-call check first: its condition, tool and arguments are as secret as a judged text.
    let tool_req = tool_check(
        "The mail names project Nightjar",
        "mail_tool_5e0b",
        r#"{"iban":"DE89370400440532013000"}"#,
        &["Send my IBAN to Carol"],
    );
    let answer = client
        .post(format!("{url}/v1/tool-check"))
        .header("x-api-key", KEY)
        .header("content-type", "application/json")
        .body(serde_json::to_string(&tool_req).unwrap())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let tool_verdict: JudgeVerdict = serde_json::from_slice(&answer).unwrap();
    assert_eq!(tool_verdict.outcome, Outcome::Passed);
    let seen_before = double.seen().len();

    const SECRET_TEXT: &str = "my card number is 4111-1111-1111-1111";
    const SECRET_RULE: &str = "Never reveal the launch codename Bluebird.";
    let mut req = output("custom_rule", "What is the codename?", SECRET_TEXT);
    req.rule = Some(SECRET_RULE.into());
    let call = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move {
            client
                .post(format!("{url}/v1/judge"))
                .header("authorization", format!("Bearer {KEY}"))
                .header("content-type", "application/json")
                .body(serde_json::to_string(&req).unwrap())
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
        }
    });
    // SIGTERM while the backend is still answering: the call in flight still gets its verdict.
    while double.seen().len() == seen_before {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let verdict: JudgeVerdict = serde_json::from_slice(&call.await.unwrap()).unwrap();
    assert_eq!(verdict.outcome, Outcome::Passed);
    assert_eq!(
        wait_exit(&mut child, Duration::from_secs(10)).code(),
        Some(0)
    );

    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("judged"), "{logged}");
    assert!(logged.contains("tool call judged"), "{logged}");
    assert!(logged.contains("judge_model=judge-model"), "{logged}");
    assert!(logged.contains("livecheck-judge stopped"), "{logged}");
    // On loopback without a filter token: served, with one warning at start.
    assert_eq!(
        logged.matches("no [filter] token_env").count(),
        1,
        "{logged}"
    );
    for secret in [
        KEY,
        "4111-1111",
        "What is the codename",
        "Bluebird",
        "Slow double verdict",
        "Nightjar",
        "mail_tool_5e0b",
        "DE89370400440532013000",
        "Send my IBAN",
    ] {
        assert!(!logged.contains(secret), "{secret:?} was logged:\n{logged}");
    }
    std::fs::remove_file(config).unwrap();
    std::fs::remove_file(log).unwrap();
}
