//! Asking the model again instead of refusing.
//!
//! When every blocking check an answer failed asks for recovery, and the caller has seen none of
//! the answer, the filter asks the sidecar for another answer (`POST /v1/retry`): the same request
//! plus the rules the answer broke, never the rejected answer, without tools, not streamed. Each
//! new answer is held to every blocking output check again (rules here, judged checks through the
//! judge), `attempt` counting answers, until one passes, the version's `recover_attempts` are used
//! up, a check that cannot decide or does not recover stops it, or the turn's deadline would pass.
//! The caller gets only the answer that passed, with the usage of every attempt.

use livecheck_wire::{RetryAnswer, RetryOutcome, RetryRequest, RETRY_PATH};

use crate::api::{self, Api, Request, Usage};
use crate::check::stop::Stop;
use crate::check::{CheckResult, Outcome};
use crate::config::{Policy, Stage, Version};
use crate::host::Host;
use crate::judge::{self, Judged};
use crate::record::tools_decided;
use crate::record::{decided, Record};
use crate::tools::{self, Checking};
use crate::verdict::{decide, judged_stops, Reading};

/// What a retry is built from, kept from the request while the turn runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub authority: String,
    pub path: String,
    /// The request body as the caller sent it.
    pub body: String,
    pub headers: Vec<(String, String)>,
}

/// What the turn this recovery belongs to asked.
pub struct Turn<'a> {
    pub policy: &'a Policy,
    pub version: &'a Version,
    pub api: Api,
    pub request: &'a Request,
    pub source: &'a Source,
    pub credentials: &'a [(String, String)],
}

/// The rules a stopped answer broke, when every blocking check that stopped it failed (not
/// errored) and asks for recovery; `None` when the answer must be withheld at once.
pub fn recoverable(version: &Version, results: &[CheckResult]) -> Option<Vec<String>> {
    let stopping: Vec<&CheckResult> = results
        .iter()
        .filter(|r| r.outcome != Outcome::Passed && !r.passed_on_error)
        .collect();
    if stopping.is_empty() {
        return None;
    }
    stopping
        .iter()
        .map(|r| {
            let check = version.checks.get(r.check)?;
            (r.outcome == Outcome::Failed && check.recover).then(|| check.broken_rule.clone())
        })
        .collect()
}

/// What the turn does next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// A callout is in flight.
    Wait,
    /// This answer passed: the caller gets it (non-streamed shape, usage of every attempt).
    Deliver(Vec<u8>),
    /// No answer passed: withhold, naming the check that stopped the first answer.
    Withhold,
}

#[derive(Debug)]
pub struct Recovery {
    /// The check that stopped the first answer: the header names it when nothing passes.
    pub first_stop: Stop,
    /// The answer asked for or being decided now: 2 is the first retry.
    pub attempt: u32,
    rules: Vec<String>,
    /// The usage of every answer so far.
    usage: Usage,
    /// How long the slowest answer took: a retry expected to pass the deadline is not made.
    estimate_ms: u64,
    sent_at_ms: u64,
    deadline_at_ms: u64,
    retry: Option<u32>,
    /// A retry's answer whose rules passed, with its judged checks in flight.
    candidate: Option<Candidate>,
    /// Stopped for a denied tool call: retries keep the tools, and their calls are checked again.
    keep_tools: bool,
    /// A retry's answer that calls tools, with its tool checks in flight.
    tool_candidate: Option<(Vec<u8>, Checking)>,
}

#[derive(Debug)]
struct Candidate {
    body: Vec<u8>,
    pending: Vec<(u32, usize)>,
    judged: Vec<(usize, Outcome)>,
}

