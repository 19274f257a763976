//! What a turn's checks decided, kept while the turn runs and handed to the sidecar as one
//! [`TurnReport`] once it ended. A result never carries the text its check read: a rule's reason is
//! a fixed sentence, a judged check's is the judge's own.

use livecheck_wire::{
    reasons, BackgroundCheck, CheckResult as WireResult, JudgeRequest, JudgeVerdict,
    Mode as WireMode, Outcome as WireOutcome, Stage as WireStage,
};

use crate::check::report::{push_str, wire_alert, ResultPart};
use crate::check::{CheckResult, Kind, Outcome, Report, ToolResult};
use crate::config::{Check, ToolChecks, Version};
use crate::host::Host;

/// The reason of a check that could not decide.
pub use livecheck_wire::reasons::COULD_NOT_DECIDE;

/// What the judge said of one judged check on one answer, kept until the check's result is recorded.
#[derive(Debug, Clone, PartialEq)]
struct Judgement {
    check: usize,
    attempt: u32,
    score: Option<f64>,
    reason: String,
    judge_model: Option<String>,
}

#[derive(Debug, Default)]
pub struct Record {
    /// The filter's id of the turn, sent to the caller in `x-core-response-id`.
    pub turn_id: String,
    /// The version the turn runs, once selected.
    agent_version: Option<(String, String)>,
    pub person: Option<String>,
    /// The upstream's own id of the answer, once one carried it.
    pub response_id: Option<String>,
    /// Every result decided so far, written as the report carries it.
    results: Written,
    background: Vec<BackgroundCheck>,
    judgements: Vec<Judgement>,
    /// The turn's credentials, forwarded with the report so background checks are judged on the
    /// key that ran the turn.
    pub credentials: Vec<(String, String)>,
}

impl Record {
    pub fn new(turn_id: String) -> Self {
        Self {
            turn_id,
            ..Self::default()
        }
    }

    pub fn runs(&mut self, version: &Version) {
        self.agent_version = Some((version.agent.clone(), version.id.clone()));
    }

    /// The judge's answer for `check` on answer `attempt`, kept for the result it decides.
    pub fn judged(&mut self, check: usize, attempt: u32, verdict: Option<&JudgeVerdict>) {
        let judge_model = self
            .judgements
            .iter()
            .find(|j| j.check == check && j.attempt == attempt)
            .and_then(|j| j.judge_model.clone());
        self.judgements
            .retain(|j| !(j.check == check && j.attempt == attempt));
        self.judgements.push(Judgement {
            check,
            attempt,
            score: verdict.and_then(|v| v.score),
            reason: verdict
                .map_or(COULD_NOT_DECIDE, |v| v.reason.as_str())
                .to_owned(),
            judge_model,
        });
    }

    /// The judge model a judged check's callout named.
    pub fn judge_model(&mut self, check: usize, attempt: u32, model: &str) {
        if let Some(j) = self
            .judgements
            .iter_mut()
            .find(|j| j.check == check && j.attempt == attempt)
        {
            j.judge_model = Some(model.to_owned());
            return;
        }
        self.judgements.push(Judgement {
            check,
            attempt,
            score: None,
            reason: COULD_NOT_DECIDE.to_owned(),
            judge_model: Some(model.to_owned()),
        });
    }

