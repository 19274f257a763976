//! The question: reading the request, its input checks, and refusing it before any model is called.

use crate::config::unread::Fate;
use crate::config::SelectError;

use super::*;

impl Turn {
    pub fn on_request_headers(&mut self, host: &mut dyn Host, end_of_stream: bool) -> Flow {
        let method = host.request_header(":method").unwrap_or_default();
        let path = host.request_header(":path").unwrap_or_default();
        if self.policy.is_mcp(&method, &path) && self.policy.checks_tools() {
            return self.start_mcp(host, end_of_stream);
        }
        let Some(endpoint) = api::endpoint(&method, &path) else {
            if self.policy.is_mcp_path(&path) {
                // An MCP endpoint the operator named (a `POST` no tool check reads, its `GET`
                // stream, the `DELETE` that ends a session): no model generates there.
                self.state = State::Bypass;
                return Flow::Continue;
            }
            return self.unread(host, &method, &path);
        };
        let version = match self.begin(host) {
            Ok(v) => v,
            Err(e) => return self.refuse_request(host, &endpoint, 400, &e.to_string()),
        };
        // A platform's credentials (an Azure key, a Google key or token, an AWS signature) are not
        // the judge backends': its judged checks use the sidecar's own keys. Gemini's turns are
        // all on a platform (`Google`, `Vertex`): none of their headers goes to the judge.
        if endpoint.platform == Platform::Direct {
            self.record.credentials = judge::CREDENTIAL_HEADERS
                .iter()
                .filter_map(|h| Some(((*h).to_owned(), host.request_header(h)?)))
                .collect();
        }
        if let Some(encoding) = host.request_header("content-encoding") {
            if !encoding.trim().eq_ignore_ascii_case("identity") {
                return self.refuse_request(
                    host,
                    &endpoint,
                    415,
                    "livecheck reads request bodies as they are written: send them without content-encoding",
                );
            }
        }
        let declared = host
            .request_header("content-length")
            .and_then(|l| l.trim().parse::<usize>().ok());
        if declared.is_some_and(|len| len > self.policy.max_body_bytes) {
            return self.too_large(host, &endpoint);
        }
        if end_of_stream {
            return self.refuse_request(host, &endpoint, 400, "the request has no body");
        }
        // Answers must be readable to be checked; but a header the caller signed (Bedrock's
        // SigV4) goes as signed, and a compressed answer is then withheld as unreadable.
        let signed = endpoint.platform == Platform::Bedrock
            && api::signed_header(
                host.request_header("authorization").as_deref(),
                "accept-encoding",
            );
        if !signed {
            host.set_request_header("accept-encoding", Some("identity"));
        }
        // What a retry needs of the headers is kept now: once this callback continues, Envoy no
        // longer lets the filter read them. A Gemini key (`x-goog-api-key`, or `?key=` in the
        // path) goes only in the retry callout.
        let source = (endpoint.api.has_answer()
            && (version.checks.iter().any(|c| c.recover)
                || version.tools.rows.iter().any(|r| r.recover)))
        .then(|| retry_source(host, endpoint.platform))
        .flatten();
        self.state = State::ReadingQuestion {
            endpoint,
            version,
            source,
        };
        // The headers go upstream now; the body is held until the question passed, so no model
        // is asked before it did (a refused question leaves the upstream an unfinished request,
        // which Envoy resets). A filter that held the headers would need the wasm filter's
        // `allow_on_headers_stop_iteration`, which neither Istio nor Envoy Gateway sets.
        Flow::Continue
    }

    pub fn on_request_body(
        &mut self,
        host: &mut dyn Host,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        match std::mem::replace(&mut self.state, State::Done) {
            State::ReadingQuestion {
                endpoint,
                version,
                source,
            } => self.read_question(host, endpoint, version, source, body_size, end_of_stream),
            State::ReadingMcp { version } => {
                self.on_mcp_body(host, version, body_size, end_of_stream)
            }
            // The body is not held: it passes as it is.
            other @ (State::Bypass
            | State::JudgingQuestion(_)
            | State::AwaitingAnswer(_)
            | State::JudgingAnswer(_)
            | State::HoldingAnswer { .. }
            | State::Discarding
            | State::Streaming(_)
            | State::Observing { .. }
            | State::Recovering(_)
            | State::Peeking { .. }
            | State::CheckingMcp(_)
            | State::CheckingCalls(_)
            | State::Done) => {
                self.state = other;
                Flow::Continue
            }
        }
    }

