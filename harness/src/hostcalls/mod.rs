//! The `env` host functions of the proxy-wasm ABI 0.2.1, following proxy-wasm-cpp-host
//! `src/exports.cc` and Envoy's `source/extensions/common/wasm/context.cc`.

use std::time::Duration;

use wasmtime::{Caller, Linker};

use crate::abi::{status, BufferType, MapType, StreamType};
use crate::buffers;
use crate::callout::Callout;
use crate::memory::{word, Guest};
use crate::options::LogLevel;
use crate::pairs;
use crate::state::{Deferred, State};
use crate::stream::Stream;

type R = wasmtime::Result<i32>;

pub(crate) fn link(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.func_wrap("env", "proxy_log", log)?;
    linker.func_wrap("env", "proxy_get_log_level", get_log_level)?;
    linker.func_wrap(
        "env",
        "proxy_get_current_time_nanoseconds",
        get_current_time,
    )?;
    linker.func_wrap("env", "proxy_set_tick_period_milliseconds", set_tick_period)?;
    linker.func_wrap("env", "proxy_get_buffer_bytes", get_buffer_bytes)?;
    linker.func_wrap("env", "proxy_set_buffer_bytes", set_buffer_bytes)?;
    linker.func_wrap("env", "proxy_get_buffer_status", get_buffer_status)?;
    linker.func_wrap("env", "proxy_get_header_map_pairs", get_header_map_pairs)?;
    linker.func_wrap("env", "proxy_set_header_map_pairs", set_header_map_pairs)?;
    linker.func_wrap("env", "proxy_get_header_map_size", get_header_map_size)?;
    linker.func_wrap("env", "proxy_get_header_map_value", get_header_map_value)?;
    linker.func_wrap("env", "proxy_add_header_map_value", add_header_map_value)?;
    linker.func_wrap(
        "env",
        "proxy_replace_header_map_value",
        replace_header_map_value,
    )?;
    linker.func_wrap(
        "env",
        "proxy_remove_header_map_value",
        remove_header_map_value,
    )?;
    linker.func_wrap("env", "proxy_get_property", get_property)?;
    linker.func_wrap("env", "proxy_set_property", set_property)?;
    linker.func_wrap("env", "proxy_get_shared_data", get_shared_data)?;
    linker.func_wrap("env", "proxy_set_shared_data", set_shared_data)?;
    linker.func_wrap("env", "proxy_register_shared_queue", register_shared_queue)?;
    linker.func_wrap("env", "proxy_resolve_shared_queue", resolve_shared_queue)?;
    linker.func_wrap("env", "proxy_dequeue_shared_queue", dequeue_shared_queue)?;
    linker.func_wrap("env", "proxy_enqueue_shared_queue", enqueue_shared_queue)?;
    linker.func_wrap("env", "proxy_continue_stream", continue_stream)?;
    linker.func_wrap("env", "proxy_continue_request", |c: Caller<'_, State>| {
        continue_stream(c, 0)
    })?;
    linker.func_wrap("env", "proxy_continue_response", |c: Caller<'_, State>| {
        continue_stream(c, 1)
    })?;
    linker.func_wrap("env", "proxy_close_stream", close_stream)?;
    linker.func_wrap("env", "proxy_send_local_response", send_local_response)?;
    linker.func_wrap("env", "proxy_clear_route_cache", || status::OK)?;
    linker.func_wrap("env", "proxy_http_call", http_call)?;
    linker.func_wrap("env", "proxy_grpc_call", grpc_call)?;
    linker.func_wrap("env", "proxy_grpc_stream", grpc_stream)?;
    linker.func_wrap("env", "proxy_grpc_send", grpc_send)?;
    linker.func_wrap("env", "proxy_grpc_cancel", |_: i32| status::NOT_FOUND)?;
    linker.func_wrap("env", "proxy_grpc_close", |_: i32| status::NOT_FOUND)?;
    linker.func_wrap("env", "proxy_get_status", get_status)?;
    linker.func_wrap("env", "proxy_set_effective_context", set_effective_context)?;
    linker.func_wrap("env", "proxy_call_foreign_function", call_foreign_function)?;
    linker.func_wrap("env", "proxy_done", || status::NOT_FOUND)?;
    linker.func_wrap("env", "proxy_define_metric", define_metric)?;
    linker.func_wrap("env", "proxy_get_metric", get_metric)?;
    linker.func_wrap("env", "proxy_record_metric", record_metric)?;
    linker.func_wrap("env", "proxy_increment_metric", increment_metric)?;
    linker.func_wrap("env", "emscripten_notify_memory_growth", |_: i32| {})?;
    linker.func_wrap("env", "pthread_equal", |a: i32, b: i32| i32::from(a == b))?;
    Ok(())
}

