//! The shared data and shared queue host calls: state every VM of the host sees, with Envoy's
//! compare-and-swap and queue-ready rules (the store is `crate::shared`).

use wasmtime::Caller;

use crate::abi::status;
use crate::memory::{ok_or_fault, word, Guest, R};
use crate::state::{Deferred, State};

pub(super) fn get_shared_data(
    mut caller: Caller<'_, State>,
    key_ptr: i32,
    key_len: i32,
    ptr_ptr: i32,
    size_ptr: i32,
    cas_ptr: i32,
) -> R {
    let mut g = Guest::new(&mut caller);
    let Some(key) = g.read_str(word(key_ptr), word(key_len)) else {
        return Ok(status::INVALID_MEMORY_ACCESS);
    };
    let Some((value, cas)) = g.state().world.shared_data.get(&key).cloned() else {
        return Ok(status::NOT_FOUND);
    };
    let ok = g.copy_out(&value, word(ptr_ptr), word(size_ptr))? && g.write_u32(word(cas_ptr), cas);
    Ok(ok_or_fault(ok))
}

pub(super) fn set_shared_data(
    mut caller: Caller<'_, State>,
    key_ptr: i32,
    key_len: i32,
    value_ptr: i32,
    value_len: i32,
    cas: i32,
) -> i32 {
    let mut g = Guest::new(&mut caller);
    let (Some(key), Some(value)) = (
        g.read_str(word(key_ptr), word(key_len)),
        g.read(word(value_ptr), word(value_len)),
    ) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    g.state().world.shared_data.set(&key, &value, word(cas))
}

pub(super) fn register_shared_queue(
    mut caller: Caller<'_, State>,
    ptr: i32,
    len: i32,
    token_ptr: i32,
) -> i32 {
    let mut g = Guest::new(&mut caller);
    let Some(name) = g.read_str(word(ptr), word(len)) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    let state = g.state();
    let owner = state.vm.root_id;
    let vm_id = state.world.options.vm_id.clone();
    let token = state.world.queues.register(&vm_id, &name, owner);
    ok_or_fault(g.write_u32(word(token_ptr), token))
}

pub(super) fn resolve_shared_queue(
    mut caller: Caller<'_, State>,
    vm_ptr: i32,
    vm_len: i32,
    ptr: i32,
    len: i32,
    token_ptr: i32,
) -> i32 {
    let mut g = Guest::new(&mut caller);
    let (Some(vm_id), Some(name)) = (
        g.read_str(word(vm_ptr), word(vm_len)),
        g.read_str(word(ptr), word(len)),
    ) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    let state = g.state();
    let vm_id = if vm_id.is_empty() {
        state.world.options.vm_id.clone()
    } else {
        vm_id
    };
    match state.world.queues.resolve(&vm_id, &name) {
        Some(token) => ok_or_fault(g.write_u32(word(token_ptr), token)),
        None => status::NOT_FOUND,
    }
}

pub(super) fn dequeue_shared_queue(
    mut caller: Caller<'_, State>,
    token: i32,
    ptr_ptr: i32,
    size_ptr: i32,
) -> R {
    let mut g = Guest::new(&mut caller);
    match g.state().world.queues.dequeue(word(token)) {
        Ok(value) => Ok(ok_or_fault(g.copy_out(
            &value,
            word(ptr_ptr),
            word(size_ptr),
        )?)),
        Err(code) => Ok(code),
    }
}

pub(super) fn enqueue_shared_queue(
    mut caller: Caller<'_, State>,
    token: i32,
    ptr: i32,
    len: i32,
) -> i32 {
    let mut g = Guest::new(&mut caller);
    let Some(value) = g.read(word(ptr), word(len)) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    let state = g.state();
    match state.world.queues.enqueue(word(token), &value) {
        Ok(root) => {
            // Envoy posts on_queue_ready to the owning worker; here it runs after this call.
            state.vm.deferred.push(Deferred::QueueReady {
                root,
                token: word(token),
            });
            status::OK
        }
        Err(code) => code,
    }
}
