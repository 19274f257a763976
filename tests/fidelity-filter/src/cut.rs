//! The `cut` case: how to end a streamed answer early (livecheck issue 4, item 4).
//!
//! Request headers: `x-fidelity-cut-vendor: anthropic|chat|responses` and
//! `x-fidelity-cut-how: <mechanism>` (optional `x-fidelity-cut-delay-ms`, default 50, for the
//! `*_timer` mechanisms). The first response body chunk that contains `CUT_HERE` is replaced by the
//! vendor's closing events; then the mechanism decides what happens to the stream:
//!
//! - `drop`: every later chunk is replaced by nothing (Continue); the upstream runs to its end.
//! - `local_reply`, `close_response`, `close_request`: that host call right after writing the
//!   closing events, in the same callback.
//! - `local_reply_next`, `close_response_next`, `close_request_next`: the host call on the next
//!   upstream chunk after the cut (which is dropped).
//! - `local_reply_timer`, `close_response_timer`, `close_request_timer`: the host call from the root
//!   context's tick, `x-fidelity-cut-delay-ms` after the cut (via `proxy_set_effective_context`);
//!   chunks in between are dropped.
//!
//! - `pad`, `pad_<mechanism>`: at response headers the filter sets `content-length:
//!   <x-fidelity-cut-pad-to>` (default 65536), so Envoy frames the body by length instead of
//!   chunking; on the cut (or at the upstream's end) the closing events are followed by SSE comment
//!   lines up to exactly that length, so the caller's response is complete; then `<mechanism>` as above
//!   (`pad` alone drops the rest). The framing also sets `connection: close` unless
//!   `x-fidelity-cut-keep-alive: 1`.
//!
//! Each host call's status is logged (`fidelity-filter cut: ...`).

use std::cell::RefCell;
use std::time::{Duration, SystemTime};

use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, LogLevel, MapType};

use crate::raw;

/// The marker text that triggers the cut.
pub const MARKER: &[u8] = b"CUT_HERE";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    Anthropic,
    Chat,
    Responses,
}

impl Vendor {
    pub fn parse(name: &str) -> Option<Vendor> {
        Some(match name {
            "anthropic" => Vendor::Anthropic,
            "chat" => Vendor::Chat,
            "responses" => Vendor::Responses,
            _ => return None,
        })
    }

    /// The events that end a turn in this vendor's format, stopped for safety.
    pub fn closing_events(self) -> &'static str {
        match self {
            Vendor::Anthropic => concat!(
                "event: content_block_stop\n",
                "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
                "event: message_delta\n",
                "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"refusal\",",
                "\"stop_sequence\":null},\"usage\":{\"output_tokens\":7}}\n\n",
                "event: message_stop\n",
                "data: {\"type\":\"message_stop\"}\n\n",
            ),
            Vendor::Chat => concat!(
                "data: {\"id\":\"chatcmpl-cut\",\"object\":\"chat.completion.chunk\",\"created\":1,",
                "\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},",
                "\"finish_reason\":\"content_filter\"}]}\n\n",
                "data: [DONE]\n\n",
            ),
            Vendor::Responses => concat!(
                "event: response.incomplete\n",
                "data: {\"type\":\"response.incomplete\",\"sequence_number\":100000,\"response\":{",
                "\"id\":\"resp_cut\",\"object\":\"response\",\"created_at\":1,\"model\":\"gpt-4o\",",
                "\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"content_filter\"},",
                "\"output\":[],\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[],",
                "\"usage\":{\"input_tokens\":1,\"output_tokens\":7,\"total_tokens\":8,",
                "\"input_tokens_details\":{\"cached_tokens\":0},",
                "\"output_tokens_details\":{\"reasoning_tokens\":0}}}}\n\n",
            ),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    LocalReply,
    CloseResponse,
    CloseRequest,
}

impl Call {
    fn apply(self) -> &'static str {
        match self {
            Call::LocalReply => {
                raw::send_local_response(500, &[("x-fidelity-local", "cut")], b"cut")
            }
            Call::CloseResponse => raw::close_stream(1),
            Call::CloseRequest => raw::close_stream(0),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    Never,
    Now,
    NextChunk,
    Timer,
}

#[derive(Clone, Copy, Debug)]
pub struct How {
    pub call: Option<Call>,
    pub when: When,
    /// Frame the response by a padded content-length.
    pub pad: bool,
}

impl How {
    pub fn parse(name: &str) -> Option<How> {
        if name == "drop" {
            return Some(How {
                call: None,
                when: When::Never,
                pad: false,
            });
        }
        if name == "pad" {
            return Some(How {
                call: None,
                when: When::Never,
                pad: true,
            });
        }
        if let Some(rest) = name.strip_prefix("pad_") {
            return How::parse(rest).map(|how| How { pad: true, ..how });
        }
        let (call, when) = match name.rsplit_once('_') {
            Some((call, "next")) => (call, When::NextChunk),
            Some((call, "timer")) => (call, When::Timer),
            _ => (name, When::Now),
        };
        let call = match call {
            "local_reply" => Call::LocalReply,
            "close_response" => Call::CloseResponse,
            "close_request" => Call::CloseRequest,
            _ => return None,
        };
        Some(How {
            call: Some(call),
            when,
            pad: false,
        })
    }
}

/// The per-stream state of the `cut` case.
#[derive(Debug)]
pub struct Cut {
    pub vendor: Vendor,
    pub how: How,
    pub delay: Duration,
    cut: bool,
    called: bool,
    /// With `pad`: the content-length promised, and the bytes sent so far.
    pub pad_to: usize,
    sent: usize,
    /// With `pad`: leave out `connection: close` (`x-fidelity-cut-keep-alive: 1`), to show why it is needed.
    pub keep_alive: bool,
}

/// SSE comment lines (and at most one blank line) of exactly `n` bytes.
fn padding(n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    while n - out.len() >= 2 {
        let line = (n - out.len()).min(1024);
        out.push(b':');
        out.resize(out.len() + line - 2, b'p');
        out.push(b'\n');
    }
    if out.len() < n {
        out.push(b'\n');
    }
    out
}

fn log(message: &str) {
    let _ = hostcalls::log(LogLevel::Info, &format!("fidelity-filter cut: {message}"));
}

impl Cut {
    pub fn new(vendor: Vendor, how: How, delay: Duration) -> Cut {
        Cut {
            vendor,
            how,
            delay,
            cut: false,
            called: false,
            pad_to: 65536,
            sent: 0,
            keep_alive: false,
        }
    }

