//! Asking the model again, for a held non-streamed answer or a held streamed round nothing of
//! which was shown.

use super::stream::replace_chunk;
use super::*;

impl Turn {
    /// Asks the model again for a non-streamed answer whose headers are still held. `None`: the
    /// retry is out and the turn waits in `Recovering`; `Some`: it was withheld at once.
    pub(super) fn recover(
        &mut self,
        host: &mut dyn Host,
        asked: Asked,
        stop: Stop,
        rules: Vec<String>,
        withheld: api::Reply,
    ) -> Option<Flow> {
        let estimate = host.now_unix_millis().saturating_sub(asked.asked_at_ms);
        // The withheld form keeps the rejected answer's usage: the first attempt's.
        let first_usage = api::answer_usage(asked.api, &withheld.body).unwrap_or_default();
        let Some(source) = asked.source.clone() else {
            self.state = State::Done;
            return Some(self.withhold(host, &asked, &stop, withheld, &first_usage));
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
        );
        self.state = State::Recovering(Box::new(Recovering {
            asked,
            recovery,
            withheld,
        }));
        match next {
            Next::Wait => None,
            other => Some(self.recovering_next(host, other)),
        }
    }

    /// A non-streamed recovery moved on: an answer passed (sent in place of the first), none did
    /// (the first is withheld), or it waits.
    pub(super) fn recovering_next(&mut self, host: &mut dyn Host, next: Next) -> Flow {
        if next == Next::Wait {
            return Flow::Pause;
        }
        let State::Recovering(r) = std::mem::replace(&mut self.state, State::Done) else {
            return Flow::Pause;
        };
        let Recovering {
            asked,
            recovery,
            withheld,
        } = *r;
        match next {
            Next::Deliver(body) => {
                self.record.response_id =
                    answer_id(asked.api, &body).or(self.record.response_id.take());
                // The answer's headers are still held: a local reply replaces the whole answer.
                host.send_local_reply(
                    200,
                    &[
                        ("content-type", "application/json"),
                        (livecheck_wire::TURN_ID_HEADER, &self.record.turn_id),
                    ],
                    &body,
                );
                Flow::Pause
            }
            _ => self.withhold(
                host,
                &asked,
                &recovery.first_stop,
                withheld,
                recovery.usage(),
            ),
        }
    }
}

/// Asks the model again for a held round nothing of which was shown (`Hold::Everything`), when
/// every check that stopped it recovers; `false` when the round must be cut instead.
pub(super) fn start_stream_recovery(
    host: &mut dyn Host,
    policy: &Policy,
    s: &mut Streamed,
    stop: &Stop,
    results: &[CheckResult],
) -> bool {
    if Hold::for_version(&s.asked.version) != Some(Hold::Everything) {
        return false;
    }
    let (Some(rules), Some(source)) = (
        recovery::recoverable(&s.asked.version, results),
        s.asked.source.clone(),
    ) else {
        return false;
    };
    let first_usage = s
        .copy
        .as_deref()
        .and_then(|copy| api::stream_usage(s.asked.api, copy))
        .unwrap_or_default();
    let estimate = host.now_unix_millis().saturating_sub(s.asked.asked_at_ms);
    let turn = s.asked.recovery_turn(policy, &source);
    let (recovery, next) = Recovery::start(
        host,
        &turn,
        stop.clone(),
        rules,
        first_usage,
        estimate,
        s.asked.started_ms,
    );
    if next != Next::Wait {
        return false;
    }
    s.recovery = Some(StreamRecovery {
        recovery,
        kept: Vec::new(),
    });
    true
}

/// A callout of a streamed round's recovery answered: the passing answer is re-emitted as the
/// vendor's events in place of the held round, or the round is cut with the first stop; the
/// paused response then goes on.
pub(super) fn stream_recovery_answered(
    host: &mut dyn Host,
    policy: &Policy,
    record: &mut Record,
    s: &mut Streamed,
    token: u32,
    body_size: usize,
) {
    let (Some(mut r), Some(source)) = (s.recovery.take(), s.asked.source.clone()) else {
        return;
    };
    let turn = s.asked.recovery_turn(policy, &source);
    let next = r.recovery.on_callout(host, &turn, record, token, body_size);
    let buffered = r.kept.len();
    let mut out = std::mem::take(&mut r.kept);
    let replacement = match next {
        Next::Wait => {
            r.kept = out;
            s.recovery = Some(r);
            return;
        }
        Next::Deliver(body) => {
            record.response_id = answer_id(s.asked.api, &body).or(record.response_id.take());
            api::as_stream(s.asked.api, &body, &s.asked.request).ok()
        }
        Next::Withhold => None,
    };
    match replacement {
        Some(mut events) => out.append(&mut events),
        None => {
            let check = check_index(&s.asked.version, &r.recovery.first_stop.check)
                .or_else(|| first_blocking_output_check(&s.asked.version))
                .unwrap_or_default();
            out.append(&mut s.rewriter.cut(check));
            s.cut = true;
        }
    }
    // Whatever the upstream still sends of the first answer is dropped.
    s.ended = true;
    replace_chunk(host, buffered, &out);
    host.resume_response();
}

/// The upstream's id of a non-streamed answer: the id the caller of a recovered turn sees.
fn answer_id(api: Api, body: &[u8]) -> Option<String> {
    api::parse_answer(api, body).ok()?.id
}
