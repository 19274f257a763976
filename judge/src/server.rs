//! The service composed: [`App::start`] opens the store around the app's state ([`crate::app`]) and
//! starts the background workers; [`router`] serves `POST /v1/judge`, `POST /v1/tool-check`, `POST
//! /v1/retry` (behind the filter token, [`crate::auth`]), the probes `GET /healthz` and `GET /readyz`,
//! the results routes of [`crate::api`] and the operator pages of [`crate::pages`].
//!
//! Logs name the stage, kind, judge model, backend, outcome, failure and token counts of each call;
//! never a judged text, a rule, a condition, a tool's name or arguments, a reason, a body or a key.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use livecheck_wire::{
    JudgeRequest, JudgeVerdict, RetryAnswer, RetryRequest, ToolCheckRequest, JUDGE_PATH,
    RETRY_PATH, TOOL_CHECK_PATH,
};
use serde_json::json;
use tokio::net::TcpListener;

use crate::api_error::ApiError;
use crate::app::App;
use crate::backend::TurnKey;
use crate::config::Settings;
use crate::store::{self, Store};
use crate::{api, auth, events, ids, limits, pages, pending, replicas};

/// Why the service could not start.
#[derive(Debug)]
pub enum StartError {
    Client(reqwest::Error),
    Store(store::StoreFailure),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Client(e) => write!(f, "cannot build the HTTP client: {e}"),
            // A database error's message can quote values: name the kind only.
            Self::Store(e) => write!(f, "cannot open the results store: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

impl App {
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
            .map_err(|e| StartError::Store(e.into()))?
            .with_queue_limits(queues);
        let app = Self::build(settings, Some(store)).map_err(StartError::Client)?;
        replicas::join(&app)
            .await
            .map_err(|e| StartError::Store(e.into()))?;
        let workers = vec![
            tokio::spawn(replicas::lease_loop(Arc::clone(&app))),
            tokio::spawn(pending::judge_loop(Arc::clone(&app))),
            tokio::spawn(events::deliver_loop(Arc::clone(&app))),
            tokio::spawn(sweep_loop(Arc::clone(&app))),
        ];
        app.keep_workers(workers);
        Ok(app)
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

async fn post_judge(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<JudgeVerdict>, ApiError> {
    let req: JudgeRequest = parse(&body)?;
    let key = TurnKey::from_headers(&headers);
    Ok(Json(app.judge(&req, &key).await))
}

/// A tool-call check: the turn's key arrives as the callout's own `authorization` / `x-api-key`.
async fn post_tool_check(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<JudgeVerdict>, ApiError> {
    let req: ToolCheckRequest = parse(&body)?;
    let key = TurnKey::from_headers(&headers);
    Ok(Json(app.tool_check(&req, &key).await))
}

/// Recovery: asks the model again through the upstream configured for the turn's authority.
async fn post_retry(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<RetryAnswer>, ApiError> {
    let req: RetryRequest = parse(&body)?;
    let max = app.settings().limits.max_retry_answer_bytes;
    let answer =
        crate::retry::ask_again(app.client(), &app.settings().upstreams, &req, &headers, max).await;
    Ok(Json(answer))
}

/// A request body, or the 400 that says what is wrong with it without quoting it.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
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
            Err(ApiError::BadRequest(format!(
                "the body is {what} (line {}, column {})",
                e.line(),
                e.column()
            )))
        }
    }
}

/// Liveness: the process serves; with what full queues refused since start.
async fn healthz(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    Json(json!({"status": "ok", "dropped": app.dropped().as_json()}))
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
