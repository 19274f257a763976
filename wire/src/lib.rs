//! The callout between the filter and the judge sidecar (`POST /v1/judge`), as serde types shared
//! by both sides. The turn's credentials travel as the callout's own `authorization` / `x-api-key`
//! header, never in the body, so the judge's tokens count on the key that ran the turn.

use serde::{Deserialize, Serialize};

pub mod endpoint;
pub use endpoint::{endpoint, Endpoint, Platform};
pub mod host_glob;
pub use host_glob::{GlobError, HostGlob};

/// The path of a judged check on the sidecar.
pub const JUDGE_PATH: &str = "/v1/judge";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Input,
    Output,
}

impl Stage {
    /// The name on the wire (as serde writes it), for stored rows, events and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Input => "input",
            Self::Output => "output",
        }
    }
}

/// One judged check to decide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeRequest {
    pub stage: Stage,
    /// `polite_tone`, `correct_format`, `no_made_up_facts` or `custom_rule`.
    pub kind: String,
    /// The operator's rule: a `custom_rule`'s `expected`, else the check's description, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// What the check reads: the caller's text on input, the answer on output.
    pub text: String,
    /// On output, the last user message the answer replies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The model that judges: the check's `judge_model`, else the turn's model.
    pub judge_model: String,
}

/// The path of a tool-call check (a `when` row of `tool_checks`) on the sidecar. Answered with a
/// [`JudgeVerdict`]: `failed` when the row's condition holds (the call is denied), `passed` when it
/// does not, `errored` when the judge could not decide (which denies too).
pub const TOOL_CHECK_PATH: &str = "/v1/tool-check";

/// How many of the request's user messages a tool-call check reads as the user's intent.
pub const INTENT_MESSAGES: usize = 10;

/// One `when` row on one tool call a model (or an MCP client) is about to make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCheckRequest {
    /// The row's plain-language condition: when it holds, the call is denied.
    pub condition: String,
    /// The tool's name, as the call names it.
    pub tool: String,
    /// The call's arguments as the agent wrote them: JSON text, or free text for a custom tool.
    pub arguments: String,
    /// The user's intent: the text of the request's last user messages (at most
    /// [`INTENT_MESSAGES`]), oldest first. Empty when the request carries none (an MCP call).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intent: Vec<String>,
    /// The model that judges: the row's `judge_model`, else the turn's model.
    pub judge_model: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Passed,
    Failed,
    Errored,
}

impl Outcome {
    /// The name on the wire (as serde writes it), for stored rows, events and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed => "failed",
            Self::Errored => "errored",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The judge's decision. `errored` whenever no valid verdict came back: never `passed` by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeVerdict {
    pub outcome: Outcome,
    /// 0 to 1, how well the text keeps the rule; absent when errored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// The judge's own sentence, or a fixed one when it could not decide.
    pub reason: String,
    #[serde(default)]
    pub usage: Usage,
}

/// The path where the filter delivers a finished turn's report: every result its checks decided and
/// the background checks drawn for it. The sidecar answers 2xx only once the report is stored; the
/// filter keeps the report and sends it again until then, so delivery survives a sidecar outage, and the
/// sidecar stores each result once (by `turn_id`, check name, attempt and tool call).
pub const RESULTS_PATH: &str = "/v1/results";

/// The path where the filter delivers several finished turns' reports in one callout, as a
/// [`ReportBatch`]: the reports that carry no background checks (a report with background checks
/// goes alone to [`RESULTS_PATH`], with its turn's credentials as the callout's headers). The
/// sidecar answers 2xx once every valid report in it is stored (an invalid one is skipped and
/// logged, never stored), so the filter sends a batch again whole until then.
pub const RESULTS_BATCH_PATH: &str = "/v1/results/batch";

/// Several turns' reports (`POST /v1/results/batch`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportBatch {
    pub reports: Vec<TurnReport>,
}

/// The header carrying the shared token on every callout from the filter to the sidecar
/// (`/v1/judge`, `/v1/tool-check`, `/v1/retry`, `/v1/results`, `/v1/results/batch`).
pub const FILTER_TOKEN_HEADER: &str = "x-livecheck-token";

/// Whether a filter token is usable: 16 to 256 visible ASCII characters, long enough to guess at no
/// rate and sendable as a header value. The filter and the sidecar refuse any other.
pub fn valid_token(token: &str) -> bool {
    (16..=256).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_graphic())
}

/// The path where the filter asks the sidecar to ask the model again (recovery).
pub const RETRY_PATH: &str = "/v1/retry";

