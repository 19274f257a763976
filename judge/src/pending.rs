//! Background checks from turn reports: stored as pending checks in the report's transaction, judged
//! here on the sidecar's time with the judge path of `POST /v1/judge`, and stored as a result (mode
//! `background`, attempt 1), which deletes the pending check and its text.
//!
//! Several replicas share the pending checks: each check is claimed by one of them before it is
//! judged ([`crate::store`]'s claims), so it is judged once. The turn's key stays in the memory of
//! the replica that received the report (keyed by turn and check); while that replica is alive only
//! it claims the check. A check whose key is gone (its replica stopped or died first) is judged by
//! any replica without it when its backend has its own `api_key_env`, else recorded `errored` with
//! [`NO_KEY_REASON`]. A verdict is written until the store takes it (a database restart does not
//! make the judge be asked twice), and only by the replica that still holds the claim.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use livecheck_wire::{CheckResult, JudgeRequest, JudgeVerdict, Mode, Outcome};

use crate::alerts;
use crate::app::App;
use crate::backend::TurnKey;
use crate::ids;
use crate::store::{self, KeyHolder, PendingCheck, Store};

pub const NO_KEY_REASON: &str = "The judge had no key for this check: the sidecar replica that \
     received the turn stopped before judging it.";
const BATCH: i64 = 64;

/// Judges pending checks until the app stops; woken early when a report brought new ones.
pub async fn judge_loop(app: Arc<App>) {
    let Some(store) = app.store().cloned() else {
        return;
    };
    // Checks this replica claimed and is judging now: the store shows them claimed by a live
    // replica, so they are not offered again; this guards the time between a claim and its task.
    let in_flight: Arc<Mutex<HashSet<(String, String)>>> = Arc::default();
    let mut stop = app.stopped();
    loop {
        match store
            .claimable_checks(app.replica(), ids::now_ms(), BATCH)
            .await
        {
            Ok(checks) => {
                for check in checks {
                    let id = (check.turn_id.clone(), check.name.clone());
                    if in_flight
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .contains(&id)
                    {
                        continue;
                    }
                    // A slot first, then the claim: a replica never holds more checks than it can
                    // judge at once, so a keyless check stays free for a replica with room. A
                    // stopping replica claims nothing more.
                    let slot = tokio::select! {
                        slot = Arc::clone(app.background_slots()).acquire_owned() => slot,
                        _ = stop.changed() => return,
                    };
                    let Ok(slot) = slot else {
                        return;
                    };
                    if *stop.borrow() {
                        return;
                    }
                    match store
                        .claim_check(app.replica(), &check.turn_id, &check.name, ids::now_ms())
                        .await
                    {
                        Ok(true) => {}
                        Ok(false) => continue,
                        Err(e) => {
                            tracing::warn!(
                                error = store::error_kind(&e),
                                "cannot claim a pending check"
                            );
                            break;
                        }
                    }
                    in_flight
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(id.clone());
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

/// The key a claimed check is judged with: the turn's when this replica holds it; none when none
/// came (the backend's own, if it has one); the backend's own when the turn's is lost with its
/// replica (`None`: then the check cannot be judged).
fn key_for(app: &App, check: &PendingCheck, req: &JudgeRequest) -> Option<TurnKey> {
    let has_own_key = || {
        app.settings()
            .models
            .backend_for(&req.judge_model)
            .is_some_and(|b| b.fallback_key.is_some())
    };
    match check.key {
        KeyHolder::Here => app
            .turn_key(&check.turn_id, &check.name)
            .or_else(|| has_own_key().then(TurnKey::default)),
        KeyHolder::NoneCame => Some(TurnKey::default()),
        KeyHolder::Gone => has_own_key().then(TurnKey::default),
    }
}

async fn judge_one(app: &Arc<App>, store: &Store, check: PendingCheck) {
    let Ok(req) = serde_json::from_str::<JudgeRequest>(&check.request) else {
        tracing::warn!(check = %check.name, "a pending check's request does not parse: dropped");
        let dropped = app
            .persist("dropping a pending check", || {
                store.drop_pending(&check.turn_id, &check.name)
            })
            .await;
        if dropped.is_some() {
            app.forget_turn_key(&check.turn_id, &check.name);
        }
        return;
    };
    let verdict = match key_for(app, &check, &req) {
        Some(key) => app.judge(&req, &key).await,
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
    let webhooks = app.webhook_urls();
    let Some(stored) = app
        .persist("storing a background result", || {
            store.store_background(app.replica(), &check.turn_id, &result, &webhooks, now)
        })
        .await
    else {
        return;
    };
    app.forget_turn_key(&check.turn_id, &check.name);
    if stored.claim_lost {
        tracing::warn!(
            check = %check.name,
            "a background check was taken over by another replica (this one was taken for dead) \
             or its turn erased: its verdict here is not recorded"
        );
        return;
    }
    app.dropped().note(0, stored.dropped_events);
    tracing::info!(
        check = %check.name,
        outcome = result.outcome.as_str(),
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
