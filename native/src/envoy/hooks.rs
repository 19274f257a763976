//! The hooks Envoy calls (`#[no_mangle]`), each pinned to its type in `abi`: a stream's hooks run on
//! its `Stream` through `with_stream`, a configuration's on its `Config`; every one catches a panic.

use std::cell::{Cell, RefCell};
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Once};

use super::{copied, log, ConfigEnvoy, Filter};
use crate::abi::*;
use crate::config::Config;
use crate::stream::{After, Stream};

// ---- the hooks ----------------------------------------------------------------------------------

/// What the module gives Envoy for a stream: the stream, borrowed by one hook at a time.
struct FilterBox {
    stream: RefCell<Stream>,
    /// The module is sending the caller bytes of its own (`After::End`): Envoy runs them through
    /// this filter's encoder hooks, which let them pass.
    injecting: Cell<bool>,
}

/// Whether a hook lets bytes the module sends itself pass untouched (the encoder's hooks), or runs
/// whatever comes (the stream's end, a callout's answer).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Injected {
    Pass,
    Run,
}

/// Runs `hook` on the stream behind `module`, catching a panic: a panicking hook fails the stream
/// (`failed`'s status) and never unwinds into Envoy. What the hook asked of Envoy that can re-enter
/// this filter (`After`) is done once the stream is let go, so that a re-entered hook finds it free,
/// as a wasm filter's does. A hook Envoy calls while another hook of the same stream still holds it
/// gets `reentered`; so does an encoder hook that carries the module's own bytes (`injected`).
fn with_stream<T: Copy>(
    module: FilterModulePtr,
    injected: Injected,
    reentered: T,
    failed: T,
    hook: impl FnOnce(&mut Stream) -> T,
) -> T {
    // SAFETY: `module` is the `FilterBox` this module gave Envoy in `on_http_filter_new`; Envoy
    // passes it back until `on_http_filter_destroy`.
    let Some(boxed) = (unsafe { module.cast::<FilterBox>().as_ref() }) else {
        return failed;
    };
    if injected == Injected::Pass && boxed.injecting.get() {
        return reentered;
    }
    let (status, (filter, after)) = {
        let Ok(mut stream) = boxed.stream.try_borrow_mut() else {
            return reentered;
        };
        let status = match catch_unwind(AssertUnwindSafe(|| hook(&mut stream))) {
            Ok(status) => status,
            Err(_) => {
                stream.fail();
                failed
            }
        };
        (status, stream.take_after())
    };
    for action in after {
        match action {
            After::Reply(reply) => filter.send_response(reply.status, &reply.headers, &reply.body),
            After::ContinueDecoding => filter.continue_decoding(),
            After::ContinueEncoding => filter.continue_encoding(),
            After::End(bytes) => {
                boxed.injecting.set(true);
                filter.send_data(&bytes, true);
                boxed.injecting.set(false);
            }
            After::Reset => filter.reset(),
        }
    }
    status
}

/// Runs `f`, catching a panic (`fallback` then).
fn guarded<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The configuration behind `module`, shared.
///
/// # Safety
/// `module` must be a pointer `on_http_filter_config_new` returned and Envoy has not destroyed.
unsafe fn config<'a>(module: FilterConfigModulePtr) -> Option<&'a Config> {
    // SAFETY: per the contract, an `Arc<Config>` this module leaked with `Arc::into_raw`.
    unsafe { module.cast::<Config>().as_ref() }
}

static PANIC_HOOK: Once = Once::new();

/// Logs where a panic happened, never its message (it can quote request text).
fn install_panic_hook() {
    PANIC_HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_else(|| "unknown location".to_owned());
            log(
                LOG_ERROR,
                &format!("livecheck panicked at {at}; that stream failed closed"),
            );
        }));
    });
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    guard_unit(install_panic_hook);
    ABI_VERSION.as_ptr()
}
const _: OnProgramInit = envoy_dynamic_module_on_program_init;

fn guard_unit(f: impl FnOnce()) {
    guarded((), f);
}

/// # Safety
/// Called by Envoy with its config object and buffers valid for the call.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    envoy: FilterConfigEnvoyPtr,
    _name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> FilterConfigModulePtr {
    guarded(std::ptr::null(), || {
        // SAFETY: Envoy lends the configuration's bytes for this hook.
        let bytes = unsafe { copied(config) };
        match Config::new(ConfigEnvoy(envoy), &bytes) {
            Some(config) => Arc::into_raw(config).cast(),
            None => std::ptr::null(),
        }
    })
}
const _: OnHttpFilterConfigNew = envoy_dynamic_module_on_http_filter_config_new;

