//! Reading start by start: every folded character that could begin a match starts a thread that
//! follows it through the anchored automaton, byte by byte, until it dies, matches or the
//! automaton gives up (then a search decides it, [`super::decision`]). Threads in the same state
//! are merged, so the live ones stay few. This is how text that may hold a match is read, and the
//! reference the reading ahead ([`super::ahead`]) must equal.

use regex_automata::hybrid::LazyStateID;

use super::{Dfa, Found, Holdback, Thread};
use crate::scan::{Automaton, Step};

fn clears(dfa: &Dfa<'_>) -> usize {
    dfa.as_ref().map_or(0, Automaton::clears)
}

/// Up to this many live threads are merged by comparing states pairwise.
const FEW_THREADS: usize = 16;

impl Holdback {
    /// Reads the text pushed since the last scan, folded. Most text is ASCII, which folds to
    /// itself: its bytes are read where they are, and every byte is a folded character.
    pub(super) fn read_new(&mut self, dfa: &mut Dfa<'_>) {
        let window = std::mem::take(&mut self.window);
        // Non-ASCII text only: its folded bytes and where each folded character starts (nothing
        // is kept between reads: a stream's memory stays what it holds back).
        let (mut starts, mut folded) = (Vec::new(), Vec::new());
        let new = window.get(self.read..).unwrap_or_default();
        let (at0, pos0, folded0) = (self.read, self.read_pos, self.folded);
        let ascii = crate::swar::is_ascii(new.as_bytes());
        let mut chars = new.len();
        if !ascii {
            chars = 0;
            for (i, c) in new.char_indices() {
                let mut sub = 0;
                crate::fold::fold_char(c, |f| {
                    let thread = Thread {
                        pos: pos0 + chars,
                        at: at0 + i,
                        sub,
                        folded: folded0 + starts.len(),
                        state: None,
                    };
                    starts.push((folded.len(), thread));
                    folded.extend_from_slice(f.encode_utf8(&mut [0; 4]).as_bytes());
                    sub += f.len_utf8();
                });
                chars += 1;
            }
        }
        let (bytes, count): (&[u8], usize) = if ascii {
            (new.as_bytes(), new.len())
        } else {
            (&folded, starts.len())
        };
        let start_of = |k: usize| {
            if ascii {
                let thread = Thread {
                    pos: pos0 + k,
                    at: at0 + k,
                    sub: 0,
                    folded: folded0 + k,
                    state: None,
                };
                Some((k, thread))
            } else {
                starts.get(k).copied()
            }
        };
        self.read_bytes(dfa, bytes, count, start_of);
        self.read = window.len();
        self.read_pos = pos0 + chars;
        self.folded = folded0 + count;
        if let Some(&b) = bytes.last() {
            self.last = Some(b);
        }
        self.window = window;
    }

    /// Reads new folded `bytes` one thread at a time: every live thread reads all of them in one
    /// run (until it dies), then each of the `count` new folded characters (`start_of`: its first
    /// byte in `bytes` and the thread starting there) starts a thread that reads the rest; threads
    /// that end in the same state are merged afterwards.
    /// The outcome is what reading each byte with every thread in turn gives: a match recorded
    /// at some start drops the later starts, and no thread starts after the byte that recorded
    /// the first match. The runs are tight loops over a slice, with no bookkeeping per
    /// character (which cost several times the automaton's steps when each byte was read by
    /// every thread in turn).
    fn read_bytes(
        &mut self,
        dfa: &mut Dfa<'_>,
        bytes: &[u8],
        count: usize,
        start_of: impl Fn(usize) -> Option<(usize, Thread)>,
    ) {
        // The live threads' states were taken at `old_clears`; those of the threads kept from now
        // on at `self.clears`.
        let old_clears = self.clears;
        self.clears = clears(dfa);
        let starts_allowed = self.found.is_none();
        // The byte whose reading recorded this read's first match.
        let mut first_match: Option<usize> = None;
        // The live threads read in place, those still alive moved to the front. A match noted
        // meanwhile drops no thread kept so far (they start no later than it: threads are in
        // start order), and the threads after it are passed over here.
        let mut kept = 0;
        for i in 0..self.threads.len() {
            let Some(t) = self.threads.get(i).copied() else {
                break;
            };
            if self.found.is_some_and(|f| t.pos > f.pos) {
                continue;
            }
            let state = match (dfa.as_mut(), t.state) {
                (Some(a), Some(state)) if a.clears() == old_clears => {
                    self.run(a, t, state, bytes, 0, &mut first_match)
                }
                _ => Some(None),
            };
            if let (Some(state), Some(slot)) = (state, self.threads.get_mut(kept)) {
                *slot = Thread { state, ..t };
                kept += 1;
            }
        }
        self.threads.truncate(kept);
        for k in 0..count {
            let Some((byte, t)) = start_of(k) else {
                break;
            };
            let later =
                self.found.is_some_and(|f| t.pos > f.pos) || first_match.is_some_and(|j| byte > j);
            if !starts_allowed || later {
                break;
            }
            let Some(a) = dfa.as_mut() else {
                self.threads.push(t);
                continue;
            };
            let look_behind = match byte.checked_sub(1) {
                None => self.last,
                Some(i) => bytes.get(i).copied(),
            };
            let start = a.start(look_behind);
            self.forget_if_cleared(a.clears());
            let state = match start {
                Step::Dead => None,
                Step::Live { state, .. } => self.run(a, t, state, bytes, byte, &mut first_match),
                Step::Unknown => Some(None),
            };
            if let Some(state) = state {
                self.threads.push(Thread { state, ..t });
            }
        }
        self.merge();
    }

