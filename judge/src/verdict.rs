//! The verdicts a judge model gives, and every way a judge call can fail to give one. A judged check
//! asks for `{"passed", "score", "reason"}` ([`Form::Judged`]); a tool-call check for `{"result",
//! "explanation"}` ([`Form::ToolCheck`]), where `result: true` means the row's condition holds, so the
//! call is denied (`failed`). A failure is `errored`, never `passed`, and its reason is a fixed sentence
//! naming the kind of failure: never a judged text, a backend's error message, or a key.

use livecheck_wire::{JudgeVerdict, Outcome, Usage};
use serde_json::{json, Value};

/// The judge's own reason is kept, cut to this many characters.
const MAX_REASON_CHARS: usize = 1_000;

/// The verdict a prompt asks for: its JSON schema, and how an answer is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// A judged check (`POST /v1/judge`): `{"passed", "score", "reason"}`.
    Judged,
    /// A tool-call check (`POST /v1/tool-check`): `{"result", "explanation"}`, `result: true` when
    /// the condition holds.
    ToolCheck,
}

impl Form {
    /// The JSON schema both backends are asked to answer with.
    pub fn schema(self) -> Value {
        match self {
            Self::Judged => schema(),
            Self::ToolCheck => json!({
                "type": "object",
                "properties": {
                    "result": {"type": "boolean", "description": "true when the condition holds for this tool call"},
                    "explanation": {"type": "string", "description": "one short sentence, not quoting the arguments"}
                },
                "required": ["result", "explanation"],
                "additionalProperties": false
            }),
        }
    }

    /// The schema's name (OpenAI's `json_schema.name`).
    pub fn schema_name(self) -> &'static str {
        match self {
            Self::Judged => "judge_verdict",
            Self::ToolCheck => "tool_check_verdict",
        }
    }

    /// What the verdict tool records (Anthropic's forced tool call).
    pub fn tool_description(self) -> &'static str {
        match self {
            Self::Judged => "Record the verdict on the text between the markers.",
            Self::ToolCheck => "Record whether the condition holds for the tool call.",
        }
    }

    /// The verdict in a decoded answer object, checked.
    pub fn read(self, value: &Value) -> Result<ModelVerdict, Failure> {
        match self {
            Self::Judged => ModelVerdict::from_value(value),
            Self::ToolCheck => ModelVerdict::from_tool_check(value),
        }
    }
}

/// The JSON schema of a judged check's verdict.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "passed": {"type": "boolean", "description": "true when the text keeps the rule"},
            "score": {"type": "number", "description": "0 (clearly breaks the rule) to 1 (clearly keeps it)"},
            "reason": {"type": "string", "description": "one short sentence, not quoting the text"}
        },
        "required": ["passed", "score", "reason"],
        "additionalProperties": false
    })
}

/// A judge model's decision, checked. `passed: false` is the `failed` outcome: a judged text that
/// breaks its rule, or a tool call its condition holds for.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelVerdict {
    pub passed: bool,
    /// Judged checks only.
    pub score: Option<f64>,
    pub reason: String,
}

impl ModelVerdict {
    /// A judged check's verdict: all three fields, of the right types, with the score within
    /// 0..=1; else malformed.
    pub fn from_value(value: &Value) -> Result<Self, Failure> {
        let obj = value.as_object().ok_or(Failure::Malformed)?;
        let passed = obj
            .get("passed")
            .and_then(Value::as_bool)
            .ok_or(Failure::Malformed)?;
        let score = obj
            .get("score")
            .and_then(Value::as_f64)
            .filter(|s| (0.0..=1.0).contains(s))
            .ok_or(Failure::Malformed)?;
        let reason = obj
            .get("reason")
            .and_then(Value::as_str)
            .ok_or(Failure::Malformed)?;
        Ok(Self {
            passed,
            score: Some(score),
            reason: cut(reason),
        })
    }

    /// A tool-call check's verdict: a boolean `result` (true: the condition holds, so the call is
    /// denied) and an `explanation` that says something; else malformed. The explanation becomes the
    /// reason, which the agent may be shown: a blank one is no verdict.
    pub fn from_tool_check(value: &Value) -> Result<Self, Failure> {
        let obj = value.as_object().ok_or(Failure::Malformed)?;
        let holds = obj
            .get("result")
            .and_then(Value::as_bool)
            .ok_or(Failure::Malformed)?;
        let explanation = obj
            .get("explanation")
            .and_then(Value::as_str)
            .filter(|e| !e.trim().is_empty())
            .ok_or(Failure::Malformed)?;
        Ok(Self {
            passed: !holds,
            score: None,
            reason: cut(explanation),
        })
    }
}

