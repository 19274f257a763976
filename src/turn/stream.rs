//! A streamed answer: each upstream chunk rewritten as it passes, held rounds decided, cuts ended.

use super::recovering::{deliver_waiting, start_stream_recovery, stream_recovery_answered};
use super::tools::{check_stream_calls, stream_call_verdict};
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
            // An AWS event stream has no comment to pad with: never framed.
            Hold::Rules if api::in_bedrock_chunks(asked.api, &asked.request) => None,
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
            phase: Phase::Passing,
            round_decided: false,
            copy,
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
                self.cx(host)
                    .count_one(&streamed.asked.version, check, Outcome::Errored);
            }
            let ids = fresh_ids(host);
            let mut request = streamed.asked.request.clone();
            request.stream = true;
            let reply = &streamed.asked.version.blocked_reply;
            streamed.phase = Phase::Ended(Ending {
                cut: false,
                close_pending: true,
                pending: api::refusal(streamed.asked.api, reply, &request, &ids).body,
            });
            self.state = State::Streaming(streamed);
            return Flow::Continue;
        }
        self.state = State::Streaming(streamed);
        Flow::Continue
    }
}

/// One upstream chunk of a streamed answer: rewritten, framed, and after a cut dropped.
pub(super) fn stream_chunk(
    cx: &mut Ctx<'_>,
    s: &mut Streamed,
    body_size: usize,
    end_of_stream: bool,
) -> Flow {
    s.upstream_ended |= end_of_stream;
    match &mut s.phase {
        Phase::Ended(ending) => {
            let mut out = std::mem::take(&mut ending.pending);
            // The close waits for a callback after the one that carried the closing events.
            if ending.close_pending && !end_of_stream {
                if out.is_empty() {
                    ending.close_pending = false;
                    cx.host.close_response();
                } else {
                    // The closing events go out in this callback; the close follows.
                    cx.host.close_response_soon();
                }
            }
            finish_frame(&mut s.frame, &mut out);
            cx.replace_chunk(body_size, &out);
            Flow::Continue
        }
        Phase::Recovering(r) => {
            // Paused while the model is asked again: the rest of the first answer is not shown;
            // a copy is kept for its usage.
            let buffered = cx.host.response_body(body_size).unwrap_or_default();
            let fresh = buffered.get(r.kept.len()..).unwrap_or_default();
            if let Some(copy) = &mut s.copy {
                if copy.len().saturating_add(fresh.len()) <= cx.policy.max_body_bytes {
                    copy.extend_from_slice(fresh);
                }
            }
            let kept = r.kept.clone();
            if end_of_stream {
                if let Some(out) = deliver_waiting(cx.record, s) {
                    cx.replace_chunk(body_size, &out);
                    return Flow::Continue;
                }
            }
            cx.replace_chunk(body_size, &kept);
            Flow::Pause
        }
        Phase::Judging(judging) => {
            // Paused while the judge decides: Envoy keeps buffering after what this filter kept.
            let buffered = cx.host.response_body(body_size).unwrap_or_default();
            let fresh = buffered.get(judging.kept.len()..).unwrap_or_default();
            let mut step = s.rewriter.feed(fresh);
            judging.kept.append(&mut step.out);
            judging.end_of_stream |= end_of_stream;
            if step.cut.is_none() {
                let kept = judging.kept.clone();
                cx.replace_chunk(body_size, &kept);
                return Flow::Pause;
            }
            // What came after the round could not be read, or outgrew what can be held, while
            // the judge decided: the held round was cut with it, and the stream ends here as
            // such a stream does (its first blocking output check errored). The verdicts still
            // to come decide nothing: one result per check.
            step.out = std::mem::take(&mut judging.kept);
            s.phase = Phase::Passing;
            s.round_decided = true;
            let out = finish_step(cx, s, step, end_of_stream);
            cx.replace_chunk(body_size, &out);
            Flow::Continue
        }
        Phase::Passing => {
            let buffered = cx.host.response_body(body_size).unwrap_or_default();
            passing_chunk(cx, s, body_size, end_of_stream, buffered)
        }
    }
}