/// The response header carrying the turn's id, on every turn the filter decides: the id to read the
/// turn's results with (`GET /responses/{id}/checks`). The upstream's own response id (`msg_…`,
/// `chatcmpl-…`, `resp_…`) reads them too, once the answer carried one.
pub const TURN_ID_HEADER: &str = "x-core-response-id";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Block,
    Background,
}

impl Mode {
    /// The name on the wire (as serde writes it), for stored rows, events and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Block => "block",
            Self::Background => "background",
        }
    }
}

/// A check's `alert`, carried with its results so the sidecar applies the rule the operator wrote.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Alert {
    /// Above 0, at most 1.
    pub failure_rate: f64,
    /// 1 to 1000.
    pub over_last: u32,
}

/// One check's result on one answer of one turn. Never carries the text the check read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckResult {
    pub name: String,
    pub stage: Stage,
    /// The check's kind as configured: `not_contains`, `matches_pattern`, `polite_tone`, …
    pub kind: String,
    pub mode: Mode,
    /// Counts answers: 1 is the first, 2 the first answer asked for again. Input checks are 1.
    pub attempt: u32,
    pub outcome: Outcome,
    /// Judged checks only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// A fixed sentence for a rule and for a check that could not decide; the judge's sentence for a
    /// judged check.
    pub reason: String,
    /// Judged checks only: the model that judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_model: Option<String>,
    /// An errored result its check's `on_error: "pass"` let through.
    #[serde(default)]
    pub passed_on_error: bool,
    /// Tool-call checks only: the name of the tool the call was for (never its arguments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Tool-call checks only: which of the answer's tool calls the result is for (1 for the first
    /// call, in the order the answer makes them). A result is stored once per turn, check name,
    /// attempt and call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<u32>,
    /// When it was decided, in milliseconds since the Unix epoch (the filter's clock).
    pub created_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<Alert>,
}

/// A background check drawn for the turn: the sidecar judges it on its own time and stores the
/// result (mode `background`, attempt 1) under the same turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackgroundCheck {
    pub name: String,
    pub judge: JudgeRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<Alert>,
}

/// What the filter delivers after a turn (`POST /v1/results`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnReport {
    /// The filter's id for the turn (`lc_` + 32 hex digits), also sent to the caller in
    /// `x-core-response-id`.
    pub turn_id: String,
    /// The upstream's own response id, when an answer carried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    pub agent: String,
    pub version: String,
    /// The person the turn belongs to (the policy's person header), for erasure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<String>,
    /// Every result, in the order decided.
    pub results: Vec<CheckResult>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub background: Vec<BackgroundCheck>,
}

/// The vendor API a turn speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST /v1/messages`
    AnthropicMessages,
    /// `POST /v1/chat/completions`
    ChatCompletions,
    /// `POST /v1/responses`
    Responses,
    /// OpenAI's legacy text completions, `POST /v1/completions`.
    Completions,
    /// Anthropic's legacy text completions, `POST /v1/complete`.
    AnthropicComplete,
    /// `POST /v1/embeddings`: input checks only, there is no answer to check.
    Embeddings,
    /// Anthropic Message Batches, `POST /v1/messages/batches`: every request's input checked
    /// before the batch is queued; no one waits on the answers.
    MessageBatches,
    /// Google Gemini `generateContent` (`…/models/{model}:generateContent`, and
    /// `:streamGenerateContent?alt=sse`), on the Gemini API and on Vertex AI.
    Gemini,
    /// Amazon Bedrock Converse (`…/model/{model}/converse`, and `/converse-stream` in AWS
    /// event-stream framing): one shape for every model Bedrock serves.
    Converse,
}

impl Api {
    /// Whether the API answers with a model's words that output checks read. Embeddings and
    /// Message Batches are input only: once the question passed, the answer passes as it came (no
    /// output check, no hold, no recovery), and a refused question is an error in the vendor's
    /// shape, since they have no refusal of their own.
    pub fn has_answer(self) -> bool {
        match self {
            Api::AnthropicMessages
            | Api::ChatCompletions
            | Api::Responses
            | Api::Completions
            | Api::AnthropicComplete
            | Api::Gemini
            | Api::Converse => true,
            Api::Embeddings | Api::MessageBatches => false,
        }
    }
}

/// The request headers a retry carries from the caller to the upstream, as the callout's own
/// headers: the turn's credentials (Azure OpenAI's key is its `api-key`, the Gemini API's its
/// `x-goog-api-key`) and the vendor's version and account headers.
pub const FORWARDED_HEADERS: [&str; 8] = [
    "authorization",
    "x-api-key",
    "api-key",
    "anthropic-version",
    "anthropic-beta",
    "openai-organization",
    "openai-project",
    "x-goog-api-key",
];

