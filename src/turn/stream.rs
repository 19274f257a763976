//! A streamed answer: each upstream chunk rewritten as it passes, held rounds decided, cuts ended.

use super::recovering::{deliver_waiting, start_stream_recovery};
use super::tools::check_stream_calls;
use super::*;

impl Turn {
    /// A streamed answer's headers: they go out at once (the first token must not wait), framed
    /// to a fixed length when the policy says so; an answer that cannot be read is replaced by a
    /// refusal stream right away.
    pub(super) fn start_stream(
        &mut self,
        host: &mut dyn Host,
        asked: Asked,
        identity: bool,
    ) -> Flow {
        let Some(hold) = Hold::for_version(&asked.version) else {
            return Flow::Continue;
        };
        host.set_response_header("content-length", None);
        // Only rules cut a stream mid-way. A held round is cut or released when the model stopped,
        // so it ends with the upstream and needs no frame; and its release may be written into
        // Envoy's paused buffer from a judge's answer, where 4 MiB of padding would trip the
        // buffer limit and reset the stream.
        // Nor does a stream whose tool calls are checked: an allowed call is written into the
        // paused buffer after the judge answered, which a frame's fixed length cannot know.
        let frame = match hold {
            Hold::Rules if !asked.version.tools.any() => {
                self.policy.stream_frame_bytes.map(Frame::new)
            }
            Hold::Rules => None,
            Hold::WholeText | Hold::Everything => None,
        };
        if let Some(frame) = &frame {
            host.set_response_header("transfer-encoding", None);
            host.set_response_header("content-length", Some(&frame.length().to_string()));
        }
        let rewriter = Rewriter::new(
            asked.api,
            Rc::clone(&asked.version),
            &asked.request,
            hold,
            self.policy.max_body_bytes,
        );
        // The copy feeds background checks, and a recovered answer's usage.
        let copy =
            (has_background_checks(&asked.version) || hold == Hold::Everything).then(Vec::new);
        let mut streamed = Box::new(Streamed {
            asked,
            rewriter,
            frame,
            ended: false,
            cut: false,
            pending: Vec::new(),
            judging: None,
            round_decided: false,
            copy,
            close_pending: false,
            recovery: None,
            upstream_ended: false,
            calls: None,
        });
        if !identity {
            // Compressed despite `accept-encoding: identity`: nothing can be read, so the turn is
            // refused now, in the shape the caller asked for, and says so in its header.
            let version = &streamed.asked.version;
            if first_blocking_output_check(version).is_none() && version.tools.any() {
                // Tool checks alone: whatever calls it holds went unchecked.
                crate::record::tools_unread(host, &mut self.record, version);
            }
            if let Some(check) = first_blocking_output_check(&streamed.asked.version) {
                let stop = stop_errored(&streamed.asked.version, check);
                if let Some(value) = stop.header_value() {
                    host.set_response_header(stop::HEADER, Some(&value));
                }
                host.set_response_header("content-encoding", None);
                count_one(
                    host,
                    &mut self.record,
                    &streamed.asked.version,
                    check,
                    Outcome::Errored,
                );
            }
            let ids = fresh_ids(host);
            let mut request = streamed.asked.request.clone();
            request.stream = true;
            let reply = &streamed.asked.version.blocked_reply;
            streamed.pending = api::refusal(streamed.asked.api, reply, &request, &ids).body;
            streamed.ended = true;
            streamed.close_pending = true;
            self.state = State::Streaming(streamed);
            return Flow::Continue;
        }
        self.state = State::Streaming(streamed);
        Flow::Continue
    }
}

