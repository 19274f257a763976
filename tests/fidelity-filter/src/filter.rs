//! The root and HTTP contexts. See `tests/fidelity/README.md` for the cases and their headers.

use std::time::Duration;

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, BufferType, ContextType, LogLevel, MapType, MetricType};

use crate::cut::{self, Cut};
use crate::raw;

/// The callout cluster every Envoy config for this filter defines.
const CALLOUT_CLUSTER: &str = "fidelity_callout";

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root) });
}}

struct Root;

impl Context for Root {}

impl RootContext for Root {
    fn on_vm_start(&mut self, _vm_configuration_size: usize) -> bool {
        let _ = hostcalls::log(LogLevel::Info, "fidelity-filter started");
        true
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Filter {
            context_id,
            ..Filter::default()
        }))
    }

    fn on_tick(&mut self) {
        cut::on_tick();
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Case {
    /// No header: pass everything through untouched.
    #[default]
    None,
    /// Pause every response body chunk; at end of stream replace the body with the record.
    BodySizes,
    /// Pause the first response chunk only; at end of stream append `;sizes=<record>`.
    PauseThenContinue,
    /// Apply `x-fidelity-set: <start>:<size>:<data>` to every response chunk.
    SetBody,
    /// Pause response headers, buffer the body, at end of stream set a header and the body.
    HeadersPause,
    /// Pause every request body chunk; at end of stream replace the request body with the record.
    RequestBodySizes,
    /// Pause request headers, read the body, at end of stream add a request header.
    RequestHeadersPause,
    /// Local reply from request headers; the response callbacks mark what they saw.
    LocalReply,
    /// Local reply from request headers, then a second one from the response headers callback.
    LocalReplyTwice,
    /// Local reply from the response headers callback (upstream answered, nothing sent yet).
    LocalReplyInResponseHeaders,
    /// Local reply from the second response body chunk (headers already sent).
    LocalReplyAfterHeaders,
    /// `dispatch_http_call` shaped by request headers; the result comes back as a local reply.
    Callout,
    /// Increment the counter and set the gauge named by `x-fidelity-metric`.
    Metrics,
    /// Read a request header from the response headers callback; report the status.
    RequestHeaderInResponse,
    /// Read a request header from the request body callback after headers continued.
    RequestHeaderInBody,
    /// Trap in the request headers callback.
    Panic,
    /// Read the properties listed in `x-fidelity-properties`.
    Properties,
    /// Shared data round trip under the key `x-fidelity-key`.
    SharedData,
    /// The VM's environment (WASI `environ_get`, as `std::env::vars` reads it), sorted.
    Environment,
    /// End a streamed answer early at a `CUT_HERE` chunk (see `cut.rs`).
    Cut,
    /// Response headers continue; the body is held to its end, a callout goes out, and its answer
    /// replaces the held body (`replaced:<callout body>`) before the response resumes.
    BodyAfterCallout,
    /// Request headers continue; the body is held to its end, a callout goes out, and its answer
    /// resumes the request.
    RequestBodyAfterCallout,
}

impl Case {
    fn parse(name: &str) -> Option<Case> {
        Some(match name {
            "body_sizes" => Case::BodySizes,
            "pause_then_continue" => Case::PauseThenContinue,
            "set_body" => Case::SetBody,
            "headers_pause" => Case::HeadersPause,
            "request_body_sizes" => Case::RequestBodySizes,
            "request_headers_pause" => Case::RequestHeadersPause,
            "local_reply" => Case::LocalReply,
            "local_reply_twice" => Case::LocalReplyTwice,
            "local_reply_in_response_headers" => Case::LocalReplyInResponseHeaders,
            "local_reply_after_headers" => Case::LocalReplyAfterHeaders,
            "callout" => Case::Callout,
            "metrics" => Case::Metrics,
            "request_header_in_response" => Case::RequestHeaderInResponse,
            "request_header_in_body" => Case::RequestHeaderInBody,
            "panic" => Case::Panic,
            "properties" => Case::Properties,
            "shared_data" => Case::SharedData,
            "environment" => Case::Environment,
            "cut" => Case::Cut,
            "body_after_callout" => Case::BodyAfterCallout,
            "request_body_after_callout" => Case::RequestBodyAfterCallout,
            _ => return None,
        })
    }
}

/// A `x-fidelity-set` edit: offsets are numbers or `end` (the current `body_size`).
#[derive(Clone, Debug)]
struct SetOp {
    start: Offset,
    size: Offset,
    data: String,
}

#[derive(Clone, Copy, Debug)]
enum Offset {
    At(usize),
    End,
}

impl Offset {
    fn parse(text: &str) -> Option<Offset> {
        if text == "end" {
            Some(Offset::End)
        } else {
            text.parse().ok().map(Offset::At)
        }
    }

    fn resolve(self, body_size: usize) -> usize {
        match self {
            Offset::At(n) => n,
            Offset::End => body_size,
        }
    }
}

impl SetOp {
    fn parse(text: &str) -> Option<SetOp> {
        let mut parts = text.splitn(3, ':');
        let start = Offset::parse(parts.next()?)?;
        let size = Offset::parse(parts.next()?)?;
        let data = parts.next()?.to_owned();
        Some(SetOp { start, size, data })
    }
}

#[derive(Default)]
struct Filter {
    case: Case,
    /// Every body callback of the phase the case watches, as `body_size[:eos]`.
    record: Vec<String>,
    set_op: Option<SetOp>,
    response_chunks: usize,
    callout_token: Option<u32>,
    /// `x-fidelity-resume-callout`, read in the request phase.
    resume_callout: Option<String>,
    context_id: u32,
    /// The `cut` case's state.
    cut: Option<Cut>,
    /// The body size held when the callout went out (the `*_after_callout` cases).
    held: usize,
}

impl Filter {
    fn header(&self, name: &str) -> Option<String> {
        hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name)
            .ok()
            .flatten()
            .map(|v| String::from_utf8_lossy(&v).into_owned())
    }

    fn note(&mut self, body_size: usize, end_of_stream: bool) {
        self.record.push(if end_of_stream {
            format!("{body_size}:eos")
        } else {
            body_size.to_string()
        });
    }

    fn record_text(&self) -> String {
        self.record.join(",")
    }

    fn reply(&self, status: u32, body: &str) {
        let _ = raw::send_local_response(status, &[("x-fidelity-local", "yes")], body.as_bytes());
    }

    fn dispatch_callout(&mut self) -> Action {
        let cluster = self
            .header("x-fidelity-callout-cluster")
            .unwrap_or_else(|| CALLOUT_CLUSTER.to_owned());
        let path = self
            .header("x-fidelity-callout-path")
            .unwrap_or_else(|| "/callout".to_owned());
        let omit = self.header("x-fidelity-callout-omit").unwrap_or_default();
        let timeout_ms = self
            .header("x-fidelity-callout-timeout-ms")
            .and_then(|t| t.parse().ok())
            .unwrap_or(1000);
        let mut headers = vec![
            (":method", "GET"),
            (":path", path.as_str()),
            (":authority", "callout.fidelity"),
        ];
        headers.retain(|(name, _)| !omit.split(',').any(|o| o.trim() == *name));
        match hostcalls::dispatch_http_call(
            &cluster,
            headers,
            None,
            vec![],
            Duration::from_millis(timeout_ms),
        ) {
            Ok(token) => {
                self.callout_token = Some(token);
                Action::Pause
            }
            Err(status) => {
                self.reply(200, &format!("dispatch={status:?}"));
                Action::Pause
            }
        }
    }
}