/// Ask the model again (`POST /v1/retry`). The turn's [`FORWARDED_HEADERS`] travel as the callout's
/// own headers and are forwarded upstream. The rejected answer is never part of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    pub api: Api,
    /// The original request's `:authority`; the sidecar sends the retry only to an upstream its
    /// config names for it.
    pub authority: String,
    /// The original request's `:path` (with any query).
    pub path: String,
    /// The original request body as the caller sent it (JSON text).
    pub request: String,
    /// The rules the answer broke: each check's description, else its expected text, else its name.
    pub rules: Vec<String>,
    /// The answer this retry asks for: 2 for the first retry.
    pub attempt: u32,
    /// Keep the request's tools: the answer was stopped for a tool call a `tool_checks` row
    /// denied, and the model may call a tool again (another one, or the same one otherwise).
    /// Without it a retry can call no tool.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_tools: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryOutcome {
    /// The upstream answered 200 with a non-streamed answer: `body` holds it as sent.
    Answered,
    /// No usable answer: a timeout, a refused connection, a non-200, an unknown upstream.
    Errored,
}

/// The sidecar's answer to a retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryAnswer {
    pub outcome: RetryOutcome,
    /// The upstream's answer body (JSON text, the vendor's non-streamed shape) when answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// A fixed sentence saying why when errored; never upstream text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The fixed sentences the filter records as a result's reason (a rule check's, a tool check's
/// without a judge, a check that could not decide). They carry nothing of the turn, so the
/// sidecar's operator pages may show them; any other reason (a judge's own sentence) may quote the
/// turn and is never shown there.
pub mod reasons {
    pub const COULD_NOT_DECIDE: &str = "The check could not decide.";
    pub const CONTAINS: &str = "The answer contains text it had to avoid.";
    pub const DOES_NOT_CONTAIN: &str = "The answer does not contain the text it had to avoid.";
    pub const MATCHES: &str = "The answer matches a pattern it had to avoid.";
    pub const DOES_NOT_MATCH: &str = "The answer does not match the pattern it had to avoid.";
    pub const TOOL_NOT_ALLOWED: &str = "The tool is not one this agent may call.";
    pub const TOOL_ALLOWED: &str = "The tool is one the agent may call.";
    pub const ARGS_FORBIDDEN: &str = "The call's arguments hold something a rule forbids.";
    pub const ARGS_PASSED: &str = "The call's arguments hold nothing a rule forbids.";
    pub const ARGS_UNREADABLE: &str = "The call's arguments could not be read as JSON.";
    pub const TOOL_COULD_NOT_CHECK: &str = "The tool call could not be checked.";

    /// Every sentence above.
    pub const FILTER: [&str; 11] = [
        COULD_NOT_DECIDE,
        CONTAINS,
        DOES_NOT_CONTAIN,
        MATCHES,
        DOES_NOT_MATCH,
        TOOL_NOT_ALLOWED,
        TOOL_ALLOWED,
        ARGS_FORBIDDEN,
        ARGS_PASSED,
        ARGS_UNREADABLE,
        TOOL_COULD_NOT_CHECK,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_refuse_unknown_fields() {
        let req = JudgeRequest {
            stage: Stage::Output,
            kind: "custom_rule".into(),
            rule: Some("The answer is about orders.".into()),
            text: "It ships tomorrow.".into(),
            question: Some("Where is order 17?".into()),
            judge_model: "gpt-4.1-mini".into(),
        };
        let json = serde_json::to_string(&req).unwrap();
        assert_eq!(serde_json::from_str::<JudgeRequest>(&json).unwrap(), req);
        assert!(serde_json::from_str::<JudgeRequest>(
            r#"{"stage":"input","kind":"x","text":"","judge_model":"m","extra":1}"#
        )
        .is_err());
    }

    #[test]
    fn a_verdict_without_usage_still_parses() {
        let v: JudgeVerdict =
            serde_json::from_str(r#"{"outcome":"errored","reason":"timed out"}"#).unwrap();
        assert_eq!(
            (v.outcome, v.score, v.usage),
            (Outcome::Errored, None, Usage::default())
        );
    }

    #[test]
    fn each_name_is_the_one_serde_writes() {
        let name = |v: serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        for stage in [Stage::Input, Stage::Output] {
            assert_eq!(stage.as_str(), name(serde_json::json!(stage)));
        }
        for outcome in [Outcome::Passed, Outcome::Failed, Outcome::Errored] {
            assert_eq!(outcome.as_str(), name(serde_json::json!(outcome)));
        }
        for mode in [Mode::Block, Mode::Background] {
            assert_eq!(mode.as_str(), name(serde_json::json!(mode)));
        }
    }
}
