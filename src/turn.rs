//! One turn through the filter: the per-stream state machine.
//!
//! The request's headers are held while its body is read and the input checks decide; a stopped
//! question is answered locally in the vendor's shape and never reaches upstream. A non-streamed
//! answer is held (headers included) until the output checks decided; a stopped answer is
//! replaced by the withheld form. One place (`Turn`'s callbacks) decides whether the stream goes on.

use std::rc::Rc;

use crate::config::{Policy, Stage, Version};
use crate::frame::Frame;
use crate::host::{Flow, Host, LogLevel};
use crate::judge::{self, Judged};
use crate::record::{decided, Record};
use crate::recovery::{self, Next, Recovery, Source};
use crate::stop::{self, Stop};
use crate::stream::{CutWhy, Hold, Rewriter, Step};
use crate::vendor::{self, Api, Ids, Request};
use crate::verdict::{decide, judged_stops, CheckResult, Outcome, Reading};

pub struct Turn {
    policy: Rc<Policy>,
    state: State,
    /// What the turn's checks decided, reported to the sidecar when the turn ends.
    record: Record,
    /// When the request arrived (ms since the Unix epoch): the turn's deadline counts from here.
    started_ms: u64,
}

enum State {
    /// Not a call livecheck checks (another path or method): passes untouched.
    Bypass,
    /// Request headers held; the body is being read.
    ReadingQuestion { api: Api, version: Rc<Version> },
    /// The question's rules passed; its judged checks are out with the judge, headers held.
    JudgingQuestion(Box<Judging>),
    /// The question passed and went upstream.
    AwaitingAnswer(Asked),
    /// A complete non-streamed answer passed its rules; its judged checks are out with the judge.
    JudgingAnswer(Box<Judging>),
    /// A non-streamed answer: headers held, body buffered until it is complete.
    HoldingAnswer { asked: Asked, readable: bool },
    /// A streamed answer: headers sent at once, each chunk rewritten as it passes.
    Streaming(Box<Streamed>),
    /// No blocking output check, but background ones: the answer passes untouched while a copy
    /// (bounded) is kept to hand to the sidecar once it completed.
    Observing {
        asked: Asked,
        copy: Vec<u8>,
        streamed: bool,
    },
    /// A non-streamed answer failed checks that recover: the model is asked again, the answer's
    /// headers and body held meanwhile.
    Recovering(Box<Recovering>),
    /// No check reads the answer: it passes untouched while its first bytes are read for the
    /// upstream's id (the caller may look its turn up by it).
    Peeking { seen: Vec<u8> },
    /// Decided: everything left passes as it is.
    Done,
}

struct Recovering {
    asked: Asked,
    recovery: Recovery,
    /// The first answer, withheld, sent when no attempt passes.
    withheld: vendor::Reply,
}

/// A held streamed round being recovered: the response is paused; what this filter left in the
/// paused buffer is `kept`.
struct StreamRecovery {
    recovery: Recovery,
    kept: Vec<u8>,
}

struct Asked {
    api: Api,
    version: Rc<Version>,
    request: Request,
    /// The turn's credentials, kept for the judge: request headers cannot be read once the
    /// request went upstream.
    credentials: Vec<(String, String)>,
    /// What a retry is built from, when the version has a check that recovers.
    source: Option<Rc<Source>>,
    /// When the request arrived and when the question went upstream (ms since the Unix epoch).
    started_ms: u64,
    asked_at_ms: u64,
}

impl Asked {
    fn recovery_turn<'a>(&'a self, policy: &'a Policy, source: &'a Source) -> recovery::Turn<'a> {
        recovery::Turn {
            policy,
            version: &self.version,
            api: self.api,
            request: &self.request,
            source,
            credentials: &self.credentials,
        }
    }
}

/// Judged checks in flight for one stage.
struct Judging {
    asked: Asked,
    stage: Stage,
    /// Callout token → check index.
    pending: Vec<(u32, usize)>,
    judged: Vec<(usize, Outcome)>,
    /// On output: the withheld answer, sent if a verdict stops it.
    withheld: Option<vendor::Reply>,
    /// What the judge read (the answer, on output), for background checks once it passed.
    text: String,
}

struct Streamed {
    asked: Asked,
    rewriter: Rewriter,
    frame: Option<Frame>,
    /// The stream was cut or ended: later upstream bytes are dropped.
    ended: bool,
    /// The filter cut the stream (a check stopped it, or it outgrew its frame).
    cut: bool,
    /// Bytes decided before any upstream chunk (a refusal for an unreadable stream).
    pending: Vec<u8>,
    /// A held round is with the judge; the response is paused meanwhile.
    judging: Option<StreamJudging>,
    /// A whole-text round was decided (its checks counted there, not again at the end).
    round_decided: bool,
    /// A copy of the upstream stream for background checks (rules mode keeps no answer text),
    /// bounded by `max_body_bytes`; `None` when the version has none or it grew too large.
    copy: Option<Vec<u8>>,
    /// After a cut, the stream is closed at the next upstream chunk (closing in the cut's own
    /// callback would reset the caller before the closing events reach it).
    close_pending: bool,
    /// A held round failed checks that recover: the model is being asked again.
    recovery: Option<StreamRecovery>,
}