fn cut(reason: &str) -> String {
    reason.trim().chars().take(MAX_REASON_CHARS).collect()
}

/// The start of the reason of a backend's HTTP error status (the code and a full stop follow).
const STATUS_REASON: &str = "The judge backend answered with HTTP status ";

/// Why no verdict came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    UnknownModel,
    UnknownKind,
    NoRule,
    NoCondition,
    Nonce,
    BadKey,
    Busy,
    Timeout,
    Unreachable,
    TooLarge,
    Status(u16),
    ErrorInAnswer,
    NotJson,
    Empty,
    Refused,
    Malformed,
}

impl Failure {
    /// A short stable name for logs.
    pub fn code(self) -> &'static str {
        match self {
            Self::UnknownModel => "unknown_model",
            Self::UnknownKind => "unknown_kind",
            Self::NoRule => "no_rule",
            Self::NoCondition => "no_condition",
            Self::Nonce => "no_nonce",
            Self::BadKey => "bad_key",
            Self::Busy => "busy",
            Self::Timeout => "timeout",
            Self::Unreachable => "unreachable",
            Self::TooLarge => "too_large",
            Self::Status(_) => "status",
            Self::ErrorInAnswer => "error_in_answer",
            Self::NotJson => "not_json",
            Self::Empty => "empty",
            Self::Refused => "refused",
            Self::Malformed => "malformed",
        }
    }

    /// The fixed sentence recorded as the check's reason.
    pub fn reason(self) -> String {
        match self {
            Self::UnknownModel => "The judge model is not configured on the judge sidecar.".into(),
            Self::UnknownKind => "The check's kind is not a judged kind.".into(),
            Self::NoRule => "A custom_rule check came without its rule.".into(),
            Self::NoCondition => "A tool-call check came without its condition.".into(),
            Self::Nonce => "The judge sidecar could not draw a random marker.".into(),
            Self::BadKey => "The turn's credentials could not be forwarded to the judge.".into(),
            Self::Busy => "The judge sidecar was at capacity until the timeout.".into(),
            Self::Timeout => "The judge model did not answer in time.".into(),
            Self::Unreachable => "The judge backend could not be reached.".into(),
            Self::TooLarge => {
                "The judge backend's answer was larger than the sidecar's limit.".into()
            }
            Self::Status(code) => format!("{STATUS_REASON}{code}."),
            Self::ErrorInAnswer => "The judge backend answered with an error.".into(),
            Self::NotJson => "The judge backend's answer was not JSON.".into(),
            Self::Empty => "The judge model gave no verdict.".into(),
            Self::Refused => "The judge model refused to judge.".into(),
            Self::Malformed => "The judge model's verdict was malformed.".into(),
        }
    }

    /// Whether `reason` is one of the sentences [`Failure::reason`] writes (any HTTP status).
    pub fn is_fixed_reason(reason: &str) -> bool {
        let status = reason
            .strip_prefix(STATUS_REASON)
            .and_then(|rest| rest.strip_suffix('.'))
            .is_some_and(|code| code.parse::<u16>().is_ok_and(|c| c.to_string() == code));
        status
            || [
                Self::UnknownModel,
                Self::UnknownKind,
                Self::NoRule,
                Self::NoCondition,
                Self::Nonce,
                Self::BadKey,
                Self::Busy,
                Self::Timeout,
                Self::Unreachable,
                Self::ErrorInAnswer,
                Self::TooLarge,
                Self::NotJson,
                Self::Empty,
                Self::Refused,
                Self::Malformed,
            ]
            .iter()
            .any(|f| f.reason() == reason)
    }
}

/// What one backend call gave: a verdict or a failure, and the tokens it spent either way.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub verdict: Result<ModelVerdict, Failure>,
    pub usage: Usage,
}

impl Reply {
    pub fn failed(failure: Failure) -> Self {
        Self {
            verdict: Err(failure),
            usage: Usage::default(),
        }
    }

