//! One HTTP stream: each hook becomes a call on the stream's [`Turn`], and [`NativeHost`] is the
//! [`Host`] it runs through. Translation, plus the one thing this ABI allows that proxy-wasm's does
//! not: when the turn ends an answer early (a cut, a denied call, a withheld round), the bytes it
//! wrote go to the caller with the end of the stream (`send_data(…, end_stream)`), so every client
//! sees a response that ended normally and Envoy resets the upstream (the model stops).

use std::sync::Arc;

use livecheck::host::{Flow, Host, LogLevel};
use livecheck::outbox::Job;
use livecheck::turn::Turn;

use crate::abi::{
    BodyStatus, HeadersStatus, TrailersStatus, BODY_CONTINUE, BODY_STOP_ITERATION_AND_BUFFER,
    BODY_STOP_ITERATION_NO_BUFFER, BUFFERED_REQUEST_BODY, BUFFERED_RESPONSE_BODY, HEADERS_CONTINUE,
    HEADERS_STOP_ITERATION, RECEIVED_REQUEST_BODY, RECEIVED_RESPONSE_BODY, REQUEST_HEADER,
    RESPONSE_HEADER, TRAILERS_CONTINUE, TRAILERS_STOP_ITERATION,
};
use crate::config::Config;
use crate::envoy::{self, Filter};
use crate::os::{now_unix_millis, random};

/// The request header that makes a fault-injection build panic (`--features faults`, never shipped):
/// `panic` in the request's headers hook, `panic-answer` in the answer's first body hook.
#[cfg(feature = "faults")]
const FAULT_HEADER: &str = "x-livecheck-fault";

/// Panics where the request's fault header says so (fault-injection builds only).
#[cfg(feature = "faults")]
fn fault(host: &NativeHost, at: &str) {
    if host.request_header(FAULT_HEADER).as_deref() == Some(at) {
        #[allow(clippy::panic)]
        {
            panic!("fault injected");
        }
    }
}

/// A local reply the turn asked for.
#[derive(Debug)]
pub struct Reply {
    pub status: u32,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// What a hook asked of Envoy that can re-enter this filter (a local reply runs through its encoder
/// hooks, letting a held stream go on can complete it): done once the stream is let go
/// (`envoy::with_stream`), in the order asked.
#[derive(Debug)]
pub enum After {
    Reply(Reply),
    ContinueDecoding,
    ContinueEncoding,
    /// Bytes to the caller that end its response; they pass this filter's encoder hooks untouched.
    End(Vec<u8>),
    Reset,
}

/// Which body Envoy hands the current hook as its received chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Request,
    Response,
}

pub struct Stream {
    turn: Option<Turn>,
    host: NativeHost,
    /// A hook panicked: the turn is gone and the stream failed closed.
    failed: bool,
}

impl Stream {
    pub fn new(config: Arc<Config>, filter: Filter) -> Self {
        let turn = config.policy().map(Turn::new);
        Self {
            turn,
            host: NativeHost {
                filter,
                config,
                receiving: None,
                callout: None,
                end_asked: false,
                ended: false,
                resume_request: false,
                resume_response: false,
                after: Vec::new(),
            },
            failed: false,
        }
    }

    pub fn request_headers(&mut self, end_of_stream: bool) -> HeadersStatus {
        #[cfg(feature = "faults")]
        fault(&self.host, "panic");
        let flow = match &mut self.turn {
            Some(turn) => turn.on_request_headers(&mut self.host, end_of_stream),
            None if self.failed => Flow::Pause,
            None => {
                self.host.send_local_reply(
                    503,
                    &[("content-type", "text/plain"), ("x-should-retry", "false")],
                    b"livecheck has no valid configuration\n",
                );
                Flow::Pause
            }
        };
        self.host.after_hook();
        headers_status(flow)
    }

    pub fn request_body(&mut self, end_of_stream: bool) -> BodyStatus {
        self.host.receiving = Some(Side::Request);
        let size = self.host.body_len(Side::Request);
        let flow = self.turn.as_mut().map_or(Flow::Continue, |turn| {
            turn.on_request_body(&mut self.host, size, end_of_stream)
        });
        self.host.after_hook();
        self.host.receiving = None;
        body_status(flow)
    }

    pub fn request_trailers(&mut self) -> TrailersStatus {
        TRAILERS_CONTINUE
    }

    pub fn response_headers(&mut self, end_of_stream: bool) -> HeadersStatus {
        if self.host.ended {
            return HEADERS_STOP_ITERATION;
        }
        let flow = self.turn.as_mut().map_or(Flow::Continue, |turn| {
            turn.on_response_headers(&mut self.host, end_of_stream)
        });
        self.host.after_hook();
        headers_status(flow)
    }

