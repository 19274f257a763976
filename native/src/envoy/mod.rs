//! Everything unsafe in the module, and nothing else: the callbacks into Envoy, each wrapped as a
//! safe call on [`Filter`], [`ConfigEnvoy`] or [`ConfigScheduler`] (here), and the hooks Envoy calls,
//! each catching a panic (`hooks`).
//!
//! What the rest of the module may rely on:
//! - a [`Filter`] is only used on its stream's worker, between `on_http_filter_new` and
//!   `on_http_filter_destroy` (Envoy's filter object lives that long);
//! - bytes Envoy lends ([`EnvoyBuffer`]) are copied before the hook that lent them returns;
//! - a hook that Envoy calls again while the same stream's hook runs (a body the module sends
//!   itself goes through its own encoder hook) passes the data on untouched instead of borrowing
//!   the stream twice;
//! - a panic in a hook fails that stream only (`Stream::fail`), never Envoy.

mod hooks;

use crate::abi::*;

fn module_buffer(bytes: &[u8]) -> ModuleBuffer {
    ModuleBuffer {
        ptr: bytes.as_ptr().cast(),
        length: bytes.len(),
    }
}

fn module_headers(headers: &[(&str, &str)]) -> Vec<ModuleHttpHeader> {
    headers
        .iter()
        .map(|(k, v)| ModuleHttpHeader {
            key_ptr: k.as_ptr().cast(),
            key_length: k.len(),
            value_ptr: v.as_ptr().cast(),
            value_length: v.len(),
        })
        .collect()
}

/// The bytes of an Envoy buffer, copied.
///
/// # Safety
/// `buffer` must be one Envoy handed over in the current hook (valid until it returns).
unsafe fn copied(buffer: EnvoyBuffer) -> Vec<u8> {
    if buffer.ptr.is_null() || buffer.length == 0 {
        return Vec::new();
    }
    // SAFETY: Envoy lends `length` bytes at `ptr` for the current hook (abi.h, envoy_buffer).
    unsafe { std::slice::from_raw_parts(buffer.ptr.cast::<u8>(), buffer.length) }.to_vec()
}

/// Envoy's level for the logic's.
pub fn log_level(level: livecheck::host::LogLevel) -> LogLevel {
    match level {
        livecheck::host::LogLevel::Debug => LOG_DEBUG,
        livecheck::host::LogLevel::Info => LOG_INFO,
        livecheck::host::LogLevel::Warn => LOG_WARN,
        livecheck::host::LogLevel::Error => LOG_ERROR,
    }
}

/// Logs through Envoy's `dynamic_modules` logger (any thread).
pub fn log(level: LogLevel, message: &str) {
    // SAFETY: the message is borrowed for the call only; Envoy copies it.
    unsafe { envoy_dynamic_module_callback_log(level, module_buffer(message.as_bytes())) }
}

/// Whether Envoy runs in `--mode validate` (main thread, during configuration).
pub fn validation_mode() -> bool {
    // SAFETY: no arguments; called from config_new on the main thread, as the ABI asks.
    unsafe { envoy_dynamic_module_callback_is_validation_mode() }
}

/// One HTTP stream's Envoy filter. Only valid on its worker while the stream lives (see the module
/// comment); the adapter keeps it in the stream's own state and nowhere else.
#[derive(Debug, Clone, Copy)]
pub struct Filter(FilterEnvoyPtr);

impl Filter {
    /// The first value of header `name` in the map `which`, copied.
    pub fn header(self, which: HeaderType, name: &str) -> Option<Vec<u8>> {
        let mut value = EnvoyBuffer {
            ptr: std::ptr::null(),
            length: 0,
        };
        // SAFETY: the filter is live (module comment); `value` is written by Envoy and read before
        // this call returns; a null `optional_size` is allowed.
        let found = unsafe {
            envoy_dynamic_module_callback_http_get_header(
                self.0,
                which,
                module_buffer(name.as_bytes()),
                &mut value,
                0,
                std::ptr::null_mut(),
            )
        };
        // SAFETY: `value` was handed over by Envoy in this hook.
        (found && !value.ptr.is_null()).then(|| unsafe { copied(value) })
    }

