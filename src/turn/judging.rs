//! Judged checks of a held question or a held non-streamed answer: the callouts out, their verdicts in,
//! and the one place a stage with verdicts in hand is decided.

use super::stream::stream_callout;
use super::*;

impl Turn {
    /// Sends every blocking judged check of `stage` to the judge, in parallel.
    pub(super) fn ask_judge(
        &mut self,
        host: &mut dyn Host,
        asked: Asked,
        stage: Stage,
        text: String,
        withheld: Option<api::Reply>,
    ) -> Box<Judging> {
        let question = match stage {
            Stage::Input => None,
            Stage::Output => Some(asked.request.last_user_text().to_owned()),
        };
        let mut judging = Box::new(Judging {
            stage,
            pending: Vec::new(),
            judged: Vec::new(),
            withheld,
            text: String::new(),
            asked,
        });
        let read = Judged {
            stage,
            text: &text,
            question: question.as_deref(),
            turn_model: judging.asked.request.model.as_deref(),
            credentials: &judging.asked.credentials,
        };
        let sent = judge::dispatch(
            host,
            &self.policy,
            &mut self.record,
            &judging.asked.version,
            &read,
            1,
        );
        judging.pending = sent.pending;
        judging.judged = sent.judged;
        judging.text = text;
        judging
    }

    /// A callout answered: a verdict from the judge, a tool call's check or a retry's answer.
    pub fn on_callout_response(&mut self, host: &mut dyn Host, token: u32, body_size: usize) {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Streaming(mut streamed) => {
                let mut cx = Ctx {
                    host,
                    policy: &self.policy,
                    record: &mut self.record,
                };
                stream_callout(&mut cx, &mut streamed, token, body_size);
                self.state = State::Streaming(streamed);
            }
            State::CheckingCalls(check) => {
                if !self.call_verdict(host, check, token, body_size) {
                    answered_late(host);
                }
            }
            State::CheckingMcp(check) => {
                if !self.mcp_verdict(host, check, token, body_size) {
                    answered_late(host);
                }
            }
            State::Recovering(recovering) => {
                self.recovering_callout(host, recovering, token, body_size);
            }
            State::JudgingQuestion(judging) | State::JudgingAnswer(judging) => {
                self.judge_verdict(host, judging, token, body_size);
            }
            // No callout of this turn is out.
            other @ (State::Bypass
            | State::ReadingQuestion { .. }
            | State::AwaitingAnswer(_)
            | State::HoldingAnswer { .. }
            | State::Discarding
            | State::Observing { .. }
            | State::Peeking { .. }
            | State::ReadingMcp { .. }
            | State::Done) => {
                self.state = other;
                answered_late(host);
            }
        }
    }

    /// A judged check's verdict on a held question or answer (the turn's state, taken).
    fn judge_verdict(
        &mut self,
        host: &mut dyn Host,
        mut judging: Box<Judging>,
        token: u32,
        body_size: usize,
    ) {
        let Some(at) = judging.pending.iter().position(|(t, _)| *t == token) else {
            self.state = self.judging_state(judging);
            host.log(LogLevel::Warn, "livecheck: an unknown callout answered");
            return;
        };
        let (_, check) = judging.pending.swap_remove(at);
        let body = host.callout_body(body_size).unwrap_or_default();
        let verdict = judge::verdict(host.callout_status(), &body);
        self.record.judged(check, 1, verdict.as_ref());
        judging
            .judged
            .push((check, judge::outcome(verdict.as_ref())));
        let _ = self.settle(host, judging, true);
    }

    fn judging_state(&self, judging: Box<Judging>) -> State {
        match judging.stage {
            Stage::Input => State::JudgingQuestion(judging),
            Stage::Output => State::JudgingAnswer(judging),
        }
    }

    /// Decides the stage as far as the verdicts in hand allow: a judged check that stopped the turn
    /// stops it now (the other verdicts are not awaited), all passed lets it go on, else it waits.
    /// `resumed` says whether the stream was paused and must be resumed through the host.
    pub(super) fn settle(
        &mut self,
        host: &mut dyn Host,
        judging: Box<Judging>,
        resumed: bool,
    ) -> Flow {
        let version = Rc::clone(&judging.asked.version);
        let stopping = judging.judged.iter().find(|j| judged_stops(&version, j));
        if stopping.is_none() && !judging.pending.is_empty() {
            self.state = self.judging_state(judging);
            return Flow::Pause;
        }
        let verdict = decide(
            &version,
            judging.stage,
            &Reading {
                // The judge is asked only once the stage's rules passed: no need to scan again.
                rule_text: "",
                failed: Some(&[]),
                judged_apply: true,
                readable: true,
                judged: &judging.judged,
            },
            1,
        );
        // Checks still with the judge never decided: they get no result.
        let settled: Vec<CheckResult> = verdict
            .results
            .iter()
            .filter(|r| !judging.pending.iter().any(|(_, c)| *c == r.check))
            .cloned()
            .collect();
        decided(host, &mut self.record, &version, &settled);
        let stop = stopping.and_then(|(i, o)| {
            let check = version.checks.get(*i)?;
            Some(Stop {
                stage: judging.stage,
                check: check.name.clone(),
                code: if *o == Outcome::Errored {
                    stop::Code::CheckErrored
                } else {
                    stop::Code::failed_at(judging.stage)
                },
            })
        });
        let asked = judging.asked;
        match (judging.stage, stop) {
            (Stage::Input, Some(stop)) => self.refuse_question(host, &asked, Some(&stop)),
            (Stage::Input, None) => {
                self.state = State::AwaitingAnswer(asked);
                resume(host, Stage::Input, resumed)
            }
            (Stage::Output, Some(stop)) => {
                self.state = State::Done;
                if let (Some(rules), Some(withheld)) = (
                    recovery::recoverable(&version, &settled),
                    judging.withheld.clone(),
                ) {
                    if let Some(flow) =
                        self.recover(host, asked, stop.clone(), rules, withheld, false, resumed)
                    {
                        return flow;
                    }
                    return Flow::Pause;
                }
                let reply = judging.withheld.unwrap_or_else(|| {
                    let ids = fresh_ids(host);
                    api::refusal(
                        asked.api,
                        &asked.version.blocked_reply,
                        &asked.request,
                        &ids,
                    )
                });
                self.answer_instead(host, Some(&stop), reply.content_type, &reply.body, resumed)
            }
            (Stage::Output, None) => {
                self.state = State::Done;
                self.cx(host).queue_background(&asked, &judging.text);
                self.pass_held(host);
                resume(host, Stage::Output, resumed)
            }
        }
    }
}

/// A callout answered when none of the turn's is out (its turn was decided meanwhile).
fn answered_late(host: &mut dyn Host) {
    host.log(
        LogLevel::Warn,
        "livecheck: a callout answered after its turn was decided",
    );
}
