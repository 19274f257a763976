//! An Envoy dynamic module that does nothing: every hook continues at once. Loaded exactly as
//! livecheck's module is (`envoy.filters.http.dynamic_modules`, same filter position), it is the
//! benchmarks' baseline for what any dynamic module costs in Envoy, so the difference to livecheck's
//! module is livecheck's own work (`benches/compare.py`).
//!
//! Given a `filter_config` naming actions (a comma-separated list, the same names as
//! `benches/noop-filter`'s plugin configuration), it does those and nothing else, through the
//! dynamic-modules ABI instead of proxy-wasm; `{}` or an empty configuration is the no-op module.
//! With all of them it is **the module floor**: what a filter that checks a non-streamed turn must ask
//! of Envoy whatever its logic (`benches/floor.py`'s docstring), done as livecheck's module does it:
//!
//! - `request_headers`: read the request's header map whole (`request_header_map`), set
//!   `accept-encoding: identity` unless it is already (`accept_encoding`);
//! - `hold_request`: hold the request body until its end (`StopIterationAndBuffer`);
//! - `read_request`: at the body's end, copy it whole (Envoy's buffered slices, then the chunk this
//!   hook received) into memory of the module's own, as livecheck's module reads a body;
//! - `response_headers`: read the answer's header map whole (`response_header_map`), add a turn-id
//!   header (`turn_id`), remove `content-length` (`drop_content_length`);
//! - `hold_response`, `read_response`: the same as for the request, on the answer;
//! - `stop_request_headers`, `stop_response_headers`: hold the headers too until the body's end
//!   (`StopIteration`, let go by the body hook's `Continue`), as livecheck's module holds them; on the
//!   answer, `content-length` is then set to the body's size at its end, as livecheck puts it back
//!   (not part of the floor: `make bench` does not use them);
//! - `counters`: ten counters defined at configure time, each incremented once per stream at its
//!   end (`stream_complete`).
//!
//! An unknown action refuses the configuration (Envoy then refuses the filter). The ABI's few
//! callbacks are declared by hand below, copied from `native/src/abi.rs` (which says where they come
//! from and how they were checked against Envoy 1.40.0).
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// What Envoy 1.40.0 expects `on_program_init` to return (native/src/abi.rs).
const ABI_VERSION: &std::ffi::CStr = c"v0.2.0";

