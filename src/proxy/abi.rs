//! The host calls the adapter makes, declared here so that every status comes back as a value.
//!
//! The 0.2 SDK's `hostcalls` panic on any status they did not expect (Envoy answers BadArgument to
//! a header read once request headers went on, for instance), and its `Status` enum cannot hold
//! every code Envoy returns. A panic kills the VM for every stream on the worker, so the adapter
//! calls the ABI itself and treats any non-Ok status as "the host said no".

use std::ptr::{null, null_mut};

/// A host status other than Ok (Envoy's `WasmResult` code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused(pub u32);

const OK: u32 = 0;
const NOT_FOUND: u32 = 1;

pub const REQUEST_HEADERS: u32 = 0;
pub const RESPONSE_HEADERS: u32 = 2;
pub const REQUEST_BODY: u32 = 0;
pub const RESPONSE_BODY: u32 = 1;
pub const PLUGIN_CONFIGURATION: u32 = 7;
pub const COUNTER: u32 = 0;
pub const HTTP_REQUEST_STREAM: u32 = 0;
pub const HTTP_RESPONSE_STREAM: u32 = 1;
pub const HTTP_CALL_RESPONSE_HEADERS: u32 = 6;
pub const HTTP_CALL_RESPONSE_BODY: u32 = 4;

#[allow(clashing_extern_declarations)]
#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_log(level: u32, message_data: *const u8, message_size: usize) -> u32;
    fn proxy_get_current_time_nanoseconds(return_time: *mut u64) -> u32;
    fn proxy_get_header_map_value(
        map_type: u32,
        key_data: *const u8,
        key_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
    ) -> u32;
    fn proxy_get_header_map_pairs(
        map_type: u32,
        return_map_data: *mut *mut u8,
        return_map_size: *mut usize,
    ) -> u32;
    fn proxy_replace_header_map_value(
        map_type: u32,
        key_data: *const u8,
        key_size: usize,
        value_data: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_remove_header_map_value(map_type: u32, key_data: *const u8, key_size: usize) -> u32;
    fn proxy_get_buffer_bytes(
        buffer_type: u32,
        start: usize,
        max_size: usize,
        return_buffer_data: *mut *mut u8,
        return_buffer_size: *mut usize,
    ) -> u32;
    fn proxy_set_buffer_bytes(
        buffer_type: u32,
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
    fn proxy_define_metric(
        metric_type: u32,
        name_data: *const u8,
        name_size: usize,
        return_id: *mut u32,
    ) -> u32;
    fn proxy_increment_metric(metric_id: u32, offset: i64) -> u32;
    fn proxy_close_stream(stream_type: u32) -> u32;
    fn proxy_get_shared_data(
        key_data: *const u8,
        key_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
        return_cas: *mut u32,
    ) -> u32;
    fn proxy_set_shared_data(
        key_data: *const u8,
        key_size: usize,
        value_data: *const u8,
        value_size: usize,
        cas: u32,
    ) -> u32;
    fn proxy_continue_stream(stream_type: u32) -> u32;
    fn proxy_set_tick_period_milliseconds(period: u32) -> u32;
    fn proxy_set_effective_context(context_id: u32) -> u32;
}

fn ok(code: u32) -> Result<(), Refused> {
    if code == OK {
        Ok(())
    } else {
        Err(Refused(code))
    }
}

/// Takes ownership of bytes the host allocated in guest memory (through the SDK's
/// `proxy_on_memory_allocate`, i.e. the global allocator).
///
/// # Safety
/// `data` must be null or point to `size` initialised bytes allocated by the global allocator.
unsafe fn take(data: *mut u8, size: usize) -> Vec<u8> {
    if data.is_null() {
        Vec::new()
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { Vec::from_raw_parts(data, size, size) }
    }
}

/// Levels as the ABI numbers them: 0 trace … 5 critical.
pub fn log(level: u32, message: &str) {
    let _span = crate::profile::span("host.log");
    // SAFETY: the pointer and length describe `message`, alive for the call.
    let _ = unsafe { proxy_log(level, message.as_ptr(), message.len()) };
}

pub fn now_nanos() -> Result<u64, Refused> {
    let mut t = 0u64;
    // SAFETY: `t` is a valid place for the host to write a u64.
    ok(unsafe { proxy_get_current_time_nanoseconds(&mut t) })?;
    Ok(t)
}

/// A header's raw value: `Ok(None)` when absent.
pub fn header(map: u32, name: &str) -> Result<Option<Vec<u8>>, Refused> {
    let _span = crate::profile::span("host.get_header");
    let mut data = null_mut();
    let mut size = 0usize;
    // SAFETY: key pointer/length describe `name`; the out-pointers are valid places.
    let code =
        unsafe { proxy_get_header_map_value(map, name.as_ptr(), name.len(), &mut data, &mut size) };
    match code {
        // SAFETY: on Ok the host wrote `size` bytes at `data`, allocated for us.
        OK => Ok(Some(unsafe { take(data, size) })),
        NOT_FOUND => Ok(None),
        other => Err(Refused(other)),
    }
}

/// A header map as Envoy lists it, kept as the host wrote it: the encoded bytes and where each
/// name and value stands in them (one allocation for the index, none per header).
#[derive(Debug, Default)]
pub struct Pairs {
    bytes: Vec<u8>,
    /// (name start, name end, value end): a value starts one byte (the name's NUL) after its name.
    spans: Vec<(usize, usize, usize)>,
}

impl Pairs {
    /// Every (name, value), in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.spans
            .iter()
            .filter_map(|&(start, name_end, value_end)| {
                Some((
                    self.bytes.get(start..name_end)?,
                    self.bytes.get(name_end.checked_add(1)?..value_end)?,
                ))
            })
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.spans.len()
    }
}

