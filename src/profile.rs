//! Where a turn's time goes inside Envoy's VM: an opt-in timer for `benches/v8_profile.py`.
//!
//! Built only with `--features profile` (never in a shipped `.wasm`): [`span`] then times what it
//! guards with the host's clock, per name, and the root context hands the totals to Envoy as
//! counters (`livecheck.profile.<name>.calls` / `.ns`) on its tick. Without the feature a span is
//! an empty value and every call here compiles to nothing.
//!
//! Names say what is timed: `cb.*` a callback of Envoy into the filter (everything it does,
//! host calls and the spans' own clock reads included), `host.*` one host call, `phase.*` a step
//! of the logic. Spans nest; each counts its own wall time. `clock` is what one span costs by
//! itself (two clock reads), measured on each tick, so nested spans can be subtracted.

/// Times from its creation to its drop under `name` (with the `profile` feature).
#[must_use]
pub struct Span {
    #[cfg(feature = "profile")]
    on: Option<(&'static str, u64)>,
}

#[cfg(not(feature = "profile"))]
#[inline(always)]
pub fn span(_name: &'static str) -> Span {
    Span {}
}

#[cfg(feature = "profile")]
pub use on::{set_clock, span, take_totals, Total};

#[cfg(feature = "profile")]
mod on {
    use std::cell::{Cell, RefCell};

    use super::Span;

    /// One name's totals since the last [`take_totals`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Total {
        pub name: &'static str,
        pub calls: u64,
        pub nanos: u64,
    }

    thread_local! {
        static CLOCK: Cell<Option<fn() -> u64>> = const { Cell::new(None) };
        static TOTALS: RefCell<Vec<Total>> = const { RefCell::new(Vec::new()) };
    }

    /// The adapter's clock (ns); spans before it is set time nothing.
    pub fn set_clock(clock: fn() -> u64) {
        CLOCK.with(|c| c.set(Some(clock)));
    }

    pub fn span(name: &'static str) -> Span {
        Span {
            on: CLOCK.with(Cell::get).map(|clock| (name, clock())),
        }
    }

    impl Drop for Span {
        fn drop(&mut self) {
            let Some((name, started)) = self.on else {
                return;
            };
            let Some(clock) = CLOCK.with(Cell::get) else {
                return;
            };
            let spent = clock().saturating_sub(started);
            TOTALS.with(|t| {
                let mut totals = t.borrow_mut();
                match totals.iter_mut().find(|t| t.name == name) {
                    Some(t) => {
                        t.calls += 1;
                        t.nanos += spent;
                    }
                    None => totals.push(Total {
                        name,
                        calls: 1,
                        nanos: spent,
                    }),
                }
            });
        }
    }

    /// The totals since the last call, with `clock` (the cost of an empty span, timed 64 times
    /// now) among them; the running totals start again from zero.
    pub fn take_totals() -> Vec<Total> {
        for _ in 0..64 {
            drop(span("clock"));
        }
        TOTALS.with(|t| std::mem::take(&mut *t.borrow_mut()))
    }
}
