//! Deciding a stage: every check of the stage gets one result, and the first blocking check that
//! did not pass (in the order the operator wrote them) stops the turn.

use crate::check::stop::{Code, Stop};
use crate::check::{CheckResult, Mode, Outcome, Stage};
use crate::config::{Check, Version};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub results: Vec<CheckResult>,
    pub stop: Option<Stop>,
}

/// What the stage's text gave.
pub struct Reading<'a> {
    /// The text rule checks read (for output: the answer plus text beside and inside tool calls).
    pub rule_text: &'a str,
    /// The rule checks that failed on `rule_text`, when an earlier decision already scanned it:
    /// the text is then not scanned again.
    pub failed: Option<&'a [usize]>,
    /// Whether judged checks apply: on output only when the round ended without asking for a tool.
    pub judged_apply: bool,
    /// `false`: the text could not be read at all, so no check of the stage can decide.
    pub readable: bool,
    /// What the judge decided, by check index; a judged check missing here could not decide.
    pub judged: &'a [(usize, Outcome)],
}

/// Whether a judge's outcome for `check` stops the turn on its own: a failure, or an error the
/// check does not let through with `on_error: "pass"`. The other verdicts are then not awaited.
pub fn judged_stops(version: &Version, (check, outcome): &(usize, Outcome)) -> bool {
    *outcome == Outcome::Failed
        || (*outcome == Outcome::Errored
            && version.checks.get(*check).is_some_and(|c| !c.on_error_pass))
}

/// Decides the blocking checks of `stage` on what was read. A judged check takes the judge's
/// outcome from `reading.judged`; without one it could not decide, so it is errored (and stops the
/// turn unless `on_error: "pass"`). Background checks never decide here.
pub fn decide(version: &Version, stage: Stage, reading: &Reading<'_>, attempt: u32) -> Verdict {
    let _span = crate::profile::span("phase.decide");
    let rules = match stage {
        Stage::Input => &version.input_rules,
        Stage::Output => &version.output_rules,
    };
    let failed = match (reading.readable, reading.failed) {
        (false, _) => Vec::new(),
        (true, Some(failed)) => failed.to_vec(),
        (true, None) => rules.failed_checks(reading.rule_text),
    };
    let mut results = Vec::new();
    let mut stop = None;
    for (i, check) in version.checks.iter().enumerate() {
        if check.stage != stage || check.mode != Mode::Block {
            continue;
        }
        let judged = !check.kind.is_rule();
        if judged && !reading.judged_apply {
            continue;
        }
        let outcome = if !reading.readable {
            Outcome::Errored
        } else if judged {
            reading
                .judged
                .iter()
                .find(|(c, _)| *c == i)
                .map_or(Outcome::Errored, |(_, o)| *o)
        } else if failed.contains(&i) {
            Outcome::Failed
        } else {
            Outcome::Passed
        };
        let passed_on_error = outcome == Outcome::Errored && check.on_error_pass;
        if stop.is_none() && outcome != Outcome::Passed && !passed_on_error {
            stop = Some(stop_for(check, outcome));
        }
        results.push(CheckResult {
            check: i,
            outcome,
            passed_on_error,
            attempt,
        });
    }
    Verdict { results, stop }
}

