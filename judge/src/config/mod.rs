//! What an operator writes (a TOML or JSON file, plus a few env vars), and the validated settings the
//! service runs on. Raw and compiled forms are different types: a config either compiles whole, with
//! every problem listed, or the service does not start.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use livecheck_wire::{valid_token, FILTER_TOKEN_HEADER};
use reqwest::Url;
use serde::Deserialize;

/// The file the service reads when `--config` is not given.
pub const CONFIG_ENV: &str = "LIVECHECK_JUDGE_CONFIG";
/// Env overrides of the file's top-level settings.
pub const LISTEN_ENV: &str = "LIVECHECK_JUDGE_LISTEN";
pub const TIMEOUT_ENV: &str = "LIVECHECK_JUDGE_TIMEOUT_MS";
pub const MAX_CONCURRENT_ENV: &str = "LIVECHECK_JUDGE_MAX_CONCURRENT";

const DEFAULT_LISTEN: &str = "127.0.0.1:8181";
/// Below the filter's default per-check timeout (10 s), so the filter hears `errored` from the sidecar
/// rather than timing the callout out itself.
const DEFAULT_TIMEOUT_MS: u64 = 8_000;
const MAX_TIMEOUT_MS: u64 = 600_000;
const DEFAULT_MAX_CONCURRENT: usize = 32;
const DEFAULT_MAX_TOKENS: u32 = 512;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    timeout_ms: Option<u64>,
    max_concurrent: Option<usize>,
    #[serde(default)]
    backends: Vec<RawBackend>,
    #[serde(default)]
    upstreams: Vec<RawUpstream>,
    store: Option<RawStore>,
    api: Option<RawApi>,
    filter: Option<RawFilter>,
    alerts: Option<RawAlerts>,
    #[serde(default)]
    webhooks: Vec<RawWebhook>,
    limits: Option<RawLimits>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_request_bytes: Option<usize>,
    max_backend_answer_bytes: Option<usize>,
    max_retry_answer_bytes: Option<usize>,
    max_pending_checks: Option<u64>,
    max_queued_events: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    url: Option<String>,
    url_env: Option<String>,
    retention_days: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApi {
    token_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFilter {
    token_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlerts {
    slack_webhook_url_env: Option<String>,
    smtp: Option<RawSmtp>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSmtp {
    host: String,
    port: Option<u16>,
    from: String,
    #[serde(default)]
    to: Vec<String>,
    tls: Option<SmtpTls>,
    username: Option<String>,
    password_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    url: String,
    secret_env: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackend {
    name: Option<String>,
    api: Api,
    base_url: String,
    api_key_env: Option<String>,
    #[serde(default)]
    models: Vec<String>,
    max_tokens: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST {base_url}/v1/chat/completions`, any OpenAI-compatible server.
    Openai,
    /// `POST {base_url}/v1/messages`, the Anthropic Messages API.
    Anthropic,
}

/// One judge backend, ready to call.
#[derive(Clone)]
pub struct Backend {
    pub name: String,
    pub api: Api,
    /// The full endpoint URL (base_url + the API's path).
    pub endpoint: Url,
    /// The key from `api_key_env`, used only when the callout carries none.
    pub fallback_key: Option<String>,
    pub max_tokens: u32,
}

// Never print the key, even in a debug dump.
impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("name", &self.name)
            .field("api", &self.api)
            .field("endpoint", &self.endpoint.as_str())
            .field("fallback_key", &self.fallback_key.as_ref().map(|_| "<set>"))
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

/// The validated settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub timeout: Duration,
    pub max_concurrent: usize,
    pub models: ModelTable,
    /// Where recovery asks the model again (`[[upstreams]]`).
    pub upstreams: Upstreams,
    pub store: StoreSettings,
    /// The operator token of the results API (`[api] token_env`); without one the API answers 503.
    pub api_token: Option<Secret>,
    /// The token the filter's callouts carry in `x-livecheck-token` (`[filter] token_env`); without
    /// one (loopback only) the filter endpoints take any caller.
    pub filter_token: Option<Secret>,
    pub alerts: AlertSettings,
    pub webhooks: Vec<Webhook>,
    /// How much the sidecar reads and keeps (`[limits]`).
    pub limits: Limits,
    /// Intervals and retry delays of the background workers: not in the config file, tests shorten them.
    pub timing: Timing,
}

/// How much the sidecar reads and keeps, so that no caller, backend or burst of traffic grows its
/// memory or its store without bound (`[limits]`; every field has a default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body of any route (the filter's callouts and reports, the operator API):
    /// a larger one is answered 413 with a JSON error, unread.
    pub max_request_bytes: usize,
    /// The largest answer read from a judge backend: a larger one is an `errored` verdict.
    pub max_backend_answer_bytes: usize,
    /// The largest answer read from an upstream model on recovery: a larger one is no retry.
    pub max_retry_answer_bytes: usize,
    /// Background checks waiting for their verdict: a report's check beyond is stored `errored`.
    pub max_pending_checks: u64,
    /// Webhook events waiting for delivery: an event beyond is dropped (counted and logged).
    pub max_queued_events: u64,
}

/// A judge request holds a question and an answer of up to the filter's `max_body_bytes` (1 MiB by
/// default) each, a report the texts of its background checks: 8 MiB leaves room for both.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 8 << 20;
/// A verdict is a few hundred bytes of JSON; an answer is bounded by the backend's `max_tokens`.
pub const DEFAULT_MAX_BACKEND_ANSWER_BYTES: usize = 1 << 20;
pub const DEFAULT_MAX_RETRY_ANSWER_BYTES: usize = 4 << 20;
pub const DEFAULT_MAX_PENDING_CHECKS: u64 = 10_000;
/// One webhook event delivery attempt's time limit.
pub const EVENT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX_QUEUED_EVENTS: u64 = 100_000;
/// The smallest byte limit accepted: a judge request or a verdict needs more than this.
const MIN_BYTES_LIMIT: usize = 1024;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_backend_answer_bytes: DEFAULT_MAX_BACKEND_ANSWER_BYTES,
            max_retry_answer_bytes: DEFAULT_MAX_RETRY_ANSWER_BYTES,
            max_pending_checks: DEFAULT_MAX_PENDING_CHECKS,
            max_queued_events: DEFAULT_MAX_QUEUED_EVENTS,
        }
    }
}

fn compile_limits(raw: RawLimits, problems: &mut Vec<String>) -> Limits {
    let d = Limits::default();
    let mut bytes = |name: &str, value: Option<usize>, default: usize| match value {
        Some(n) if n < MIN_BYTES_LIMIT => {
            problems.push(format!(
                "limits: {name} must be at least {MIN_BYTES_LIMIT} bytes, not {n}"
            ));
            default
        }
        Some(n) => n,
        None => default,
    };
    let max_request_bytes = bytes(
        "max_request_bytes",
        raw.max_request_bytes,
        d.max_request_bytes,
    );
    let max_backend_answer_bytes = bytes(
        "max_backend_answer_bytes",
        raw.max_backend_answer_bytes,
        d.max_backend_answer_bytes,
    );
    let max_retry_answer_bytes = bytes(
        "max_retry_answer_bytes",
        raw.max_retry_answer_bytes,
        d.max_retry_answer_bytes,
    );
    let mut count = |name: &str, value: Option<u64>, default: u64| match value {
        Some(0) => {
            problems.push(format!("limits: {name} must be at least 1"));
            default
        }
        Some(n) => n,
        None => default,
    };
    Limits {
        max_request_bytes,
        max_backend_answer_bytes,
        max_retry_answer_bytes,
        max_pending_checks: count(
            "max_pending_checks",
            raw.max_pending_checks,
            d.max_pending_checks,
        ),
        max_queued_events: count(
            "max_queued_events",
            raw.max_queued_events,
            d.max_queued_events,
        ),
    }
}

/// A value read from an env var that must never be printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

/// Where results are stored.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// `sqlite://…` (an absolute path, created on start) or `postgres://…`; may carry a password.
    pub url: Secret,
    pub retention: Duration,
}

#[derive(Debug, Clone, Default)]
pub struct AlertSettings {
    /// A Slack incoming webhook URL (`[alerts] slack_webhook_url_env`).
    pub slack_webhook_url: Option<Secret>,
    pub smtp: Option<SmtpSettings>,
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

#[derive(Debug, Clone)]
pub struct SmtpSettings {
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    pub from: String,
    pub to: Vec<String>,
    pub username: Option<String>,
    pub password: Option<Secret>,
}

/// A webhook receiver of `response.check_failed` events.
#[derive(Debug, Clone)]
pub struct Webhook {
    pub url: Url,
    /// Standard Webhooks style: `whsec_<base64>` is the base64 key, anything else the key's bytes.
    pub secret: Secret,
}

#[derive(Debug, Clone)]
pub struct Timing {
    /// How often the retention sweep runs (also once at start).
    pub sweep_every: Duration,
    /// The first retry delay of an event delivery; doubled each attempt, capped at `event_retry_max`.
    pub event_retry_base: Duration,
    pub event_retry_max: Duration,
    /// Delivery attempts of one event before it is dropped (logged).
    pub event_attempts: u32,
    /// How often the outbox and the pending background checks are looked at without a wake-up.
    pub poll_every: Duration,
    /// Delivery attempts of one alert notification, and the delay between them.
    pub alert_attempts: u32,
    pub alert_retry: Duration,
    /// How long a replica counts as alive without renewing its row in the store (it renews every
    /// third of this): the work it claimed, and the background checks whose key it holds, go to the
    /// other replicas this long after it died.
    pub replica_lease: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            sweep_every: Duration::from_secs(3600),
            // 10 s, 20 s, … capped at 15 min: 12 attempts span a little over an hour.
            event_retry_base: Duration::from_secs(10),
            event_retry_max: Duration::from_secs(900),
            event_attempts: 12,
            poll_every: Duration::from_secs(5),
            alert_attempts: 4,
            alert_retry: Duration::from_secs(30),
            replica_lease: Duration::from_secs(15),
        }
    }
}

/// Judge model name → backend: an exact name wins, else the longest matching prefix.
#[derive(Debug, Clone, Default)]
pub struct ModelTable {
    exact: HashMap<String, Arc<Backend>>,
    /// Longest prefix first.
    prefixes: Vec<(String, Arc<Backend>)>,
}

impl ModelTable {
    pub fn backend_for(&self, model: &str) -> Option<&Arc<Backend>> {
        self.exact.get(model).or_else(|| {
            self.prefixes
                .iter()
                .find(|(prefix, _)| model.starts_with(prefix.as_str()))
                .map(|(_, backend)| backend)
        })
    }
}

/// Every problem found in a config, one line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub Vec<String>);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for ConfigError {}

fn one(problem: impl Into<String>) -> ConfigError {
    ConfigError(vec![problem.into()])
}

impl Settings {
    /// Reads the file (`.json` as JSON, anything else as TOML) and applies the env overrides.
    /// `env` looks a variable up: `std::env::var` in the service, a map in tests.
    pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let shown = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| one(format!("cannot read config file {shown}: {e}")))?;
        let is_json = path
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
        // A relative SQLite path is beside the config file.
        let base = path.parent().unwrap_or(Path::new(""));
        let raw = if is_json {
            parse_json(&text)
        } else {
            parse_toml(&text)
        };
        raw.and_then(|raw| compile(raw, env, base))
            .map_err(|e| prefixed(e, &shown.to_string()))
    }

    /// A relative SQLite path is taken from the working directory.
    pub fn from_toml(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        compile(parse_toml(text)?, env, Path::new(""))
    }

    pub fn from_json(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        compile(parse_json(text)?, env, Path::new(""))
    }
}

fn parse_toml(text: &str) -> Result<RawConfig, ConfigError> {
    toml::from_str(text).map_err(|e| one(format!("not a valid config: {}", e.message().trim())))
}

fn parse_json(text: &str) -> Result<RawConfig, ConfigError> {
    serde_json::from_str(text).map_err(|e| one(format!("not a valid config: {e}")))
}

fn prefixed(err: ConfigError, path: &str) -> ConfigError {
    ConfigError(err.0.into_iter().map(|p| format!("{path}: {p}")).collect())
}

fn compile(
    raw: RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
    base: &Path,
) -> Result<Settings, ConfigError> {
    let mut problems = Vec::new();

    let listen_text = env(LISTEN_ENV)
        .map(|v| (v, LISTEN_ENV))
        .or_else(|| raw.listen.clone().map(|v| (v, "listen")))
        .unwrap_or_else(|| (DEFAULT_LISTEN.to_owned(), "listen"));
    let listen = match listen_text.0.parse::<SocketAddr>() {
        Ok(addr) => Some(addr),
        Err(_) => {
            problems.push(format!(
                "{}: {:?} is not an address like 127.0.0.1:8181",
                listen_text.1, listen_text.0
            ));
            None
        }
    };

    let timeout_ms = number_setting(
        &mut problems,
        env,
        TIMEOUT_ENV,
        raw.timeout_ms,
        DEFAULT_TIMEOUT_MS,
    );
    if !(1..=MAX_TIMEOUT_MS).contains(&timeout_ms) {
        problems.push(format!(
            "timeout_ms: must be between 1 and {MAX_TIMEOUT_MS}, not {timeout_ms}"
        ));
    }
    let max_concurrent = number_setting(
        &mut problems,
        env,
        MAX_CONCURRENT_ENV,
        raw.max_concurrent,
        DEFAULT_MAX_CONCURRENT,
    );
    if max_concurrent == 0 {
        problems.push("max_concurrent: must be at least 1".to_owned());
    }

    let models = compile_backends(raw.backends, env, &mut problems);
    let upstreams = compile_upstreams(raw.upstreams, &mut problems);
    let store = compile_store(raw.store.unwrap_or_default(), env, base, &mut problems);
    let api_token = raw.api.and_then(|api| {
        let var = api.token_env?;
        secret_from(env, &var, "api: token_env", &mut problems)
    });
    let filter_token = compile_filter_token(
        raw.filter.and_then(|f| f.token_env).as_deref(),
        listen,
        listen_text.1,
        env,
        &mut problems,
    );
    if filter_token.is_some() && filter_token == api_token {
        problems.push(
            "filter: token_env holds the operator token (api: token_env); each needs its own"
                .to_owned(),
        );
    }
    let alerts = raw
        .alerts
        .map(|a| compile_alerts(a, env, &mut problems))
        .unwrap_or_default();
    let webhooks = compile_webhooks(raw.webhooks, env, &mut problems);
    let limits = compile_limits(raw.limits.unwrap_or_default(), &mut problems);

    match (listen, store) {
        (Some(listen), Some(store)) if problems.is_empty() => Ok(Settings {
            listen,
            timeout: Duration::from_millis(timeout_ms),
            max_concurrent,
            models,
            upstreams,
            store,
            api_token,
            filter_token,
            alerts,
            webhooks,
            limits,
            timing: Timing::default(),
        }),
        _ => Err(ConfigError(problems)),
    }
}

fn number_setting<T: std::str::FromStr + Copy>(
    problems: &mut Vec<String>,
    env: &dyn Fn(&str) -> Option<String>,
    var: &str,
    from_file: Option<T>,
    default: T,
) -> T {
    match env(var) {
        Some(text) => match text.trim().parse::<T>() {
            Ok(value) => value,
            Err(_) => {
                problems.push(format!("{var}: {text:?} is not a whole number"));
                default
            }
        },
        None => from_file.unwrap_or(default),
    }
}

fn compile_backends(
    raw: Vec<RawBackend>,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> ModelTable {
    let mut table = ModelTable::default();
    // Which backend claimed each exact name / prefix first, to name both in a clash.
    let mut claimed: HashMap<String, String> = HashMap::new();
    if raw.is_empty() {
        problems.push("backends: none configured; every judged check would be errored".to_owned());
    }
    for (i, b) in raw.into_iter().enumerate() {
        let name = b.name.unwrap_or_else(|| format!("backends[{i}]"));
        let at = format!("backend {name:?}");
        let endpoint = match endpoint(&b.base_url, b.api) {
            Ok(url) => Some(url),
            Err(why) => {
                problems.push(format!("{at}: base_url {:?} {why}", b.base_url));
                None
            }
        };
        let fallback_key = match &b.api_key_env {
            None => None,
            Some(var) => match env(var) {
                Some(key) if !key.trim().is_empty() => Some(key.trim().to_owned()),
                _ => {
                    problems.push(format!("{at}: api_key_env names {var}, which is not set"));
                    None
                }
            },
        };
        let max_tokens = b.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        if max_tokens < 16 {
            problems.push(format!(
                "{at}: max_tokens {max_tokens} is too small for a verdict (at least 16)"
            ));
        }
        if b.models.is_empty() {
            problems.push(format!(
                "{at}: models is empty; list exact names or prefixes ending in *"
            ));
        }
        let Some(endpoint) = endpoint else { continue };
        let backend = Arc::new(Backend {
            name: name.clone(),
            api: b.api,
            endpoint,
            fallback_key,
            max_tokens,
        });
        for model in b.models {
            let (key, is_prefix) = match model.strip_suffix('*') {
                Some(prefix) => (format!("{prefix}*"), true),
                None => (model.clone(), false),
            };
            if model.is_empty() || model.trim() != model {
                problems.push(format!(
                    "{at}: model {model:?} is empty or has spaces around it"
                ));
                continue;
            }
            if let Some(first) = claimed.get(&key) {
                problems.push(format!(
                    "{at}: model {model:?} is already served by backend {first:?}"
                ));
                continue;
            }
            claimed.insert(key, name.clone());
            if is_prefix {
                let prefix = model.trim_end_matches('*').to_owned();
                table.prefixes.push((prefix, Arc::clone(&backend)));
            } else {
                table.exact.insert(model, Arc::clone(&backend));
            }
        }
    }
    table
        .prefixes
        .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    table
}

/// The SQLite file used when the config names no store, beside the config file.
pub const DEFAULT_SQLITE_FILE: &str = "livecheck-judge.sqlite";
const DEFAULT_RETENTION_DAYS: u32 = 30;
const MAX_RETENTION_DAYS: u32 = 3650;

/// An env var's value, or a problem naming the setting and the variable (never the value).
fn secret_from(
    env: &dyn Fn(&str) -> Option<String>,
    var: &str,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<Secret> {
    match env(var) {
        Some(value) if !value.trim().is_empty() => Some(Secret(value.trim().to_owned())),
        _ => {
            problems.push(format!("{at} names {var}, which is not set"));
            None
        }
    }
}

/// The filter token from the env var `[filter] token_env` names, held to the filter's own rule.
/// Without one, `listen` (from the setting `listen_from`) must be loopback: off loopback any pod could
/// spend a caller's key through `/v1/retry` or fill the store with made-up turns.
fn compile_filter_token(
    var: Option<&str>,
    listen: Option<SocketAddr>,
    listen_from: &str,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Option<Secret> {
    let Some(var) = var else {
        if let Some(addr) = listen.filter(|a| !a.ip().is_loopback()) {
            problems.push(format!(
                "{listen_from}: {addr} is beyond loopback, where the filter endpoints need a token: \
                 set [filter] token_env (the token the filter sends in {FILTER_TOKEN_HEADER})"
            ));
        }
        return None;
    };
    let token = secret_from(env, var, "filter: token_env", problems)?;
    if valid_token(token.expose()) {
        Some(token)
    } else {
        problems.push(format!(
            "filter: token_env names {var}, which does not hold 16 to 256 visible ASCII characters"
        ));
        None
    }
}

fn compile_store(
    raw: RawStore,
    env: &dyn Fn(&str) -> Option<String>,
    base: &Path,
    problems: &mut Vec<String>,
) -> Option<StoreSettings> {
    let retention_days = raw.retention_days.unwrap_or(DEFAULT_RETENTION_DAYS);
    if !(1..=MAX_RETENTION_DAYS).contains(&retention_days) {
        problems.push(format!(
            "store: retention_days must be between 1 and {MAX_RETENTION_DAYS}, not {retention_days}"
        ));
    }
    let url = match (raw.url, raw.url_env) {
        (Some(_), Some(_)) => {
            problems.push("store: give url or url_env, not both".to_owned());
            return None;
        }
        (None, Some(var)) => secret_from(env, &var, "store: url_env", problems)?.0,
        (Some(url), None) => {
            if url.starts_with("postgres") && has_password(&url) {
                problems.push(
                    "store: url carries a password; put the URL in an env var named by url_env"
                        .to_owned(),
                );
                return None;
            }
            url
        }
        (None, None) => format!("sqlite://{DEFAULT_SQLITE_FILE}"),
    };
    let url = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        url
    } else if let Some(path) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        let path = path.split('?').next().unwrap_or_default();
        if path.is_empty() || path == ":memory:" {
            problems.push("store: a sqlite url needs a file path".to_owned());
            return None;
        }
        let path = base.join(path);
        let path = if path.is_absolute() {
            path
        } else {
            std::env::current_dir().unwrap_or_default().join(path)
        };
        format!("sqlite://{}", path.display())
    } else {
        problems.push("store: url must start with sqlite:// or postgres://".to_owned());
        return None;
    };
    Some(StoreSettings {
        url: Secret(url),
        retention: Duration::from_secs(u64::from(retention_days) * 86_400),
    })
}

fn has_password(url: &str) -> bool {
    Url::parse(url).is_ok_and(|u| u.password().is_some())
}

fn compile_alerts(
    raw: RawAlerts,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> AlertSettings {
    let slack_webhook_url = raw.slack_webhook_url_env.and_then(|var| {
        let url = secret_from(env, &var, "alerts: slack_webhook_url_env", problems)?;
        match Url::parse(url.expose()) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => Some(url),
            _ => {
                problems.push(format!("alerts: {var} does not hold an http(s) URL"));
                None
            }
        }
    });
    let smtp = raw.smtp.and_then(|smtp| {
        let tls = smtp.tls.unwrap_or(SmtpTls::Starttls);
        let loopback = smtp.host == "localhost"
            || smtp
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        let mut ok = true;
        if smtp.host.trim().is_empty() {
            problems.push("alerts.smtp: host is empty".to_owned());
            ok = false;
        }
        if tls == SmtpTls::None && !loopback {
            problems.push(
                "alerts.smtp: tls = \"none\" is only allowed for a relay on loopback".to_owned(),
            );
            ok = false;
        }
        if !smtp.from.contains('@') {
            problems.push("alerts.smtp: from is not a mail address".to_owned());
            ok = false;
        }
        if smtp.to.is_empty() {
            problems.push("alerts.smtp: to lists no address".to_owned());
            ok = false;
        }
        for (i, to) in smtp.to.iter().enumerate() {
            if !to.contains('@') {
                problems.push(format!("alerts.smtp: to[{i}] is not a mail address"));
                ok = false;
            }
        }
        let password = match (&smtp.username, smtp.password_env) {
            (Some(_), Some(var)) => secret_from(env, &var, "alerts.smtp: password_env", problems),
            (None, None) => None,
            _ => {
                problems.push("alerts.smtp: username and password_env go together".to_owned());
                ok = false;
                None
            }
        };
        ok.then(|| SmtpSettings {
            port: smtp.port.unwrap_or(match tls {
                SmtpTls::Starttls => 587,
                SmtpTls::Tls => 465,
                SmtpTls::None => 25,
            }),
            host: smtp.host,
            tls,
            from: smtp.from,
            to: smtp.to,
            username: smtp.username,
            password,
        })
    });
    AlertSettings {
        slack_webhook_url,
        smtp,
    }
}

fn compile_webhooks(
    raw: Vec<RawWebhook>,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Vec<Webhook> {
    let mut hooks: Vec<Webhook> = Vec::new();
    for (i, w) in raw.into_iter().enumerate() {
        let at = format!("webhooks[{i}]");
        let url = match Url::parse(&w.url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => Some(u),
            _ => {
                problems.push(format!("{at}: url {:?} is not an http(s) URL", w.url));
                None
            }
        };
        let secret = secret_from(env, &w.secret_env, &format!("{at}: secret_env"), problems);
        if let (Some(url), Some(secret)) = (url, secret) {
            if hooks.iter().any(|h| h.url == url) {
                problems.push(format!("{at}: url {:?} is listed twice", w.url));
                continue;
            }
            hooks.push(Webhook { url, secret });
        }
    }
    hooks
}

fn endpoint(base_url: &str, api: Api) -> Result<Url, &'static str> {
    let base = Url::parse(base_url).map_err(|_| "is not a URL")?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err("must be http or https");
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err("must not have a query or fragment");
    }
    let path = base.path().trim_end_matches('/');
    if path.ends_with("/v1") {
        return Err("must not end in /v1: the sidecar appends /v1/... itself");
    }
    let suffix = match api {
        Api::Openai => "/v1/chat/completions",
        Api::Anthropic => "/v1/messages",
    };
    let mut url = base.clone();
    url.set_path(&format!("{path}{suffix}"));
    Ok(url)
}

/// How long a retry may take when its upstream sets no `timeout_ms`: a whole answer, not a verdict.
const DEFAULT_RETRY_TIMEOUT_MS: u64 = 60_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    name: Option<String>,
    authority: String,
    base_url: String,
    timeout_ms: Option<u64>,
}