/// A chunk of a stream in [`Phase::Passing`]: fed to the rewriter; a round that ended is decided
/// on its rules, or sent to the judge; tool calls that completed are checked.
fn passing_chunk(
    cx: &mut Ctx<'_>,
    s: &mut Streamed,
    body_size: usize,
    end_of_stream: bool,
    buffered: Vec<u8>,
) -> Flow {
    // Paused while tool calls are checked: Envoy keeps buffering after what this filter kept.
    let kept = s.calls.as_ref().map_or(0, |c| c.kept_len());
    let fresh = buffered.get(kept..).unwrap_or_default();
    if let Some(copy) = &mut s.copy {
        if copy.len().saturating_add(fresh.len()) <= cx.policy.max_body_bytes {
            copy.extend_from_slice(fresh);
        } else {
            s.copy = None;
        }
    }
    let mut step = s.rewriter.feed(fresh);
    if step.unjudged {
        count_unjudged(cx, &s.asked.version);
    }
    if cx.record.response_id.is_none() {
        cx.record.response_id = s.rewriter.answer_id().map(str::to_owned);
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
            let sent = judge::dispatch(cx.host, cx.policy, cx.record, &s.asked.version, &read, 1);
            let judging = StreamJudging {
                answer_text: round.answer_text,
                pending: sent.pending,
                judged: sent.judged,
                kept: std::mem::take(&mut step.out),
                end_of_stream,
            };
            s.phase = Phase::Judging(judging);
            if let Some(flow) = settle_stream(cx, s, false, body_size) {
                return flow;
            }
            let kept = match &s.phase {
                Phase::Judging(judging) => judging.kept.clone(),
                Phase::Passing | Phase::Recovering(_) | Phase::Ended(_) => Vec::new(),
            };
            cx.replace_chunk(body_size, &kept);
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
            match close_round(cx, s, &decided_round, &mut step) {
                Closed::Released if !round.asks_for_tool => {
                    cx.queue_background(&s.asked, &round.answer_text);
                }
                Closed::Released | Closed::Cut => {}
                Closed::Recovering(mut recovery) => {
                    let kept = std::mem::take(&mut step.out);
                    cx.replace_chunk(body_size, &kept);
                    recovery.kept = kept;
                    s.phase = Phase::Recovering(recovery);
                    return Flow::Pause;
                }
            }
        }
    }
    let round_decided = s.round_decided;
    let mut out = finish_step(cx, s, step, end_of_stream);
    if end_of_stream && !s.was_cut() && !round_decided {
        // Rules mode holds no answer text: the background checks read the kept copy.
        if let Some(copy) = s.copy.take() {
            let text =
                crate::stream::answer_of(s.asked.api, &s.asked.version, &s.asked.request, &copy);
            if let Some(text) = text {
                cx.queue_background(&s.asked, &text);
            }
        }
    }
    check_stream_calls(
        cx,
        s,
        calls,
        &mut out,
        end_of_stream,
        (body_size, &buffered),
    )
}

/// A held round outgrew `max_body_bytes` and went on unread by the judge: each blocking judged
/// check could not decide, and passed on error (the rewriter goes on so only when all say so).
fn count_unjudged(cx: &mut Ctx<'_>, version: &Version) {
    for check in judge::blocking_judged(version, Stage::Output) {
        cx.count_one(version, check, Outcome::Errored);
    }
}

