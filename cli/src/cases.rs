//! What `livecheck test` and `livecheck eval` read: case files (YAML or JSON) and suites (JSONL).
//! These types are the files' schema too (`livecheck schema cases`,
//! `schema/livecheck-cases.schema.json`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

/// A file of cases for `livecheck test POLICY CASES...`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "livecheck test cases")]
pub struct CaseFile {
    /// The schema editors check this file with; ignored.
    #[serde(rename = "$schema", default)]
    #[allow(dead_code)]
    pub schema: Option<String>,
    /// The cases, each one turn through the filter.
    pub cases: Vec<Case>,
}

/// One turn and what must happen to it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Names the case in the report (unique in its file).
    pub name: String,
    #[serde(flatten)]
    pub turn: Turn,
    /// What must happen.
    pub expect: Expect,
}

/// One line of a suite for `livecheck eval`: a conversation turn without expectations.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SuiteLine {
    /// Names the turn in the output (unique in the suite).
    pub id: String,
    #[serde(flatten)]
    pub turn: Turn,
}

/// A turn: the caller's request, and what the upstream and the judge answer.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct Turn {
    /// The vendor API the request speaks.
    pub api: Api,
    /// The request body: a JSON object, or a string sent byte for byte.
    pub request: Body,
    /// The request path (default: the API's own, e.g. `/v1/messages`).
    #[serde(default)]
    pub path: Option<String>,
    /// The agent, sent in the policy's `agent_header` (default: the policy picks one).
    #[serde(default)]
    pub agent: Option<String>,
    /// The version, sent in the policy's `version_header` (default: the agent's published one).
    #[serde(default)]
    pub version: Option<String>,
    /// More request headers, e.g. `authorization`, `host` (the `:authority`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The upstream's answer. Without one the turn ends after its question (input checks only).
    #[serde(default)]
    pub answer: Option<Answer>,
    /// The answers the model gives when asked again (recovery): attempt 2, 3, …, each non-streamed.
    /// An `errored` entry stands for a retry that got no usable answer.
    #[serde(default)]
    pub retries: Vec<Retry>,
    /// Scripted verdicts of judged checks, by check name: one outcome, or one per time the check
    /// is asked (on each attempt). Answered through the filter's own callouts to the sidecar.
    #[serde(default)]
    pub judge: BTreeMap<String, Verdicts>,
    /// Scripted verdicts of `tool_checks` rows with a `when` condition, by row name: `failed`
    /// means the condition holds (the call is denied).
    #[serde(default)]
    pub tools: BTreeMap<String, Verdicts>,
}

/// The vendor API a turn speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// Anthropic Messages, `POST /v1/messages`.
    Anthropic,
    /// OpenAI Chat Completions, `POST /v1/chat/completions`.
    Chat,
    /// OpenAI Responses, `POST /v1/responses`.
    Responses,
    /// An MCP JSON-RPC request (Streamable HTTP), `POST /mcp` (give `path` for another of the
    /// policy's `mcp_paths`): a `tools/call` is checked by the version's `tool_checks` before the
    /// MCP server is called; `answer` is the server's (a JSON-RPC result, or an SSE stream of them).
    Mcp,
    /// Google Gemini, `POST /v1beta/models/gemini-2.5-flash:generateContent`, or
    /// `:streamGenerateContent?alt=sse` when the answer streams (`events`): the path says which.
    Gemini,
    /// Amazon Bedrock Converse, `POST /model/amazon.nova-lite-v1:0/converse`, or `/converse-stream`
    /// when the answer streams (`events`, each object one AWS event-stream message).
    Converse,
}

impl Api {
    /// The API's request path, for an answer that streams or not (Gemini and Converse: the path
    /// says which; the others: the body's `stream`).
    pub fn path(self, streamed: bool) -> &'static str {
        match (self, streamed) {
            (Api::Anthropic, _) => "/v1/messages",
            (Api::Chat, _) => "/v1/chat/completions",
            (Api::Responses, _) => "/v1/responses",
            (Api::Mcp, _) => livecheck::config::DEFAULT_MCP_PATH,
            (Api::Gemini, false) => "/v1beta/models/gemini-2.5-flash:generateContent",
            (Api::Gemini, true) => "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            (Api::Converse, false) => "/model/amazon.nova-lite-v1%3A0/converse",
            (Api::Converse, true) => "/model/amazon.nova-lite-v1%3A0/converse-stream",
        }
    }

    /// The content type of a streamed answer: server-sent events, or Bedrock's event stream.
    pub fn stream_content_type(self) -> &'static str {
        match self {
            Api::Converse => "application/vnd.amazon.eventstream",
            _ => "text/event-stream",
        }
    }
}

/// A body: JSON written as an object (sent compact), or a string sent as it is.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Body {
    /// Sent as its own bytes.
    Text(String),
    /// Sent as compact JSON.
    Json(serde_json::Map<String, serde_json::Value>),
}

