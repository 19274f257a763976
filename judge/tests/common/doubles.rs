//! Backend DOUBLES: small in-process HTTP servers that speak a judge vendor's format (OpenAI Chat
//! Completions or Anthropic Messages), record every request they receive, and answer what the test
//! decides.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    OpenAi,
    Anthropic,
}

impl Vendor {
    pub const BOTH: [Vendor; 2] = [Vendor::OpenAi, Vendor::Anthropic];

    pub fn api(self) -> &'static str {
        match self {
            Vendor::OpenAi => "openai",
            Vendor::Anthropic => "anthropic",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Vendor::OpenAi => "/v1/chat/completions",
            Vendor::Anthropic => "/v1/messages",
        }
    }
}

/// What the double answers.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A successful answer in the vendor's shape carrying this verdict object (OpenAI: as the
    /// message content; Anthropic: as the forced tool call's input).
    Verdict(Value),
    /// OpenAI: this message content string. Anthropic: these content blocks.
    Content(Value),
    /// This status with a vendor-style error body.
    Status(u16),
    /// A 200 with exactly this body.
    Raw(&'static str),
    /// Wait, then answer a passed verdict (for a tool-call check: the condition does not hold).
    Slow(Duration),
    /// Wait, then answer this verdict object (a judge model that takes its time).
    VerdictAfter(Duration, Value),
    /// A 307 to this URL.
    Redirect(String),
}

pub fn verdict(passed: bool, score: f64, reason: &str) -> Answer {
    Answer::Verdict(json!({"passed": passed, "score": score, "reason": reason}))
}

/// A tool-call check's verdict: `result` true when the condition holds.
pub fn tool_verdict(result: bool, explanation: &str) -> Answer {
    Answer::Verdict(json!({"result": result, "explanation": explanation}))
}

/// Whether a request asks for a tool-call check's verdict (by the schema it asks the answer in).
pub fn asks_tool_check(body: &Value) -> bool {
    let schema = body
        .pointer("/response_format/json_schema/schema")
        .or_else(|| body.pointer("/tools/0/input_schema"));
    schema.is_some_and(|s| s["properties"].get("result").is_some())
}

/// One request as the double received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The system prompt, wherever the vendor puts it.
    pub fn system(&self) -> &str {
        self.body["system"]
            .as_str()
            .or_else(|| self.body["messages"][0]["content"].as_str())
            .unwrap()
    }

    /// The one user message.
    pub fn user(&self) -> &str {
        let messages = self.body["messages"].as_array().unwrap();
        let users: Vec<&Value> = messages.iter().filter(|m| m["role"] == "user").collect();
        assert_eq!(users.len(), 1, "exactly one user message: {messages:?}");
        users[0]["content"].as_str().unwrap()
    }
}

type Decide = Arc<dyn Fn(&Value) -> Answer + Send + Sync>;

#[derive(Clone)]
struct DoubleState {
    vendor: Vendor,
    decide: Decide,
    seen: Arc<Mutex<Vec<Seen>>>,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

/// A running backend double.
pub struct BackendDouble {
    pub vendor: Vendor,
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    most_in_flight: Arc<AtomicUsize>,
}

impl BackendDouble {
    /// A double that always answers `answer`.
    pub async fn start(vendor: Vendor, answer: Answer) -> Self {
        Self::deciding(vendor, move |_| answer.clone()).await
    }

    /// A double that decides from the request body it received.
    pub async fn deciding(
        vendor: Vendor,
        decide: impl Fn(&Value) -> Answer + Send + Sync + 'static,
    ) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let most_in_flight = Arc::new(AtomicUsize::new(0));
        let state = DoubleState {
            vendor,
            decide: Arc::new(decide),
            seen: Arc::clone(&seen),
            in_flight: Arc::new(AtomicUsize::new(0)),
            most_in_flight: Arc::clone(&most_in_flight),
        };
        let app = Router::new()
            .route(vendor.path(), post(answer))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            vendor,
            addr,
            seen,
            most_in_flight,
        }
    }

    /// The most requests the double was answering at once.
    pub fn most_in_flight(&self) -> usize {
        self.most_in_flight.load(Ordering::SeqCst)
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn only_request(&self) -> Seen {
        let seen = self.seen();
        assert_eq!(seen.len(), 1, "the double received {} requests", seen.len());
        seen.into_iter().next().unwrap()
    }
}

async fn answer(State(state): State<DoubleState>, headers: HeaderMap, body: Bytes) -> Response {
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    state.most_in_flight.fetch_max(now, Ordering::SeqCst);
    let response = respond(&state, headers, body).await;
    state.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

async fn respond(state: &DoubleState, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap();
    state.seen.lock().unwrap().push(Seen {
        path: state.vendor.path().to_owned(),
        headers,
        body: body.clone(),
    });
    let model = body["model"].clone();
    let vendor = state.vendor;
    let reply = |content: Value| -> Response {
        let body = match vendor {
            Vendor::OpenAi => json!({
                "id": "chatcmpl-double", "object": "chat.completion", "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 321, "completion_tokens": 23, "total_tokens": 344}
            }),
            Vendor::Anthropic => json!({
                "id": "msg_double", "type": "message", "role": "assistant", "model": model,
                "content": content, "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 321, "output_tokens": 23}
            }),
        };
        (StatusCode::OK, axum::Json(body)).into_response()
    };
    let as_content = |verdict: Value| match vendor {
        Vendor::OpenAi => Value::String(verdict.to_string()),
        Vendor::Anthropic => json!([{"type": "tool_use", "id": "toolu_double",
                                     "name": body["tool_choice"]["name"], "input": verdict}]),
    };
    match (state.decide)(&body) {
        Answer::Verdict(v) => reply(as_content(v)),
        Answer::VerdictAfter(delay, v) => {
            tokio::time::sleep(delay).await;
            reply(as_content(v))
        }
        Answer::Content(c) => reply(c),
        Answer::Slow(delay) => {
            tokio::time::sleep(delay).await;
            reply(as_content(if asks_tool_check(&body) {
                json!({"result": false, "explanation": "Slow double verdict."})
            } else {
                json!({"passed": true, "score": 1, "reason": "Slow double verdict."})
            }))
        }
        Answer::Raw(text) => (StatusCode::OK, text).into_response(),
        Answer::Redirect(to) => {
            (StatusCode::TEMPORARY_REDIRECT, [("location", to)], "moved").into_response()
        }
        Answer::Status(code) => {
            let error = match vendor {
                Vendor::OpenAi => {
                    json!({"error": {"message": "double failure", "type": "server_error"}})
                }
                Vendor::Anthropic => {
                    json!({"type": "error", "error": {"type": "api_error", "message": "double failure"}})
                }
            };
            (StatusCode::from_u16(code).unwrap(), axum::Json(error)).into_response()
        }
    }
}
