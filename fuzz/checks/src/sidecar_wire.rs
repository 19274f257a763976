//! The sidecar's wire types and verdict parsing. Mode 0-6: a body as each wire type (the filter's
//! callouts and reports, the sidecar's answers): what deserializes serializes and reads back the
//! same. Mode 7-10: a judge backend's answer (OpenAI, Anthropic; judged and tool-check form) with
//! a status: never panics, a non-2xx or unreadable answer is never a verdict, a verdict's score is
//! within 0..=1, and `passed` is only ever answered with a verdict. Mode 11: the sidecar's TOML
//! configuration: never panics.

use livecheck_judge::backend::{anthropic, openai};
use livecheck_judge::verdict::{Form, Reply};
use livecheck_judge::Settings;
use livecheck_wire::{
    JudgeRequest, JudgeVerdict, Outcome, ReportBatch, RetryAnswer, RetryRequest, ToolCheckRequest,
    TurnReport,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(body: &[u8]) {
    let Ok(value) = serde_json::from_slice::<T>(body) else {
        return;
    };
    let text = serde_json::to_string(&value).expect("a wire value does not serialize");
    let again: T = serde_json::from_str(&text).expect("what was written does not read back");
    assert_eq!(again, value, "the round trip changed the value");
}

fn backend_answer(mode: u8, status: u8, body: &[u8]) {
    let form = if mode.is_multiple_of(2) {
        Form::Judged
    } else {
        Form::ToolCheck
    };
    // Mostly 200, sometimes another status.
    let status = if status < 200 {
        200
    } else {
        u16::from(status) * 2
    };
    let reply: Reply = if mode < 9 {
        openai::read_answer(form, status, body)
    } else {
        anthropic::read_answer(form, status, body)
    };
    if !(200..300).contains(&status) || serde_json::from_slice::<serde_json::Value>(body).is_err() {
        assert!(
            reply.verdict.is_err(),
            "a verdict from a failed or unreadable answer"
        );
    }
    if let Ok(v) = &reply.verdict {
        assert!(
            v.score.is_none_or(|s| (0.0..=1.0).contains(&s)),
            "a score out of range"
        );
    }
    let had_verdict = reply.verdict.is_ok();
    let wire = reply.into_wire();
    assert!(
        had_verdict || wire.outcome == Outcome::Errored,
        "passed or failed without a verdict"
    );
    assert!(
        !wire.reason.is_empty() || had_verdict,
        "an error without a reason"
    );
}

/// The target's body: panics when `input` breaks one of the properties above.
pub fn check(input: &[u8]) {
    let [mode, status, body @ ..] = input else {
        return;
    };
    match mode % 12 {
        0 => round_trip::<JudgeRequest>(body),
        1 => round_trip::<ToolCheckRequest>(body),
        2 => round_trip::<JudgeVerdict>(body),
        3 => round_trip::<ReportBatch>(body),
        4 => round_trip::<TurnReport>(body),
        5 => round_trip::<RetryRequest>(body),
        6 => round_trip::<RetryAnswer>(body),
        m @ 7..=10 => backend_answer(m, *status, body),
        _ => {
            if let Ok(text) = std::str::from_utf8(body) {
                let _ = Settings::from_toml(text, &|_| None);
            }
        }
    }
}
