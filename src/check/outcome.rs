//! What a check decided: its outcome, and the result that carries it (a check's on an answer or
//! the question, a tool row's on a call). `verdict`, `judge`, `tools` and `record` all speak them.

use std::borrow::Cow;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed,
    Errored,
}

impl Outcome {
    /// This outcome's metric among a check's `[passed, failed, errored]`.
    pub fn counter(self, counters: &[String; 3]) -> &str {
        let [passed, failed, errored] = counters;
        match self {
            Self::Passed => passed,
            Self::Failed => failed,
            Self::Errored => errored,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed => "failed",
            Self::Errored => "errored",
        }
    }
}

/// One check's result on one answer (or on the question).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// Index of the check in its version.
    pub check: usize,
    pub outcome: Outcome,
    /// An errored result that the check's `on_error: "pass"` let through.
    pub passed_on_error: bool,
    /// 1 for the first answer, 2 for the first answer asked for again.
    pub attempt: u32,
}

/// One row's (or `allowed_tools`') result on one call. Never carries the arguments. The row is
/// named by its place in the version's [`ToolChecks`](crate::config::ToolChecks), which gives its name, kind and metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The row's index in [`ToolChecks::rows`](crate::config::ToolChecks::rows); `None` for `allowed_tools`.
    pub row: Option<usize>,
    pub tool: String,
    /// 1 for the answer's first call.
    pub call: u32,
    pub attempt: u32,
    pub outcome: Outcome,
    /// A fixed sentence, or the judge's explanation.
    pub reason: Cow<'static, str>,
    pub judge_model: Option<String>,
}
