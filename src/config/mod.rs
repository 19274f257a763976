//! The operator's configuration: parsed from JSON, validated, and compiled into a [`Policy`].
//!
//! Every problem is reported, each naming where it is (agent, version, check, field), so an operator
//! fixes a config in one pass. Errors never quote a pattern or forbidden text: they are logged.
//!
//! This file holds the compiled form ([`Policy`] → [`Agent`] → [`Version`] → [`Check`]) and the
//! lookups a turn makes in it; `compile` builds it from the `raw` serde types, with `live_checks`
//! compiling a version's checks and `tools` its tool-call checks. The words a check is defined in
//! (`Stage`, `Mode`, `Kind`, `Alert`) live in `crate::check`, below everything that decides.

mod compile;
mod glob;
mod live_checks;
mod raw;
mod tools;
pub mod unread;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::rc::Rc;

pub use crate::check::{Alert, Kind, Mode, Stage};
use crate::scan::RuleSet;
pub use glob::Glob;
pub use livecheck_wire::HostGlob;
pub use raw::{json_schema, schema_for};
pub use tools::{ArgRule, ToolChecks, ToolRow, ToolTest, ALLOWED_TOOLS, DEFAULT_TOOL_TIMEOUT_MS};

pub const DEFAULT_AGENT_HEADER: &str = "x-core-agent";
pub const DEFAULT_VERSION_HEADER: &str = "x-core-version";
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// The smallest frame worth having: room for a short answer and the closing events.
pub const MIN_STREAM_FRAME_BYTES: usize = 64 * 1024;
pub const DEFAULT_BLOCKED_REPLY: &str = "I can't help with that.";
pub const DEFAULT_RECOVER_ATTEMPTS: u32 = 2;
pub const DEFAULT_PERSON_HEADER: &str = "x-core-person";
pub const DEFAULT_DEADLINE_MS: u64 = 60_000;
pub const MAX_DEADLINE_MS: u64 = 3_600_000;
pub const DEFAULT_SAMPLE: f64 = 0.1;
pub const DEFAULT_JUDGE_CLUSTER: &str = "livecheck-judge";
pub const DEFAULT_MCP_PATH: &str = "/mcp";
pub const DEFAULT_JUDGE_TIMEOUT_MS: u64 = 10_000;
pub const MAX_JUDGE_TIMEOUT_MS: u64 = 120_000;

/// A validated, compiled configuration. Built once per `on_configure`, shared by every turn.
#[derive(Debug)]
pub struct Policy {
    pub agent_header: String,
    pub version_header: String,
    pub default_agent: Option<String>,
    pub hosts: BTreeMap<String, String>,
    /// The `hosts` holding a `*`, the longest fixed part first: an exact host wins over them.
    pub host_globs: Vec<(HostGlob, String)>,
    pub max_body_bytes: usize,
    /// `content-length` of a streamed answer that may be cut (opt-in; see `frame`); `None`, the
    /// default: streamed as it comes, and a cut stream is reset after its closing events.
    pub stream_frame_bytes: Option<usize>,
    /// Hold a non-streamed answer's headers until it is decided (opt-in; needs the wasm filter's
    /// `allow_on_headers_stop_iteration`): a withheld answer then carries `X-Core-Check`.
    pub hold_answer_headers: bool,
    pub judge_cluster: String,
    /// The `:authority` of callouts to the sidecar.
    pub judge_authority: String,
    /// Where the sidecar's shared token comes from, if it needs one.
    pub judge_token: Option<TokenSource>,
    pub router_models: Vec<String>,
    /// The request header naming the person a turn belongs to.
    pub person_header: Option<String>,
    /// Path suffixes of MCP endpoints: their `tools/call` requests are checked.
    pub mcp_paths: Vec<String>,
    /// What becomes of requests livecheck does not read.
    pub unread: unread::Unread,
    pub agents: HashMap<String, Agent>,
}

/// Where the token sent to the sidecar comes from: the configuration itself, or a VM environment
/// variable read when the filter is configured (`proxy`), so a secret stays out of the config.
#[derive(Clone, PartialEq, Eq)]
pub enum TokenSource {
    Literal(String),
    Env(String),
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Literal(_) => f.write_str("Literal(<redacted>)"),
            Self::Env(name) => f.debug_tuple("Env").field(name).finish(),
        }
    }
}

