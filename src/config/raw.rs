//! What an operator writes: the plugin configuration JSON, as serde types. Unknown fields are refused.
//!
//! The same types give the configuration's JSON Schema (`livecheck schema`, checked in as
//! `schema/livecheck-config.schema.json`), for editors and CI. Its constraints repeat those of the
//! compiler (`mod.rs`, `tools.rs`) that a schema can state, at most as strict: the compiler decides.

use std::collections::BTreeMap;

use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use schemars::{JsonSchema, Schema};
use serde::Deserialize;

use super::MIN_STREAM_FRAME_BYTES;
use crate::pattern::{MAX_MATCH_LIMIT, MAX_PATTERN_LEN};

/// Agent, version, check and tool-check names (the compiler's `valid_name`).
const NAME: &str = "^[A-Za-z0-9_.:-]{1,64}$";
/// An HTTP header name (a token).
const HEADER: &str = "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$";
/// A tool name or glob (`valid_glob`).
const GLOB: &str = "^[A-Za-z0-9_.:/*?-]{1,128}$";
/// The check kinds `Compiler::check` knows.
const KINDS: [&str; 6] = [
    "not_contains",
    "matches_pattern",
    "polite_tone",
    "correct_format",
    "no_made_up_facts",
    "custom_rule",
];

/// The filter's plugin configuration: the JSON in the wasm filter's `configuration` (a
/// `google.protobuf.StringValue`). A request names its agent, which runs its published version (or
/// the version the version header names) and that version's checks.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "livecheck plugin configuration")]
pub struct RawPolicy {
    /// The JSON Schema this file follows, for editors (e.g. `schema/livecheck-config.schema.json`
    /// of the livecheck repository); ignored by the filter.
    #[serde(rename = "$schema")]
    #[allow(dead_code)]
    pub schema: Option<String>,
    /// Request header naming the agent (default `x-core-agent`).
    #[schemars(pattern(HEADER))]
    pub agent_header: Option<String>,
    /// Request header selecting a version by id, drafts included, for evaluation (default `x-core-version`).
    #[schemars(pattern(HEADER))]
    pub version_header: Option<String>,
    /// The agent of requests that name none and whose host is not in `hosts`.
    pub default_agent: Option<String>,
    /// `:authority` (without port) → agent, for gateways that give each agent its own host name.
    /// A host may hold one `*`, standing for one or more characters within one DNS label
    /// (`*.openai.azure.com`, `*-aiplatform.googleapis.com`, `bedrock-runtime.*.amazonaws.com`);
    /// a host written out wins over one with a `*`, and of several with a `*` the one fixing the
    /// most characters.
    #[serde(default)]
    pub hosts: BTreeMap<String, String>,
    /// Largest request or answer body the filter reads (default 1 MiB); larger ones are refused.
    #[schemars(range(min = 1))]
    pub max_body_bytes: Option<usize>,
    /// Request header naming the person a turn belongs to, recorded with its results so they can be
    /// erased with that person (default `x-core-person`).
    #[schemars(pattern(HEADER))]
    pub person_header: Option<String>,
    /// The Envoy cluster of the judge sidecar (default `livecheck-judge`), as the mesh names it
    /// (Istio: `outbound|8181||livecheck-judge.livecheck.svc.cluster.local`).
    #[schemars(pattern("^[!-~]+$"))]
    pub judge_cluster: Option<String>,
    /// The `:authority` of callouts to the sidecar (default: the host and port in an Istio
    /// `outbound|PORT|SUBSET|HOST` cluster name, else the cluster name).
    #[schemars(pattern(r"^[A-Za-z0-9._~:\[\]-]+$"))]
    pub judge_authority: Option<String>,
    /// The token the sidecar's filter endpoints require, written here (prefer `judge_token_env`);
    /// 16 to 256 visible ASCII characters.
    #[schemars(pattern("^[!-~]{16,256}$"))]
    pub judge_token: Option<String>,
    /// The VM environment variable holding that token (Envoy `vm_config.environment_variables`,
    /// Istio `vmConfig.env`).
    #[schemars(pattern("^[A-Za-z0-9_]+$"))]
    pub judge_token_env: Option<String>,
    /// Models that are routers: a judged check on a turn that runs one needs its own `judge_model`.
    #[serde(default)]
    pub router_models: Vec<String>,
    /// Length a streamed answer is framed to so a cut ends it cleanly for every HTTP/1.1 SDK
    /// (opt-in: every framed answer is padded to it; default and 0: unframed; else at least 64 KiB).
    #[schemars(extend("anyOf" = [{"const": 0}, {"minimum": MIN_STREAM_FRAME_BYTES}]))]
    pub stream_frame_bytes: Option<usize>,
    /// Hold a non-streamed answer's headers while its checks read it (default false), so a withheld
    /// answer carries `X-Core-Check` and the length of what replaced it. Only with the
    /// wasm filter's `allow_on_headers_stop_iteration: true` in Envoy's own config (Istio's
    /// `WasmPlugin` and Envoy Gateway cannot set it): without it Envoy gives the filter no body
    /// behind held headers, and each such answer waits a second before it goes on unheld.
    pub hold_answer_headers: Option<bool>,
    /// Paths (suffixes, the query ignored) of MCP Streamable HTTP endpoints whose `tools/call`
    /// requests tool checks read (default `["/mcp"]`): each starts with `/`, does not end with one,
    /// and has no query.
    // Visible ASCII but `#` and `?` (and `/` last): ranges `$`..`>` and `@`..`~` skip both.
    #[schemars(inner(pattern(r#"^/[!"$->@-~]*[!"$-.0->@-~]$"#)))]
    pub mcp_paths: Option<Vec<String>>,
    /// What becomes of a request livecheck does not read as a turn (a `POST` to a path it does not
    /// check, a WebSocket upgrade) that is not a `GET`, `HEAD` or `OPTIONS` and matches no
    /// `pass_paths`: `"refuse"` (the default: answered 403 in the vendor's error shape, naming the
    /// path) or `"pass"` (forwarded unchecked, counted; `livecheck lint` warns).
    pub unread: Option<RawUnread>,
    /// Globs of paths (the query ignored; `*` any run of characters, `?` one) that pass unread:
    /// endpoints that make no model generate. Replaces the default list (token counting and
    /// cancelling: see the README). Each starts with `/` or `*`, visible ASCII without `#`.
    #[schemars(inner(pattern(r#"^[/*][!"$-~]{0,255}$"#)))]
    pub pass_paths: Option<Vec<String>>,
    /// The agents, by id (letters, digits, `-`, `_`, `.`, `:`).
    // Read per check (as `serde_json::Value`), so one bad check is one error; the schema names the
    // type it is read as.
    #[schemars(with = "BTreeMap<String, RawAgent>")]
    #[schemars(extend("propertyNames" = {"pattern": NAME}, "minProperties" = 1))]
    pub agents: BTreeMap<String, serde_json::Value>,
}

