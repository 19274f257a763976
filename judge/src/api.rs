//! The results side of the HTTP service.
//!
//! - `POST /v1/results` (from the filter, with the filter token when one is configured:
//!   [`crate::auth`]): one turn's report, stored in one transaction; `200 {"stored": n}` only after
//!   the commit, `503` when the store is down. The filter sends a report again until it gets a 2xx:
//!   a result already stored (same turn, check, attempt and, for tool-call checks, call) is not
//!   stored, evented or alerted again.
//! - `POST /v1/results/batch` (the same token): `{"reports": [...]}`, the reports of many turns
//!   without background checks, each stored as if it came alone, all in one transaction; a report
//!   that is not valid is skipped and logged (the others are stored: `200 {"stored": n,
//!   "skipped": k}`), and a store that fails answers `503` for the whole batch, which the filter
//!   sends again.
//! - With the operator token (`Authorization: Bearer …`, `[api] token_env`):
//!   `GET /responses/{id}/checks`, `GET /agents/{id}/checks/summary`, `DELETE /people/{person}/checks`.
//!
//! Errors are `{"error": "…"}` and never quote the request.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use livecheck_wire::{Alert, ReportBatch, TurnReport, RESULTS_BATCH_PATH, RESULTS_PATH};
use serde_json::{json, Value};

use crate::alerts;
use crate::api_error::ApiError;
use crate::app::App;
use crate::auth;
use crate::backend::TurnKey;
use crate::ids::{self, DAY_MS};
use crate::store::{self, Store};

const DEFAULT_LIMIT: i64 = 20;
const MAX_LIMIT: i64 = 100;
const DEFAULT_SINCE_DAYS: i64 = 7;
const MAX_SINCE_DAYS: i64 = 90;

/// The filter's route: reports of finished turns.
pub fn filter_routes() -> Router<Arc<App>> {
    Router::new()
        .route(RESULTS_PATH, post(post_results))
        .route(RESULTS_BATCH_PATH, post(post_results_batch))
}

/// The operator API.
pub fn operator_routes() -> Router<Arc<App>> {
    Router::new()
        .route("/responses/{id}/checks", get(get_checks))
        .route("/agents/{id}/checks/summary", get(get_summary))
        .route("/people/{person}/checks", delete(delete_person))
}

async fn post_results(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let store = app.store().cloned().ok_or(ApiError::NoStore)?;
    let report: TurnReport = parse_report(&body)
        .and_then(|report| validate(&report).map(|()| report))
        .map_err(|problem| {
            tracing::warn!(problem = %problem, "bad turn report");
            ApiError::from(problem)
        })?;
    let key = TurnKey::from_headers(&headers);
    let stored = ingest(&app, &store, &report, &key).await?;
    Ok(Json(json!({ "stored": stored })))
}

async fn post_results_batch(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let store = app.store().cloned().ok_or(ApiError::NoStore)?;
    let batch: ReportBatch = parse_report(&body).map_err(|problem| {
        tracing::warn!(problem = %problem, "bad batch of turn reports");
        ApiError::from(problem)
    })?;
    let key = TurnKey::from_headers(&headers);
    let mut valid = Vec::with_capacity(batch.reports.len());
    for (i, report) in batch.reports.iter().enumerate() {
        match validate(report) {
            Ok(()) => valid.push(report),
            Err(problem) => {
                tracing::warn!(problem = %problem, at = i, "bad turn report in a batch: skipped");
            }
        }
    }
    let skipped = batch.reports.len() - valid.len();
    // One transaction for the whole batch: a failing store fails it whole, and the filter sends
    // it again (nothing is stored twice).
    for report in &valid {
        remember_keys(&app, report, &key);
    }
    let ingested = store
        .ingest_many(
            &valid,
            &app.webhook_urls(),
            ids::now_ms(),
            key_holder(&app, &key),
        )
        .await
        .map_err(|e| {
            for report in &valid {
                forget_keys(&app, report);
            }
            ApiError::store("storing a batch of turn reports")(e)
        })?;
    let mut stored = 0;
    for (report, ingested) in valid.iter().zip(ingested) {
        stored += ingested.stored;
        after_ingest(&app, &store, report, ingested, false).await;
    }
    // One line per batch: a line per report would cost the sidecar more than storing it.
    tracing::info!(
        reports = valid.len(),
        skipped,
        stored,
        "batch of turn reports stored"
    );
    Ok(Json(json!({ "stored": stored, "skipped": skipped })))
}

/// This replica, as the holder of the turn's key, when the report came with one.
fn key_holder<'a>(app: &'a App, key: &TurnKey) -> Option<&'a str> {
    (!key.is_empty()).then(|| app.replica())
}

