//! A case's expectations against what happened: each one that does not hold, said as "expected …,
//! but …", with what happened instead.

use crate::cases::{Expect, TurnOutcome};
use crate::drive::Happened;

/// The expectations that do not hold, each a sentence; empty when the case passed.
pub fn unmet(expect: &Expect, happened: &Happened) -> Vec<String> {
    let mut out = Vec::new();
    let what = ended(happened);
    if expect.outcome != happened.outcome {
        let by = expect
            .check
            .as_deref()
            .map(|c| format!(" by {c}"))
            .unwrap_or_default();
        out.push(format!(
            "expected the turn {}{by}, but it {what}",
            expect.outcome.as_str()
        ));
    } else if let Some(check) = &expect.check {
        if happened.check.as_deref() != Some(check.as_str()) {
            out.push(format!(
                "expected {} by {check}, but it {what}",
                expect.outcome.as_str()
            ));
        }
    }
    if let Some(code) = &expect.code {
        if happened.code.as_deref() != Some(code.as_str()) {
            let got = happened.code.as_deref().unwrap_or("no X-Core-Check");
            out.push(format!("expected X-Core-Check code={code}, but got {got}"));
        }
    }
    if let Some(n) = expect.before_char {
        let got = happened.shown.text.chars().count();
        if got != n {
            out.push(format!(
                "expected the caller to get {n} character(s) before the cut, but it got {got}: {:?}",
                happened.shown.text
            ));
        }
    }
    if let Some(text) = &expect.text {
        if &happened.shown.text != text {
            out.push(format!(
                "expected the caller to get the text {text:?}, but it got {:?}",
                happened.shown.text
            ));
        }
    }
    if let Some(k) = expect.attempt {
        if happened.attempt != k {
            out.push(format!(
                "expected the caller to get attempt {k}, but it got attempt {}",
                happened.attempt
            ));
        }
    }
    if let Some(row) = &expect.denied_by {
        if !happened.denied.contains(row) {
            let got = if happened.denied.is_empty() {
                "no tool call was denied".to_owned()
            } else {
                format!("denied by {}", happened.denied.join(", "))
            };
            out.push(format!("expected a tool call denied by {row}, but {got}"));
        }
    }
    if let Some(status) = expect.status {
        if happened.status != Some(status) {
            let got = happened
                .status
                .map_or_else(|| "no status".to_owned(), |s| s.to_string());
            out.push(format!(
                "expected status {status}, but the caller got {got}"
            ));
        }
    }
    for (check, want) in &expect.results {
        match happened.result_of(check) {
            Some(got) if got == *want => {}
            Some(got) => out.push(format!(
                "expected {check} {}, but it {}",
                want.as_str(),
                got.as_str()
            )),
            None => out.push(format!(
                "expected {check} {}, but it has no result in the turn",
                want.as_str()
            )),
        }
    }
    out
}

/// How the turn ended, in a few words: "was withheld by no-iban".
fn ended(h: &Happened) -> String {
    let by = h
        .check
        .as_deref()
        .map(|c| format!(" by {c}"))
        .unwrap_or_default();
    match h.outcome {
        TurnOutcome::Passed => "passed".to_owned(),
        TurnOutcome::Refused => format!("was refused{by}"),
        TurnOutcome::Withheld => format!("was withheld{by}"),
        TurnOutcome::Cut => format!(
            "was cut{by} after {} character(s)",
            h.shown.text.chars().count()
        ),
        TurnOutcome::Recovered => format!("recovered on attempt {}", h.attempt),
    }
}

/// What happened, in a sentence: "was withheld by no-iban (status 200; results: …)".
pub fn describe(h: &Happened) -> String {
    let verb = ended(h);
    let status = h
        .status
        .map_or_else(|| "no status".to_owned(), |s| format!("status {s}"));
    let results = if h.results.is_empty() {
        "no results".to_owned()
    } else {
        h.results
            .iter()
            .map(|r| {
                let call = r
                    .tool
                    .as_deref()
                    .map(|t| format!(" [{t}]"))
                    .unwrap_or_default();
                let attempt = if r.attempt > 1 {
                    format!(" (attempt {})", r.attempt)
                } else {
                    String::new()
                };
                let outcome = format!("{:?}", r.outcome).to_lowercase();
                format!("{}{call} {outcome}{attempt}", r.name)
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("{verb} ({status}; results: {results})")
}
