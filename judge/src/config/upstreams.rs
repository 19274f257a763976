//! Where recovery asks the model again (`[[upstreams]]`): a turn's `:authority` to the upstream's
//! base URL and time limit. Only what the config names: a retry never goes to a host taken from
//! the callout.
//!
//! An authority may hold one `*` standing for one or more characters within one DNS label
//! ([`HostGlob`]: `*.openai.azure.com`); an entry written without one wins. Such an upstream's
//! `base_url` may hold the same `*` in its host, filled with what the authority's `*` matched
//! (`https://*.openai.azure.com`: a retry goes to the caller's own resource), and is otherwise a
//! fixed URL.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use livecheck_wire::HostGlob;
use reqwest::Url;

use super::file::RawUpstream;
use super::secret::{secret_from, Secret};
use super::MAX_TIMEOUT_MS;

/// How long a retry may take when its upstream sets no `timeout_ms`: a whole answer, not a verdict.
const DEFAULT_RETRY_TIMEOUT_MS: u64 = 60_000;

/// A vendor API the filter's turns go to: where a retry for its authority is sent.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub name: String,
    /// Without a trailing slash; the turn's `:path` is appended as is.
    pub base_url: Url,
    pub timeout: Duration,
    /// The upstream's own key (`api_key_env`), sent as `Authorization: Bearer` in place of the
    /// caller's credentials; needed where the caller's cannot be reused (Bedrock's SigV4).
    pub api_key: Option<Secret>,
}

/// A turn's `:authority` → the upstream a retry goes to. Only what the config names: a retry is
/// never sent to a host taken from the callout.
#[derive(Debug, Clone, Default)]
pub struct Upstreams {
    /// Lower-cased authority as written: `host` or `host:port`.
    by_authority: HashMap<String, Arc<Upstream>>,
    /// Authorities holding a `*`, the longest fixed part first.
    globs: Vec<GlobUpstream>,
}

/// An upstream whose authority holds a `*`.
#[derive(Debug, Clone)]
struct GlobUpstream {
    host: HostGlob,
    port: Option<String>,
    upstream: Arc<Upstream>,
    /// The `base_url` as written, when its host holds the `*` to fill.
    fill: Option<String>,
}

impl Upstreams {
    /// The upstream for an authority, case-insensitively: an entry written with that port first,
    /// else one written without a port for that host; then, the same way, an authority holding a
    /// `*` (its `base_url`'s `*` filled with what the authority's matched).
    pub fn for_authority(&self, authority: &str) -> Option<Cow<'_, Upstream>> {
        let authority = authority.trim().to_ascii_lowercase();
        let (host, port) = split_port(&authority);
        let exact = self
            .by_authority
            .get(&authority)
            .or_else(|| port.and_then(|_| self.by_authority.get(host)));
        if let Some(upstream) = exact {
            return Some(Cow::Borrowed(&**upstream));
        }
        let matching = |with_port: bool| {
            self.globs.iter().find_map(|g| {
                let port_ok = match (&g.port, with_port) {
                    (Some(p), true) => port == Some(p.as_str()),
                    (None, false) => true,
                    _ => false,
                };
                Some((g, g.host.capture(host).filter(|_| port_ok)?))
            })
        };
        let (glob, star) = matching(true).or_else(|| matching(false))?;
        let Some(template) = &glob.fill else {
            return Some(Cow::Borrowed(&*glob.upstream));
        };
        // The star matched label characters only: the filled URL is one host's.
        let base_url = upstream_url(&template.replace('*', star)).ok()?;
        Some(Cow::Owned(Upstream {
            base_url,
            ..Upstream::clone(&glob.upstream)
        }))
    }

    pub fn is_empty(&self) -> bool {
        self.by_authority.is_empty() && self.globs.is_empty()
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

pub(super) fn compile_upstreams(
    raw: Vec<RawUpstream>,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Upstreams {
    let mut upstreams = Upstreams::default();
    // Which upstream claimed each authority first, to name both in a clash.
    let mut claimed: HashMap<String, String> = HashMap::new();
    for (i, u) in raw.into_iter().enumerate() {
        let name = u.name.unwrap_or_else(|| format!("upstreams[{i}]"));
        let at = format!("upstream {name:?}");
        let authority = u.authority.trim().to_ascii_lowercase();
        let mut ok = true;
        let (host, port) = split_port(&authority);
        let glob = match HostGlob::parse(host) {
            Ok(glob) => glob,
            Err(why) => {
                problems.push(format!("{at}: authority {:?} {why}", u.authority));
                ok = false;
                None
            }
        };
        let authority_ok = match &glob {
            // A glob is checked as the host its `*` could stand for.
            Some(_) => valid_authority(&authority.replacen('*', "x", 1)),
            None => valid_authority(&authority),
        };
        if ok && !authority_ok {
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
        let (base_url, fill) = match base_url_fill(&u.base_url, glob.is_some()) {
            Ok(fill) => {
                // A base URL to fill is checked as the URL its `*` could be filled into.
                let url = fill
                    .as_ref()
                    .map_or_else(|| u.base_url.clone(), |t| t.replacen('*', "x", 1));
                match upstream_url(&url) {
                    Ok(url) => (Some(url), fill),
                    Err(why) => {
                        problems.push(format!("{at}: base_url {:?} {why}", u.base_url));
                        (None, None)
                    }
                }
            }
            Err(why) => {
                problems.push(format!("{at}: base_url {:?} {why}", u.base_url));
                (None, None)
            }
        };
        let timeout_ms = u.timeout_ms.unwrap_or(DEFAULT_RETRY_TIMEOUT_MS);
        if !(1..=MAX_TIMEOUT_MS).contains(&timeout_ms) {
            problems.push(format!(
                "{at}: timeout_ms must be between 1 and {MAX_TIMEOUT_MS}, not {timeout_ms}"
            ));
            ok = false;
        }
        let api_key = u.api_key_env.as_deref().and_then(|var| {
            let key = secret_from(env, var, &format!("{at}: api_key_env"), problems);
            ok &= key.is_some();
            key
        });
        let Some(base_url) = base_url.filter(|_| ok) else {
            continue;
        };
        let port = port.map(str::to_owned);
        claimed.insert(authority.clone(), name.clone());
        let upstream = Arc::new(Upstream {
            name,
            base_url,
            timeout: Duration::from_millis(timeout_ms),
            api_key,
        });
        match glob {
            Some(host) => upstreams.globs.push(GlobUpstream {
                host,
                port,
                upstream,
                fill,
            }),
            None => {
                upstreams.by_authority.insert(authority, upstream);
            }
        }
    }
    // Among the globs an authority matches, the one that fixes the most characters wins.
    upstreams
        .globs
        .sort_by_key(|g| std::cmp::Reverse(g.host.fixed_len()));
    upstreams
}

/// A `base_url` holding a `*`: its template when the `*` stands in the host of a glob upstream
/// (`Ok(Some)`), an error anywhere else; `Ok(None)` for a fixed URL.
fn base_url_fill(base_url: &str, glob: bool) -> Result<Option<String>, &'static str> {
    if !base_url.contains('*') {
        return Ok(None);
    }
    if !glob {
        return Err("may hold a `*` only when the authority holds one");
    }
    let host = base_url
        .split_once("://")
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(rest))
        .unwrap_or_default();
    if base_url.matches('*').count() > 1 || !host.contains('*') {
        return Err("may hold one `*`, in its host, filled with what the authority's `*` matched");
    }
    Ok(Some(base_url.to_owned()))
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
