//! Shared data (with compare-and-swap) and shared queues, as proxy-wasm-cpp-host keeps them
//! (`src/shared_data.cc`, `src/shared_queue.cc`). They outlive a VM reload, like Envoy's
//! process-wide stores keyed by vm_id.

use std::collections::{BTreeMap, VecDeque};

use crate::abi::status;

#[derive(Debug, Default)]
pub(crate) struct SharedData {
    entries: BTreeMap<String, (Vec<u8>, u32)>,
    next_cas: u32,
}

impl SharedData {
    pub(crate) fn get(&self, key: &str) -> Option<&(Vec<u8>, u32)> {
        self.entries.get(key)
    }

    /// A non-zero `cas` must match the stored one; a missing key is set whatever the cas.
    pub(crate) fn set(&mut self, key: &str, value: &[u8], cas: u32) -> i32 {
        if let Some((_, current)) = self.entries.get(key) {
            if cas != 0 && cas != *current {
                return status::CAS_MISMATCH;
            }
        }
        self.next_cas = self.next_cas.wrapping_add(1);
        if self.next_cas == 0 {
            self.next_cas = 1;
        }
        self.entries
            .insert(key.to_owned(), (value.to_vec(), self.next_cas));
        status::OK
    }
}

#[derive(Debug, Default)]
pub(crate) struct Queues {
    by_name: BTreeMap<(String, String), u32>,
    queues: BTreeMap<u32, (u32, VecDeque<Vec<u8>>)>,
    next_token: u32,
}

impl Queues {
    /// Registers (or finds) a queue; `owner` is the root context told when data arrives.
    pub(crate) fn register(&mut self, vm_id: &str, name: &str, owner: u32) -> u32 {
        let key = (vm_id.to_owned(), name.to_owned());
        if let Some(token) = self.by_name.get(&key) {
            if let Some(q) = self.queues.get_mut(token) {
                q.0 = owner;
            }
            return *token;
        }
        self.next_token = self.next_token.wrapping_add(1);
        let token = self.next_token;
        self.by_name.insert(key, token);
        self.queues.insert(token, (owner, VecDeque::new()));
        token
    }

    pub(crate) fn resolve(&self, vm_id: &str, name: &str) -> Option<u32> {
        self.by_name
            .get(&(vm_id.to_owned(), name.to_owned()))
            .copied()
    }

    pub(crate) fn enqueue(&mut self, token: u32, value: &[u8]) -> Result<u32, i32> {
        let (owner, q) = self.queues.get_mut(&token).ok_or(status::NOT_FOUND)?;
        q.push_back(value.to_vec());
        Ok(*owner)
    }

    pub(crate) fn dequeue(&mut self, token: u32) -> Result<Vec<u8>, i32> {
        let (_, q) = self.queues.get_mut(&token).ok_or(status::NOT_FOUND)?;
        q.pop_front().ok_or(status::EMPTY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_cas_is_refused() {
        let mut d = SharedData::default();
        assert_eq!(d.set("k", b"1", 0), status::OK);
        let cas = d.get("k").map(|e| e.1).unwrap();
        assert_eq!(d.set("k", b"2", cas), status::OK);
        assert_eq!(d.set("k", b"3", cas), status::CAS_MISMATCH);
        assert_eq!(d.get("k").map(|e| e.0.clone()), Some(b"2".to_vec()));
    }

    #[test]
    fn queues_are_first_in_first_out() {
        let mut q = Queues::default();
        let t = q.register("", "q", 1);
        assert_eq!(q.resolve("", "q"), Some(t));
        assert_eq!(q.dequeue(t), Err(status::EMPTY));
        q.enqueue(t, b"a").unwrap();
        q.enqueue(t, b"b").unwrap();
        assert_eq!(q.dequeue(t), Ok(b"a".to_vec()));
        assert_eq!(q.enqueue(99, b"x"), Err(status::NOT_FOUND));
    }
}
