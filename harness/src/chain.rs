//! Envoy's filter manager around this one filter: what it forwards, buffers, holds, replies
//! locally or resets, following `source/common/http/filter_manager.cc` and the wasm filter's
//! `decode*`/`encode*` in `source/extensions/common/wasm/context.cc`.

use crate::abi::{self, DataStatus, HeadersStatus};
use crate::headers::HeaderMap;
use crate::host::Host;
use crate::options::FailurePolicy;
use crate::state::Deferred;
use crate::stream::{Hold, Stream, StreamId};

/// What a filter callback came to, after proxy-wasm-cpp-host's `CHECK_FAIL_HTTP`.
enum Outcome {
    /// The guest answered (raw status, whether `send_local_response` forced a stop).
    Answer(u64, bool),
    /// The guest was not called and the stream goes on (no context, no export, fail open).
    Pass,
    /// The VM failed: the stream got its 503 (or reset) and stops here.
    Failed,
}

const HEADERS_HOOKS: [&str; 2] = ["proxy_on_request_headers", "proxy_on_response_headers"];
const BODY_HOOKS: [&str; 2] = ["proxy_on_request_body", "proxy_on_response_body"];
const TRAILERS_HOOKS: [&str; 2] = ["proxy_on_request_trailers", "proxy_on_response_trailers"];

