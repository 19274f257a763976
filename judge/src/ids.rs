//! Ids that sort by the time they were made (`rck_…`, `evt_…`) and the wall clock in milliseconds.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// `prefix` + the time in milliseconds (12 hex digits) + 24 hex digits that differ for every id.
/// Ids made later sort later, so a table's index on them grows at its end: a random id lands on a
/// random page of the index, and SQLite writes every page a transaction touched to its log
/// (`make bench-ingest`: a report's results with random ids cost ~1.4x the CPU, with random turn
/// ids too ~2x; see docs/design/017-sidecar-store-ingest.md).
///
/// The 96 bits after the time are two SplitMix64 outputs of a per-thread counter that starts at a
/// random point: the OS is asked once per thread, not once per id (a `getrandom` system call per
/// result was ~7% of the sidecar's CPU storing reports). SplitMix64's finalizer is a bijection, so a
/// thread's ids never repeat; two threads or processes repeat one only if their random starts land
/// within a few billion of each other in 2^64. The ids are unique, not secret: every store query
/// needs the API token anyway. Should the OS have no randomness to give, the time, the thread and a
/// process-wide counter seed the thread instead.
pub fn time_ordered(prefix: &str) -> String {
    thread_local! {
        static NEXT: Cell<u64> = Cell::new(seed());
    }
    let n = NEXT.with(|next| {
        let n = next.get();
        next.set(n.wrapping_add(1));
        n
    });
    let mut id = String::with_capacity(prefix.len() + 36);
    id.push_str(prefix);
    push_hex(&mut id, now_ms().clamp(0, 0xffff_ffff_ffff) as u64, 12);
    push_hex(&mut id, mix(n), 16);
    push_hex(&mut id, mix(n ^ 0x5851_f42d_4c95_7f2d) >> 32, 8);
    id
}

/// Where a thread's counter starts: 64 bits from the OS.
fn seed() -> u64 {
    static FALLBACK: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 8];
    if getrandom::getrandom(&mut bytes).is_ok() {
        return u64::from_le_bytes(bytes);
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let count = FALLBACK.fetch_add(1, Ordering::Relaxed);
    mix(nanos ^ mix(count ^ u64::from(std::process::id()).rotate_left(32)))
}

/// SplitMix64's output function: a bijection on `u64` whose outputs look random.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The low `digits` hex digits of `value`, most significant first.
fn push_hex(out: &mut String, value: u64, digits: u32) {
    for k in (0..digits).rev() {
        let digit = ((value >> (4 * k)) & 0xf) as u32;
        out.push(char::from_digit(digit, 16).unwrap_or('0'));
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A day in milliseconds.
pub const DAY_MS: i64 = 86_400_000;

/// The UTC day (days since the epoch) of a time in milliseconds.
pub fn utc_day(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
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

    #[test]
    fn ids_made_on_other_threads_differ_too() {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(|| (0..1000).map(|_| time_ordered("evt_")).collect::<Vec<_>>())
            })
            .collect();
        let mut all = std::collections::HashSet::new();
        for t in threads {
            for id in t.join().unwrap() {
                assert_eq!(id.len(), "evt_".len() + 36);
                assert!(all.insert(id));
            }
        }
    }

    #[test]
    fn the_time_part_is_the_milliseconds_in_hex() {
        let before = now_ms();
        let id = time_ordered("rck_");
        let after = now_ms();
        let ms = i64::from_str_radix(&id[4..16], 16).unwrap();
        assert!(before <= ms && ms <= after, "{before} {ms} {after}");
    }
}