/// One upstream chunk of a streamed answer: rewritten, framed, and after a cut dropped.
pub(super) fn stream_chunk(
    host: &mut dyn Host,
    policy: &Policy,
    record: &mut Record,
    s: &mut Streamed,
    body_size: usize,
    end_of_stream: bool,
) -> Flow {
    s.upstream_ended |= end_of_stream;
    if s.ended {
        let mut out = std::mem::take(&mut s.pending);
        // The close waits for a callback after the one that carried the closing events.
        if s.close_pending && !end_of_stream {
            if out.is_empty() {
                s.close_pending = false;
                host.close_response();
            } else {
                // The closing events go out in this callback; the close follows.
                host.close_response_soon();
            }
        }
        finish_frame(s, &mut out);
        replace_chunk(host, body_size, &out);
        return Flow::Continue;
    }
    let buffered = host.response_body(body_size).unwrap_or_default();
    if let Some(r) = &mut s.recovery {
        // Paused while the model is asked again: the rest of the first answer is not shown; a
        // copy is kept for its usage.
        let fresh = buffered.get(r.kept.len()..).unwrap_or_default();
        if let Some(copy) = &mut s.copy {
            if copy.len().saturating_add(fresh.len()) <= policy.max_body_bytes {
                copy.extend_from_slice(fresh);
            }
        }
        let kept = r.kept.clone();
        if end_of_stream {
            if let Some(out) = deliver_waiting(record, s) {
                replace_chunk(host, body_size, &out);
                return Flow::Continue;
            }
        }
        replace_chunk(host, body_size, &kept);
        return Flow::Pause;
    }
    if let Some(judging) = &mut s.judging {
        // Paused while the judge decides: Envoy keeps buffering after what this filter kept.
        let fresh = buffered.get(judging.kept.len()..).unwrap_or_default();
        let mut step = s.rewriter.feed(fresh);
        judging.kept.append(&mut step.out);
        judging.end_of_stream |= end_of_stream;
        if step.cut.is_none() {
            let kept = judging.kept.clone();
            replace_chunk(host, body_size, &kept);
            return Flow::Pause;
        }
        // What came after the round could not be read, or outgrew what can be held, while the
        // judge decided: the held round was cut with it, and the stream ends here as such a
        // stream does (its first blocking output check errored). The verdicts still to come
        // decide nothing: one result per check.
        step.out = s.judging.take().map(|j| j.kept).unwrap_or_default();
        s.round_decided = true;
        let out = finish_step(host, record, s, step, end_of_stream);
        replace_chunk(host, body_size, &out);
        return Flow::Continue;
    }
    // Paused while tool calls are checked: Envoy keeps buffering after what this filter kept.
    let kept = s.calls.as_ref().map_or(0, |c| c.kept_len());
    let fresh = buffered.get(kept..).unwrap_or_default();
    if let Some(copy) = &mut s.copy {
        if copy.len().saturating_add(fresh.len()) <= policy.max_body_bytes {
            copy.extend_from_slice(fresh);
        } else {
            s.copy = None;
        }
    }
    let mut step = s.rewriter.feed(fresh);
    if step.unjudged {
        count_unjudged(host, record, &s.asked.version);
    }
    if record.response_id.is_none() {
        record.response_id = s.rewriter.answer_id().map(str::to_owned);
    }
    if end_of_stream && step.cut.is_none() && step.round_end.is_none() {
        let mut last = s.rewriter.finish();
        step.out.append(&mut last.out);
        step.cut = last.cut;
        step.round_end = last.round_end;
        step.calls.append(&mut last.calls);
    }
    let calls = std::mem::take(&mut step.calls);
    if let Some(round) = step.round_end.take() {
        // The round's text is scanned once; the judge is asked only when every rule passed.
        let mut failed = s.asked.version.output_rules.failed_checks(&round.rule_text);
        if let Some(check) = round.early.filter(|c| !failed.contains(c)) {
            // Ended early on this rule's match: it failed, whatever a search of the text says.
            failed.push(check);
        }
        let judged_apply = !round.asks_for_tool
            && !judge::blocking_judged(&s.asked.version, Stage::Output).is_empty();
        let to_judge = failed.is_empty() && judged_apply;
        if to_judge && step.cut.is_some() {
            // The round ended, then what followed it in the same chunk could not be read (or
            // outgrew what may be held): it was cut with that before the judge was asked, and
            // the stream ends as one that cannot be read, the round undecided, as when that comes
            // in a later chunk while the judge decides (the judging branch above).
            s.round_decided = true;
        } else if to_judge {
            let read = Judged {
                stage: Stage::Output,
                text: &round.answer_text,
                question: Some(s.asked.request.last_user_text()),
                turn_model: s.asked.request.model.as_deref(),
                credentials: &s.asked.credentials,
            };
            let sent = judge::dispatch(host, policy, record, &s.asked.version, &read, 1);
            let judging = StreamJudging {
                answer_text: round.answer_text,
                pending: sent.pending,
                judged: sent.judged,
                kept: std::mem::take(&mut step.out),
                end_of_stream,
            };
            s.judging = Some(judging);
            if let Some(flow) = settle_stream(host, policy, record, s, false, body_size) {
                return flow;
            }
            let kept = s
                .judging
                .as_ref()
                .map(|j| j.kept.clone())
                .unwrap_or_default();
            replace_chunk(host, body_size, &kept);
            return Flow::Pause;
        } else {
            let decided_round = Decided {
                failed: &failed,
                judged: &[],
                undecided: &[],
                early: round.early.is_some(),
                // The judge was not asked (a rule failed, the round asks for a tool, or no judged
                // check blocks): judged checks get no result on this attempt, as for a non-streamed
                // answer. Recorded errored, one without `recover` would stop a round that recovery
                // could have mended, and pass rates would count errors no judge made.
                judged_apply: false,
            };
            match close_round(host, policy, record, s, &decided_round, &mut step) {
                Closed::Released if !round.asks_for_tool => {
                    queue_background(host, policy, record, &s.asked, &round.answer_text);
                }
                Closed::Recovering => {
                    let kept = std::mem::take(&mut step.out);
                    replace_chunk(host, body_size, &kept);
                    if let Some(r) = &mut s.recovery {
                        r.kept = kept;
                    }
                    return Flow::Pause;
                }
                _ => {}
            }
        }
    }
    let round_decided = s.round_decided;
    let mut out = finish_step(host, record, s, step, end_of_stream);
    if end_of_stream && !s.cut && !round_decided {
        // Rules mode holds no answer text: the background checks read the kept copy.
        if let Some(copy) = s.copy.take() {
            let text =
                crate::stream::answer_of(s.asked.api, &s.asked.version, &s.asked.request, &copy);
            if let Some(text) = text {
                queue_background(host, policy, record, &s.asked, &text);
            }
        }
    }
    check_stream_calls(
        host,
        policy,
        record,
        s,
        calls,
        &mut out,
        end_of_stream,
        (body_size, &buffered),
    )
}