    /// Results decided now, in the order decided.
    pub fn decided(&mut self, version: &Version, results: &[CheckResult], now_ms: u64) {
        let _span = crate::profile::span("phase.count_results");
        if self.results.json.is_empty() {
            // Room for a result of every check (~250 bytes each) at once, not by doubling.
            self.results.json.reserve(version.checks.len() * 256);
        }
        for result in results {
            let Some(check) = version.checks.get(result.check) else {
                continue;
            };
            let judgement = self
                .judgements
                .iter()
                .find(|j| j.check == result.check && j.attempt == result.attempt);
            let judged = !check.kind.is_rule();
            let reason = match (result.outcome, judged, judgement) {
                (Outcome::Errored, false, _) => COULD_NOT_DECIDE,
                (_, true, Some(j)) => j.reason.as_str(),
                (_, true, None) => COULD_NOT_DECIDE,
                (outcome, false, _) => rule_reason(&check.kind, outcome),
            };
            let part = ResultPart {
                attempt: result.attempt,
                outcome: result.outcome,
                score: judgement.and_then(|j| j.score).filter(|_| judged),
                reason,
                judge_model: judgement
                    .and_then(|j| j.judge_model.as_deref())
                    .filter(|_| judged),
                passed_on_error: result.passed_on_error,
                call: None,
                created_at_ms: now_ms,
            };
            part.write(&check.report_head, self.results.next());
        }
    }

    /// Results of tool-call checks decided now, in the order decided.
    /// Written by hand as a rule's are ([`ResultPart`]), not through a `WireResult` of copies.
    pub fn tools_decided(&mut self, tools: &ToolChecks, results: &[ToolResult], now_ms: u64) {
        // Room for them all at once (~250 bytes each), not by doubling.
        self.results.json.reserve(results.len() * 256);
        for r in results {
            let Some((name, kind, _)) = r.decider(tools) else {
                continue;
            };
            let out = self.results.next();
            out.extend_from_slice(b"{\"name\":");
            push_str(out, name);
            out.extend_from_slice(b",\"stage\":\"output\",\"kind\":");
            push_str(out, kind);
            out.extend_from_slice(b",\"mode\":\"block\"");
            ResultPart {
                attempt: r.attempt,
                outcome: r.outcome,
                score: None,
                reason: &r.reason,
                judge_model: r.judge_model.as_deref(),
                passed_on_error: false,
                call: Some((&r.tool, r.call)),
                created_at_ms: now_ms,
            }
            .write("", out);
        }
    }

    /// A background check drawn for this turn.
    pub fn background(&mut self, check: &Check, judge: JudgeRequest) {
        self.background.push(BackgroundCheck {
            name: check.name.clone(),
            judge,
            alert: wire_alert(check.alert.as_ref()),
        });
    }

    /// How many results are recorded so far.
    pub fn len(&self) -> usize {
        self.results.count
    }

    pub fn is_empty(&self) -> bool {
        self.results.count == 0 && self.background.is_empty()
    }

    /// The report of the finished turn (a [`livecheck_wire::TurnReport`] as JSON); `None` when no check decided
    /// anything (a turn the filter does not check, or one refused before a version was chosen).
    pub fn report(self) -> Option<Report> {
        let _span = crate::profile::span("phase.report_build");
        let (agent, version) = self.agent_version.as_ref()?;
        if self.is_empty() {
            return None;
        }
        let mut body = Vec::with_capacity(self.results.json.len() + 160);
        body.extend_from_slice(b"{\"turn_id\":");
        push_str(&mut body, &self.turn_id);
        if let Some(id) = &self.response_id {
            body.extend_from_slice(b",\"response_id\":");
            push_str(&mut body, id);
        }
        body.extend_from_slice(b",\"agent\":");
        push_str(&mut body, agent);
        body.extend_from_slice(b",\"version\":");
        push_str(&mut body, version);
        if let Some(person) = &self.person {
            body.extend_from_slice(b",\"person\":");
            push_str(&mut body, person);
        }
        body.extend_from_slice(b",\"results\":[");
        body.extend_from_slice(&self.results.json);
        body.push(b']');
        if !self.background.is_empty() {
            body.extend_from_slice(b",\"background\":");
            let _ = serde_json::to_writer(&mut body, &self.background);
        }
        body.push(b'}');
        Some(Report {
            body,
            background: !self.background.is_empty(),
        })
    }

    #[cfg(test)]
    pub fn results(&self) -> Vec<WireResult> {
        let mut json = b"[".to_vec();
        json.extend_from_slice(&self.results.json);
        json.push(b']');
        serde_json::from_slice(&json).unwrap()
    }
}

