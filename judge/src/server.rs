//! The HTTP side: `POST /v1/judge`, `POST /v1/tool-check`, `POST /v1/retry` (behind the filter
//! token, [`crate::auth`]), the probes `GET /healthz` and `GET /readyz`, the results routes of
//! [`crate::api`] and the operator pages of [`crate::pages`]; the running service's state and its
//! background workers.
//!
//! Logs name the stage, kind, judge model, backend, outcome, failure and token counts of each call;
//! never a judged text, a rule, a condition, a tool's name or arguments, a reason, a body or a key.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use livecheck_wire::{
    JudgeRequest, JudgeVerdict, Outcome, Stage, ToolCheckRequest, JUDGE_PATH, RETRY_PATH,
    TOOL_CHECK_PATH,
};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify, Semaphore};
use tokio::time::timeout_at;

use crate::backend::{self, TurnKey};
use crate::config::{Backend, Settings};
use crate::prompt::{self, Kind, Prompt};
use crate::store::{self, Store};
use crate::tool_prompt;
use crate::verdict::{Failure, Reply};
use crate::{api, auth, events, ids, limits, pages, pending, replicas};

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
    sessions: pages::Sessions,
    /// What full queues refused since start.
    dropped: limits::Dropped,
}

/// Why the service could not start.
#[derive(Debug)]
pub enum StartError {
    Client(reqwest::Error),
    Store(store::StoreError),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Client(e) => write!(f, "cannot build the HTTP client: {e}"),
            // A database error's message can quote values: name the kind only.
            Self::Store(e) => write!(f, "cannot open the results store: {}", store::error_kind(e)),
        }
    }
}

impl std::error::Error for StartError {}

impl App {
    /// A judge-only app: `POST /v1/judge` and `/v1/retry`; the results routes answer 503.
    pub fn new(settings: Settings) -> Result<Arc<Self>, reqwest::Error> {
        Self::build(settings, None)
    }

    /// The whole service: opens the results store (migrating it), joins the replicas sharing it,
    /// then starts the workers that keep this replica's lease, judge pending background checks,
    /// deliver events and sweep old results (once now, then every `timing.sweep_every`).
    /// [`App::leave`] ends them and hands this replica's work to the others; [`App::stop`] only
    /// ends them, as a crash would.
    pub async fn start(settings: Settings) -> Result<Arc<Self>, StartError> {
        let queues = store::QueueLimits {
            pending_checks: settings.limits.max_pending_checks,
            events: settings.limits.max_queued_events,
        };
        let store = Store::open(settings.store.url.expose())
            .await
            .map_err(StartError::Store)?
            .with_queue_limits(queues);
        let app = Self::build(settings, Some(store)).map_err(StartError::Client)?;
        replicas::join(&app).await.map_err(StartError::Store)?;
        let workers = vec![
            tokio::spawn(replicas::lease_loop(Arc::clone(&app))),
            tokio::spawn(pending::judge_loop(Arc::clone(&app))),
            tokio::spawn(events::deliver_loop(Arc::clone(&app))),
            tokio::spawn(sweep_loop(Arc::clone(&app))),
        ];
        *app.workers.lock().unwrap_or_else(PoisonError::into_inner) = workers;
        Ok(app)
    }