    /// A chunk of the held question (the turn was `ReadingQuestion`): read whole, then its input
    /// rules decide, then its judged checks.
    fn read_question(
        &mut self,
        host: &mut dyn Host,
        endpoint: Endpoint,
        version: Rc<Version>,
        source: Option<Source>,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        let api = endpoint.api;
        if body_size > self.policy.max_body_bytes {
            return self.too_large(host, &endpoint);
        }
        if !end_of_stream {
            self.state = State::ReadingQuestion {
                endpoint,
                version,
                source,
            };
            return Flow::Pause;
        }
        let Some(body) = host.request_body(body_size) else {
            return self.refuse_request(host, &endpoint, 400, "the request body could not be read");
        };
        let (request, batch) = match batch::read(&endpoint, &body) {
            Ok(r) => r,
            Err(e) => return self.refuse_request(host, &endpoint, 400, &e.to_string()),
        };
        let (rules, refused) = batch::input_rules(&version, &request, &batch);
        if let (Some(stop), Some(custom_id)) = (&rules.stop, refused) {
            decided(host, &mut self.record, &version, &rules.results);
            return self.refuse_batch(host, stop, custom_id);
        }
        let credentials = self.record.credentials.clone();
        let source = source.and_then(|mut source| {
            source.body = String::from_utf8(body.clone()).ok()?;
            Some(Rc::new(source))
        });
        let asked = Asked {
            api,
            platform: endpoint.platform,
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
        // A question its input rules refuse gets the agent's reply, background or not (the spec:
        // "answered with the standard reply at once"); one they pass is refused here.
        if asked.request.background
            && !asked.request.stream
            && answers_must_be_checked(&asked.version)
        {
            return self.refuse_request(host, &endpoint, 400, BACKGROUND_REFUSED);
        }
        if api == Api::MessageBatches
            && !judge::blocking_judged(&asked.version, Stage::Input).is_empty()
        {
            return self.refuse_request(host, &endpoint, 400, batch::BATCH_JUDGED_REFUSED);
        }
        // The judge reads the question only for a judged input check: no copy otherwise.
        let text = if judge::blocking_judged(&asked.version, Stage::Input).is_empty() {
            String::new()
        } else {
            asked.request.input_text.clone()
        };
        let judging = self.ask_judge(host, asked, Stage::Input, text, None);
        self.settle(host, judging, false)
    }

    /// Answers a stopped question with the agent's reply; nothing goes upstream.
    pub(super) fn refuse_question(
        &mut self,
        host: &mut dyn Host,
        asked: &Asked,
        stop: Option<&Stop>,
    ) -> Flow {
        self.state = State::Done;
        let Some(stop) = stop else {
            return Flow::Continue;
        };
        let ids = fresh_ids(host);
        let reply = api::refusal(
            asked.api,
            &asked.version.blocked_reply,
            &asked.request,
            &ids,
        );
        // An input-only API has no answer to refuse with: its refusal is an error.
        let status = if asked.api.has_answer() { 200 } else { 400 };
        self.cx(host)
            .send_stop(status, stop, reply.content_type, &reply.body)
    }

    /// A request the filter checks begins: its record (id, person) and the version it runs, from
    /// the agent header, else its host, else the default agent (the version header selects one).
    pub(super) fn begin(&mut self, host: &mut dyn Host) -> Result<Rc<Version>, SelectError> {
        self.started_ms = host.now_unix_millis();
        self.record = Record::new(turn_id(self.started_ms, host.random(), host.random()));
        if let Some(header) = &self.policy.person_header {
            self.record.person = host.request_header(header);
        }
        let agent = host.request_header(&self.policy.agent_header);
        let version = host.request_header(&self.policy.version_header);
        let authority = host.request_header(":authority");
        let version =
            self.policy
                .select(agent.as_deref(), version.as_deref(), authority.as_deref())?;
        self.record.runs(&version);
        Ok(version)
    }

    /// Refuses a request to a read endpoint that cannot be checked, in its dialect's error shape.
    fn refuse_request(
        &mut self,
        host: &mut dyn Host,
        endpoint: &Endpoint,
        status: u32,
        message: &str,
    ) -> Flow {
        self.state = State::Done;
        let (reply, mut headers) =
            Dialect::of(endpoint.api, endpoint.platform).error(status as u16, message);
        headers.push(("content-type", reply.content_type));
        host.send_local_reply(status, &headers, &reply.body);
        Flow::Pause
    }

    /// A request livecheck does not read as a turn: passed when it cannot make a model generate
    /// or its path is passed on purpose, else refused (fail closed) with 403 in the dialect its
    /// path suggests, naming the path, and counted either way.
    fn unread(&mut self, host: &mut dyn Host, method: &str, path: &str) -> Flow {
        let upgrade = host.request_header("upgrade").is_some();
        match self.policy.unread.fate(method, path, upgrade) {
            Fate::Harmless => {
                self.state = State::Bypass;
                Flow::Continue
            }
            Fate::Passed => {
                host.increment_counter(UNREAD_FORWARDED);
                self.state = State::Bypass;
                Flow::Continue
            }
            Fate::Refused => {
                host.increment_counter(UNREAD_REFUSED);
                let message = api::unread_message(method, path);
                // The path, never its query (it may hold a key) or any header.
                host.log(
                    LogLevel::Info,
                    &format!("livecheck: refused a request livecheck does not read: {message}"),
                );
                let anthropic = host.request_header("anthropic-version").is_some();
                let (reply, mut headers) = Dialect::guess(path, anthropic).error(403, &message);
                headers.push(("content-type", reply.content_type));
                headers.push((stop::HEADER, UNREAD_CHECK));
                self.state = State::Done;
                host.send_local_reply(403, &headers, &reply.body);
                Flow::Pause
            }
        }
    }

    fn too_large(&mut self, host: &mut dyn Host, endpoint: &Endpoint) -> Flow {
        let limit = self.policy.max_body_bytes;
        self.refuse_request(
            host,
            endpoint,
            413,
            &format!("the request body is larger than this gateway reads ({limit} bytes)"),
        )
    }
}

/// The counters of requests livecheck does not read: refused (fail closed), and passed by
/// `pass_paths` or `unread: "pass"`.
pub const UNREAD_REFUSED: &str = "livecheck.unread.refused";
pub const UNREAD_FORWARDED: &str = "livecheck.unread.forwarded";

/// The `X-Core-Check` of a refused unread request: no check stopped it, the path did.
const UNREAD_CHECK: &str = "code=unread_path";

/// A Responses request with `background: true` and no stream is answered at once with a queued
/// response, and its answer is read back later (`GET /v1/responses/{id}`), a request the filter
/// does not check: the answer would pass every output check unread (streamed, the answer is
/// checked as it streams). Refused before it reaches the model, where
/// an output check could stop the answer: a blocking one that does not pass on error, or any tool
/// check (a tool call that cannot be checked is denied).
const BACKGROUND_REFUSED: &str =
    "livecheck checks an answer as the model sends it, and a background \
     response is read back later, past those checks: send this request without `background: true`";

fn answers_must_be_checked(version: &Version) -> bool {
    version.tools.any()
        || version
            .checks
            .iter()
            .any(|c| c.blocks_output() && !c.on_error_pass)
}

/// What a retry is built from: the request's authority, path and forwarded headers, read in the
/// request headers callback (the only one that can read them); the body is added once read.
fn retry_source(host: &mut dyn Host, platform: Platform) -> Option<Source> {
    Some(Source {
        authority: host.request_header(":authority")?,
        path: host.request_header(":path")?,
        body: String::new(),
        headers: livecheck_wire::FORWARDED_HEADERS
            .iter()
            // Bedrock's `authorization` is the caller's SigV4 signature over this very body: no
            // retry can use it, so it is not handed on (the sidecar asks with its own key).
            .filter(|h| platform != Platform::Bedrock || **h != "authorization")
            .filter_map(|h| Some(((*h).to_owned(), host.request_header(h)?)))
            .collect(),
    })
}

/// A turn's id: `lc_`, the time it began in milliseconds (12 hex digits), then 80 random bits (20
/// hex digits). Ids of later turns sort later, so the sidecar's indexes on the turn id grow at
/// their end (a random id touches a random page of each of them per stored row).
/// Written digit by digit: `format!`'s machinery cost ~0.3 µs a turn under Node's V8 (`make
/// bench-v8-turn`, 100,000 turns: 12.97 → 12.67 µs inside a turn).
fn turn_id(now_ms: u64, high: u64, low: u64) -> String {
    let mut id = String::with_capacity(TURN_ID_LEN);
    id.push_str("lc_");
    push_hex(&mut id, now_ms.min(0xffff_ffff_ffff), 12);
    push_hex(&mut id, high, 16);
    push_hex(&mut id, low & 0xffff, 4);
    id
}

const TURN_ID_LEN: usize = "lc_".len() + 32;

/// The low `digits` hex digits of `value`, lowercase, most significant first.
fn push_hex(out: &mut String, value: u64, digits: u32) {
    for i in (0..digits).rev() {
        let nibble = value.checked_shr(4 * i).unwrap_or(0) & 0xf;
        out.push(char::from_digit(nibble as u32, 16).unwrap_or('0'));
    }
}

#[cfg(test)]
mod tests {
    use super::turn_id;