/// A turn's results as its report carries them: JSON objects joined by commas, each a check's
/// fixed part (written at configure time, `Check::report_head`) and what the result adds.
#[derive(Debug, Default)]
struct Written {
    json: Vec<u8>,
    count: usize,
}

impl Written {
    /// Where the next result is written: after a comma unless it is the first.
    fn next(&mut self) -> &mut Vec<u8> {
        if self.count > 0 {
            self.json.push(b',');
        }
        self.count += 1;
        &mut self.json
    }
}

/// Results decided now: counted as metrics and recorded for the turn's report.
pub fn decided(
    host: &mut dyn Host,
    record: &mut Record,
    version: &Version,
    results: &[CheckResult],
) {
    if results.is_empty() {
        return;
    }
    record.decided(version, results, host.now_unix_millis());
    for result in results {
        if let Some(check) = version.checks.get(result.check) {
            host.increment_counter(result.outcome.counter(&check.counters));
        }
    }
}

/// Tool-call check results decided now (by `tools`' rows): counted as metrics and recorded for
/// the turn's report.
pub fn tools_decided(
    host: &mut dyn Host,
    record: &mut Record,
    tools: &ToolChecks,
    results: &[ToolResult],
) {
    if results.is_empty() {
        return;
    }
    record.tools_decided(tools, results, host.now_unix_millis());
    for (_, _, counter) in results.iter().filter_map(|r| r.decider(tools)) {
        host.increment_counter(counter);
    }
}

/// An answer the tool checks could not read (over `max_body_bytes`, not JSON, a stream that could
/// not be read): whatever calls it held went unchecked, so `allowed_tools` and every row count one
/// errored result for the turn (no tool, no call: none could be read), as a denial.
pub fn tools_unread(host: &mut dyn Host, record: &mut Record, version: &Version) {
    let now_ms = host.now_unix_millis();
    let tools = &version.tools;
    let allowed = tools.allowed.as_ref().map(|_| {
        (
            crate::config::ALLOWED_TOOLS,
            crate::config::ALLOWED_TOOLS,
            &tools.allowed_counters,
        )
    });
    let rows = tools
        .rows
        .iter()
        .map(|r| (r.name.as_str(), r.test.kind(), &r.counters));
    for (name, kind, counters) in allowed.into_iter().chain(rows) {
        let result = WireResult {
            name: name.to_owned(),
            stage: WireStage::Output,
            kind: kind.to_owned(),
            mode: WireMode::Block,
            attempt: 1,
            outcome: WireOutcome::Errored,
            score: None,
            reason: reasons::TOOL_COULD_NOT_CHECK.to_owned(),
            judge_model: None,
            passed_on_error: false,
            created_at_ms: now_ms,
            alert: None,
            tool: None,
            call: None,
        };
        // Writing a struct of strings and numbers into a Vec cannot fail.
        let _ = serde_json::to_writer(record.results.next(), &result);
        let [_, _, errored] = counters;
        host.increment_counter(errored);
    }
}