    /// Sets (`Some`) or removes (`None`) header `name` in the map `which`.
    pub fn set_header(self, which: HeaderType, name: &str, value: Option<&str>) -> bool {
        let value = match value {
            Some(v) => module_buffer(v.as_bytes()),
            None => ModuleBuffer {
                ptr: std::ptr::null(),
                length: 0,
            },
        };
        // SAFETY: the filter is live; both buffers are borrowed for the call (Envoy copies them).
        unsafe {
            envoy_dynamic_module_callback_http_set_header(
                self.0,
                which,
                module_buffer(name.as_bytes()),
                value,
            )
        }
    }

    pub fn body_size(self, which: BodyType) -> usize {
        // SAFETY: the filter is live; Envoy answers 0 for a body it has not.
        unsafe { envoy_dynamic_module_callback_http_get_body_size(self.0, which) }
    }

    /// Appends body `which` to `out`, slice by slice as Envoy holds it; `false` when Envoy has no
    /// such body now.
    pub fn read_body(self, which: BodyType, out: &mut Vec<u8>) -> bool {
        // SAFETY: the filter is live.
        let count =
            unsafe { envoy_dynamic_module_callback_http_get_body_chunks_size(self.0, which) };
        if count == 0 {
            return true;
        }
        let mut chunks = vec![
            EnvoyBuffer {
                ptr: std::ptr::null(),
                length: 0
            };
            count
        ];
        // SAFETY: `chunks` has room for the `count` slices Envoy reported a moment ago, in the
        // same hook.
        let read = unsafe {
            envoy_dynamic_module_callback_http_get_body_chunks(self.0, which, chunks.as_mut_ptr())
        };
        if !read {
            return false;
        }
        for chunk in chunks {
            if !chunk.ptr.is_null() && chunk.length > 0 {
                // SAFETY: a slice of Envoy's buffer, valid until the body changes or the hook ends.
                out.extend_from_slice(unsafe {
                    std::slice::from_raw_parts(chunk.ptr.cast::<u8>(), chunk.length)
                });
            }
        }
        true
    }

    pub fn drain_body(self, which: BodyType, bytes: usize) -> bool {
        // SAFETY: the filter is live.
        unsafe { envoy_dynamic_module_callback_http_drain_body(self.0, which, bytes) }
    }

    pub fn append_body(self, which: BodyType, data: &[u8]) -> bool {
        // SAFETY: the filter is live; `data` is borrowed for the call (Envoy copies it).
        unsafe {
            envoy_dynamic_module_callback_http_append_body(self.0, which, module_buffer(data))
        }
    }

    /// Envoy's `sendLocalReply`. It runs the reply through this filter's encoder hooks before
    /// returning: never call it while the stream is borrowed.
    pub fn send_response(self, status: u32, headers: &[(String, String)], body: &[u8]) {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut headers = module_headers(&headers);
        // SAFETY: the filter is live; headers, body and details are borrowed for the call.
        unsafe {
            envoy_dynamic_module_callback_http_send_response(
                self.0,
                status,
                headers.as_mut_ptr(),
                headers.len(),
                module_buffer(body),
                module_buffer(b"livecheck"),
            );
        }
    }

    /// Sends `data` to the caller, ending the response when `end_stream`
    /// (`decoder_callbacks->encodeData`).
    pub fn send_data(self, data: &[u8], end_stream: bool) {
        // SAFETY: the filter is live; `data` is copied by Envoy.
        unsafe {
            envoy_dynamic_module_callback_http_send_response_data(
                self.0,
                module_buffer(data),
                end_stream,
            );
        }
    }

    pub fn continue_decoding(self) {
        // SAFETY: the filter is live.
        unsafe { envoy_dynamic_module_callback_http_filter_continue_decoding(self.0) }
    }

    pub fn continue_encoding(self) {
        // SAFETY: the filter is live.
        unsafe { envoy_dynamic_module_callback_http_filter_continue_encoding(self.0) }
    }

    /// Resets the stream; Envoy calls no hook of it but destroy after this.
    pub fn reset(self) {
        // SAFETY: the filter is live; the details are borrowed for the call.
        unsafe {
            envoy_dynamic_module_callback_http_filter_reset_stream(
                self.0,
                RESET_LOCAL,
                module_buffer(b"livecheck"),
            );
        }
    }

