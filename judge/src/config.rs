//! What an operator writes (a TOML or JSON file, plus a few env vars), and the validated settings the
//! service runs on. Raw and compiled forms are different types: a config either compiles whole, with
//! every problem listed, or the service does not start.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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
        if is_json {
            Self::from_json(&text, env).map_err(|e| prefixed(e, &shown.to_string()))
        } else {
            Self::from_toml(&text, env).map_err(|e| prefixed(e, &shown.to_string()))
        }
    }

    pub fn from_toml(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text)
            .map_err(|e| one(format!("not a valid config: {}", e.message().trim())))?;
        compile(raw, env)
    }

    pub fn from_json(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|e| one(format!("not a valid config: {e}")))?;
        compile(raw, env)
    }
}

fn prefixed(err: ConfigError, path: &str) -> ConfigError {
    ConfigError(err.0.into_iter().map(|p| format!("{path}: {p}")).collect())
}

fn compile(raw: RawConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Settings, ConfigError> {
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

    match listen {
        Some(listen) if problems.is_empty() => Ok(Settings {
            listen,
            timeout: Duration::from_millis(timeout_ms),
            max_concurrent,
            models,
            upstreams,
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
            _ => None,
        };
        let s = Settings::from_toml(TWO, &env).unwrap();
        assert_eq!(s.listen, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(s.timeout, Duration::from_millis(1500));
        assert_eq!(s.max_concurrent, 4);
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