/// The key of the turn's background checks is in memory before its pending checks are visible to
/// the judging loop.
fn remember_keys(app: &Arc<App>, report: &TurnReport, key: &TurnKey) {
    if key.is_empty() {
        return;
    }
    for check in &report.background {
        app.remember_turn_key(&report.turn_id, &check.name, key.clone());
    }
}

fn forget_keys(app: &Arc<App>, report: &TurnReport) {
    for check in &report.background {
        app.forget_turn_key(&report.turn_id, &check.name);
    }
}

/// Stores one valid report and starts what follows from it (events, background checks, alerts);
/// the results stored now.
async fn ingest(
    app: &Arc<App>,
    store: &Store,
    report: &TurnReport,
    key: &TurnKey,
) -> Result<usize, ApiError> {
    remember_keys(app, report, key);
    let ingested = store
        .ingest(
            report,
            &app.webhook_urls(),
            ids::now_ms(),
            key_holder(app, key),
        )
        .await
        .map_err(|e| {
            forget_keys(app, report);
            ApiError::store("storing a turn report")(e)
        })?;
    let stored = ingested.stored;
    after_ingest(app, store, report, ingested, true).await;
    Ok(stored)
}

/// What follows a stored report: keys this replica does not hold (no check pending, or another
/// live replica holds it) are dropped, and the event, judging and alert loops are woken for what
/// it added. `log`: a line for this report at info (a report
/// in a batch: at debug, the batch has its own line).
async fn after_ingest(
    app: &Arc<App>,
    store: &Store,
    report: &TurnReport,
    ingested: store::Ingested,
    log: bool,
) {
    for check in &report.background {
        if !ingested.held.contains(&check.name) {
            app.forget_turn_key(&report.turn_id, &check.name);
        }
    }
    if log {
        tracing::info!(
            agent = %report.agent,
            version = %report.version,
            results = report.results.len(),
            stored = ingested.stored,
            events = ingested.events,
            pending = ingested.pending.len(),
            "turn report stored"
        );
    } else {
        tracing::debug!(
            agent = %report.agent,
            version = %report.version,
            results = report.results.len(),
            stored = ingested.stored,
            "turn report stored (in a batch)"
        );
    }
    app.dropped()
        .note(ingested.refused_checks, ingested.dropped_events);
    if ingested.events > 0 {
        app.events_wake().notify_one();
    }
    if !ingested.pending.is_empty() {
        app.pending_wake().notify_one();
    }
    if !ingested.alerts.is_empty() {
        alerts::evaluate(app, store, ingested.alerts).await;
    }
}

/// What is wrong with a report: where, and which rule it breaks; never the body's text. It is the
/// 400 answer's message as it is, and the log line's `problem`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadReport(String);

impl fmt::Display for BadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadReport {}