    pub fn response_body(&mut self, end_of_stream: bool) -> BodyStatus {
        if self.host.ended {
            // The caller's response already ended: what the upstream still sends is dropped.
            let received = self.host.filter.body_size(RECEIVED_RESPONSE_BODY);
            self.host
                .filter
                .drain_body(RECEIVED_RESPONSE_BODY, received);
            return BODY_STOP_ITERATION_NO_BUFFER;
        }
        #[cfg(feature = "faults")]
        fault(&self.host, "panic-answer");
        self.host.receiving = Some(Side::Response);
        let size = self.host.body_len(Side::Response);
        let flow = self.turn.as_mut().map_or(Flow::Continue, |turn| {
            turn.on_response_body(&mut self.host, size, end_of_stream)
        });
        let ended = self.host.after_hook();
        self.host.receiving = None;
        if ended {
            BODY_STOP_ITERATION_NO_BUFFER
        } else {
            body_status(flow)
        }
    }

    pub fn response_trailers(&mut self) -> TrailersStatus {
        if self.host.ended {
            TRAILERS_STOP_ITERATION
        } else {
            TRAILERS_CONTINUE
        }
    }

    pub fn callout_done(&mut self, id: u64, status: Option<u16>, body: Vec<u8>) {
        let Ok(token) = u32::try_from(id) else {
            return;
        };
        let size = body.len();
        self.host.callout = Some((status, body));
        if let Some(turn) = &mut self.turn {
            turn.on_callout_response(&mut self.host, token, size);
        }
        self.host.callout = None;
        self.host.after_hook();
    }

    /// The stream is over (Envoy runs this before the access logs): the turn's report leaves.
    pub fn complete(&mut self) {
        if let Some(turn) = &mut self.turn {
            turn.on_done(&mut self.host);
        }
    }

    /// A hook panicked: the turn is dropped and the stream fails closed, with a 500 while the
    /// response has not begun (Envoy resets a stream whose response already began instead).
    pub fn fail(&mut self) {
        self.failed = true;
        self.turn = None;
        self.host.end_asked = false;
        self.host.after.clear();
        self.host.after.push(After::Reply(Reply {
            status: 500,
            headers: vec![
                ("content-type".to_owned(), "text/plain".to_owned()),
                ("x-should-retry".to_owned(), "false".to_owned()),
            ],
            body: b"livecheck failed on this turn\n".to_vec(),
        }));
    }

    /// What to ask of Envoy once the stream is let go, with the filter to ask it on.
    pub fn take_after(&mut self) -> (Filter, Vec<After>) {
        (self.host.filter, std::mem::take(&mut self.host.after))
    }
}

fn headers_status(flow: Flow) -> HeadersStatus {
    match flow {
        Flow::Continue => HEADERS_CONTINUE,
        Flow::Pause => HEADERS_STOP_ITERATION,
    }
}

fn body_status(flow: Flow) -> BodyStatus {
    match flow {
        Flow::Continue => BODY_CONTINUE,
        Flow::Pause => BODY_STOP_ITERATION_AND_BUFFER,
    }
}

/// [`Host`] over the dynamic-modules ABI. Every refusal by Envoy becomes `None`/`false`.
pub struct NativeHost {
    filter: Filter,
    config: Arc<Config>,
    /// The side whose body hook runs now: its received chunk follows what Envoy buffered.
    receiving: Option<Side>,
    /// The answer of the callout whose hook runs now.
    callout: Option<(Option<u16>, Vec<u8>)>,
    /// The turn ended the answer early in this hook (`close_response_soon`, `close_response`).
    end_asked: bool,
    /// The response to the caller has ended: the module sent its end of stream.
    ended: bool,
    resume_request: bool,
    resume_response: bool,
    after: Vec<After>,
}

impl NativeHost {
    /// The body so far on `side`: what Envoy buffered, then the chunk this hook received.
    fn body_len(&self, side: Side) -> usize {
        let (buffered, received) = body_types(side);
        let mut len = self.filter.body_size(buffered);
        if self.receiving == Some(side) {
            len = len.saturating_add(self.filter.body_size(received));
        }
        len
    }

    fn body(&self, side: Side, size: usize) -> Option<Vec<u8>> {
        let (buffered, received) = body_types(side);
        let mut out = Vec::with_capacity(size.min(self.body_len(side)));
        if !self.filter.read_body(buffered, &mut out) {
            return None;
        }
        if self.receiving == Some(side) && !self.filter.read_body(received, &mut out) {
            return None;
        }
        out.truncate(size);
        Some(out)
    }