/// The `:authority` a callout to `cluster` carries: an Istio cluster name
/// (`outbound|PORT|SUBSET|HOST`) names the service's host and port; any other name is used as is.
pub fn authority_of_cluster(cluster: &str) -> String {
    let mut parts = cluster.split('|');
    match (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) {
        (Some("outbound" | "inbound"), Some(port), Some(_), Some(host), None)
            if !host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            format!("{host}:{port}")
        }
        _ => cluster.to_owned(),
    }
}

#[derive(Debug)]
pub struct Agent {
    pub published: Rc<Version>,
    pub versions: HashMap<String, Rc<Version>>,
}

#[derive(Debug)]
pub struct Version {
    pub agent: String,
    pub id: String,
    pub model: Option<String>,
    pub blocked_reply: String,
    pub recover_attempts: u32,
    /// How long a turn may take, from its question, before no further answer is asked for.
    pub deadline_ms: u64,
    pub checks: Vec<Check>,
    pub input_rules: RuleSet,
    pub output_rules: RuleSet,
    /// `allowed_tools` and `tool_checks`: what may deny a tool call.
    pub tools: ToolChecks,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub name: String,
    pub stage: Stage,
    pub kind: Kind,
    pub mode: Mode,
    pub recover: bool,
    pub description: Option<String>,
    /// What a retry tells the model the answer broke: the description, else the expected text,
    /// else the check's name.
    pub broken_rule: String,
    pub sample: f64,
    pub alert: Option<Alert>,
    pub on_error_pass: bool,
    pub judge_model: Option<String>,
    /// How long the judge may take on this check.
    pub timeout_ms: u64,
    /// The metric names of its results: `livecheck.<agent>.<check>.<passed|failed|errored>`.
    pub counters: [String; 3],
    /// The fixed part of its results as a turn report writes them (`check::result_head`).
    pub report_head: String,
}

impl Version {
    /// The check counted errored when what the checks `picks` read could not be read: the first of
    /// them without `on_error: "pass"`, else the first of them.
    pub fn errored_check(&self, picks: impl Fn(&Check) -> bool) -> Option<usize> {
        let checks = &self.checks;
        checks
            .iter()
            .position(|c| picks(c) && !c.on_error_pass)
            .or_else(|| checks.iter().position(&picks))
    }
}

impl Check {
    /// A blocking output check: it may stop an answer.
    pub fn blocks_output(&self) -> bool {
        self.stage == Stage::Output && self.mode == Mode::Block
    }
}

/// One problem in a configuration, and where it is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigError {
    pub agent: Option<String>,
    pub version: Option<String>,
    pub check: Option<String>,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut place = Vec::new();
        if let Some(a) = &self.agent {
            place.push(format!("agent {a:?}"));
        }
        if let Some(v) = &self.version {
            place.push(format!("version {v:?}"));
        }
        if let Some(c) = &self.check {
            place.push(format!("check {c:?}"));
        }
        if let Some(field) = &self.field {
            place.push(format!("field `{field}`"));
        }
        if place.is_empty() {
            write!(f, "config: {}", self.message)
        } else {
            write!(f, "config: {}: {}", place.join(" "), self.message)
        }
    }
}

/// A shared token the sidecar can compare (one rule for the filter and the sidecar).
pub use livecheck_wire::valid_token;

impl Policy {
    /// The names of every counter the policy's checks and tool rows can bump, in every version of
    /// every agent (a host that defines counters up front defines these).
    pub fn counter_names(&self) -> std::collections::BTreeSet<&str> {
        let mut names = std::collections::BTreeSet::new();
        for agent in self.agents.values() {
            for version in std::iter::once(&agent.published).chain(agent.versions.values()) {
                let checks = version.checks.iter().map(|c| &c.counters);
                let rows = version.tools.rows.iter().map(|r| &r.counters);
                for counters in checks
                    .chain(rows)
                    .chain(std::iter::once(&version.tools.allowed_counters))
                {
                    names.extend(
                        counters
                            .iter()
                            .map(String::as_str)
                            .filter(|n| !n.is_empty()),
                    );
                }
            }
        }
        names
    }

