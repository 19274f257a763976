//! What a turn's checks decided, kept while the turn runs and handed to the sidecar as one
//! [`TurnReport`] once it ended. A result never carries the text its check read: a rule's reason is
//! a fixed sentence, a judged check's is the judge's own.

use livecheck_wire::{
    Alert as WireAlert, BackgroundCheck, CheckResult as WireResult, JudgeRequest, JudgeVerdict,
    Mode as WireMode, Outcome as WireOutcome, Stage as WireStage, TurnReport,
};

use crate::config::{Check, Kind, Stage, Version};
use crate::host::Host;
use crate::verdict::{CheckResult, Outcome};

/// The reason of a check that could not decide.
pub const COULD_NOT_DECIDE: &str = "The check could not decide.";

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
    results: Vec<WireResult>,
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
                (Outcome::Errored, false, _) => COULD_NOT_DECIDE.to_owned(),
                (_, true, Some(j)) => j.reason.clone(),
                (_, true, None) => COULD_NOT_DECIDE.to_owned(),
                (outcome, false, _) => rule_reason(&check.kind, outcome).to_owned(),
            };
            self.results.push(WireResult {
                name: check.name.clone(),
                stage: wire_stage(check.stage),
                kind: check.kind.as_str().to_owned(),
                mode: WireMode::Block,
                attempt: result.attempt,
                outcome: wire_outcome(result.outcome),
                score: judgement.and_then(|j| j.score).filter(|_| judged),
                reason,
                judge_model: judgement
                    .and_then(|j| j.judge_model.clone())
                    .filter(|_| judged),
                passed_on_error: result.passed_on_error,
                created_at_ms: now_ms,
                alert: wire_alert(check),
                tool: None,
                call: None,
            });
        }
    }

    /// Results of tool-call checks decided now, in the order decided.
    pub fn tools_decided(&mut self, results: &[crate::tools::ToolResult], now_ms: u64) {
        for r in results {
            self.results.push(WireResult {
                name: r.name.clone(),
                stage: WireStage::Output,
                kind: r.kind.to_owned(),
                mode: WireMode::Block,
                attempt: r.attempt,
                outcome: wire_outcome(r.outcome),
                score: None,
                reason: r.reason.clone(),
                judge_model: r.judge_model.clone(),
                passed_on_error: false,
                created_at_ms: now_ms,
                alert: None,
                tool: Some(r.tool.clone()),
                call: Some(r.call),
            });
        }
    }

    /// A background check drawn for this turn.
    pub fn background(&mut self, check: &Check, judge: JudgeRequest) {
        self.background.push(BackgroundCheck {
            name: check.name.clone(),
            judge,
            alert: wire_alert(check),
        });
    }

    /// How many results are recorded so far.
    pub fn len(&self) -> usize {
        self.results.len()
    }

    pub fn is_empty(&self) -> bool {
        self.results.is_empty() && self.background.is_empty()
    }

    /// The report of the finished turn; `None` when no check decided anything (a turn the filter
    /// does not check, or one refused before a version was chosen).
    pub fn report(self) -> Option<TurnReport> {
        let _span = crate::profile::span("phase.report_build");
        let (agent, version) = self.agent_version?;
        if self.results.is_empty() && self.background.is_empty() {
            return None;
        }
        Some(TurnReport {
            turn_id: self.turn_id,
            response_id: self.response_id,
            agent,
            version,
            person: self.person,
            results: self.results,
            background: self.background,
        })
    }

    #[cfg(test)]
    pub fn results(&self) -> &[WireResult] {
        &self.results
    }
}

/// Results decided now: counted as metrics and recorded for the turn's report.
pub fn decided(
    host: &mut dyn Host,
    record: &mut Record,
    version: &Version,
    results: &[CheckResult],
) {
    record.decided(version, results, host.now_unix_millis());
    for result in results {
        let counter = version.checks.get(result.check).and_then(|c| {
            c.counters.get(match result.outcome {
                Outcome::Passed => 0,
                Outcome::Failed => 1,
                Outcome::Errored => 2,
            })
        });
        if let Some(counter) = counter {
            host.increment_counter(counter);
        }
    }
}

/// Tool-call check results decided now: counted as metrics and recorded for the turn's report.
pub fn tools_decided(
    host: &mut dyn Host,
    record: &mut Record,
    results: &[crate::tools::ToolResult],
) {
    record.tools_decided(results, host.now_unix_millis());
    for r in results {
        host.increment_counter(&r.counter);
    }
}

/// The fixed sentence of a rule check's result. They speak of "the answer" on input checks too, as
/// an evaluation's do.
fn rule_reason(kind: &Kind, outcome: Outcome) -> &'static str {
    match (kind, outcome) {
        (_, Outcome::Errored) => COULD_NOT_DECIDE,
        (Kind::NotContains, Outcome::Failed) => "The answer contains text it had to avoid.",
        (Kind::NotContains, Outcome::Passed) => {
            "The answer does not contain the text it had to avoid."
        }
        (_, Outcome::Failed) => "The answer matches a pattern it had to avoid.",
        (_, Outcome::Passed) => "The answer does not match the pattern it had to avoid.",
    }
}

fn wire_stage(stage: Stage) -> WireStage {
    match stage {
        Stage::Input => WireStage::Input,
        Stage::Output => WireStage::Output,
    }
}

fn wire_outcome(outcome: Outcome) -> WireOutcome {
    match outcome {
        Outcome::Passed => WireOutcome::Passed,
        Outcome::Failed => WireOutcome::Failed,
        Outcome::Errored => WireOutcome::Errored,
    }
}

fn wire_alert(check: &Check) -> Option<WireAlert> {
    check.alert.as_ref().map(|a| WireAlert {
        failure_rate: a.failure_rate,
        over_last: a.over_last,
    })
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::config::Policy;

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
        let report = r.report().unwrap();
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
}