fn ok_or_fault(ok: bool) -> i32 {
    if ok {
        status::OK
    } else {
        status::INVALID_MEMORY_ACCESS
    }
}

fn log(mut caller: Caller<'_, State>, level: i32, ptr: i32, len: i32) -> i32 {
    let Some(level) = LogLevel::from_raw(word(level)) else {
        return status::BAD_ARGUMENT;
    };
    let mut g = Guest::new(&mut caller);
    let Some(message) = g.read_str(word(ptr), word(len)) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    g.state().world.log(level, message);
    status::OK
}

fn get_log_level(mut caller: Caller<'_, State>, out: i32) -> i32 {
    let level = caller.data().world.options.log_level.raw();
    ok_or_fault(Guest::new(&mut caller).write_u32(word(out), level))
}

fn get_current_time(mut caller: Caller<'_, State>, out: i32) -> i32 {
    let now = crate::clock::wall_nanos(&caller.data().world);
    ok_or_fault(Guest::new(&mut caller).write_u64(word(out), now))
}

fn set_tick_period(mut caller: Caller<'_, State>, millis: i32) -> i32 {
    let state = caller.data_mut();
    let period = Duration::from_millis(u64::from(word(millis)));
    if period.is_zero() {
        state.vm.tick_period = None;
    } else {
        state.vm.tick_period = Some(period);
        state.vm.next_tick = state.world.now + period;
    }
    status::OK
}

/// Envoy's `Context::getBuffer`: `None` is a null buffer (`NotFound`).
fn buffer(state: &State, t: BufferType) -> Option<Vec<u8>> {
    match t {
        BufferType::VmConfiguration => Some(state.world.options.vm_config.clone()),
        BufferType::PluginConfiguration => state
            .vm
            .in_configure
            .then(|| state.world.options.plugin_config.clone()),
        BufferType::RequestBody | BufferType::ResponseBody => {
            let response = t == BufferType::ResponseBody;
            Some(
                state
                    .stream()
                    .map(|s| s.direction(response))
                    .filter(|d| d.body_accessible)
                    .map(|d| d.body.clone())
                    .unwrap_or_default(),
            )
        }
        BufferType::CallResponseBody => state.vm.call_response.as_ref().map(|r| r.body.clone()),
        _ => Some(Vec::new()),
    }
}

fn get_buffer_bytes(
    mut caller: Caller<'_, State>,
    t: i32,
    start: i32,
    length: i32,
    ptr_ptr: i32,
    size_ptr: i32,
) -> R {
    let Some(t) = BufferType::from_raw(word(t)) else {
        return Ok(status::BAD_ARGUMENT);
    };
    let Some(data) = buffer(caller.data(), t) else {
        return Ok(status::NOT_FOUND);
    };
    let start = usize::try_from(word(start)).unwrap_or(usize::MAX);
    let length = usize::try_from(word(length)).unwrap_or(usize::MAX);
    let slice = data
        .get(start..)
        .map(|rest| rest.get(..length.min(rest.len())).unwrap_or_default())
        .unwrap_or_default();
    let ok = Guest::new(&mut caller).copy_out(slice, word(ptr_ptr), word(size_ptr))?;
    Ok(ok_or_fault(ok))
}

fn get_buffer_status(mut caller: Caller<'_, State>, t: i32, len_ptr: i32, flags_ptr: i32) -> i32 {
    let Some(t) = BufferType::from_raw(word(t)) else {
        return status::BAD_ARGUMENT;
    };
    let Some(data) = buffer(caller.data(), t) else {
        return status::NOT_FOUND;
    };
    let mut g = Guest::new(&mut caller);
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    ok_or_fault(g.write_u32(word(len_ptr), len) && g.write_u32(word(flags_ptr), 0))
}

