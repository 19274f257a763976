//! The running service's state, shared by every request and worker: the settings, the HTTP client
//! and the judge's slots, the results store and this replica's id among those sharing it, the turn
//! keys this replica holds, the wake-ups of its workers. It also asks the judge (`POST /v1/judge`,
//! `/v1/tool-check`). Nothing here knows the routes or the workers: [`crate::server`] composes them
//! around it (`App::start`), so every handler and worker depends on this module and none of them on
//! another through it.
//!
//! Logs name the stage, kind, judge model, backend, outcome, failure and token counts of each call;
//! never a judged text, a rule, a condition, a tool's name or arguments, a reason, a body or a key.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use livecheck_wire::{JudgeRequest, JudgeVerdict, ToolCheckRequest};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::time::timeout_at;

use crate::backend::{self, TurnKey};
use crate::config::{Backend, Settings, EVENT_DELIVERY_TIMEOUT};
use crate::pages::session::Sessions;
use crate::prompt::{self, Kind, Prompt};
use crate::store::{self, Store};
use crate::verdict::{Failure, Reply};
use crate::{ids, limits, tool_prompt};

/// The running service's state, shared by every request.
pub struct App {
    settings: Settings,
    client: reqwest::Client,
    permits: Semaphore,
    /// The results store; `None` for a judge-only app ([`App::new`]).
    store: Option<Store>,
    /// This process's id among the replicas sharing the store (`rep_…`, new at every start).
    replica: String,
    /// The turn's key of each pending background check whose key this replica holds, by (turn id,
    /// check name), with when it was kept: memory only.
    keys: Mutex<HashMap<(String, String), (TurnKey, Instant)>>,
    /// Background judgments at once: at most half the judge's slots, so blocking checks keep theirs.
    background_slots: Arc<Semaphore>,
    /// The background workers, awaited when the replica leaves.
    workers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    events_wake: Notify,
    pending_wake: Notify,
    stop: watch::Sender<bool>,
    /// The operator pages' login sessions (kept in the store, shared by every replica).
    sessions: Sessions,
    /// What full queues refused since start.
    dropped: limits::Dropped,
}

impl App {
    /// A judge-only app: `POST /v1/judge` and `/v1/retry`; the results routes answer 503.
    pub fn new(settings: Settings) -> Result<Arc<Self>, reqwest::Error> {
        Self::build(settings, None)
    }