/// The fixed sentence of a rule check's result. They speak of "the answer" on input checks too, as
/// an evaluation's do.
fn rule_reason(kind: &Kind, outcome: Outcome) -> &'static str {
    match (kind, outcome) {
        (_, Outcome::Errored) => COULD_NOT_DECIDE,
        (Kind::NotContains, Outcome::Failed) => reasons::CONTAINS,
        (Kind::NotContains, Outcome::Passed) => reasons::DOES_NOT_CONTAIN,
        (_, Outcome::Failed) => reasons::MATCHES,
        (_, Outcome::Passed) => reasons::DOES_NOT_MATCH,
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::config::Policy;
    use livecheck_wire::{Alert as WireAlert, TurnReport};

    fn version() -> std::rc::Rc<Version> {
        let json = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {"live_checks": [
            {"name": "no-pw", "stage": "input", "kind": "not_contains", "expected": "password"},
            {"name": "tone", "stage": "output", "kind": "polite_tone", "judge_model": "j",
             "alert": {"failure_rate": 0.5, "over_last": 10}}]}}}}}"#;
        Policy::from_json(json.as_bytes())
            .unwrap()
            .select(None, None, None)
            .unwrap()
    }

    fn result(check: usize, outcome: Outcome, attempt: u32) -> CheckResult {
        CheckResult {
            check,
            outcome,
            passed_on_error: false,
            attempt,
        }
    }

    #[test]
    fn rules_get_fixed_sentences_and_judged_checks_the_judges() {
        let v = version();
        let mut r = Record::new("lc_1".into());
        r.runs(&v);
        r.decided(&v, &[result(0, Outcome::Failed, 1)], 5);
        r.judge_model(1, 2, "j");
        r.judged(
            1,
            2,
            Some(&JudgeVerdict {
                outcome: WireOutcome::Passed,
                score: Some(0.9),
                reason: "Courteous throughout.".into(),
                usage: Default::default(),
            }),
        );
        r.decided(&v, &[result(1, Outcome::Passed, 2)], 6);
        let report: TurnReport = serde_json::from_slice(&r.report().unwrap().body).unwrap();
        assert_eq!(
            report.results[0].reason,
            "The answer contains text it had to avoid."
        );
        assert_eq!(report.results[0].score, None);
        assert_eq!(report.results[1].reason, "Courteous throughout.");
        assert_eq!(report.results[1].score, Some(0.9));
        assert_eq!(report.results[1].judge_model.as_deref(), Some("j"));
        assert_eq!(report.results[1].attempt, 2);
        assert_eq!(
            report.results[1].alert,
            Some(WireAlert {
                failure_rate: 0.5,
                over_last: 10
            })
        );
        assert_eq!((report.agent.as_str(), report.version.as_str()), ("a", "1"));
    }

    #[test]
    fn a_judged_check_without_a_verdict_could_not_decide() {
        let v = version();
        let mut r = Record::new("lc_1".into());
        r.runs(&v);
        r.judged(1, 1, None);
        r.decided(&v, &[result(1, Outcome::Errored, 1)], 5);
        assert_eq!(r.results()[0].reason, COULD_NOT_DECIDE);
    }

    #[test]
    fn a_turn_without_results_reports_nothing() {
        let v = version();
        let mut r = Record::new("lc_1".into());
        assert!(Record::new("lc_2".into()).report().is_none());
        r.runs(&v);
        assert!(r.report().is_none());
    }

    /// A judge model for every other outcome, with what JSON must escape.
    fn judge_model_of(i: usize) -> Option<String> {
        (i % 2 == 1).then(|| "judge \"x\"\u{1}é".to_owned())
    }

    /// A tool-call check's result is written by hand: byte for byte what serde_json writes of the
    /// same `WireResult`, whatever its strings hold, whether a judge decided it, and for
    /// `allowed_tools` as for a row.
    #[test]
    fn tool_results_are_written_as_serde_json_writes_them() {
        let outcomes = [
            (Outcome::Passed, WireOutcome::Passed),
            (Outcome::Failed, WireOutcome::Failed),
            (Outcome::Errored, WireOutcome::Errored),
        ];
        for (i, (outcome, wire)) in outcomes.into_iter().enumerate() {
            let tools = crate::config::ToolChecks {
                allowed: None,
                rows: vec![crate::config::ToolRow {
                    name: format!("row.{i}\n\u{7f}"),
                    tool: crate::config::Glob::new("*"),
                    test: crate::config::ToolTest::When("It holds.".into()),
                    reason: None,
                    judge_model: None,
                    timeout_ms: 1,
                    recover: false,
                    counters: Default::default(),
                }],
                allowed_counters: Default::default(),
            };
            let cases = [
                (
                    Some(0),
                    judge_model_of(i),
                    format!("row.{i}\n\u{7f}"),
                    "tool_when",
                ),
                (None, None, "allowed_tools".to_owned(), "allowed_tools"),
            ];
            for (row, judge_model, name, kind) in cases {
                let result = ToolResult {
                    row,
                    tool: "send_\"mail\"\t✓".into(),
                    call: u32::MAX - i as u32,
                    attempt: 2,
                    outcome,
                    reason: "The e-mail \\ holds </billing>.".into(),
                    judge_model,
                };
                let mut r = Record::new("lc_1".into());
                r.tools_decided(&tools, std::slice::from_ref(&result), u64::MAX - 1);
                let expected = serde_json::to_vec(&WireResult {
                    name,
                    stage: WireStage::Output,
                    kind: kind.into(),
                    mode: WireMode::Block,
                    attempt: 2,
                    outcome: wire,
                    score: None,
                    reason: result.reason.to_string(),
                    judge_model: result.judge_model.clone(),
                    passed_on_error: false,
                    tool: Some(result.tool.clone()),
                    call: Some(result.call),
                    created_at_ms: u64::MAX - 1,
                    alert: None,
                })
                .unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&r.results.json),
                    String::from_utf8_lossy(&expected)
                );
            }
        }
    }

    #[test]
    fn the_written_report_reads_back_as_every_field_was_recorded() {
        let json = r#"{"default_agent": "a:b", "agents": {"a:b": {"published": "1", "versions": {"1": {"live_checks": [
            {"name": "in.tone_1", "stage": "input", "kind": "polite_tone", "judge_model": "j",
             "on_error": "pass", "alert": {"failure_rate": 0.25, "over_last": 4}},
            {"name": "tone", "stage": "output", "kind": "polite_tone", "judge_model": "j"}]}}}}}"#;
        let v = Policy::from_json(json.as_bytes())
            .unwrap()
            .select(None, None, None)
            .unwrap();
        let mut r = Record::new("lc_\u{1}".into());
        r.runs(&v);
        r.person = Some("p\n1".into());
        r.response_id = Some("chatcmpl-9".into());
        r.decided(
            &v,
            &[CheckResult {
                check: 0,
                outcome: Outcome::Errored,
                passed_on_error: true,
                attempt: 1,
            }],
            u64::MAX,
        );
        r.judge_model(1, 3, "j");
        r.judged(
            1,
            3,
            Some(&JudgeVerdict {
                outcome: WireOutcome::Failed,
                score: Some(0.125),
                reason: "Curt \"and\" cold.\u{7}".into(),
                usage: Default::default(),
            }),
        );
        r.decided(&v, &[result(1, Outcome::Failed, 3)], 7);
        assert_eq!(r.len(), 2);
        let report: TurnReport = serde_json::from_slice(&r.report().unwrap().body).unwrap();
        let expected = TurnReport {
            turn_id: "lc_\u{1}".into(),
            response_id: Some("chatcmpl-9".into()),
            agent: "a:b".into(),
            version: "1".into(),
            person: Some("p\n1".into()),
            results: vec![
                WireResult {
                    name: "in.tone_1".into(),
                    stage: WireStage::Input,
                    kind: "polite_tone".into(),
                    mode: WireMode::Block,
                    attempt: 1,
                    outcome: WireOutcome::Errored,
                    score: None,
                    reason: COULD_NOT_DECIDE.into(),
                    judge_model: None,
                    passed_on_error: true,
                    tool: None,
                    call: None,
                    created_at_ms: u64::MAX,
                    alert: Some(WireAlert {
                        failure_rate: 0.25,
                        over_last: 4,
                    }),
                },
                WireResult {
                    name: "tone".into(),
                    stage: WireStage::Output,
                    kind: "polite_tone".into(),
                    mode: WireMode::Block,
                    attempt: 3,
                    outcome: WireOutcome::Failed,
                    score: Some(0.125),
                    reason: "Curt \"and\" cold.\u{7}".into(),
                    judge_model: Some("j".into()),
                    passed_on_error: false,
                    tool: None,
                    call: None,
                    created_at_ms: 7,
                    alert: None,
                },
            ],
            background: vec![],
        };
        assert_eq!(report, expected);
    }
}