fn set_buffer_bytes(
    mut caller: Caller<'_, State>,
    t: i32,
    start: i32,
    length: i32,
    ptr: i32,
    len: i32,
) -> i32 {
    let Some(t) = BufferType::from_raw(word(t)) else {
        return status::BAD_ARGUMENT;
    };
    let mut g = Guest::new(&mut caller);
    if buffer(g.state(), t).is_none() {
        return status::NOT_FOUND;
    }
    let Some(data) = g.read(word(ptr), word(len)) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    let response = match t {
        BufferType::RequestBody => false,
        BufferType::ResponseBody => true,
        // Configuration and callout bodies are immutable.
        _ => return status::BAD_ARGUMENT,
    };
    let start = usize::try_from(word(start)).unwrap_or(usize::MAX);
    let length = usize::try_from(word(length)).unwrap_or(usize::MAX);
    match g.state().stream_mut().map(|s| s.direction_mut(response)) {
        Some(dir) if dir.body_accessible => buffers::copy_from(&mut dir.body, start, length, &data),
        _ => status::BAD_ARGUMENT,
    }
}

/// Envoy's `getConstMap` as pairs; `None` is a null map.
fn const_map(state: &State, t: MapType) -> Option<Vec<(String, String)>> {
    match t {
        MapType::CallResponseHeaders => state.vm.call_response.as_ref().map(|r| r.headers.clone()),
        MapType::CallResponseTrailers => {
            state.vm.call_response.as_ref().map(|r| r.trailers.clone())
        }
        MapType::GrpcInitialMetadata | MapType::GrpcTrailingMetadata => None,
        _ => state
            .stream()
            .and_then(|s| s.map(t))
            .map(|m| m.pairs().to_vec()),
    }
}

fn map_type(t: i32) -> Option<MapType> {
    MapType::from_raw(word(t))
}

fn get_header_map_pairs(mut caller: Caller<'_, State>, t: i32, ptr_ptr: i32, size_ptr: i32) -> R {
    let Some(t) = map_type(t) else {
        return Ok(status::BAD_ARGUMENT);
    };
    let pairs = const_map(caller.data(), t).unwrap_or_default();
    let bytes = if pairs.is_empty() {
        Vec::new()
    } else {
        pairs::encode(&pairs)
    };
    let ok = Guest::new(&mut caller).copy_out(&bytes, word(ptr_ptr), word(size_ptr))?;
    Ok(ok_or_fault(ok))
}

fn get_header_map_size(mut caller: Caller<'_, State>, t: i32, out: i32) -> i32 {
    let Some(t) = map_type(t) else {
        return status::BAD_ARGUMENT;
    };
    let Some(size) = caller
        .data_mut()
        .stream_mut()
        .and_then(|s| s.map_mut(t))
        .map(|m| {
            m.pairs()
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
        })
    else {
        return status::BAD_ARGUMENT;
    };
    let size = u32::try_from(size).unwrap_or(u32::MAX);
    ok_or_fault(Guest::new(&mut caller).write_u32(word(out), size))
}

fn get_header_map_value(
    mut caller: Caller<'_, State>,
    t: i32,
    key_ptr: i32,
    key_len: i32,
    ptr_ptr: i32,
    size_ptr: i32,
) -> R {
    let Some(t) = map_type(t) else {
        return Ok(status::BAD_ARGUMENT);
    };
    let mut g = Guest::new(&mut caller);
    let Some(key) = g.read_str(word(key_ptr), word(key_len)) else {
        return Ok(status::INVALID_MEMORY_ACCESS);
    };
    let in_log_phase = g.state().stream().is_some_and(|s| s.in_log_phase);
    let Some(pairs) = const_map(g.state(), t) else {
        return Ok(if in_log_phase {
            status::NOT_FOUND
        } else {
            status::BAD_ARGUMENT
        });
    };
    let key = key.to_ascii_lowercase();
    let Some(value) = pairs.into_iter().find(|(k, _)| *k == key).map(|(_, v)| v) else {
        return Ok(status::NOT_FOUND);
    };
    let ok = g.copy_out(value.as_bytes(), word(ptr_ptr), word(size_ptr))?;
    Ok(ok_or_fault(ok))
}

