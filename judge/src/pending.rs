//! Background checks from turn reports: stored as pending checks in the report's transaction, judged
//! here on the sidecar's time with the judge path of `POST /v1/judge`, and stored as a result (mode
//! `background`, attempt 1), which deletes the pending check and its text.
//!
//! The turn's key stays in memory only, keyed by (turn, check). A check whose key is gone (the
//! sidecar restarted in between) is judged without one when its backend has its own `api_key_env`,
//! else recorded `errored` with [`NO_KEY_REASON`].

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use livecheck_wire::{CheckResult, JudgeRequest, JudgeVerdict, Mode, Outcome};
use tokio::sync::Semaphore;

use crate::alerts;
use crate::backend::TurnKey;
use crate::ids;
use crate::server::App;
use crate::store::{self, PendingCheck, Store};

pub const NO_KEY_REASON: &str =
    "The judge had no key for this check: the sidecar restarted before judging it.";
const BATCH: i64 = 64;

/// Judges pending checks until the app stops; woken early when a report brought new ones.
pub async fn judge_loop(app: Arc<App>) {
    let Some(store) = app.store().cloned() else {
        return;
    };
    // Background checks take at most half the judge's slots, so blocking checks keep theirs.
    let slots = Arc::new(Semaphore::new((app.settings().max_concurrent / 2).max(1)));
    let in_flight: Arc<Mutex<HashSet<(String, String)>>> = Arc::default();
    let mut stop = app.stopped();
    loop {
        match store.pending(BATCH).await {
            Ok(checks) => {
                for check in checks {
                    let id = (check.turn_id.clone(), check.name.clone());
                    if !in_flight
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(id.clone())
                    {
                        continue;
                    }
                    let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
                        return;
                    };
                    let app = Arc::clone(&app);
                    let store = store.clone();
                    let in_flight = Arc::clone(&in_flight);
                    tokio::spawn(async move {
                        judge_one(&app, &store, check).await;
                        in_flight
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .remove(&id);
                        drop(slot);
                    });
                }
            }
            Err(e) => {
                tracing::warn!(
                    error = store::error_kind(&e),
                    "cannot read the pending checks"
                )
            }
        }
        tokio::select! {
            _ = app.pending_wake().notified() => {}
            _ = tokio::time::sleep(app.settings().timing.poll_every) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn judge_one(app: &Arc<App>, store: &Store, check: PendingCheck) {
    let Ok(req) = serde_json::from_str::<JudgeRequest>(&check.request) else {
        tracing::warn!(check = %check.name, "a pending check's request does not parse: dropped");
        if let Err(e) = store.drop_pending(&check.turn_id, &check.name).await {
            tracing::warn!(error = store::error_kind(&e), "cannot drop a pending check");
        }
        return;
    };
    let verdict = match app.turn_key(&check.turn_id, &check.name) {
        Some(key) => app.judge(&req, &key).await,
        None if app
            .settings()
            .models
            .backend_for(&req.judge_model)
            .is_some_and(|b| b.fallback_key.is_some()) =>
        {
            app.judge(&req, &TurnKey::default()).await
        }
        None => JudgeVerdict {
            outcome: Outcome::Errored,
            score: None,
            reason: NO_KEY_REASON.to_owned(),
            usage: Default::default(),
        },
    };
    let now = ids::now_ms();
    let result = CheckResult {
        name: check.name.clone(),
        stage: req.stage,
        kind: req.kind.clone(),
        mode: Mode::Background,
        attempt: 1,
        outcome: verdict.outcome,
        score: verdict.score,
        reason: verdict.reason,
        judge_model: Some(req.judge_model.clone()),
        passed_on_error: false,
        created_at_ms: u64::try_from(now).unwrap_or(0),
        alert: check.alert,
        tool: None,
        call: None,
    };
    match store
        .store_background(&check.turn_id, &result, &app.webhook_urls(), now)
        .await
    {
        Ok(stored) => {
            app.forget_turn_key(&check.turn_id, &check.name);
            app.dropped().note(0, stored.dropped_events);
            tracing::info!(
                check = %check.name,
                outcome = store::outcome_str(result.outcome),
                stored = stored.stored,
                "background check recorded"
            );
            if stored.events > 0 {
                app.events_wake().notify_one();
            }
            if let Some(alert) = stored.alert {
                alerts::evaluate(app, store, vec![alert]).await;
            }
        }
        Err(e) => tracing::warn!(
            error = store::error_kind(&e),
            check = %check.name,
            "cannot store a background result; tried again later"
        ),
    }
}