    /// The app's state around `store` (`None`: judge-only); [`App::start`] starts its workers.
    pub(crate) fn build(
        settings: Settings,
        store: Option<Store>,
    ) -> Result<Arc<Self>, reqwest::Error> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("livecheck-judge/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(settings.timeout)
            // A redirect could carry the turn's key elsewhere (reqwest drops `authorization` across
            // hosts, not `x-api-key`): a 3xx is an errored verdict instead.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Arc::new(Self {
            permits: Semaphore::new(settings.max_concurrent),
            background_slots: Arc::new(Semaphore::new(background_slots(&settings))),
            settings,
            client,
            store,
            replica: ids::time_ordered("rep_"),
            keys: Mutex::default(),
            workers: Mutex::default(),
            events_wake: Notify::new(),
            pending_wake: Notify::new(),
            stop: watch::Sender::new(false),
            sessions: Sessions::default(),
            dropped: limits::Dropped::default(),
        }))
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    pub fn dropped(&self) -> &limits::Dropped {
        &self.dropped
    }

    /// Stops the background workers (the HTTP server stops with its own shutdown signal). The
    /// replica's claims and keys stay where they are until its lease runs out, as after a crash:
    /// a clean stop is [`App::leave`].
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// The background workers [`App::leave`] waits for.
    pub(crate) fn keep_workers(&self, workers: Vec<tokio::task::JoinHandle<()>>) {
        *self.workers.lock().unwrap_or_else(PoisonError::into_inner) = workers;
    }

    /// A clean stop: the workers end, the background checks being judged finish (within the judge
    /// timeout), then this replica releases what it claimed and leaves the store's replicas, so the
    /// others take its work at once. The checks whose key only it held are judged without it.
    pub async fn leave(&self) {
        self.stop();
        let workers =
            std::mem::take(&mut *self.workers.lock().unwrap_or_else(PoisonError::into_inner));
        // One deadline for all of it: a judge call and an event delivery in flight each end within
        // their own timeouts (10 s + 10 s by default, inside Kubernetes' 30 s grace period).
        let deadline = tokio::time::Instant::now() + self.settings.timeout + EVENT_DELIVERY_TIMEOUT;
        for worker in workers {
            let _ = timeout_at(deadline, worker).await;
        }
        let all = u32::try_from(background_slots(&self.settings)).unwrap_or(u32::MAX);
        let _ = timeout_at(deadline, self.background_slots.acquire_many(all)).await;
        if let Some(store) = &self.store {
            match store.leave(&self.replica).await {
                Ok(()) => tracing::info!(replica = %self.replica, "left the replicas: claims released"),
                Err(e) => tracing::warn!(
                    error = store::error_kind(&e),
                    "cannot release this replica's claims: the others take them when its lease runs out"
                ),
            }
        }
    }

    /// This process's id among the replicas sharing the store.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    pub(crate) fn background_slots(&self) -> &Arc<Semaphore> {
        &self.background_slots
    }

    /// Runs a store write until it succeeds (tried again every `timing.poll_every`) or the app
    /// stops (`None`). For writes that record work done outside the store (a verdict, a delivery):
    /// failing them would have the work done again.
    pub(crate) async fn persist<T, F, Fut>(&self, what: &'static str, mut write: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, store::StoreError>>,
    {
        let mut stop = self.stopped();
        loop {
            match write().await {
                Ok(done) => return Some(done),
                Err(e) => tracing::warn!(
                    error = store::error_kind(&e),
                    what,
                    "results store unavailable: trying again"
                ),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.timing.poll_every) => {}
                _ = stop.changed() => return None,
            }
        }
    }
    pub(crate) fn stopped(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    pub(crate) fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    pub(crate) fn events_wake(&self) -> &Notify {
        &self.events_wake
    }

    pub(crate) fn pending_wake(&self) -> &Notify {
        &self.pending_wake
    }

    pub(crate) fn webhook_urls(&self) -> Vec<String> {
        self.settings
            .webhooks
            .iter()
            .map(|w| w.url.to_string())
            .collect()
    }

    pub(crate) fn remember_turn_key(&self, turn_id: &str, check: &str, key: TurnKey) {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                (turn_id.to_owned(), check.to_owned()),
                (key, Instant::now()),
            );
    }

    /// Keeps only the keys of `held` (the checks whose key the store says this replica holds) and
    /// those kept within `recent` (their report may not be committed yet).
    pub(crate) fn retain_turn_keys(&self, held: &HashSet<(String, String)>, recent: Duration) {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|id, (_, kept)| held.contains(id) || kept.elapsed() < recent);
    }

    pub(crate) fn forget_turn_key(&self, turn_id: &str, check: &str) {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(turn_id.to_owned(), check.to_owned()));
    }

    pub(crate) fn turn_key(&self, turn_id: &str, check: &str) -> Option<TurnKey> {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(turn_id.to_owned(), check.to_owned()))
            .map(|(key, _)| key.clone())
    }

    /// Decides one judged check. Never fails: whatever goes wrong is an `errored` verdict.
    pub async fn judge(&self, req: &JudgeRequest, key: &TurnKey) -> JudgeVerdict {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.settings.timeout;
        let kind = Kind::parse(&req.kind);
        let backend = self.settings.models.backend_for(&req.judge_model);
        let reply = match (kind, backend) {
            (None, _) => Reply::failed(Failure::UnknownKind),
            (_, None) => Reply::failed(Failure::UnknownModel),
            (Some(kind), Some(backend)) => {
                let prompt = prompt::build(req, kind, &mut prompt::random_nonce);
                self.ask(backend, &req.judge_model, prompt, key, deadline)
                    .await
            }
        };
        let failure = reply.verdict.as_ref().err().map(|f| f.code());
        let verdict = reply.into_wire();
        tracing::info!(
            stage = req.stage.as_str(),
            kind = kind.map_or("unknown", Kind::as_str),
            judge_model = %req.judge_model,
            backend = backend.map_or("none", |b| b.name.as_str()),
            outcome = verdict.outcome.as_str(),
            failure = failure.unwrap_or("none"),
            elapsed_ms = started.elapsed().as_millis() as u64,
            input_tokens = verdict.usage.input_tokens,
            output_tokens = verdict.usage.output_tokens,
            "judged"
        );
        verdict
    }

    /// Decides one tool-call check: `failed` when the condition holds for the call (deny),
    /// `passed` when it does not. Never fails: whatever goes wrong is an `errored` verdict (which
    /// denies too).
    pub async fn tool_check(&self, req: &ToolCheckRequest, key: &TurnKey) -> JudgeVerdict {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.settings.timeout;
        let backend = self.settings.models.backend_for(&req.judge_model);
        let reply = match backend {
            None => Reply::failed(Failure::UnknownModel),
            Some(backend) => {
                let prompt = tool_prompt::build(req, &mut prompt::random_nonce);
                self.ask(backend, &req.judge_model, prompt, key, deadline)
                    .await
            }
        };
        let failure = reply.verdict.as_ref().err().map(|f| f.code());
        let verdict = reply.into_wire();
        // The tool's name comes from the agent: like its arguments, it is never logged.
        tracing::info!(
            judge_model = %req.judge_model,
            backend = backend.map_or("none", |b| b.name.as_str()),
            intent_messages = tool_prompt::intent(req).len(),
            outcome = verdict.outcome.as_str(),
            failure = failure.unwrap_or("none"),
            elapsed_ms = started.elapsed().as_millis() as u64,
            input_tokens = verdict.usage.input_tokens,
            output_tokens = verdict.usage.output_tokens,
            "tool call judged"
        );
        verdict
    }

    /// One judge call for a built prompt, bounded by `deadline`, a free slot included.
    async fn ask(
        &self,
        backend: &Backend,
        model: &str,
        prompt: Result<Prompt, Failure>,
        key: &TurnKey,
        deadline: tokio::time::Instant,
    ) -> Reply {
        let prompt = match prompt {
            Ok(p) => p,
            Err(failure) => return Reply::failed(failure),
        };
        match timeout_at(deadline, self.permits.acquire()).await {
            Err(_) | Ok(Err(_)) => Reply::failed(Failure::Busy),
            Ok(Ok(_permit)) => {
                let max = self.settings.limits.max_backend_answer_bytes;
                let call = backend::ask(&self.client, backend, model, &prompt, key, max);
                timeout_at(deadline, call)
                    .await
                    .unwrap_or_else(|_| Reply::failed(Failure::Timeout))
            }
        }
    }
}

/// Background judgments at once: half the judge's slots.
fn background_slots(settings: &Settings) -> usize {
    (settings.max_concurrent / 2).max(1)
}