/// Runs a mutation on Envoy's `getMap`; a null map is `BadArgument`.
fn with_map(
    g: &mut Guest<'_, '_>,
    t: MapType,
    f: impl FnOnce(&mut crate::headers::HeaderMap),
) -> i32 {
    match g.state().stream_mut().and_then(|s| s.map_mut(t)) {
        Some(map) => {
            f(map);
            status::OK
        }
        None => status::BAD_ARGUMENT,
    }
}

fn set_header_map_pairs(mut caller: Caller<'_, State>, t: i32, ptr: i32, len: i32) -> i32 {
    let Some(t) = map_type(t) else {
        return status::BAD_ARGUMENT;
    };
    let mut g = Guest::new(&mut caller);
    let Some(bytes) = g.read(word(ptr), word(len)) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    let pairs = pairs::decode(&bytes);
    with_map(&mut g, t, |m| m.set_all(&pairs))
}

fn add_header_map_value(
    mut caller: Caller<'_, State>,
    t: i32,
    key_ptr: i32,
    key_len: i32,
    value_ptr: i32,
    value_len: i32,
) -> i32 {
    let Some(t) = map_type(t) else {
        return status::BAD_ARGUMENT;
    };
    let mut g = Guest::new(&mut caller);
    let (Some(key), Some(value)) = (
        g.read_str(word(key_ptr), word(key_len)),
        g.read_str(word(value_ptr), word(value_len)),
    ) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    with_map(&mut g, t, |m| m.add(&key, &value))
}

fn replace_header_map_value(
    mut caller: Caller<'_, State>,
    t: i32,
    key_ptr: i32,
    key_len: i32,
    value_ptr: i32,
    value_len: i32,
) -> i32 {
    let Some(t) = map_type(t) else {
        return status::BAD_ARGUMENT;
    };
    let mut g = Guest::new(&mut caller);
    let (Some(key), Some(value)) = (
        g.read_str(word(key_ptr), word(key_len)),
        g.read_str(word(value_ptr), word(value_len)),
    ) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    with_map(&mut g, t, |m| m.replace(&key, &value))
}

fn remove_header_map_value(
    mut caller: Caller<'_, State>,
    t: i32,
    key_ptr: i32,
    key_len: i32,
) -> i32 {
    let Some(t) = map_type(t) else {
        return status::BAD_ARGUMENT;
    };
    let mut g = Guest::new(&mut caller);
    let Some(key) = g.read_str(word(key_ptr), word(key_len)) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    with_map(&mut g, t, |m| m.remove(&key))
}

fn property_key(path: &[u8]) -> String {
    path.split(|b| *b == 0)
        .map(String::from_utf8_lossy)
        .collect::<Vec<_>>()
        .join(".")
}

fn get_property(
    mut caller: Caller<'_, State>,
    ptr: i32,
    len: i32,
    ptr_ptr: i32,
    size_ptr: i32,
) -> R {
    let mut g = Guest::new(&mut caller);
    let Some(path) = g.read(word(ptr), word(len)) else {
        return Ok(status::INVALID_MEMORY_ACCESS);
    };
    let key = property_key(&path);
    let state = g.state();
    let options = &state.world.options;
    let value = state
        .stream()
        .and_then(|s| s.properties.get(&key).cloned())
        .or_else(|| options.properties.get(&key).cloned())
        .or_else(|| state.stream().and_then(|s| request_property(s, &key)))
        .or_else(|| match key.as_str() {
            "plugin_name" => Some(options.plugin_name.clone().into_bytes()),
            "plugin_root_id" => Some(options.root_id.clone().into_bytes()),
            "plugin_vm_id" => Some(options.vm_id.clone().into_bytes()),
            _ => None,
        });
    let Some(value) = value else {
        return Ok(status::NOT_FOUND);
    };
    let ok = g.copy_out(&value, word(ptr_ptr), word(size_ptr))?;
    Ok(ok_or_fault(ok))
}