fn stop_for(check: &Check, outcome: Outcome) -> Stop {
    Stop {
        stage: check.stage,
        check: check.name.clone(),
        code: match outcome {
            Outcome::Errored => Code::CheckErrored,
            _ => Code::failed_at(check.stage),
        },
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::config::Policy;

    fn version(checks: &str) -> std::rc::Rc<Version> {
        let json = format!(
            r#"{{"default_agent": "a", "agents": {{"a": {{"published": "1", "versions": {{"1": {{"live_checks": [{checks}]}}}}}}}}}}"#
        );
        Policy::from_json(json.as_bytes())
            .unwrap()
            .select(None, None, None)
            .unwrap()
    }

    const TWO_RULES: &str = r#"
        {"name": "no-pw", "stage": "input", "kind": "not_contains", "expected": "password"},
        {"name": "no-card", "stage": "input", "kind": "matches_pattern", "pattern": "\\d{16}", "max_match": 16},
        {"name": "no-iban", "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18}"#;

    fn read(text: &str) -> Reading<'_> {
        Reading {
            rule_text: text,
            failed: None,
            judged_apply: true,
            readable: true,
            judged: &[],
        }
    }

    #[test]
    fn every_check_of_the_stage_gets_a_result_and_the_first_failure_stops() {
        let v = version(TWO_RULES);
        let verdict = decide(&v, Stage::Input, &read("card 1234567812345678 password"), 1);
        let outcomes: Vec<_> = verdict
            .results
            .iter()
            .map(|r| (r.check, r.outcome))
            .collect();
        assert_eq!(outcomes, vec![(0, Outcome::Failed), (1, Outcome::Failed)]);
        let stop = verdict.stop.unwrap();
        assert_eq!(
            (stop.check.as_str(), stop.code),
            ("no-pw", Code::InputCheckFailed)
        );
    }

    #[test]
    fn clean_text_passes_every_check() {
        let v = version(TWO_RULES);
        let verdict = decide(&v, Stage::Output, &read("hello"), 1);
        assert_eq!(verdict.stop, None);
        assert_eq!(verdict.results.len(), 1);
        assert_eq!(verdict.results[0].outcome, Outcome::Passed);
    }

    #[test]
    fn unreadable_text_errors_every_check_and_stops() {
        let v = version(TWO_RULES);
        let verdict = decide(
            &v,
            Stage::Output,
            &Reading {
                rule_text: "",
                failed: None,
                judged_apply: true,
                readable: false,
                judged: &[],
            },
            1,
        );
        assert_eq!(verdict.results[0].outcome, Outcome::Errored);
        assert_eq!(verdict.stop.unwrap().code, Code::CheckErrored);
    }

    #[test]
    fn judged_checks_without_a_judge_error_and_fail_closed() {
        let v = version(
            r#"{"name": "topic", "stage": "input", "kind": "custom_rule", "expected": "about orders"},
               {"name": "tone", "stage": "input", "kind": "polite_tone", "on_error": "pass"}"#,
        );
        let verdict = decide(&v, Stage::Input, &read("hi"), 1);
        assert_eq!(verdict.stop.unwrap().code, Code::CheckErrored);
        assert!(verdict
            .results
            .iter()
            .all(|r| r.outcome == Outcome::Errored));
        assert_eq!(
            verdict
                .results
                .iter()
                .map(|r| r.passed_on_error)
                .collect::<Vec<_>>(),
            vec![false, true]
        );
    }

    #[test]
    fn judged_checks_take_the_judges_outcome() {
        let v = version(
            r#"{"name": "topic", "stage": "input", "kind": "custom_rule", "expected": "about orders"},
               {"name": "tone", "stage": "input", "kind": "polite_tone"}"#,
        );
        let judged = [(0, Outcome::Passed), (1, Outcome::Failed)];
        let verdict = decide(
            &v,
            Stage::Input,
            &Reading {
                judged: &judged,
                ..read("hi")
            },
            1,
        );
        let stop = verdict.stop.unwrap();
        assert_eq!(
            (stop.check.as_str(), stop.code),
            ("tone", Code::InputCheckFailed)
        );
        assert_eq!(verdict.results[0].outcome, Outcome::Passed);
    }

    #[test]
    fn on_error_pass_lets_the_turn_go_on() {
        let v = version(
            r#"{"name": "tone", "stage": "output", "kind": "polite_tone", "on_error": "pass"}"#,
        );
        let verdict = decide(&v, Stage::Output, &read("hi"), 1);
        assert_eq!(verdict.stop, None);
        assert!(verdict.results[0].passed_on_error);
    }

    #[test]
    fn judged_output_checks_skip_a_round_that_asks_for_a_tool() {
        let v = version(r#"{"name": "tone", "stage": "output", "kind": "polite_tone"}"#);
        let verdict = decide(
            &v,
            Stage::Output,
            &Reading {
                rule_text: "",
                failed: None,
                judged_apply: false,
                readable: true,
                judged: &[],
            },
            1,
        );
        assert_eq!(
            verdict,
            Verdict {
                results: vec![],
                stop: None
            }
        );
    }

    #[test]
    fn background_checks_never_decide_in_the_filter() {
        let v = version(
            r#"{"name": "tone", "stage": "output", "kind": "polite_tone", "mode": "background"}"#,
        );
        assert!(decide(&v, Stage::Output, &read("x"), 1).results.is_empty());
    }
}
