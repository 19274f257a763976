//! The body buffer host calls (`proxy_get_buffer_bytes`, `proxy_set_buffer_bytes`,
//! `proxy_get_buffer_status`): the stream's request and response bodies, the VM and plugin
//! configurations, and a callout's answer, each readable when Envoy's `Context::getBuffer` has it.

use wasmtime::Caller;

use crate::abi::{status, BufferType};
use crate::buffers;
use crate::memory::{ok_or_fault, word, Guest, R};
use crate::state::State;

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

pub(super) fn get_buffer_bytes(
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

pub(super) fn get_buffer_status(
    mut caller: Caller<'_, State>,
    t: i32,
    len_ptr: i32,
    flags_ptr: i32,
) -> i32 {
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

pub(super) fn set_buffer_bytes(
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
