//! Ids that sort by the time they were made (`rck_…`, `evt_…`) and the wall clock in milliseconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// `prefix` + the time in milliseconds (12 hex digits) + 24 random hex digits. Ids made later sort
/// later, so a table's index on them grows at its end: a random id lands on a random page of the
/// index, and SQLite writes every page a transaction touched to its log (`make bench-ingest`: a
/// report's results with random ids cost ~1.4x the CPU, with random turn ids too ~2x; see
/// ARCHITECTURE.md). Should the OS have no randomness to give, the time and a counter stand in:
/// still unique within this process, which is what the ids need.
pub fn time_ordered(prefix: &str) -> String {
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
    let mut id = String::with_capacity(prefix.len() + 36);
    id.push_str(prefix);
    id.push_str(&format!("{:012x}", now_ms().clamp(0, 0xffff_ffff_ffff)));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_the_time_they_were_made_and_differ_within_one() {
        let first = time_ordered("rck_");
        let same_ms: Vec<String> = (0..100).map(|_| time_ordered("rck_")).collect();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let later = time_ordered("rck_");
        // Within one millisecond the random part orders them; across, the time does.
        let time = |id: &String| id.get(..16).map(str::to_owned);
        assert!(same_ms
            .iter()
            .all(|id| time(id) >= time(&first) && id < &later));
        let distinct: std::collections::HashSet<&String> = same_ms.iter().collect();
        assert_eq!(distinct.len(), same_ms.len());
        assert_eq!(first.len(), "rck_".len() + 36);
        assert!(first["rck_".len()..].chars().all(|c| c.is_ascii_hexdigit()));
    }
}