/// Envoy's `request.*` attributes that come from the request headers (`RequestWrapper` over the
/// filter's `request_headers_`): readable while the request headers are (so not once
/// `on_request_headers` continued), NotFound when the header is missing.
fn request_property(stream: &Stream, key: &str) -> Option<Vec<u8>> {
    let headers = stream.map(MapType::RequestHeaders)?;
    let path = || headers.get(":path");
    let value = match key {
        "request.path" => path()?.to_owned(),
        "request.url_path" => path()?.split('?').next()?.to_owned(),
        "request.query" => path()?.split_once('?').map(|(_, q)| q)?.to_owned(),
        "request.host" => headers.get(":authority")?.to_owned(),
        "request.scheme" => headers.get(":scheme")?.to_owned(),
        "request.method" => headers.get(":method")?.to_owned(),
        "request.referer" => headers.get("referer")?.to_owned(),
        "request.useragent" => headers.get("user-agent")?.to_owned(),
        "request.id" => headers.get("x-request-id")?.to_owned(),
        _ => return None,
    };
    Some(value.into_bytes())
}

fn set_property(mut caller: Caller<'_, State>, ptr: i32, len: i32, vptr: i32, vlen: i32) -> i32 {
    let mut g = Guest::new(&mut caller);
    let (Some(path), Some(value)) = (g.read(word(ptr), word(len)), g.read(word(vptr), word(vlen)))
    else {
        return status::INVALID_MEMORY_ACCESS;
    };
    // Envoy keeps these as filter state of the stream; a root context has none.
    match g.state().stream_mut() {
        Some(stream) => {
            stream.properties.insert(property_key(&path), value);
            status::OK
        }
        None => status::NOT_FOUND,
    }
}

fn get_shared_data(
    mut caller: Caller<'_, State>,
    key_ptr: i32,
    key_len: i32,
    ptr_ptr: i32,
    size_ptr: i32,
    cas_ptr: i32,
) -> R {
    let mut g = Guest::new(&mut caller);
    let Some(key) = g.read_str(word(key_ptr), word(key_len)) else {
        return Ok(status::INVALID_MEMORY_ACCESS);
    };
    let Some((value, cas)) = g.state().world.shared_data.get(&key).cloned() else {
        return Ok(status::NOT_FOUND);
    };
    let ok = g.copy_out(&value, word(ptr_ptr), word(size_ptr))? && g.write_u32(word(cas_ptr), cas);
    Ok(ok_or_fault(ok))
}

fn set_shared_data(
    mut caller: Caller<'_, State>,
    key_ptr: i32,
    key_len: i32,
    value_ptr: i32,
    value_len: i32,
    cas: i32,
) -> i32 {
    let mut g = Guest::new(&mut caller);
    let (Some(key), Some(value)) = (
        g.read_str(word(key_ptr), word(key_len)),
        g.read(word(value_ptr), word(value_len)),
    ) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    g.state().world.shared_data.set(&key, &value, word(cas))
}

fn register_shared_queue(mut caller: Caller<'_, State>, ptr: i32, len: i32, token_ptr: i32) -> i32 {
    let mut g = Guest::new(&mut caller);
    let Some(name) = g.read_str(word(ptr), word(len)) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    let state = g.state();
    let owner = state.vm.root_id;
    let vm_id = state.world.options.vm_id.clone();
    let token = state.world.queues.register(&vm_id, &name, owner);
    ok_or_fault(g.write_u32(word(token_ptr), token))
}

fn resolve_shared_queue(
    mut caller: Caller<'_, State>,
    vm_ptr: i32,
    vm_len: i32,
    ptr: i32,
    len: i32,
    token_ptr: i32,
) -> i32 {
    let mut g = Guest::new(&mut caller);
    let (Some(vm_id), Some(name)) = (
        g.read_str(word(vm_ptr), word(vm_len)),
        g.read_str(word(ptr), word(len)),
    ) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    let state = g.state();
    let vm_id = if vm_id.is_empty() {
        state.world.options.vm_id.clone()
    } else {
        vm_id
    };
    match state.world.queues.resolve(&vm_id, &name) {
        Some(token) => ok_or_fault(g.write_u32(word(token_ptr), token)),
        None => status::NOT_FOUND,
    }
}

