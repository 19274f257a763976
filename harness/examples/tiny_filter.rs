//! A tiny proxy-wasm filter tested in the harness: it stamps every answer with an `x-tiny: seen`
//! header and leaves everything else alone. The filter is written in WAT here so the example is
//! self-contained; a real filter's tests load its built `.wasm` instead (see `read_fresh_wasm`).
//! Run: `cargo run -p livecheck-harness --example tiny_filter`.

use livecheck_harness::{Host, Options};

const FILTER: &str = r#"(module
  (import "env" "proxy_add_header_map_value"
    (func $add_header (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 65536))
  (data (i32.const 100) "x-tiny")
  (data (i32.const 200) "seen")
  ;; The host copies values into guest memory it allocates through this export.
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $n)))
    (local.get $p))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))
  ;; Map 2 is the response headers; 0 is Continue.
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32)
    (drop (call $add_header (i32.const 2) (i32.const 100) (i32.const 6) (i32.const 200) (i32.const 4)))
    (i32.const 0)))"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let wasm = wat::parse_str(FILTER)?;
    let mut host = Host::new(&wasm, Options::default())?;
    let s = host.new_stream();
    host.send_request_headers(
        s,
        &[(":method", "GET"), (":path", "/"), (":authority", "a")],
        true,
    )?;
    assert!(
        host.upstream_received(s).end_of_stream,
        "the request went upstream untouched"
    );
    host.send_response_headers(s, &[(":status", "200")], false)?;
    host.send_response_body(s, b"hello", true)?;
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(200));
    assert_eq!(caller.header("x-tiny"), Some("seen"));
    assert_eq!(caller.body_text(), "hello");
    host.finish_stream(s)?;
    println!("tiny filter: the answer reached the caller with x-tiny: seen");
    Ok(())
}