/// A streamed round's judged checks in flight.
struct StreamJudging {
    /// What the judge reads, kept for background checks once the round passed.
    answer_text: String,
    pending: Vec<(u32, usize)>,
    judged: Vec<(usize, Outcome)>,
    /// What this filter left in the paused buffer: bytes decided before the round ended.
    kept: Vec<u8>,
    end_of_stream: bool,
}

/// Room kept in a frame for the closing events of a cut.
const CLOSING_RESERVE: usize = 16 * 1024;

impl Turn {
    pub fn new(policy: Rc<Policy>) -> Self {
        Self {
            policy,
            state: State::Bypass,
            record: Record::default(),
            started_ms: 0,
        }
    }

    /// The stream ended (Envoy's `on_log`): the turn's report goes to the outbox.
    pub fn on_done(&mut self, host: &mut dyn Host) {
        let record = std::mem::take(&mut self.record);
        let credentials = record.credentials.clone();
        if let Some(report) = record.report() {
            if let Some(job) = judge::report_job(&self.policy, &report, &credentials) {
                host.deliver(job);
            }
        }
    }

    pub fn on_request_headers(&mut self, host: &mut dyn Host, end_of_stream: bool) -> Flow {
        let method = host.request_header(":method").unwrap_or_default();
        let path = host.request_header(":path").unwrap_or_default();
        let Some(api) = Api::from_request(&method, &path) else {
            self.state = State::Bypass;
            return Flow::Continue;
        };
        self.record = Record::new(format!("lc_{:016x}{:016x}", host.random(), host.random()));
        self.started_ms = host.now_unix_millis();
        if let Some(header) = &self.policy.person_header {
            self.record.person = host.request_header(header);
        }
        self.record.credentials = judge::CREDENTIAL_HEADERS
            .iter()
            .filter_map(|h| Some(((*h).to_owned(), host.request_header(h)?)))
            .collect();
        let agent = host.request_header(&self.policy.agent_header);
        let version = host.request_header(&self.policy.version_header);
        let authority = host.request_header(":authority");
        let version =
            match self
                .policy
                .select(agent.as_deref(), version.as_deref(), authority.as_deref())
            {
                Ok(v) => v,
                Err(e) => return self.refuse_request(host, api, 400, &e.to_string()),
            };
        self.record.runs(&version);
        if let Some(encoding) = host.request_header("content-encoding") {
            if !encoding.trim().eq_ignore_ascii_case("identity") {
                return self.refuse_request(
                    host,
                    api,
                    415,
                    "livecheck reads request bodies as they are written: send them without content-encoding",
                );
            }
        }
        let declared = host
            .request_header("content-length")
            .and_then(|l| l.trim().parse::<usize>().ok());
        if declared.is_some_and(|len| len > self.policy.max_body_bytes) {
            return self.too_large(host, api);
        }
        if end_of_stream {
            return self.refuse_request(host, api, 400, "the request has no body");
        }
        // Answers must be readable to be checked.
        host.set_request_header("accept-encoding", Some("identity"));
        self.state = State::ReadingQuestion { api, version };
        // Holding the headers keeps the question from upstream until it passed; Envoy still
        // delivers the body because the filter config sets `allow_on_headers_stop_iteration`.
        Flow::Pause
    }

    pub fn on_request_body(
        &mut self,
        host: &mut dyn Host,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        let State::ReadingQuestion { api, version } = &self.state else {
            return Flow::Continue;
        };
        let (api, version) = (*api, Rc::clone(version));
        if body_size > self.policy.max_body_bytes {
            return self.too_large(host, api);
        }
        if !end_of_stream {
            return Flow::Pause;
        }
        let Some(body) = host.request_body(body_size) else {
            return self.refuse_request(host, api, 400, "the request body could not be read");
        };
        let request = match vendor::parse_request(api, &body) {
            Ok(r) => r,
            Err(e) => return self.refuse_request(host, api, 400, &e.to_string()),
        };
        let rules = decide(
            &version,
            Stage::Input,
            &Reading {
                rule_text: &request.input_text,
                failed: None,
                judged_apply: false,
                readable: true,
                judged: &[],
            },
            1,
        );
        let credentials = self.record.credentials.clone();
        let source = version
            .checks
            .iter()
            .any(|c| c.recover)
            .then(|| retry_source(host, &body))
            .flatten()
            .map(Rc::new);
        let asked = Asked {
            api,
            version,
            request,
            credentials,
            source,
            started_ms: self.started_ms,
            asked_at_ms: host.now_unix_millis(),
        };
        if rules.stop.is_some() {
            decided(host, &mut self.record, &asked.version, &rules.results);
            return self.refuse_question(host, &asked, rules.stop.as_ref());
        }
        let text = asked.request.input_text.clone();
        let judging = self.ask_judge(host, asked, Stage::Input, text, None);
        self.settle(host, judging, false)
    }

