//! The verdict a judge model gives (`{"passed", "score", "reason"}`), and every way a judge call can
//! fail to give one. A failure is `errored`, never `passed`, and its reason is a fixed sentence naming
//! the kind of failure: never a judged text, a backend's error message, or a key.

use livecheck_wire::{JudgeVerdict, Outcome, Usage};
use serde_json::{json, Value};

/// The judge's own reason is kept, cut to this many characters.
const MAX_REASON_CHARS: usize = 1_000;

/// The JSON schema both backends are asked to answer with.
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

/// A judge model's decision, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelVerdict {
    pub passed: bool,
    pub score: f64,
    pub reason: String,
}

impl ModelVerdict {
    /// All three fields, of the right types, with the score within 0..=1; else malformed.
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
            score,
            reason: reason.trim().chars().take(MAX_REASON_CHARS).collect(),
        })
    }
}

/// Why no verdict came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    UnknownModel,
    UnknownKind,
    NoRule,
    Nonce,
    BadKey,
    Busy,
    Timeout,
    Unreachable,
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
            Self::Nonce => "no_nonce",
            Self::BadKey => "bad_key",
            Self::Busy => "busy",
            Self::Timeout => "timeout",
            Self::Unreachable => "unreachable",
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
            Self::Nonce => "The judge sidecar could not draw a random marker.".into(),
            Self::BadKey => "The turn's credentials could not be forwarded to the judge.".into(),
            Self::Busy => "The judge sidecar was at capacity until the timeout.".into(),
            Self::Timeout => "The judge model did not answer in time.".into(),
            Self::Unreachable => "The judge backend could not be reached.".into(),
            Self::Status(code) => format!("The judge backend answered with HTTP status {code}."),
            Self::ErrorInAnswer => "The judge backend answered with an error.".into(),
            Self::NotJson => "The judge backend's answer was not JSON.".into(),
            Self::Empty => "The judge model gave no verdict.".into(),
            Self::Refused => "The judge model refused to judge.".into(),
            Self::Malformed => "The judge model's verdict was malformed.".into(),
        }
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
                score: Some(v.score),
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
                score: 0.2,
                reason: "Rude.".into()
            }
        );
        let v = ModelVerdict::from_value(&json!({"passed": true, "score": 1, "reason": "ok"}));
        assert_eq!(v.map(|v| v.score), Ok(1.0));
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
