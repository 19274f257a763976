//! Asking the model again, for a held non-streamed answer or a held streamed round nothing of
//! which was shown.

use super::*;
use crate::api::Usage;

impl Turn {
    /// Asks the model again for a held non-streamed answer. `None`: the retry is out and the turn
    /// waits in `Recovering`; `Some`: it was withheld at once. `resumed`: called from a callout's
    /// answer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn recover(
        &mut self,
        host: &mut dyn Host,
        asked: Asked,
        stop: Stop,
        rules: Vec<String>,
        withheld: api::Reply,
        keep_tools: bool,
        resumed: bool,
    ) -> Option<Flow> {
        let estimate = host.now_unix_millis().saturating_sub(asked.asked_at_ms);
        // The withheld form keeps the rejected answer's usage: the first attempt's.
        let first_usage = api::answer_usage(asked.api, &withheld.body).unwrap_or_default();
        let Some(source) = asked.source.clone() else {
            self.state = State::Done;
            return Some(self.withhold(host, &asked, &stop, withheld, &first_usage, resumed));
        };
        let turn = asked.recovery_turn(&self.policy, &source);
        let (recovery, next) = Recovery::start(
            host,
            &turn,
            stop,
            rules,
            first_usage,
            estimate,
            asked.started_ms,
            keep_tools,
        );
        let recovering = Box::new(Recovering {
            asked,
            recovery,
            withheld,
        });
        match next {
            Next::Wait => {
                self.state = State::Recovering(recovering);
                None
            }
            other => Some(self.recovering_next(host, recovering, other, resumed)),
        }
    }

    /// A callout answered while a non-streamed answer is recovered (the turn's state, taken).
    pub(super) fn recovering_callout(
        &mut self,
        host: &mut dyn Host,
        mut r: Box<Recovering>,
        token: u32,
        body_size: usize,
    ) {
        if !r.recovery.owns(token) {
            self.state = State::Recovering(r);
            host.log(LogLevel::Warn, "livecheck: an unknown callout answered");
            return;
        }
        let Some(source) = r.asked.source.clone() else {
            self.state = State::Recovering(r);
            return;
        };
        let turn = r.asked.recovery_turn(&self.policy, &source);
        let next = r
            .recovery
            .on_callout(host, &turn, &mut self.record, token, body_size);
        self.recovering_next(host, r, next, true);
    }

    /// A non-streamed recovery moved on: an answer passed (sent in place of the first), none did
    /// (the first is withheld), or it waits (the turn stays in `Recovering`).
    fn recovering_next(
        &mut self,
        host: &mut dyn Host,
        r: Box<Recovering>,
        next: Next,
        resumed: bool,
    ) -> Flow {
        if next == Next::Wait {
            self.state = State::Recovering(r);
            return Flow::Pause;
        }
        self.state = State::Done;
        let Recovering {
            asked,
            recovery,
            withheld,
        } = *r;
        match next {
            Next::Deliver(body) => {
                self.record.response_id =
                    answer_id(asked.api, &body).or(self.record.response_id.take());
                self.answer_instead(host, None, "application/json", &body, resumed)
            }
            _ => self.withhold(
                host,
                &asked,
                &recovery.first_stop,
                withheld,
                recovery.usage(),
                resumed,
            ),
        }
    }
}

/// Asks the model again for a held round nothing of which was shown (`Hold::Everything`), when
/// every check that stopped it recovers; `false` when the round must be cut instead. A round
/// decided before its answer ended (`early`) asks at once; the first answer's usage is added when
/// it has ended. `Some`: the retry is out, and the stream's phase becomes the recovery.
pub(super) fn start_stream_recovery(
    cx: &mut Ctx<'_>,
    s: &Streamed,
    stop: &Stop,
    results: &[CheckResult],
    early: bool,
) -> Option<Box<StreamRecovery>> {
    if Hold::for_version(&s.asked.version) != Some(Hold::Everything) {
        return None;
    }
    let (Some(rules), Some(source)) = (
        recovery::recoverable(&s.asked.version, results),
        s.asked.source.clone(),
    ) else {
        return None;
    };
    let first_usage = if early {
        Usage::default()
    } else {
        first_answer_usage(s)
    };
    let estimate = cx
        .host
        .now_unix_millis()
        .saturating_sub(s.asked.asked_at_ms);
    let turn = s.asked.recovery_turn(cx.policy, &source);
    let (recovery, next) = Recovery::start(
        cx.host,
        &turn,
        stop.clone(),
        rules,
        first_usage,
        estimate,
        s.asked.started_ms,
        false,
    );
    if next != Next::Wait {
        return None;
    }
    Some(Box::new(StreamRecovery {
        recovery,
        kept: Vec::new(),
        early,
        passed: None,
    }))
}