    fn build(settings: Settings, store: Option<Store>) -> Result<Arc<Self>, reqwest::Error> {
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
            sessions: pages::Sessions::default(),
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

    /// A clean stop: the workers end, the background checks being judged finish (within the judge
    /// timeout), then this replica releases what it claimed and leaves the store's replicas, so the
    /// others take its work at once. The checks whose key only it held are judged without it.
    pub async fn leave(&self) {
        self.stop();
        let workers =
            std::mem::take(&mut *self.workers.lock().unwrap_or_else(PoisonError::into_inner));
        // One deadline for all of it: a judge call and an event delivery in flight each end within
        // their own timeouts (10 s + 10 s by default, inside Kubernetes' 30 s grace period).
        let deadline =
            tokio::time::Instant::now() + self.settings.timeout + events::DELIVERY_TIMEOUT;
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

    pub(crate) fn sessions(&self) -> &pages::Sessions {
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
            stage = match req.stage {
                Stage::Input => "input",
                Stage::Output => "output",
            },
            kind = kind.map_or("unknown", Kind::as_str),
            judge_model = %req.judge_model,
            backend = backend.map_or("none", |b| b.name.as_str()),
            outcome = outcome_name(verdict.outcome),
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
            outcome = outcome_name(verdict.outcome),
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

fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Passed => "passed",
        Outcome::Failed => "failed",
        Outcome::Errored => "errored",
    }
}

pub fn router(app: Arc<App>) -> Router {
    let filter_token = app.settings().filter_token.clone();
    let max_request_bytes = app.settings().limits.max_request_bytes;
    let filter = Router::new()
        .route(JUDGE_PATH, post(post_judge))
        .route(TOOL_CHECK_PATH, post(post_tool_check))
        .route(RETRY_PATH, post(post_retry))
        .merge(api::filter_routes())
        .route_layer(middleware::from_fn_with_state(
            filter_token,
            auth::filter_token,
        ));
    let routes = Router::new()
        .merge(filter)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(api::operator_routes())
        .merge(pages::routes())
        .with_state(app);
    limits::bound_requests(routes, max_request_bytes)
}

/// Deletes turns older than the retention, at start and then periodically, until the app stops.
async fn sweep_loop(app: Arc<App>) {
    let Some(store) = app.store().cloned() else {
        return;
    };
    let mut stop = app.stopped();
    loop {
        let retention =
            i64::try_from(app.settings().store.retention.as_millis()).unwrap_or(i64::MAX);
        match store.sweep(ids::now_ms().saturating_sub(retention)).await {
            Ok(0) => {}
            Ok(turns) => tracing::info!(turns, "retention: deleted old turns and their results"),
            Err(e) => tracing::warn!(error = store::error_kind(&e), "retention sweep failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(app.settings().timing.sweep_every) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Serves until `shutdown` completes, then finishes the requests in flight.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(app))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn post_judge(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let req: JudgeRequest = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let key = TurnKey::from_headers(&headers);
    Json(app.judge(&req, &key).await).into_response()
}

/// A tool-call check: the turn's key arrives as the callout's own `authorization` / `x-api-key`.
async fn post_tool_check(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let req: ToolCheckRequest = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let key = TurnKey::from_headers(&headers);
    Json(app.tool_check(&req, &key).await).into_response()
}

/// Recovery: asks the model again through the upstream configured for the turn's authority.
async fn post_retry(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let req: livecheck_wire::RetryRequest = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let max = app.settings.limits.max_retry_answer_bytes;
    let answer =
        crate::retry::ask_again(&app.client, &app.settings.upstreams, &req, &headers, max).await;
    Json(answer).into_response()
}

/// A request body, or the 400 that says what is wrong with it without quoting it.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Box<Response>> {
    match serde_json::from_slice(body) {
        Ok(r) => Ok(r),
        Err(e) => {
            // serde's message can quote the body; say only what kind of problem and where.
            let what = match e.classify() {
                serde_json::error::Category::Syntax => "not valid JSON",
                serde_json::error::Category::Eof => "cut short",
                serde_json::error::Category::Data | serde_json::error::Category::Io => {
                    "not a judge request"
                }
            };
            tracing::warn!(
                what,
                line = e.line(),
                column = e.column(),
                "bad judge request"
            );
            let error = format!(
                "the body is {what} (line {}, column {})",
                e.line(),
                e.column()
            );
            Err(Box::new(
                (StatusCode::BAD_REQUEST, Json(json!({ "error": error }))).into_response(),
            ))
        }
    }
}

/// Liveness: the process serves; with what full queues refused since start.
async fn healthz(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    Json(json!({"status": "ok", "dropped": app.dropped.as_json()}))
}

/// How long readiness waits for the store: a Kubernetes probe's default timeout is 1 s.
const READY_WITHIN: Duration = Duration::from_secs(1);

/// Readiness: the results store answers a trivial query in time; else 503 (the filter's reports
/// would not be stored).
async fn readyz(State(app): State<Arc<App>>) -> Response {
    let problem = match app.store() {
        None => Some("no store"),
        Some(store) => match tokio::time::timeout(READY_WITHIN, store.ping()).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(store::error_kind(&e)),
            Err(_) => Some("timed out"),
        },
    };
    match problem {
        None => Json(json!({"status": "ready"})).into_response(),
        Some(problem) => {
            tracing::warn!(
                error = problem,
                "not ready: the results store does not answer"
            );
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": "the results store is unavailable"})),
            )
                .into_response()
        }
    }
}
