//! Judged checks as the filter sees them: which checks need the judge, the callout that asks it,
//! and reading its verdict. The judging itself happens in the sidecar (`judge/`).

use livecheck_wire::{
    JudgeRequest, JudgeVerdict, Outcome as WireOutcome, Stage as WireStage, FILTER_TOKEN_HEADER,
    JUDGE_PATH, RESULTS_BATCH_PATH, RESULTS_PATH,
};

use crate::check::{Kind, Mode, Outcome, Report, Stage};
use crate::config::{Check, Policy, Version};
use crate::host::Host;
use crate::outbox::Job;
use crate::record::Record;

/// A callout to send: the sidecar's path and headers, and the JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Callout {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub timeout_ms: u64,
}

/// What the judge reads for one stage.
pub struct Judged<'a> {
    pub stage: Stage,
    /// The caller's text (input) or the answer (output).
    pub text: &'a str,
    /// On output, the last user message.
    pub question: Option<&'a str>,
    /// The model the turn runs on, as the request names it.
    pub turn_model: Option<&'a str>,
    /// The turn's credentials, forwarded so the judge's tokens count on the key that ran the turn.
    pub credentials: &'a [(String, String)],
}

/// The blocking judged checks of `stage`, by index.
pub fn blocking_judged(version: &Version, stage: Stage) -> Vec<usize> {
    version
        .checks
        .iter()
        .enumerate()
        .filter(|(_, c)| c.stage == stage && c.mode == Mode::Block && !c.kind.is_rule())
        .map(|(i, _)| i)
        .collect()
}

/// The callout for one judged check; `None` when the check cannot be judged at all (no judge
/// model: the turn runs a router and the check names none), which makes it errored.
pub fn callout(policy: &Policy, check: &Check, judged: &Judged<'_>) -> Option<Callout> {
    let request = judge_request(policy, check, judged)?;
    let body = serde_json::to_vec(&request).ok()?;
    Some(Callout {
        headers: headers(policy, JUDGE_PATH, judged),
        body,
        timeout_ms: check.timeout_ms,
    })
}

/// The turn's background checks, each drawn with its `sample` rate, with what the judge will read.
/// `draw` gives uniform random u64s. A check without a judge model is not drawn.
pub fn background_draws<'v>(
    policy: &Policy,
    version: &'v Version,
    judged: &Judged<'_>,
    draw: &mut dyn FnMut() -> u64,
) -> Vec<(&'v Check, JudgeRequest)> {
    version
        .checks
        .iter()
        .filter(|c| c.stage == judged.stage && c.mode == Mode::Background)
        .filter(|c| (draw() as f64) < c.sample * (u64::MAX as f64))
        .filter_map(|c| Some((c, judge_request(policy, c, judged)?)))
        .collect()
}

/// A finished turn's report, ready for the outbox. A report with background checks goes alone
/// to the results path with the turn's credentials (its checks are judged with them); any other
/// carries no headers of its own and leaves in a batch ([`batch_headers`]).
pub fn report_job(policy: &Policy, report: Report, credentials: &[(String, String)]) -> Job {
    if !report.background {
        return Job {
            headers: Vec::new(),
            body: report.body,
            batchable: true,
        };
    }
    let mut headers = base_headers(policy, RESULTS_PATH);
    headers.extend(credentials.iter().cloned());
    Job {
        headers,
        body: report.body,
        batchable: false,
    }
}

/// The headers of a batch of reports (`POST /v1/results/batch`).
pub fn batch_headers(policy: &Policy) -> Vec<(String, String)> {
    base_headers(policy, RESULTS_BATCH_PATH)
}

/// The headers of a batchable report sent alone (to a sidecar from before batches).
pub fn report_headers(policy: &Policy) -> Vec<(String, String)> {
    base_headers(policy, RESULTS_PATH)
}

/// The judge model a check's callout names on this turn; `None` when it has none.
pub fn judge_model(policy: &Policy, check: &Check, turn_model: Option<&str>) -> Option<String> {
    match (&check.judge_model, turn_model) {
        (Some(m), _) => Some(m.clone()),
        (None, Some(m)) if !policy.router_models.iter().any(|r| r == m) => Some(m.to_owned()),
        _ => None,
    }
}

/// The headers of a callout to the sidecar's `path` (credentials added by the caller).
pub(crate) fn base_headers(policy: &Policy, path: &str) -> Vec<(String, String)> {
    let mut headers = vec![
        (":method".to_owned(), "POST".to_owned()),
        (":path".to_owned(), path.to_owned()),
        (":authority".to_owned(), policy.judge_authority.clone()),
        ("content-type".to_owned(), "application/json".to_owned()),
    ];
    if let Some(token) = policy.judge_token() {
        headers.push((FILTER_TOKEN_HEADER.to_owned(), token.to_owned()));
    }
    headers
}

