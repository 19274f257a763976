//! Turn reports a VM died with, counted as lost by a VM that lives (issue 18).
//!
//! A VM's outbox is in its memory: when the VM traps (Envoy then fails its in-flight streams and,
//! under `FAIL_RELOAD`, starts a fresh VM) or is replaced by a new configuration, the reports it
//! had not delivered are gone. So that they are not gone silently, every VM keeps its count of
//! undelivered reports in Envoy's shared data, which outlives the VMs of a plugin (one store per
//! `vm_id`, process-wide):
//!
//! - `livecheck.vms` lists the ids of the VMs that keep such a count;
//! - `livecheck.vm.<id>` holds that VM's count and when it last wrote it.
//!
//! A VM writes its entry when its outbox changes and on every tick. Every few seconds each VM
//! looks at the others: an entry older than [`STALE_MS`] belongs to a VM that no longer ticks,
//! and the VM that takes it off the list (compare-and-swap, so exactly one does) adds its count
//! to `livecheck.reports.lost`. A VM that was only stalled for that long and finds itself off the
//! list adds itself again; its reports may then be counted as lost and still arrive.

use std::cell::Cell;

use crate::host::SharedStore;

/// The list of VMs that keep a count.
pub const REGISTRY_KEY: &str = "livecheck.vms";
/// An entry not written for this long belongs to a VM that is gone: ticks come every 200 ms.
pub const STALE_MS: u64 = 10_000;
/// How often a VM looks for entries of VMs that are gone.
pub const SWEEP_EVERY_MS: u64 = 2_000;
/// How many times a compare-and-swap on the list is tried before the next sweep tries again.
const CAS_TRIES: usize = 8;

/// This VM's entry in the count: its id (0 until configured) and when its root last ticked, the
/// time a count written between ticks carries. Shared by the root and every stream of the VM.
#[derive(Debug, Default)]
pub struct Ledger {
    id: Cell<u64>,
    tick_ms: Cell<u64>,
}

impl Ledger {
    /// This VM's id; 0 until configured.
    pub fn id(&self) -> u64 {
        self.id.get()
    }

    /// The VM was configured as `id` (nonzero) at `now_ms`.
    pub fn start(&self, id: u64, now_ms: u64) {
        self.id.set(id);
        self.tick_ms.set(now_ms);
    }

    /// The root ticked at `now_ms`.
    pub fn ticked(&self, now_ms: u64) {
        self.tick_ms.set(now_ms);
    }

    /// Writes this VM's count of undelivered reports, once configured.
    pub fn publish(&self, store: &mut impl SharedStore, pending: usize) {
        let id = self.id.get();
        if id != 0 {
            publish(store, id, pending, self.tick_ms.get());
        }
    }
}

/// One VM's count of undelivered reports and when it wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub pending: u64,
    pub written_ms: u64,
}

