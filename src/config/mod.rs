//! The operator's configuration: parsed from JSON, validated, and compiled into a [`Policy`].
//!
//! Every problem is reported, each naming where it is (agent, version, check, field), so an operator
//! fixes a config in one pass. Errors never quote a pattern or forbidden text: they are logged.

mod raw;
mod tools;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::rc::Rc;

use serde::de::DeserializeOwned;

pub use crate::check::{Alert, Kind, Mode, Stage};
use crate::pattern::{compile_forbidden_text, compile_pattern, Rule, MAX_MATCH_LIMIT};
use crate::scan::{RuleSet, RuleSetError};
pub use raw::{json_schema, schema_for};
use raw::{RawAgent, RawCheck, RawMode, RawOnError, RawPolicy, RawStage, RawVersion};
pub use tools::{
    ArgRule, Glob, ToolChecks, ToolRow, ToolTest, ALLOWED_TOOLS, DEFAULT_TOOL_TIMEOUT_MS,
};

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

/// Where the compiler is, so each error can say so.
#[derive(Clone, Default)]
struct At {
    agent: Option<String>,
    version: Option<String>,
    check: Option<String>,
}

impl At {
    fn error(&self, field: Option<&str>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            agent: self.agent.clone(),
            version: self.version.clone(),
            check: self.check.clone(),
            field: field.map(str::to_owned),
            message: message.into(),
        }
    }
}

/// A shared token the sidecar can compare (one rule for the filter and the sidecar).
pub use livecheck_wire::valid_token;

impl Policy {
    /// Parses and compiles a plugin configuration; every problem found is returned.
    pub fn from_json(bytes: &[u8]) -> Result<Policy, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let policy = Compiler {
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
        let path = path.split(['?', '#']).next().unwrap_or(path);
        let path = path.strip_suffix('/').unwrap_or(path);
        method == "POST" && self.mcp_paths.iter().any(|p| path.ends_with(p.as_str()))
    }

    /// The version a request runs: the named agent (header, else host, else default) and
    /// its published version, or the version the version header names (drafts included).
    pub fn select(
        &self,
        agent: Option<&str>,
        version: Option<&str>,
        host: Option<&str>,
    ) -> Result<Rc<Version>, SelectError> {
        let host_agent = host.and_then(|h| self.hosts.get(strip_port(h)).map(String::as_str));
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

/// Names appear in logs and in the `X-Core-Check` header as an RFC 8941 string: keep them plain.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

const NAME_RULE: &str = "must be 1 to 64 characters of letters, digits, `-`, `_`, `.` or `:`";

struct Compiler<'e> {
    errors: &'e mut Vec<ConfigError>,
}

impl Compiler<'_> {
    fn parse<T: DeserializeOwned>(&mut self, at: &At, value: serde_json::Value) -> Option<T> {
        match serde_path_to_error::deserialize(value) {
            Ok(v) => Some(v),
            Err(e) => {
                let path = e.path().to_string();
                let field = (path != ".").then_some(path.as_str());
                self.errors.push(at.error(field, serde_reason(e.inner())));
                None
            }
        }
    }

