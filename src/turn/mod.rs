//! One turn through the filter: the per-stream state machine.
//!
//! The request's headers are held while its body is read and the input checks decide; a stopped
//! question is answered locally in the vendor's shape and never reaches upstream. A non-streamed
//! answer is held (headers included) until the output checks decided; a stopped answer is
//! replaced by the withheld form. One place (`Turn`'s callbacks) decides whether the stream goes on.

mod answer;
mod batch;
mod context;
mod judging;
mod mcp;
mod question;
mod recovering;
mod stream;
mod tools;

use std::rc::Rc;

use crate::api::{self, Api, Dialect, Endpoint, Ids, Platform, Request};
use crate::check::stop::{self, Stop};
use crate::check::{CheckResult, Outcome};
use crate::config::{Policy, Stage, Version};
use crate::frame::Frame;
use crate::host::{Flow, Host, LogLevel};
use crate::judge::{self, Judged};
use crate::record::{decided, Record};
use crate::recovery::{self, Next, Recovery, Source};
use crate::stream::{CutWhy, Hold, Rewriter, Step};
use crate::verdict::{decide, judged_stops, Reading};
use context::Ctx;
pub use question::{UNREAD_FORWARDED, UNREAD_REFUSED};

pub struct Turn {
    policy: Rc<Policy>,
    state: State,
    /// What the turn's checks decided, reported to the sidecar when the turn ends.
    record: Record,
    /// When the request arrived (ms since the Unix epoch): the turn's deadline counts from here.
    started_ms: u64,
    /// The size of a non-streamed answer's body that Envoy holds for the filter, once held whole;
    /// `None` while the answer's headers are still in the filter's hands.
    held_body: Option<usize>,
    /// A non-streamed answer's headers are held with its body (`hold_answer_headers`): a stop
    /// can still name itself in `X-Core-Check` and give the replaced body's length.
    headers_held: bool,
    /// The held body is the whole answer (held to its end, not decided unread for its size): an
    /// answer passed as it came has its length.
    held_whole: bool,
}

/// Where a turn is. Each callback that reads it decides by one `match` naming every state:
///
/// ```text
/// request headers   Bypass → ReadingQuestion | ReadingMcp | Done (refused) | Bypass (not checked)
/// request body      ReadingQuestion → JudgingQuestion | AwaitingAnswer | Done (refused)
///                   ReadingMcp → CheckingMcp | Done (allowed or denied)
/// callout           JudgingQuestion → AwaitingAnswer | Done (refused)
///                   CheckingMcp → Done;  CheckingCalls → Done | Discarding | Recovering
///                   JudgingAnswer → Done | Discarding | Recovering;  Recovering → Discarding
/// response headers  AwaitingAnswer → HoldingAnswer | Streaming | Observing | Peeking | Done,
///                     or decided at once as a complete answer is (below)
///                   ReadingQuestion | JudgingQuestion | ReadingMcp | CheckingMcp → Done
/// response body     HoldingAnswer → Done | Discarding | JudgingAnswer | CheckingCalls | Recovering
///                   Observing | Peeking → Done;  Streaming: its own `Phase`
/// ```
enum State {
    /// Not a call livecheck checks (a reading method, a path passed on purpose, MCP without
    /// tool checks): passes untouched.
    Bypass,
    /// The request headers went upstream; the body is held while it is read.
    ReadingQuestion {
        /// What the path says: the API, and the model or streaming it decides.
        endpoint: Endpoint,
        version: Rc<Version>,
        /// What a retry is built from, when the version has a check that recovers: the
        /// request's headers, kept before they went; the body is added once read.
        source: Option<Source>,
    },
    /// The question's rules passed; its judged checks are out with the judge, its body held.
    JudgingQuestion(Box<Judging>),
    /// The question passed and went upstream.
    AwaitingAnswer(Asked),
    /// A complete non-streamed answer passed its rules; its judged checks are out with the judge.
    JudgingAnswer(Box<Judging>),
    /// A non-streamed answer: its headers went on, its body is held until it is complete.
    HoldingAnswer { asked: Asked, readable: bool },
    /// A non-streamed answer was replaced in place: what more of it comes is dropped.
    Discarding,
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
    /// body held meanwhile.
    Recovering(Box<Recovering>),
    /// No check reads the answer: it passes untouched while its first bytes are read for the
    /// upstream's id (the caller may look its turn up by it).
    Peeking { seen: Vec<u8> },
    /// A POST to an MCP endpoint: its body is held while it is read.
    ReadingMcp { version: Rc<Version> },
    /// An MCP `tools/call` with its checks out: the request body is held.
    CheckingMcp(Box<mcp::McpCheck>),
    /// A non-streamed answer asks for tools: its calls are being checked, its body held.
    CheckingCalls(Box<tools::CallCheck>),
    /// Decided: everything left passes as it is.
    Done,
}

