//! Compiling a configuration: the JSON parsed into the raw types (`raw`), each value validated
//! where it is, and the whole built into a [`Policy`] with its agents and versions. The rooms beside
//! this one compile a version's parts: `live_checks` its checks, `tools` its tool-call checks.
//!
//! Every problem is collected (not the first only), each saying where it is ([`At`]).

use std::collections::HashMap;
use std::rc::Rc;

use livecheck_wire::HostGlob;
use serde::de::DeserializeOwned;

use crate::scan::{RuleSet, RuleSetError};

use super::glob::Glob;
use super::raw::{RawAgent, RawPolicy, RawUnread, RawVersion};
use super::unread::{self, Unread, DEFAULT_PASS_PATHS};
use super::{
    authority_of_cluster, valid_token, Agent, Check, ConfigError, Policy, Stage, TokenSource,
    Version, DEFAULT_AGENT_HEADER, DEFAULT_BLOCKED_REPLY, DEFAULT_DEADLINE_MS,
    DEFAULT_JUDGE_CLUSTER, DEFAULT_MAX_BODY_BYTES, DEFAULT_MCP_PATH, DEFAULT_PERSON_HEADER,
    DEFAULT_RECOVER_ATTEMPTS, DEFAULT_VERSION_HEADER, MAX_DEADLINE_MS, MIN_STREAM_FRAME_BYTES,
};

/// Where the compiler is, so each error can say so.
#[derive(Clone, Default)]
pub(super) struct At {
    pub(super) agent: Option<String>,
    pub(super) version: Option<String>,
    pub(super) check: Option<String>,
}

impl At {
    pub(super) fn error(&self, field: Option<&str>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            agent: self.agent.clone(),
            version: self.version.clone(),
            check: self.check.clone(),
            field: field.map(str::to_owned),
            message: message.into(),
        }
    }
}

/// Names appear in logs and in the `X-Core-Check` header as an RFC 8941 string: keep them plain.
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

pub(super) const NAME_RULE: &str =
    "must be 1 to 64 characters of letters, digits, `-`, `_`, `.` or `:`";

pub(super) struct Compiler<'e> {
    pub(super) errors: &'e mut Vec<ConfigError>,
}

impl Compiler<'_> {
    pub(super) fn parse<T: DeserializeOwned>(
        &mut self,
        at: &At,
        value: serde_json::Value,
    ) -> Option<T> {
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

    pub(super) fn policy(&mut self, bytes: &[u8]) -> Option<Policy> {
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
        let mut host_globs = Vec::new();
        for (host, agent) in &raw.hosts {
            match HostGlob::parse(host) {
                Ok(Some(glob)) => host_globs.push((glob, agent.clone())),
                Ok(None) => {}
                Err(why) => self
                    .errors
                    .push(at.error(Some("hosts"), format!("host {host:?} {why}"))),
            }
            if !agents.contains_key(agent) && self.errors.is_empty() {
                self.errors.push(at.error(
                    Some("hosts"),
                    format!("host {host:?} maps to no configured agent"),
                ));
            }
        }
        // Among the globs a host matches, the one that fixes the most characters wins.
        host_globs.sort_by_key(|(glob, _)| std::cmp::Reverse(glob.fixed_len()));
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
        let unread = self.unread(&at, raw.unread, raw.pass_paths);
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
            unread,
            agent_header,
            version_header,
            default_agent: raw.default_agent,
            hosts: raw.hosts,
            host_globs,
            max_body_bytes,
            stream_frame_bytes,
            hold_answer_headers: raw.hold_answer_headers.unwrap_or(false),
            router_models: raw.router_models,
            person_header,
            agents,
        })
    }

    /// `unread` and `pass_paths` compiled: the default list when none is given.
    fn unread(
        &mut self,
        at: &At,
        mode: Option<RawUnread>,
        pass_paths: Option<Vec<String>>,
    ) -> Unread {
        let pass_paths = pass_paths
            .unwrap_or_else(|| DEFAULT_PASS_PATHS.iter().map(|p| (*p).to_owned()).collect());
        for (i, glob) in pass_paths.iter().enumerate() {
            if !unread::valid_glob(glob) {
                self.errors.push(at.error(
                    Some(&format!("pass_paths[{i}]")),
                    "must be a path glob such as \"*/v1/messages/count_tokens\": starting with `/` or `*`, at most 256 visible ASCII characters, no `#`",
                ));
            }
        }
        Unread {
            mode: match mode {
                None | Some(RawUnread::Refuse) => unread::Mode::Refuse,
                Some(RawUnread::Pass) => unread::Mode::Pass,
            },
            pass_paths: pass_paths.iter().map(|g| Glob::new(g)).collect(),
        }
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