impl Filter {
    /// Holds a body to its end, then sends the resume callout (the `*_after_callout` cases).
    fn hold_then_callout(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !end_of_stream {
            return Action::Pause;
        }
        self.held = body_size;
        if self.send_resume_callout() {
            Action::Pause
        } else {
            Action::Continue
        }
    }

    /// Sends the `x-fidelity-resume-callout` callout; `false` when there is none or it failed.
    fn send_resume_callout(&mut self) -> bool {
        let Some(path) = self.resume_callout.clone() else {
            return false;
        };
        match hostcalls::dispatch_http_call(
            CALLOUT_CLUSTER,
            vec![
                (":method", "GET"),
                (":path", path.as_str()),
                (":authority", "callout.fidelity"),
            ],
            None,
            vec![],
            Duration::from_secs(5),
        ) {
            Ok(token) => {
                self.callout_token = Some(token);
                true
            }
            Err(_) => false,
        }
    }
}

impl Context for Filter {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        _num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        if self.callout_token != Some(token_id) {
            let _ = hostcalls::log(LogLevel::Warn, "fidelity-filter: unknown callout token");
            return;
        }
        match self.case {
            Case::HeadersPause => {
                let _ = hostcalls::resume_http_response();
            }
            Case::BodyAfterCallout => {
                let answer = hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size)
                    .ok()
                    .flatten()
                    .unwrap_or_default();
                let text = format!("replaced:{}", String::from_utf8_lossy(&answer));
                let status =
                    raw::set_buffer(BufferType::HttpResponseBody, 0, self.held, text.as_bytes());
                let _ = hostcalls::log(LogLevel::Info, &format!("set held body: {status}"));
                let _ = hostcalls::resume_http_response();
            }
            Case::RequestBodyAfterCallout => {
                let _ = hostcalls::resume_http_request();
            }
            _ => {
                // Raw: after a failed callout Envoy answers BadArgument, on which the SDK panics.
                let status = match raw::get_header(MapType::HttpCallResponseHeaders, ":status") {
                    ("Ok", Some(status)) => status,
                    (host_status, _) => format!("<{host_status}>"),
                };
                let body = hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size)
                    .ok()
                    .flatten()
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                self.reply(
                    200,
                    &format!("dispatch=Ok;status={status};body_size={body_size};body={body}"),
                );
            }
        }
    }
}