/// # Safety
/// `module` is a pointer `config_new` returned, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(
    module: FilterConfigModulePtr,
) {
    if module.is_null() {
        return;
    }
    // SAFETY: the `Arc` leaked by config_new; streams hold their own clones.
    let config = unsafe { Arc::from_raw(module.cast::<Config>()) };
    guard_unit(|| config.shut_down());
}
const _: OnHttpFilterConfigDestroy = envoy_dynamic_module_on_http_filter_config_destroy;

/// # Safety
/// `config` is a live pointer `config_new` returned; `filter` is Envoy's new filter.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: FilterConfigModulePtr,
    filter: FilterEnvoyPtr,
) -> FilterModulePtr {
    if config.is_null() {
        return std::ptr::null();
    }
    // SAFETY: a live `Arc<Config>` leaked by config_new: one more strong count for this stream,
    // then an owned clone of it.
    let config = unsafe {
        Arc::increment_strong_count(config.cast::<Config>());
        Arc::from_raw(config.cast::<Config>())
    };
    guarded(std::ptr::null(), || {
        let stream = Stream::new(config, Filter(filter));
        Box::into_raw(Box::new(FilterBox {
            stream: RefCell::new(stream),
            injecting: Cell::new(false),
        }))
        .cast()
    })
}
const _: OnHttpFilterNew = envoy_dynamic_module_on_http_filter_new;

/// # Safety
/// `module` is a pointer `filter_new` returned, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_destroy(module: FilterModulePtr) {
    if module.is_null() {
        return;
    }
    // SAFETY: the box leaked by filter_new; no hook of this stream runs after destroy.
    let boxed = unsafe { Box::from_raw(module.cast_mut().cast::<FilterBox>()) };
    guard_unit(|| drop(boxed));
}
const _: OnHttpFilterDestroy = envoy_dynamic_module_on_http_filter_destroy;

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    _filter: FilterEnvoyPtr,
    module: FilterModulePtr,
    end_of_stream: bool,
) -> HeadersStatus {
    with_stream(
        module,
        Injected::Pass,
        HEADERS_CONTINUE,
        HEADERS_STOP_ITERATION,
        |s| s.request_headers(end_of_stream),
    )
}
const _: OnHttpFilterHeaders = envoy_dynamic_module_on_http_filter_request_headers;

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    _filter: FilterEnvoyPtr,
    module: FilterModulePtr,
    end_of_stream: bool,
) -> BodyStatus {
    with_stream(
        module,
        Injected::Pass,
        BODY_CONTINUE,
        BODY_STOP_ITERATION_NO_BUFFER,
        |s| s.request_body(end_of_stream),
    )
}
const _: OnHttpFilterBody = envoy_dynamic_module_on_http_filter_request_body;

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _filter: FilterEnvoyPtr,
    module: FilterModulePtr,
) -> TrailersStatus {
    with_stream(
        module,
        Injected::Pass,
        TRAILERS_CONTINUE,
        TRAILERS_STOP_ITERATION,
        Stream::request_trailers,
    )
}
const _: OnHttpFilterTrailers = envoy_dynamic_module_on_http_filter_request_trailers;

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    _filter: FilterEnvoyPtr,
    module: FilterModulePtr,
    end_of_stream: bool,
) -> HeadersStatus {
    with_stream(
        module,
        Injected::Pass,
        HEADERS_CONTINUE,
        HEADERS_STOP_ITERATION,
        |s| s.response_headers(end_of_stream),
    )
}
const _: OnHttpFilterHeaders = envoy_dynamic_module_on_http_filter_response_headers;

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    _filter: FilterEnvoyPtr,
    module: FilterModulePtr,
    end_of_stream: bool,
) -> BodyStatus {
    with_stream(
        module,
        Injected::Pass,
        BODY_CONTINUE,
        BODY_STOP_ITERATION_NO_BUFFER,
        |s| s.response_body(end_of_stream),
    )
}
const _: OnHttpFilterBody = envoy_dynamic_module_on_http_filter_response_body;

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    _filter: FilterEnvoyPtr,
    module: FilterModulePtr,
) -> TrailersStatus {
    with_stream(
        module,
        Injected::Pass,
        TRAILERS_CONTINUE,
        TRAILERS_STOP_ITERATION,
        Stream::response_trailers,
    )
}
const _: OnHttpFilterTrailers = envoy_dynamic_module_on_http_filter_response_trailers;

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    _filter: FilterEnvoyPtr,
    module: FilterModulePtr,
) {
    with_stream(module, Injected::Run, (), (), Stream::complete);
}
const _: OnHttpFilterStreamComplete = envoy_dynamic_module_on_http_filter_stream_complete;