    /// Sends an HTTP callout; its answer comes to `on_http_filter_http_callout_done`.
    pub fn callout(
        self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Option<u64> {
        let mut headers = module_headers(headers);
        let mut id = 0u64;
        // SAFETY: the filter is live; `id` is written by Envoy; the rest is borrowed for the call.
        let result = unsafe {
            envoy_dynamic_module_callback_http_filter_http_callout(
                self.0,
                &mut id,
                module_buffer(cluster.as_bytes()),
                headers.as_mut_ptr(),
                headers.len(),
                module_buffer(body),
                timeout_ms,
            )
        };
        (result == CALLOUT_INIT_SUCCESS).then_some(id)
    }

    pub fn increment(self, counter: usize, by: u64) {
        // SAFETY: the filter is live; no labels.
        unsafe {
            envoy_dynamic_module_callback_http_filter_increment_counter(
                self.0,
                counter,
                std::ptr::null_mut(),
                0,
                by,
            );
        }
    }
}

/// Envoy's object for one filter configuration: used on the main thread only (configuration,
/// counters, report callouts), carried by the worker-side state without being used there.
#[derive(Debug, Clone, Copy)]
pub struct ConfigEnvoy(FilterConfigEnvoyPtr);

// SAFETY: the pointer is only dereferenced by Envoy, in calls the module makes from the main
// thread (config hooks and the config's scheduled and callout hooks); Envoy keeps the object alive
// until `on_http_filter_config_destroy`, after which the module makes no such call.
unsafe impl Send for ConfigEnvoy {}
// SAFETY: as for `Send`: shared references never lead to a call off the main thread.
unsafe impl Sync for ConfigEnvoy {}

impl ConfigEnvoy {
    /// Defines counter `name` (only while Envoy creates the configuration).
    pub fn define_counter(self, name: &str) -> Option<usize> {
        let mut id = 0usize;
        // SAFETY: main thread, during config_new; `id` is written by Envoy; no labels.
        let result = unsafe {
            envoy_dynamic_module_callback_http_filter_config_define_counter(
                self.0,
                module_buffer(name.as_bytes()),
                std::ptr::null_mut(),
                0,
                &mut id,
            )
        };
        (result == METRICS_SUCCESS).then_some(id)
    }

    pub fn increment(self, counter: usize, by: u64) {
        // SAFETY: main thread (see the `Send` reason); no labels.
        unsafe {
            envoy_dynamic_module_callback_http_filter_config_increment_counter(
                self.0,
                counter,
                std::ptr::null_mut(),
                0,
                by,
            );
        }
    }

    /// Sends a callout from the configuration (main thread): it outlives every stream, as a turn
    /// report must. Answered in `on_http_filter_config_http_callout_done`.
    pub fn callout(
        self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Option<u64> {
        let mut headers = module_headers(headers);
        let mut id = 0u64;
        // SAFETY: main thread; `id` is written by Envoy; the rest is borrowed for the call.
        let result = unsafe {
            envoy_dynamic_module_callback_http_filter_config_http_callout(
                self.0,
                &mut id,
                module_buffer(cluster.as_bytes()),
                headers.as_mut_ptr(),
                headers.len(),
                module_buffer(body),
                timeout_ms,
            )
        };
        (result == CALLOUT_INIT_SUCCESS).then_some(id)
    }

    /// A scheduler that wakes this configuration on the main thread from any thread.
    pub fn scheduler(self) -> Option<ConfigScheduler> {
        // SAFETY: main thread, during config_new.
        let ptr = unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_new(self.0) };
        (!ptr.is_null()).then_some(ConfigScheduler(ptr))
    }
}

/// Wakes a configuration on the main thread (`on_http_filter_config_scheduled`), from any thread.
#[derive(Debug)]
pub struct ConfigScheduler(FilterConfigSchedulerPtr);

// SAFETY: `..._config_scheduler_commit` is thread-safe (abi.h: "can be called from any thread");
// the scheduler is deleted once, on drop, after the thread that commits is joined.
unsafe impl Send for ConfigScheduler {}
// SAFETY: as for `Send`.
unsafe impl Sync for ConfigScheduler {}

impl ConfigScheduler {
    pub fn commit(&self, event: u64) {
        // SAFETY: a live scheduler (deleted only on drop); commit is thread-safe.
        unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_commit(self.0, event) }
    }
}

impl Drop for ConfigScheduler {
    fn drop(&mut self) {
        // SAFETY: deleted once; no thread commits any more (the config joins its ticker first).
        unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_delete(self.0) }
    }
}