impl Entry {
    fn encode(self) -> [u8; 16] {
        let mut out = [0; 16];
        let (a, b) = out.split_at_mut(8);
        a.copy_from_slice(&self.pending.to_le_bytes());
        b.copy_from_slice(&self.written_ms.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let (a, b) = bytes.split_first_chunk::<8>()?;
        let b: &[u8; 8] = b.try_into().ok()?;
        Some(Self {
            pending: u64::from_le_bytes(*a),
            written_ms: u64::from_le_bytes(*b),
        })
    }
}

pub fn entry_key(id: u64) -> String {
    format!("livecheck.vm.{id:016x}")
}

fn decode_ids(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .filter_map(|c| c.try_into().ok().map(u64::from_le_bytes))
        .collect()
}

fn encode_ids(ids: &[u64]) -> Vec<u8> {
    ids.iter().flat_map(|id| id.to_le_bytes()).collect()
}

/// Writes this VM's count.
pub fn publish(store: &mut impl SharedStore, id: u64, pending: usize, now_ms: u64) {
    let entry = Entry {
        pending: u64::try_from(pending).unwrap_or(u64::MAX),
        written_ms: now_ms,
    };
    store.set(&entry_key(id), &entry.encode(), 0);
}

/// Puts this VM on the list unless it is there. `false`: the list kept changing under it.
pub fn register(store: &mut impl SharedStore, id: u64) -> bool {
    for _ in 0..CAS_TRIES {
        let (bytes, cas) = store.get(REGISTRY_KEY).unwrap_or_default();
        let mut ids = decode_ids(&bytes);
        if ids.contains(&id) {
            return true;
        }
        ids.push(id);
        if store.set(REGISTRY_KEY, &encode_ids(&ids), cas) {
            return true;
        }
    }
    false
}

/// Takes the VMs whose entries went stale off the list and returns how many reports they held:
/// each is counted by exactly one sweeping VM. `own` is never taken off, and is put back on the
/// list if another VM took it off.
pub fn sweep(store: &mut impl SharedStore, own: u64, now_ms: u64) -> u64 {
    let mut lost = 0u64;
    for _ in 0..CAS_TRIES {
        let Some((bytes, cas)) = store.get(REGISTRY_KEY) else {
            break;
        };
        let ids = decode_ids(&bytes);
        let entry = |id: u64| {
            store
                .get(&entry_key(id))
                .and_then(|(value, _)| Entry::decode(&value))
        };
        // A VM listed but with no entry yet has only just registered: not stale.
        let gone: Vec<(u64, Entry)> = ids
            .iter()
            .filter(|&&id| id != own)
            .filter_map(|&id| entry(id).map(|e| (id, e)))
            .filter(|(_, e)| now_ms.saturating_sub(e.written_ms) > STALE_MS)
            .collect();
        if gone.is_empty() {
            break;
        }
        let kept: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| !gone.iter().any(|(g, _)| g == id))
            .collect();
        if store.set(REGISTRY_KEY, &encode_ids(&kept), cas) {
            for (id, e) in &gone {
                lost = lost.saturating_add(e.pending);
                store.set(&entry_key(*id), &[], 0);
            }
            break;
        }
    }
    register(store, own);
    lost
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::fake::SharedData as Store;

    #[test]
    fn a_vm_that_stopped_writing_has_its_reports_counted_once() {
        let mut store = Store::default();
        for id in [1, 2, 3] {
            assert!(register(&mut store, id));
        }
        publish(&mut store, 1, 7, 1_000);
        publish(&mut store, 2, 0, 1_000);
        publish(&mut store, 3, 4, 1_000);
        // VM 2 and 3 go on writing; VM 1 died at 1 s.
        for now in (1_200..=11_000).step_by(200) {
            publish(&mut store, 2, 0, now);
            publish(&mut store, 3, 4, now);
        }
        assert_eq!(sweep(&mut store, 2, 11_000), 0, "not stale yet");
        publish(&mut store, 2, 0, 11_200);
        publish(&mut store, 3, 4, 11_200);
        assert_eq!(sweep(&mut store, 2, 11_200), 7);
        assert_eq!(sweep(&mut store, 3, 11_200), 0, "already counted");
        let (ids, _) = store.get(REGISTRY_KEY).unwrap();
        assert_eq!(decode_ids(&ids), vec![2, 3]);
    }

    #[test]
    fn a_sweep_never_takes_its_own_vm_off_and_puts_it_back() {
        let mut store = Store::default();
        register(&mut store, 1);
        register(&mut store, 2);
        publish(&mut store, 1, 3, 0);
        publish(&mut store, 2, 5, 0);
        // VM 1 was stalled: VM 2 counts it as gone, then VM 1 comes back.
        assert_eq!(sweep(&mut store, 2, 20_000), 3);
        publish(&mut store, 1, 3, 20_100);
        assert_eq!(
            sweep(&mut store, 1, 20_100),
            5,
            "VM 2 did not write for 20 s either"
        );
        let (ids, _) = store.get(REGISTRY_KEY).unwrap();
        assert_eq!(decode_ids(&ids), vec![1]);
    }

    #[test]
    fn a_vm_registered_without_an_entry_yet_is_not_stale() {
        let mut store = Store::default();
        register(&mut store, 1);
        register(&mut store, 2);
        assert_eq!(sweep(&mut store, 2, 1_000_000), 0);
        let (ids, _) = store.get(REGISTRY_KEY).unwrap();
        assert_eq!(decode_ids(&ids), vec![1, 2]);
    }

    #[test]
    fn unreadable_shared_values_count_nothing() {
        let mut store = Store::default();
        store.set(REGISTRY_KEY, &[1, 2, 3], 0);
        store.set(&entry_key(9), &[1], 0);
        assert_eq!(sweep(&mut store, 1, 50_000), 0);
        assert_eq!(Entry::decode(&[0; 15]), None);
        let e = Entry {
            pending: 3,
            written_ms: 9,
        };
        assert_eq!(Entry::decode(&e.encode()), Some(e));
    }
}