impl Recovery {
    /// Asks for the second answer. `first_usage`: what the rejected answer cost; `estimate_ms`:
    /// how long it took; `started_ms`: when the turn began.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        host: &mut dyn Host,
        turn: &Turn<'_>,
        first_stop: Stop,
        rules: Vec<String>,
        first_usage: Usage,
        estimate_ms: u64,
        started_ms: u64,
        keep_tools: bool,
    ) -> (Self, Next) {
        let mut recovery = Self {
            first_stop,
            attempt: 1,
            rules,
            usage: first_usage,
            estimate_ms,
            sent_at_ms: 0,
            deadline_at_ms: started_ms.saturating_add(turn.version.deadline_ms),
            retry: None,
            candidate: None,
            keep_tools,
            tool_candidate: None,
        };
        let next = recovery.ask_again(host, turn);
        (recovery, next)
    }

    /// Whether `token` is one of this recovery's callouts.
    pub fn owns(&self, token: u32) -> bool {
        self.retry == Some(token)
            || self
                .candidate
                .as_ref()
                .is_some_and(|c| c.pending.iter().any(|(t, _)| *t == token))
            || self
                .tool_candidate
                .as_ref()
                .is_some_and(|(_, c)| c.waits_for(token))
    }

    fn ask_again(&mut self, host: &mut dyn Host, turn: &Turn<'_>) -> Next {
        if self.attempt > turn.version.recover_attempts {
            return Next::Withhold;
        }
        let now = host.now_unix_millis();
        if now.saturating_add(self.estimate_ms) > self.deadline_at_ms {
            return Next::Withhold;
        }
        self.attempt += 1;
        let request = RetryRequest {
            api: turn.api,
            authority: turn.source.authority.clone(),
            path: turn.source.path.clone(),
            request: turn.source.body.clone(),
            rules: self.rules.clone(),
            attempt: self.attempt,
            keep_tools: self.keep_tools,
        };
        let Ok(body) = serde_json::to_vec(&request) else {
            return Next::Withhold;
        };
        let mut headers = crate::judge::base_headers(turn.policy, RETRY_PATH);
        headers.extend(turn.source.headers.iter().cloned());
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let timeout = self.deadline_at_ms.saturating_sub(now).max(1);
        match host.dispatch_callout(&turn.policy.judge_cluster, &headers, &body, timeout) {
            Some(token) => {
                self.retry = Some(token);
                self.sent_at_ms = now;
                Next::Wait
            }
            None => Next::Withhold,
        }
    }

    /// One of this recovery's callouts answered.
    pub fn on_callout(
        &mut self,
        host: &mut dyn Host,
        turn: &Turn<'_>,
        record: &mut Record,
        token: u32,
        body_size: usize,
    ) -> Next {
        let body = host.callout_body(body_size).unwrap_or_default();
        let status = host.callout_status();
        if self.retry == Some(token) {
            self.retry = None;
            let took = host.now_unix_millis().saturating_sub(self.sent_at_ms);
            self.estimate_ms = self.estimate_ms.max(took);
            let answer = (status == Some(200))
                .then(|| serde_json::from_slice::<RetryAnswer>(&body).ok())
                .flatten()
                .filter(|a| a.outcome == RetryOutcome::Answered)
                .and_then(|a| a.body);
            return match answer {
                Some(answer) => self.read_answer(host, turn, record, answer.into_bytes()),
                // No answer came back: nothing to hold to the checks, and nothing to show.
                None => Next::Withhold,
            };
        }
        if let Some((_, checking)) = self
            .tool_candidate
            .as_mut()
            .filter(|(_, c)| c.waits_for(token))
        {
            let verdict = judge::verdict(status, &body);
            checking.verdict(turn.version, token, verdict.as_ref());
            return self.settle_tools(host, turn, record);
        }
        let Some(candidate) = &mut self.candidate else {
            return Next::Wait;
        };
        let Some(at) = candidate.pending.iter().position(|(t, _)| *t == token) else {
            return Next::Wait;
        };
        let (_, check) = candidate.pending.swap_remove(at);
        let verdict = judge::verdict(status, &body);
        record.judged(check, self.attempt, verdict.as_ref());
        candidate
            .judged
            .push((check, judge::outcome(verdict.as_ref())));
        self.settle(host, turn, record)
    }

    /// A retry's answer: rules first, then the judge; every blocking output check decides again.
    fn read_answer(
        &mut self,
        host: &mut dyn Host,
        turn: &Turn<'_>,
        record: &mut Record,
        body: Vec<u8>,
    ) -> Next {
        if let Some(usage) = api::answer_usage(turn.api, &body) {
            self.usage.add(&usage);
        }
        let rule_text = !turn.version.output_rules.is_empty();
        let answer = api::parse_answer(turn.api, &body, rule_text).ok();
        let rules = decide(
            turn.version,
            Stage::Output,
            &Reading {
                rule_text: answer
                    .as_ref()
                    .and_then(|a| a.rule_text.as_deref())
                    .unwrap_or_default(),
                failed: None,
                judged_apply: answer.is_none(),
                readable: answer.is_some(),
                judged: &[],
            },
            self.attempt,
        );
        let Some(answer) = answer else {
            decided(host, record, turn.version, &rules.results);
            return Next::Withhold;
        };
        if rules.stop.is_some() || answer.asks_for_tool {
            decided(host, record, turn.version, &rules.results);
            if answer.asks_for_tool && rules.stop.is_none() {
                if self.keep_tools {
                    // Asked again after a denied tool call: its calls are checked as the first
                    // answer's were (a repeat of the denied call is denied again).
                    let cx = tools::Context {
                        policy: turn.policy,
                        version: turn.version,
                        intent: turn.request.intent(),
                        turn_model: turn.request.model.as_deref(),
                        credentials: turn.credentials,
                        attempt: self.attempt,
                    };
                    let checking = Checking::start(host, &cx, answer.calls, 0);
                    self.tool_candidate = Some((body, checking));
                    return self.settle_tools(host, turn, record);
                }
                // A retry may never call a tool: this answer cannot be shown; ask again.
                return self.ask_again(host, turn);
            }
            return self.stopped(host, turn, &rules.results);
        }
        let read = Judged {
            stage: Stage::Output,
            text: &answer.text,
            question: Some(turn.request.last_user_text()),
            turn_model: turn.request.model.as_deref(),
            credentials: turn.credentials,
        };
        let sent = judge::dispatch(host, turn.policy, record, turn.version, &read, self.attempt);
        self.candidate = Some(Candidate {
            body,
            pending: sent.pending,
            judged: sent.judged,
        });
        self.settle(host, turn, record)
    }

    /// The candidate's verdicts so far: a stop decides at once, all in decides, else wait.
    fn settle(&mut self, host: &mut dyn Host, turn: &Turn<'_>, record: &mut Record) -> Next {
        let Some(candidate) = &self.candidate else {
            return Next::Wait;
        };
        let stopping = candidate
            .judged
            .iter()
            .any(|j| judged_stops(turn.version, j));
        if !stopping && !candidate.pending.is_empty() {
            return Next::Wait;
        }
        let Some(candidate) = self.candidate.take() else {
            return Next::Wait;
        };
        let verdict = decide(
            turn.version,
            Stage::Output,
            &Reading {
                // The judge is asked only once the answer's rules passed.
                rule_text: "",
                failed: Some(&[]),
                judged_apply: true,
                readable: true,
                judged: &candidate.judged,
            },
            self.attempt,
        );
        // Checks still with the judge when another stopped the answer never decided.
        let results: Vec<CheckResult> = verdict
            .results
            .iter()
            .filter(|r| !candidate.pending.iter().any(|(_, c)| *c == r.check))
            .cloned()
            .collect();
        decided(host, record, turn.version, &results);
        if verdict.stop.is_some() {
            return self.stopped(host, turn, &results);
        }
        match api::with_usage(turn.api, &candidate.body, &self.usage) {
            Ok(body) => Next::Deliver(body),
            Err(_) => Next::Withhold,
        }
    }

    /// A retry's tool calls with their checks: all allowed delivers it, a denial asks again (when
    /// the row recovers) or withholds.
    fn settle_tools(&mut self, host: &mut dyn Host, turn: &Turn<'_>, record: &mut Record) -> Next {
        let Some((_, checking)) = &mut self.tool_candidate else {
            return Next::Wait;
        };
        tools_decided(host, record, &turn.version.tools, &checking.take_results());
        let next = checking.next();
        if next == tools::Next::Waiting {
            return Next::Wait;
        }
        let Some((body, _)) = self.tool_candidate.take() else {
            return Next::Wait;
        };
        match next {
            tools::Next::Allowed => match api::with_usage(turn.api, &body, &self.usage) {
                Ok(body) => Next::Deliver(body),
                Err(_) => Next::Withhold,
            },
            tools::Next::Denied(denial) if denial.recover => {
                self.rules = vec![denial.as_rule()];
                self.ask_again(host, turn)
            }
            _ => Next::Withhold,
        }
    }

    /// An answer that did not pass: asked for again when it may be, else withheld.
    fn stopped(&mut self, host: &mut dyn Host, turn: &Turn<'_>, results: &[CheckResult]) -> Next {
        match recoverable(turn.version, results) {
            Some(rules) => {
                self.rules = rules;
                self.ask_again(host, turn)
            }
            None => Next::Withhold,
        }
    }

    /// The usage of every answer so far, for a withheld answer.
    pub fn usage(&self) -> &Usage {
        &self.usage
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn version(checks: &str) -> std::rc::Rc<Version> {
        let json = format!(
            r#"{{"default_agent": "a", "agents": {{"a": {{"published": "1", "versions": {{"1": {{"live_checks": [{checks}]}}}}}}}}}}"#
        );
        crate::config::Policy::from_json(json.as_bytes())
            .unwrap()
            .select(None, None, None)
            .unwrap()
    }

    fn result(check: usize, outcome: Outcome, passed_on_error: bool) -> CheckResult {
        CheckResult {
            check,
            outcome,
            passed_on_error,
            attempt: 1,
        }
    }

    const CHECKS: &str = r#"
        {"name": "no-iban", "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18, "recover": true, "description": "Never state a bank account number."},
        {"name": "no-swear", "stage": "output", "kind": "not_contains", "expected": "darn", "recover": true},
        {"name": "no-pw", "stage": "output", "kind": "not_contains", "expected": "password"},
        {"name": "tone", "stage": "output", "kind": "polite_tone", "judge_model": "j", "recover": true, "on_error": "pass"}"#;

    #[test]
    fn only_failures_of_checks_that_recover_are_asked_again_with_their_rules() {
        let v = version(CHECKS);
        let passed = result(2, Outcome::Passed, false);
        assert_eq!(
            recoverable(
                &v,
                &[
                    result(0, Outcome::Failed, false),
                    result(1, Outcome::Failed, false),
                    passed.clone()
                ]
            ),
            Some(vec![
                "Never state a bank account number.".to_owned(),
                "darn".to_owned()
            ]),
            "the description, else the expected text"
        );
        assert_eq!(
            recoverable(
                &v,
                &[
                    result(0, Outcome::Failed, false),
                    result(2, Outcome::Failed, false)
                ]
            ),
            None,
            "one check without recovery withholds at once"
        );
        assert_eq!(
            recoverable(&v, &[result(3, Outcome::Errored, false)]),
            None,
            "a check that could not decide withholds at once"
        );
        assert_eq!(
            recoverable(&v, &[result(3, Outcome::Errored, true)]),
            None,
            "on_error pass withholds nothing and asks for nothing"
        );
        assert_eq!(recoverable(&v, &[passed]), None);
    }

    #[test]
    fn a_check_without_description_or_expected_text_names_itself() {
        let v = version(
            r#"{"name": "polite", "stage": "output", "kind": "polite_tone", "judge_model": "j", "recover": true}"#,
        );
        assert_eq!(
            recoverable(&v, &[result(0, Outcome::Failed, false)]),
            Some(vec!["polite".to_owned()])
        );
    }
}