fn headers(policy: &Policy, path: &str, judged: &Judged<'_>) -> Vec<(String, String)> {
    let mut headers = base_headers(policy, path);
    headers.extend(judged.credentials.iter().cloned());
    headers
}

fn judge_request(policy: &Policy, check: &Check, judged: &Judged<'_>) -> Option<JudgeRequest> {
    let model = judge_model(policy, check, judged.turn_model)?;
    let rule = match &check.kind {
        Kind::CustomRule { rule } => Some(rule.clone()),
        _ => check.description.clone(),
    };
    Some(JudgeRequest {
        stage: match judged.stage {
            Stage::Input => WireStage::Input,
            Stage::Output => WireStage::Output,
        },
        kind: check.kind.as_str().to_owned(),
        rule,
        text: judged.text.to_owned(),
        question: judged.question.map(str::to_owned),
        judge_model: model,
    })
}

/// The request headers that carry the turn's credentials.
pub const CREDENTIAL_HEADERS: [&str; 2] = ["authorization", "x-api-key"];

/// The judge's verdict from the callout's answer: anything but a 200 with a valid verdict (a
/// timeout arrives as Envoy's 504, a reset as no status) could not decide (`None`).
pub fn verdict(status: Option<u16>, body: &[u8]) -> Option<JudgeVerdict> {
    if status != Some(200) {
        return None;
    }
    serde_json::from_slice::<JudgeVerdict>(body).ok()
}

/// The outcome a verdict (or its absence) gives.
pub fn outcome(verdict: Option<&JudgeVerdict>) -> Outcome {
    match verdict.map(|v| v.outcome) {
        Some(WireOutcome::Passed) => Outcome::Passed,
        Some(WireOutcome::Failed) => Outcome::Failed,
        Some(WireOutcome::Errored) | None => Outcome::Errored,
    }
}

/// Judged checks sent to the judge: callouts in flight, and checks that could not be sent.
#[derive(Default)]
pub struct Dispatched {
    /// Callout token → check index.
    pub pending: Vec<(u32, usize)>,
    /// Checks that could not be sent (no judge model, Envoy refused the callout): errored.
    pub judged: Vec<(usize, Outcome)>,
}

/// Sends every blocking judged check of `read.stage` to the judge, in parallel.
pub fn dispatch(
    host: &mut dyn Host,
    policy: &Policy,
    record: &mut Record,
    version: &Version,
    read: &Judged<'_>,
    attempt: u32,
) -> Dispatched {
    let mut sent = Dispatched::default();
    for i in blocking_judged(version, read.stage) {
        let Some(check) = version.checks.get(i) else {
            continue;
        };
        if let Some(model) = judge_model(policy, check, read.turn_model) {
            record.judge_model(i, attempt, &model);
        }
        let token = callout(policy, check, read).and_then(|c| {
            let headers: Vec<(&str, &str)> = c
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            host.dispatch_callout(&policy.judge_cluster, &headers, &c.body, c.timeout_ms)
        });
        match token {
            Some(token) => sent.pending.push((token, i)),
            None => sent.judged.push((i, Outcome::Errored)),
        }
    }
    sent
}

#[cfg(test)]
mod tests {

    use super::*;
    use livecheck_wire::TurnReport;

    fn policy(checks: &str) -> Policy {
        let json = format!(
            r#"{{"router_models": ["router/auto"], "default_agent": "a", "agents": {{"a": {{"published": "1", "versions": {{"1": {{"live_checks": [{checks}]}}}}}}}}}}"#
        );
        Policy::from_json(json.as_bytes()).unwrap()
    }

    fn judged<'a>(model: Option<&'a str>, creds: &'a [(String, String)]) -> Judged<'a> {
        Judged {
            stage: Stage::Output,
            text: "It ships tomorrow.",
            question: Some("Where is order 17?"),
            turn_model: model,
            credentials: creds,
        }
    }

    #[test]
    fn the_callout_asks_the_sidecar_with_the_turns_key_and_model() {
        let p = policy(
            r#"{"name": "topic", "stage": "output", "kind": "custom_rule", "expected": "about orders", "timeout_ms": 2500}"#,
        );
        let v = p.select(None, None, None).unwrap();
        let creds = vec![("x-api-key".to_owned(), "sk-test".to_owned())];
        let c = callout(&p, &v.checks[0], &judged(Some("claude-x"), &creds)).unwrap();
        assert!(c
            .headers
            .contains(&(":authority".into(), "livecheck-judge".into())));
        assert!(c.headers.contains(&(":path".into(), "/v1/judge".into())));
        assert!(c.headers.contains(&("x-api-key".into(), "sk-test".into())));
        assert_eq!(c.timeout_ms, 2500);
        let req: JudgeRequest = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(req.judge_model, "claude-x");
        assert_eq!(req.rule.as_deref(), Some("about orders"));
        assert_eq!(req.question.as_deref(), Some("Where is order 17?"));
    }

