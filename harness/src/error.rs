//! What can go wrong when driving the harness.

use std::fmt;

/// An error of the harness (never of the guest's ABI calls, which get statuses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HarnessError {
    /// The module does not compile.
    Compile(String),
    /// The module does not instantiate (for example an import Envoy does not provide).
    Instantiate(String),
    /// The module exports no `proxy_abi_version_*` marker Envoy knows.
    AbiVersion,
    /// The guest trapped while starting.
    Trap(String),
    /// `on_vm_start` or `on_configure` returned false: Envoy refuses the configuration.
    ConfigRejected,
    /// The stream id is unknown or the stream was finished.
    UnknownStream,
    /// The call does not fit the stream's state (names what was wrong).
    Stream(String),
    /// No pending callout has this token.
    UnknownCallout(u32),
    /// The `.wasm` file is missing or older than its sources.
    StaleWasm(String),
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Compile(e) => write!(f, "the wasm module does not compile: {e}"),
            Self::Instantiate(e) => write!(f, "the wasm module does not instantiate: {e}"),
            Self::AbiVersion => write!(f, "the wasm module exports no known proxy_abi_version"),
            Self::Trap(e) => write!(f, "the guest trapped while starting: {e}"),
            Self::ConfigRejected => write!(f, "on_vm_start or on_configure returned false"),
            Self::UnknownStream => write!(f, "unknown or finished stream"),
            Self::Stream(e) => write!(f, "{e}"),
            Self::UnknownCallout(t) => write!(f, "no pending callout with token {t}"),
            Self::StaleWasm(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for HarnessError {}