/// A held round outgrew `max_body_bytes` and went on unread by the judge: each blocking judged
/// check could not decide, and passed on error (the rewriter goes on so only when all say so).
fn count_unjudged(host: &mut dyn Host, record: &mut Record, version: &Version) {
    for check in judge::blocking_judged(version, Stage::Output) {
        count_one(host, record, version, check, Outcome::Errored);
    }
}

/// A streamed round with verdicts in hand: when one stops it or none is pending, the round is
/// released or cut, the held bytes go out and the stream goes on. `None` while verdicts are
/// pending. `through_host`: called from a callout's answer, so the paused response is resumed
/// through the host; `buffered` is what the paused buffer holds.
pub(super) fn settle_stream(
    host: &mut dyn Host,
    policy: &Policy,
    record: &mut Record,
    s: &mut Streamed,
    through_host: bool,
    buffered: usize,
) -> Option<Flow> {
    let judging = s.judging.as_ref()?;
    let version = Rc::clone(&s.asked.version);
    let stopping = judging.judged.iter().any(|j| judged_stops(&version, j));
    if !stopping && !judging.pending.is_empty() {
        return None;
    }
    let judging = s.judging.take()?;
    let mut step = Step {
        out: judging.kept,
        ..Step::default()
    };
    let undecided: Vec<usize> = judging.pending.iter().map(|(_, c)| *c).collect();
    let round = Decided {
        failed: &[],
        judged: &judging.judged,
        undecided: &undecided,
        early: false,
        judged_apply: true,
    };
    match close_round(host, policy, record, s, &round, &mut step) {
        Closed::Released => {
            queue_background(host, policy, record, &s.asked, &judging.answer_text);
        }
        Closed::Recovering => {
            // Still paused: what this filter left in the buffer stays as it is.
            let kept = step.out;
            replace_chunk(host, buffered, &kept);
            if let Some(r) = &mut s.recovery {
                r.kept = kept;
            }
            return Some(Flow::Pause);
        }
        Closed::Cut => {}
    }
    let end_of_stream = judging.end_of_stream;
    if end_of_stream && step.cut.is_none() {
        let mut last = s.rewriter.finish();
        step.out.append(&mut last.out);
        step.cut = last.cut;
    }
    let out = finish_step(host, record, s, step, end_of_stream);
    if through_host {
        replace_chunk(host, buffered, &out);
        host.resume_response();
    } else {
        replace_chunk(host, buffered, &out);
    }
    Some(Flow::Continue)
}

/// What a round's checks read and the judge said of it.
#[derive(Clone, Copy)]
struct Decided<'a> {
    /// The rule checks the round's text failed (scanned once, when the round ended).
    failed: &'a [usize],
    judged: &'a [(usize, Outcome)],
    /// Checks still with the judge when another stopped the round.
    undecided: &'a [usize],
    /// Decided before the answer ended (its text already failed a rule).
    early: bool,
    /// Whether judged checks decide this round (not when it asks for a tool).
    judged_apply: bool,
}

/// How a decided round went on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    Released,
    Cut,
    /// The model is being asked again; the response stays paused.
    Recovering,
}

