//! The metric host calls: define, read, record and increment counters, gauges and histograms (the
//! store is `crate::metrics`).

use wasmtime::Caller;

use crate::abi::status;
use crate::memory::{ok_or_fault, word, Guest};
use crate::state::State;

pub(super) fn define_metric(
    mut caller: Caller<'_, State>,
    t: i32,
    ptr: i32,
    len: i32,
    id_ptr: i32,
) -> i32 {
    let mut g = Guest::new(&mut caller);
    let Some(name) = g.read_str(word(ptr), word(len)) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    match g.state().world.metrics.define(word(t), &name) {
        Ok(id) => ok_or_fault(g.write_u32(word(id_ptr), id)),
        Err(code) => code,
    }
}

pub(super) fn get_metric(mut caller: Caller<'_, State>, id: i32, out: i32) -> i32 {
    match caller.data().world.metrics.get(word(id)) {
        Ok(value) => ok_or_fault(Guest::new(&mut caller).write_u64(word(out), value)),
        Err(code) => code,
    }
}

pub(super) fn record_metric(mut caller: Caller<'_, State>, id: i32, value: i64) -> i32 {
    let value = u64::from_ne_bytes(value.to_ne_bytes());
    caller.data_mut().world.metrics.record(word(id), value)
}

pub(super) fn increment_metric(mut caller: Caller<'_, State>, id: i32, offset: i64) -> i32 {
    caller.data_mut().world.metrics.increment(word(id), offset)
}