/// A whole header map in one host call, in order, as (name, value) byte pairs: an empty map when
/// the host has none. Envoy's names are lowercase.
pub fn header_pairs(map: u32) -> Result<Pairs, Refused> {
    let _span = crate::profile::span("host.get_header_pairs");
    let mut data = null_mut();
    let mut size = 0usize;
    // SAFETY: the out-pointers are valid places.
    let code = unsafe { proxy_get_header_map_pairs(map, &mut data, &mut size) };
    match code {
        // SAFETY: on Ok the host wrote `size` bytes at `data`, allocated for us.
        OK => Ok(deserialize_pairs(unsafe { take(data, size) })),
        NOT_FOUND => Ok(Pairs::default()),
        other => Err(Refused(other)),
    }
}

/// Reads the ABI's map encoding (see [`serialize_pairs`]): a count, then each name's and value's
/// size, then each name and value followed by a NUL. A malformed map reads as the pairs before
/// the fault.
fn deserialize_pairs(bytes: Vec<u8>) -> Pairs {
    let u32_at = |at: usize| -> Option<usize> {
        let b: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
        usize::try_from(u32::from_le_bytes(b)).ok()
    };
    let Some(count) = u32_at(0) else {
        return Pairs::default();
    };
    let Some(mut at) = count.checked_mul(8).and_then(|n| n.checked_add(4)) else {
        return Pairs::default();
    };
    if at > bytes.len() {
        return Pairs::default();
    }
    let mut spans = Vec::with_capacity(count);
    for i in 0..count {
        let sizes = 4 + i * 8;
        let (Some(k), Some(v)) = (u32_at(sizes), u32_at(sizes + 4)) else {
            break;
        };
        let name_end = at.checked_add(k);
        let value_end = name_end.and_then(|e| e.checked_add(1)?.checked_add(v));
        match (name_end, value_end) {
            (Some(name_end), Some(value_end)) if value_end <= bytes.len() => {
                spans.push((at, name_end, value_end));
                // the NUL after the value
                at = value_end.saturating_add(1);
            }
            _ => break,
        }
    }
    Pairs { bytes, spans }
}

pub fn set_header(map: u32, name: &str, value: Option<&str>) -> Result<(), Refused> {
    let _span = crate::profile::span("host.set_header");
    // SAFETY: every pointer/length pair describes a live slice.
    ok(unsafe {
        match value {
            Some(v) => {
                proxy_replace_header_map_value(map, name.as_ptr(), name.len(), v.as_ptr(), v.len())
            }
            None => proxy_remove_header_map_value(map, name.as_ptr(), name.len()),
        }
    })
}

pub fn buffer(buffer: u32, start: usize, size: usize) -> Result<Vec<u8>, Refused> {
    let _span = crate::profile::span("host.get_buffer");
    let mut data = null_mut();
    let mut len = 0usize;
    // SAFETY: the out-pointers are valid places.
    let code = unsafe { proxy_get_buffer_bytes(buffer, start, size, &mut data, &mut len) };
    match code {
        // SAFETY: on Ok the host wrote `len` bytes at `data`, allocated for us.
        OK => Ok(unsafe { take(data, len) }),
        NOT_FOUND => Ok(Vec::new()),
        other => Err(Refused(other)),
    }
}

pub fn set_buffer(buffer: u32, start: usize, size: usize, data: &[u8]) -> Result<(), Refused> {
    let _span = crate::profile::span("host.set_buffer");
    // SAFETY: the pointer/length describe `data`.
    ok(unsafe { proxy_set_buffer_bytes(buffer, start, size, data.as_ptr(), data.len()) })
}