/// Decides a round on its rules and the judge's verdicts, then releases it, cuts it, or (a held
/// round that only failed checks that recover) asks the model again.
fn close_round(
    host: &mut dyn Host,
    policy: &Policy,
    record: &mut Record,
    s: &mut Streamed,
    round: &Decided<'_>,
    step: &mut Step,
) -> Closed {
    let Decided {
        failed,
        judged,
        undecided,
        early,
        judged_apply,
    } = *round;
    let verdict = decide(
        &s.asked.version,
        Stage::Output,
        &Reading {
            rule_text: "",
            failed: Some(failed),
            judged_apply,
            readable: true,
            judged,
        },
        1,
    );
    s.round_decided = true;
    // Checks still with the judge when another stopped the round never decided.
    let results: Vec<CheckResult> = verdict
        .results
        .iter()
        .filter(|r| !undecided.contains(&r.check))
        .cloned()
        .collect();
    decided(host, record, &s.asked.version, &results);
    if let Some(stop) = &verdict.stop {
        if start_stream_recovery(host, policy, s, stop, &results, early) {
            return Closed::Recovering;
        }
    }
    let mut more = match verdict
        .stop
        .as_ref()
        .and_then(|stop| check_index(&s.asked.version, &stop.check))
    {
        Some(check) => {
            step.cut = Some(crate::stream::Cut {
                check: Some(check),
                why: CutWhy::Decided,
            });
            s.rewriter.cut(check)
        }
        None => s.rewriter.release(),
    };
    step.out.append(&mut more);
    if step.cut.is_none() {
        Closed::Released
    } else {
        Closed::Cut
    }
}

/// What a step sends once cuts, the frame and the end of the upstream are accounted for.
fn finish_step(
    host: &mut dyn Host,
    record: &mut Record,
    s: &mut Streamed,
    step: Step,
    end_of_stream: bool,
) -> Vec<u8> {
    let mut out = step.out;
    if let Some(cut) = step.cut {
        if cut.why != CutWhy::Decided {
            let outcome = match cut.why {
                CutWhy::Unreadable => Outcome::Errored,
                _ => Outcome::Failed,
            };
            match cut.check {
                Some(check) => count_one(host, record, &s.asked.version, check, outcome),
                // Unreadable with tool checks alone: the calls in it went unchecked.
                None if s.asked.version.tools.any() => {
                    crate::record::tools_unread(host, record, &s.asked.version);
                }
                None => {}
            }
        }
        s.ended = true;
        s.cut = true;
    } else if s.frame.is_some_and(|f| !f.fits(out.len(), CLOSING_RESERVE)) {
        // The answer outgrew its frame: it cannot be checked to its end, so the first blocking
        // output check could not decide, and the stream ends here.
        if let Some(check) = first_blocking_output_check(&s.asked.version) {
            let mut closing = s.rewriter.cut(check);
            if !s
                .frame
                .is_some_and(|f| f.fits(out.len() + closing.len(), 0))
            {
                out.clear();
            }
            out.append(&mut closing);
            count_one(host, record, &s.asked.version, check, Outcome::Errored);
        }
        s.ended = true;
        s.cut = true;
    } else if end_of_stream && !s.round_decided {
        // Rules mode ended without a cut: every blocking output rule passed.
        count_passed(host, record, &s.asked.version);
    }
    if s.ended || end_of_stream {
        s.ended = true;
        s.close_pending = !end_of_stream;
        if s.close_pending {
            // The next upstream chunk closes the stream; should none come soon, a timer does.
            host.close_response_soon();
        }
        finish_frame(s, &mut out);
    } else if let Some(frame) = &mut s.frame {
        frame.sent(out.len());
    }
    out
}

/// Adds the frame's padding once the stream is over (cut, or ended by upstream).
fn finish_frame(s: &mut Streamed, out: &mut Vec<u8>) {
    if let Some(frame) = &mut s.frame {
        frame.sent(out.len());
        out.append(&mut frame.pad());
    }
}

/// [`replace_chunk`], unless `out` is what the buffer already holds (`buffered`, all of its
/// `body_size` bytes): a chunk with nothing to change costs no host call.
pub(super) fn replace_changed(host: &mut dyn Host, body_size: usize, buffered: &[u8], out: &[u8]) {
    // Most chunks of a stream that passes as it came: compared eight bytes a step (`swar`).
    if buffered.len() == body_size && crate::swar::eq(buffered, out) {
        return;
    }
    replace_chunk(host, body_size, out);
}

pub(super) fn replace_chunk(host: &mut dyn Host, body_size: usize, out: &[u8]) {
    if !host.replace_response_body(body_size, out) {
        host.log(
            LogLevel::Error,
            "livecheck: could not rewrite a streamed chunk",
        );
    }
}