    /// Thread `t`, in `state`, reads `bytes` from `from` on until it dies (`None`), else its state
    /// after them (`Some(None)`: decided by a search from now on); its matches are noted as they
    /// are read. Most threads die or read to the end without a match or anything else to note:
    /// that is one read here; [`Self::run_noting`] takes the rest on from where it stopped.
    #[inline]
    fn run(
        &mut self,
        a: &mut Automaton<'_>,
        t: Thread,
        state: LazyStateID,
        bytes: &[u8],
        from: usize,
        first_match: &mut Option<usize>,
    ) -> Option<Option<LazyStateID>> {
        let rest = bytes.get(from..).unwrap_or_default();
        let (read, step) = a.read(state, rest);
        if a.clears() == self.clears {
            match step {
                Step::Dead => return None,
                Step::Live {
                    state,
                    matched: None,
                } if read == rest.len() => return Some(Some(state)),
                _ => {}
            }
        }
        self.run_noting(a, t, (read, step), bytes, from, first_match)
    }

    /// [`Self::run`] on from where its first read stopped (`first`: bytes read, and the step
    /// there), for a thread that matches, meets a byte the automaton gives up on, or reads while
    /// the automaton's cache is cleared.
    #[inline(never)]
    fn run_noting(
        &mut self,
        a: &mut Automaton<'_>,
        t: Thread,
        first: (usize, Step),
        bytes: &[u8],
        from: usize,
        first_match: &mut Option<usize>,
    ) -> Option<Option<LazyStateID>> {
        let (mut read, mut step) = first;
        let mut j = from;
        let (mut state, mut alive) = (None, true);
        loop {
            j += read;
            match step {
                Step::Live {
                    state: next,
                    matched,
                } => {
                    state = Some(next);
                    if let Some(check) = matched {
                        // Recorded while reading byte j - 1.
                        let at = j.saturating_sub(1);
                        *first_match = Some(first_match.map_or(at, |f| f.min(at)));
                        self.note(Found { pos: t.pos, check }, t.folded);
                    }
                    if j >= bytes.len() {
                        break;
                    }
                    (read, step) = a.read(next, bytes.get(j..).unwrap_or_default());
                }
                Step::Dead => {
                    alive = false;
                    break;
                }
                // Decided by a search instead, from here on.
                Step::Unknown => {
                    state = None;
                    break;
                }
            }
        }
        if a.clears() != self.clears {
            self.forget_if_cleared(a.clears());
            state = None;
        }
        alive.then_some(state)
    }

    /// The end of the text: assertions at the end are decided, matches there recorded, and no
    /// automaton thread reads further (searches decide the threads without a state). A state is
    /// never used after the automaton's cache was cleared (by any stream).
    pub(super) fn read_end(&mut self, dfa: &mut Dfa<'_>) {
        let mut matched = Vec::new();
        let taken = self.clears;
        self.threads.retain_mut(|t| {
            let (Some(a), Some(state)) = (dfa.as_mut(), t.state) else {
                t.state = None;
                return true;
            };
            if a.clears() != taken {
                t.state = None;
                return true;
            }
            match a.step_end(state) {
                Step::Dead => false,
                Step::Live { matched: m, .. } => {
                    matched.extend(m.map(|check| (Found { pos: t.pos, check }, t.folded)));
                    false
                }
                Step::Unknown => {
                    t.state = None;
                    true
                }
            }
        });
        self.forget_if_cleared(clears(dfa));
        for (found, folded) in matched {
            self.record(found, folded);
        }
    }

    /// After a clear of the automaton's cache (`now` clears so far), no state kept is used.
    fn forget_if_cleared(&mut self, now: usize) {
        if now != self.clears {
            self.clears = now;
            for t in &mut self.threads {
                t.state = None;
            }
        }
    }

    /// Keeps the earliest of the automaton threads that share a state: their futures are the same.
    /// Live threads are usually few, and then each is compared with the earlier ones kept (no
    /// hashing per character); many (a run of digits inside a counted repetition) go through a set.
    fn merge(&mut self) {
        if self.threads.len() < 2 {
            return;
        }
        if self.threads.len() > FEW_THREADS {
            let states = &mut self.states;
            states.clear();
            self.threads
                .retain(|t| t.state.is_none_or(|state| states.insert(state)));
            return;
        }
        let mut kept = 0;
        for i in 0..self.threads.len() {
            let Some(t) = self.threads.get(i).copied() else {
                break;
            };
            let repeat = t.state.is_some()
                && self
                    .threads
                    .get(..kept)
                    .is_some_and(|earlier| earlier.iter().any(|e| e.state == t.state));
            if !repeat {
                if let Some(slot) = self.threads.get_mut(kept) {
                    *slot = t;
                }
                kept += 1;
            }
        }
        self.threads.truncate(kept);
    }
}
