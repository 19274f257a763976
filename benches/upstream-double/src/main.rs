//! `upstream-double`: a test double of a model vendor's OpenAI Chat Completions API, fast enough that
//! load benchmarks measure the proxy in front of it and not the double. It is not a model: every answer
//! is scripted. Binds 127.0.0.1 on a port the OS picks, prints the port on stdout, and exits when its
//! standard input closes (so it never outlives the benchmark that started it).
//!
//! - Any POST: reads the whole request body, answers a fixed `chat.completion` (about 600 bytes). A
//!   body containing `leak-the-codename` gets an answer that contains `project-bluebird`, unless it
//!   also holds the sidecar's retry instruction (`was not shown to the user`): a model that keeps the
//!   rule once told (the soak's recovered turns).
//! - A POST with `x-bench-stream-tokens: N`: streams Chat Completions SSE chunks instead, N tokens of
//!   text in events of `x-bench-event-chars` characters (default 4, about one token), `x-bench-group`
//!   events per write (default 1) with `x-bench-pace-us` between writes (default 0). With
//!   `x-bench-hold: 1` the closing events wait until the client goes away (at most 300 s), so a
//!   benchmark can hold many answers open mid-stream. A body containing `leak-the-codename` gets a
//!   stream whose text says `project-bluebird` halfway (the soak's cut streams). With
//!   `x-bench-shape: responses` the same text streams as OpenAI Responses events
//!   (`response.output_text.delta`, one message item) instead; with `x-bench-choices: N` (Chat, as
//!   a request's `n`) its events go to choices 0..N in turn.
//! - A POST with `x-bench-tool-call: NAME` (and `x-bench-tool-arguments: JSON`, default `{}`): a
//!   non-streamed `chat.completion` whose message calls that one function with those arguments
//!   (`finish_reason: "tool_calls"`), for the tool-call checks bench (`benches/tool_checks.py`).
//! - A non-streamed POST with `x-bench-delay-us: N`: answered N µs after its body was read (a model
//!   takes time; the proxy and the client idle meanwhile), with `x-bench-held-us`: the µs from the
//!   handler's start to the answer made, the wait included, so a bench can subtract the double's own
//!   time per request.
//! - `GET /__stats`: `{"requests": .., "streams": .., "body_bytes": .., "holding": ..}`: counted since
//!   start; `holding` = streams that sent all their text and now wait for the client to go away.

#[cfg(target_family = "wasm")]
fn main() {}

#[cfg(not(target_family = "wasm"))]
fn main() -> std::process::ExitCode {
    native::main()
}

