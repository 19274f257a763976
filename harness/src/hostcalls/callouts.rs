//! The callout host calls: `proxy_http_call` with Envoy's checks (a known cluster, `:method`,
//! `:path` and `:authority`), and the gRPC calls, which fail as Envoy's do with no gRPC service.

use std::time::Duration;

use wasmtime::Caller;

use crate::abi::status;
use crate::callout::Callout;
use crate::headers::HeaderMap;
use crate::memory::{word, Guest};
use crate::pairs;
use crate::state::State;

#[allow(clippy::too_many_arguments)]
pub(super) fn http_call(
    mut caller: Caller<'_, State>,
    cluster_ptr: i32,
    cluster_len: i32,
    headers_ptr: i32,
    headers_len: i32,
    body_ptr: i32,
    body_len: i32,
    trailers_ptr: i32,
    trailers_len: i32,
    timeout_ms: i32,
    token_ptr: i32,
) -> i32 {
    let mut g = Guest::new(&mut caller);
    let (Some(cluster), Some(body), Some(headers), Some(trailers)) = (
        g.read_str(word(cluster_ptr), word(cluster_len)),
        g.read(word(body_ptr), word(body_len)),
        g.read(word(headers_ptr), word(headers_len)),
        g.read(word(trailers_ptr), word(trailers_len)),
    ) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    // The host writes the token slot first to check it before starting anything.
    if !g.write_u32(word(token_ptr), 0) {
        return status::INVALID_MEMORY_ACCESS;
    }
    let state = g.state();
    if timeout_ms < 0 || !state.world.options.clusters.contains(&cluster) {
        return status::BAD_ARGUMENT;
    }
    let mut map = HeaderMap::default();
    for (k, v) in pairs::decode(&headers) {
        map.add(&k, &v);
    }
    if [":path", ":method", ":authority"]
        .iter()
        .any(|h| map.get(h).is_none())
    {
        return status::BAD_ARGUMENT;
    }
    if !body.is_empty() {
        map.replace("content-length", &body.len().to_string());
    }
    let timeout = (timeout_ms > 0).then(|| Duration::from_millis(u64::from(word(timeout_ms))));
    let token = state.vm.next_http_token;
    state.vm.next_http_token = token.wrapping_add(1);
    let callout = Callout {
        token,
        cluster,
        headers: map.pairs().to_vec(),
        body,
        trailers: pairs::decode(&trailers),
        timeout,
        context_id: state.vm.context(),
        deadline: timeout.map(|t| state.world.now + t),
        generation: state.world.generation,
    };
    state.world.callouts.insert(token, callout);
    g.write_u32(word(token_ptr), token);
    status::OK
}

/// Envoy's `grpcCall` with no gRPC service configured: a cluster name that is not a
/// serialized `GrpcService` is looked up as a cluster, which does not exist: `ParseFailure`.
/// An empty service parses as an empty `GrpcService`, which has no client: `BadArgument`.
fn grpc_answer(g: &mut Guest<'_, '_>, service_ptr: i32, service_len: i32) -> i32 {
    match g.read(word(service_ptr), word(service_len)) {
        None => status::INVALID_MEMORY_ACCESS,
        Some(service) if service.is_empty() => status::BAD_ARGUMENT,
        Some(_) => status::PARSE_FAILURE,
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn grpc_call(
    mut caller: Caller<'_, State>,
    service_ptr: i32,
    service_len: i32,
    _: i32,
    _: i32,
    _: i32,
    _: i32,
    _: i32,
    _: i32,
    _: i32,
    _: i32,
    _timeout: i32,
    _token_ptr: i32,
) -> i32 {
    grpc_answer(&mut Guest::new(&mut caller), service_ptr, service_len)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn grpc_stream(
    mut caller: Caller<'_, State>,
    service_ptr: i32,
    service_len: i32,
    _: i32,
    _: i32,
    _: i32,
    _: i32,
    _: i32,
    _: i32,
    _token_ptr: i32,
) -> i32 {
    grpc_answer(&mut Guest::new(&mut caller), service_ptr, service_len)
}

/// Odd tokens are gRPC calls (`BadArgument` for a send), even ones streams; none exist.
pub(super) fn grpc_send(_token: i32, _ptr: i32, _len: i32, _end: i32) -> i32 {
    if _token & 1 == 1 {
        status::BAD_ARGUMENT
    } else {
        status::NOT_FOUND
    }
}