    #[test]
    fn turn_ids_sort_by_time_and_keep_their_length() {
        let earlier = turn_id(1_790_000_000_000, u64::MAX, u64::MAX);
        let later = turn_id(1_790_000_000_001, 0, 0);
        assert!(earlier < later);
        assert_eq!(earlier.len(), "lc_".len() + 32);
        assert_eq!(later.len(), "lc_".len() + 32);
        assert_ne!(turn_id(1, 1, 2), turn_id(1, 1, 3));
        assert!(turn_id(u64::MAX, 0, 0).starts_with("lc_ffffffffffff"));
    }

    #[test]
    fn turn_ids_are_the_hex_digits_of_their_parts() {
        let cases = [
            (0, 0, 0),
            (
                1_790_000_000_000,
                0x0123_4567_89ab_cdef,
                0xfedc_ba98_7654_3210,
            ),
            (0xffff_ffff_ffff, u64::MAX, u64::MAX),
            (u64::MAX, 1, 0x1_0000),
            (0xa, 0xb, 0xc),
        ];
        for (ms, high, low) in cases {
            assert_eq!(
                turn_id(ms, high, low),
                format!(
                    "lc_{:012x}{high:016x}{:04x}",
                    ms.min(0xffff_ffff_ffff),
                    low & 0xffff
                )
            );
        }
    }
}
