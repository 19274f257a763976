//! What an operator writes: the config file's raw shape, as serde reads it from TOML or JSON, before
//! anything is checked. Unknown fields are refused here; every other rule is the compiling modules'
//! ([`super::backends`], [`super::upstreams`], …). The two enums an operator names (`api`, `tls`) are
//! also what the compiled settings carry.

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) listen: Option<String>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) max_concurrent: Option<usize>,
    #[serde(default)]
    pub(super) backends: Vec<RawBackend>,
    #[serde(default)]
    pub(super) upstreams: Vec<RawUpstream>,
    pub(super) store: Option<RawStore>,
    pub(super) api: Option<RawApi>,
    pub(super) filter: Option<RawFilter>,
    pub(super) alerts: Option<RawAlerts>,
    #[serde(default)]
    pub(super) webhooks: Vec<RawWebhook>,
    pub(super) limits: Option<RawLimits>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pub(super) max_request_bytes: Option<usize>,
    pub(super) max_backend_answer_bytes: Option<usize>,
    pub(super) max_retry_answer_bytes: Option<usize>,
    pub(super) max_pending_checks: Option<u64>,
    pub(super) max_queued_events: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    pub(super) url: Option<String>,
    pub(super) url_env: Option<String>,
    pub(super) retention_days: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApi {
    pub(super) token_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFilter {
    pub(super) token_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlerts {
    pub(super) slack_webhook_url_env: Option<String>,
    pub(super) smtp: Option<RawSmtp>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSmtp {
    pub(super) host: String,
    pub(super) port: Option<u16>,
    pub(super) from: String,
    #[serde(default)]
    pub(super) to: Vec<String>,
    pub(super) tls: Option<SmtpTls>,
    pub(super) username: Option<String>,
    pub(super) password_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    pub(super) url: String,
    pub(super) secret_env: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBackend {
    pub(super) name: Option<String>,
    pub(super) api: Api,
    pub(super) base_url: String,
    pub(super) api_key_env: Option<String>,
    #[serde(default)]
    pub(super) models: Vec<String>,
    pub(super) max_tokens: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstream {
    pub(super) name: Option<String>,
    pub(super) authority: String,
    pub(super) base_url: String,
    pub(super) timeout_ms: Option<u64>,
    /// The env var holding the upstream's own key, which a retry carries in place of the caller's
    /// credentials (a Bedrock API key: the caller's SigV4 signature cannot sign a changed body).
    pub(super) api_key_env: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST {base_url}/v1/chat/completions`, any OpenAI-compatible server.
    Openai,
    /// `POST {base_url}/v1/messages`, the Anthropic Messages API.
    Anthropic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SmtpTls {
    /// Plain connection upgraded with STARTTLS (port 587); the default.
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
    /// No TLS at all: only for a relay on loopback.
    None,
}