impl std::ops::Deref for BadReport {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<&str> for BadReport {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl From<BadReport> for ApiError {
    fn from(problem: BadReport) -> Self {
        Self::BadRequest(problem.0)
    }
}

/// The report, or a short problem naming the field; never quoting the body. Read once plainly:
/// tracking the path costs every field of every report (~3% of the sidecar's CPU storing batches),
/// and is needed only to name where a refused body went wrong, so a refused body is read again.
fn parse_report<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, BadReport> {
    if let Ok(report) = serde_json::from_slice(body) {
        return Ok(report);
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let mut segments: Vec<String> = Vec::new();
        for segment in e.path().iter() {
            match segment {
                serde_path_to_error::Segment::Seq { index } => segments.push(format!("[{index}]")),
                serde_path_to_error::Segment::Map { key } => segments.push(format!(".{key}")),
                // A variant is the body's text.
                serde_path_to_error::Segment::Enum { .. }
                | serde_path_to_error::Segment::Unknown => {}
            }
        }
        let inner = e.into_inner();
        let what = match inner.classify() {
            serde_json::error::Category::Syntax => "is not valid JSON".to_owned(),
            serde_json::error::Category::Eof => "is cut short".to_owned(),
            serde_json::error::Category::Io => "cannot be read".to_owned(),
            serde_json::error::Category::Data => {
                let message = inner.to_string();
                // Our own field names are safe to repeat; the body's are not.
                match message
                    .strip_prefix("missing field `")
                    .and_then(|rest| rest.split('`').next())
                {
                    Some(field) => format!("misses the field {field}"),
                    None if message.starts_with("unknown field") => {
                        // The path ends in the unknown key itself: the body's text.
                        segments.pop();
                        "has an unknown field".to_owned()
                    }
                    None if message.starts_with("unknown variant") => {
                        "has an unknown value".to_owned()
                    }
                    None => "has a value of the wrong type".to_owned(),
                }
            }
        };
        let path = segments.concat();
        let at = match path.strip_prefix('.') {
            Some(p) => p.to_owned(),
            None if path.is_empty() => "the report".to_owned(),
            None => path,
        };
        BadReport(format!("{at}: {what}"))
    })
}

fn text_field(at: &str, value: &str, max: usize) -> Result<(), BadReport> {
    if value.trim().is_empty() {
        return Err(BadReport(format!("{at}: must not be empty")));
    }
    if value.chars().count() > max || value.chars().any(char::is_control) {
        return Err(BadReport(format!(
            "{at}: must be at most {max} characters without control characters"
        )));
    }
    Ok(())
}

fn alert_field(at: &str, alert: Option<Alert>) -> Result<(), BadReport> {
    match alert {
        Some(a) if !(a.failure_rate > 0.0 && a.failure_rate <= 1.0) => Err(BadReport(format!(
            "{at}.alert.failure_rate: must be above 0 and at most 1"
        ))),
        Some(a) if !(1..=1000).contains(&a.over_last) => Err(BadReport(format!(
            "{at}.alert.over_last: must be from 1 to 1000"
        ))),
        _ => Ok(()),
    }
}

fn validate(report: &TurnReport) -> Result<(), BadReport> {
    text_field("turn_id", &report.turn_id, 128)?;
    if let Some(id) = &report.response_id {
        text_field("response_id", id, 256)?;
    }
    text_field("agent", &report.agent, 200)?;
    text_field("version", &report.version, 200)?;
    if let Some(person) = &report.person {
        text_field("person", person, 256)?;
    }
    if report.results.len() > 1000 {
        return Err(BadReport("results: at most 1000 per turn".to_owned()));
    }
    if report.background.len() > 100 {
        return Err(BadReport("background: at most 100 per turn".to_owned()));
    }
    for (i, r) in report.results.iter().enumerate() {
        let at = format!("results[{i}]");
        text_field(&format!("{at}.name"), &r.name, 200)?;
        text_field(&format!("{at}.kind"), &r.kind, 64)?;
        if !(1..=10).contains(&r.attempt) {
            return Err(BadReport(format!("{at}.attempt: must be from 1 to 10")));
        }
        if r.score.is_some_and(|s| !(0.0..=1.0).contains(&s)) {
            return Err(BadReport(format!("{at}.score: must be from 0 to 1")));
        }
        if r.reason.chars().count() > 4000 {
            return Err(BadReport(format!(
                "{at}.reason: must be at most 4000 characters"
            )));
        }
        if let Some(model) = &r.judge_model {
            text_field(&format!("{at}.judge_model"), model, 200)?;
        }
        if let Some(tool) = &r.tool {
            text_field(&format!("{at}.tool"), tool, 256)?;
        }
        if r.call == Some(0) {
            return Err(BadReport(format!("{at}.call: must be 1 or more")));
        }
        if i64::try_from(r.created_at_ms).is_err() {
            return Err(BadReport(format!("{at}.created_at_ms: out of range")));
        }
        alert_field(&at, r.alert)?;
    }
    for (i, b) in report.background.iter().enumerate() {
        let at = format!("background[{i}]");
        text_field(&format!("{at}.name"), &b.name, 200)?;
        text_field(&format!("{at}.judge.kind"), &b.judge.kind, 64)?;
        text_field(
            &format!("{at}.judge.judge_model"),
            &b.judge.judge_model,
            200,
        )?;
        alert_field(&at, b.alert)?;
    }
    Ok(())
}

/// The operator token check: 503 when none is configured (never an open API), 401 without the
/// right one (compared as [`auth::same_token`] does).
fn authorize(app: &App, headers: &HeaderMap) -> Result<Store, ApiError> {
    let token = app
        .settings()
        .api_token
        .as_ref()
        .ok_or(ApiError::NoOperatorToken)?;
    let given = auth::bearer(headers).unwrap_or_default();
    if !auth::same_token(token, given.as_bytes()) {
        return Err(ApiError::NeedsOperatorToken);
    }
    app.store().cloned().ok_or(ApiError::NoStore)
}

type Params = Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>;

fn params(query: Params) -> Result<HashMap<String, String>, ApiError> {
    query
        .map(|Query(q)| q)
        .map_err(|_| ApiError::BadRequest("the query string is not valid".into()))
}

fn cursor_encode(seq: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("s{seq}"))
}

fn cursor_decode(cursor: &str) -> Option<i64> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    text.strip_prefix('s')?.parse().ok().filter(|n| *n >= 0)
}