#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyBuffer {
    ptr: *const c_char,
    length: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleBuffer {
    ptr: *const c_char,
    length: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyHttpHeader {
    key_ptr: *const c_char,
    key_length: usize,
    value_ptr: *const c_char,
    value_length: usize,
}

type ConfigEnvoyPtr = *mut c_void;
type ConfigModulePtr = *const c_void;
type FilterEnvoyPtr = *mut c_void;
type FilterModulePtr = *const c_void;

const REQUEST_HEADER: u32 = 0;
const RESPONSE_HEADER: u32 = 2;
const RECEIVED_REQUEST_BODY: u32 = 0;
const BUFFERED_REQUEST_BODY: u32 = 1;
const RECEIVED_RESPONSE_BODY: u32 = 2;
const BUFFERED_RESPONSE_BODY: u32 = 3;
const HEADERS_CONTINUE: u32 = 0;
const HEADERS_STOP_ITERATION: u32 = 1;
const BODY_CONTINUE: u32 = 0;
const BODY_STOP_ITERATION_AND_BUFFER: u32 = 1;
const TRAILERS_CONTINUE: u32 = 0;
const LOCAL_REPLY_CONTINUE: u32 = 0;
const METRICS_SUCCESS: u32 = 0;

unsafe extern "C" {
    fn envoy_dynamic_module_callback_http_get_headers_size(
        filter: FilterEnvoyPtr,
        header_type: u32,
    ) -> usize;
    fn envoy_dynamic_module_callback_http_get_headers(
        filter: FilterEnvoyPtr,
        header_type: u32,
        result_headers: *mut EnvoyHttpHeader,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_set_header(
        filter: FilterEnvoyPtr,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_get_body_chunks_size(
        filter: FilterEnvoyPtr,
        body_type: u32,
    ) -> usize;
    fn envoy_dynamic_module_callback_http_get_body_chunks(
        filter: FilterEnvoyPtr,
        body_type: u32,
        result_buffer_vector: *mut EnvoyBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_get_body_size(
        filter: FilterEnvoyPtr,
        body_type: u32,
    ) -> usize;
    fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: ConfigEnvoyPtr,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_length: usize,
        counter_id_ptr: *mut usize,
    ) -> u32;
    fn envoy_dynamic_module_callback_http_filter_increment_counter(
        filter: FilterEnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> u32;
}

fn module_buffer(bytes: &[u8]) -> ModuleBuffer {
    ModuleBuffer {
        ptr: bytes.as_ptr().cast(),
        length: bytes.len(),
    }
}

/// `len` bytes at `ptr`, or none for a null pointer.
///
/// # Safety
/// A non-null `ptr` points at `len` readable bytes for the lifetime the caller gives the slice.
unsafe fn bytes<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
    }
}

#[derive(Default)]
struct Actions {
    request_header_map: bool,
    accept_encoding: bool,
    hold_request: bool,
    read_request: bool,
    response_header_map: bool,
    turn_id: bool,
    drop_content_length: bool,
    hold_response: bool,
    read_response: bool,
    stop_request_headers: bool,
    stop_response_headers: bool,
    counters: Vec<usize>,
}

impl Actions {
    /// The actions `text` names, counters defined on `envoy`; `None` for an unknown action.
    fn parse(text: &str, envoy: ConfigEnvoyPtr) -> Option<Self> {
        let mut a = Actions::default();
        for name in text.split(',').map(str::trim) {
            match name {
                "" | "{}" => {}
                "request_headers" => {
                    a.request_header_map = true;
                    a.accept_encoding = true;
                }
                "request_header_map" => a.request_header_map = true,
                "accept_encoding" => a.accept_encoding = true,
                "hold_request" => a.hold_request = true,
                "read_request" => a.read_request = true,
                "response_headers" => {
                    a.response_header_map = true;
                    a.turn_id = true;
                    a.drop_content_length = true;
                }
                "response_header_map" => a.response_header_map = true,
                "turn_id" => a.turn_id = true,
                "drop_content_length" => a.drop_content_length = true,
                "hold_response" => a.hold_response = true,
                "read_response" => a.read_response = true,
                "stop_request_headers" => a.stop_request_headers = true,
                "stop_response_headers" => a.stop_response_headers = true,
                "counters" => {
                    for i in 0..10 {
                        let name = format!("floor.check{i}.passed");
                        let mut id = 0usize;
                        // SAFETY: main thread, during config_new; `id` is written by Envoy.
                        let result = unsafe {
                            envoy_dynamic_module_callback_http_filter_config_define_counter(
                                envoy,
                                module_buffer(name.as_bytes()),
                                std::ptr::null_mut(),
                                0,
                                &mut id,
                            )
                        };
                        if result != METRICS_SUCCESS {
                            return None;
                        }
                        a.counters.push(id);
                    }
                }
                _ => return None,
            }
        }
        Some(a)
    }
}

/// One stream: its Envoy filter and the configuration's actions.
struct Stream {
    actions: Arc<Actions>,
}

/// The header map `which`, read whole (pointers into Envoy's map); `true` when it has
/// `accept-encoding: identity`.
fn read_header_map(filter: FilterEnvoyPtr, which: u32) -> bool {
    // SAFETY: the filter is live for the hook.
    let count = unsafe { envoy_dynamic_module_callback_http_get_headers_size(filter, which) };
    let mut headers = vec![
        EnvoyHttpHeader {
            key_ptr: std::ptr::null(),
            key_length: 0,
            value_ptr: std::ptr::null(),
            value_length: 0,
        };
        count
    ];
    // SAFETY: room for the `count` headers Envoy reported in this hook.
    if count == 0
        || !unsafe {
            envoy_dynamic_module_callback_http_get_headers(filter, which, headers.as_mut_ptr())
        }
    {
        return false;
    }
    headers.iter().any(|h| {
        // SAFETY: each key and value is lent for the hook.
        let (k, v) = unsafe {
            (
                bytes(h.key_ptr, h.key_length),
                bytes(h.value_ptr, h.value_length),
            )
        };
        k == b"accept-encoding" && v == b"identity"
    })
}

fn set_header(filter: FilterEnvoyPtr, which: u32, name: &str, value: Option<&str>) {
    let value = value.map_or(
        ModuleBuffer {
            ptr: std::ptr::null(),
            length: 0,
        },
        |v| module_buffer(v.as_bytes()),
    );
    // SAFETY: the filter is live; both buffers are borrowed for the call (Envoy copies them).
    unsafe {
        envoy_dynamic_module_callback_http_set_header(
            filter,
            which,
            module_buffer(name.as_bytes()),
            value,
        );
    }
}

/// Appends body `which`, slice by slice as Envoy holds it, to `out`.
fn read_body(filter: FilterEnvoyPtr, which: u32, out: &mut Vec<u8>) {
    // SAFETY: the filter is live.
    let count = unsafe { envoy_dynamic_module_callback_http_get_body_chunks_size(filter, which) };
    if count == 0 {
        return;
    }
    let mut chunks = vec![
        EnvoyBuffer {
            ptr: std::ptr::null(),
            length: 0
        };
        count
    ];
    // SAFETY: room for the `count` slices Envoy reported in this hook.
    if !unsafe {
        envoy_dynamic_module_callback_http_get_body_chunks(filter, which, chunks.as_mut_ptr())
    } {
        return;
    }
    for c in chunks {
        // SAFETY: a slice of Envoy's buffer, valid for the hook.
        out.extend_from_slice(unsafe { bytes(c.ptr, c.length) });
    }
}

/// A whole body at its end: what Envoy buffered, then this hook's chunk, copied (as livecheck's
/// module reads one); its length, so the copy is not optimised away.
fn read_whole(filter: FilterEnvoyPtr, buffered: u32, received: u32) -> usize {
    // SAFETY: the filter is live.
    let size = unsafe {
        envoy_dynamic_module_callback_http_get_body_size(filter, buffered)
            + envoy_dynamic_module_callback_http_get_body_size(filter, received)
    };
    let mut out = Vec::with_capacity(size);
    read_body(filter, buffered, &mut out);
    read_body(filter, received, &mut out);
    std::hint::black_box(&out);
    out.len()
}

/// # Safety
/// `module` is a pointer `filter_new` returned and not yet destroyed.
unsafe fn stream<'a>(module: FilterModulePtr) -> Option<&'a Stream> {
    // SAFETY: per the contract.
    unsafe { module.cast::<Stream>().as_ref() }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    ABI_VERSION.as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    envoy: ConfigEnvoyPtr,
    _name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> ConfigModulePtr {
    // SAFETY: Envoy lends the configuration's bytes for this hook.
    let text = String::from_utf8_lossy(unsafe { bytes(config.ptr, config.length) });
    match Actions::parse(&text, envoy) {
        Some(actions) => Arc::into_raw(Arc::new(actions)).cast(),
        None => std::ptr::null(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(
    module: ConfigModulePtr,
) {
    if !module.is_null() {
        // SAFETY: the `Arc` config_new leaked; streams hold their own clones.
        drop(unsafe { Arc::from_raw(module.cast::<Actions>()) });
    }
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: ConfigModulePtr,
    _filter: FilterEnvoyPtr,
) -> FilterModulePtr {
    if config.is_null() {
        return std::ptr::null();
    }
    // SAFETY: a live `Arc<Actions>` config_new leaked: one more strong count for this stream.
    let actions = unsafe {
        Arc::increment_strong_count(config.cast::<Actions>());
        Arc::from_raw(config.cast::<Actions>())
    };
    Box::into_raw(Box::new(Stream { actions })).cast()
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_destroy(module: FilterModulePtr) {
    if !module.is_null() {
        // SAFETY: the box filter_new leaked; no hook of this stream runs after destroy.
        drop(unsafe { Box::from_raw(module.cast_mut().cast::<Stream>()) });
    }
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    filter: FilterEnvoyPtr,
    module: FilterModulePtr,
    end_of_stream: bool,
) -> u32 {
    // SAFETY: a live stream.
    let Some(s) = (unsafe { stream(module) }) else {
        return HEADERS_CONTINUE;
    };
    let identity = s.actions.request_header_map && read_header_map(filter, REQUEST_HEADER);
    if s.actions.accept_encoding && !identity {
        set_header(filter, REQUEST_HEADER, "accept-encoding", Some("identity"));
    }
    if s.actions.stop_request_headers && !end_of_stream {
        return HEADERS_STOP_ITERATION;
    }
    HEADERS_CONTINUE
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    filter: FilterEnvoyPtr,
    module: FilterModulePtr,
    end_of_stream: bool,
) -> u32 {
    // SAFETY: a live stream.
    let Some(s) = (unsafe { stream(module) }) else {
        return BODY_CONTINUE;
    };
    if s.actions.hold_request && !end_of_stream {
        return BODY_STOP_ITERATION_AND_BUFFER;
    }
    if s.actions.read_request && end_of_stream {
        read_whole(filter, BUFFERED_REQUEST_BODY, RECEIVED_REQUEST_BODY);
    }
    BODY_CONTINUE
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    filter: FilterEnvoyPtr,
    module: FilterModulePtr,
    end_of_stream: bool,
) -> u32 {
    // SAFETY: a live stream.
    let Some(s) = (unsafe { stream(module) }) else {
        return HEADERS_CONTINUE;
    };
    if s.actions.response_header_map {
        read_header_map(filter, RESPONSE_HEADER);
    }
    if s.actions.turn_id {
        set_header(
            filter,
            RESPONSE_HEADER,
            "x-livecheck-turn-id",
            Some("lc_0123456789abcdef0123456789abcdef"),
        );
    }
    if s.actions.drop_content_length {
        set_header(filter, RESPONSE_HEADER, "content-length", None);
    }
    if s.actions.stop_response_headers && !end_of_stream {
        return HEADERS_STOP_ITERATION;
    }
    HEADERS_CONTINUE
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    filter: FilterEnvoyPtr,
    module: FilterModulePtr,
    end_of_stream: bool,
) -> u32 {
    // SAFETY: a live stream.
    let Some(s) = (unsafe { stream(module) }) else {
        return BODY_CONTINUE;
    };
    if s.actions.hold_response && !end_of_stream {
        return BODY_STOP_ITERATION_AND_BUFFER;
    }
    if s.actions.read_response && end_of_stream {
        let size = read_whole(filter, BUFFERED_RESPONSE_BODY, RECEIVED_RESPONSE_BODY);
        if s.actions.stop_response_headers {
            set_header(
                filter,
                RESPONSE_HEADER,
                "content-length",
                Some(&size.to_string()),
            );
        }
    }
    BODY_CONTINUE
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    filter: FilterEnvoyPtr,
    module: FilterModulePtr,
) {
    // SAFETY: a live stream.
    let Some(s) = (unsafe { stream(module) }) else {
        return;
    };
    for id in &s.actions.counters {
        // SAFETY: the filter is live; no labels.
        unsafe {
            envoy_dynamic_module_callback_http_filter_increment_counter(
                filter,
                *id,
                std::ptr::null_mut(),
                0,
                1,
            );
        }
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _filter: FilterEnvoyPtr,
    _module: FilterModulePtr,
) -> u32 {
    TRAILERS_CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    _filter: FilterEnvoyPtr,
    _module: FilterModulePtr,
) -> u32 {
    TRAILERS_CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_local_reply(
    _filter: FilterEnvoyPtr,
    _module: FilterModulePtr,
    _status: u32,
    _details: EnvoyBuffer,
    _reset_imminent: bool,
) -> u32 {
    LOCAL_REPLY_CONTINUE
}

// Hooks Envoy 1.40.0 requires of every HTTP module (docs/issue-56/loader.md) that this one never
// has called: it starts no callout and schedules nothing.

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done() {}
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled() {}
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_headers() {}
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_data() {}
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_trailers() {}
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_complete() {}
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_reset() {}
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark()
{
}
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark()
{
}

// The buffers and headers have the C layout: a pointer and a length, or two of each.
const WORD: usize = std::mem::size_of::<usize>();
const _: () = assert!(std::mem::size_of::<EnvoyBuffer>() == 2 * WORD);
const _: () = assert!(std::mem::size_of::<ModuleBuffer>() == 2 * WORD);
const _: () = assert!(std::mem::size_of::<EnvoyHttpHeader>() == 4 * WORD);