    /// Sends every blocking judged check of `stage` to the judge, in parallel.
    fn ask_judge(
        &mut self,
        host: &mut dyn Host,
        asked: Asked,
        stage: Stage,
        text: String,
        withheld: Option<vendor::Reply>,
    ) -> Box<Judging> {
        let question = match stage {
            Stage::Input => None,
            Stage::Output => Some(asked.request.last_user_text.clone()),
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

    /// A verdict came back from the judge.
    pub fn on_callout_response(&mut self, host: &mut dyn Host, token: u32, body_size: usize) {
        if let State::Streaming(s) = &mut self.state {
            if s.recovery.as_ref().is_some_and(|r| r.recovery.owns(token)) {
                stream_recovery_answered(host, &self.policy, &mut self.record, s, token, body_size);
                return;
            }
            let body = host.callout_body(body_size).unwrap_or_default();
            let verdict = judge::verdict(host.callout_status(), &body);
            if let Some(judging) = &mut s.judging {
                if let Some(at) = judging.pending.iter().position(|(t, _)| *t == token) {
                    let (_, check) = judging.pending.swap_remove(at);
                    self.record.judged(check, 1, verdict.as_ref());
                    judging
                        .judged
                        .push((check, judge::outcome(verdict.as_ref())));
                    let buffered = judging.kept.len();
                    let _ = settle_stream(host, &self.policy, &mut self.record, s, true, buffered);
                    return;
                }
            }
            host.log(LogLevel::Warn, "livecheck: an unknown callout answered");
            return;
        }
        if let State::Recovering(r) = &mut self.state {
            if !r.recovery.owns(token) {
                host.log(LogLevel::Warn, "livecheck: an unknown callout answered");
                return;
            }
            let Some(source) = r.asked.source.clone() else {
                return;
            };
            let turn = r.asked.recovery_turn(&self.policy, &source);
            let next = r
                .recovery
                .on_callout(host, &turn, &mut self.record, token, body_size);
            self.recovering_next(host, next);
            return;
        }
        let judging = match std::mem::replace(&mut self.state, State::Done) {
            State::JudgingQuestion(j) | State::JudgingAnswer(j) => j,
            other => {
                self.state = other;
                host.log(
                    LogLevel::Warn,
                    "livecheck: a callout answered after its turn was decided",
                );
                return;
            }
        };
        let mut judging = judging;
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
    fn settle(&mut self, host: &mut dyn Host, judging: Box<Judging>, resumed: bool) -> Flow {
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
                    if let Some(flow) = self.recover(host, asked, stop.clone(), rules, withheld) {
                        return flow;
                    }
                    return Flow::Pause;
                }
                let reply = judging.withheld.unwrap_or_else(|| {
                    let ids = fresh_ids(host);
                    vendor::refusal(
                        asked.api,
                        &asked.version.blocked_reply,
                        &asked.request,
                        &ids,
                    )
                });
                // The answer's headers are still held: a local reply replaces the whole answer.
                send_stop(host, &self.record, &stop, reply.content_type, &reply.body)
            }
            (Stage::Output, None) => {
                self.state = State::Done;
                queue_background(host, &self.policy, &mut self.record, &asked, &judging.text);
                resume(host, Stage::Output, resumed)
            }
        }
    }

    /// Answers a stopped question with the agent's reply; nothing goes upstream.
    fn refuse_question(&mut self, host: &mut dyn Host, asked: &Asked, stop: Option<&Stop>) -> Flow {
        self.state = State::Done;
        let Some(stop) = stop else {
            return Flow::Continue;
        };
        let ids = fresh_ids(host);
        let reply = vendor::refusal(
            asked.api,
            &asked.version.blocked_reply,
            &asked.request,
            &ids,
        );
        send_stop(host, &self.record, stop, reply.content_type, &reply.body)
    }

