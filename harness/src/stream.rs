//! One HTTP stream through the emulated filter chain: caller -> filter -> upstream and back.

use std::collections::BTreeMap;

use crate::abi::MapType;
use crate::headers::HeaderMap;

/// Identifies a stream of a [`crate::Host`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub(crate) u64);

/// What one side of the stream received from the filter chain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// Headers (for the caller, including `:status`), once they were sent.
    pub headers: Option<Vec<(String, String)>>,
    /// Every body byte, concatenated.
    pub body: Vec<u8>,
    /// The body as it arrived, chunk by chunk.
    pub body_chunks: Vec<Vec<u8>>,
    /// Trailers, if any were sent.
    pub trailers: Option<Vec<(String, String)>>,
    /// Whether the end of stream was sent.
    pub end_of_stream: bool,
    /// Whether the stream was reset instead of ended.
    pub reset: bool,
}

/// What the caller (downstream) received.
pub type Downstream = Received;
/// What the upstream received.
pub type Upstream = Received;

impl Received {
    pub(crate) const EMPTY: Self = Self {
        headers: None,
        body: Vec::new(),
        body_chunks: Vec::new(),
        trailers: None,
        end_of_stream: false,
        reset: false,
    };

    /// The first value of a header (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .as_ref()?
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `:status` as a number, when headers were sent.
    pub fn status(&self) -> Option<u16> {
        self.header(":status")?.parse().ok()
    }

    /// The body as text (lossy).
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub(crate) fn send_headers(&mut self, headers: &HeaderMap, end_of_stream: bool) {
        self.headers = Some(headers.pairs().to_vec());
        self.end_of_stream |= end_of_stream;
    }

    pub(crate) fn send_data(&mut self, data: Vec<u8>, end_of_stream: bool) {
        if !data.is_empty() {
            self.body.extend_from_slice(&data);
            self.body_chunks.push(data);
        }
        self.end_of_stream |= end_of_stream;
    }

    pub(crate) fn send_trailers(&mut self, trailers: &HeaderMap) {
        self.trailers = Some(trailers.pairs().to_vec());
        self.end_of_stream = true;
    }
}

/// Whether the filter holds the headers of one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// StopIteration: body callbacks still arrive.
    Headers,
    /// StopAllIterationAndWatermark: body is buffered by the filter manager until continue.
    All,
}

/// The filter manager's view of one direction (request or response) for this filter.
#[derive(Debug, Default)]
pub(crate) struct Direction {
    pub(crate) headers: Option<HeaderMap>,
    pub(crate) headers_end_stream: bool,
    /// Envoy's `request_headers_` / `response_headers_` pointer is set.
    pub(crate) headers_accessible: bool,
    pub(crate) hold: Option<Hold>,
    pub(crate) headers_forwarded: bool,
    /// Body not yet forwarded: the filter manager's buffered data plus the chunk in hand.
    pub(crate) body: Vec<u8>,
    /// Envoy's `*_body_buffer_` pointer is set.
    pub(crate) body_accessible: bool,
    /// The filter returned StopIterationAndBuffer and waits (`buffering_*_body_`).
    pub(crate) buffering: bool,
    /// The filter stopped on data and has not continued.
    pub(crate) data_stopped: bool,
    /// The source sent end of stream.
    pub(crate) end_received: bool,
    /// The end of stream flag of the body callback in progress (Envoy's `end_of_stream_`).
    pub(crate) in_last_body_callback: bool,
    pub(crate) trailers: Option<HeaderMap>,
    pub(crate) trailers_accessible: bool,
    pub(crate) trailers_delivered: bool,
    pub(crate) trailers_held: bool,
    /// Everything was forwarded including end of stream.
    pub(crate) complete: bool,
}

/// A stream and its filter context.
#[derive(Debug, Default)]
pub(crate) struct Stream {
    pub(crate) context_id: u32,
    pub(crate) generation: u64,
    pub(crate) context_created: bool,
    /// The filter is not in the chain (FAIL_OPEN after the VM failed).
    pub(crate) bypass: bool,
    pub(crate) request: Direction,
    pub(crate) response: Direction,
    pub(crate) downstream: Received,
    pub(crate) upstream: Received,
    /// A local reply or reset ended the request path (`decoder_filter_chain_aborted_`).
    pub(crate) request_aborted: bool,
    /// The response path no longer runs through this filter (`encoder_filter_chain_aborted_`).
    pub(crate) response_aborted: bool,
    /// The response headers reached the caller (`non_100_response_headers_encoded_`).
    pub(crate) response_headers_sent: bool,
    /// Envoy's `failure_local_reply_sent_`.
    pub(crate) failure_reply_sent: bool,
    /// proxy-wasm-cpp-host's `stream_failed_`.
    pub(crate) stream_failed: bool,
    pub(crate) in_log_phase: bool,
    pub(crate) finished: bool,
    pub(crate) properties: BTreeMap<String, Vec<u8>>,
}

impl Stream {
    pub(crate) fn direction(&self, response: bool) -> &Direction {
        if response {
            &self.response
        } else {
            &self.request
        }
    }

    pub(crate) fn direction_mut(&mut self, response: bool) -> &mut Direction {
        if response {
            &mut self.response
        } else {
            &mut self.request
        }
    }

    pub(crate) fn is_reset(&self) -> bool {
        self.downstream.reset
    }

    /// The map a read names (Envoy's `getConstMap`); `None` when it is not available.
    pub(crate) fn map(&self, t: MapType) -> Option<&HeaderMap> {
        if self.in_log_phase {
            return match t {
                MapType::RequestHeaders => self.request.headers.as_ref(),
                MapType::ResponseHeaders => self.response.headers.as_ref(),
                MapType::ResponseTrailers => self.response.trailers.as_ref(),
                _ => None,
            };
        }
        let (dir, trailers) = match t {
            MapType::RequestHeaders => (&self.request, false),
            MapType::RequestTrailers => (&self.request, true),
            MapType::ResponseHeaders => (&self.response, false),
            MapType::ResponseTrailers => (&self.response, true),
            _ => return None,
        };
        if trailers {
            dir.trailers.as_ref().filter(|_| dir.trailers_accessible)
        } else {
            dir.headers.as_ref().filter(|_| dir.headers_accessible)
        }
    }

    /// The map a write names (Envoy's `getMap`). During the last body callback a missing
    /// trailer map is created (`addDecodedTrailers` / `addEncodedTrailers`).
    pub(crate) fn map_mut(&mut self, t: MapType) -> Option<&mut HeaderMap> {
        if self.in_log_phase {
            return None;
        }
        let (dir, trailers) = match t {
            MapType::RequestHeaders => (&mut self.request, false),
            MapType::RequestTrailers => (&mut self.request, true),
            MapType::ResponseHeaders => (&mut self.response, false),
            MapType::ResponseTrailers => (&mut self.response, true),
            _ => return None,
        };
        if trailers {
            if dir.trailers.is_none() && dir.body_accessible && dir.in_last_body_callback {
                dir.trailers = Some(HeaderMap::default());
                dir.trailers_accessible = true;
                dir.trailers_delivered = true;
            }
            if dir.trailers_accessible {
                dir.trailers.as_mut()
            } else {
                None
            }
        } else if dir.headers_accessible {
            dir.headers.as_mut()
        } else {
            None
        }
    }
}
