//! Raw proxy-wasm imports for the host calls whose SDK wrappers panic on a non-Ok status.
//!
//! The fidelity cases exist to report what the host answers (BadArgument on a middle-offset
//! buffer edit, the status of a second local reply), so these return the host's status code
//! as a number instead of panicking. Everything else goes through `proxy_wasm::hostcalls`.

use proxy_wasm::types::{BufferType, MapType};

// The SDK declares the same imports with its own `Status` enum, which cannot represent every
// code Envoy returns (e.g. 12 Unimplemented); here the status is a plain u32.
#[allow(clashing_extern_declarations)]
#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_set_buffer_bytes(
        buffer_type: BufferType,
        start: usize,
        size: usize,
        buffer_data: *const u8,
        buffer_size: usize,
    ) -> u32;
    fn proxy_send_local_response(
        status_code: u32,
        status_code_details_data: *const u8,
        status_code_details_size: usize,
        body_data: *const u8,
        body_size: usize,
        headers_data: *const u8,
        headers_size: usize,
        grpc_status: i32,
    ) -> u32;
    fn proxy_get_header_map_value(
        map_type: MapType,
        key_data: *const u8,
        key_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
    ) -> u32;
    fn proxy_close_stream(stream_type: u32) -> u32;
    fn proxy_replace_header_map_value(
        map_type: MapType,
        key_data: *const u8,
        key_size: usize,
        value_data: *const u8,
        value_size: usize,
    ) -> u32;
}

/// Envoy's `WasmResult` names, by code (proxy-wasm-cpp-host `include/proxy-wasm/wasm_api_impl.h`).
pub fn status_name(code: u32) -> &'static str {
    match code {
        0 => "Ok",
        1 => "NotFound",
        2 => "BadArgument",
        3 => "SerializationFailure",
        4 => "ParseFailure",
        5 => "BadExpression",
        6 => "InvalidMemoryAccess",
        7 => "Empty",
        8 => "CasMismatch",
        9 => "ResultMismatch",
        10 => "InternalFailure",
        11 => "BrokenConnection",
        12 => "Unimplemented",
        _ => "Unknown",
    }
}

/// `proxy_set_buffer_bytes(buffer, start, size, data)`; returns the host's status name.
pub fn set_buffer(buffer: BufferType, start: usize, size: usize, data: &[u8]) -> &'static str {
    // SAFETY: the pointer and length describe `data`, which outlives the call.
    let code = unsafe { proxy_set_buffer_bytes(buffer, start, size, data.as_ptr(), data.len()) };
    status_name(code)
}

/// `proxy_send_local_response` with no details and no gRPC status; returns the status name.
pub fn send_local_response(status: u32, headers: &[(&str, &str)], body: &[u8]) -> &'static str {
    let headers = serialize_map(headers);
    // SAFETY: every pointer and length describes a live slice owned by this frame.
    let code = unsafe {
        proxy_send_local_response(
            status,
            std::ptr::null(),
            0,
            body.as_ptr(),
            body.len(),
            headers.as_ptr(),
            headers.len(),
            -1,
        )
    };
    status_name(code)
}

/// `proxy_replace_header_map_value(map, name, value)`; returns the status name.
pub fn replace_header(map: MapType, name: &str, value: &str) -> &'static str {
    // SAFETY: the pointers and lengths describe `name` and `value`, which outlive the call.
    let code = unsafe {
        proxy_replace_header_map_value(map, name.as_ptr(), name.len(), value.as_ptr(), value.len())
    };
    status_name(code)
}

/// `proxy_get_header_map_value(map, name)`; returns the status name and the value if any.
pub fn get_header(map: MapType, name: &str) -> (&'static str, Option<String>) {
    let mut data: *mut u8 = std::ptr::null_mut();
    let mut size: usize = 0;
    // SAFETY: the key describes `name`; on Ok with a non-null pointer the host allocated `size`
    // bytes through the SDK's `proxy_on_memory_allocate` (the global allocator), which we own.
    let code =
        unsafe { proxy_get_header_map_value(map, name.as_ptr(), name.len(), &mut data, &mut size) };
    let value = if code == 0 && !data.is_null() {
        // SAFETY: see above; the host wrote `size` initialised bytes at `data`.
        let bytes = unsafe { Vec::from_raw_parts(data, size, size) };
        Some(String::from_utf8_lossy(&bytes).into_owned())
    } else {
        None
    };
    (status_name(code), value)
}

/// The ABI's header map encoding: count, then (name length, value length) pairs, then each
/// name and value followed by a NUL.
fn serialize_map(map: &[(&str, &str)]) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&len_u32(map.len()).to_le_bytes());
    for (name, value) in map {
        bytes.extend_from_slice(&len_u32(name.len()).to_le_bytes());
        bytes.extend_from_slice(&len_u32(value.len()).to_le_bytes());
    }
    for (name, value) in map {
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
    }
    bytes
}

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// `proxy_close_stream(stream)`: 0 Request (HttpRequest), 1 Response (HttpResponse), 2 Downstream,
/// 3 Upstream (the ABI's `WasmStreamType`); returns the status name.
pub fn close_stream(stream_type: u32) -> &'static str {
    // SAFETY: a plain integer argument.
    status_name(unsafe { proxy_close_stream(stream_type) })
}