/// A vendor API the filter's turns go to: where a retry for its authority is sent.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub name: String,
    /// Without a trailing slash; the turn's `:path` is appended as is.
    pub base_url: Url,
    pub timeout: Duration,
}

/// A turn's `:authority` → the upstream a retry goes to. Only what the config names: a retry is
/// never sent to a host taken from the callout.
#[derive(Debug, Clone, Default)]
pub struct Upstreams {
    /// Lower-cased authority as written: `host` or `host:port`.
    by_authority: HashMap<String, Arc<Upstream>>,
}

impl Upstreams {
    /// The upstream for an authority, case-insensitively: an entry written with that port first,
    /// else one written without a port for that host.
    pub fn for_authority(&self, authority: &str) -> Option<&Upstream> {
        let authority = authority.trim().to_ascii_lowercase();
        self.by_authority
            .get(&authority)
            .or_else(|| {
                let (host, port) = split_port(&authority);
                port.and_then(|_| self.by_authority.get(host))
            })
            .map(|u| &**u)
    }

    pub fn is_empty(&self) -> bool {
        self.by_authority.is_empty()
    }
}

/// `host:port` → (`host`, `Some(port)`); a bracketed IPv6 host keeps its brackets.
fn split_port(authority: &str) -> (&str, Option<&str>) {
    let after_host = match authority.strip_prefix('[') {
        Some(rest) => rest.find(']').map_or(authority.len(), |i| i + 2),
        None => authority.find(':').unwrap_or(authority.len()),
    };
    let (host, rest) = authority.split_at(after_host.min(authority.len()));
    match rest.strip_prefix(':') {
        Some(port) => (host, Some(port)),
        None => (host, None),
    }
}