impl Body {
    /// The bytes on the wire.
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Body::Text(t) => t.as_bytes().to_vec(),
            Body::Json(j) => serde_json::to_vec(j).unwrap_or_default(),
        }
    }
}

/// The upstream's answer: `body` (non-streamed) or `events` (streamed), not both.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// The HTTP status (default 200).
    #[serde(default)]
    pub status: Option<u16>,
    /// More response headers (`content-type` defaults to `application/json`, or
    /// `text/event-stream` with `events`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A non-streamed answer.
    #[serde(default)]
    pub body: Option<Body>,
    /// A streamed answer, one body callback per entry: a string is sent byte for byte (it may hold
    /// several SSE events or part of one: the splits the filter must survive), an object is one
    /// whole SSE event (Converse: one whole AWS event-stream message, its `event` the
    /// `:event-type`).
    #[serde(default)]
    pub events: Option<Vec<Chunk>>,
}

/// One body callback of a streamed answer.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Chunk {
    /// Bytes as they are.
    Raw(String),
    /// One SSE event: `event: NAME` (when given), `data: DATA` (compact JSON, or a string such
    /// as `[DONE]` as it is), then a blank line. Converse: one AWS event-stream message, `event`
    /// its `:event-type` (required), `data` its JSON payload.
    Event(Event),
}

/// One SSE event.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// The `event:` line (Anthropic and Responses name their events; Chat does not).
    #[serde(default)]
    pub event: Option<String>,
    /// The `data:` line.
    pub data: serde_json::Value,
}

impl Chunk {
    /// The bytes of the body callback, framed as `api` frames its stream.
    pub fn bytes(&self, api: Api) -> Vec<u8> {
        match self {
            Chunk::Raw(text) => text.as_bytes().to_vec(),
            Chunk::Event(e) => {
                let data = match &e.data {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                if api == Api::Converse {
                    let mut out = Vec::new();
                    let name = e.event.as_deref().unwrap_or_default();
                    // A message that cannot be framed (a name over 255 bytes) goes as no bytes,
                    // which the filter reads as a stream that stopped short.
                    let _ = livecheck::eventstream::encode_event(&mut out, name, data.as_bytes());
                    return out;
                }
                let name = e
                    .event
                    .as_deref()
                    .map(|n| format!("event: {n}\n"))
                    .unwrap_or_default();
                format!("{name}data: {data}\n\n").into_bytes()
            }
        }
    }
}

/// One answer of the model asked again.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Retry {
    /// The sidecar could not get an answer (a timeout, an upstream error).
    Errored(RetryErrored),
    /// The model's non-streamed answer.
    Answered(Body),
}

/// `errored`: a retry without a usable answer.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RetryErrored {
    /// No usable answer came back.
    Errored,
}

/// One verdict, or one per time asked.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Verdicts {
    /// The same verdict every time.
    One(Verdict),
    /// The first time asked, the second, …; asked more often is a case error.
    Each(Vec<Verdict>),
}

impl Verdicts {
    /// The verdict for the `n`th ask (0-based).
    pub fn nth(&self, n: usize) -> Option<&Verdict> {
        match self {
            Verdicts::One(v) => Some(v),
            Verdicts::Each(list) => list.get(n),
        }
    }
}

/// What the judge says: an outcome alone, or with a score and reason.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Verdict {
    /// `passed`, `failed` or `errored` (the judge could not decide).
    Outcome(Outcome),
    /// The judge's full answer.
    Full {
        /// The outcome.
        outcome: Outcome,
        /// 0 to 1.
        #[serde(default)]
        score: Option<f64>,
        /// The judge's sentence.
        #[serde(default)]
        reason: Option<String>,
    },
    /// The sidecar answers with this HTTP status and no verdict (e.g. 503: the check errors).
    Status {
        /// The HTTP status.
        status: u16,
    },
}

/// A check's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Passed.
    Passed,
    /// Failed.
    Failed,
    /// Could not decide.
    Errored,
}

impl Outcome {
    /// The name as files write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::Errored => "errored",
        }
    }
}

/// What must happen to the turn. `outcome` is required; the other fields each add a condition.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// How the turn ended for the caller.
    pub outcome: TurnOutcome,
    /// The blocking check that stopped the turn (refused, withheld, cut): the first that did not
    /// pass, as `X-Core-Check` and the results name it.
    #[serde(default)]
    pub check: Option<String>,
    /// The `X-Core-Check` code of a refused turn (`input_check_failed`, `check_errored`, …).
    #[serde(default)]
    pub code: Option<String>,
    /// A cut stream: the caller got exactly this many characters of answer text.
    #[serde(default)]
    pub before_char: Option<usize>,
    /// The answer text the caller got, exactly (a refusal's or withheld answer's is the blocked reply).
    #[serde(default)]
    pub text: Option<String>,
    /// A recovered turn: the answer the caller got is this attempt (2 is the first retry).
    #[serde(default)]
    pub attempt: Option<u32>,
    /// A `tool_checks` row (or `allowed_tools`) that denied a tool call.
    #[serde(default)]
    pub denied_by: Option<String>,
    /// The HTTP status the caller got.
    #[serde(default)]
    pub status: Option<u16>,
    /// Checks' results on the last answer they read, by check name.
    #[serde(default)]
    pub results: BTreeMap<String, Outcome>,
}

