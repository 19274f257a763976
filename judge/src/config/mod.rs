//! What an operator writes (a TOML or JSON file, plus a few env vars), and the validated settings the
//! service runs on. Raw and compiled forms are different types: a config either compiles whole, with
//! every problem listed, or the service does not start.
//!
//! One room per part of the file: [`file`] (the raw shape serde reads), [`backends`],
//! [`upstreams`], [`storage`] (`[store]`), [`receivers`] (alerts and webhooks), [`limits`], and
//! [`secret`] (values from env vars, never printed). Here: the top-level settings, the env
//! overrides, and `compile`, which runs each part's checks and lists every problem.

mod backends;
mod file;
mod limits;
mod receivers;
mod secret;
mod storage;
mod upstreams;

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use livecheck_wire::{valid_token, FILTER_TOKEN_HEADER};

pub use backends::{Backend, ModelTable};
pub use file::{Api, SmtpTls};
pub use limits::{
    Limits, DEFAULT_MAX_BACKEND_ANSWER_BYTES, DEFAULT_MAX_PENDING_CHECKS,
    DEFAULT_MAX_QUEUED_EVENTS, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_RETRY_ANSWER_BYTES,
    EVENT_DELIVERY_TIMEOUT,
};
pub use receivers::{AlertSettings, SmtpSettings, Webhook};
pub use secret::Secret;
pub use storage::{StoreSettings, DEFAULT_SQLITE_FILE};
pub use upstreams::{Upstream, Upstreams};

use backends::compile_backends;
use file::RawConfig;
use limits::compile_limits;
use receivers::{compile_alerts, compile_webhooks};
use secret::secret_from;
use storage::compile_store;
use upstreams::compile_upstreams;

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
    let upstreams = compile_upstreams(raw.upstreams, env, &mut problems);
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

#[cfg(test)]
mod tests;
