//! One filter configuration (`filter_config`: the same policy JSON as the wasm filter's).
//!
//! Envoy creates it on the main thread and runs its streams on the workers. The root logic
//! ([`Root`]: the compiled policy, the outbox of turn reports, the lost-report ledger) lives on the
//! main thread, as the wasm filter's root context lives in each VM: streams hand their reports
//! over through a queue, and a ticker thread wakes the main thread every [`TICK_MS`] to send them
//! (the ABI has no timer). Each worker compiles its own [`Policy`] from the same bytes on its first
//! stream, as each wasm VM does: the compiled policy shares its automata by `Rc`, so it stays on
//! the thread that built it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use livecheck::config::Policy;
use livecheck::host::{LogLevel, RootHost, SharedStore};
use livecheck::outbox::{self, Job};
use livecheck::root::{Root, FIXED_COUNTERS};

use crate::abi::{self};
use crate::envoy::{self, ConfigEnvoy, ConfigScheduler};
use crate::os::{now_unix_millis, random};

/// The configuration's event: a tick of the ticker thread.
const TICK: u64 = 1;

pub struct Config {
    /// Unique for the process's life (an address can be reused by a later configuration).
    id: u64,
    envoy: ConfigEnvoy,
    policy_json: Vec<u8>,
    /// Counter ids by name, defined while Envoy created the configuration (it freezes them after).
    counters: HashMap<String, usize>,
    /// Reports finished on the workers, waiting for the main thread's next tick.
    reports: Mutex<Vec<Job>>,
    ticker: Mutex<Option<Ticker>>,
}

struct Ticker {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
    /// Dropped (deleted in Envoy) after the thread is joined.
    _scheduler: Arc<ConfigScheduler>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The main thread's root of each live configuration, by configuration id.
    static ROOTS: RefCell<HashMap<u64, MainRoot>> = RefCell::new(HashMap::new());
    /// A worker's compiled policy of each configuration it ran a stream of (`None`: refused).
    static POLICIES: RefCell<HashMap<u64, Option<Rc<Policy>>>> = RefCell::new(HashMap::new());
}

/// The root logic and its door to Envoy, on the main thread.
struct MainRoot {
    root: Root,
    host: MainHost,
}

impl Config {
    /// Compiles and takes `policy_json` (on the main thread, in `config_new`), or refuses it:
    /// `None`, one log line per problem, and Envoy rejects the configuration.
    pub fn new(envoy: ConfigEnvoy, policy_json: &[u8]) -> Option<Arc<Config>> {
        envoy::log(abi::LOG_INFO, &livecheck::build_info::banner());
        let mut main = MainRoot {
            root: Root::default(),
            host: MainHost {
                envoy,
                counters: HashMap::new(),
                status: None,
                tick_ms: None,
            },
        };
        if !main.root.configure(&mut main.host, policy_json) {
            return None;
        }
        let policy = main.root.policy()?;
        let mut counters = HashMap::new();
        for name in FIXED_COUNTERS.into_iter().chain(policy.counter_names()) {
            match envoy.define_counter(name) {
                Some(id) => {
                    counters.insert(name.to_owned(), id);
                }
                None => envoy::log(
                    abi::LOG_WARN,
                    &format!("livecheck: Envoy refused to define the counter {name}"),
                ),
            }
        }
        main.host.counters = counters.clone();
        let config = Arc::new(Config {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            envoy,
            policy_json: policy_json.to_vec(),
            counters,
            reports: Mutex::new(Vec::new()),
            ticker: Mutex::new(None),
        });
        let tick_ms = main.host.tick_ms.take();
        ROOTS.with(|roots| roots.borrow_mut().insert(config.id, main));
        if let Some(period) = tick_ms {
            config.start_ticker(period);
        }
        Some(config)
    }

    /// Starts the thread that wakes the main thread every `period_ms` (not in `--mode validate`,
    /// where no event loop runs).
    fn start_ticker(&self, period_ms: u32) {
        if envoy::validation_mode() {
            return;
        }
        let Some(scheduler) = self.envoy.scheduler() else {
            envoy::log(
                abi::LOG_WARN,
                "livecheck: no scheduler: turn reports cannot be sent",
            );
            return;
        };
        let scheduler = Arc::new(scheduler);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (scheduler, stop) = (Arc::clone(&scheduler), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("livecheck-tick".to_owned())
                .spawn(move || {
                    let period = Duration::from_millis(u64::from(period_ms));
                    while !stop.load(Ordering::Acquire) {
                        std::thread::park_timeout(period);
                        if !stop.load(Ordering::Acquire) {
                            scheduler.commit(TICK);
                        }
                    }
                })
        };
        match thread {
            Ok(thread) => {
                if let Ok(mut ticker) = self.ticker.lock() {
                    *ticker = Some(Ticker {
                        stop,
                        thread,
                        _scheduler: scheduler,
                    });
                }
            }
            Err(_) => envoy::log(
                abi::LOG_WARN,
                "livecheck: no ticker thread: turn reports cannot be sent",
            ),
        }
    }