async fn get_checks(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Params,
) -> Result<Json<Value>, ApiError> {
    let store = authorize(&app, &headers)?;
    let query = params(query)?;
    let limit = match query.get("limit").map(|l| l.parse::<i64>()) {
        None => DEFAULT_LIMIT,
        Some(Ok(n)) if (1..=MAX_LIMIT).contains(&n) => n,
        Some(_) => {
            return Err(ApiError::BadRequest(
                "limit must be a whole number from 1 to 100".into(),
            ))
        }
    };
    let after = match query.get("cursor").filter(|c| !c.is_empty()) {
        None => 0,
        Some(c) => cursor_decode(c)
            .ok_or_else(|| ApiError::BadRequest("cursor is not one this API gave".into()))?,
    };
    let turn = store
        .find_turn(&id)
        .await
        .map_err(ApiError::store("reading a turn"))?
        .ok_or(ApiError::NotFound("no stored turn has this id"))?;
    let mut rows = store
        .results_page(&turn.turn_id, after, limit + 1)
        .await
        .map_err(ApiError::store("reading a turn's results"))?;
    let more = i64::try_from(rows.len()).unwrap_or(i64::MAX) > limit;
    rows.truncate(usize::try_from(limit).unwrap_or(0));
    let next_cursor = match rows.last() {
        Some(last) if more => Value::String(cursor_encode(last.seq)),
        _ => Value::Null,
    };
    let items: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut item = json!({
                "object": "response.check",
                "id": r.id,
                "response_id": turn.public_id(),
                "name": r.name,
                "stage": r.stage,
                "kind": r.kind,
                "mode": r.mode,
                "attempt": r.attempt,
                "outcome": r.outcome,
                "score": r.score,
                "reason": r.reason,
                "judge_model": r.judge_model,
                "passed_on_error": r.passed_on_error,
                "created_at": ids::rfc3339(r.created_at_ms),
            });
            // Tool-call checks only: absent otherwise, so other results read as they always did.
            if let Some(fields) = item.as_object_mut() {
                if let Some(tool) = &r.tool {
                    fields.insert("tool".into(), json!(tool));
                }
                if let Some(call) = r.call {
                    fields.insert("call".into(), json!(call));
                }
            }
            item
        })
        .collect();
    Ok(Json(json!({ "items": items, "next_cursor": next_cursor })))
}

async fn get_summary(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(agent): Path<String>,
    query: Params,
) -> Result<Json<Value>, ApiError> {
    let store = authorize(&app, &headers)?;
    let query = params(query)?;
    let now = ids::now_ms();
    let since = match query.get("since") {
        None => (now - DEFAULT_SINCE_DAYS * DAY_MS).div_euclid(1000) * 1000,
        Some(text) => ids::parse_rfc3339(text).ok_or_else(|| {
            ApiError::BadRequest(
                "since must be an RFC 3339 time such as 2026-10-09T00:00:00Z".into(),
            )
        })?,
    };
    if since < now - MAX_SINCE_DAYS * DAY_MS {
        return Err(ApiError::BadRequest(
            "since may be at most 90 days back".into(),
        ));
    }
    let counts = store
        .summary(&agent, since)
        .await
        .map_err(ApiError::store("summing an agent's results"))?;
    let items: Vec<Value> = counts
        .iter()
        .map(|c| json!({"name": c.name, "passed": c.passed, "failed": c.failed, "errored": c.errored}))
        .collect();
    Ok(Json(
        json!({ "since": ids::rfc3339(since), "items": items }),
    ))
}

async fn delete_person(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(person): Path<String>,
) -> Result<StatusCode, ApiError> {
    let store = authorize(&app, &headers)?;
    let turns = store
        .erase_person(&person)
        .await
        .map_err(ApiError::store("erasing a person's turns"))?;
    tracing::info!(turns, "erased a person's turns");
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        assert_eq!(cursor_decode(&cursor_encode(17)), Some(17));
        assert_eq!(cursor_decode("17"), None);
        assert_eq!(cursor_decode("!!"), None);
    }

    #[test]
    fn a_bad_report_names_the_field_and_never_quotes_the_body() {
        let body = br#"{"turn_id":"lc_1","agent":"a","version":"1","results":[{"name":"n","stage":"input","kind":"k","mode":"block","attempt":"SECRET","outcome":"passed","reason":"r","created_at_ms":1}]}"#;
        let problem = parse_report::<TurnReport>(body).unwrap_err();
        assert_eq!(problem, "results[0].attempt: has a value of the wrong type");
        let problem =
            parse_report::<TurnReport>(br#"{"turn_id":"lc_1","agent":"a","version":"1"}"#)
                .unwrap_err();
        assert_eq!(problem, "the report: misses the field results");
        let problem = parse_report::<TurnReport>(
            br#"{"turn_id":"lc_1","SECRET":1,"agent":"a","version":"1","results":[]}"#,
        )
        .unwrap_err();
        assert!(!problem.contains("SECRET"), "{problem}");
    }
}