/// What becomes of a request livecheck does not read (`unread`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RawUnread {
    /// Answered 403 in the vendor's error shape (the default: fail closed).
    Refuse,
    /// Forwarded unchecked, counted in `livecheck.unread.forwarded`.
    Pass,
}

/// An agent: its versions by id, and the one callers get.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Agent")]
pub struct RawAgent {
    /// The version callers get when they name none.
    pub published: String,
    /// The versions, by id; the others are drafts, selected by the version header.
    #[schemars(with = "BTreeMap<String, RawVersion>")]
    #[schemars(extend("propertyNames" = {"pattern": NAME}, "minProperties" = 1))]
    pub versions: BTreeMap<String, serde_json::Value>,
}

/// A version of an agent: its model, what a refused turn is told, and its checks.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Version")]
pub struct RawVersion {
    /// The model this version runs (a judged check's judge unless it names its own).
    pub model: Option<String>,
    /// What a refused turn is told (default "I can't help with that.").
    #[schemars(length(min = 1))]
    pub blocked_reply: Option<String>,
    /// How many times a failed answer is asked for again (1 to 3, default 2).
    #[schemars(range(min = 1, max = 3))]
    pub recover_attempts: Option<u32>,
    /// How long a turn may take before no further attempt is made to recover it (default 60 s).
    #[schemars(range(min = 1, max = super::MAX_DEADLINE_MS))]
    pub deadline_ms: Option<u64>,
    /// The checks of questions and answers.
    #[serde(default)]
    #[schemars(with = "Vec<RawCheck>")]
    pub live_checks: Vec<serde_json::Value>,
    /// Rows that deny tool calls.
    #[serde(default)]
    #[schemars(with = "Vec<RawToolCheck>")]
    pub tool_checks: Vec<serde_json::Value>,
    /// The tools the model may call (names or globs); a call to any other is denied.
    #[schemars(inner(pattern(GLOB)))]
    pub allowed_tools: Option<Vec<String>>,
}

