//! The host calls about the VM and its contexts rather than a stream's data: logging, the clock and
//! the root context's tick, the status of the last callout answer, the effective context, and
//! foreign functions (none are registered).

use std::time::Duration;

use wasmtime::Caller;

use crate::abi::status;
use crate::memory::{ok_or_fault, word, Guest, R};
use crate::options::LogLevel;
use crate::state::State;

pub(super) fn log(mut caller: Caller<'_, State>, level: i32, ptr: i32, len: i32) -> i32 {
    let Some(level) = LogLevel::from_raw(word(level)) else {
        return status::BAD_ARGUMENT;
    };
    let mut g = Guest::new(&mut caller);
    let Some(message) = g.read_str(word(ptr), word(len)) else {
        return status::INVALID_MEMORY_ACCESS;
    };
    g.state().world.log(level, message);
    status::OK
}

pub(super) fn get_log_level(mut caller: Caller<'_, State>, out: i32) -> i32 {
    let level = caller.data().world.options.log_level.raw();
    ok_or_fault(Guest::new(&mut caller).write_u32(word(out), level))
}

pub(super) fn get_current_time(mut caller: Caller<'_, State>, out: i32) -> i32 {
    let now = crate::clock::wall_nanos(&caller.data().world);
    ok_or_fault(Guest::new(&mut caller).write_u64(word(out), now))
}

pub(super) fn set_tick_period(mut caller: Caller<'_, State>, millis: i32) -> i32 {
    let state = caller.data_mut();
    let period = Duration::from_millis(u64::from(word(millis)));
    if period.is_zero() {
        state.vm.tick_period = None;
    } else {
        state.vm.tick_period = Some(period);
        state.vm.next_tick = state.world.now + period;
    }
    status::OK
}

pub(super) fn get_status(
    mut caller: Caller<'_, State>,
    code_ptr: i32,
    ptr_ptr: i32,
    size_ptr: i32,
) -> R {
    let (code, message) = caller.data().vm.status.clone();
    let mut g = Guest::new(&mut caller);
    if !g.write_u32(word(code_ptr), code) {
        return Ok(status::INVALID_MEMORY_ACCESS);
    }
    Ok(ok_or_fault(g.copy_out(
        message.as_bytes(),
        word(ptr_ptr),
        word(size_ptr),
    )?))
}

pub(super) fn set_effective_context(mut caller: Caller<'_, State>, id: i32) -> i32 {
    let state = caller.data_mut();
    let id = word(id);
    if state.vm.contexts.contains_key(&id) {
        state.vm.effective_context = id;
        status::OK
    } else {
        status::BAD_ARGUMENT
    }
}

/// No foreign functions are registered in the harness: `NotFound`, after the memory checks.
pub(super) fn call_foreign_function(
    mut caller: Caller<'_, State>,
    name_ptr: i32,
    name_len: i32,
    args_ptr: i32,
    args_len: i32,
    _results: i32,
    _results_size: i32,
) -> i32 {
    let mut g = Guest::new(&mut caller);
    if g.read(word(name_ptr), word(name_len)).is_none()
        || g.read(word(args_ptr), word(args_len)).is_none()
    {
        return status::INVALID_MEMORY_ACCESS;
    }
    status::NOT_FOUND
}