/// What the first answer cost, from the copy kept of it.
fn first_answer_usage(s: &Streamed) -> Usage {
    s.copy
        .as_deref()
        .and_then(|copy| api::stream_usage(s.asked.api, copy))
        .unwrap_or_default()
}

/// A callout of a streamed round's recovery answered: the passing answer is re-emitted as the
/// vendor's events in place of the held round, or the round is cut with the first stop; the
/// paused response then goes on. A passing answer waits for the first answer's end when that is
/// still streaming and the host can only reset a stream (a reset would make the Anthropic and
/// Responses SDKs raise after it); where the host ends a response cleanly it goes out at once and
/// the first model is stopped. A cut goes out at once and the stream is closed, as a rule's cut is.
pub(super) fn stream_recovery_answered(
    cx: &mut Ctx<'_>,
    s: &mut Streamed,
    token: u32,
    body_size: usize,
) {
    let mut r = match std::mem::replace(&mut s.phase, Phase::Passing) {
        Phase::Recovering(r) => r,
        other @ (Phase::Passing | Phase::Judging(_) | Phase::Ended(_)) => {
            s.phase = other;
            return;
        }
    };
    let Some(source) = s.asked.source.clone() else {
        return;
    };
    let turn = s.asked.recovery_turn(cx.policy, &source);
    let next = r
        .recovery
        .on_callout(cx.host, &turn, cx.record, token, body_size);
    let buffered = r.kept.len();
    match next {
        Next::Wait => {
            s.phase = Phase::Recovering(r);
            return;
        }
        Next::Deliver(body) if !s.upstream_ended && !cx.host.ends_response_cleanly() => {
            // Kept until the first answer ended; the response stays paused.
            r.passed = Some(body);
            s.phase = Phase::Recovering(r);
            return;
        }
        Next::Deliver(body) => {
            let out = recovered_events(cx.record, s, *r, body);
            if !s.upstream_ended {
                // The caller's response ends with the recovered round; the first model is stopped.
                s.set_close_pending(true);
                cx.host.close_response_soon();
            }
            cx.replace_chunk(buffered, &out);
        }
        Next::Withhold => {
            let mut out = std::mem::take(&mut r.kept);
            out.append(&mut cut_with_first_stop(s, &r.recovery));
            s.end(true);
            if !s.upstream_ended {
                // The first model is stopped: a withheld round is a refusal, like a cut.
                s.set_close_pending(true);
                cx.host.close_response_soon();
            }
            cx.replace_chunk(buffered, &out);
        }
    }
    cx.host.resume_response();
}

/// The first answer ended while a passing recovered answer waited for it: it goes out now.
/// Returns what the buffer now holds, `None` while nothing waits.
pub(super) fn deliver_waiting(record: &mut Record, s: &mut Streamed) -> Option<Vec<u8>> {
    if !matches!(&s.phase, Phase::Recovering(r) if r.passed.is_some()) {
        return None;
    }
    let Phase::Recovering(mut r) = std::mem::replace(&mut s.phase, Phase::Passing) else {
        return None;
    };
    let body = r.passed.take()?;
    Some(recovered_events(record, s, *r, body))
}

/// The held round's kept bytes, then the passing answer as the vendor's events; whatever the
/// upstream still sends of the first answer is dropped.
fn recovered_events(
    record: &mut Record,
    s: &mut Streamed,
    r: StreamRecovery,
    body: Vec<u8>,
) -> Vec<u8> {
    let StreamRecovery {
        recovery,
        mut kept,
        early,
        ..
    } = r;
    record.response_id = answer_id(s.asked.api, &body).or(record.response_id.take());
    // Asked before the first answer ended: its usage is known only now.
    let body = if early {
        let mut total = api::answer_usage(s.asked.api, &body).unwrap_or_default();
        total.add(&first_answer_usage(s));
        api::with_usage(s.asked.api, &body, &total).unwrap_or(body)
    } else {
        body
    };
    let cut = match api::as_stream(s.asked.api, &body, &s.asked.request) {
        Ok(mut events) => {
            kept.append(&mut events);
            false
        }
        Err(_) => {
            kept.append(&mut cut_with_first_stop(s, &recovery));
            true
        }
    };
    s.end(cut);
    kept
}

/// No recovered answer goes out: the round is cut, naming the check that stopped it first (the
/// caller ends the stream as cut).
fn cut_with_first_stop(s: &mut Streamed, recovery: &Recovery) -> Vec<u8> {
    let check = check_index(&s.asked.version, &recovery.first_stop.check)
        .or_else(|| first_blocking_output_check(&s.asked.version))
        .unwrap_or_default();
    s.rewriter.cut(check)
}

/// The upstream's id of a non-streamed answer: the id the caller of a recovered turn sees.
fn answer_id(api: Api, body: &[u8]) -> Option<String> {
    api::parse_answer(api, body, false).ok()?.id
}