fn dequeue_shared_queue(
    mut caller: Caller<'_, State>,
    token: i32,
    ptr_ptr: i32,
    size_ptr: i32,
) -> R {
    let mut g = Guest::new(&mut caller);
    match g.state().world.queues.dequeue(word(token)) {
        Ok(value) => Ok(ok_or_fault(g.copy_out(
            &value,
            word(ptr_ptr),
            word(size_ptr),
        )?)),
        Err(code) => Ok(code),
    }
}

fn enqueue_shared_queue(mut caller: Caller<'_, State>, token: i32, ptr: i32, len: i32) -> i32 {
    let mut g = Guest::new(&mut caller);
    let Some(value) = g.read(word(ptr), word(len)) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    let state = g.state();
    match state.world.queues.enqueue(word(token), &value) {
        Ok(root) => {
            // Envoy posts on_queue_ready to the owning worker; here it runs after this call.
            state.vm.deferred.push(Deferred::QueueReady {
                root,
                token: word(token),
            });
            status::OK
        }
        Err(code) => code,
    }
}

fn continue_stream(mut caller: Caller<'_, State>, t: i32) -> i32 {
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

fn close_stream(mut caller: Caller<'_, State>, t: i32) -> i32 {
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
fn send_local_response(
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

#[allow(clippy::too_many_arguments)]
fn http_call(
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
    let mut map = crate::headers::HeaderMap::default();
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
fn grpc_call(
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
fn grpc_stream(
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
fn grpc_send(_token: i32, _ptr: i32, _len: i32, _end: i32) -> i32 {
    if _token & 1 == 1 {
        status::BAD_ARGUMENT
    } else {
        status::NOT_FOUND
    }
}

fn get_status(mut caller: Caller<'_, State>, code_ptr: i32, ptr_ptr: i32, size_ptr: i32) -> R {
    let (code, message) = caller.data().vm.status.clone();
    let mut g = Guest::new(&mut caller);
    if !g.write_u32(word(code_ptr), code) {
        return Ok(status::INVALID_MEMORY_ACCESS);
    }
    Ok(ok_or_fault(g.copy_out(
        message.as_bytes(),
        word(ptr_ptr),
        word(size_ptr),
    )?))
}

fn set_effective_context(mut caller: Caller<'_, State>, id: i32) -> i32 {
    let state = caller.data_mut();
    let id = word(id);
    if state.vm.contexts.contains_key(&id) {
        state.vm.effective_context = id;
        status::OK
    } else {
        status::BAD_ARGUMENT
    }
}

/// No foreign functions are registered in the harness: `NotFound`, after the memory checks.
fn call_foreign_function(
    mut caller: Caller<'_, State>,
    name_ptr: i32,
    name_len: i32,
    args_ptr: i32,
    args_len: i32,
    _results: i32,
    _results_size: i32,
) -> i32 {
    let mut g = Guest::new(&mut caller);
    if g.read(word(name_ptr), word(name_len)).is_none()
        || g.read(word(args_ptr), word(args_len)).is_none()
    {
        return status::INVALID_MEMORY_ACCESS;
    }
    status::NOT_FOUND
}

fn define_metric(mut caller: Caller<'_, State>, t: i32, ptr: i32, len: i32, id_ptr: i32) -> i32 {
    let mut g = Guest::new(&mut caller);
    let Some(name) = g.read_str(word(ptr), word(len)) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    match g.state().world.metrics.define(word(t), &name) {
        Ok(id) => ok_or_fault(g.write_u32(word(id_ptr), id)),
        Err(code) => code,
    }
}

fn get_metric(mut caller: Caller<'_, State>, id: i32, out: i32) -> i32 {
    match caller.data().world.metrics.get(word(id)) {
        Ok(value) => ok_or_fault(Guest::new(&mut caller).write_u64(word(out), value)),
        Err(code) => code,
    }
}

fn record_metric(mut caller: Caller<'_, State>, id: i32, value: i64) -> i32 {
    let value = u64::from_ne_bytes(value.to_ne_bytes());
    caller.data_mut().world.metrics.record(word(id), value)
}

fn increment_metric(mut caller: Caller<'_, State>, id: i32, offset: i64) -> i32 {
    caller.data_mut().world.metrics.increment(word(id), offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn property_paths_join_with_dots() {
        assert_eq!(property_key(b"request\0path"), "request.path");
        assert_eq!(property_key(b"plugin_name"), "plugin_name");
    }
}
