//! The property host calls (`proxy_get_property`, `proxy_set_property`): the stream's filter state,
//! the plugin's properties, and the `request.*` attributes Envoy reads from the request headers.

use wasmtime::Caller;

use crate::abi::{status, MapType};
use crate::memory::{ok_or_fault, word, Guest, R};
use crate::state::State;
use crate::stream::Stream;

fn property_key(path: &[u8]) -> String {
    path.split(|b| *b == 0)
        .map(String::from_utf8_lossy)
        .collect::<Vec<_>>()
        .join(".")
}

pub(super) fn get_property(
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

pub(super) fn set_property(
    mut caller: Caller<'_, State>,
    ptr: i32,
    len: i32,
    vptr: i32,
    vlen: i32,
) -> i32 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn property_paths_join_with_dots() {
        assert_eq!(property_key(b"request\0path"), "request.path");
        assert_eq!(property_key(b"plugin_name"), "plugin_name");
    }
}
