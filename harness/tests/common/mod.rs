//! Shared test set-up: WAT guests with a common prelude, and result readers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use livecheck_harness::{HarnessError, Host, Options};

/// Imports, memory, a bump allocator, the ABI marker and default root callbacks. `$record`
/// appends an i32 to the list the test reads with [`results`].
const PRELUDE: &str = r#"
  (import "env" "proxy_log" (func $log (param i32 i32 i32) (result i32)))
  (import "env" "proxy_get_buffer_bytes" (func $get_buffer (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_set_buffer_bytes" (func $set_buffer (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_header_map_value" (func $get_header (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_add_header_map_value" (func $add_header (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_send_local_response" (func $local_reply (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_http_call" (func $http_call (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_continue_stream" (func $continue (param i32) (result i32)))
  (import "env" "proxy_set_effective_context" (func $set_effective (param i32) (result i32)))
  (import "env" "proxy_set_tick_period_milliseconds" (func $set_tick (param i32) (result i32)))
  (import "env" "proxy_define_metric" (func $define_metric (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_increment_metric" (func $increment_metric (param i32 i64) (result i32)))
  (import "env" "proxy_record_metric" (func $record_metric (param i32 i64) (result i32)))
  (import "env" "proxy_get_metric" (func $get_metric (param i32 i32) (result i32)))
  (import "env" "proxy_set_shared_data" (func $set_shared (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_shared_data" (func $get_shared (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 4)
  (global $heap (mut i32) (i32.const 131072))
  (global $count (mut i32) (i32.const 0))
  (data (i32.const 1000) "results")
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32)
    (local $p i32)
    global.get $heap local.set $p
    global.get $heap local.get $n i32.add global.set $heap
    local.get $p)
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_context_create") (param i32 i32))
  ;; Appends a value to the "results" shared data (4 bytes each, from address 4096).
  (func $record (param $v i32)
    (i32.store (i32.add (i32.const 4096) (i32.mul (global.get $count) (i32.const 4))) (local.get $v))
    (global.set $count (i32.add (global.get $count) (i32.const 1)))
    (drop (call $set_shared (i32.const 1000) (i32.const 7) (i32.const 4096)
      (i32.mul (global.get $count) (i32.const 4)) (i32.const 0))))
"#;

/// Default root callbacks, used unless the guest body defines its own.
const DEFAULT_VM_START: &str =
    r#"(func (export "proxy_on_vm_start") (param i32 i32) (result i32) i32.const 1)"#;
const DEFAULT_CONFIGURE: &str =
    r#"(func (export "proxy_on_configure") (param i32 i32) (result i32) i32.const 1)"#;

/// A module made of the prelude and `body`.
pub fn wat_module(body: &str) -> Vec<u8> {
    let mut text = String::from("(module\n");
    text.push_str(PRELUDE);
    if !body.contains("\"proxy_on_vm_start\"") {
        text.push_str(DEFAULT_VM_START);
    }
    if !body.contains("\"proxy_on_configure\"") {
        text.push_str(DEFAULT_CONFIGURE);
    }
    text.push_str(body);
    text.push(')');
    wat::parse_str(&text).expect("test WAT parses")
}

/// A host running the prelude and `body`.
pub fn wat_host(body: &str, options: Options) -> Host {
    try_wat_host(body, options).expect("host starts")
}

pub fn try_wat_host(body: &str, options: Options) -> Result<Host, HarnessError> {
    Host::new(&wat_module(body), options)
}

/// The values the guest recorded with `$record`, in order.
pub fn results(host: &Host) -> Vec<i32> {
    host.shared_data("results")
        .map(|(bytes, _)| {
            bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

/// Options with the given clusters.
pub fn with_clusters(clusters: &[&str]) -> Options {
    Options {
        clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
        ..Options::default()
    }
}

pub const GET: [(&str, &str); 3] = [
    (":method", "GET"),
    (":path", "/"),
    (":authority", "example"),
];
pub const OK: [(&str, &str); 1] = [(":status", "200")];

/// Statuses of the ABI, as the tests expect them.
pub mod status {
    pub const OK: i32 = 0;
    pub const NOT_FOUND: i32 = 1;
    pub const BAD_ARGUMENT: i32 = 2;
    pub const INVALID_MEMORY_ACCESS: i32 = 6;
    pub const CAS_MISMATCH: i32 = 8;
}
