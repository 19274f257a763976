//! A proxy-wasm HTTP filter that does nothing: every callback continues at once. Loaded exactly as
//! livecheck is (V8, same filter position, same plugin settings), it is the benchmarks' baseline for
//! what any wasm filter costs in Envoy (the VM calls, copying headers in and out), so the difference
//! to livecheck is livecheck's own work.
//!
//! Given a plugin configuration naming actions (a comma-separated list, e.g.
//! `hold_request,read_request`), it does those and nothing else: what a checking filter must ask of
//! Envoy for a non-streamed turn, without deciding anything (`benches/floor.py`, `make bench-floor`).
//! `{}` or an empty configuration is the no-op filter.
//!
//! - `request_headers`: read the request's header map whole (`request_header_map`), set
//!   `accept-encoding: identity` (`accept_encoding`);
//! - `hold_request`: hold the request body until its end (`Pause`, Envoy buffers it);
//! - `read_request`: copy the whole request body into the VM at its end;
//! - `response_headers`: read the answer's header map whole (`response_header_map`), add a turn-id
//!   header (`turn_id`), remove `content-length` (`drop_content_length`: a held answer may change
//!   size);
//! - `hold_response`, `read_response`: the same as for the request, on the answer;
//! - `read_chunks`: copy each chunk of the answer into the VM as it passes, held by nothing (the
//!   least a filter checking a streamed answer does: `benches/stream_floor.py`);
//! - `hold_last_event`: with `read_chunks`, keep back each chunk's last SSE event (from the end of
//!   the event before it; a partial event too) and send it at the front of the next chunk
//!   (`set_buffer`: the chunk written back without its tail): what any filter pays that holds back
//!   the end of what it read, as a minimal hold-back does whenever a chunk's text ends in what could
//!   still begin a match (`benches/stream_floor.py`'s (h));
//! - `lookups`: ten request headers and three of the answer's read one host call each, instead of
//!   the maps whole (`benches/floor.py`'s comparison of the two);
//! - `crossings`: a hundred host calls that return no data (the clock) in each callback, to price
//!   one crossing from the VM into Envoy and back;
//! - `counters`: ten counters defined at configure time, each incremented once per turn at its end.
//! - `callout=CLUSTER`: at a held answer's end (with `hold_response`), send the answer's body as it
//!   came (`read_response` reads it first) in one HTTP call (`POST /floor`) to the Envoy cluster
//!   `CLUSTER` and resume the answer when that call's answer arrives, whatever it says: the least a
//!   filter that asks a sidecar about an answer before the caller sees it does
//!   (`benches/tool_checks.py`'s floor variants). A call that cannot be sent resumes at once.
//! - `report=CLUSTER`: a turn's end counted, and every 200 ms (the root's tick, as livecheck sends its
//!   turn reports) one HTTP call (`POST /healthz`, which the sidecar answers 405 at once) to the
//!   Envoy cluster `CLUSTER` carrying REPORT_BYTES of body per turn ended since the last: what any
//!   filter pays that has every turn's results stored by a service, batched as livecheck batches
//!   them (`benches/stream_floor.py`'s (r)).
//! - `touch=N`: write one byte of every 64 over N KiB of the VM's memory per turn (at its end),
//!   moving on through an 8 MiB ring so each turn touches lines the last did not, as a filter whose
//!   turns allocate and write that much does: to price what a filter's data footprint costs Envoy's
//!   own code (its caches), apart from the writes themselves.
//! - `code=N`: run N × 1,024 distinct steps of straight-line code per turn (at its end; N ≤ 16,
//!   ~25 KiB of wasm each, every instruction run once), as a filter whose turn runs that much of
//!   its code does: to price what a filter's code footprint costs Envoy's own code, apart from the
//!   run itself.
//! - `branches=N`: the same with two branches a step, each always going the same way: a filter's
//!   branchy code (many branch sites a turn), for the branch predictors.
//!
//! `code=` and `branches=` exist only in a build with the `controls` feature (`make bench-perf`
//! builds one into `target/controls/`); the baseline every other bench loads is built without
//! them.

#[cfg(target_os = "wasi")]
mod filter {
    use std::rc::Rc;

    use proxy_wasm::hostcalls;
    use proxy_wasm::traits::{Context, HttpContext, RootContext};
    use proxy_wasm::types::{Action, ContextType, LogLevel, MetricType};