impl HttpContext for Filter {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let Some(name) = self.header("x-fidelity-case") else {
            return Action::Continue;
        };
        let Some(case) = Case::parse(&name) else {
            self.reply(400, &format!("unknown case {name}"));
            return Action::Pause;
        };
        self.case = case;
        match case {
            Case::SetBody => {
                self.set_op = self
                    .header("x-fidelity-set")
                    .as_deref()
                    .and_then(SetOp::parse);
                if self.set_op.is_none() {
                    self.reply(400, "x-fidelity-set must be <start>:<size>:<data>");
                    return Action::Pause;
                }
                Action::Continue
            }
            Case::RequestHeadersPause => Action::Pause,
            Case::HeadersPause | Case::BodyAfterCallout | Case::RequestBodyAfterCallout => {
                self.resume_callout = self.header("x-fidelity-resume-callout");
                Action::Continue
            }
            Case::LocalReply | Case::LocalReplyTwice => {
                self.reply(403, "local reply");
                Action::Pause
            }
            Case::Callout => self.dispatch_callout(),
            Case::Cut => {
                let vendor = self
                    .header("x-fidelity-cut-vendor")
                    .as_deref()
                    .and_then(cut::Vendor::parse);
                let how = self
                    .header("x-fidelity-cut-how")
                    .as_deref()
                    .and_then(cut::How::parse);
                let delay = self
                    .header("x-fidelity-cut-delay-ms")
                    .and_then(|d| d.parse().ok())
                    .unwrap_or(50);
                match (vendor, how) {
                    (Some(vendor), Some(how)) => {
                        let mut cut = Cut::new(vendor, how, Duration::from_millis(delay));
                        if let Some(n) = self
                            .header("x-fidelity-cut-pad-to")
                            .and_then(|n| n.parse().ok())
                        {
                            cut.pad_to = n;
                        }
                        cut.keep_alive = self.header("x-fidelity-cut-keep-alive").is_some();
                        self.cut = Some(cut);
                        Action::Continue
                    }
                    _ => {
                        self.reply(
                            400,
                            "x-fidelity-cut-vendor or x-fidelity-cut-how is missing or unknown",
                        );
                        Action::Pause
                    }
                }
            }
            Case::Metrics => {
                let name = self.header("x-fidelity-metric").unwrap_or_default();
                let by = self
                    .header("x-fidelity-increment")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(1);
                let counter = hostcalls::define_metric(MetricType::Counter, &name)
                    .and_then(|id| hostcalls::increment_metric(id, by));
                let gauge = hostcalls::define_metric(MetricType::Gauge, &format!("{name}_gauge"))
                    .and_then(|id| hostcalls::record_metric(id, 42));
                self.reply(200, &format!("counter={counter:?};gauge={gauge:?}"));
                Action::Pause
            }
            Case::Panic => deliberate_panic(),
            Case::Environment => {
                let mut vars: Vec<String> = std::env::vars_os()
                    .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
                    .collect();
                vars.sort();
                self.reply(200, &format!("env={}", vars.join(";")));
                Action::Pause
            }
            Case::Properties => {
                let wanted = self.header("x-fidelity-properties").unwrap_or_default();
                let lines: Vec<String> = wanted
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let value = match hostcalls::get_property(p.split('.').collect()) {
                            Ok(Some(v)) => String::from_utf8_lossy(&v).into_owned(),
                            Ok(None) => "<none>".to_owned(),
                            Err(status) => format!("<{status:?}>"),
                        };
                        format!("{p}={value}")
                    })
                    .collect();
                self.reply(200, &lines.join("\n"));
                Action::Pause
            }
            Case::SharedData => {
                let key = self.header("x-fidelity-key").unwrap_or_default();
                let set = hostcalls::set_shared_data(&key, Some(b"first"), None);
                let (value, cas) = hostcalls::get_shared_data(&key).unwrap_or((None, None));
                let value = value
                    .map(|v| String::from_utf8_lossy(&v).into_owned())
                    .unwrap_or_default();
                let stale = cas.map(|c| c.wrapping_add(1000));
                let stale_set = hostcalls::set_shared_data(&key, Some(b"stale"), stale);
                let fresh_set = hostcalls::set_shared_data(&key, Some(b"second"), cas);
                let (after, _) = hostcalls::get_shared_data(&key).unwrap_or((None, None));
                let after = after
                    .map(|v| String::from_utf8_lossy(&v).into_owned())
                    .unwrap_or_default();
                self.reply(
                    200,
                    &format!(
                        "set={set:?};get={value};cas_present={};stale_cas_set={stale_set:?};fresh_cas_set={fresh_set:?};after={after}",
                        cas.is_some()
                    ),
                );
                Action::Pause
            }
            _ => Action::Continue,
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        match self.case {
            Case::RequestHeaderInBody => {
                let (status, value) =
                    raw::get_header(MapType::HttpRequestHeaders, "x-fidelity-case");
                let text = format!("{status}:{}", value.unwrap_or_default());
                raw::set_buffer(BufferType::HttpRequestBody, 0, body_size, text.as_bytes());
                Action::Continue
            }
            Case::RequestBodySizes => {
                self.note(body_size, end_of_stream);
                if !end_of_stream {
                    return Action::Pause;
                }
                let text = format!("sizes={}", self.record_text());
                let status =
                    raw::set_buffer(BufferType::HttpRequestBody, 0, body_size, text.as_bytes());
                let _ = hostcalls::log(LogLevel::Info, &format!("set request body: {status}"));
                Action::Continue
            }
            Case::RequestBodyAfterCallout => self.hold_then_callout(body_size, end_of_stream),
            Case::RequestHeadersPause => {
                self.note(body_size, end_of_stream);
                if !end_of_stream {
                    return Action::Pause;
                }
                let status = raw::replace_header(
                    MapType::HttpRequestHeaders,
                    "x-fidelity-request-sizes",
                    &self.record_text(),
                );
                let _ = hostcalls::log(LogLevel::Info, &format!("set request header: {status}"));
                Action::Continue
            }
            _ => Action::Continue,
        }
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        match self.case {
            Case::HeadersPause => {
                if self.resume_callout.is_some() && !self.send_resume_callout() {
                    return Action::Continue;
                }
                Action::Pause
            }
            Case::LocalReply => {
                // The local reply carries a content-length; the body callback rewrites the body.
                let _ =
                    hostcalls::set_map_value(MapType::HttpResponseHeaders, "content-length", None);
                let _ = hostcalls::set_map_value(
                    MapType::HttpResponseHeaders,
                    "x-fidelity-response-headers",
                    Some(if end_of_stream { "eos" } else { "seen" }),
                );
                Action::Continue
            }
            Case::LocalReplyTwice => {
                let status = raw::send_local_response(500, &[], b"second local reply");
                let _ = raw::replace_header(
                    MapType::HttpResponseHeaders,
                    "x-fidelity-second-reply",
                    status,
                );
                Action::Continue
            }
            Case::RequestHeaderInResponse => {
                let (status, value) =
                    raw::get_header(MapType::HttpRequestHeaders, "x-fidelity-case");
                let report = format!("{status}:{}", value.unwrap_or_default());
                let _ = raw::replace_header(
                    MapType::HttpResponseHeaders,
                    "x-fidelity-request-header",
                    &report,
                );
                Action::Continue
            }
            Case::Cut => {
                if let Some(cut) = self.cut.as_mut() {
                    cut.on_headers();
                }
                Action::Continue
            }
            Case::LocalReplyInResponseHeaders => {
                self.reply(502, "replaced in response headers");
                Action::Pause
            }
            _ => Action::Continue,
        }
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.response_chunks += 1;
        match self.case {
            Case::BodySizes | Case::HeadersPause => {
                self.note(body_size, end_of_stream);
                if !end_of_stream {
                    return Action::Pause;
                }
                let record = self.record_text();
                let header = raw::replace_header(
                    MapType::HttpResponseHeaders,
                    "x-fidelity-body-sizes",
                    &record,
                );
                let text = format!("sizes={record};set_header={header}");
                raw::set_buffer(BufferType::HttpResponseBody, 0, body_size, text.as_bytes());
                Action::Continue
            }
            Case::PauseThenContinue => {
                self.note(body_size, end_of_stream);
                if self.response_chunks == 1 && !end_of_stream {
                    return Action::Pause;
                }
                if end_of_stream {
                    let text = format!(";sizes={}", self.record_text());
                    raw::set_buffer(BufferType::HttpResponseBody, body_size, 0, text.as_bytes());
                }
                Action::Continue
            }
            Case::SetBody => {
                if let Some(op) = self.set_op.clone() {
                    let start = op.start.resolve(body_size);
                    let size = op.size.resolve(body_size);
                    let status = raw::set_buffer(
                        BufferType::HttpResponseBody,
                        start,
                        size,
                        op.data.as_bytes(),
                    );
                    if status != "Ok" {
                        let mark = format!("[{status}]");
                        raw::set_buffer(
                            BufferType::HttpResponseBody,
                            usize::MAX,
                            0,
                            mark.as_bytes(),
                        );
                    }
                }
                Action::Continue
            }
            Case::LocalReply => {
                self.note(body_size, end_of_stream);
                if end_of_stream {
                    let text = format!(";response_body={}", self.record_text());
                    raw::set_buffer(BufferType::HttpResponseBody, body_size, 0, text.as_bytes());
                }
                Action::Continue
            }
            Case::Cut => {
                let context_id = self.context_id;
                if let Some(cut) = self.cut.as_mut() {
                    cut.on_body(context_id, body_size, end_of_stream);
                }
                Action::Continue
            }
            Case::BodyAfterCallout => self.hold_then_callout(body_size, end_of_stream),
            Case::LocalReplyAfterHeaders if self.response_chunks == 2 => {
                self.reply(500, "too late");
                Action::Pause
            }
            _ => Action::Continue,
        }
    }
}

/// The fault-injection case: a trap in a callback, to pin what `failure_policy` does with it.
#[allow(clippy::panic)] // Deliberate: this case exists to make the VM trap.
fn deliberate_panic() -> Action {
    panic!("fidelity-filter: deliberate panic")
}
