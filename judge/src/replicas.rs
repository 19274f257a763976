//! This process as one replica among those sharing the results store: it joins with a fresh id at
//! start, renews its lease every third of `timing.replica_lease` (while the lease holds, the others
//! leave the work it claimed and the checks whose key it holds to it), and forgets the turn keys of
//! checks it no longer holds. A replica that stops renewing (killed, hung, cut off from the
//! database) is taken for gone when its lease runs out; a clean stop leaves at once
//! ([`App::leave`]).

use std::collections::HashSet;
use std::sync::Arc;

use crate::app::App;
use crate::ids;
use crate::store::{self, StoreError};

/// Registers this replica as alive for one lease; before it claims anything.
pub async fn join(app: &App) -> Result<(), StoreError> {
    renew(app).await?;
    tracing::info!(replica = %app.replica(), "joined the replicas sharing the results store");
    Ok(())
}

async fn renew(app: &App) -> Result<(), StoreError> {
    let Some(store) = app.store() else {
        return Ok(());
    };
    let now = ids::now_ms();
    let lease = i64::try_from(app.settings().timing.replica_lease.as_millis()).unwrap_or(i64::MAX);
    store
        .renew_replica(app.replica(), now, now.saturating_add(lease))
        .await
}

/// Renews the lease until the app stops; with each renewal, drops the keys of checks this replica
/// no longer holds (judged, erased, or taken over while it was taken for gone).
pub async fn lease_loop(app: Arc<App>) {
    let Some(store) = app.store().cloned() else {
        return;
    };
    let lease = app.settings().timing.replica_lease;
    let every = lease / 3;
    let mut stop = app.stopped();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if let Err(e) = renew(&app).await {
            tracing::warn!(
                error = store::error_kind(&e),
                "cannot renew this replica's lease: the others take its work if it runs out"
            );
            continue;
        }
        match store.keys_held(app.replica()).await {
            Ok(held) => app.retain_turn_keys(&held.into_iter().collect::<HashSet<_>>(), lease),
            Err(e) => tracing::warn!(
                error = store::error_kind(&e),
                "cannot read which checks' keys this replica holds"
            ),
        }
    }
}