    pub fn on_response_headers(&mut self, host: &mut dyn Host, end_of_stream: bool) -> Flow {
        let State::AwaitingAnswer(_) = &self.state else {
            return Flow::Continue;
        };
        host.set_response_header(livecheck_wire::TURN_ID_HEADER, Some(&self.record.turn_id));
        let State::AwaitingAnswer(asked) = std::mem::replace(&mut self.state, State::Done) else {
            return Flow::Continue;
        };
        let status = host.response_header(":status").unwrap_or_default();
        // Error answers carry no model text; they reach the caller as the vendor sent them.
        if !status.starts_with('2') {
            return Flow::Continue;
        }
        if !has_blocking_output_checks(&asked.version) {
            let identity = host
                .response_header("content-encoding")
                .is_none_or(|e| e.trim().eq_ignore_ascii_case("identity"));
            if identity && has_background_checks(&asked.version) && !end_of_stream {
                let streamed = host
                    .response_header("content-type")
                    .is_some_and(|t| t.trim_start().starts_with("text/event-stream"));
                self.state = State::Observing {
                    asked,
                    copy: Vec::new(),
                    streamed,
                };
            } else if identity && !end_of_stream {
                self.state = State::Peeking { seen: Vec::new() };
            }
            return Flow::Continue;
        }
        let identity = host
            .response_header("content-encoding")
            .is_none_or(|e| e.trim().eq_ignore_ascii_case("identity"));
        let streamed = host
            .response_header("content-type")
            .is_some_and(|t| t.trim_start().starts_with("text/event-stream"));
        if streamed && !end_of_stream {
            return self.start_stream(host, asked, identity);
        }
        let readable = identity && !streamed;
        if end_of_stream {
            // An empty answer has nothing to check but cannot be read as the vendor's shape either.
            return self.finish_answer(host, asked, &[], readable);
        }
        // The body will change size when withheld.
        host.set_response_header("content-length", None);
        self.state = State::HoldingAnswer { asked, readable };
        Flow::Pause
    }

    pub fn on_response_body(
        &mut self,
        host: &mut dyn Host,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        if let State::Streaming(streamed) = &mut self.state {
            return stream_chunk(
                host,
                &self.policy,
                &mut self.record,
                streamed,
                body_size,
                end_of_stream,
            );
        }
        if let State::Peeking { seen } = &mut self.state {
            let room = vendor::PEEK_BYTES.saturating_sub(seen.len());
            if let Some(mut chunk) = host.response_body(body_size.min(room)) {
                seen.append(&mut chunk);
            }
            self.record.response_id = vendor::peek_id(seen);
            if self.record.response_id.is_some()
                || seen.len() >= vendor::PEEK_BYTES
                || end_of_stream
            {
                self.state = State::Done;
            }
            return Flow::Continue;
        }
        if let State::Observing { copy, .. } = &mut self.state {
            let fits = copy.len().saturating_add(body_size) <= self.policy.max_body_bytes;
            match host.response_body(body_size).filter(|_| fits) {
                Some(mut chunk) => copy.append(&mut chunk),
                // Too large to keep, or unreadable: the background checks skip this turn.
                None => self.state = State::Done,
            }
            if let State::Observing { copy, .. } = &self.state {
                // The id is in the answer's first bytes: looked for only until they are in.
                let looking = copy.len().saturating_sub(body_size) < vendor::PEEK_BYTES;
                if self.record.response_id.is_none() && looking {
                    self.record.response_id = vendor::peek_id(copy);
                }
            }
            if end_of_stream {
                if let State::Observing {
                    asked,
                    copy,
                    streamed,
                } = std::mem::replace(&mut self.state, State::Done)
                {
                    let text = if streamed {
                        crate::stream::answer_of(asked.api, &asked.version, &asked.request, &copy)
                    } else {
                        vendor::parse_answer(asked.api, &copy)
                            .ok()
                            .filter(|a| !a.asks_for_tool)
                            .map(|a| a.text)
                    };
                    if let Some(text) = text {
                        queue_background(host, &self.policy, &mut self.record, &asked, &text);
                    }
                }
            }
            return Flow::Continue;
        }
        let State::HoldingAnswer { .. } = &self.state else {
            return Flow::Continue;
        };
        if !end_of_stream && body_size <= self.policy.max_body_bytes {
            return Flow::Pause;
        }
        let State::HoldingAnswer { asked, readable } =
            std::mem::replace(&mut self.state, State::Done)
        else {
            return Flow::Continue;
        };
        let fits = body_size <= self.policy.max_body_bytes;
        let body = if fits {
            host.response_body(body_size)
        } else {
            None
        };
        let readable = readable && body.is_some();
        let flow = self.finish_answer(host, asked, body.as_deref().unwrap_or_default(), readable);
        if fits {
            return flow;
        }
        // Too large to hold: the answer is withheld and what remains of it dropped.
        let _ = host.replace_response_body(body_size, b"");
        flow
    }

