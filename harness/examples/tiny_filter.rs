//! A tiny proxy-wasm filter tested in the harness: it answers 403 to any request that carries an
//! `x-deny` header and lets every other request through. The filter is written in WAT here so the
//! example is self-contained; a real filter's tests load its built `.wasm` instead (see
//! `read_fresh_wasm`). Run: `cargo run -p livecheck-harness --example tiny_filter`.

use livecheck_harness::{Host, Options};

const FILTER: &str = r#"(module
  (import "env" "proxy_get_header_map_value"
    (func $get_header (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_send_local_response"
    (func $local_reply (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 65536))
  (data (i32.const 100) "x-deny")
  (data (i32.const 200) "denied by the tiny filter")
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
  ;; Map 0 is the request headers; status 0 means the header was found.
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (if (i32.eqz (call $get_header (i32.const 0) (i32.const 100) (i32.const 6)
                                   (i32.const 300) (i32.const 304)))
      (then
        (drop (call $local_reply (i32.const 403) (i32.const 0) (i32.const 0)
                                 (i32.const 200) (i32.const 25) (i32.const 0) (i32.const 0)
                                 (i32.const -1)))
        (return (i32.const 1))))
    (i32.const 0)))"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let wasm = wat::parse_str(FILTER)?;
    let mut host = Host::new(&wasm, Options::default())?;

    let allowed = host.new_stream();
    host.send_request_headers(
        allowed,
        &[(":method", "GET"), (":path", "/"), (":authority", "a")],
        true,
    )?;
    assert!(
        host.upstream_received(allowed).end_of_stream,
        "the request went upstream"
    );
    host.send_response_headers(allowed, &[(":status", "200")], true)?;
    assert_eq!(host.caller_received(allowed).status(), Some(200));
    host.finish_stream(allowed)?;

    let denied = host.new_stream();
    host.send_request_headers(
        denied,
        &[
            (":method", "GET"),
            (":path", "/"),
            (":authority", "a"),
            ("x-deny", "1"),
        ],
        true,
    )?;
    let caller = host.caller_received(denied);
    assert_eq!(caller.status(), Some(403));
    assert_eq!(caller.body_text(), "denied by the tiny filter");
    assert!(
        host.upstream_received(denied).body.is_empty(),
        "nothing went upstream"
    );
    host.finish_stream(denied)?;

    println!("tiny filter: 200 without x-deny, 403 with it");
    Ok(())
}
