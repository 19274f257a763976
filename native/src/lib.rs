//! The smallest HTTP filter a real Envoy 1.40.0 loads as a dynamic module: it exports the ABI version
//! and the 20 HTTP hooks that Envoy refuses to load a filter without (each one's absence shown to fail
//! in docs/issue-56/loader.md), and does one visible thing: each response, Envoy's own local replies
//! included, gets `x-livecheck-native: 1`. Groundwork for issue 56; no hook allocates or can panic
//! yet. When the core moves in, each hook catches unwinds (the `envoy-module` profile unwinds).

mod abi;

use std::ffi::c_char;

use abi::{EnvoyBuffer, EnvoyHttpHeader, EnvoyPtr, ModuleBuffer, ModulePtr, CONTINUE};

/// Non-null stand-in for the per-config and per-stream state the core will own (Envoy treats a null
/// from `*_config_new` as a refused config).
static STATE: u8 = 0;

fn state() -> ModulePtr {
    std::ptr::addr_of!(STATE).cast()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    abi::ABI_VERSION.as_ptr().cast()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    _config_envoy_ptr: EnvoyPtr,
    _name: EnvoyBuffer,
    _config: EnvoyBuffer,
) -> ModulePtr {
    state()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(_config: ModulePtr) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    _config: ModulePtr,
    _filter_envoy_ptr: EnvoyPtr,
) -> ModulePtr {
    state()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    _: EnvoyPtr,
    _: ModulePtr,
    _end: bool,
) -> i32 {
    CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    _: EnvoyPtr,
    _: ModulePtr,
    _end: bool,
) -> i32 {
    CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _: EnvoyPtr,
    _: ModulePtr,
) -> i32 {
    CONTINUE
}

/// # Safety
/// Envoy calls it with the stream's own `filter_envoy_ptr`, live for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    filter_envoy_ptr: EnvoyPtr,
    _: ModulePtr,
    _end: bool,
) -> i32 {
    // SAFETY: Envoy passes the filter's own pointer, valid for the duration of this hook; both buffers
    // are 'static and Envoy copies them into the header map before returning.
    unsafe {
        abi::envoy_dynamic_module_callback_http_set_header(
            filter_envoy_ptr,
            abi::RESPONSE_HEADER,
            ModuleBuffer::of(b"x-livecheck-native"),
            ModuleBuffer::of(b"1"),
        );
    }
    CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    _: EnvoyPtr,
    _: ModulePtr,
    _end: bool,
) -> i32 {
    CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    _: EnvoyPtr,
    _: ModulePtr,
) -> i32 {
    CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(_: EnvoyPtr, _: ModulePtr) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(_: ModulePtr) {}

// Required by the loader though this module makes no callouts, streams or timers yet; their argument
// lists follow abi.h so that the next session can fill them in.

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    _: EnvoyPtr,
    _: ModulePtr,
    _callout_id: u64,
    _result: i32,
    _headers: *const EnvoyHttpHeader,
    _headers_size: usize,
    _body_chunks: *const EnvoyBuffer,
    _body_chunks_size: usize,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_headers(
    _: EnvoyPtr,
    _: ModulePtr,
    _stream: u64,
    _headers: *const EnvoyHttpHeader,
    _headers_size: usize,
    _end: bool,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_data(
    _: EnvoyPtr,
    _: ModulePtr,
    _stream: u64,
    _data: *const EnvoyBuffer,
    _data_count: usize,
    _end: bool,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_trailers(
    _: EnvoyPtr,
    _: ModulePtr,
    _stream: u64,
    _trailers: *const EnvoyHttpHeader,
    _trailers_size: usize,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_complete(
    _: EnvoyPtr,
    _: ModulePtr,
    _stream: u64,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_reset(
    _: EnvoyPtr,
    _: ModulePtr,
    _stream: u64,
    _reason: i32,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    _: EnvoyPtr,
    _: ModulePtr,
    _event_id: u64,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(
    _: EnvoyPtr,
    _: ModulePtr,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(
    _: EnvoyPtr,
    _: ModulePtr,
) {
}