fn hook(hooks: [&'static str; 2], response: bool) -> &'static str {
    if response {
        hooks[1]
    } else {
        hooks[0]
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl Host {
    pub(crate) fn stream_ref(&self, id: StreamId) -> Option<&Stream> {
        self.vm.state().world.streams.get(&id)
    }

    pub(crate) fn stream_mut(&mut self, id: StreamId) -> Option<&mut Stream> {
        self.vm.state_mut().world.streams.get_mut(&id)
    }

    fn aborted(&self, id: StreamId, response: bool) -> bool {
        self.stream_ref(id).is_none_or(|s| {
            if response {
                s.response_aborted
            } else {
                s.request_aborted
            }
        })
    }

    /// Whether the filter is out of the picture for this direction.
    fn filter_skipped(&self, id: StreamId, response: bool) -> bool {
        self.stream_ref(id)
            .is_none_or(|s| s.bypass || (response && s.failure_reply_sent))
    }

    fn vm_failed_for(&self, id: StreamId) -> bool {
        let state = self.vm.state();
        state.vm.failed
            || self
                .stream_ref(id)
                .is_none_or(|s| s.generation != state.world.generation)
    }

    /// proxy-wasm-cpp-host `CHECK_FAIL_HTTP`: fail open goes on; otherwise the first failure
    /// sends Envoy's `failStream` local reply (503, `wasm_fail_stream`).
    fn fail_check(&mut self, id: StreamId) -> Outcome {
        if self.vm.state().world.options.failure_policy == FailurePolicy::FailOpen {
            return Outcome::Pass;
        }
        let first = self.stream_mut(id).is_some_and(|s| {
            let first = !s.stream_failed && !s.failure_reply_sent;
            s.stream_failed = true;
            first
        });
        if first {
            if let Some(s) = self.stream_mut(id) {
                s.failure_reply_sent = true;
            }
            self.local_reply(id, 503, Vec::new(), Vec::new(), true);
        }
        Outcome::Failed
    }

    /// Calls one filter callback of the stream's context.
    fn run_filter(&mut self, id: StreamId, name: &str, extra: &[i32]) -> Outcome {
        if self.vm_failed_for(id) {
            return self.fail_check(id);
        }
        let Some((context, created)) = self
            .stream_ref(id)
            .map(|s| (s.context_id, s.context_created))
        else {
            return Outcome::Pass;
        };
        if !created {
            return Outcome::Pass;
        }
        let mut args = vec![i32::from_ne_bytes(context.to_ne_bytes())];
        args.extend_from_slice(extra);
        match self.vm.call(context, name, &args) {
            Ok(Some(raw)) => Outcome::Answer(raw, self.vm.state().vm.stop_next_iteration),
            // Not exported: Envoy's host skips the callback and the stream goes on (Continue).
            Ok(None) => Outcome::Pass,
            Err(_) => self.fail_check(id),
        }
    }

    /// Envoy's `onCreate`: the context is created in the VM at the first request callback.
    fn ensure_context(&mut self, id: StreamId) {
        if self.vm_failed_for(id) {
            return;
        }
        let root = self.vm.state().vm.root_id;
        let Some((context, created)) = self
            .stream_ref(id)
            .map(|s| (s.context_id, s.context_created))
        else {
            return;
        };
        if created {
            return;
        }
        if let Some(s) = self.stream_mut(id) {
            s.context_created = true;
        }
        let args = [context, root].map(|v| i32::from_ne_bytes(v.to_ne_bytes()));
        let _ = self.vm.call(context, "proxy_on_context_create", &args);
        self.run_deferred();
    }

    /// `decodeHeaders` / `encodeHeaders` of this filter.
    pub(crate) fn headers_in(
        &mut self,
        id: StreamId,
        response: bool,
        headers: HeaderMap,
        end: bool,
        skip: bool,
    ) {
        if self.aborted(id, response) {
            return;
        }
        let n = headers.len();
        if let Some(s) = self.stream_mut(id) {
            let dir = s.direction_mut(response);
            dir.headers = Some(headers);
            dir.headers_end_stream = end;
            dir.end_received = end;
        }
        if skip || self.filter_skipped(id, response) {
            self.forward_headers(id, response, end);
            return;
        }
        if !response {
            self.ensure_context(id);
        }
        if let Some(s) = self.stream_mut(id) {
            s.direction_mut(response).headers_accessible = true;
        }
        let allow = self
            .vm
            .state()
            .world
            .options
            .allow_on_headers_stop_iteration;
        let status = match self.run_filter(
            id,
            hook(HEADERS_HOOKS, response),
            &[count(n), i32::from(end)],
        ) {
            Outcome::Answer(raw, stop) => abi::headers_status(raw, stop, allow),
            Outcome::Pass => HeadersStatus::Continue,
            Outcome::Failed => HeadersStatus::StopAll,
        };
        if !self.aborted(id, response) {
            match status {
                HeadersStatus::Continue => {
                    if let Some(s) = self.stream_mut(id) {
                        s.direction_mut(response).headers_accessible = false;
                    }
                    self.forward_headers(id, response, end);
                }
                HeadersStatus::StopIteration => self.set_hold(id, response, Hold::Headers),
                HeadersStatus::StopAll => self.set_hold(id, response, Hold::All),
            }
        }
        self.run_deferred();
    }

    fn set_hold(&mut self, id: StreamId, response: bool, hold: Hold) {
        if let Some(s) = self.stream_mut(id) {
            s.direction_mut(response).hold = Some(hold);
        }
    }

    /// `decodeData` / `encodeData` of this filter.
    pub(crate) fn data_in(
        &mut self,
        id: StreamId,
        response: bool,
        chunk: Vec<u8>,
        end: bool,
        skip: bool,
    ) {
        if self.aborted(id, response) {
            return;
        }
        let skipped = skip || self.filter_skipped(id, response);
        let limit = self.vm.state().world.options.buffer_limit;
        let Some(s) = self.stream_mut(id) else {
            return;
        };
        let dir = s.direction_mut(response);
        dir.end_received |= end;
        dir.body.extend_from_slice(&chunk);
        if skipped {
            self.forward_body(id, response);
            return;
        }
        // Stopped for all frames: the filter manager buffers (with flow control, no 413).
        if dir.hold == Some(Hold::All) {
            return;
        }
        // The wasm filter buffered before (`addDecodedData`): the new chunk joins the
        // buffer, whose watermark may trip before the guest is called.
        if dir.buffering && dir.body.len() > limit {
            self.too_large(id, response);
            return;
        }
        self.deliver_body(id, response);
    }

    /// Calls the body callback with everything not yet forwarded.
    fn deliver_body(&mut self, id: StreamId, response: bool) {
        let Some(s) = self.stream_mut(id) else {
            return;
        };
        let dir = s.direction_mut(response);
        dir.body_accessible = true;
        let end = dir.end_received && dir.trailers.is_none();
        dir.in_last_body_callback = end;
        let size = dir.body.len();
        let status = match self.run_filter(
            id,
            hook(BODY_HOOKS, response),
            &[count(size), i32::from(end)],
        ) {
            Outcome::Answer(raw, stop) => abi::data_status(raw, stop),
            Outcome::Pass => DataStatus::Continue,
            Outcome::Failed => DataStatus::StopNoBuffer,
        };
        let limit = self.vm.state().world.options.buffer_limit;
        if let Some(s) = self.stream_mut(id) {
            s.direction_mut(response).in_last_body_callback = false;
        }
        if !self.aborted(id, response) {
            match status {
                DataStatus::Continue => self.continue_chain(id, response),
                DataStatus::StopAndBuffer => {
                    let over = self.stream_mut(id).is_some_and(|s| {
                        let dir = s.direction_mut(response);
                        dir.buffering = true;
                        dir.data_stopped = true;
                        dir.body.len() > limit
                    });
                    if over {
                        self.too_large(id, response);
                    }
                }
                DataStatus::StopNoBuffer => {
                    if let Some(s) = self.stream_mut(id) {
                        s.direction_mut(response).data_stopped = true;
                    }
                }
            }
        }
        self.run_deferred();
    }

    /// `decodeTrailers` / `encodeTrailers` of this filter.
    pub(crate) fn trailers_in(&mut self, id: StreamId, response: bool, trailers: HeaderMap) {
        if self.aborted(id, response) {
            return;
        }
        let skipped = self.filter_skipped(id, response);
        let Some(s) = self.stream_mut(id) else {
            return;
        };
        let dir = s.direction_mut(response);
        dir.end_received = true;
        dir.trailers = Some(trailers);
        if skipped {
            self.continue_chain(id, response);
            return;
        }
        if dir.hold == Some(Hold::All) {
            return;
        }
        self.deliver_trailers(id, response);
    }

    fn deliver_trailers(&mut self, id: StreamId, response: bool) {
        let Some(s) = self.stream_mut(id) else {
            return;
        };
        let dir = s.direction_mut(response);
        dir.trailers_accessible = true;
        dir.trailers_delivered = true;
        let n = dir.trailers.as_ref().map_or(0, HeaderMap::len);
        let go_on = match self.run_filter(id, hook(TRAILERS_HOOKS, response), &[count(n)]) {
            Outcome::Answer(raw, stop) => raw == 0 && !stop,
            Outcome::Pass => true,
            Outcome::Failed => false,
        };
        if !self.aborted(id, response) {
            if go_on {
                if let Some(s) = self.stream_mut(id) {
                    s.direction_mut(response).trailers_accessible = false;
                }
                self.continue_chain(id, response);
            } else if let Some(s) = self.stream_mut(id) {
                s.direction_mut(response).trailers_held = true;
            }
        }
        self.run_deferred();
    }

    /// The filter manager's `commonContinue` for a filter stopped on one frame: held headers,
    /// then the buffered body (as one chunk), then trailers go on past this filter.
    fn continue_chain(&mut self, id: StreamId, response: bool) {
        let Some(s) = self.stream_mut(id) else {
            return;
        };
        let dir = s.direction_mut(response);
        let forward_headers = !dir.headers_forwarded && dir.headers.is_some();
        let body_pending = !dir.body.is_empty();
        let end_with_headers = dir.headers_end_stream;
        dir.hold = None;
        dir.buffering = false;
        dir.data_stopped = false;
        dir.trailers_held = false;
        dir.body_accessible = false;
        if forward_headers {
            self.forward_headers(id, response, end_with_headers);
        }
        let Some(s) = self.stream_mut(id) else {
            return;
        };
        let dir = s.direction_mut(response);
        let needs_end = dir.end_received && dir.trailers.is_none() && !dir.complete;
        if body_pending || needs_end {
            self.forward_body(id, response);
        }
        let Some(s) = self.stream_mut(id) else {
            return;
        };
        let dir = s.direction_mut(response);
        if dir.trailers.is_some() && !dir.complete {
            if dir.trailers_delivered || self.filter_skipped(id, response) {
                self.forward_trailers(id, response);
            } else {
                self.deliver_trailers(id, response);
            }
        }
    }

    /// `continue_stream` after the VM call (`continueDecoding` / `continueEncoding`).
    pub(crate) fn resume(&mut self, id: StreamId, response: bool) {
        if self.aborted(id, response) {
            return;
        }
        let Some(s) = self.stream_mut(id) else {
            return;
        };
        let dir = s.direction_mut(response);
        if dir.hold == Some(Hold::All) {
            // Stopped for all frames: headers go on, then the buffered body and trailers are
            // delivered to this filter (`iterate_from_current_filter_`).
            dir.hold = None;
            let end = dir.headers_end_stream;
            let body_waits =
                !dir.body.is_empty() || (dir.end_received && !end && dir.trailers.is_none());
            let trailers_wait = dir.trailers.is_some();
            self.forward_headers(id, response, end);
            if body_waits {
                self.deliver_body(id, response);
            } else if trailers_wait {
                self.deliver_trailers(id, response);
            }
        } else if dir.hold == Some(Hold::Headers) || dir.data_stopped || dir.trailers_held {
            self.continue_chain(id, response);
        }
    }

    fn forward_headers(&mut self, id: StreamId, response: bool, end: bool) {
        let aborted = self.aborted(id, response);
        let Some(s) = self.stream_mut(id) else {
            return;
        };
        let dir = s.direction_mut(response);
        dir.hold = None;
        dir.headers_forwarded = true;
        if end {
            dir.complete = true;
        }
        let Some(headers) = dir.headers.clone() else {
            return;
        };
        if aborted {
            return;
        }
        if response {
            s.downstream.send_headers(&headers, end);
            s.response_headers_sent = true;
        } else {
            s.upstream.send_headers(&headers, end);
        }
    }

    fn forward_body(&mut self, id: StreamId, response: bool) {
        let aborted = self.aborted(id, response);
        let Some(s) = self.stream_mut(id) else {
            return;
        };
        let dir = s.direction_mut(response);
        let data = std::mem::take(&mut dir.body);
        let end = dir.end_received && dir.trailers.is_none();
        if end {
            dir.complete = true;
        }
        if aborted {
            return;
        }
        if response {
            s.downstream.send_data(data, end);
        } else {
            s.upstream.send_data(data, end);
        }
    }

    fn forward_trailers(&mut self, id: StreamId, response: bool) {
        let aborted = self.aborted(id, response);
        let Some(s) = self.stream_mut(id) else {
            return;
        };
        let dir = s.direction_mut(response);
        dir.complete = true;
        let Some(trailers) = dir.trailers.clone() else {
            return;
        };
        if aborted {
            return;
        }
        if response {
            s.downstream.send_trailers(&trailers);
        } else {
            s.upstream.send_trailers(&trailers);
        }
    }

    /// The buffer limit tripped with StopIterationAndBuffer: `requestDataTooLarge` (413) or
    /// `responseDataTooLarge` (500, which becomes a reset once headers went out).
    fn too_large(&mut self, id: StreamId, response: bool) {
        let (code, text) = if response {
            (500, "Internal Server Error")
        } else {
            (413, "Payload Too Large")
        };
        self.local_reply(id, code, text.as_bytes().to_vec(), Vec::new(), false);
    }

    /// `DownstreamFilterManager::sendLocalReply`: through the encoder filters (this one
    /// included) while no response started, straight to the caller while response headers are
    /// in the chain but not sent, else a reset.
    pub(crate) fn local_reply(
        &mut self,
        id: StreamId,
        code: u32,
        body: Vec<u8>,
        extra: Vec<(String, String)>,
        skip_filter: bool,
    ) {
        let Some(s) = self.stream_mut(id) else {
            return;
        };
        if s.is_reset() || s.response.complete {
            return;
        }
        s.request_aborted = true;
        if s.upstream.headers.is_some() && !s.response.end_received {
            s.upstream.reset = true;
        }
        let mut headers = HeaderMap::default();
        headers.add(":status", &code.to_string());
        for (k, v) in &extra {
            headers.add(k, v);
        }
        if !body.is_empty() {
            headers.replace("content-length", &body.len().to_string());
            if headers.get("content-type").is_none() {
                headers.add("content-type", "text/plain");
            }
        }
        if s.response.headers.is_none() {
            let end = body.is_empty();
            self.headers_in(id, true, headers, end, skip_filter);
            if !end {
                self.data_in(id, true, body, true, skip_filter);
            }
        } else if !s.response_headers_sent {
            s.response_aborted = true;
            s.response.complete = true;
            s.downstream.send_headers(&headers, body.is_empty());
            s.downstream.body.clear();
            s.downstream.body_chunks.clear();
            s.downstream.send_data(body, true);
        } else {
            self.reset(id);
        }
    }

    pub(crate) fn reset(&mut self, id: StreamId) {
        if let Some(s) = self.stream_mut(id) {
            s.request_aborted = true;
            s.response_aborted = true;
            s.downstream.reset = true;
            if s.upstream.headers.is_some() {
                s.upstream.reset = true;
            }
        }
    }

    /// Envoy's after-VM-call actions, in order, until none are left.
    pub(crate) fn run_deferred(&mut self) {
        loop {
            let actions = std::mem::take(&mut self.vm.state_mut().vm.deferred);
            if actions.is_empty() {
                return;
            }
            for action in actions {
                match action {
                    Deferred::Continue(id, t) => {
                        self.resume(id, t == crate::abi::StreamType::Response);
                    }
                    Deferred::Close(id) => self.reset(id),
                    Deferred::LocalReply {
                        stream,
                        status,
                        body,
                        headers,
                    } => self.local_reply(stream, status, body, headers, false),
                    Deferred::QueueReady { root, token } => {
                        let args = [root, token].map(|v| i32::from_ne_bytes(v.to_ne_bytes()));
                        let _ = self.vm.call(root, "proxy_on_queue_ready", &args);
                    }
                }
            }
        }
    }
}
