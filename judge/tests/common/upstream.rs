//! An UPSTREAM double: an in-process stand-in for a vendor API (any path) that records every
//! request it receives, headers included, and answers what the test decides. Included by path
//! (`#[path = "common/upstream.rs"]`) by the tests that need it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::Value;

/// What the double answers.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with exactly this text as a JSON body.
    Ok(String),
    /// This status with this body.
    Status(u16, String),
    /// Wait, then 200 with this body.
    Slow(Duration, String),
    /// 200 with a body of this many bytes (a JSON string).
    Big(usize),
    /// A 307 to this URL.
    Redirect(String),
}

/// One request as the double received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: Method,
    /// Path and query.
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Clone)]
struct DoubleState {
    reply: Reply,
    received: Arc<Mutex<Vec<Received>>>,
}

pub struct UpstreamDouble {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
}

impl UpstreamDouble {
    pub async fn start(reply: Reply) -> Self {
        let received = Arc::new(Mutex::new(Vec::new()));
        let state = DoubleState {
            reply,
            received: Arc::clone(&received),
        };
        let app = Router::new().fallback(answer).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, received }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    pub fn only_request(&self) -> Received {
        let received = self.received();
        assert_eq!(
            received.len(),
            1,
            "the double received {} requests",
            received.len()
        );
        received.into_iter().next().unwrap()
    }
}

async fn answer(
    State(state): State<DoubleState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.received.lock().unwrap().push(Received {
        method,
        uri: uri.to_string(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let json = [("content-type", "application/json")];
    match state.reply {
        Reply::Ok(body) => (StatusCode::OK, json, body).into_response(),
        Reply::Status(code, body) => {
            (StatusCode::from_u16(code).unwrap(), json, body).into_response()
        }
        Reply::Slow(delay, body) => {
            tokio::time::sleep(delay).await;
            (StatusCode::OK, json, body).into_response()
        }
        Reply::Big(n) => {
            let body = format!("\"{}\"", "x".repeat(n.saturating_sub(2)));
            (StatusCode::OK, json, body).into_response()
        }
        Reply::Redirect(to) => {
            (StatusCode::TEMPORARY_REDIRECT, [("location", to)], "moved").into_response()
        }
    }
}