/// A live check of the question (`input`) or the answer (`output`). Rule kinds (`not_contains`,
/// `matches_pattern`) are decided in the filter; the others by a judge model through the sidecar.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Check")]
pub struct RawCheck {
    /// Unique among the version's checks and tool checks; shown in `X-Core-Check` and metrics.
    #[schemars(pattern(NAME))]
    pub name: String,
    /// `input` checks the question before it goes upstream, `output` the answer.
    pub stage: RawStage,
    /// `not_contains` (the `expected` text, any case), `matches_pattern` (an RE2 `pattern`),
    /// `polite_tone`, `correct_format`, `no_made_up_facts`, `custom_rule` (the rule in `expected`).
    #[schemars(extend("enum" = KINDS))]
    pub kind: String,
    /// The forbidden text of `not_contains` (at most 200 characters), or the rule of `custom_rule`.
    #[schemars(length(min = 1))]
    pub expected: Option<String>,
    /// `matches_pattern` only: RE2 syntax with a bounded longest match of at most `max_match`
    /// characters, matching neither the empty text nor nothing.
    #[schemars(length(min = 1, max = MAX_PATTERN_LEN))]
    pub pattern: Option<String>,
    /// `matches_pattern` only: the pattern's longest match in characters (default and at most 200).
    #[schemars(range(min = 1, max = MAX_MATCH_LIMIT))]
    pub max_match: Option<usize>,
    /// A blocking output check that fails asks the model again (`recover_attempts`).
    pub recover: Option<bool>,
    /// The rule as the model is told it when asked again.
    pub description: Option<String>,
    /// `block` (default) holds the turn until decided; `background` (judged output checks only)
    /// judges a sample of completed turns afterwards.
    pub mode: Option<RawMode>,
    /// A background check's share of turns judged (above 0, at most 1; default 0.1).
    #[schemars(range(max = 1), extend("exclusiveMinimum" = 0))]
    pub sample: Option<f64>,
    /// Notify when this share of the check's latest results failed.
    pub alert: Option<RawAlert>,
    /// A judged check that cannot decide: `block` (default) stops the turn, `pass` lets it go.
    pub on_error: Option<RawOnError>,
    /// The judge model of a judged check (default: the turn's model).
    #[schemars(length(min = 1))]
    pub judge_model: Option<String>,
    /// How long a judged check may take, in milliseconds (default 10 000).
    #[schemars(range(min = 1, max = super::MAX_JUDGE_TIMEOUT_MS))]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "Stage")]
pub enum RawStage {
    Input,
    Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "Mode")]
pub enum RawMode {
    Block,
    Background,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "OnError")]
pub enum RawOnError {
    Pass,
    Block,
}

/// A check's alert: at or above `failure_rate` failed among its latest `over_last` results.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Alert")]
pub struct RawAlert {
    /// Above 0, at most 1.
    #[schemars(range(max = 1), extend("exclusiveMinimum" = 0))]
    pub failure_rate: f64,
    /// 1 to 1000.
    #[schemars(range(min = 1, max = 1000))]
    pub over_last: u32,
}

/// One row of a version's `tool_checks`: it denies a tool call when its test holds. A row has
/// either `when` or `args`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ToolCheck")]
pub struct RawToolCheck {
    /// Unique among the version's checks and tool checks, and not `allowed_tools`.
    #[schemars(pattern(NAME))]
    pub name: String,
    /// The tool it applies to: a name or a glob (`*`, `?`); default every tool.
    #[schemars(pattern(GLOB))]
    pub tool: Option<String>,
    /// A plain-language condition, judged: when it holds, the call is denied.
    #[schemars(length(min = 1))]
    pub when: Option<String>,
    /// Rules over the call's arguments, decided in the filter: any that matches denies the call.
    #[schemars(length(min = 1))]
    pub args: Option<Vec<RawArgRule>>,
    /// Shown to the agent when the row denies a call (else the judge's explanation).
    #[schemars(length(min = 1))]
    pub reason: Option<String>,
    /// The judge model of a `when` row (default: the turn's model).
    #[schemars(length(min = 1))]
    pub judge_model: Option<String>,
    /// How long the judge may take on a `when` row (default 60 000).
    #[schemars(range(min = 1, max = super::MAX_JUDGE_TIMEOUT_MS))]
    pub timeout_ms: Option<u64>,
    /// Ask the model again, told of the denial and its reason.
    pub recover: Option<bool>,
}

/// A rule over a call's arguments: either `not_contains` or `pattern` (with `max_match`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ArgRule")]
pub struct RawArgRule {
    /// JSON pointer into the call's arguments (`""`: all of them).
    #[schemars(pattern("^(/|$)"))]
    pub pointer: String,
    /// Text the arguments must not contain (any case; at most 200 characters).
    #[schemars(length(min = 1, max = MAX_MATCH_LIMIT))]
    pub not_contains: Option<String>,
    /// An RE2 pattern with a bounded longest match of at most `max_match` characters.
    #[schemars(length(min = 1, max = MAX_PATTERN_LEN))]
    pub pattern: Option<String>,
    /// The pattern's longest match in characters (default and at most 200).
    #[schemars(range(min = 1, max = MAX_MATCH_LIMIT))]
    pub max_match: Option<usize>,
}

/// The configuration's JSON Schema (draft-07, which editors' JSON and YAML language servers read).
pub fn json_schema() -> Schema {
    schema_for::<RawPolicy>()
}

/// A type's JSON Schema as livecheck writes its schemas: draft-07, descriptions on one line. Also
/// the schema of `livecheck test`'s case files.
pub fn schema_for<T: JsonSchema>() -> Schema {
    SchemaSettings::draft07()
        .with_transform(RecursiveTransform(unwrap_description))
        .into_generator()
        .into_root_schema_for::<T>()
}

/// A description is a doc comment, wrapped at 100 columns: editors show it as one line.
fn unwrap_description(schema: &mut Schema) {
    if let Some(serde_json::Value::String(text)) = schema.get_mut("description") {
        *text = text.replace('\n', " ");
    }
}
