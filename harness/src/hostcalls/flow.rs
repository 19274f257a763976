//! The host calls that move a stream on: continue, close, and a local reply. Each is deferred until
//! the VM call returns, as Envoy's `addAfterVmCallAction` does.

use wasmtime::Caller;

use crate::abi::{status, StreamType};
use crate::memory::{word, Guest};
use crate::pairs;
use crate::state::{Deferred, State};

pub(super) fn continue_stream(mut caller: Caller<'_, State>, t: i32) -> i32 {
    let Some(t) = StreamType::from_raw(word(t)) else {
        return status::BAD_ARGUMENT;
    };
    let state = caller.data_mut();
    match t {
        StreamType::Downstream => return status::OK,
        StreamType::Upstream => return status::UNIMPLEMENTED,
        StreamType::Request | StreamType::Response => {}
    }
    if let Some(id) = state.stream_id() {
        state.vm.deferred.push(Deferred::Continue(id, t));
    }
    // Envoy's `Context::continueStream` forgets the request maps for either direction.
    if let Some(stream) = state.stream_mut() {
        stream.request.headers_accessible = false;
        stream.request.body_accessible = false;
        stream.request.trailers_accessible = false;
    }
    status::OK
}

pub(super) fn close_stream(mut caller: Caller<'_, State>, t: i32) -> i32 {
    let Some(t) = StreamType::from_raw(word(t)) else {
        return status::BAD_ARGUMENT;
    };
    let state = caller.data_mut();
    if matches!(t, StreamType::Request | StreamType::Response) {
        if let Some(id) = state.stream_id() {
            state.vm.deferred.push(Deferred::Close(id));
        }
    }
    status::OK
}

#[allow(clippy::too_many_arguments)]
pub(super) fn send_local_response(
    mut caller: Caller<'_, State>,
    code: i32,
    details_ptr: i32,
    details_len: i32,
    body_ptr: i32,
    body_len: i32,
    headers_ptr: i32,
    headers_len: i32,
    _grpc_status: i32,
) -> i32 {
    let mut g = Guest::new(&mut caller);
    let (Some(_details), Some(body), Some(headers)) = (
        g.read(word(details_ptr), word(details_len)),
        g.read(word(body_ptr), word(body_len)),
        g.read(word(headers_ptr), word(headers_len)),
    ) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    let state = g.state();
    if let Some(stream) = state.stream_id() {
        state.vm.deferred.push(Deferred::LocalReply {
            stream,
            status: word(code),
            body,
            headers: pairs::decode(&headers),
        });
    }
    state.vm.stop_next_iteration = true;
    status::OK
}