    #[test]
    fn a_router_turn_needs_the_checks_own_judge_model() {
        let p = policy(
            r#"{"name": "tone", "stage": "output", "kind": "polite_tone"},
               {"name": "tone2", "stage": "output", "kind": "polite_tone", "judge_model": "judge-1"}"#,
        );
        let v = p.select(None, None, None).unwrap();
        assert!(callout(&p, &v.checks[0], &judged(Some("router/auto"), &[])).is_none());
        assert!(callout(&p, &v.checks[0], &judged(None, &[])).is_none());
        let c = callout(&p, &v.checks[1], &judged(Some("router/auto"), &[])).unwrap();
        let req: JudgeRequest = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(req.judge_model, "judge-1");
    }

    #[test]
    fn background_checks_are_drawn_at_their_sample_rate() {
        let p = policy(
            r#"{"name": "tone", "stage": "output", "kind": "polite_tone", "mode": "background", "sample": 0.25}"#,
        );
        let v = p.select(None, None, None).unwrap();
        let mut n = 0u64;
        let mut draw = || {
            n += 1;
            // Evenly spread draws: a quarter of them fall under the sample.
            (n % 4) * (u64::MAX / 4)
        };
        let jobs: usize = (0..400)
            .map(|_| background_draws(&p, &v, &judged(Some("m"), &[]), &mut draw).len())
            .sum();
        assert_eq!(jobs, 100);
        let (check, judge) = &background_draws(&p, &v, &judged(Some("m"), &[]), &mut || 0)[0];
        assert_eq!(check.name, "tone");
        assert_eq!(judge.text, "It ships tomorrow.");
    }

    #[test]
    fn a_report_with_background_checks_goes_alone_with_the_turns_key() {
        let p = policy(
            r#"{"name": "tone", "stage": "output", "kind": "polite_tone", "mode": "background"}"#,
        );
        let v = p.select(None, None, None).unwrap();
        let (_, judge) = background_draws(&p, &v, &judged(Some("m"), &[]), &mut || 0)
            .pop()
            .unwrap();
        let report_of = |background: bool| {
            let mut record = Record::new("lc_1".into());
            record.runs(&v);
            if background {
                record.background(&v.checks[0], judge.clone());
            } else {
                record.decided(
                    &v,
                    &[crate::check::CheckResult {
                        check: 0,
                        outcome: Outcome::Passed,
                        passed_on_error: false,
                        attempt: 1,
                    }],
                    5,
                );
            }
            record.report().unwrap()
        };
        let creds = vec![("authorization".to_owned(), "Bearer k".to_owned())];
        let job = report_job(&p, report_of(true), &creds);
        assert!(!job.batchable);
        assert!(job
            .headers
            .contains(&(":path".into(), "/v1/results".into())));
        assert!(job
            .headers
            .contains(&("authorization".into(), "Bearer k".into())));
        let back: TurnReport = serde_json::from_slice(&job.body).unwrap();
        assert_eq!(back.background.len(), 1);
        assert_eq!(back.background[0].judge, judge);

        // Without background checks: no credentials, batched.
        let job = report_job(&p, report_of(false), &creds);
        assert!(job.batchable && job.headers.is_empty());
        let headers = batch_headers(&p);
        assert!(headers.contains(&(":path".into(), "/v1/results/batch".into())));
        assert!(!headers.iter().any(|(k, _)| k == "authorization"));
    }

    #[test]
    fn only_a_valid_verdict_in_a_200_decides() {
        let decide = |status, body: &[u8]| outcome(verdict(status, body).as_ref());
        let passed = br#"{"outcome": "passed", "score": 0.9, "reason": "fine"}"#;
        assert_eq!(decide(Some(200), passed), Outcome::Passed);
        assert_eq!(verdict(Some(200), passed).and_then(|v| v.score), Some(0.9));
        assert_eq!(
            decide(Some(200), br#"{"outcome": "failed", "reason": "rude"}"#),
            Outcome::Failed
        );
        assert_eq!(decide(Some(504), passed), Outcome::Errored);
        assert_eq!(decide(None, b""), Outcome::Errored);
        assert_eq!(decide(Some(200), b"garbage"), Outcome::Errored);
        assert_eq!(
            decide(Some(200), br#"{"outcome": "maybe"}"#),
            Outcome::Errored
        );
    }
}
