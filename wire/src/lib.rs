//! The callout between the filter and the judge sidecar (`POST /v1/judge`), as serde types shared
//! by both sides. The turn's credentials travel as the callout's own `authorization` / `x-api-key`
//! header, never in the body, so the judge's tokens count on the key that ran the turn.

use serde::{Deserialize, Serialize};

/// The path of a judged check on the sidecar.
pub const JUDGE_PATH: &str = "/v1/judge";

/// The path where the filter hands over a background check after a turn; the sidecar answers
/// `202 Accepted` at once and judges and records it on its own time.
pub const BACKGROUND_PATH: &str = "/v1/background";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Input,
    Output,
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

/// A background check of a finished turn: what to judge, and whose result it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackgroundJob {
    pub agent: String,
    pub version: String,
    pub check: String,
    pub judge: JudgeRequest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Passed,
    Failed,
    Errored,
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
}
