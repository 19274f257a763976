//! The WASI subset Envoy's host provides (proxy-wasm-cpp-host `src/exports.cc`, registered for
//! both `wasi_unstable` and `wasi_snapshot_preview1`): stdout/stderr become logs, the
//! environment is the VM config's (`Options::environment`), no arguments, no files.

use wasmtime::{Caller, Linker};

use crate::abi::errno;
use crate::memory::{word, Guest};
use crate::options::LogLevel;
use crate::state::State;

/// Most random bytes one `random_get` may ask for (`PROXY_WASM_HOST_WASI_RANDOM_GET_MAX_SIZE_BYTES`).
const RANDOM_GET_MAX: u32 = 64 * 1024;

pub(crate) fn link(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    for module in ["wasi_snapshot_preview1", "wasi_unstable"] {
        linker.func_wrap(module, "fd_write", fd_write)?;
        linker.func_wrap(module, "fd_read", |_: i32, _: i32, _: i32, _: i32| {
            errno::NOSYS
        })?;
        linker.func_wrap(module, "fd_seek", |_: i32, _: i64, _: i32, _: i32| {
            errno::SUCCESS
        })?;
        linker.func_wrap(module, "fd_close", |_: i32| errno::SUCCESS)?;
        linker.func_wrap(module, "fd_fdstat_get", fd_fdstat_get)?;
        linker.func_wrap(module, "environ_get", environ_get)?;
        linker.func_wrap(module, "environ_sizes_get", environ_sizes_get)?;
        linker.func_wrap(module, "args_get", |_: i32, _: i32| errno::SUCCESS)?;
        linker.func_wrap(module, "args_sizes_get", zero_sizes)?;
        linker.func_wrap(module, "clock_time_get", clock_time_get)?;
        linker.func_wrap(module, "random_get", random_get)?;
        linker.func_wrap(module, "proc_exit", |_: i32| {})?;
        linker.func_wrap(
            module,
            "path_open",
            |_: i32, _: i32, _: i32, _: i32, _: i32, _: i64, _: i64, _: i32, _: i32| errno::NOENT,
        )?;
        linker.func_wrap(module, "fd_prestat_get", |_: i32, _: i32| errno::BADF)?;
        linker.func_wrap(module, "fd_prestat_dir_name", |_: i32, _: i32, _: i32| {
            errno::NOSYS
        })?;
    }
    Ok(())
}

fn fd_write(
    mut caller: Caller<'_, State>,
    fd: i32,
    iovs: i32,
    iovs_len: i32,
    nwritten: i32,
) -> i32 {
    let level = match fd {
        1 => LogLevel::Info,
        2 => LogLevel::Error,
        _ => return errno::BADF,
    };
    let mut g = Guest::new(&mut caller);
    let mut text = Vec::new();
    for i in 0..word(iovs_len) {
        let Some(iov) = i
            .checked_mul(8)
            .and_then(|o| word(iovs).checked_add(o))
            .and_then(|at| g.read(at, 8))
        else {
            return errno::FAULT;
        };
        let field = |at: usize| {
            iov.get(at..at + 4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(u32::from_le_bytes)
                .unwrap_or(0)
        };
        let (buf, len) = (field(0), field(4));
        if len != 0 {
            match g.read(buf, len) {
                Some(bytes) => text.extend_from_slice(&bytes),
                None => return errno::FAULT,
            }
        }
    }
    let written = text.len();
    if text.last() == Some(&b'\n') {
        text.pop();
    }
    if written != 0 {
        let message = String::from_utf8_lossy(&text).into_owned();
        g.state().world.log(level, message);
    }
    if !g.write_u32(word(nwritten), u32::try_from(written).unwrap_or(u32::MAX)) {
        return errno::FAULT;
    }
    errno::SUCCESS
}

fn fd_fdstat_get(mut caller: Caller<'_, State>, fd: i32, out: i32) -> i32 {
    if fd != 1 && fd != 2 {
        return errno::BADF;
    }
    let mut stat = [0u8; 24];
    // fs_rights_base = __WASI_RIGHTS_FD_WRITE, as the host writes it.
    if let Some(b) = stat.get_mut(8) {
        *b = 64;
    }
    Guest::new(&mut caller).write(word(out), &stat);
    errno::SUCCESS
}

/// The environment as WASI lays it out: one `NAME=VALUE\0` string per variable.
fn environ_strings(caller: &Caller<'_, State>) -> Vec<Vec<u8>> {
    caller
        .data()
        .world
        .options
        .environment
        .iter()
        .map(|(name, value)| {
            let mut entry = Vec::with_capacity(name.len() + value.len() + 2);
            entry.extend_from_slice(name.as_bytes());
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            entry.push(0);
            entry
        })
        .collect()
}

fn environ_sizes_get(mut caller: Caller<'_, State>, count: i32, size: i32) -> i32 {
    let entries = environ_strings(&caller);
    let total: usize = entries.iter().map(Vec::len).sum();
    let (Ok(n), Ok(total)) = (u32::try_from(entries.len()), u32::try_from(total)) else {
        return errno::INVAL;
    };
    let mut g = Guest::new(&mut caller);
    if g.write_u32(word(count), n) && g.write_u32(word(size), total) {
        errno::SUCCESS
    } else {
        errno::FAULT
    }
}

/// Writes a pointer per variable at `environ` and the strings themselves from `buf` on.
fn environ_get(mut caller: Caller<'_, State>, environ: i32, buf: i32) -> i32 {
    let entries = environ_strings(&caller);
    let mut g = Guest::new(&mut caller);
    let (mut slot, mut at) = (word(environ), word(buf));
    for entry in &entries {
        let Ok(len) = u32::try_from(entry.len()) else {
            return errno::INVAL;
        };
        if !g.write_u32(slot, at) || !g.write(at, entry) {
            return errno::FAULT;
        }
        let (Some(next_slot), Some(next_at)) = (slot.checked_add(4), at.checked_add(len)) else {
            return errno::FAULT;
        };
        (slot, at) = (next_slot, next_at);
    }
    errno::SUCCESS
}

fn zero_sizes(mut caller: Caller<'_, State>, count: i32, size: i32) -> i32 {
    let mut g = Guest::new(&mut caller);
    if g.write_u32(word(count), 0) && g.write_u32(word(size), 0) {
        errno::SUCCESS
    } else {
        errno::FAULT
    }
}

fn clock_time_get(mut caller: Caller<'_, State>, id: i32, _precision: i64, out: i32) -> i32 {
    let now = {
        let world = &caller.data().world;
        match id {
            0 => crate::clock::wall_nanos(world),
            1 => u64::try_from(world.now.as_nanos()).unwrap_or(u64::MAX),
            _ => return errno::NOTSUP,
        }
    };
    if Guest::new(&mut caller).write_u64(word(out), now) {
        errno::SUCCESS
    } else {
        errno::FAULT
    }
}

fn random_get(mut caller: Caller<'_, State>, buf: i32, len: i32) -> i32 {
    let len = word(len);
    if len > RANDOM_GET_MAX {
        return errno::INVAL;
    }
    if len == 0 {
        return errno::SUCCESS;
    }
    // Deterministic per host: tests stay reproducible.
    let state = &mut caller.data_mut().world.random_state;
    let bytes: Vec<u8> = (0..len)
        .map(|_| {
            *state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            state.to_le_bytes().get(7).copied().unwrap_or(0)
        })
        .collect();
    if Guest::new(&mut caller).write(word(buf), &bytes) {
        errno::SUCCESS
    } else {
        errno::FAULT
    }
}
