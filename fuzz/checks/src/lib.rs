//! The fuzz targets' bodies, one module each (`<target>::check`, panicking when an input breaks a
//! property), and what several share: a compiled policy, one streamed answer through the rewriter.
//! They live here, not in fuzz_targets/, so that two drivers run the same code: cargo-fuzz's
//! libFuzzer binaries (fuzz/fuzz_targets/, nightly, `make fuzz`) and the seed replay (tests/seeds.rs,
//! stable, without libFuzzer, in `make test`'s `cargo nextest run`).
//!
//! Native only, as the sidecar it fuzzes: on wasm targets (the workspace's wasm32 clippy) this crate
//! compiles to nothing.

#![cfg(not(target_family = "wasm"))]

pub mod eventstream_decoder;
pub mod policy;
pub mod request_text;
pub mod sidecar_wire;
pub mod sse_decoder;
pub mod stream_rewriter;
pub mod tool_calls;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use livecheck::api::Api;
use livecheck::config::{Policy, Version};
use livecheck::stream::{caller, Hold};

/// The published version of a policy the target itself wrote, compiled once per thread (`Rc` is
/// not `Sync`; libFuzzer runs a target on one thread). A refusal is the target's own bug.
pub fn version_of(policy: &'static str) -> Rc<Version> {
    thread_local! {
        static COMPILED: RefCell<HashMap<&'static str, Rc<Version>>> = RefCell::default();
    }
    COMPILED.with(|compiled| {
        let mut compiled = compiled.borrow_mut();
        let version = compiled.entry(policy).or_insert_with(|| {
            Policy::from_json(policy.as_bytes())
                .ok()
                .and_then(|p| p.select(None, None, None).ok())
                .unwrap_or_else(|| panic!("the target's policy is refused"))
        });
        Rc::clone(version)
    })
}

/// The bytes a caller receives for an upstream `body` fed in `size`-byte chunks: a held round is
/// released, or cut when a rule of the version matches its text (as the turn decides it).
pub fn rewrite(api: Api, hold: Hold, version: &Rc<Version>, body: &[u8], size: usize) -> Vec<u8> {
    caller::rewrite(api, hold, version, body, size, 1 << 16).out
}
