//! HTTP callouts (`proxy_http_call`) waiting for the test to answer them.

use std::time::Duration;

/// A callout the guest dispatched and nobody answered yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Callout {
    /// The token the host returned to the guest.
    pub token: u32,
    /// The cluster it was sent to.
    pub cluster: String,
    /// Request headers as Envoy sends them (with `content-length` when there is a body).
    pub headers: Vec<(String, String)>,
    /// Request body.
    pub body: Vec<u8>,
    /// Request trailers.
    pub trailers: Vec<(String, String)>,
    /// `None` when the guest passed timeout 0 (no timeout).
    pub timeout: Option<Duration>,
    /// The context that dispatched it (the effective context at the time of the call).
    pub context_id: u32,
    pub(crate) deadline: Option<Duration>,
    pub(crate) generation: u64,
}

impl Callout {
    /// The first value of a request header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The answer readable as `HttpCallResponse*` during `proxy_on_http_call_response`.
#[derive(Clone, Debug, Default)]
pub(crate) struct CallResponse {
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) trailers: Vec<(String, String)>,
}

/// What Envoy's async client delivers when a callout times out: its router answers 504.
pub(crate) fn timeout_response() -> CallResponse {
    let body = b"upstream request timeout".to_vec();
    CallResponse {
        headers: vec![
            (":status".to_owned(), "504".to_owned()),
            ("content-length".to_owned(), body.len().to_string()),
            ("content-type".to_owned(), "text/plain".to_owned()),
        ],
        body,
        trailers: Vec::new(),
    }
}
