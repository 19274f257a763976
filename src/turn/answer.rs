//! A non-streamed answer: its body held until its output checks decided, then passed, withheld,
//! or handed to recovery; and the answers no check holds, passed while observed.

use super::stream::stream_chunk;
use super::*;

impl Turn {
    pub fn on_response_headers(&mut self, host: &mut dyn Host, end_of_stream: bool) -> Flow {
        match std::mem::replace(&mut self.state, State::Done) {
            // The question is still held: read or checked, not yet sent upstream.
            State::ReadingQuestion { endpoint, .. } => {
                self.answered_before_asked(host, Some(Dialect::of(endpoint.api, endpoint.platform)))
            }
            State::JudgingQuestion(judging) => {
                self.answered_before_asked(host, Some(judging.asked.dialect()))
            }
            State::ReadingMcp { .. } | State::CheckingMcp(_) => {
                self.answered_before_asked(host, None)
            }
            State::AwaitingAnswer(asked) => self.answer_headers(host, asked, end_of_stream),
            // Not a turn that waits for an answer: its headers pass as they are.
            other @ (State::Bypass
            | State::JudgingAnswer(_)
            | State::HoldingAnswer { .. }
            | State::Discarding
            | State::Streaming(_)
            | State::Observing { .. }
            | State::Recovering(_)
            | State::Peeking { .. }
            | State::CheckingCalls(_)
            | State::Done) => {
                self.state = other;
                Flow::Continue
            }
        }
    }

