//! Set-up shared by the sidecar's tests: a judge under test, in process, configured against backend
//! doubles; and the requests the filter would send it.

#![allow(dead_code)]

pub mod doubles;
pub mod results;

/// Runs a test body once on SQLite and once on PostgreSQL, as `<name>::sqlite` and `<name>::postgres`.
#[macro_export]
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(super::Db::sqlite().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(super::Db::postgres().await).await
            }
        }
    )*};
}

use std::sync::Arc;

use livecheck_judge::{serve, App, Settings};
use livecheck_wire::{JudgeRequest, JudgeVerdict, Stage, ToolCheckRequest, TOOL_CHECK_PATH};
use serde_json::Value;

use doubles::BackendDouble;

pub const KEY: &str = "sk-turn-key-0d6c1e";

/// The config of a judge whose backend is `double`, serving every model but `nope-*`.
pub fn config_for(double: &BackendDouble, timeout_ms: u64) -> String {
    format!(
        r#"
        timeout_ms = {timeout_ms}
        [[backends]]
        name = "double"
        api = "{api}"
        base_url = "{base}"
        models = ["judge-model", "judge-*"]
        "#,
        api = double.vendor.api(),
        base = double.base_url()
    )
}

pub struct Judge {
    pub url: String,
    client: reqwest::Client,
}

impl Judge {
    pub async fn start(config_toml: &str) -> Self {
        Self::start_with_env(config_toml, &|_| None).await
    }

    pub async fn start_with_env(config_toml: &str, env: &dyn Fn(&str) -> Option<String>) -> Self {
        let settings = Settings::from_toml(config_toml, env).unwrap();
        let app: Arc<App> = App::new(settings).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(serve(listener, app, std::future::pending()));
        Self {
            url,
            client: reqwest::Client::new(),
        }
    }

    /// Posts a raw body to `/v1/judge`; returns the status and the body as JSON.
    pub async fn post_raw(&self, body: &str, headers: &[(&str, &str)]) -> (u16, Value) {
        self.post_to("/v1/judge", body, headers).await
    }

    /// Posts a raw body to `path`; returns the status and the body, which must be JSON.
    pub async fn post_to(&self, path: &str, body: &str, headers: &[(&str, &str)]) -> (u16, Value) {
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
        let body = resp.bytes().await.unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    /// Posts a judge request with the turn's key as an OpenAI-style bearer token.
    pub async fn judge(&self, req: &JudgeRequest) -> JudgeVerdict {
        let auth = format!("Bearer {KEY}");
        self.judge_with(req, &[("authorization", &auth)]).await
    }

    pub async fn judge_with(&self, req: &JudgeRequest, headers: &[(&str, &str)]) -> JudgeVerdict {
        let (status, body) = self
            .post_raw(&serde_json::to_string(req).unwrap(), headers)
            .await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body).unwrap()
    }
}

impl Judge {
    /// Posts a tool-call check with the turn's key as an OpenAI-style bearer token.
    pub async fn tool_check(&self, req: &ToolCheckRequest) -> JudgeVerdict {
        let auth = format!("Bearer {KEY}");
        self.tool_check_with(req, &[("authorization", &auth)]).await
    }

    pub async fn tool_check_with(
        &self,
        req: &ToolCheckRequest,
        headers: &[(&str, &str)],
    ) -> JudgeVerdict {
        let (status, body) = self
            .post_to(
                TOOL_CHECK_PATH,
                &serde_json::to_string(req).unwrap(),
                headers,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body).unwrap()
    }
}

/// A tool-call check of `condition` on a call of `tool` with `arguments`, and the user's intent.
pub fn tool_check(
    condition: &str,
    tool: &str,
    arguments: &str,
    intent: &[&str],
) -> ToolCheckRequest {
    ToolCheckRequest {
        condition: condition.into(),
        tool: tool.into(),
        arguments: arguments.into(),
        intent: intent.iter().map(|m| (*m).to_owned()).collect(),
        judge_model: "judge-model".into(),
    }
}

/// Every text between this call's `<<<NAME tag>>>` and `<<<END NAME tag>>>` markers, in order.
pub fn sections(user: &str, name: &str, nonce: &str) -> Vec<String> {
    let open = format!("<<<{name} {nonce}>>>\n");
    let close = format!("\n<<<END {name} {nonce}>>>");
    let mut out = Vec::new();
    let mut rest = user;
    while let Some(at) = rest.find(&open) {
        let after = &rest[at + open.len()..];
        let end = after.find(&close).unwrap();
        out.push(after[..end].to_owned());
        rest = &after[end + close.len()..];
    }
    out
}

/// An output check on an answer to a question.
pub fn output(kind: &str, question: &str, answer: &str) -> JudgeRequest {
    JudgeRequest {
        stage: Stage::Output,
        kind: kind.into(),
        rule: None,
        text: answer.into(),
        question: Some(question.into()),
        judge_model: "judge-model".into(),
    }
}

/// An input check on what the caller wrote.
pub fn input(kind: &str, rule: Option<&str>, text: &str) -> JudgeRequest {
    JudgeRequest {
        stage: Stage::Input,
        kind: kind.into(),
        rule: rule.map(Into::into),
        text: text.into(),
        question: None,
        judge_model: "judge-model".into(),
    }
}

/// The tag of this call's markers, read back from the system prompt the backend received.
pub fn nonce_of(system: &str) -> String {
    let at = system.find("secret tag ").unwrap() + "secret tag ".len();
    system[at..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect()
}

/// The text between this call's `<<<NAME tag>>>` and `<<<END NAME tag>>>` markers.
pub fn between<'a>(user: &'a str, name: &str, nonce: &str) -> Option<&'a str> {
    let open = format!("<<<{name} {nonce}>>>\n");
    let close = format!("\n<<<END {name} {nonce}>>>");
    let start = user.find(&open)? + open.len();
    let end = user[start..].find(&close)? + start;
    Some(&user[start..end])
}
