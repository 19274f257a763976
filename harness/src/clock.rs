//! The emulated clocks: wall time is `Options::start_time` plus the host's emulated time since it
//! started (`World::now`). Its own room because the host, its host calls and its WASI calls all read
//! it: it sits below them, so none of them imports another for the time.

use std::time::UNIX_EPOCH;

use crate::state::World;

/// Nanoseconds since the epoch of the emulated wall clock.
pub(crate) fn wall_nanos(world: &World) -> u64 {
    let wall = world.options.start_time + world.now;
    wall.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
