//! Random ids (`rck_…`, `evt_…`) and the wall clock in milliseconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// `prefix` + 24 random hex digits. Should the OS have no randomness to give, the time and a counter
/// stand in: still unique within this process, which is what the ids need.
pub fn random(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 12];
    if getrandom::getrandom(&mut bytes).is_err() {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let count = COUNTER.fetch_add(1, Ordering::Relaxed);
        for (slot, byte) in bytes
            .iter_mut()
            .zip(nanos.to_be_bytes().into_iter().chain(count.to_be_bytes()))
        {
            *slot = byte;
        }
    }
    let mut id = String::with_capacity(prefix.len() + 24);
    id.push_str(prefix);
    for b in bytes {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The UTC day (days since the epoch) of a time in milliseconds.
pub fn utc_day(ms: i64) -> i64 {
    ms.div_euclid(86_400_000)
}

/// RFC 3339 in UTC, to the second: `2026-10-16T09:14:03Z`.
pub fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

/// Milliseconds since the epoch of an RFC 3339 time.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}