    /// Response headers: with `pad`, frame the body by length.
    pub fn on_headers(&mut self) {
        if self.how.pad {
            let length = self.pad_to.to_string();
            let te =
                hostcalls::set_map_value(MapType::HttpResponseHeaders, "transfer-encoding", None);
            let cl = hostcalls::set_map_value(
                MapType::HttpResponseHeaders,
                "content-length",
                Some(&length),
            );
            // The reset that stops the upstream closes the connection: tell the caller not to reuse it.
            let close = if self.keep_alive {
                None
            } else {
                Some(hostcalls::set_map_value(
                    MapType::HttpResponseHeaders,
                    "connection",
                    Some("close"),
                ))
            };
            log(&format!(
                "content-length {length}: {cl:?} (transfer-encoding removed: {te:?}, connection: close {close:?})"
            ));
        }
    }

    fn padded(&self, events: &[u8]) -> Vec<u8> {
        let mut out = events.to_vec();
        if self.how.pad {
            out.extend(padding(
                self.pad_to.saturating_sub(self.sent + events.len()),
            ));
        }
        out
    }

    /// One response body callback. Always Continue: the chunk is rewritten in place.
    pub fn on_body(&mut self, context_id: u32, body_size: usize, end_of_stream: bool) {
        if self.cut {
            raw::set_buffer(BufferType::HttpResponseBody, 0, body_size, b"");
            if self.how.when == When::NextChunk && !self.called {
                self.call("next chunk");
            }
            if end_of_stream {
                log("upstream ended after the cut");
            }
            return;
        }
        let body = hostcalls::get_buffer(BufferType::HttpResponseBody, 0, body_size)
            .ok()
            .flatten()
            .unwrap_or_default();
        if !body.windows(MARKER.len()).any(|w| w == MARKER) {
            if self.how.pad && end_of_stream {
                let out = self.padded(&body);
                raw::set_buffer(BufferType::HttpResponseBody, 0, body_size, &out);
            }
            self.sent += body.len();
            return;
        }
        self.cut = true;
        let out = self.padded(self.vendor.closing_events().as_bytes());
        let status = raw::set_buffer(BufferType::HttpResponseBody, 0, body_size, &out);
        log(&format!("closing events written: {status}"));
        match self.how.when {
            When::Now => self.call("same chunk"),
            When::Timer => schedule(context_id, self.delay, self.how.call),
            When::Never | When::NextChunk => {}
        }
    }

    fn call(&mut self, moment: &str) {
        self.called = true;
        if let Some(call) = self.how.call {
            let status = call.apply();
            log(&format!("{call:?} on the {moment}: {status}"));
        }
    }
}

struct Pending {
    context_id: u32,
    due: SystemTime,
    call: Call,
}

thread_local! {
    static PENDING: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) };
}

fn now() -> SystemTime {
    hostcalls::get_current_time().unwrap_or(SystemTime::UNIX_EPOCH)
}

fn schedule(context_id: u32, delay: Duration, call: Option<Call>) {
    let Some(call) = call else { return };
    PENDING.with(|p| {
        p.borrow_mut().push(Pending {
            context_id,
            due: now() + delay,
            call,
        })
    });
    let status = hostcalls::set_tick_period(Duration::from_millis(10));
    log(&format!("timer scheduled in {delay:?}: {status:?}"));
}

/// The root context's tick: run the due calls in their stream's context.
pub fn on_tick() {
    let now = now();
    let due: Vec<Pending> = PENDING.with(|p| {
        let mut p = p.borrow_mut();
        let (due, later) = p.drain(..).partition(|x| x.due <= now);
        *p = later;
        due
    });
    for pending in due {
        let effective = hostcalls::set_effective_context(pending.context_id);
        let status = pending.call.apply();
        log(&format!(
            "{:?} from the tick: effective={effective:?} status={status}",
            pending.call
        ));
    }
    if PENDING.with(|p| p.borrow().is_empty()) {
        let _ = hostcalls::set_tick_period(Duration::ZERO);
    }
}
