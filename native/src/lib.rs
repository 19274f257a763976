//! livecheck as an Envoy dynamic module (`envoy.filters.http.dynamic_modules`, module `livecheck`,
//! `filter_name: livecheck`, the policy JSON as `filter_config`): the same core as the wasm filter,
//! driven through Envoy's dynamic-modules ABI instead of proxy-wasm's.
//!
//! - `abi`: the ABI's types, hook signatures and callbacks, declared by hand from Envoy's `abi.h`;
//! - `envoy`: everything unsafe: safe wrappers around the callbacks, and (`envoy::hooks`) the
//!   exported hooks, each catching a panic;
//! - `config`: one filter configuration: the root logic on the main thread, the policy compiled
//!   per worker, the ticker that sends turn reports;
//! - `stream`: one HTTP stream, translated onto a `livecheck::turn::Turn` through `NativeHost`;
//! - `os`: the clock and random numbers, which the ABI does not give.
//!
//! docs/design/028-native-module.md says why it is built this way and what was measured.

mod abi;
mod config;
mod envoy;
mod os;
mod stream;