/// How a turn ended for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnOutcome {
    /// No check stopped it: the caller got the model's answer (or the question went to the model).
    Passed,
    /// The question was refused; no model was asked.
    Refused,
    /// The answer was withheld whole: the caller got the blocked reply instead.
    Withheld,
    /// A streamed answer was cut where the forbidden text starts.
    Cut,
    /// A check failed and the model, asked again, gave an answer that passed.
    Recovered,
}

impl TurnOutcome {
    /// The name as files write it.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnOutcome::Passed => "passed",
            TurnOutcome::Refused => "refused",
            TurnOutcome::Withheld => "withheld",
            TurnOutcome::Cut => "cut",
            TurnOutcome::Recovered => "recovered",
        }
    }
}

#[cfg(not(target_family = "wasm"))]
/// Reads a case file: YAML (`.yaml`, `.yml`) or JSON.
pub fn read_case_file(path: &Path) -> Result<CaseFile, CaseError> {
    let text = std::fs::read_to_string(path).map_err(CaseError::Read)?;
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    let file: CaseFile = if yaml {
        // YAML merge keys (`<<: *anchor`) extend a scripted map from a shared one.
        let mut value: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&text).map_err(CaseError::Yaml)?;
        value.apply_merge().map_err(CaseError::Yaml)?;
        serde_path_to_error::deserialize(value).map_err(CaseError::YamlSchema)?
    } else {
        let de = &mut serde_json::Deserializer::from_str(&text);
        serde_path_to_error::deserialize(de).map_err(CaseError::Json)?
    };
    let mut seen = std::collections::BTreeSet::new();
    for case in &file.cases {
        if !seen.insert(case.name.as_str()) {
            return Err(CaseError::DuplicateName(case.name.clone()));
        }
        case.turn.check()?;
    }
    Ok(file)
}

/// Reads a suite: one JSON object per line (blank lines and `#` lines skipped).
pub fn read_suite(path: &Path) -> Result<Vec<SuiteLine>, CaseError> {
    let text = std::fs::read_to_string(path).map_err(CaseError::Read)?;
    let mut lines = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let de = &mut serde_json::Deserializer::from_str(line);
        let on_line = |e: CaseError| CaseError::Line(n + 1, Box::new(e));
        let parsed: SuiteLine =
            serde_path_to_error::deserialize(de).map_err(|e| on_line(CaseError::Json(e)))?;
        if !seen.insert(parsed.id.clone()) {
            return Err(on_line(CaseError::DuplicateId(parsed.id)));
        }
        parsed.turn.check().map_err(on_line)?;
        lines.push(parsed);
    }
    Ok(lines)
}

impl Turn {
    /// What serde cannot say: an answer is one of `body` or `events`.
    fn check(&self) -> Result<(), CaseError> {
        if let Some(a) = &self.answer {
            if a.body.is_some() == a.events.is_some() {
                return Err(CaseError::AnswerShape);
            }
        }
        Ok(())
    }
}

/// Why a case file or a suite does not load; the command prints it after the file's name.
#[derive(Debug)]
pub enum CaseError {
    /// The file cannot be read.
    Read(std::io::Error),
    /// YAML that does not parse, or whose merge keys do not apply.
    Yaml(serde_yaml_ng::Error),
    /// A YAML case file that does not fit the schema (the message names the field).
    YamlSchema(serde_path_to_error::Error<serde_yaml_ng::Error>),
    /// JSON that does not parse or does not fit the schema (the message names the field).
    Json(serde_path_to_error::Error<serde_json::Error>),
    /// Two cases of a file have this name.
    DuplicateName(String),
    /// Two lines of a suite have this id.
    DuplicateId(String),
    /// An answer with both or neither of `body` and `events`.
    AnswerShape,
    /// A problem on a suite's line (counted from 1).
    Line(usize, Box<CaseError>),
}

impl fmt::Display for CaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read(e) => write!(f, "cannot read: {e}"),
            Self::Yaml(e) => write!(f, "{e}"),
            Self::YamlSchema(e) => write!(f, "{e}"),
            Self::Json(e) => write!(f, "{e}"),
            Self::DuplicateName(name) => write!(f, "two cases are named {name:?}"),
            Self::DuplicateId(id) => write!(f, "the id {id:?} is used twice"),
            Self::AnswerShape => write!(f, "an answer has either `body` or `events`"),
            Self::Line(n, e) => write!(f, "line {n}: {e}"),
        }
    }
}

impl std::error::Error for CaseError {}
