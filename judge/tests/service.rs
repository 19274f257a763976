//! The `livecheck-judge` binary itself: startup errors, what it logs, and graceful shutdown on SIGTERM.

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
use common::{config_for, output, tool_check, KEY};
use livecheck_judge::Settings;
use livecheck_wire::{JudgeVerdict, Outcome};

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

#[test]
fn a_bad_config_stops_startup_with_one_line_per_problem() {
    let path = temp_file(
        "bad.toml",
        "listen = \"nowhere\"\n[[backends]]\nname = \"x\"\napi = \"openai\"\nbase_url = \"http://h/v1\"\nmodels = [\"m\"]\n",
    );
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .env_remove("LIVECHECK_JUDGE_LISTEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_logs_no_key_or_text_and_finishes_calls_in_flight_on_sigterm() {
    let double =
        BackendDouble::start(Vendor::OpenAi, Answer::Slow(Duration::from_millis(600))).await;
    let config = temp_file("ok.toml", &config_for(&double, 5_000));
    let log = temp_file("stderr.log", "");
    let port = free_port();
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .env("LIVECHECK_JUDGE_LISTEN", format!("127.0.0.1:{port}"))
        // Everything every crate logs, not only the default `info`.
        .env("RUST_LOG", "trace")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
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