struct Recovering {
    asked: Asked,
    recovery: Recovery,
    /// The first answer, withheld, sent when no attempt passes.
    withheld: api::Reply,
}

/// A held streamed round being recovered: the response is paused; what this filter left in the
/// paused buffer is `kept`.
struct StreamRecovery {
    recovery: Recovery,
    kept: Vec<u8>,
    /// Asked before the first answer ended (its round was decided early).
    early: bool,
    /// A passing answer waiting for the first answer to end.
    passed: Option<Vec<u8>>,
}

struct Asked {
    api: Api,
    /// Where the request went (its errors are written in that platform's dialect).
    platform: Platform,
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
    /// The dialect of the errors this turn's caller reads.
    fn dialect(&self) -> Dialect {
        Dialect::of(self.api, self.platform)
    }

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
    withheld: Option<api::Reply>,
    /// What the judge read (the answer, on output), for background checks once it passed.
    text: String,
}

struct Streamed {
    asked: Asked,
    rewriter: Rewriter,
    frame: Option<Frame>,
    /// Where the answer is: passing, a held round with the judge or being recovered, or over.
    phase: Phase,
    /// A whole-text round was decided (its checks counted there, not again at the end).
    round_decided: bool,
    /// A copy of the upstream stream for background checks (rules mode keeps no answer text),
    /// bounded by `max_body_bytes`; `None` when the version has none or it grew too large.
    copy: Option<Vec<u8>>,
    /// The upstream's body ended (Envoy said `end_of_stream`).
    upstream_ended: bool,
    /// Tool calls complete and with their checks, beside the phase: the stream is not paused
    /// for them until the upstream's end.
    calls: Option<tools::StreamCalls>,
}

/// A streamed answer's phase. `Passing` → `Judging` (a held round ended, its rules passed, its
/// judged checks out), `Recovering` (the round failed only checks that recover) or `Ended`;
/// `Judging` → `Passing` (released), `Recovering` or `Ended` (cut); `Recovering` → `Ended` (the
/// recovered answer sent, or the round cut). `Ended` stays: later upstream bytes are dropped.
enum Phase {
    /// Each upstream chunk is rewritten as it passes (a round may be held inside the rewriter).
    Passing,
    /// A held round is with the judge; the response is paused meanwhile.
    Judging(StreamJudging),
    /// A held round failed checks that recover: the model is being asked again; the response is
    /// paused meanwhile.
    Recovering(Box<StreamRecovery>),
    /// The stream was cut or ended: later upstream bytes are dropped.
    Ended(Ending),
}

/// A stream that is over, and what is left to do for it.
#[derive(Default)]
struct Ending {
    /// The filter cut the stream (a check stopped it, or it outgrew its frame).
    cut: bool,
    /// After a cut, the stream is closed at the next upstream chunk (closing in the cut's own
    /// callback would reset the caller before the closing events reach it).
    close_pending: bool,
    /// Bytes decided before any upstream chunk (a refusal for an unreadable stream).
    pending: Vec<u8>,
}

impl Streamed {
    fn ended(&self) -> bool {
        matches!(self.phase, Phase::Ended(_))
    }

    fn was_cut(&self) -> bool {
        matches!(&self.phase, Phase::Ended(e) if e.cut)
    }

    /// The stream is over (`cut`: the filter cut it); a round held with the judge or being
    /// recovered is dropped. Over already, it keeps what is left to do, and is cut if either was.
    fn end(&mut self, cut: bool) {
        match &mut self.phase {
            Phase::Ended(ending) => ending.cut |= cut,
            Phase::Passing | Phase::Judging(_) | Phase::Recovering(_) => {
                self.phase = Phase::Ended(Ending {
                    cut,
                    ..Ending::default()
                });
            }
        }
    }

