//! The emulated plugin and listener configuration.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Envoy's `failure_policy` for a wasm plugin whose VM failed (a trap, e.g. a Rust panic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The in-flight stream gets a 503 (or a reset); later streams get 503 during the reload
    /// backoff ([`Options::reload_backoff`]), then a fresh VM.
    #[default]
    FailReload,
    /// The in-flight stream gets a 503 (or a reset); later streams get 503 too.
    FailClosed,
    /// `FAIL_IGNORE` (the legacy `fail_open: true`): streams pass unfiltered.
    FailOpen,
}

/// A proxy-wasm log level (same numbers as Envoy's spdlog levels).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// 0.
    Trace,
    /// 1.
    Debug,
    /// 2, Envoy's default for the wasm logger.
    #[default]
    Info,
    /// 3.
    Warn,
    /// 4.
    Error,
    /// 5.
    Critical,
}

impl LogLevel {
    pub(crate) fn from_raw(raw: u32) -> Option<Self> {
        Some(match raw {
            0 => Self::Trace,
            1 => Self::Debug,
            2 => Self::Info,
            3 => Self::Warn,
            4 => Self::Error,
            5 => Self::Critical,
            _ => return None,
        })
    }

    pub(crate) fn raw(self) -> u32 {
        self as u32
    }
}

/// How the emulated Envoy is configured for the plugin. `Default` is a plugin with empty
/// configuration, no clusters, Envoy's 1 MiB buffer limit and `FAIL_RELOAD`.
#[derive(Clone, Debug)]
pub struct Options {
    /// `configuration` of the plugin, read in `on_configure`.
    pub plugin_config: Vec<u8>,
    /// `vm_config.configuration`, read in `on_vm_start`.
    pub vm_config: Vec<u8>,
    /// Clusters that exist, for `proxy_http_call`.
    pub clusters: Vec<String>,
    /// The filter config's `allow_on_headers_stop_iteration`.
    pub allow_on_headers_stop_iteration: bool,
    /// The per-stream buffer limit (Envoy's `per_connection_buffer_limit_bytes`, 1 MiB default).
    pub buffer_limit: usize,
    /// What happens when the VM fails.
    pub failure_policy: FailurePolicy,
    /// `FAIL_RELOAD`'s `reload_config.backoff.base_interval` (Envoy's default 1 s): a failed VM
    /// is replaced at the first new stream once this long has passed since the VM was last
    /// (re)loaded; streams before that get 503. Envoy jitters it (`JitteredLowerBoundBackOffStrategy`,
    /// somewhere in [base, 1.5 base)); the harness uses the base, so it is deterministic.
    pub reload_backoff: Duration,
    /// Properties the host answers `proxy_get_property` with, keyed by path segments joined
    /// with `.` (for example `request.path`).
    pub properties: BTreeMap<String, Vec<u8>>,
    /// Envoy's log level for the wasm logger: messages below it are not recorded.
    pub log_level: LogLevel,
    /// The plugin's `root_id`.
    pub root_id: String,
    /// The plugin's `name`.
    pub plugin_name: String,
    /// The VM's `vm_id`.
    pub vm_id: String,
    /// Wall-clock time when the host starts; emulated time only moves with `advance_time`.
    pub start_time: SystemTime,
    /// The VM's environment, what WASI `environ_get` gives the guest (Rust's `std::env::var`):
    /// `vm_config.environment_variables`, its `key_values` and the `host_env_keys` Envoy found in
    /// its own environment. Envoy keeps them in a hash map, so their order is unspecified; the
    /// harness gives them sorted by name. Empty by default, as in Envoy without that field.
    pub environment: BTreeMap<String, String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            plugin_config: Vec::new(),
            vm_config: Vec::new(),
            clusters: Vec::new(),
            allow_on_headers_stop_iteration: false,
            buffer_limit: 1024 * 1024,
            failure_policy: FailurePolicy::default(),
            reload_backoff: Duration::from_secs(1),
            properties: BTreeMap::new(),
            log_level: LogLevel::default(),
            root_id: String::new(),
            plugin_name: "livecheck".to_owned(),
            vm_id: String::new(),
            start_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000),
            environment: BTreeMap::new(),
        }
    }
}