    pub fn into_wire(self) -> JudgeVerdict {
        match self.verdict {
            Ok(v) => JudgeVerdict {
                outcome: if v.passed {
                    Outcome::Passed
                } else {
                    Outcome::Failed
                },
                score: v.score,
                reason: v.reason,
                usage: self.usage,
            },
            Err(failure) => JudgeVerdict {
                outcome: Outcome::Errored,
                score: None,
                reason: failure.reason(),
                usage: self.usage,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_sidecars_own_sentences_are_fixed_reasons() {
        assert!(super::Failure::is_fixed_reason(
            &super::Failure::Status(503).reason()
        ));
        assert!(super::Failure::is_fixed_reason(
            &super::Failure::Timeout.reason()
        ));
        for other in [
            "The judge backend answered with HTTP status 5x.",
            "The judge backend answered with HTTP status 0503.",
            "The answer says: my card is 4111.",
            "",
        ] {
            assert!(!super::Failure::is_fixed_reason(other), "{other}");
        }
    }

    use super::*;

    #[test]
    fn a_complete_verdict_is_kept() {
        let v =
            ModelVerdict::from_value(&json!({"passed": false, "score": 0.2, "reason": " Rude. "}))
                .unwrap();
        assert_eq!(
            v,
            ModelVerdict {
                passed: false,
                score: Some(0.2),
                reason: "Rude.".into()
            }
        );
        let v = ModelVerdict::from_value(&json!({"passed": true, "score": 1, "reason": "ok"}));
        assert_eq!(v.map(|v| v.score), Ok(Some(1.0)));
    }

    #[test]
    fn anything_less_is_malformed() {
        for bad in [
            json!({"score": 0.9, "reason": "ok"}),
            json!({"passed": "true", "score": 0.9, "reason": "ok"}),
            json!({"passed": true, "reason": "ok"}),
            json!({"passed": true, "score": 1.5, "reason": "ok"}),
            json!({"passed": true, "score": -0.1, "reason": "ok"}),
            json!({"passed": true, "score": "0.9", "reason": "ok"}),
            json!({"passed": true, "score": 0.9}),
            json!([true, 0.9, "ok"]),
            json!("passed"),
        ] {
            assert_eq!(
                ModelVerdict::from_value(&bad),
                Err(Failure::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_condition_that_holds_is_failed_with_the_explanation_as_reason() {
        let v = Form::ToolCheck
            .read(&json!({"result": true, "explanation": " The email has an invoice. "}))
            .unwrap();
        assert_eq!(
            v,
            ModelVerdict {
                passed: false,
                score: None,
                reason: "The email has an invoice.".into()
            }
        );
        let wire = Reply {
            verdict: Ok(v),
            usage: Usage::default(),
        }
        .into_wire();
        assert_eq!(
            (wire.outcome, wire.score, wire.reason.as_str()),
            (Outcome::Failed, None, "The email has an invoice.")
        );
    }

    #[test]
    fn a_condition_that_does_not_hold_is_passed_without_a_score() {
        let wire = Reply {
            verdict: Form::ToolCheck.read(&json!({"result": false, "explanation": "No billing."})),
            usage: Usage::default(),
        }
        .into_wire();
        assert_eq!(
            (wire.outcome, wire.score, wire.reason.as_str()),
            (Outcome::Passed, None, "No billing.")
        );
    }

    #[test]
    fn a_tool_check_verdict_short_of_result_and_explanation_is_malformed() {
        for bad in [
            json!({"explanation": "Holds."}),
            json!({"result": "true", "explanation": "Holds."}),
            json!({"result": 1, "explanation": "Holds."}),
            json!({"result": null, "explanation": "Holds."}),
            json!({"result": true}),
            json!({"result": true, "explanation": 7}),
            json!({"result": true, "explanation": "   "}),
            // A judged check's verdict is not a tool check's.
            json!({"passed": false, "score": 0.1, "reason": "Holds."}),
            json!([true, "Holds."]),
            json!(true),
        ] {
            assert_eq!(Form::ToolCheck.read(&bad), Err(Failure::Malformed), "{bad}");
        }
        // And the other way round.
        assert_eq!(
            Form::Judged.read(&json!({"result": true, "explanation": "Holds."})),
            Err(Failure::Malformed)
        );
    }

    #[test]
    fn each_form_asks_for_its_own_strict_schema() {
        let tool = Form::ToolCheck.schema();
        assert_eq!(tool["required"], json!(["result", "explanation"]));
        assert_eq!(tool["additionalProperties"], false);
        assert_eq!(tool["properties"]["result"]["type"], "boolean");
        assert_eq!(Form::Judged.schema(), schema());
        assert_ne!(Form::Judged.schema_name(), Form::ToolCheck.schema_name());
    }

    #[test]
    fn a_failure_is_errored_with_its_fixed_reason_and_keeps_usage() {
        let usage = Usage {
            input_tokens: 10,
            output_tokens: 3,
        };
        let wire = Reply {
            verdict: Err(Failure::Status(503)),
            usage,
        }
        .into_wire();
        assert_eq!(wire.outcome, Outcome::Errored);
        assert_eq!(wire.score, None);
        assert_eq!(
            wire.reason,
            "The judge backend answered with HTTP status 503."
        );
        assert_eq!(wire.usage, usage);
    }
}