/// A streamed round with verdicts in hand: when one stops it or none is pending, the round is
/// released or cut, the held bytes go out and the stream goes on. `None` while verdicts are
/// pending. `through_host`: called from a callout's answer, so the paused response is resumed
/// through the host; `buffered` is what the paused buffer holds.
pub(super) fn settle_stream(
    cx: &mut Ctx<'_>,
    s: &mut Streamed,
    through_host: bool,
    buffered: usize,
) -> Option<Flow> {
    let Phase::Judging(judging) = &s.phase else {
        return None;
    };
    let version = Rc::clone(&s.asked.version);
    let stopping = judging.judged.iter().any(|j| judged_stops(&version, j));
    if !stopping && !judging.pending.is_empty() {
        return None;
    }
    let Phase::Judging(judging) = std::mem::replace(&mut s.phase, Phase::Passing) else {
        return None;
    };
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
    match close_round(cx, s, &round, &mut step) {
        Closed::Released => {
            cx.queue_background(&s.asked, &judging.answer_text);
        }
        Closed::Recovering(mut recovery) => {
            // Still paused: what this filter left in the buffer stays as it is.
            let kept = step.out;
            cx.replace_chunk(buffered, &kept);
            recovery.kept = kept;
            s.phase = Phase::Recovering(recovery);
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
    let out = finish_step(cx, s, step, end_of_stream);
    if through_host {
        cx.replace_chunk(buffered, &out);
        cx.host.resume_response();
    } else {
        cx.replace_chunk(buffered, &out);
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
enum Closed {
    Released,
    Cut,
    /// The model is being asked again; the response stays paused (the caller keeps the
    /// recovery as the stream's phase, with what it left in the paused buffer).
    Recovering(Box<StreamRecovery>),
}

/// Decides a round on its rules and the judge's verdicts, then releases it, cuts it, or (a held
/// round that only failed checks that recover) asks the model again.
fn close_round(cx: &mut Ctx<'_>, s: &mut Streamed, round: &Decided<'_>, step: &mut Step) -> Closed {
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
    decided(cx.host, cx.record, &s.asked.version, &results);
    if let Some(stop) = &verdict.stop {
        if let Some(recovery) = start_stream_recovery(cx, s, stop, &results, early) {
            return Closed::Recovering(recovery);
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
fn finish_step(cx: &mut Ctx<'_>, s: &mut Streamed, step: Step, end_of_stream: bool) -> Vec<u8> {
    let mut out = step.out;
    if let Some(cut) = step.cut {
        if cut.why != CutWhy::Decided {
            let outcome = match cut.why {
                CutWhy::Unreadable => Outcome::Errored,
                _ => Outcome::Failed,
            };
            match cut.check {
                Some(check) => cx.count_one(&s.asked.version, check, outcome),
                // Unreadable with tool checks alone: the calls in it went unchecked.
                None if s.asked.version.tools.any() => {
                    crate::record::tools_unread(cx.host, cx.record, &s.asked.version);
                }
                None => {}
            }
        }
        s.end(true);
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
            cx.count_one(&s.asked.version, check, Outcome::Errored);
        }
        s.end(true);
    } else if end_of_stream && !s.round_decided {
        // Rules mode ended without a cut: every blocking output rule passed.
        cx.count_passed(&s.asked.version);
    }
    if s.ended() || end_of_stream {
        s.end(false);
        s.set_close_pending(!end_of_stream);
        if !end_of_stream {
            // The next upstream chunk closes the stream; should none come soon, a timer does.
            cx.host.close_response_soon();
        }
        finish_frame(&mut s.frame, &mut out);
    } else if let Some(frame) = &mut s.frame {
        frame.sent(out.len());
    }
    out
}

/// Adds the frame's padding once the stream is over (cut, or ended by upstream).
fn finish_frame(frame: &mut Option<Frame>, out: &mut Vec<u8>) {
    if let Some(frame) = frame {
        frame.sent(out.len());
        out.append(&mut frame.pad());
    }
}

/// A callout of a streamed answer answered: its recovery's, a tool call's check, or a held
/// round's judged check.
pub(super) fn stream_callout(cx: &mut Ctx<'_>, s: &mut Streamed, token: u32, body_size: usize) {
    if matches!(&s.phase, Phase::Recovering(r) if r.recovery.owns(token)) {
        stream_recovery_answered(cx, s, token, body_size);
        return;
    }
    if stream_call_verdict(cx, s, token, body_size) {
        return;
    }
    let body = cx.host.callout_body(body_size).unwrap_or_default();
    let verdict = judge::verdict(cx.host.callout_status(), &body);
    if let Phase::Judging(judging) = &mut s.phase {
        if let Some(at) = judging.pending.iter().position(|(t, _)| *t == token) {
            let (_, check) = judging.pending.swap_remove(at);
            cx.record.judged(check, 1, verdict.as_ref());
            judging
                .judged
                .push((check, judge::outcome(verdict.as_ref())));
            let buffered = judging.kept.len();
            let _ = settle_stream(cx, s, true, buffered);
            return;
        }
    }
    cx.host
        .log(LogLevel::Warn, "livecheck: an unknown callout answered");
}
