//! What an operator writes: the plugin configuration JSON, as serde types. Unknown fields are refused.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    /// Request header naming the agent (default `x-core-agent`).
    pub agent_header: Option<String>,
    /// Request header selecting a version by id, drafts included, for evaluation (default `x-core-version`).
    pub version_header: Option<String>,
    /// The agent of requests that name none and whose host is not in `hosts`.
    pub default_agent: Option<String>,
    /// `:authority` (without port) → agent, for gateways that give each agent its own host name.
    #[serde(default)]
    pub hosts: BTreeMap<String, String>,
    /// Largest request or answer body the filter reads (default 1 MiB); larger ones are refused.
    pub max_body_bytes: Option<usize>,
    /// Request header naming the person a turn belongs to, recorded with its results so they can be
    /// erased with that person (default `x-core-person`).
    pub person_header: Option<String>,
    /// The Envoy cluster of the judge sidecar (default `livecheck-judge`), as the mesh names it
    /// (Istio: `outbound|8181||livecheck-judge.livecheck.svc.cluster.local`).
    pub judge_cluster: Option<String>,
    /// The `:authority` of callouts to the sidecar (default: the host and port in an Istio
    /// `outbound|PORT|SUBSET|HOST` cluster name, else the cluster name).
    pub judge_authority: Option<String>,
    /// The token the sidecar's filter endpoints require, written here (prefer `judge_token_env`).
    pub judge_token: Option<String>,
    /// The VM environment variable holding that token (Envoy `vm_config.environment_variables`,
    /// Istio `vmConfig.env`).
    pub judge_token_env: Option<String>,
    /// Models that are routers: a judged check on a turn that runs one needs its own `judge_model`.
    #[serde(default)]
    pub router_models: Vec<String>,
    /// Length a streamed answer is framed to so a cut ends it cleanly for every HTTP/1.1 SDK
    /// (opt-in: every framed answer is padded to it; default and 0: unframed).
    pub stream_frame_bytes: Option<usize>,
    /// Paths (suffixes, the query ignored) of MCP Streamable HTTP endpoints whose `tools/call`
    /// requests tool checks read (default `["/mcp"]`).
    pub mcp_paths: Option<Vec<String>>,
    /// The agents, by id. Checks are read from them per check, so one bad check is one error.
    pub agents: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgent {
    /// The version callers get when they name none.
    pub published: String,
    pub versions: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVersion {
    pub model: Option<String>,
    pub blocked_reply: Option<String>,
    pub recover_attempts: Option<u32>,
    /// How long a turn may take before no further attempt is made to recover it (default 60 s).
    pub deadline_ms: Option<u64>,
    #[serde(default)]
    pub live_checks: Vec<serde_json::Value>,
    /// Rows that deny tool calls, read per row so one bad row is one error.
    #[serde(default)]
    pub tool_checks: Vec<serde_json::Value>,
    /// The tools the model may call (names or globs); a call to any other is denied.
    pub allowed_tools: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCheck {
    pub name: String,
    pub stage: RawStage,
    pub kind: String,
    pub expected: Option<String>,
    pub pattern: Option<String>,
    pub max_match: Option<usize>,
    pub recover: Option<bool>,
    pub description: Option<String>,
    pub mode: Option<RawMode>,
    pub sample: Option<f64>,
    pub alert: Option<RawAlert>,
    pub on_error: Option<RawOnError>,
    pub judge_model: Option<String>,
    /// How long a judged check may take, in milliseconds (default 10 000).
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawStage {
    Input,
    Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawMode {
    Block,
    Background,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawOnError {
    Pass,
    Block,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAlert {
    pub failure_rate: f64,
    pub over_last: u32,
}

/// One row of a version's `tool_checks`: it denies a tool call when its test holds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToolCheck {
    pub name: String,
    /// The tool it applies to: a name or a glob (`*`, `?`); default every tool.
    pub tool: Option<String>,
    /// A plain-language condition, judged: when it holds, the call is denied.
    pub when: Option<String>,
    /// Rules over the call's arguments, decided in the filter: any that matches denies the call.
    pub args: Option<Vec<RawArgRule>>,
    /// Shown to the agent when the row denies a call (else the judge's explanation).
    pub reason: Option<String>,
    pub judge_model: Option<String>,
    /// How long the judge may take on this row (default 60 000).
    pub timeout_ms: Option<u64>,
    /// Ask the model again, told of the denial and its reason.
    pub recover: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawArgRule {
    /// JSON pointer into the call's arguments (`""`: all of them).
    pub pointer: String,
    pub not_contains: Option<String>,
    pub pattern: Option<String>,
    pub max_match: Option<usize>,
}