    /// Parses and compiles a plugin configuration; every problem found is returned.
    pub fn from_json(bytes: &[u8]) -> Result<Policy, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let policy = compile::Compiler {
            errors: &mut errors,
        }
        .policy(bytes);
        match policy {
            Some(p) if errors.is_empty() => Ok(p),
            _ => Err(errors),
        }
    }

    /// Reads a token named by `judge_token_env` from `env` (the VM's environment), so callouts
    /// carry it; an unset or unusable variable is a configuration error (never its value).
    pub fn resolve_token(
        &mut self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        let Some(TokenSource::Env(name)) = &self.judge_token else {
            return Ok(());
        };
        let problem = match env(name) {
            Some(token) if valid_token(&token) => {
                self.judge_token = Some(TokenSource::Literal(token));
                return Ok(());
            }
            Some(_) => "is set, but not to 16 to 256 visible ASCII characters",
            None => "is not set in the VM's environment (Envoy `vm_config.environment_variables`, Istio `vmConfig.env`)",
        };
        Err(ConfigError {
            agent: None,
            version: None,
            check: None,
            field: Some("judge_token_env".to_owned()),
            message: format!("{name} {problem}"),
        })
    }

    /// The token callouts to the sidecar carry, once resolved.
    pub fn judge_token(&self) -> Option<&str> {
        match &self.judge_token {
            Some(TokenSource::Literal(token)) => Some(token),
            _ => None,
        }
    }

    /// Whether any version of any agent checks tool calls.
    pub fn checks_tools(&self) -> bool {
        self.agents
            .values()
            .any(|a| a.versions.values().any(|v| v.tools.any()))
    }

    /// Whether a request goes to an MCP endpoint whose tool calls are checked: a POST whose path
    /// (the query ignored) ends with one of `mcp_paths`.
    pub fn is_mcp(&self, method: &str, path: &str) -> bool {
        method == "POST" && self.is_mcp_path(path)
    }

    /// Whether a path (the query ignored) ends with one of `mcp_paths`: an MCP endpoint, where no
    /// model generates (its `GET` stream and `DELETE` of a session included).
    pub fn is_mcp_path(&self, path: &str) -> bool {
        let path = path.split(['?', '#']).next().unwrap_or(path);
        let path = path.strip_suffix('/').unwrap_or(path);
        self.mcp_paths.iter().any(|p| path.ends_with(p.as_str()))
    }

    /// The version a request runs: the named agent (header, else host, else default) and
    /// its published version, or the version the version header names (drafts included).
    pub fn select(
        &self,
        agent: Option<&str>,
        version: Option<&str>,
        host: Option<&str>,
    ) -> Result<Rc<Version>, SelectError> {
        let host_agent = host.map(strip_port).and_then(|h| {
            self.hosts.get(h).map(String::as_str).or_else(|| {
                self.host_globs
                    .iter()
                    .find(|(glob, _)| glob.capture(h).is_some())
                    .map(|(_, agent)| agent.as_str())
            })
        });
        let name = agent
            .or(host_agent)
            .or(self.default_agent.as_deref())
            .ok_or(SelectError::NoAgent)?;
        let agent = self.agents.get(name).ok_or(SelectError::UnknownAgent)?;
        match version {
            None => Ok(Rc::clone(&agent.published)),
            Some(v) => agent
                .versions
                .get(v)
                .cloned()
                .ok_or(SelectError::UnknownVersion),
        }
    }
}

/// Why a request has no version to run; it is refused rather than let through unchecked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectError {
    NoAgent,
    UnknownAgent,
    UnknownVersion,
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NoAgent => {
                "the request names no agent and the configuration has no default agent"
            }
            Self::UnknownAgent => "the request names an agent this gateway does not know",
            Self::UnknownVersion => "the request names a version this agent does not have",
        })
    }
}

/// `host:port`, `[v6]:port` or a bare host → the host.
fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').map_or(host, |(v6, _)| v6);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests;