#[cfg(not(target_family = "wasm"))]
mod native {
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::process::ExitCode;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};
    use std::time::Duration;

    use axum::body::{to_bytes, Body};
    use axum::extract::{Request, State};
    use axum::http::{header, HeaderMap, StatusCode};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{any, get};
    use axum::Router;
    use bytes::Bytes;
    use http_body::Frame;
    use tokio::io::AsyncReadExt;
    use tokio::sync::mpsc;

    const MAX_BODY: usize = 64 << 20;
    const LEAK_MARKER: &[u8] = b"leak-the-codename";
    /// In the instruction `livecheck-judge` adds when it asks again (`judge/src/retry/mod.rs`).
    const RETRY_MARKER: &[u8] = b"was not shown to the user";
    const ANSWER: &str =
        "Your order left our depot near the station this morning and should arrive \
        within three to five days. The invoice lists two items, a lamp and a chair, both in stock. \
        Please keep the receipt for returns, and ask again if anything is unclear.";
    const WORDS: [&str; 16] = [
        "the ", "order ", "ships ", "from ", "our ", "depot ", "near ", "station ", "and ",
        "arrives ", "within ", "days ", "please ", "keep ", "receipt ", "thanks ",
    ];

    #[derive(Default)]
    struct Counters {
        requests: AtomicU64,
        streams: AtomicU64,
        body_bytes: AtomicU64,
        holding: AtomicU64,
    }

    pub fn main() -> ExitCode {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                eprintln!("upstream-double: {e}");
                return ExitCode::FAILURE;
            }
        };
        match runtime.block_on(serve()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("upstream-double: {e}");
                ExitCode::FAILURE
            }
        }
    }

    async fn serve() -> std::io::Result<()> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        println!("{}", listener.local_addr()?.port());
        let counters = Arc::new(Counters::default());
        let app = Router::new()
            .route("/__stats", get(stats))
            .fallback(any(answer))
            .with_state(counters);
        let stdin_closed = async {
            let mut sink = [0u8; 64];
            let mut stdin = tokio::io::stdin();
            while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
        };
        axum::serve(listener, app)
            .with_graceful_shutdown(stdin_closed)
            .await
    }

    async fn stats(State(counters): State<Arc<Counters>>) -> Response {
        let body = format!(
            "{{\"requests\": {}, \"streams\": {}, \"body_bytes\": {}, \"holding\": {}}}",
            counters.requests.load(Ordering::Relaxed),
            counters.streams.load(Ordering::Relaxed),
            counters.body_bytes.load(Ordering::Relaxed),
            counters.holding.load(Ordering::Relaxed)
        );
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
    }

    fn header_u64(headers: &HeaderMap, name: &str, default: u64) -> u64 {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default)
    }

    async fn answer(State(counters): State<Arc<Counters>>, request: Request) -> Response {
        let started = std::time::Instant::now();
        let headers = request.headers().clone();
        let body = match to_bytes(request.into_body(), MAX_BODY).await {
            Ok(b) => b,
            Err(_) => return StatusCode::BAD_REQUEST.into_response(),
        };
        counters.requests.fetch_add(1, Ordering::Relaxed);
        counters
            .body_bytes
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        let holds = |marker: &[u8]| body.windows(marker.len()).any(|w| w == marker);
        let leak = body.len() < 1 << 16 && holds(LEAK_MARKER) && !holds(RETRY_MARKER);
        if headers.contains_key("x-bench-stream-tokens") {
            counters.streams.fetch_add(1, Ordering::Relaxed);
            return stream(&headers, leak, counters);
        }
        let delay = header_u64(&headers, "x-bench-delay-us", 0);
        if delay > 0 {
            tokio::time::sleep(Duration::from_micros(delay)).await;
        }
        let mut response = plain_answer(&headers, leak);
        if delay > 0 {
            let held = started.elapsed().as_micros().to_string();
            if let Ok(value) = header::HeaderValue::from_str(&held) {
                response.headers_mut().insert("x-bench-held-us", value);
            }
        }
        response
    }

    /// A non-streamed answer: a function call when the request names one, else the fixed text.
    fn plain_answer(headers: &HeaderMap, leak: bool) -> Response {
        if let Some(name) = headers
            .get("x-bench-tool-call")
            .and_then(|v| v.to_str().ok())
        {
            let arguments = headers
                .get("x-bench-tool-arguments")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("{}");
            return tool_call(name, arguments);
        }
        let text = if leak {
            format!("{ANSWER} The internal name is project-bluebird.")
        } else {
            ANSWER.to_owned()
        };
        let json = format!(
            "{{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":1700000000,\
             \"model\":\"gpt-4.1-mini\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\
             \"content\":\"{text}\"}},\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":900,\
             \"completion_tokens\":60,\"total_tokens\":960}}}}"
        );
        ([(header::CONTENT_TYPE, "application/json")], json).into_response()
    }

    /// A non-streamed answer whose message calls one function: `arguments` is the JSON text the
    /// model wrote, sent as a JSON string as the vendor does.
    fn tool_call(name: &str, arguments: &str) -> Response {
        let json = format!(
            "{{\"id\":\"chatcmpl-bench-tool\",\"object\":\"chat.completion\",\"created\":1700000000,\
             \"model\":\"gpt-4.1-mini\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\
             \"content\":null,\"tool_calls\":[{{\"id\":\"call_bench_1\",\"type\":\"function\",\
             \"function\":{{\"name\":{},\"arguments\":{}}}}}]}},\"finish_reason\":\"tool_calls\"}}],\
             \"usage\":{{\"prompt_tokens\":900,\"completion_tokens\":40,\"total_tokens\":940}}}}",
            json_string(name),
            json_string(arguments)
        );
        ([(header::CONTENT_TYPE, "application/json")], json).into_response()
    }

    /// `text` as a JSON string literal.
    fn json_string(text: &str) -> String {
        let mut out = String::with_capacity(text.len() + 2);
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    fn chunk_event(choice: u64, delta: &str, finish: Option<&str>) -> String {
        let finish = finish.map_or("null".to_owned(), |f| format!("\"{f}\""));
        format!(
            "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\
             \"model\":\"gpt-4.1-mini\",\"choices\":[{{\"index\":{choice},\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    }

    /// An OpenAI Responses stream of one message item whose text deltas are `pieces`: the events up
    /// to the last delta, and the closing events (which carry `text` whole, as the vendor's do).
    fn responses_events(pieces: impl Iterator<Item = String>, text: &str) -> (Vec<String>, String) {
        let mut sequence = 0u64;
        let mut event = |kind: &str, fields: &str| {
            let e = format!(
                "event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{sequence},{fields}}}\n\n"
            );
            sequence += 1;
            e
        };
        let response = |status: &str, output: &str| {
            format!(
                "\"response\":{{\"id\":\"resp_bench\",\"object\":\"response\",\"created_at\":1700000000,\
                 \"status\":\"{status}\",\"error\":null,\"incomplete_details\":null,\
                 \"model\":\"gpt-4.1-mini\",\"output\":[{output}],\"usage\":null}}"
            )
        };
        let at = r#""item_id":"msg_bench","output_index":0,"content_index":0"#;
        let item = |status: &str, content: &str| {
            format!(
                "{{\"id\":\"msg_bench\",\"type\":\"message\",\"status\":\"{status}\",\
                 \"role\":\"assistant\",\"content\":[{content}]}}"
            )
        };
        let part = |text: &str| {
            format!(
                "{{\"type\":\"output_text\",\"text\":{},\"annotations\":[],\"logprobs\":[]}}",
                json_string(text)
            )
        };
        let mut events = vec![
            event("response.created", &response("in_progress", "")),
            event("response.in_progress", &response("in_progress", "")),
            event(
                "response.output_item.added",
                &format!("\"output_index\":0,\"item\":{}", item("in_progress", "")),
            ),
            event(
                "response.content_part.added",
                &format!("{at},\"part\":{}", part("")),
            ),
        ];
        for piece in pieces {
            events.push(event(
                "response.output_text.delta",
                &format!("{at},\"delta\":{},\"logprobs\":[]", json_string(&piece)),
            ));
        }
        let done = item("completed", &part(text));
        let tail = [
            event(
                "response.output_text.done",
                &format!("{at},\"text\":{},\"logprobs\":[]", json_string(text)),
            ),
            event(
                "response.content_part.done",
                &format!("{at},\"part\":{}", part(text)),
            ),
            event(
                "response.output_item.done",
                &format!("\"output_index\":0,\"item\":{done}"),
            ),
            event("response.completed", &response("completed", &done)),
        ]
        .concat();
        (events, tail)
    }

    /// The text of the streamed answer: ordinary lower-case words (nothing a bench rule matches).
    fn text(chars: usize) -> String {
        WORDS
            .iter()
            .cycle()
            .flat_map(|w| w.chars())
            .take(chars)
            .collect()
    }

    /// A stream's writes (each `group` events) and its closing events, built once per shape: 1,000
    /// concurrent streams must not each spend the double's one thread building the same answer.
    type Script = Arc<(Vec<Bytes>, Bytes)>;
    /// (tokens, characters per event, events per write, leak, Responses events, Chat choices).
    type Shape = (u64, u64, u64, bool, bool, u64);

    fn script(
        tokens: u64,
        event_chars: u64,
        group: u64,
        leak: bool,
        responses: bool,
        choices: u64,
    ) -> Script {
        static CACHE: Mutex<Vec<(Shape, Script)>> = Mutex::new(Vec::new());
        let key = (tokens, event_chars, group, leak, responses, choices);
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, s)) = cache.iter().find(|(k, _)| *k == key) {
            return Arc::clone(s);
        }
        // A token is about 4 characters.
        let mut all = text(usize::try_from(tokens.saturating_mul(4)).unwrap_or(usize::MAX));
        if leak {
            let half = all.len() / 2;
            all.insert_str(half, " project-bluebird ");
        }
        let chars: Vec<char> = all.chars().collect();
        let pieces = chars
            .chunks(usize::try_from(event_chars).unwrap_or(4))
            .map(|piece| piece.iter().collect::<String>());
        let (events, tail) =
            if responses {
                responses_events(pieces, &all)
            } else {
                // With n choices, the text's events go to choices 0, 1, .. n-1 in turn.
                let mut events: Vec<String> = (0..choices)
                    .map(|c| chunk_event(c, r#"{"role":"assistant","content":""}"#, None))
                    .collect();
                events.extend(pieces.zip((0..choices).cycle()).map(|(piece, c)| {
                    chunk_event(c, &format!("{{\"content\":\"{piece}\"}}"), None)
                }));
                let ends: String = (0..choices)
                    .map(|c| chunk_event(c, "{}", Some("stop")))
                    .collect();
                (events, ends + "data: [DONE]\n\n")
            };
        let writes = events
            .chunks(usize::try_from(group).unwrap_or(1))
            .map(|batch| Bytes::from(batch.concat()))
            .collect();
        let tail = Bytes::from(tail);
        let script: Script = Arc::new((writes, tail));
        cache.push((key, Arc::clone(&script)));
        script
    }

    fn stream(headers: &HeaderMap, leak: bool, counters: Arc<Counters>) -> Response {
        let tokens = header_u64(headers, "x-bench-stream-tokens", 0);
        let event_chars = header_u64(headers, "x-bench-event-chars", 4).max(1);
        let group = header_u64(headers, "x-bench-group", 1).max(1);
        let pace = Duration::from_micros(header_u64(headers, "x-bench-pace-us", 0));
        let hold = header_u64(headers, "x-bench-hold", 0) == 1;
        let responses = headers
            .get("x-bench-shape")
            .is_some_and(|v| v.as_bytes() == b"responses");
        let choices = header_u64(headers, "x-bench-choices", 1).clamp(1, 128);
        let script = script(tokens, event_chars, group, leak, responses, choices);
        let (tx, rx) = mpsc::channel::<Bytes>(4);
        tokio::spawn(async move {
            let (writes, tail) = &*script;
            for write in writes {
                if !pace.is_zero() {
                    tokio::time::sleep(pace).await;
                }
                if tx.send(write.clone()).await.is_err() {
                    return;
                }
            }
            if hold {
                counters.holding.fetch_add(1, Ordering::Relaxed);
                let _ = tokio::time::timeout(Duration::from_secs(300), tx.closed()).await;
                counters.holding.fetch_sub(1, Ordering::Relaxed);
            }
            let _ = tx.send(tail.clone()).await;
        });
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .body(Body::new(ChannelBody(rx)))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    }

    /// A response body fed by a channel: each message goes out as one chunk (one write).
    struct ChannelBody(mpsc::Receiver<Bytes>);

    impl http_body::Body for ChannelBody {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            self.0.poll_recv(cx).map(|m| m.map(|b| Ok(Frame::data(b))))
        }
    }
}