pub fn send_local_response(
    status: u32,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(), Refused> {
    let _span = crate::profile::span("host.send_local_response");
    let headers = serialize_pairs(headers);
    // SAFETY: every pointer/length pair describes a live slice owned by this frame.
    ok(unsafe {
        proxy_send_local_response(
            status,
            null(),
            0,
            body.as_ptr(),
            body.len(),
            headers.as_ptr(),
            headers.len(),
            -1,
        )
    })
}

/// A shared-data value and its compare-and-swap token: `Ok(None)` when the key was never set.
pub fn shared_data(key: &str) -> Result<Option<(Vec<u8>, u32)>, Refused> {
    let _span = crate::profile::span("host.get_shared_data");
    let mut data = null_mut();
    let mut size = 0usize;
    let mut cas = 0u32;
    // SAFETY: the key pointer/length describe `key`; the out-pointers are valid places.
    let code =
        unsafe { proxy_get_shared_data(key.as_ptr(), key.len(), &mut data, &mut size, &mut cas) };
    match code {
        // SAFETY: on Ok the host wrote `size` bytes at `data`, allocated for us.
        OK => Ok(Some((unsafe { take(data, size) }, cas))),
        NOT_FOUND => Ok(None),
        other => Err(Refused(other)),
    }
}

/// Sets a shared-data value if `cas` is 0 or still the key's token (else CasMismatch).
pub fn set_shared_data(key: &str, value: &[u8], cas: u32) -> Result<(), Refused> {
    let _span = crate::profile::span("host.set_shared_data");
    // SAFETY: the pointer/length pairs describe `key` and `value`.
    ok(unsafe { proxy_set_shared_data(key.as_ptr(), key.len(), value.as_ptr(), value.len(), cas) })
}

pub fn define_counter(name: &str) -> Result<u32, Refused> {
    let _span = crate::profile::span("host.define_metric");
    let mut id = 0u32;
    // SAFETY: the pointer/length describe `name`; `id` is a valid place.
    ok(unsafe { proxy_define_metric(COUNTER, name.as_ptr(), name.len(), &mut id) })?;
    Ok(id)
}

pub fn increment(metric: u32, by: i64) -> Result<(), Refused> {
    let _span = crate::profile::span("host.increment_metric");
    increment_untimed(metric, by)
}

/// [`increment`] outside the profile's spans (the profile's own counters).
pub fn increment_untimed(metric: u32, by: i64) -> Result<(), Refused> {
    // SAFETY: plain values.
    ok(unsafe { proxy_increment_metric(metric, by) })
}

/// The ABI's map encoding: pair count, each (name length, value length), then each name and
/// value followed by a NUL, all sizes little-endian u32.
fn serialize_pairs(pairs: &[(&str, &str)]) -> Vec<u8> {
    let len32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes();
    let mut out = Vec::new();
    out.extend_from_slice(&len32(pairs.len()));
    for (k, v) in pairs {
        out.extend_from_slice(&len32(k.len()));
        out.extend_from_slice(&len32(v.len()));
    }
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

pub fn close_stream(stream: u32) -> Result<(), Refused> {
    let _span = crate::profile::span("host.close_stream");
    // SAFETY: a plain value.
    ok(unsafe { proxy_close_stream(stream) })
}

pub fn continue_stream(stream: u32) -> Result<(), Refused> {
    let _span = crate::profile::span("host.continue_stream");
    // SAFETY: a plain value.
    ok(unsafe { proxy_continue_stream(stream) })
}

pub fn set_effective_context(context_id: u32) -> Result<(), Refused> {
    let _span = crate::profile::span("host.set_effective_context");
    // SAFETY: a plain value.
    ok(unsafe { proxy_set_effective_context(context_id) })
}

pub fn set_tick_period_ms(period: u32) -> Result<(), Refused> {
    // SAFETY: a plain value.
    ok(unsafe { proxy_set_tick_period_milliseconds(period) })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn header_pairs_read_back_what_the_abi_encoding_holds() {
        let encoded = serialize_pairs(&[(":path", "/v1/messages"), ("x-a", ""), ("x-a", "2")]);
        let pairs = deserialize_pairs(encoded.clone());
        let text: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| {
                (
                    std::str::from_utf8(k).unwrap(),
                    std::str::from_utf8(v).unwrap(),
                )
            })
            .collect();
        assert_eq!(text, [(":path", "/v1/messages"), ("x-a", ""), ("x-a", "2")]);
        // Every truncation reads without a panic, as the pairs whole before the cut (the last
        // value's closing NUL is not needed to read it).
        for cut in 0..encoded.len() - 1 {
            assert!(deserialize_pairs(encoded[..cut].to_vec()).len() < 3);
        }
        assert_eq!(deserialize_pairs(vec![0xff, 0xff, 0xff, 0xff]).len(), 0);
    }
}