    /// Whether an ended stream is closed at the next upstream chunk.
    fn set_close_pending(&mut self, close_pending: bool) {
        if let Phase::Ended(ending) = &mut self.phase {
            ending.close_pending = close_pending;
        }
    }
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
            held_body: None,
            headers_held: false,
            held_whole: false,
        }
    }

    /// The stream ended (Envoy's `on_log`): the turn's report goes to the outbox.
    pub fn on_done(&mut self, host: &mut dyn Host) {
        let record = std::mem::take(&mut self.record);
        let credentials = record.credentials.clone();
        if let Some(report) = record.report() {
            host.deliver(judge::report_job(&self.policy, report, &credentials));
        }
    }

    /// The context a handler shares with the ones it calls, borrowed from the turn for one callback.
    fn cx<'a>(&'a mut self, host: &'a mut dyn Host) -> Ctx<'a> {
        Ctx {
            host,
            policy: &self.policy,
            record: &mut self.record,
        }
    }
}

fn check_index(version: &Version, name: &str) -> Option<usize> {
    version.checks.iter().position(|c| c.name == name)
}

fn first_blocking_output_check(version: &Version) -> Option<usize> {
    version.errored_check(crate::config::Check::blocks_output)
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

impl Turn {
    /// A held non-streamed answer goes on as it came. With `hold_answer_headers` its headers are
    /// still held, and get back the `content-length` removed when the body was held: the caller
    /// reads the answer framed as the vendor framed it.
    fn pass_held(&mut self, host: &mut dyn Host) {
        if !std::mem::take(&mut self.headers_held) || !self.held_whole {
            return;
        }
        if let Some(held) = self.held_body {
            host.set_response_header("content-length", Some(&held.to_string()));
        }
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

/// Whether an answer must be held (streamed: read as it passes) before the caller has it: a
/// blocking output check reads it, or its tool calls are checked.
fn has_blocking_output_checks(version: &Version) -> bool {
    version.tools.any()
        || version
            .checks
            .iter()
            .any(crate::config::Check::blocks_output)
}

impl Turn {
    /// Puts `body` in place of a held non-streamed answer and lets it go on. Decided in the
    /// response headers callback, nothing has reached the caller: a local reply replaces the
    /// answer, with `X-Core-Check` naming the stop. Later the held body is replaced in place and
    /// the upstream's status and headers stay. By default the headers have gone by then (a wasm
    /// filter reads no body behind held headers unless its Envoy config sets
    /// `allow_on_headers_stop_iteration`, which neither Istio nor Envoy Gateway can), so the stop
    /// is named in the stats and results only, under the turn's id; with `hold_answer_headers`
    /// they are still held, and get `X-Core-Check` and the body's `content-length` too.
    /// `resumed`: called from a callout's answer, so the answer goes on through the host.
    pub(super) fn answer_instead(
        &mut self,
        host: &mut dyn Host,
        stop: Option<&Stop>,
        content_type: &str,
        body: &[u8],
        resumed: bool,
    ) -> Flow {
        let Some(held) = self.held_body else {
            let header = stop.and_then(Stop::header_value);
            let mut headers = vec![
                ("content-type", content_type),
                (livecheck_wire::TURN_ID_HEADER, self.record.turn_id.as_str()),
            ];
            if let Some(header) = &header {
                headers.push((stop::HEADER, header));
            }
            host.send_local_reply(200, &headers, body);
            return Flow::Pause;
        };
        if std::mem::take(&mut self.headers_held) {
            host.set_response_header("content-length", Some(&body.len().to_string()));
            if let Some(header) = stop.and_then(Stop::header_value) {
                host.set_response_header(stop::HEADER, Some(&header));
            }
        }
        if !host.replace_response_body(held, body) {
            host.log(
                LogLevel::Error,
                "livecheck: could not replace a held answer",
            );
        }
        self.held_body = Some(body.len());
        // An answer decided before its end (too large to hold) is replaced whole: what more of it
        // comes is dropped. After its end nothing more comes.
        self.state = State::Discarding;
        resume(host, Stage::Output, resumed)
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::host::fake::FakeHost;

    const SEED: &str = include_str!("../../examples/seed.json");

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
    fn a_streamed_chunk_with_nothing_to_change_is_not_rewritten() {
        let policy = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
          "live_checks": [{"name": "no-iban", "stage": "output", "kind": "matches_pattern",
                           "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18}]}}}}}"#;
        let mut t = Turn::new(Rc::new(Policy::from_json(policy.as_bytes()).unwrap()));
        let mut host = chat_request("where is my order?");
        host.request_body = serde_json::json!({
            "model": "gpt-4.1-mini", "stream": true,
            "messages": [{"role": "user", "content": "where is my order?"}]
        })
        .to_string()
        .into_bytes();
        ask(&mut t, &mut host);
        host.response_headers.insert(":status".into(), "200".into());
        host.response_headers
            .insert("content-type".into(), "text/event-stream".into());
        t.on_response_headers(&mut host, false);
        let chunk = |text: &str| {
            format!(
                "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\
                 \"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\
                 \"finish_reason\":null}}]}}\n\n"
            )
            .into_bytes()
        };
        let mut feed = |host: &mut FakeHost, bytes: Vec<u8>| {
            host.response_body = bytes;
            let size = host.response_body.len();
            assert_eq!(t.on_response_body(host, size, false), Flow::Continue);
        };
        feed(&mut host, chunk("Your order "));
        let rewrites = host.body_rewrites;
        feed(&mut host, chunk("ships on Monday. "));
        assert_eq!(host.body_rewrites, rewrites);
        assert_eq!(host.response_body, chunk("ships on Monday. "));
        // "NL9" could begin an IBAN: held back, so the chunk is rewritten.
        feed(&mut host, chunk("Pay to NL9"));
        assert_eq!(host.body_rewrites, rewrites + 1);
        assert_ne!(host.response_body, chunk("Pay to NL9"));
    }

    #[test]
    fn request_headers_go_on_and_the_body_is_held_until_the_question_passed() {
        let (mut t, mut host) = (turn(), chat_request("where is my order?"));
        assert_eq!(t.on_request_headers(&mut host, false), Flow::Continue);
        assert_eq!(t.on_request_body(&mut host, 10, false), Flow::Pause);
        let size = host.request_body.len();
        assert_eq!(t.on_request_body(&mut host, size, true), Flow::Continue);
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
        assert_eq!(ask(&mut t, &mut host), (Flow::Continue, Flow::Pause));
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

    /// A background Responses request would have its answer read back later, unchecked: refused
    /// before it reaches the model wherever an output check could stop the answer; streamed, or
    /// where no output check blocks (or every one passes on error), it goes on.
    #[test]
    fn a_background_answer_that_no_check_would_read_is_refused() {
        let policy = |checks: &str, tools: &str| {
            format!(
                r#"{{"default_agent": "a", "agents": {{"a": {{"published": "1", "versions": {{"1": {{
                  "live_checks": [{checks}]{tools}}}}}}}}}}}"#
            )
        };
        let rule = r#"{"name": "no-iban", "stage": "output", "kind": "matches_pattern",
                       "pattern": "NL\\d{2}", "max_match": 4}"#;
        let passing = r#"{"name": "polite", "stage": "output", "kind": "polite_tone",
                          "on_error": "pass"}"#;
        let judged = r#"{"name": "polite", "stage": "output", "kind": "polite_tone"}"#;
        let sampled = r#"{"name": "polite", "stage": "output", "kind": "polite_tone",
                          "mode": "background"}"#;
        let input = r#"{"name": "no-pw", "stage": "input", "kind": "not_contains",
                        "expected": "password"}"#;
        let tools = r#", "tool_checks": [{"name": "no-rival", "args": [{"pointer": "/to",
                        "not_contains": "@rival.example"}]}]"#;
        // A Responses request of `body` asked of a turn of `policy`: its host and both flows.
        let ask_responses = |policy: &str, body: serde_json::Value| {
            let mut t = Turn::new(Rc::new(Policy::from_json(policy.as_bytes()).unwrap()));
            let mut host = FakeHost::with_request(&[
                (":method", "POST"),
                (":path", "/v1/responses"),
                (":authority", "api.test"),
            ]);
            host.request_body = body.to_string().into_bytes();
            let flows = ask(&mut t, &mut host);
            (host, flows)
        };
        // A question its input rules refuse gets the agent's reply, background or not.
        let (host, _) = ask_responses(
            &policy(&format!("{input}, {rule}"), ""),
            serde_json::json!({"model": "gpt-4.1-mini", "input": "my password is x",
                               "background": true}),
        );
        assert_eq!(host.local_reply.as_ref().map(|r| r.status), Some(200));
        assert_eq!(host.local_reply_json()["status"], "incomplete");
        let cases = [
            (policy(rule, ""), true, false, true),
            (policy(rule, ""), false, false, false),
            (policy(rule, ""), true, true, false),
            (policy(passing, ""), true, false, false),
            (policy(judged, ""), true, false, true),
            (policy(sampled, ""), true, false, false),
            (policy(input, ""), true, false, false),
            (policy(input, tools), true, false, true),
        ];
        for (policy, background, stream, refused) in cases {
            let (host, flows) = ask_responses(
                &policy,
                serde_json::json!({"model": "gpt-4.1-mini", "input": "hello",
                                   "background": background, "stream": stream}),
            );
            let case = format!("{policy} background {background} stream {stream}");
            assert_eq!(host.local_reply.is_some(), refused, "{case}");
            if refused {
                assert_eq!(flows.1, Flow::Pause, "{case}");
                let reply = host.local_reply.as_ref().unwrap();
                assert_eq!(reply.status, 400, "{case}");
                let body = host.local_reply_json();
                assert_eq!(body["error"]["type"], "invalid_request_error", "{case}");
                assert!(body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("background: true"));
            } else {
                assert_eq!(flows.1, Flow::Continue, "{case}");
            }
        }
    }

    #[test]
    fn a_forbidden_answer_is_withheld_in_its_held_body_and_no_headers_are_ever_held() {
        let (mut t, mut host) = (turn(), chat_request("hello"));
        // The question's headers go on at once; its body is what is held.
        assert_eq!(ask(&mut t, &mut host), (Flow::Continue, Flow::Continue));
        // The seed's no-iban recovers: the model is asked again first, the answer's body held
        // (its headers went on, without their content-length).
        assert_eq!(
            answer(&mut t, &mut host, "NL91ABNA0417164300"),
            (Flow::Continue, Flow::Pause)
        );
        assert!(!host.response_headers.contains_key("content-length"));
        assert_eq!(host.callouts.len(), 1);
        assert!(host.callouts[0]
            .1
            .contains(&(":path".to_owned(), "/v1/retry".to_owned())));
        // The sidecar cannot retry: the first answer is withheld in its place.
        host.callout_answer = Some((None, Vec::new()));
        t.on_callout_response(&mut host, 1, 0);
        assert!(host.local_reply.is_none());
        assert_eq!(host.resumed, ["response"]);
        let body: serde_json::Value = serde_json::from_slice(&host.response_body).unwrap();
        assert_eq!(body["choices"][0]["finish_reason"], "content_filter");
        assert_eq!(body["usage"]["completion_tokens"], 4);
        assert!(!String::from_utf8_lossy(&host.response_body).contains("NL91"));
        // The headers went before the answer was decided: the stop is named in the results.
        assert!(!host.response_headers.contains_key("x-core-check"));
    }

    /// A policy with one output rule that withholds (no recovery), headers held or not.
    fn withholding(hold_headers: bool) -> Turn {
        let policy = format!(
            r#"{{"hold_answer_headers": {hold_headers}, "default_agent": "a", "agents": {{"a": {{
              "published": "1", "versions": {{"1": {{"live_checks": [{{"name": "no-iban",
              "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d{{2}}[A-Z]{{4}}\\d{{10}}",
              "max_match": 18}}]}}}}}}}}}}"#
        );
        Turn::new(Rc::new(Policy::from_json(policy.as_bytes()).unwrap()))
    }

    #[test]
    fn with_hold_answer_headers_a_withheld_answer_names_its_check_and_its_length() {
        let (mut t, mut host) = (withholding(true), chat_request("hello"));
        ask(&mut t, &mut host);
        // The headers are held with the body, watched until the body comes.
        assert_eq!(
            answer(&mut t, &mut host, "NL91ABNA0417164300"),
            (Flow::Pause, Flow::Continue)
        );
        assert!(!host.headers_watched, "the body came: the watch ended");
        assert!(host.local_reply.is_none());
        let body: serde_json::Value = serde_json::from_slice(&host.response_body).unwrap();
        assert_eq!(body["choices"][0]["finish_reason"], "content_filter");
        assert_eq!(
            host.response_headers
                .get("x-core-check")
                .map(String::as_str),
            Some(r#"stage=output, check="no-iban", code=output_check_failed"#)
        );
        assert_eq!(
            host.response_headers.get("content-length"),
            Some(&host.response_body.len().to_string())
        );
        assert!(host
            .response_headers
            .contains_key(livecheck_wire::TURN_ID_HEADER));

        // A clean answer goes on as it came, its headers with it and no X-Core-Check.
        let (mut t, mut host) = (withholding(true), chat_request("hello"));
        ask(&mut t, &mut host);
        assert_eq!(
            answer(&mut t, &mut host, "all fine"),
            (Flow::Pause, Flow::Continue)
        );
        assert_eq!(host.body_rewrites, 0);
        assert!(!host.response_headers.contains_key("x-core-check"));
        assert_eq!(
            host.response_headers.get("content-length"),
            Some(&host.response_body.len().to_string()),
            "a clean answer keeps its length"
        );

        // Without the setting the headers go at once, and a stop names no check in them.
        let (mut t, mut host) = (withholding(false), chat_request("hello"));
        ask(&mut t, &mut host);
        assert_eq!(
            answer(&mut t, &mut host, "NL91ABNA0417164300"),
            (Flow::Continue, Flow::Continue)
        );
        assert!(!host.headers_watched);
        assert!(!host.response_headers.contains_key("x-core-check"));
    }

    /// The dynamic module holds an answer's headers with Envoy's own `StopIteration`: a withheld
    /// answer names its check in them without `hold_answer_headers`, and nothing watches them.
    #[test]
    fn a_host_that_holds_headers_itself_names_the_stop_without_the_setting() {
        let (mut t, mut host) = (withholding(false), chat_request("hello"));
        host.holds_headers = true;
        ask(&mut t, &mut host);
        assert_eq!(
            answer(&mut t, &mut host, "NL91ABNA0417164300"),
            (Flow::Pause, Flow::Continue)
        );
        assert!(
            !host.headers_watched,
            "no timer watches headers Envoy holds itself"
        );
        assert_eq!(
            host.response_headers
                .get("x-core-check")
                .map(String::as_str),
            Some(r#"stage=output, check="no-iban", code=output_check_failed"#)
        );
        assert_eq!(
            host.response_headers.get("content-length"),
            Some(&host.response_body.len().to_string())
        );
    }

    /// An Envoy that gives no body behind held headers: a tick let them go, so they reached the
    /// caller as they were, and the stop is decided as for headers that went at once.
    #[test]
    fn held_headers_a_tick_let_go_are_not_written_after_they_went() {
        let (mut t, mut host) = (withholding(true), chat_request("hello"));
        ask(&mut t, &mut host);
        host.headers_released = true;
        assert_eq!(
            answer(&mut t, &mut host, "NL91ABNA0417164300"),
            (Flow::Pause, Flow::Continue)
        );
        let body: serde_json::Value = serde_json::from_slice(&host.response_body).unwrap();
        assert_eq!(body["choices"][0]["finish_reason"], "content_filter");
        assert!(!host.response_headers.contains_key("x-core-check"));
        assert!(!host.response_headers.contains_key("content-length"));
    }

    #[test]
    fn an_answer_that_cannot_be_read_is_decided_while_its_headers_are_still_held() {
        let (mut t, mut host) = (turn(), chat_request("hello"));
        ask(&mut t, &mut host);
        host.response_headers.insert(":status".into(), "200".into());
        host.response_headers
            .insert("content-type".into(), "application/json".into());
        host.response_headers
            .insert("content-encoding".into(), "gzip".into());
        // Every output check errors on an unreadable answer: withheld at once, whole.
        assert_eq!(t.on_response_headers(&mut host, false), Flow::Pause);
        let reply = host.local_reply.take().unwrap();
        assert_eq!(reply.status, 200);
        assert!(reply.headers["x-core-check"].contains("check_errored"));
        let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(body["choices"][0]["finish_reason"], "content_filter");
    }

    #[test]
    fn an_answer_before_the_question_was_sent_is_refused_unless_an_error() {
        for (status, refused) in [("200", true), ("401", false)] {
            let (mut t, mut host) = (turn(), chat_request("hello"));
            assert_eq!(t.on_request_headers(&mut host, false), Flow::Continue);
            host.response_headers
                .insert(":status".into(), status.into());
            let flow = t.on_response_headers(&mut host, false);
            assert_eq!(host.local_reply.is_some(), refused, "{status}");
            assert_eq!(flow, if refused { Flow::Pause } else { Flow::Continue });
            // The question's body, if it still comes, passes untouched: the turn is over.
            let size = host.request_body.len();
            assert_eq!(t.on_request_body(&mut host, size, true), Flow::Continue);
        }
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
