//! The `env` host functions of the proxy-wasm ABI 0.2.1, following proxy-wasm-cpp-host
//! `src/exports.cc` and Envoy's `source/extensions/common/wasm/context.cc`. This module links
//! them; each ABI area is a room of its own below it.

mod bodies;
mod callouts;
mod context;
mod flow;
mod maps;
mod metrics;
mod properties;
mod shared;

use wasmtime::{Caller, Linker};

use crate::abi::status;
use crate::state::State;

pub(crate) fn link(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.func_wrap("env", "proxy_log", context::log)?;
    linker.func_wrap("env", "proxy_get_log_level", context::get_log_level)?;
    linker.func_wrap(
        "env",
        "proxy_get_current_time_nanoseconds",
        context::get_current_time,
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_tick_period_milliseconds",
        context::set_tick_period,
    )?;
    linker.func_wrap("env", "proxy_get_buffer_bytes", bodies::get_buffer_bytes)?;
    linker.func_wrap("env", "proxy_set_buffer_bytes", bodies::set_buffer_bytes)?;
    linker.func_wrap("env", "proxy_get_buffer_status", bodies::get_buffer_status)?;
    linker.func_wrap(
        "env",
        "proxy_get_header_map_pairs",
        maps::get_header_map_pairs,
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_header_map_pairs",
        maps::set_header_map_pairs,
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_header_map_size",
        maps::get_header_map_size,
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_header_map_value",
        maps::get_header_map_value,
    )?;
    linker.func_wrap(
        "env",
        "proxy_add_header_map_value",
        maps::add_header_map_value,
    )?;
    linker.func_wrap(
        "env",
        "proxy_replace_header_map_value",
        maps::replace_header_map_value,
    )?;
    linker.func_wrap(
        "env",
        "proxy_remove_header_map_value",
        maps::remove_header_map_value,
    )?;
    linker.func_wrap("env", "proxy_get_property", properties::get_property)?;
    linker.func_wrap("env", "proxy_set_property", properties::set_property)?;
    linker.func_wrap("env", "proxy_get_shared_data", shared::get_shared_data)?;
    linker.func_wrap("env", "proxy_set_shared_data", shared::set_shared_data)?;
    linker.func_wrap(
        "env",
        "proxy_register_shared_queue",
        shared::register_shared_queue,
    )?;
    linker.func_wrap(
        "env",
        "proxy_resolve_shared_queue",
        shared::resolve_shared_queue,
    )?;
    linker.func_wrap(
        "env",
        "proxy_dequeue_shared_queue",
        shared::dequeue_shared_queue,
    )?;
    linker.func_wrap(
        "env",
        "proxy_enqueue_shared_queue",
        shared::enqueue_shared_queue,
    )?;
    linker.func_wrap("env", "proxy_continue_stream", flow::continue_stream)?;
    linker.func_wrap("env", "proxy_continue_request", |c: Caller<'_, State>| {
        flow::continue_stream(c, 0)
    })?;
    linker.func_wrap("env", "proxy_continue_response", |c: Caller<'_, State>| {
        flow::continue_stream(c, 1)
    })?;
    linker.func_wrap("env", "proxy_close_stream", flow::close_stream)?;
    linker.func_wrap(
        "env",
        "proxy_send_local_response",
        flow::send_local_response,
    )?;
    linker.func_wrap("env", "proxy_clear_route_cache", || status::OK)?;
    linker.func_wrap("env", "proxy_http_call", callouts::http_call)?;
    linker.func_wrap("env", "proxy_grpc_call", callouts::grpc_call)?;
    linker.func_wrap("env", "proxy_grpc_stream", callouts::grpc_stream)?;
    linker.func_wrap("env", "proxy_grpc_send", callouts::grpc_send)?;
    linker.func_wrap("env", "proxy_grpc_cancel", |_: i32| status::NOT_FOUND)?;
    linker.func_wrap("env", "proxy_grpc_close", |_: i32| status::NOT_FOUND)?;
    linker.func_wrap("env", "proxy_get_status", context::get_status)?;
    linker.func_wrap(
        "env",
        "proxy_set_effective_context",
        context::set_effective_context,
    )?;
    linker.func_wrap(
        "env",
        "proxy_call_foreign_function",
        context::call_foreign_function,
    )?;
    linker.func_wrap("env", "proxy_done", || status::NOT_FOUND)?;
    linker.func_wrap("env", "proxy_define_metric", metrics::define_metric)?;
    linker.func_wrap("env", "proxy_get_metric", metrics::get_metric)?;
    linker.func_wrap("env", "proxy_record_metric", metrics::record_metric)?;
    linker.func_wrap("env", "proxy_increment_metric", metrics::increment_metric)?;
    linker.func_wrap("env", "emscripten_notify_memory_growth", |_: i32| {})?;
    linker.func_wrap("env", "pthread_equal", |a: i32, b: i32| i32::from(a == b))?;
    Ok(())
}