    /// Empties the response body so far (buffered and received); `false` when Envoy refused.
    fn drain_response(&self) -> bool {
        let buffered = self.filter.body_size(BUFFERED_RESPONSE_BODY);
        let mut drained = buffered == 0 || self.filter.drain_body(BUFFERED_RESPONSE_BODY, buffered);
        if self.receiving == Some(Side::Response) {
            let received = self.filter.body_size(RECEIVED_RESPONSE_BODY);
            drained &= received == 0 || self.filter.drain_body(RECEIVED_RESPONSE_BODY, received);
        }
        drained
    }

    /// Acts on what the turn asked during the hook: an early end goes out with what the turn left
    /// in the body; held streams go on. `true` when the response ends in this hook.
    fn after_hook(&mut self) -> bool {
        if std::mem::take(&mut self.resume_request) {
            self.after.push(After::ContinueDecoding);
        }
        let resume = std::mem::take(&mut self.resume_response);
        if std::mem::take(&mut self.end_asked) && !self.ended {
            self.ended = true;
            let out = self.body(Side::Response, usize::MAX).unwrap_or_default();
            if self.drain_response() {
                self.after.push(After::End(out));
            } else {
                // Envoy would not let the body go: the stream is reset, as the wasm filter does.
                self.after.push(After::Reset);
            }
            return true;
        }
        if resume {
            self.after.push(After::ContinueEncoding);
        }
        false
    }
}

fn body_types(side: Side) -> (u32, u32) {
    match side {
        Side::Request => (BUFFERED_REQUEST_BODY, RECEIVED_REQUEST_BODY),
        Side::Response => (BUFFERED_RESPONSE_BODY, RECEIVED_RESPONSE_BODY),
    }
}

fn text(bytes: Option<Vec<u8>>) -> Option<String> {
    bytes.and_then(|b| String::from_utf8(b).ok())
}

impl Host for NativeHost {
    fn request_header(&self, name: &str) -> Option<String> {
        text(self.filter.header(REQUEST_HEADER, name))
    }

    fn set_request_header(&mut self, name: &str, value: Option<&str>) {
        self.filter.set_header(REQUEST_HEADER, name, value);
    }

    fn response_header(&self, name: &str) -> Option<String> {
        text(self.filter.header(RESPONSE_HEADER, name))
    }

    fn set_response_header(&mut self, name: &str, value: Option<&str>) {
        self.filter.set_header(RESPONSE_HEADER, name, value);
    }

    fn request_body(&self, size: usize) -> Option<Vec<u8>> {
        self.body(Side::Request, size)
    }

    fn response_body(&self, size: usize) -> Option<Vec<u8>> {
        self.body(Side::Response, size)
    }

    fn replace_response_body(&mut self, _size: usize, body: &[u8]) -> bool {
        if !self.drain_response() {
            return false;
        }
        let target = if self.receiving == Some(Side::Response) {
            RECEIVED_RESPONSE_BODY
        } else {
            BUFFERED_RESPONSE_BODY
        };
        body.is_empty() || self.filter.append_body(target, body)
    }

    fn send_local_reply(&mut self, status: u32, headers: &[(&str, &str)], body: &[u8]) {
        self.after.push(After::Reply(Reply {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.to_vec(),
        }));
    }

    fn close_response(&mut self) {
        self.end_asked = true;
    }

    fn close_response_soon(&mut self) {
        self.end_asked = true;
    }

    fn release_response_headers_soon(&mut self) {
        // Held response headers are Envoy's own `StopIteration` here: the body always follows.
    }

    fn holds_response_headers(&self) -> bool {
        true
    }

    fn ends_response_cleanly(&self) -> bool {
        true
    }

    fn response_headers_released(&mut self) -> bool {
        false
    }

    fn increment_counter(&mut self, name: &str) {
        if let Some(id) = self.config.counter(name) {
            self.filter.increment(id, 1);
        }
    }

    fn dispatch_callout(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Option<u32> {
        self.filter
            .callout(cluster, headers, body, timeout_ms)
            .and_then(|id| u32::try_from(id).ok())
    }

    fn callout_status(&self) -> Option<u16> {
        self.callout.as_ref().and_then(|(status, _)| *status)
    }

    fn callout_body(&self, size: usize) -> Option<Vec<u8>> {
        let (_, body) = self.callout.as_ref()?;
        Some(body.get(..size).unwrap_or(body).to_vec())
    }

    fn deliver(&mut self, job: Job) {
        if !self.config.deliver(job) {
            self.increment_counter("livecheck.reports.dropped");
        }
    }

    fn resume_request(&mut self) {
        self.resume_request = true;
    }

    fn resume_response(&mut self) {
        self.resume_response = true;
    }

    fn log(&mut self, level: LogLevel, message: &str) {
        envoy::log(envoy::log_level(level), message);
    }

    fn now_unix_millis(&self) -> u64 {
        now_unix_millis()
    }

    fn random(&mut self) -> u64 {
        random()
    }
}
