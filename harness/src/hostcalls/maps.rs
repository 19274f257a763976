//! The header map host calls: reading and editing the stream's request and response headers and
//! trailers, and reading a callout answer's, as Envoy's `getConstMap`/`getMap` allow.

use wasmtime::Caller;

use crate::abi::{status, MapType};
use crate::headers::HeaderMap;
use crate::memory::{ok_or_fault, word, Guest, R};
use crate::pairs;
use crate::state::State;

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

pub(super) fn get_header_map_pairs(
    mut caller: Caller<'_, State>,
    t: i32,
    ptr_ptr: i32,
    size_ptr: i32,
) -> R {
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

pub(super) fn get_header_map_size(mut caller: Caller<'_, State>, t: i32, out: i32) -> i32 {
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

pub(super) fn get_header_map_value(
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
fn with_map(g: &mut Guest<'_, '_>, t: MapType, f: impl FnOnce(&mut HeaderMap)) -> i32 {
    match g.state().stream_mut().and_then(|s| s.map_mut(t)) {
        Some(map) => {
            f(map);
            status::OK
        }
        None => status::BAD_ARGUMENT,
    }
}

pub(super) fn set_header_map_pairs(
    mut caller: Caller<'_, State>,
    t: i32,
    ptr: i32,
    len: i32,
) -> i32 {
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

pub(super) fn add_header_map_value(
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

pub(super) fn replace_header_map_value(
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

pub(super) fn remove_header_map_value(
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