    /// The answer's headers, the question having gone upstream: what holds or reads its body.
    fn answer_headers(&mut self, host: &mut dyn Host, asked: Asked, end_of_stream: bool) -> Flow {
        host.set_response_header(livecheck_wire::TURN_ID_HEADER, Some(&self.record.turn_id));
        let status = host.response_header(":status").unwrap_or_default();
        // Error answers carry no model text; they reach the caller as the vendor sent them.
        if !status.starts_with('2') {
            return Flow::Continue;
        }
        let identity = host
            .response_header("content-encoding")
            .is_none_or(|e| e.trim().eq_ignore_ascii_case("identity"));
        // An input-only API's answer (embeddings, a queued batch) is not the model's words: it
        // passes as it came, its first bytes read only for the upstream's id.
        if !asked.api.has_answer() {
            if identity && !end_of_stream {
                self.state = State::Peeking { seen: Vec::new() };
            }
            return Flow::Continue;
        }
        if !has_blocking_output_checks(&asked.version) {
            if identity && has_background_checks(&asked.version) && !end_of_stream {
                let streamed = answer_streams(host, &asked.request);
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
        let streamed = answer_streams(host, &asked.request);
        if streamed && !end_of_stream {
            return self.start_stream(host, asked, identity);
        }
        let json = host
            .response_header("content-type")
            .is_none_or(|t| t.to_ascii_lowercase().contains("json"));
        let readable = identity && !streamed && json;
        if end_of_stream || !readable {
            // Nothing to read (an empty answer has nothing to check but cannot be read as the
            // vendor's shape either), or nothing readable: decided now, while a stop can still
            // replace the whole answer.
            return self.finish_answer(host, asked, &[], readable && end_of_stream);
        }
        // The body is held; it will change size when withheld. The headers go on now, or, where
        // Envoy lets the filter read a body behind them (always for the dynamic module; for the
        // wasm filter where the operator says so), are held with it.
        host.set_response_header("content-length", None);
        self.state = State::HoldingAnswer { asked, readable };
        if host.holds_response_headers() {
            self.headers_held = true;
            return Flow::Pause;
        }
        if self.policy.hold_answer_headers {
            self.headers_held = true;
            host.release_response_headers_soon();
            return Flow::Pause;
        }
        Flow::Continue
    }

    /// The upstream answered before the question was sent on (it had only the headers, which go
    /// on at once). An error status carries no model text and reaches the caller as sent; any
    /// other answer cannot be an answer to a question the upstream never had, and is refused.
    /// `api`: the question's, `None` for an MCP request.
    fn answered_before_asked(&mut self, host: &mut dyn Host, dialect: Option<Dialect>) -> Flow {
        self.state = State::Done;
        let status = host.response_header(":status").unwrap_or_default();
        if !status.starts_with('2') {
            return Flow::Continue;
        }
        host.log(
            LogLevel::Warn,
            "livecheck: the upstream answered before the question was sent; refused",
        );
        let message = "the upstream answered before the question was checked";
        let (content_type, body, mut headers) = match dialect {
            Some(dialect) => {
                let (reply, headers) = dialect.error(502, message);
                (reply.content_type, reply.body, headers)
            }
            None => (
                "application/json",
                crate::mcp::error(None, -32603, message),
                Vec::new(),
            ),
        };
        headers.push(("content-type", content_type));
        host.send_local_reply(502, &headers, &body);
        Flow::Pause
    }

    pub fn on_response_body(
        &mut self,
        host: &mut dyn Host,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        match &mut self.state {
            State::Streaming(streamed) => {
                let mut cx = Ctx {
                    host,
                    policy: &self.policy,
                    record: &mut self.record,
                };
                stream_chunk(&mut cx, streamed, body_size, end_of_stream)
            }
            State::Peeking { seen } => {
                let room = api::PEEK_BYTES.saturating_sub(seen.len());
                if let Some(mut chunk) = host.response_body(body_size.min(room)) {
                    seen.append(&mut chunk);
                }
                self.record.response_id = api::peek_id(seen);
                if self.record.response_id.is_some()
                    || seen.len() >= api::PEEK_BYTES
                    || end_of_stream
                {
                    self.state = State::Done;
                }
                Flow::Continue
            }
            State::Observing {
                asked,
                copy,
                streamed,
            } => {
                let fits = copy.len().saturating_add(body_size) <= self.policy.max_body_bytes;
                match host.response_body(body_size).filter(|_| fits) {
                    Some(mut chunk) => copy.append(&mut chunk),
                    // Too large to keep, or unreadable: the background checks skip this turn.
                    None => {
                        self.state = State::Done;
                        return Flow::Continue;
                    }
                }
                // The id is in the answer's first bytes: looked for only until they are in.
                let looking = copy.len().saturating_sub(body_size) < api::PEEK_BYTES;
                if self.record.response_id.is_none() && looking {
                    self.record.response_id = api::peek_id(copy);
                }
                if end_of_stream {
                    let text = if *streamed {
                        crate::stream::answer_of(asked.api, &asked.version, &asked.request, copy)
                    } else {
                        api::parse_answer(asked.api, copy, false)
                            .ok()
                            .filter(|a| !a.asks_for_tool)
                            .map(|a| a.text)
                    };
                    if let Some(text) = text {
                        let mut cx = Ctx {
                            host,
                            policy: &self.policy,
                            record: &mut self.record,
                        };
                        cx.queue_background(asked, &text);
                    }
                    self.state = State::Done;
                }
                Flow::Continue
            }
            State::Discarding => {
                let _ = host.replace_response_body(body_size, b"");
                Flow::Continue
            }
            State::HoldingAnswer { .. } => self.holding_chunk(host, body_size, end_of_stream),
            // The answer is not held: it passes as it is.
            State::Bypass
            | State::ReadingQuestion { .. }
            | State::JudgingQuestion(_)
            | State::AwaitingAnswer(_)
            | State::JudgingAnswer(_)
            | State::Recovering(_)
            | State::ReadingMcp { .. }
            | State::CheckingMcp(_)
            | State::CheckingCalls(_)
            | State::Done => Flow::Continue,
        }
    }

    /// A chunk of a held non-streamed answer (the turn is `HoldingAnswer`): held until it is
    /// whole, or too large to hold; then decided.
    fn holding_chunk(
        &mut self,
        host: &mut dyn Host,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        if self.headers_held && host.response_headers_released() {
            // Let go by a tick: they reached the caller as they were.
            self.headers_held = false;
        }
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
        self.held_body = Some(body_size);
        self.held_whole = end_of_stream;
        // Too large to hold: decided unread now (withheld, or passed where every check lets an
        // undecided answer through); a withheld answer drops what more comes (`answer_instead`).
        self.finish_answer(host, asked, body.as_deref().unwrap_or_default(), readable)
    }

    /// Decides a complete non-streamed answer and rewrites it when a check stopped it.
    fn finish_answer(
        &mut self,
        host: &mut dyn Host,
        asked: Asked,
        body: &[u8],
        readable: bool,
    ) -> Flow {
        let rule_text = !asked.version.output_rules.is_empty();
        let mut answer = readable
            .then(|| api::parse_answer(asked.api, body, rule_text).ok())
            .flatten();
        if let Some(id) = answer.as_mut().and_then(|a| a.id.take()) {
            self.record.response_id = Some(id);
        }
        // A readable answer keeps its id, model and usage; one that could not be read is replaced
        // by a refusal in the shape the caller asked for. Written only when it may be needed.
        let read = answer.is_some();
        let withheld = |host: &mut dyn Host, asked: &Asked| {
            let reply = &asked.version.blocked_reply;
            read.then(|| api::withheld(asked.api, body, reply).ok())
                .flatten()
                .map(|body| api::Reply {
                    content_type: "application/json",
                    body,
                })
                .unwrap_or_else(|| {
                    let ids = fresh_ids(host);
                    api::refusal(asked.api, reply, &asked.request, &ids)
                })
        };
        // Rules first (an unreadable answer errors every check); the judge only if they passed.
        let rules = decide(
            &asked.version,
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
            1,
        );
        self.state = State::Done;
        if answer.is_none() && rules.stop.is_none() && asked.version.tools.any() {
            // Calls nobody could read went unchecked: withheld (tool checks have no `on_error`).
            decided(host, &mut self.record, &asked.version, &rules.results);
            crate::record::tools_unread(host, &mut self.record, &asked.version);
            let stop = tools_unread_stop(&asked.version);
            let withheld = withheld(host, &asked);
            return self.answer_instead(
                host,
                Some(&stop),
                withheld.content_type,
                &withheld.body,
                false,
            );
        }
        if let (None, Some(answer)) = (&rules.stop, &mut answer) {
            if !answer.calls.is_empty() && asked.version.tools.any() {
                // Rules passed; the calls are checked next (judged checks read no answer that
                // asks for a tool).
                decided(host, &mut self.record, &asked.version, &rules.results);
                let calls = std::mem::take(&mut answer.calls);
                return self.check_calls(host, asked, calls, body);
            }
            let judged = !answer.asks_for_tool
                && answer.calls.is_empty()
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
                    .recover(host, asked, stop, broken, withheld, false, false)
                    .unwrap_or(Flow::Pause);
            }
        }
        let Some(stop) = rules.stop else {
            if let Some(answer) = answer.as_ref().filter(|a| !a.asks_for_tool) {
                self.cx(host).queue_background(&asked, &answer.text);
            }
            self.pass_held(host);
            return Flow::Continue;
        };
        let withheld = withheld(host, &asked);
        self.answer_instead(
            host,
            Some(&stop),
            withheld.content_type,
            &withheld.body,
            false,
        )
    }

    /// Withholds a held non-streamed answer, with the usage of every attempt.
    pub(super) fn withhold(
        &mut self,
        host: &mut dyn Host,
        asked: &Asked,
        stop: &Stop,
        withheld: api::Reply,
        usage: &api::Usage,
        resumed: bool,
    ) -> Flow {
        let body = api::with_usage(asked.api, &withheld.body, usage).unwrap_or(withheld.body);
        self.answer_instead(host, Some(stop), withheld.content_type, &body, resumed)
    }
}

/// The stop of an answer the tool checks could not read: the first of them (`allowed_tools`, else
/// the first row) could not decide.
/// Whether an answer streams: server-sent events, or the stream the request's path asked for as
/// one JSON array (Gemini without `alt=sse`, sent as `application/json`).
fn answer_streams(host: &dyn Host, request: &Request) -> bool {
    request.json_array
        || host
            .response_header("content-type")
            .is_some_and(|t| api::is_stream(&t))
}

fn tools_unread_stop(version: &Version) -> Stop {
    let tools = &version.tools;
    let check = match (&tools.allowed, tools.rows.first()) {
        (Some(_), _) | (None, None) => crate::config::ALLOWED_TOOLS.to_owned(),
        (None, Some(row)) => row.name.clone(),
    };
    Stop {
        stage: Stage::Output,
        check,
        code: stop::Code::CheckErrored,
    }
}