    proxy_wasm::main! {{
        proxy_wasm::set_log_level(LogLevel::Warn);
        proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::default()) });
    }}

    #[derive(Default, Clone)]
    struct Actions {
        request_header_map: bool,
        accept_encoding: bool,
        hold_request: bool,
        read_request: bool,
        response_header_map: bool,
        turn_id: bool,
        drop_content_length: bool,
        hold_response: bool,
        read_response: bool,
        read_chunks: bool,
        hold_last_event: bool,
        lookups: bool,
        crossings: bool,
        counters: Vec<u32>,
        touch_kib: usize,
        callout: Option<String>,
        report: Option<String>,
        #[cfg(feature = "controls")]
        code: usize,
        #[cfg(feature = "controls")]
        branches: usize,
    }

    /// `code=` and `branches=`: generated code, run once per turn.
    #[cfg(feature = "controls")]
    mod controls {
        /// Four copies of its body.
        macro_rules! x4 {
            ($($body:tt)*) => { $($body)* $($body)* $($body)* $($body)* };
        }

        /// Functions of 4^5 = 1,024 copies of one step each, each step its own code (`black_box`
        /// keeps them apart); 16 of them, each with its own constant (identical ones would be
        /// folded into one), are 16,384 steps. `$run` runs the first `n` of them.
        macro_rules! steps {
            ($run:ident, |$x:ident, $c:ident, $k:ident| $step:block, $($name:ident $kv:literal)*) => {
                $(
                    #[inline(never)]
                    fn $name(mut $x: u64) -> u64 {
                        let $k: u64 = $kv;
                        let $c: u64 = std::hint::black_box(0);
                        x4! { x4! { x4! { x4! { x4! { $step } } } } }
                        $x
                    }
                )*
                pub fn $run(n: usize, seed: u64) -> u64 {
                    let mut x = seed;
                    let all: &[fn(u64) -> u64] = &[$($name),*];
                    for f in all.iter().take(n) {
                        x = f(x);
                    }
                    x
                }
            };
        }
        steps!(run_code, |x, _c, k| {
            x = std::hint::black_box(x).wrapping_mul(0x9E37_79B9_7F4A_7C15 ^ k).rotate_left(7);
        }, s0 0 s1 1 s2 2 s3 3 s4 4 s5 5 s6 6 s7 7 s8 8 s9 9 s10 10 s11 11 s12 12 s13 13 s14 14 s15 15);
        // Two branches a step, each always going the same way (`c` is 0, which the compiler
        // cannot know) and each arm opaque, so that they stay branches: 32,768 branch sites.
        steps!(run_branches, |x, c, k| {
            if c & (1 << (k + 1)) == 0 {
                x = std::hint::black_box(x.wrapping_mul(0x9E37_79B9_7F4A_7C15 ^ k));
            } else {
                x = std::hint::black_box(x.rotate_left(7));
            }
            if c | (1 << (k + 1)) == 0 {
                x = std::hint::black_box(x ^ 0x5555);
            } else {
                x = std::hint::black_box(x.rotate_left(3));
            }
        }, b0 0 b1 1 b2 2 b3 3 b4 4 b5 5 b6 6 b7 7 b8 8 b9 9 b10 10 b11 11 b12 12 b13 13 b14 14 b15 15);
    }

    const RING_BYTES: usize = 8 << 20;

    thread_local! {
        static RING: std::cell::RefCell<(Vec<u8>, usize)> = const { std::cell::RefCell::new((Vec::new(), 0)) };
    }

    /// Writes one byte of every cache line over `kib` KiB of the ring, from where the last turn stopped.
    fn touch(kib: usize) {
        RING.with(|ring| {
            let mut ring = ring.borrow_mut();
            let (buf, at) = &mut *ring;
            if buf.is_empty() {
                buf.resize(RING_BYTES, 0);
            }
            for _ in 0..kib * 16 {
                *at = (*at + 64) % RING_BYTES;
                if let Some(b) = buf.get_mut(*at) {
                    *b = b.wrapping_add(1);
                }
            }
        });
    }

    /// `report=`: the body a turn adds to the call that reports it (a livecheck turn report of ten
    /// results is about this long).
    const REPORT_BYTES: usize = 1024;

    #[derive(Default)]
    struct Root {
        actions: Rc<Actions>,
        /// `report=`: turns ended since the last report call.
        ended: Rc<std::cell::Cell<usize>>,
    }

    impl Context for Root {}

    impl RootContext for Root {
        fn on_configure(&mut self, _size: usize) -> bool {
            let text = self
                .get_plugin_configuration()
                .and_then(|b| String::from_utf8(b).ok())
                .unwrap_or_default();
            let mut actions = Actions::default();
            for name in text.split(',').map(str::trim) {
                match name {
                    "" | "{}" => {}
                    "request_headers" => {
                        actions.request_header_map = true;
                        actions.accept_encoding = true;
                    }
                    "request_header_map" => actions.request_header_map = true,
                    "accept_encoding" => actions.accept_encoding = true,
                    "hold_request" => actions.hold_request = true,
                    "read_request" => actions.read_request = true,
                    "response_headers" => {
                        actions.response_header_map = true;
                        actions.turn_id = true;
                        actions.drop_content_length = true;
                    }
                    "response_header_map" => actions.response_header_map = true,
                    "turn_id" => actions.turn_id = true,
                    "drop_content_length" => actions.drop_content_length = true,
                    "lookups" => actions.lookups = true,
                    "read_chunks" => actions.read_chunks = true,
                    "hold_last_event" => actions.hold_last_event = true,
                    "crossings" => actions.crossings = true,
                    "hold_response" => actions.hold_response = true,
                    "read_response" => actions.read_response = true,
                    "counters" => {
                        for i in 0..10 {
                            match hostcalls::define_metric(
                                MetricType::Counter,
                                &format!("floor.check{i}.passed"),
                            ) {
                                Ok(id) => actions.counters.push(id),
                                Err(_) => return false,
                            }
                        }
                    }
                    _ => match name.split_once('=') {
                        Some(("callout", cluster)) if !cluster.is_empty() => {
                            actions.callout = Some(cluster.to_owned());
                        }
                        Some(("report", cluster)) if !cluster.is_empty() => {
                            actions.report = Some(cluster.to_owned());
                            self.set_tick_period(std::time::Duration::from_millis(200));
                        }
                        Some(("touch", kib)) => match kib.parse() {
                            Ok(kib) => actions.touch_kib = kib,
                            Err(_) => return false,
                        },
                        #[cfg(feature = "controls")]
                        Some(("code", n)) => match n.parse() {
                            Ok(n) if n <= 16 => actions.code = n,
                            _ => return false,
                        },
                        #[cfg(feature = "controls")]
                        Some(("branches", n)) => match n.parse() {
                            Ok(n) if n <= 16 => actions.branches = n,
                            _ => return false,
                        },
                        _ => return false,
                    },
                }
            }
            self.actions = Rc::new(actions);
            true
        }

        fn on_tick(&mut self) {
            let (Some(cluster), ended) = (self.actions.report.as_deref(), self.ended.take()) else {
                return;
            };
            if ended > 0 {
                let body = vec![b'x'; ended.saturating_mul(REPORT_BYTES)];
                let _ = self.dispatch_http_call(
                    cluster,
                    vec![
                        (":method", "POST"),
                        (":path", "/healthz"),
                        (":authority", "report"),
                        ("content-type", "application/json"),
                    ],
                    Some(&body),
                    vec![],
                    std::time::Duration::from_secs(5),
                );
            }
        }

        fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
            Some(Box::new(Filter {
                ended: Rc::clone(&self.ended),
                actions: Rc::clone(&self.actions),
                tail: Vec::new(),
            }))
        }

        fn get_type(&self) -> Option<ContextType> {
            Some(ContextType::HttpContext)
        }
    }

    /// The request headers a checking filter reads, one host call each (`lookups`), as against the
    /// whole map in one (`request_header_map`).
    const REQUEST_LOOKUPS: [&str; 10] = [
        ":method",
        ":path",
        ":authority",
        "x-livecheck-agent",
        "x-livecheck-version",
        "authorization",
        "x-api-key",
        "content-encoding",
        "content-length",
        "accept-encoding",
    ];
    const RESPONSE_LOOKUPS: [&str; 3] = [":status", "content-encoding", "content-type"];

    /// With no actions, the SDK's defaults: headers, body and trailers all `Continue`, nothing read.
    struct Filter {
        actions: Rc<Actions>,
        /// `hold_last_event`: what the last chunk kept back.
        tail: Vec<u8>,
        /// `report=`: the root's count of turns ended.
        ended: Rc<std::cell::Cell<usize>>,
    }

    /// Where `data`'s last SSE event begins: after the blank line that ends the event before it.
    fn last_event_start(data: &[u8]) -> usize {
        let body = data.strip_suffix(b"\n\n").unwrap_or(data);
        body.windows(2)
            .rposition(|w| w == b"\n\n")
            .map_or(0, |at| at + 2)
    }

    impl Context for Filter {
        fn on_http_call_response(&mut self, _: u32, _: usize, _: usize, _: usize) {
            self.resume_http_response();
        }
    }

    impl Filter {
        fn cross(&self) {
            if self.actions.crossings {
                for _ in 0..100 {
                    let _ = hostcalls::get_current_time();
                }
            }
        }
    }

    impl HttpContext for Filter {
        fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
            self.cross();
            let identity = self.actions.request_header_map
                && self
                    .get_http_request_headers()
                    .iter()
                    .any(|(k, v)| k == "accept-encoding" && v == "identity");
            if self.actions.lookups {
                for name in REQUEST_LOOKUPS {
                    let _value = self.get_http_request_header(name);
                }
            }
            if self.actions.accept_encoding && !identity {
                self.set_http_request_header("accept-encoding", Some("identity"));
            }
            Action::Continue
        }

        fn on_http_request_body(&mut self, size: usize, end_of_stream: bool) -> Action {
            self.cross();
            if self.actions.hold_request && !end_of_stream {
                return Action::Pause;
            }
            if self.actions.read_request && end_of_stream {
                let _body = self.get_http_request_body(0, size);
            }
            Action::Continue
        }

        fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
            self.cross();
            if self.actions.response_header_map {
                let _headers = self.get_http_response_headers();
            }
            if self.actions.lookups {
                for name in RESPONSE_LOOKUPS {
                    let _value = self.get_http_response_header(name);
                }
            }
            if self.actions.turn_id {
                self.set_http_response_header(
                    "x-livecheck-turn-id",
                    Some("lc_0123456789abcdef0123456789abcdef"),
                );
            }
            if self.actions.drop_content_length {
                self.set_http_response_header("content-length", None);
            }
            Action::Continue
        }

        fn on_http_response_body(&mut self, size: usize, end_of_stream: bool) -> Action {
            self.cross();
            if self.actions.hold_response && !end_of_stream {
                return Action::Pause;
            }
            let body = if (self.actions.read_response && end_of_stream) || self.actions.read_chunks
            {
                self.get_http_response_body(0, size)
            } else {
                None
            };
            if self.actions.hold_last_event {
                let mut all = std::mem::take(&mut self.tail);
                let had_tail = !all.is_empty();
                all.extend_from_slice(body.as_deref().unwrap_or_default());
                let cut = if end_of_stream {
                    all.len()
                } else {
                    last_event_start(&all)
                };
                self.tail = all.split_off(cut);
                if had_tail || !self.tail.is_empty() {
                    self.set_http_response_body(0, size, &all);
                }
                return Action::Continue;
            }
            if let Some(cluster) = self.actions.callout.as_deref().filter(|_| end_of_stream) {
                let sent = self.dispatch_http_call(
                    cluster,
                    vec![
                        (":method", "POST"),
                        (":path", "/floor"),
                        (":authority", "floor"),
                        ("content-type", "application/json"),
                    ],
                    body.as_deref(),
                    vec![],
                    std::time::Duration::from_secs(10),
                );
                if sent.is_ok() {
                    return Action::Pause;
                }
            }
            Action::Continue
        }

        fn on_log(&mut self) {
            #[cfg(feature = "controls")]
            {
                if self.actions.code > 0 {
                    std::hint::black_box(controls::run_code(
                        self.actions.code,
                        std::hint::black_box(1),
                    ));
                }
                if self.actions.branches > 0 {
                    std::hint::black_box(controls::run_branches(
                        self.actions.branches,
                        std::hint::black_box(1),
                    ));
                }
            }
            if self.actions.touch_kib > 0 {
                touch(self.actions.touch_kib);
            }
            for id in &self.actions.counters {
                let _ = hostcalls::increment_metric(*id, 1);
            }
            if self.actions.report.is_some() {
                self.ended.set(self.ended.get().saturating_add(1));
            }
        }
    }
}