/// # Safety
/// Envoy's headers and body chunks are valid for the call (abi.h); they may be null on failure.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    _filter: FilterEnvoyPtr,
    module: FilterModulePtr,
    callout_id: u64,
    result: CalloutResult,
    headers: *mut EnvoyHttpHeader,
    headers_size: usize,
    body_chunks: *mut EnvoyBuffer,
    body_chunks_size: usize,
) {
    // SAFETY: as the contract says; copied before the hook returns.
    let (status, body) =
        unsafe { callout_answer(result, headers, headers_size, body_chunks, body_chunks_size) };
    with_stream(module, Injected::Run, (), (), |s| {
        s.callout_done(callout_id, status, body)
    });
}
const _: OnHttpFilterCalloutDone = envoy_dynamic_module_on_http_filter_http_callout_done;

/// A callout's `:status` (`None` for a reset or an answer too large) and body, copied.
///
/// # Safety
/// The arrays hold `headers_size` headers and `chunks_size` buffers Envoy lends for the hook.
unsafe fn callout_answer(
    result: CalloutResult,
    headers: *mut EnvoyHttpHeader,
    headers_size: usize,
    chunks: *mut EnvoyBuffer,
    chunks_size: usize,
) -> (Option<u16>, Vec<u8>) {
    if result != CALLOUT_SUCCESS {
        return (None, Vec::new());
    }
    let headers: &[EnvoyHttpHeader] = if headers.is_null() {
        &[]
    } else {
        // SAFETY: `headers_size` headers at `headers`, lent for the hook.
        unsafe { std::slice::from_raw_parts(headers, headers_size) }
    };
    let status = headers.iter().find_map(|h| {
        // SAFETY: each key and value is lent with the header.
        let key = unsafe {
            copied(EnvoyBuffer {
                ptr: h.key_ptr,
                length: h.key_length,
            })
        };
        if key != b":status" {
            return None;
        }
        // SAFETY: as above.
        let value = unsafe {
            copied(EnvoyBuffer {
                ptr: h.value_ptr,
                length: h.value_length,
            })
        };
        std::str::from_utf8(&value).ok()?.parse().ok()
    });
    let chunks: &[EnvoyBuffer] = if chunks.is_null() {
        &[]
    } else {
        // SAFETY: `chunks_size` buffers at `chunks`, lent for the hook.
        unsafe { std::slice::from_raw_parts(chunks, chunks_size) }
    };
    let mut body = Vec::new();
    for chunk in chunks {
        // SAFETY: lent for the hook.
        body.extend_from_slice(&unsafe { copied(*chunk) });
    }
    (status, body)
}

/// # Safety
/// `module` is a live pointer config_new returned.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    _envoy: FilterConfigEnvoyPtr,
    module: FilterConfigModulePtr,
    event: u64,
) {
    // SAFETY: per the contract.
    if let Some(config) = unsafe { config(module) } {
        guard_unit(|| config.scheduled(event));
    }
}
const _: OnHttpFilterConfigScheduled = envoy_dynamic_module_on_http_filter_config_scheduled;

/// # Safety
/// `module` is a live pointer config_new returned; the rest as for the stream's callout hook.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done(
    _envoy: FilterConfigEnvoyPtr,
    module: FilterConfigModulePtr,
    callout_id: u64,
    result: CalloutResult,
    headers: *mut EnvoyHttpHeader,
    headers_size: usize,
    body_chunks: *mut EnvoyBuffer,
    body_chunks_size: usize,
) {
    // SAFETY: per the contract.
    let (status, _body) =
        unsafe { callout_answer(result, headers, headers_size, body_chunks, body_chunks_size) };
    // SAFETY: per the contract.
    if let Some(config) = unsafe { config(module) } {
        guard_unit(|| config.report_answered(callout_id, status));
    }
}
const _: OnHttpFilterConfigCalloutDone =
    envoy_dynamic_module_on_http_filter_config_http_callout_done;

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_local_reply(
    _filter: FilterEnvoyPtr,
    _module: FilterModulePtr,
    _status: u32,
    _details: EnvoyBuffer,
    _reset_imminent: bool,
) -> LocalReplyStatus {
    LOCAL_REPLY_CONTINUE
}
const _: OnHttpFilterLocalReply = envoy_dynamic_module_on_http_filter_local_reply;

// Hooks Envoy 1.40.0 requires of every HTTP module that livecheck does not use: streamed callouts,
// per-stream scheduling and the downstream's write watermarks.

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    _filter: FilterEnvoyPtr,
    _module: FilterModulePtr,
    _event: u64,
) {
}
const _: OnHttpFilterScheduled = envoy_dynamic_module_on_http_filter_scheduled;

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
