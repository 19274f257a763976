//! What the module takes from the operating system rather than from Envoy: the clock and random
//! numbers (the dynamic-modules ABI has neither; a wasm filter asks its host for both).

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A fresh unpredictable u64: `RandomState` keys come from the OS; hashing a constant under a fresh
/// state gives a new value per call.
pub fn random() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0u8)
}
