//! The judge backends (`[[backends]]`): which model name goes to which OpenAI-compatible or
//! Anthropic endpoint, with what fallback key and token budget. A model name is served by one
//! backend only: an exact name wins, else the longest prefix.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use reqwest::Url;

use super::file::{Api, RawBackend};

const DEFAULT_MAX_TOKENS: u32 = 512;

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

pub(super) fn compile_backends(
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