    /// Envoy destroys the configuration (main thread): the ticker is joined before its scheduler
    /// goes, and the root with its undelivered reports is dropped.
    pub fn shut_down(&self) {
        let ticker = self.ticker.lock().ok().and_then(|mut t| t.take());
        if let Some(ticker) = ticker {
            ticker.stop.store(true, Ordering::Release);
            ticker.thread.thread().unpark();
            let _ = ticker.thread.join();
        }
        ROOTS.with(|roots| roots.borrow_mut().remove(&self.id));
    }

    /// The policy a new stream on this worker runs with, compiled on the worker's first stream.
    pub fn policy(&self) -> Option<Rc<Policy>> {
        POLICIES.with(|policies| {
            policies
                .borrow_mut()
                .entry(self.id)
                .or_insert_with(|| {
                    livecheck::fold::warm();
                    let mut policy = Policy::from_json(&self.policy_json).ok()?;
                    policy.resolve_token(|name| std::env::var(name).ok()).ok()?;
                    Some(Rc::new(policy))
                })
                .clone()
        })
    }

    pub fn counter(&self, name: &str) -> Option<usize> {
        self.counters.get(name).copied()
    }

    /// A finished turn's report, from a worker: it waits for the main thread's next tick.
    /// `false`: the queue is full and the report is dropped.
    pub fn deliver(&self, job: Job) -> bool {
        let Ok(mut reports) = self.reports.lock() else {
            return false;
        };
        if reports.len() >= outbox::CAPACITY {
            return false;
        }
        reports.push(job);
        true
    }

    /// A tick on the main thread: the workers' reports join the outbox, then the root ticks.
    pub fn scheduled(&self, _event: u64) {
        let jobs = self
            .reports
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default();
        ROOTS.with(|roots| {
            let mut roots = roots.borrow_mut();
            let Some(main) = roots.get_mut(&self.id) else {
                return;
            };
            for job in jobs {
                main.root.take_report(&mut main.host, job);
            }
            main.root.tick(&mut main.host);
        });
    }

    /// The sidecar's answer to report callout `id` (main thread).
    pub fn report_answered(&self, id: u64, status: Option<u16>) {
        let Ok(token) = u32::try_from(id) else {
            return;
        };
        ROOTS.with(|roots| {
            let mut roots = roots.borrow_mut();
            let Some(main) = roots.get_mut(&self.id) else {
                return;
            };
            main.host.status = status;
            main.root.report_answered(&mut main.host, token);
            main.host.status = None;
        });
    }
}

/// [`RootHost`] on the main thread, over the configuration's callbacks.
struct MainHost {
    envoy: ConfigEnvoy,
    counters: HashMap<String, usize>,
    /// The `:status` of the report callout being answered.
    status: Option<u16>,
    /// The tick period the root asked for while configuring.
    tick_ms: Option<u32>,
}

/// The process's shared data (one module instance serves every worker, so a lock replaces
/// proxy-wasm's cross-VM store): the lost-report ledger's entries.
/// Values by key, each with its compare-and-swap token.
type Entries = HashMap<String, (Vec<u8>, u32)>;

static SHARED: Mutex<Option<Entries>> = Mutex::new(None);
static SHARED_CAS: AtomicU64 = AtomicU64::new(1);

impl SharedStore for MainHost {
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        let shared = SHARED.lock().ok()?;
        shared.as_ref()?.get(key).cloned()
    }

    fn set(&mut self, key: &str, value: &[u8], cas: u32) -> bool {
        let Ok(mut shared) = SHARED.lock() else {
            return false;
        };
        let map = shared.get_or_insert_with(HashMap::new);
        if cas != 0 && map.get(key).map(|(_, token)| *token) != Some(cas) {
            return false;
        }
        let token = u32::try_from(SHARED_CAS.fetch_add(1, Ordering::Relaxed) % u64::from(u32::MAX))
            .unwrap_or(1)
            .max(1);
        map.insert(key.to_owned(), (value.to_vec(), token));
        true
    }
}

impl RootHost for MainHost {
    fn now_unix_millis(&self) -> u64 {
        now_unix_millis()
    }

    fn random(&mut self) -> u64 {
        random()
    }

    fn log(&mut self, level_: LogLevel, message: &str) {
        envoy::log(envoy::log_level(level_), message);
    }

    fn count(&mut self, name: &str, by: i64) {
        if let (Some(id), Ok(by)) = (self.counters.get(name), u64::try_from(by)) {
            self.envoy.increment(*id, by);
        }
    }

    fn dispatch_callout(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Option<u32> {
        self.envoy
            .callout(cluster, headers, body, timeout_ms)
            .and_then(|id| u32::try_from(id).ok())
    }

    fn callout_status(&self) -> Option<u16> {
        self.status
    }

    fn set_tick_period(&mut self, period_ms: u32) -> bool {
        self.tick_ms = Some(period_ms.max(1));
        true
    }

    fn close_streams(&mut self, _streams: &[u32]) {
        // Never asked: a stream of this module ends its own response (`stream::NativeHost`), so no
        // timer closes one.
    }

    fn resume_responses(&mut self, _streams: &[u32]) {
        // Never asked: held response headers are Envoy's own `StopIteration` here.
    }
}
