//! What the root's tick does to streams later: reset a cut stream, let held answer headers go.
//!
//! A stream cannot wake itself up: only the root context gets a tick. So a stream lists itself
//! here (by its context id, with when), the root's tick takes the entries whose time came, and a
//! stream that ends takes itself off so that no timer acts on it (or on a later stream given its
//! id). One [`Timers`] per VM, shared by the root and every stream.

/// How long a cut stream's closing events have to reach the caller before a timer resets it.
pub const CLOSE_GRACE_MS: u64 = 50;

/// How long an answer's held headers wait for its first body callback (`hold_answer_headers`):
/// without the wasm filter's `allow_on_headers_stop_iteration` Envoy sends none behind them.
pub const HEADERS_GRACE_MS: u64 = 1_000;

/// What the root's tick does to streams, by context id and when (ms since the epoch).
#[derive(Debug, Default)]
pub struct Timers {
    /// Cut streams to reset.
    closing: Vec<(u32, u64)>,
    /// Answers whose headers the filter holds: they go on unless a body callback came first.
    releasing: Vec<(u32, u64)>,
    /// Streams whose held headers a tick let go.
    released: Vec<u32>,
    /// Whether the VM logged yet that held headers had to be let go.
    warned: bool,
}

/// Lists stream `id` in `list` to be acted on at `at`, unless it is listed already.
fn schedule(list: &mut Vec<(u32, u64)>, id: u32, at: u64) {
    if !list.iter().any(|(c, _)| *c == id) {
        list.push((id, at));
    }
}

/// Takes the streams of `list` whose time came by `now`.
fn take_due(list: &mut Vec<(u32, u64)>, now: u64) -> Vec<u32> {
    let due = list
        .iter()
        .filter(|(_, at)| *at <= now)
        .map(|(id, _)| *id)
        .collect();
    list.retain(|(_, at)| *at > now);
    due
}

impl Timers {
    /// Stream `id` was cut: reset it [`CLOSE_GRACE_MS`] after `now` unless it ends before.
    pub fn close_soon(&mut self, id: u32, now: u64) {
        schedule(&mut self.closing, id, now.saturating_add(CLOSE_GRACE_MS));
    }

    /// Stream `id` holds its answer's headers: let them go [`HEADERS_GRACE_MS`] after `now`
    /// unless a body callback comes first.
    pub fn release_soon(&mut self, id: u32, now: u64) {
        schedule(
            &mut self.releasing,
            id,
            now.saturating_add(HEADERS_GRACE_MS),
        );
    }

    /// In a body callback of stream `id`: whether a tick already let its held headers go. The
    /// watch ends either way.
    pub fn headers_released(&mut self, id: u32) -> bool {
        self.releasing.retain(|(c, _)| *c != id);
        let released = self.released.contains(&id);
        self.released.retain(|c| *c != id);
        released
    }

    /// Stream `id` ended or was closed: no timer may reset it or let its headers go.
    pub fn forget(&mut self, id: u32) {
        self.closing.retain(|(c, _)| *c != id);
        self.releasing.retain(|(c, _)| *c != id);
        self.released.retain(|c| *c != id);
    }

    /// The cut streams whose grace is over by `now`, taken off the list.
    pub fn due_closes(&mut self, now: u64) -> Vec<u32> {
        take_due(&mut self.closing, now)
    }

    /// The streams whose held headers waited their grace in vain by `now`, now marked as let go.
    pub fn due_releases(&mut self, now: u64) -> Vec<u32> {
        let due = take_due(&mut self.releasing, now);
        self.released.extend(&due);
        due
    }

    /// Whether this is the first time the VM has to say that held headers were let go (`true`
    /// once).
    pub fn first_warning(&mut self) -> bool {
        !std::mem::replace(&mut self.warned, true)
    }
}