    fn policy(&mut self, bytes: &[u8]) -> Option<Policy> {
        let at = At::default();
        let value: serde_json::Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                self.errors.push(at.error(
                    None,
                    format!("not valid JSON (line {}, column {})", e.line(), e.column()),
                ));
                return None;
            }
        };
        let raw: RawPolicy = self.parse(&at, value)?;
        let mut agents = HashMap::new();
        for (id, value) in raw.agents {
            let at = At {
                agent: Some(id.clone()),
                ..At::default()
            };
            if !valid_name(&id) {
                self.errors
                    .push(at.error(None, format!("agent id {NAME_RULE}")));
            }
            if let Some(agent) = self.agent(&at, &id, value) {
                agents.insert(id, agent);
            }
        }
        if agents.is_empty() && self.errors.is_empty() {
            self.errors
                .push(at.error(Some("agents"), "at least one agent is needed"));
        }
        if let Some(default) = &raw.default_agent {
            if !agents.contains_key(default) && self.errors.is_empty() {
                self.errors
                    .push(at.error(Some("default_agent"), "names no configured agent"));
            }
        }
        for (host, agent) in &raw.hosts {
            if !agents.contains_key(agent) && self.errors.is_empty() {
                self.errors.push(at.error(
                    Some("hosts"),
                    format!("host {host:?} maps to no configured agent"),
                ));
            }
        }
        let agent_header =
            self.header_name(&at, "agent_header", raw.agent_header, DEFAULT_AGENT_HEADER);
        let version_header = self.header_name(
            &at,
            "version_header",
            raw.version_header,
            DEFAULT_VERSION_HEADER,
        );
        let person_header = Some(self.header_name(
            &at,
            "person_header",
            raw.person_header,
            DEFAULT_PERSON_HEADER,
        ));
        let max_body_bytes = raw.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES);
        if max_body_bytes == 0 {
            self.errors
                .push(at.error(Some("max_body_bytes"), "must be above 0"));
        }
        let stream_frame_bytes = match raw.stream_frame_bytes {
            None | Some(0) => None,
            Some(n) if n < MIN_STREAM_FRAME_BYTES => {
                self.errors.push(at.error(
                    Some("stream_frame_bytes"),
                    format!("must be 0 (unframed) or at least {MIN_STREAM_FRAME_BYTES}"),
                ));
                None
            }
            Some(n) => Some(n),
        };
        let mcp_paths = raw
            .mcp_paths
            .unwrap_or_else(|| vec![DEFAULT_MCP_PATH.to_owned()]);
        for (i, path) in mcp_paths.iter().enumerate() {
            let plain = path.len() > 1
                && path.starts_with('/')
                && !path.ends_with('/')
                && path
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && !b"?#".contains(&b));
            if !plain {
                self.errors.push(at.error(
                    Some(&format!("mcp_paths[{i}]")),
                    "must be a path such as \"/mcp\": starting with `/`, not ending with one, no query",
                ));
            }
        }
        let judge_cluster = raw
            .judge_cluster
            .unwrap_or_else(|| DEFAULT_JUDGE_CLUSTER.to_owned());
        let cluster_ok =
            !judge_cluster.is_empty() && judge_cluster.bytes().all(|b| b.is_ascii_graphic());
        if !cluster_ok {
            self.errors.push(at.error(
                Some("judge_cluster"),
                "must be an Envoy cluster name: printable ASCII without spaces",
            ));
        }
        let judge_authority = raw
            .judge_authority
            .unwrap_or_else(|| authority_of_cluster(&judge_cluster));
        let authority_ok = !judge_authority.is_empty()
            && judge_authority
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~:[]".contains(&b));
        if cluster_ok && !authority_ok {
            self.errors.push(at.error(
                Some("judge_authority"),
                "must be a host and optional port, such as \"livecheck-judge.livecheck:8181\" (set it when judge_cluster is not one)",
            ));
        }
        let judge_token = match (raw.judge_token, raw.judge_token_env) {
            (Some(_), Some(_)) => {
                self.errors.push(at.error(
                    Some("judge_token"),
                    "give either judge_token or judge_token_env, not both",
                ));
                None
            }
            (Some(token), None) => {
                if !valid_token(&token) {
                    self.errors.push(at.error(
                        Some("judge_token"),
                        "must be 16 to 256 visible ASCII characters",
                    ));
                }
                Some(TokenSource::Literal(token))
            }
            (None, Some(name)) => {
                let plain = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !plain {
                    self.errors.push(at.error(
                        Some("judge_token_env"),
                        "must name an environment variable (letters, digits, `_`)",
                    ));
                }
                Some(TokenSource::Env(name))
            }
            (None, None) => None,
        };
        Some(Policy {
            judge_cluster,
            judge_authority,
            judge_token,
            mcp_paths,
            agent_header,
            version_header,
            default_agent: raw.default_agent,
            hosts: raw.hosts,
            max_body_bytes,
            stream_frame_bytes,
            hold_answer_headers: raw.hold_answer_headers.unwrap_or(false),
            router_models: raw.router_models,
            person_header,
            agents,
        })
    }

    fn header_name(
        &mut self,
        at: &At,
        field: &str,
        value: Option<String>,
        default: &str,
    ) -> String {
        let name = value
            .unwrap_or_else(|| default.to_owned())
            .to_ascii_lowercase();
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            self.errors
                .push(at.error(Some(field), "is not a valid HTTP header name"));
        }
        name
    }

    fn agent(&mut self, at: &At, id: &str, value: serde_json::Value) -> Option<Agent> {
        let raw: RawAgent = self.parse(at, value)?;
        let mut versions = HashMap::new();
        for (vid, value) in raw.versions {
            let at = At {
                version: Some(vid.clone()),
                ..at.clone()
            };
            if !valid_name(&vid) {
                self.errors
                    .push(at.error(None, format!("version id {NAME_RULE}")));
            }
            if let Some(v) = self.version(&at, id, &vid, value) {
                versions.insert(vid, Rc::new(v));
            }
        }
        let published = versions.get(&raw.published).cloned();
        if published.is_none() && self.errors.is_empty() {
            self.errors
                .push(at.error(Some("published"), "names no version of this agent"));
        }
        Some(Agent {
            published: published?,
            versions,
        })
    }

    fn version(
        &mut self,
        at: &At,
        agent: &str,
        id: &str,
        value: serde_json::Value,
    ) -> Option<Version> {
        let raw: RawVersion = self.parse(at, value)?;
        let recover_attempts = raw.recover_attempts.unwrap_or(DEFAULT_RECOVER_ATTEMPTS);
        if !(1..=3).contains(&recover_attempts) {
            self.errors.push(at.error(
                Some("recover_attempts"),
                format!("is {recover_attempts}; it must be 1 to 3"),
            ));
        }
        let deadline_ms = raw.deadline_ms.unwrap_or(DEFAULT_DEADLINE_MS);
        if !(1..=MAX_DEADLINE_MS).contains(&deadline_ms) {
            self.errors.push(at.error(
                Some("deadline_ms"),
                format!("is {deadline_ms}; it must be 1 to {MAX_DEADLINE_MS}"),
            ));
        }
        let blocked_reply = raw
            .blocked_reply
            .unwrap_or_else(|| DEFAULT_BLOCKED_REPLY.to_owned());
        if blocked_reply.trim().is_empty() {
            self.errors
                .push(at.error(Some("blocked_reply"), "must not be empty"));
        }
        let mut checks: Vec<Check> = Vec::new();
        let mut input = Vec::new();
        let mut output = Vec::new();
        for (i, value) in raw.live_checks.into_iter().enumerate() {
            let name = value
                .get("name")
                .and_then(|n| n.as_str())
                .map_or_else(|| format!("#{}", i + 1), str::to_owned);
            let at = At {
                check: Some(name),
                ..at.clone()
            };
            let Some((check, rule)) = self.check(&at, value) else {
                continue;
            };
            if checks.iter().any(|c| c.name == check.name) {
                self.errors
                    .push(at.error(Some("name"), "is used by another check of this version"));
                continue;
            }
            if let Some(rule) = rule {
                match check.stage {
                    Stage::Input => input.push((checks.len(), rule)),
                    Stage::Output => output.push((checks.len(), rule)),
                }
            }
            checks.push(check);
        }
        for check in &mut checks {
            check.counters = ["passed", "failed", "errored"]
                .map(|outcome| format!("livecheck.{agent}.{}.{outcome}", check.name));
            check.report_head = crate::check::result_head(
                &check.name,
                check.stage,
                &check.kind,
                check.alert.as_ref(),
            );
        }
        // Only the output stage is read as a stream.
        let input_rules = self.rule_set(at, RuleSet::new(&input))?;
        let output_rules = self.rule_set(at, RuleSet::streamed(&output))?;
        let taken: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
        let tools = self.tool_checks(at, agent, raw.allowed_tools, raw.tool_checks, &taken);
        Some(Version {
            agent: agent.to_owned(),
            id: id.to_owned(),
            model: raw.model,
            blocked_reply,
            recover_attempts,
            deadline_ms,
            checks,
            input_rules,
            output_rules,
            tools,
        })
    }

    fn rule_set(&mut self, at: &At, compiled: Result<RuleSet, RuleSetError>) -> Option<RuleSet> {
        match compiled {
            Ok(set) => Some(set),
            Err(e) => {
                self.errors
                    .push(at.error(Some("live_checks"), e.to_string()));
                None
            }
        }
    }

    fn check(&mut self, at: &At, value: serde_json::Value) -> Option<(Check, Option<Rule>)> {
        let raw: RawCheck = self.parse(at, value)?;
        let before = self.errors.len();
        let mut fail =
            |field: &str, message: String| self.errors.push(at.error(Some(field), message));
        if !valid_name(&raw.name) {
            fail("name", NAME_RULE.to_owned());
        }
        let stage = match raw.stage {
            RawStage::Input => Stage::Input,
            RawStage::Output => Stage::Output,
        };
        let mode = match raw.mode.unwrap_or(RawMode::Block) {
            RawMode::Block => Mode::Block,
            RawMode::Background => Mode::Background,
        };
        let kind = match raw.kind.as_str() {
            "not_contains" => Some(Kind::NotContains),
            "matches_pattern" => Some(Kind::MatchesPattern),
            "polite_tone" => Some(Kind::PoliteTone),
            "correct_format" => Some(Kind::CorrectFormat),
            "no_made_up_facts" => Some(Kind::NoMadeUpFacts),
            "custom_rule" => match &raw.expected {
                Some(rule) if !rule.trim().is_empty() => {
                    Some(Kind::CustomRule { rule: rule.clone() })
                }
                _ => {
                    fail(
                        "expected",
                        "a custom_rule check needs its rule in `expected`".to_owned(),
                    );
                    None
                }
            },
            "response_time" => {
                fail("kind", "response_time is not yet supported".to_owned());
                None
            }
            _ => {
                fail(
                    "kind",
                    "is not a known kind (not_contains, matches_pattern, polite_tone, correct_format, no_made_up_facts, custom_rule)"
                        .to_owned(),
                );
                None
            }
        };
        let mut rule = None;
        if let Some(kind) = &kind {
            let judged = !kind.is_rule();
            match kind {
                Kind::NotContains => match raw.expected.as_deref().map(compile_forbidden_text) {
                    None => fail(
                        "expected",
                        "a not_contains check needs `expected`".to_owned(),
                    ),
                    Some(Err(e)) => fail("expected", e.to_string()),
                    Some(Ok(r)) => rule = Some(r),
                },
                Kind::MatchesPattern => {
                    let max_match = raw.max_match.unwrap_or(MAX_MATCH_LIMIT);
                    match raw
                        .pattern
                        .as_deref()
                        .map(|p| compile_pattern(p, max_match))
                    {
                        None => fail(
                            "pattern",
                            "a matches_pattern check needs `pattern`".to_owned(),
                        ),
                        Some(Err(e @ crate::pattern::PatternError::MaxMatchOutOfRange { .. })) => {
                            fail("max_match", e.to_string())
                        }
                        Some(Err(e)) => fail("pattern", e.to_string()),
                        Some(Ok(r)) => rule = Some(r),
                    }
                }
                _ => {}
            }
            if raw.pattern.is_some() && *kind != Kind::MatchesPattern {
                fail(
                    "pattern",
                    "only a matches_pattern check has a pattern".to_owned(),
                );
            }
            if raw.max_match.is_some() && *kind != Kind::MatchesPattern {
                fail(
                    "max_match",
                    "only a matches_pattern check has max_match".to_owned(),
                );
            }
            if raw.expected.is_some()
                && matches!(
                    kind,
                    Kind::MatchesPattern
                        | Kind::PoliteTone
                        | Kind::CorrectFormat
                        | Kind::NoMadeUpFacts
                )
            {
                fail(
                    "expected",
                    format!("a {} check has no `expected`", kind.as_str()),
                );
            }
            if mode == Mode::Background && !(judged && stage == Stage::Output) {
                fail(
                    "mode",
                    "only a judged output check can run in the background".to_owned(),
                );
            }
            if !judged && raw.on_error.is_some() {
                fail(
                    "on_error",
                    "a rule check always decides; on_error applies to judged checks".to_owned(),
                );
            }
            if !judged && raw.judge_model.is_some() {
                fail(
                    "judge_model",
                    "only a judged check has a judge model".to_owned(),
                );
            }
        }
        if raw.recover == Some(true) && stage == Stage::Input {
            fail(
                "recover",
                "an input check cannot ask the model again; recovery is for output checks"
                    .to_owned(),
            );
        }
        if raw.recover == Some(true) && mode == Mode::Background {
            fail(
                "recover",
                "a background check never touches the turn, so it cannot recover".to_owned(),
            );
        }
        if raw.sample.is_some() && mode != Mode::Background {
            fail("sample", "only a background check is sampled".to_owned());
        }
        let sample = raw.sample.unwrap_or(DEFAULT_SAMPLE);
        if !(sample > 0.0 && sample <= 1.0) {
            fail("sample", "must be above 0 and at most 1".to_owned());
        }
        if let Some(alert) = raw.alert {
            if !(alert.failure_rate > 0.0 && alert.failure_rate <= 1.0) {
                fail(
                    "alert.failure_rate",
                    "must be above 0 and at most 1".to_owned(),
                );
            }
            if !(1..=1000).contains(&alert.over_last) {
                fail("alert.over_last", "must be 1 to 1000".to_owned());
            }
        }
        let timeout_ms = raw.timeout_ms.unwrap_or(DEFAULT_JUDGE_TIMEOUT_MS);
        if !(1..=MAX_JUDGE_TIMEOUT_MS).contains(&timeout_ms) {
            fail(
                "timeout_ms",
                format!("must be 1 to {MAX_JUDGE_TIMEOUT_MS} milliseconds"),
            );
        }
        if let Some(model) = &raw.judge_model {
            if model.trim().is_empty() {
                fail("judge_model", "must not be empty".to_owned());
            }
        }
        if self.errors.len() > before {
            return None;
        }
        let kind = kind?;
        let broken_rule = raw
            .description
            .clone()
            .or_else(|| raw.expected.clone())
            .unwrap_or_else(|| raw.name.clone());
        Some((
            Check {
                broken_rule,
                name: raw.name,
                stage,
                kind,
                mode,
                recover: raw.recover.unwrap_or(false),
                description: raw.description,
                sample,
                alert: raw.alert.map(|a| Alert {
                    failure_rate: a.failure_rate,
                    over_last: a.over_last,
                }),
                on_error_pass: raw.on_error == Some(RawOnError::Pass),
                judge_model: raw.judge_model,
                timeout_ms,
                counters: Default::default(),
                report_head: String::new(),
            },
            rule,
        ))
    }
}

/// serde's message without the value it may quote: "invalid type: string \"…\", expected u32"
/// becomes "invalid type, expected u32"; an unknown field or variant keeps the list of allowed names.
fn serde_reason(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    let quoting = [
        "invalid type",
        "invalid value",
        "unknown variant",
        "invalid length",
    ];
    let Some(head) = quoting.iter().find(|p| msg.starts_with(*p)) else {
        return msg;
    };
    match msg.split_once(", expected") {
        Some((_, expected)) => format!("{head}, expected{expected}"),
        None => (*head).to_owned(),
    }
}

#[cfg(test)]
mod tests;