    /// A streamed answer's headers: they go out at once (the first token must not wait), framed
    /// to a fixed length when the policy says so; an answer that cannot be read is replaced by a
    /// refusal stream right away.
    fn start_stream(&mut self, host: &mut dyn Host, asked: Asked, identity: bool) -> Flow {
        let Some(hold) = Hold::for_version(&asked.version) else {
            return Flow::Continue;
        };
        host.set_response_header("content-length", None);
        // Only rules cut a stream mid-way. A held round is cut or released when the model stopped,
        // so it ends with the upstream and needs no frame; and its release may be written into
        // Envoy's paused buffer from a judge's answer, where 4 MiB of padding would trip the
        // buffer limit and reset the stream.
        let frame = match hold {
            Hold::Rules => self.policy.stream_frame_bytes.map(Frame::new),
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
        });
        if !identity {
            // Compressed despite `accept-encoding: identity`: nothing can be read, so the turn is
            // refused now, in the shape the caller asked for, and says so in its header.
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
            streamed.pending = vendor::refusal(streamed.asked.api, reply, &request, &ids).body;
            streamed.ended = true;
            streamed.close_pending = true;
            self.state = State::Streaming(streamed);
            return Flow::Continue;
        }
        self.state = State::Streaming(streamed);
        Flow::Continue
    }

    /// Decides a complete non-streamed answer and rewrites it when a check stopped it.
    fn finish_answer(
        &mut self,
        host: &mut dyn Host,
        asked: Asked,
        body: &[u8],
        readable: bool,
    ) -> Flow {
        let answer = readable
            .then(|| vendor::parse_answer(asked.api, body).ok())
            .flatten();
        if let Some(id) = answer.as_ref().and_then(|a| a.id.clone()) {
            self.record.response_id = Some(id);
        }
        // A readable answer keeps its id, model and usage; one that could not be read is replaced
        // by a refusal in the shape the caller asked for. Written only when it may be needed.
        let withheld = |host: &mut dyn Host, asked: &Asked| {
            let reply = &asked.version.blocked_reply;
            answer
                .is_some()
                .then(|| vendor::withheld(asked.api, body, reply).ok())
                .flatten()
                .map(|body| vendor::Reply {
                    content_type: "application/json",
                    body,
                })
                .unwrap_or_else(|| {
                    let ids = fresh_ids(host);
                    vendor::refusal(asked.api, reply, &asked.request, &ids)
                })
        };
        // Rules first (an unreadable answer errors every check); the judge only if they passed.
        let rules = decide(
            &asked.version,
            Stage::Output,
            &Reading {
                rule_text: answer.as_ref().map_or("", |a| a.rule_text.as_str()),
                failed: None,
                judged_apply: answer.is_none(),
                readable: answer.is_some(),
                judged: &[],
            },
            1,
        );
        self.state = State::Done;
        if let (None, Some(answer)) = (&rules.stop, &answer) {
            let judged = !answer.asks_for_tool
                && !judge::blocking_judged(&asked.version, Stage::Output).is_empty();
            if judged {
                let withheld = withheld(host, &asked);
                let judging = self.ask_judge(
                    host,
                    asked,
                    Stage::Output,
                    answer.text.clone(),
                    Some(withheld),
                );
                return self.settle(host, judging, false);
            }
        }
        decided(host, &mut self.record, &asked.version, &rules.results);
        if let (Some(stop), Some(_)) = (&rules.stop, &answer) {
            if let Some(broken) = recovery::recoverable(&asked.version, &rules.results) {
                let stop = stop.clone();
                let withheld = withheld(host, &asked);
                // Withheld at once (no time left, the retry could not be sent) or waiting for
                // the retry: the answer's headers stay held either way.
                return self
                    .recover(host, asked, stop, broken, withheld)
                    .unwrap_or(Flow::Pause);
            }
        }
        let Some(stop) = rules.stop else {
            if let Some(answer) = answer.as_ref().filter(|a| !a.asks_for_tool) {
                queue_background(host, &self.policy, &mut self.record, &asked, &answer.text);
            }
            return Flow::Continue;
        };
        if let Some(value) = stop.header_value() {
            host.set_response_header(stop::HEADER, Some(&value));
        }
        let withheld = withheld(host, &asked);
        host.set_response_header("content-type", Some(withheld.content_type));
        // The filter's own body is plain: whatever encoding upstream declared no longer applies.
        host.set_response_header("content-encoding", None);
        if !host.replace_response_body(body.len(), &withheld.body) {
            host.log(
                LogLevel::Error,
                "livecheck: could not replace a withheld answer",
            );
        }
        Flow::Continue
    }

    /// Asks the model again for a non-streamed answer whose headers are still held. `None`: the
    /// retry is out and the turn waits in `Recovering`; `Some`: it was withheld at once.
    fn recover(
        &mut self,
        host: &mut dyn Host,
        asked: Asked,
        stop: Stop,
        rules: Vec<String>,
        withheld: vendor::Reply,
    ) -> Option<Flow> {
        let estimate = host.now_unix_millis().saturating_sub(asked.asked_at_ms);
        // The withheld form keeps the rejected answer's usage: the first attempt's.
        let first_usage = vendor::answer_usage(asked.api, &withheld.body).unwrap_or_default();
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
    fn recovering_next(&mut self, host: &mut dyn Host, next: Next) -> Flow {
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

    /// Withholds a non-streamed answer whose headers are held, with the usage of every attempt.
    fn withhold(
        &mut self,
        host: &mut dyn Host,
        asked: &Asked,
        stop: &Stop,
        withheld: vendor::Reply,
        usage: &vendor::Usage,
    ) -> Flow {
        let body = vendor::with_usage(asked.api, &withheld.body, usage).unwrap_or(withheld.body);
        send_stop(host, &self.record, stop, withheld.content_type, &body)
    }

    fn refuse_request(
        &mut self,
        host: &mut dyn Host,
        api: Api,
        status: u32,
        message: &str,
    ) -> Flow {
        self.state = State::Done;
        let reply = vendor::error(api, status as u16, message);
        host.send_local_reply(status, &[("content-type", reply.content_type)], &reply.body);
        Flow::Pause
    }

    fn too_large(&mut self, host: &mut dyn Host, api: Api) -> Flow {
        let limit = self.policy.max_body_bytes;
        self.refuse_request(
            host,
            api,
            413,
            &format!("the request body is larger than this gateway reads ({limit} bytes)"),
        )
    }
}

/// One upstream chunk of a streamed answer: rewritten, framed, and after a cut dropped.
fn stream_chunk(
    host: &mut dyn Host,
    policy: &Policy,
    record: &mut Record,
    s: &mut Streamed,
    body_size: usize,
    end_of_stream: bool,
) -> Flow {
    if s.ended {
        let mut out = std::mem::take(&mut s.pending);
        // The close waits for a callback after the one that carried the closing events.
        if out.is_empty() && s.close_pending && s.frame.is_some() && !end_of_stream {
            s.close_pending = false;
            host.close_response();
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
        replace_chunk(host, body_size, &kept);
        return Flow::Pause;
    }
    if let Some(judging) = &mut s.judging {
        // Paused while the judge decides: Envoy keeps buffering after what this filter kept.
        let fresh = buffered.get(judging.kept.len()..).unwrap_or_default();
        let mut step = s.rewriter.feed(fresh);
        judging.kept.append(&mut step.out);
        judging.end_of_stream |= end_of_stream;
        let kept = judging.kept.clone();
        replace_chunk(host, body_size, &kept);
        return Flow::Pause;
    }
    if let Some(copy) = &mut s.copy {
        if copy.len().saturating_add(buffered.len()) <= policy.max_body_bytes {
            copy.extend_from_slice(&buffered);
        } else {
            s.copy = None;
        }
    }
    let mut step = s.rewriter.feed(&buffered);
    if record.response_id.is_none() {
        record.response_id = s.rewriter.answer_id().map(str::to_owned);
    }
    if end_of_stream && step.cut.is_none() && step.round_end.is_none() {
        let mut last = s.rewriter.finish();
        step.out.append(&mut last.out);
        step.cut = last.cut;
        step.round_end = last.round_end;
    }
    if let Some(round) = step.round_end.take() {
        // The round's text is scanned once; the judge is asked only when every rule passed.
        let failed = s.asked.version.output_rules.failed_checks(&round.rule_text);
        let judged_apply = !round.asks_for_tool
            && !judge::blocking_judged(&s.asked.version, Stage::Output).is_empty();
        if failed.is_empty() && judged_apply {
            let read = Judged {
                stage: Stage::Output,
                text: &round.answer_text,
                question: Some(&s.asked.request.last_user_text),
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
        }
        let decided_round = Decided {
            failed: &failed,
            judged: &[],
            undecided: &[],
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
    let round_decided = s.round_decided;
    let out = finish_step(host, record, s, step, end_of_stream);
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
    replace_chunk(host, body_size, &out);
    Flow::Continue
}

/// A streamed round with verdicts in hand: when one stops it or none is pending, the round is
/// released or cut, the held bytes go out and the stream goes on. `None` while verdicts are
/// pending. `through_host`: called from a callout's answer, so the paused response is resumed
/// through the host; `buffered` is what the paused buffer holds.
fn settle_stream(
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
        cut: None,
        round_end: None,
    };
    let undecided: Vec<usize> = judging.pending.iter().map(|(_, c)| *c).collect();
    let round = Decided {
        failed: &[],
        judged: &judging.judged,
        undecided: &undecided,
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
    } = *round;
    let verdict = decide(
        &s.asked.version,
        Stage::Output,
        &Reading {
            rule_text: "",
            failed: Some(failed),
            judged_apply: true,
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
        if start_stream_recovery(host, policy, s, stop, &results) {
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
                check,
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

/// Asks the model again for a held round nothing of which was shown (`Hold::Everything`), when
/// every check that stopped it recovers; `false` when the round must be cut instead.
fn start_stream_recovery(
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
        .and_then(|copy| vendor::stream_usage(s.asked.api, copy))
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
fn stream_recovery_answered(
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
            vendor::as_stream(s.asked.api, &body, &s.asked.request).ok()
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
            count_one(host, record, &s.asked.version, cut.check, outcome);
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

fn replace_chunk(host: &mut dyn Host, body_size: usize, out: &[u8]) {
    if !host.replace_response_body(body_size, out) {
        host.log(
            LogLevel::Error,
            "livecheck: could not rewrite a streamed chunk",
        );
    }
}

fn check_index(version: &Version, name: &str) -> Option<usize> {
    version.checks.iter().position(|c| c.name == name)
}

fn first_blocking_output_check(version: &Version) -> Option<usize> {
    version
        .checks
        .iter()
        .position(|c| {
            c.stage == Stage::Output && c.mode == crate::config::Mode::Block && !c.on_error_pass
        })
        .or_else(|| {
            version
                .checks
                .iter()
                .position(|c| c.stage == Stage::Output && c.mode == crate::config::Mode::Block)
        })
}

fn stop_errored(version: &Version, check: usize) -> Stop {
    Stop {
        stage: Stage::Output,
        check: version
            .checks
            .get(check)
            .map(|c| c.name.clone())
            .unwrap_or_default(),
        code: stop::Code::CheckErrored,
    }
}

fn count_one(
    host: &mut dyn Host,
    record: &mut Record,
    version: &Version,
    check: usize,
    outcome: Outcome,
) {
    let passed_on_error =
        outcome == Outcome::Errored && version.checks.get(check).is_some_and(|c| c.on_error_pass);
    decided(
        host,
        record,
        version,
        &[CheckResult {
            check,
            outcome,
            passed_on_error,
            attempt: 1,
        }],
    );
}

/// A stream that ended without a cut: every blocking output rule check passed.
fn count_passed(host: &mut dyn Host, record: &mut Record, version: &Version) {
    for (i, check) in version.checks.iter().enumerate() {
        if check.stage == Stage::Output
            && check.mode == crate::config::Mode::Block
            && check.kind.is_rule()
        {
            count_one(host, record, version, i, Outcome::Passed);
        }
    }
}

/// A turn that completed normally: its background checks, drawn at their sample rates, go to
/// the outbox. The turn itself is not touched.
fn queue_background(
    host: &mut dyn Host,
    policy: &Policy,
    record: &mut Record,
    asked: &Asked,
    answer: &str,
) {
    let read = Judged {
        stage: Stage::Output,
        text: answer,
        question: Some(&asked.request.last_user_text),
        turn_model: asked.request.model.as_deref(),
        credentials: &asked.credentials,
    };
    for (check, judge) in
        judge::background_draws(policy, &asked.version, &read, &mut || host.random())
    {
        record.background(check, judge);
    }
}

/// Lets a held stream go on: from its own callback by returning Continue, from a callout's
/// answer through the host.
fn resume(host: &mut dyn Host, stage: Stage, through_host: bool) -> Flow {
    if through_host {
        match stage {
            Stage::Input => host.resume_request(),
            Stage::Output => host.resume_response(),
        }
    }
    Flow::Continue
}

/// What a retry is built from: the request's authority, path, body and forwarded headers, read
/// while the request headers are still readable.
fn retry_source(host: &mut dyn Host, body: &[u8]) -> Option<Source> {
    Some(Source {
        authority: host.request_header(":authority")?,
        path: host.request_header(":path")?,
        body: String::from_utf8(body.to_vec()).ok()?,
        headers: livecheck_wire::FORWARDED_HEADERS
            .iter()
            .filter_map(|h| Some(((*h).to_owned(), host.request_header(h)?)))
            .collect(),
    })
}

/// The upstream's id of a non-streamed answer: the id the caller of a recovered turn sees.
fn answer_id(api: Api, body: &[u8]) -> Option<String> {
    vendor::parse_answer(api, body).ok()?.id
}

/// Ids for a body the filter writes itself: a random token and the host's clock.
fn fresh_ids(host: &mut dyn Host) -> Ids {
    Ids {
        token: format!("lc{:016x}{:08x}", host.random(), host.random() as u32),
        created: host.now_unix_millis() / 1_000,
    }
}

fn has_background_checks(version: &Version) -> bool {
    version
        .checks
        .iter()
        .any(|c| c.mode == crate::config::Mode::Background)
}

fn has_blocking_output_checks(version: &Version) -> bool {
    version
        .checks
        .iter()
        .any(|c| c.stage == Stage::Output && c.mode == crate::config::Mode::Block)
}

fn send_stop(
    host: &mut dyn Host,
    record: &Record,
    stop: &Stop,
    content_type: &str,
    body: &[u8],
) -> Flow {
    let header = stop.header_value().unwrap_or_default();
    host.send_local_reply(
        200,
        &[
            ("content-type", content_type),
            (stop::HEADER, &header),
            (livecheck_wire::TURN_ID_HEADER, &record.turn_id),
        ],
        body,
    );
    Flow::Pause
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::host::fake::FakeHost;

    const SEED: &str = include_str!("../examples/seed.json");

    fn turn() -> Turn {
        Turn::new(Rc::new(Policy::from_json(SEED.as_bytes()).unwrap()))
    }

    fn chat_request(question: &str) -> FakeHost {
        let mut host = FakeHost::with_request(&[
            (":method", "POST"),
            (":path", "/v1/chat/completions"),
            (":authority", "api.test"),
        ]);
        host.request_body = serde_json::json!({
            "model": "gpt-4.1-mini",
            "messages": [{"role": "user", "content": question}]
        })
        .to_string()
        .into_bytes();
        host
    }

    /// Headers, then the whole body in one callback: what reaches the turn.
    fn ask(turn: &mut Turn, host: &mut FakeHost) -> (Flow, Flow) {
        let headers = turn.on_request_headers(host, false);
        let size = host.request_body.len();
        (headers, turn.on_request_body(host, size, true))
    }

    fn answer(turn: &mut Turn, host: &mut FakeHost, text: &str) -> (Flow, Flow) {
        host.response_headers.insert(":status".into(), "200".into());
        host.response_headers
            .insert("content-type".into(), "application/json".into());
        host.response_body = serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4.1-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
        })
        .to_string()
        .into_bytes();
        let headers = turn.on_response_headers(host, false);
        let size = host.response_body.len();
        (headers, turn.on_response_body(host, size, true))
    }

    #[test]
    fn request_headers_are_held_until_the_question_passed() {
        let (mut t, mut host) = (turn(), chat_request("where is my order?"));
        assert_eq!(ask(&mut t, &mut host), (Flow::Pause, Flow::Continue));
        assert_eq!(
            host.request_headers
                .get("accept-encoding")
                .map(String::as_str),
            Some("identity")
        );
        assert!(host.local_reply.is_none());
    }

    #[test]
    fn a_refused_question_is_answered_locally_with_the_header() {
        let (mut t, mut host) = (turn(), chat_request("my password is x"));
        assert_eq!(ask(&mut t, &mut host), (Flow::Pause, Flow::Pause));
        let reply = host.local_reply.as_ref().unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.headers.get("x-core-check").map(String::as_str),
            Some(r#"stage=input, check="no-passwords", code=input_check_failed"#)
        );
        assert_eq!(
            host.local_reply_json()["choices"][0]["finish_reason"],
            "content_filter"
        );
        assert_eq!(
            host.counters.get("livecheck.orders.no-passwords.failed"),
            Some(&1)
        );
    }

    #[test]
    fn the_request_body_is_buffered_until_its_end() {
        let (mut t, mut host) = (turn(), chat_request("hello"));
        assert_eq!(t.on_request_headers(&mut host, false), Flow::Pause);
        assert_eq!(t.on_request_body(&mut host, 3, false), Flow::Pause);
        let size = host.request_body.len();
        assert_eq!(t.on_request_body(&mut host, size, true), Flow::Continue);
    }

    #[test]
    fn a_forbidden_answer_is_withheld_and_its_headers_held_until_decided() {
        let (mut t, mut host) = (turn(), chat_request("hello"));
        ask(&mut t, &mut host);
        // The seed's no-iban recovers: the model is asked again first, the answer held.
        assert_eq!(
            answer(&mut t, &mut host, "NL91ABNA0417164300"),
            (Flow::Pause, Flow::Pause)
        );
        assert_eq!(host.callouts.len(), 1);
        assert!(host.callouts[0]
            .1
            .contains(&(":path".to_owned(), "/v1/retry".to_owned())));
        // The sidecar cannot retry: the first answer is withheld in its place.
        host.callout_answer = Some((None, Vec::new()));
        t.on_callout_response(&mut host, 1, 0);
        let reply = host.local_reply.take().unwrap();
        host.response_headers.extend(reply.headers);
        host.response_body = reply.body;
        let body: serde_json::Value = serde_json::from_slice(&host.response_body).unwrap();
        assert_eq!(body["choices"][0]["finish_reason"], "content_filter");
        assert_eq!(body["usage"]["completion_tokens"], 4);
        assert!(!String::from_utf8_lossy(&host.response_body).contains("NL91"));
        assert!(host.response_headers.contains_key("x-core-check"));
    }

    #[test]
    fn a_clean_answer_is_left_as_it_is() {
        let (mut t, mut host) = (turn(), chat_request("hello"));
        ask(&mut t, &mut host);
        answer(&mut t, &mut host, "fine");
        let body: serde_json::Value = serde_json::from_slice(&host.response_body).unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], "fine");
        assert!(!host.response_headers.contains_key("x-core-check"));
    }

    #[test]
    fn other_calls_pass_untouched() {
        let mut t = turn();
        let mut host = FakeHost::with_request(&[(":method", "GET"), (":path", "/v1/models")]);
        assert_eq!(t.on_request_headers(&mut host, true), Flow::Continue);
        assert_eq!(t.on_response_headers(&mut host, false), Flow::Continue);
        assert!(!host.request_headers.contains_key("accept-encoding"));
    }
}