fn valid_authority(authority: &str) -> bool {
    let (host, port) = split_port(authority);
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '[' | ']' | ':'));
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.parse::<u16>().is_ok());
    let brackets_ok = match host.strip_prefix('[') {
        Some(inner) => inner.ends_with(']'),
        None => !host.contains([':', '[', ']']),
    };
    host_ok && port_ok && brackets_ok
}

fn compile_upstreams(raw: Vec<RawUpstream>, problems: &mut Vec<String>) -> Upstreams {
    let mut upstreams = Upstreams::default();
    // Which upstream claimed each authority first, to name both in a clash.
    let mut claimed: HashMap<String, String> = HashMap::new();
    for (i, u) in raw.into_iter().enumerate() {
        let name = u.name.unwrap_or_else(|| format!("upstreams[{i}]"));
        let at = format!("upstream {name:?}");
        let authority = u.authority.trim().to_ascii_lowercase();
        let mut ok = true;
        if !valid_authority(&authority) {
            problems.push(format!(
                "{at}: authority {:?} is not a host or host:port",
                u.authority
            ));
            ok = false;
        } else if let Some(first) = claimed.get(&authority) {
            problems.push(format!(
                "{at}: authority {:?} is already served by upstream {first:?}",
                u.authority
            ));
            ok = false;
        }
        let base_url = match upstream_url(&u.base_url) {
            Ok(url) => Some(url),
            Err(why) => {
                problems.push(format!("{at}: base_url {:?} {why}", u.base_url));
                None
            }
        };
        let timeout_ms = u.timeout_ms.unwrap_or(DEFAULT_RETRY_TIMEOUT_MS);
        if !(1..=MAX_TIMEOUT_MS).contains(&timeout_ms) {
            problems.push(format!(
                "{at}: timeout_ms must be between 1 and {MAX_TIMEOUT_MS}, not {timeout_ms}"
            ));
            ok = false;
        }
        let Some(base_url) = base_url.filter(|_| ok) else {
            continue;
        };
        claimed.insert(authority.clone(), name.clone());
        upstreams.by_authority.insert(
            authority,
            Arc::new(Upstream {
                name,
                base_url,
                timeout: Duration::from_millis(timeout_ms),
            }),
        );
    }
    upstreams
}

