//! A turn's report as the filter writes it: the finished [`Report`], and the JSON fragments a
//! result is written from (its check's fixed head, built once at configure time, and what each
//! result adds), written by hand byte for byte as serde_json writes a
//! [`livecheck_wire::TurnReport`]. `config` builds the heads, `record` writes results and the
//! report, `judge` sends it: so it sits below all three.

use livecheck_wire::Alert as WireAlert;

use super::definition::{Alert, Kind, Stage};
use super::outcome::Outcome;

/// A finished turn's report: a [`livecheck_wire::TurnReport`] as JSON.
#[derive(Debug)]
pub struct Report {
    pub body: Vec<u8>,
    /// It carries background checks (judged with the turn's credentials).
    pub background: bool,
}

/// What a result adds to its check's fixed part.
pub(crate) struct ResultPart<'a> {
    pub(crate) attempt: u32,
    pub(crate) outcome: Outcome,
    pub(crate) score: Option<f64>,
    pub(crate) reason: &'a str,
    pub(crate) judge_model: Option<&'a str>,
    pub(crate) passed_on_error: bool,
    /// A tool-call check's: the tool's name and which call.
    pub(crate) call: Option<(&'a str, u32)>,
    pub(crate) created_at_ms: u64,
}

impl ResultPart<'_> {
    /// Writes the result as one JSON object of a [`livecheck_wire::TurnReport`]'s `results`.
    pub(crate) fn write(&self, head: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(b",\"attempt\":");
        push_number(out, u64::from(self.attempt));
        out.extend_from_slice(match self.outcome {
            Outcome::Passed => b",\"outcome\":\"passed\"",
            Outcome::Failed => b",\"outcome\":\"failed\"",
            Outcome::Errored => b",\"outcome\":\"errored\"",
        });
        if let Some(score) = self.score {
            out.extend_from_slice(b",\"score\":");
            // A non-finite score is written as null, as serde_json writes it.
            let _ = serde_json::to_writer(&mut *out, &score);
        }
        out.extend_from_slice(b",\"reason\":");
        push_str(out, self.reason);
        if let Some(model) = self.judge_model {
            out.extend_from_slice(b",\"judge_model\":");
            push_str(out, model);
        }
        out.extend_from_slice(if self.passed_on_error {
            b",\"passed_on_error\":true"
        } else {
            b",\"passed_on_error\":false"
        });
        if let Some((tool, call)) = self.call {
            out.extend_from_slice(b",\"tool\":");
            push_str(out, tool);
            out.extend_from_slice(b",\"call\":");
            push_number(out, u64::from(call));
        }
        out.extend_from_slice(b",\"created_at_ms\":");
        push_number(out, self.created_at_ms);
        out.push(b'}');
    }
}

/// The fixed part of a check's results in a report, built once at configure time: `{`, its name,
/// stage, kind, mode (`block`: background checks are stored by the sidecar) and alert, without the
/// closing brace.
pub fn result_head(name: &str, stage: Stage, kind: &Kind, alert: Option<&Alert>) -> String {
    let mut head = b"{\"name\":".to_vec();
    push_str(&mut head, name);
    head.extend_from_slice(match stage {
        Stage::Input => b",\"stage\":\"input\",\"kind\":",
        Stage::Output => b",\"stage\":\"output\",\"kind\":",
    });
    push_str(&mut head, kind.as_str());
    head.extend_from_slice(b",\"mode\":\"block\"");
    if let Some(alert) = wire_alert(alert) {
        head.extend_from_slice(b",\"alert\":");
        let _ = serde_json::to_writer(&mut head, &alert);
    }
    String::from_utf8(head).unwrap_or_default()
}

/// Appends a JSON string literal, as serde_json writes it: a text with nothing to escape (no `"`,
/// `\\` or control character; the fixed reasons, most names; [`crate::swar::written_as_is`]) is
/// copied between quotes as it is.
pub(crate) fn push_str(out: &mut Vec<u8>, text: &str) {
    if crate::swar::written_as_is(text) {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, text);
    }
}

fn push_number(out: &mut Vec<u8>, n: u64) {
    let _ = serde_json::to_writer(&mut *out, &n);
}

/// A check's alert as a report carries it.
pub(crate) fn wire_alert(alert: Option<&Alert>) -> Option<WireAlert> {
    alert.map(|a| WireAlert {
        failure_rate: a.failure_rate,
        over_last: a.over_last,
    })
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        for text in [
            "",
            "the answer does not match",
            "naïve — ✓ 😀",
            "a \"quote\" and a \\ backslash",
            "line\nbreak\ttab\u{1}\u{1f}",
            "\u{7f} delete is not escaped",
        ] {
            let mut out = Vec::new();
            push_str(&mut out, text);
            assert_eq!(out, serde_json::to_vec(text).unwrap(), "{text:?}");
        }
    }
}