fn upstream_url(base_url: &str) -> Result<Url, &'static str> {
    let mut url = Url::parse(base_url).map_err(|_| "is not a URL")?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("must be an http or https URL");
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not have a query or fragment");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials");
    }
    let path = url.path().trim_end_matches('/').to_owned();
    if path.ends_with("/v1") {
        return Err("must not end in /v1: the turn's path (/v1/...) is appended to it");
    }
    url.set_path(&path);
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    const TWO: &str = r#"
        [[backends]]
        name = "claude"
        api = "anthropic"
        base_url = "https://api.anthropic.com/"
        models = ["claude-*", "claude-special-*"]

        [[backends]]
        name = "local"
        api = "openai"
        base_url = "http://127.0.0.1:8080/proxy"
        models = ["*", "claude-sonnet-exact"]
    "#;

    #[test]
    fn defaults_are_loopback_and_bounded() {
        let s = Settings::from_toml(TWO, &no_env).unwrap();
        assert_eq!(s.listen, "127.0.0.1:8181".parse().unwrap());
        assert_eq!(s.timeout, Duration::from_millis(8_000));
        assert_eq!(s.max_concurrent, 32);
        assert_eq!(s.limits, Limits::default());
        assert_eq!(s.limits.max_request_bytes, 8 << 20);
        assert_eq!(s.limits.max_backend_answer_bytes, 1 << 20);
    }

    #[test]
    fn limits_are_read_and_checked() {
        let set = format!(
            "[limits]\nmax_request_bytes = 4096\nmax_backend_answer_bytes = 2048\n\
             max_retry_answer_bytes = 8192\nmax_pending_checks = 3\nmax_queued_events = 5\n{TWO}"
        );
        let s = Settings::from_toml(&set, &no_env).unwrap();
        let want = Limits {
            max_request_bytes: 4096,
            max_backend_answer_bytes: 2048,
            max_retry_answer_bytes: 8192,
            max_pending_checks: 3,
            max_queued_events: 5,
        };
        assert_eq!(s.limits, want);
        let bad = format!(
            "[limits]\nmax_request_bytes = 10\nmax_pending_checks = 0\nmax_queued_events = 0\n{TWO}"
        );
        let all = Settings::from_toml(&bad, &no_env).unwrap_err().to_string();
        for needle in [
            "limits: max_request_bytes must be at least 1024 bytes, not 10",
            "limits: max_pending_checks must be at least 1",
            "limits: max_queued_events must be at least 1",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
        let unknown = format!("[limits]\nmax_bytes = 10\n{TWO}");
        assert!(Settings::from_toml(&unknown, &no_env).is_err());
    }

    #[test]
    fn exact_name_wins_then_longest_prefix() {
        let s = Settings::from_toml(TWO, &no_env).unwrap();
        let name = |m: &str| s.models.backend_for(m).map(|b| b.name.clone());
        assert_eq!(name("claude-sonnet-exact").as_deref(), Some("local"));
        assert_eq!(name("claude-haiku").as_deref(), Some("claude"));
        assert_eq!(name("gpt-4.1-mini").as_deref(), Some("local"));
        let claude = s.models.backend_for("claude-x").unwrap();
        assert_eq!(
            claude.endpoint.as_str(),
            "https://api.anthropic.com/v1/messages"
        );
        let local = s.models.backend_for("x").unwrap();
        assert_eq!(
            local.endpoint.as_str(),
            "http://127.0.0.1:8080/proxy/v1/chat/completions"
        );
    }

    #[test]
    fn env_overrides_the_file() {
        let env = |var: &str| match var {
            LISTEN_ENV => Some("0.0.0.0:9000".to_owned()),
            TIMEOUT_ENV => Some("1500".to_owned()),
            MAX_CONCURRENT_ENV => Some("4".to_owned()),
            "FILTER_TOKEN" => Some(FILTER_TOKEN.to_owned()),
            _ => None,
        };
        let s = Settings::from_toml(&format!("{TWO}{WITH_FILTER_TOKEN}"), &env).unwrap();
        assert_eq!(s.listen, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(s.timeout, Duration::from_millis(1500));
        assert_eq!(s.max_concurrent, 4);
    }

    const FILTER_TOKEN: &str = "filter-token-3c9e1d77";
    const WITH_FILTER_TOKEN: &str = "\n[filter]\ntoken_env = \"FILTER_TOKEN\"\n";

    fn filter_token_env(value: &str) -> impl Fn(&str) -> Option<String> + '_ {
        move |var: &str| (var == "FILTER_TOKEN").then(|| value.to_owned())
    }

    #[test]
    fn the_filter_token_is_read_from_its_env_var_and_never_printed() {
        let config = format!("{TWO}{WITH_FILTER_TOKEN}");
        let s = Settings::from_toml(&config, &filter_token_env(FILTER_TOKEN)).unwrap();
        assert_eq!(s.filter_token.as_ref().unwrap().expose(), FILTER_TOKEN);
        assert!(!format!("{s:?}").contains("3c9e1d77"), "{s:?}");
        let s = Settings::from_toml(TWO, &no_env).unwrap();
        assert!(s.filter_token.is_none());
    }

    #[test]
    fn a_filter_token_env_unset_or_not_holding_a_token_is_refused_without_its_value() {
        let config = format!("{TWO}{WITH_FILTER_TOKEN}");
        let err = Settings::from_toml(&config, &no_env).unwrap_err();
        assert_eq!(
            err.0,
            vec!["filter: token_env names FILTER_TOKEN, which is not set"]
        );
        let (too_long, longest) = ("x".repeat(257), "y".repeat(256));
        for bad in [
            "short-9q7",
            "fifteen-chars-9",
            &too_long,
            "has a space 9q7-9q7",
            "non-ascii-9q7-9q7-é",
        ] {
            let err = Settings::from_toml(&config, &filter_token_env(bad)).unwrap_err();
            assert_eq!(
                err.0,
                vec!["filter: token_env names FILTER_TOKEN, which does not hold 16 to 256 visible ASCII characters"],
                "{bad:?}"
            );
        }
        for good in ["sixteen-chars-9q", &longest] {
            let s = Settings::from_toml(&config, &filter_token_env(good)).unwrap();
            assert_eq!(s.filter_token.unwrap().expose(), good);
        }
    }

    #[test]
    fn listening_beyond_loopback_needs_a_filter_token() {
        for listen in ["0.0.0.0:8181", "10.1.2.3:8181", "[::]:8181"] {
            let config = format!("listen = \"{listen}\"\n{TWO}");
            let err = Settings::from_toml(&config, &no_env).unwrap_err();
            assert_eq!(err.0.len(), 1, "{err}");
            assert!(
                err.0[0].starts_with(&format!("listen: {listen} is beyond loopback"))
                    && err.0[0].contains("set [filter] token_env"),
                "{err}"
            );
            let config = format!("{config}{WITH_FILTER_TOKEN}");
            let s = Settings::from_toml(&config, &filter_token_env(FILTER_TOKEN)).unwrap();
            assert_eq!(s.listen, listen.parse().unwrap());
        }
        // The env override is named as the setting that put the sidecar there.
        let env = |var: &str| (var == LISTEN_ENV).then(|| "0.0.0.0:9000".to_owned());
        let err = Settings::from_toml(TWO, &env).unwrap_err();
        assert!(
            err.0[0].starts_with("LIVECHECK_JUDGE_LISTEN: 0.0.0.0:9000 is beyond loopback"),
            "{err}"
        );
        // Loopback without a token stays as it was.
        for listen in ["127.0.0.1:8181", "127.0.0.2:1", "[::1]:8181"] {
            let config = format!("listen = \"{listen}\"\n{TWO}");
            assert!(Settings::from_toml(&config, &no_env).is_ok(), "{listen}");
        }
    }

    #[test]
    fn the_filter_token_and_the_operator_token_must_differ() {
        let config = format!("{TWO}{WITH_FILTER_TOKEN}[api]\ntoken_env = \"API_TOKEN\"\n");
        let env = |var: &str| match var {
            "FILTER_TOKEN" | "API_TOKEN" => Some(FILTER_TOKEN.to_owned()),
            _ => None,
        };
        let err = Settings::from_toml(&config, &env).unwrap_err();
        assert_eq!(
            err.0,
            vec!["filter: token_env holds the operator token (api: token_env); each needs its own"]
        );
        let env = |var: &str| match var {
            "FILTER_TOKEN" => Some(FILTER_TOKEN.to_owned()),
            "API_TOKEN" => Some("operator-token-51ab".to_owned()),
            _ => None,
        };
        let s = Settings::from_toml(&config, &env).unwrap();
        assert!(s.filter_token.is_some() && s.api_token.is_some());
    }

    #[test]
    fn json_config_reads_the_same() {
        let json = r#"{"listen":"127.0.0.1:1","backends":[{"api":"openai","base_url":"http://h","models":["m"]}]}"#;
        let s = Settings::from_json(json, &no_env).unwrap();
        assert_eq!(s.models.backend_for("m").unwrap().name, "backends[0]");
        assert!(s.models.backend_for("m2").is_none());
    }

    #[test]
    fn every_problem_is_listed_with_where_it_is() {
        let bad = r#"
            listen = "localhost"
            timeout_ms = 0
            max_concurrent = 0
            [[backends]]
            name = "a"
            api = "openai"
            base_url = "http://h/v1"
            api_key_env = "LIVECHECK_TEST_UNSET_KEY"
            models = ["m"]
            [[backends]]
            name = "b"
            api = "anthropic"
            base_url = "ftp://h"
            models = []
            [[backends]]
            name = "c"
            api = "openai"
            base_url = "http://h"
            models = ["m"]
        "#;
        let err = Settings::from_toml(bad, &no_env).unwrap_err();
        let all = err.to_string();
        for needle in [
            "listen: \"localhost\" is not an address",
            "timeout_ms: must be between 1",
            "max_concurrent: must be at least 1",
            "backend \"a\": base_url \"http://h/v1\" must not end in /v1",
            "backend \"a\": api_key_env names LIVECHECK_TEST_UNSET_KEY, which is not set",
            "backend \"b\": base_url \"ftp://h\" must be http or https",
            "backend \"b\": models is empty",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
        assert_eq!(err.0.len(), 7, "{all}");
    }

    #[test]
    fn a_model_served_twice_is_refused() {
        let bad = r#"
            [[backends]]
            name = "a"
            api = "openai"
            base_url = "http://h"
            models = ["m", "p-*"]
            [[backends]]
            name = "b"
            api = "openai"
            base_url = "http://h"
            models = ["m", "p-*"]
        "#;
        let err = Settings::from_toml(bad, &no_env).unwrap_err();
        assert_eq!(
            err.0,
            vec![
                "backend \"b\": model \"m\" is already served by backend \"a\"",
                "backend \"b\": model \"p-*\" is already served by backend \"a\"",
            ]
        );
    }

    #[test]
    fn unknown_fields_and_apis_are_refused() {
        let err = Settings::from_toml("listn = \"127.0.0.1:1\"", &no_env).unwrap_err();
        assert!(err.to_string().contains("unknown field `listn`"), "{err}");
        let err = Settings::from_toml(
            "[[backends]]\napi = \"gemini\"\nbase_url = \"http://h\"\nmodels = [\"m\"]",
            &no_env,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("unknown variant `gemini`"),
            "{err}"
        );
    }

    #[test]
    fn no_backends_is_an_error() {
        let err = Settings::from_toml("", &no_env).unwrap_err();
        assert!(err.to_string().contains("backends: none configured"));
    }

    #[test]
    fn the_results_settings_are_read_from_env_vars_by_name() {
        const ALL: &str = r#"
            [[backends]]
            api = "openai"
            base_url = "http://h"
            models = ["*"]
            [store]
            url_env = "DB_URL"
            retention_days = 7
            [api]
            token_env = "API_TOKEN"
            [alerts]
            slack_webhook_url_env = "SLACK_URL"
            [alerts.smtp]
            host = "127.0.0.1"
            tls = "none"
            from = "lc@example.com"
            to = ["ops@example.com"]
            [[webhooks]]
            url = "https://hooks.example.com/lc"
            secret_env = "HOOK_SECRET"
        "#;
        let env = |var: &str| {
            match var {
                "DB_URL" => Some("postgres://u:pw-9z@db/lc"),
                "API_TOKEN" => Some("tok-9z"),
                "SLACK_URL" => Some("https://hooks.slack.com/services/T/B/x9z"),
                "HOOK_SECRET" => Some("whsec-9z"),
                _ => None,
            }
            .map(str::to_owned)
        };
        let s = Settings::from_toml(ALL, &env).unwrap();
        assert_eq!(s.store.url.expose(), "postgres://u:pw-9z@db/lc");
        assert_eq!(s.store.retention, Duration::from_secs(7 * 86_400));
        assert_eq!(s.api_token.as_ref().unwrap().expose(), "tok-9z");
        let smtp = s.alerts.smtp.as_ref().unwrap();
        assert_eq!((smtp.port, smtp.tls), (25, SmtpTls::None));
        assert_eq!(s.webhooks.len(), 1);
        assert!(
            !format!("{s:?}").contains("9z"),
            "no secret in a debug dump"
        );
    }

    #[test]
    fn the_default_store_is_a_sqlite_file_beside_the_config() {
        let dir = std::env::temp_dir().join(format!("lc-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("judge.toml");
        std::fs::write(&path, TWO).unwrap();
        let s = Settings::load(&path, &no_env).unwrap();
        assert_eq!(
            s.store.url.expose(),
            format!("sqlite://{}", dir.join(DEFAULT_SQLITE_FILE).display())
        );
        assert_eq!(s.store.retention, Duration::from_secs(30 * 86_400));
        assert!(s.api_token.is_none() && s.webhooks.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_results_problem_is_listed() {
        let bad = format!(
            "{TWO}\n{}",
            r#"
            [store]
            url = "postgres://u:secret@db/lc"
            retention_days = 0
            [api]
            token_env = "NO_TOKEN"
            [alerts.smtp]
            host = "smtp.example.com"
            tls = "none"
            from = "nobody"
            to = []
            [[webhooks]]
            url = "ftp://h"
            secret_env = "NO_SECRET"
            "#
        );
        let err = Settings::from_toml(&bad, &no_env).unwrap_err();
        let all = err.to_string();
        for needle in [
            "store: retention_days must be between 1",
            "store: url carries a password",
            "api: token_env names NO_TOKEN, which is not set",
            "alerts.smtp: tls = \"none\" is only allowed for a relay on loopback",
            "alerts.smtp: from is not a mail address",
            "alerts.smtp: to lists no address",
            "webhooks[0]: url \"ftp://h\" is not an http(s) URL",
            "webhooks[0]: secret_env names NO_SECRET, which is not set",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
        assert!(!all.contains("secret@"), "{all}");
    }

    #[test]
    fn the_fallback_key_is_read_and_never_printed() {
        let env = |var: &str| (var == "JUDGE_KEY").then(|| "sk-secret-123".to_owned());
        let s = Settings::from_toml(
            "[[backends]]\napi = \"openai\"\nbase_url = \"http://h\"\napi_key_env = \"JUDGE_KEY\"\nmodels = [\"*\"]",
            &env,
        )
        .unwrap();
        let b = s.models.backend_for("x").unwrap();
        assert_eq!(b.fallback_key.as_deref(), Some("sk-secret-123"));
        assert!(!format!("{s:?}").contains("sk-secret-123"));
    }
}
