//! `response.check_failed` events to webhooks: written to the outbox in the transaction that stores
//! the result, delivered at least once by [`deliver_loop`], signed the Standard Webhooks way
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256 of
//! "{id}.{timestamp}.{body}">`) so a receiver can check the sender and refuse replays by the timestamp.
//! What an event says: [`crate::event_body`]. Logs name the event id and the webhook's host, never the body or the secret.

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::app::App;
use crate::config::{Secret, Webhook, EVENT_DELIVERY_TIMEOUT};
use crate::ids;
use crate::store::{self, OutboxEvent};

const BATCH: i64 = 50;

/// The signing key: a `whsec_` secret is base64 after the prefix (Standard Webhooks), anything else
/// is used as it is.
fn key(secret: &Secret) -> Vec<u8> {
    let text = secret.expose();
    text.strip_prefix("whsec_")
        .and_then(|b64| STANDARD.decode(b64).ok())
        .unwrap_or_else(|| text.as_bytes().to_vec())
}

/// `v1,<base64 HMAC-SHA256 over "{id}.{timestamp}.{body}">`.
pub fn signature(secret: &Secret, id: &str, timestamp: i64, body: &str) -> String {
    let mac = Hmac::<Sha256>::new_from_slice(&key(secret)).map(|mut mac| {
        mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
        mac.finalize().into_bytes()
    });
    match mac {
        Ok(bytes) => format!("v1,{}", STANDARD.encode(bytes)),
        // HMAC takes keys of any length; this arm is never taken.
        Err(_) => "v1,".to_owned(),
    }
}

/// The delay before attempt `attempts + 1`: the base doubled per attempt, capped.
fn backoff(base: Duration, max: Duration, attempts: i64) -> Duration {
    let doublings = u32::try_from(attempts.clamp(0, 30)).unwrap_or(30);
    base.saturating_mul(2u32.saturating_pow(doublings)).min(max)
}

/// Delivers due events until the app stops; woken early when a result queued one. Each event is
/// claimed first, so one replica delivers it; its outcome is written until the store takes it, so
/// a database restart does not send it again.
pub async fn deliver_loop(app: Arc<App>) {
    let Some(store) = app.store().cloned() else {
        return;
    };
    let mut stop = app.stopped();
    loop {
        let mut wait = app.settings().timing.poll_every;
        match store.claimable_events(ids::now_ms(), BATCH).await {
            Ok(due) => {
                let full = i64::try_from(due.len()).unwrap_or(0) >= BATCH;
                for event in due {
                    // A stopping replica claims nothing more.
                    if *stop.borrow() {
                        return;
                    }
                    match store
                        .claim_event(app.replica(), &event, ids::now_ms())
                        .await
                    {
                        Ok(true) => deliver(&app, &store, event).await,
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(error = store::error_kind(&e), "cannot claim an event");
                            break;
                        }
                    }
                }
                if full {
                    wait = Duration::ZERO;
                } else if let Ok(Some(next)) = store.next_event_due(ids::now_ms()).await {
                    let until = u64::try_from(next - ids::now_ms()).unwrap_or(0);
                    wait = wait.min(Duration::from_millis(until));
                }
            }
            Err(e) => tracing::warn!(
                error = store::error_kind(&e),
                "cannot read the event outbox"
            ),
        }
        tokio::select! {
            _ = app.events_wake().notified() => {}
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn deliver(app: &App, store: &store::Store, event: OutboxEvent) {
    let hook: Option<&Webhook> = app
        .settings()
        .webhooks
        .iter()
        .find(|w| w.url.as_str() == event.webhook);
    let host = reqwest::Url::parse(&event.webhook)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    let Some(hook) = hook else {
        tracing::warn!(event = %event.id, %host, "event for a webhook no longer configured: dropped");
        app.persist("dropping an event", || {
            store.remove_event(&event.id, &event.webhook)
        })
        .await;
        return;
    };
    let timestamp = ids::now_ms().div_euclid(1000);
    let sent = app
        .client()
        .post(hook.url.clone())
        .timeout(EVENT_DELIVERY_TIMEOUT)
        .header("content-type", "application/json")
        .header("webhook-id", &event.id)
        .header("webhook-timestamp", timestamp.to_string())
        .header(
            "webhook-signature",
            signature(&hook.secret, &event.id, timestamp, &event.body),
        )
        .body(event.body.clone())
        .send()
        .await;
    let status = match &sent {
        Ok(resp) => Some(resp.status().as_u16()),
        Err(_) => None,
    };
    let attempts = event.attempts + 1;
    let delivered = status.is_some_and(|s| (200..300).contains(&s));
    if delivered || attempts >= i64::from(app.settings().timing.event_attempts) {
        if delivered {
            tracing::info!(event = %event.id, %host, attempts, "event delivered");
        } else {
            tracing::warn!(event = %event.id, %host, attempts, status = status.unwrap_or(0), "event not delivered: given up");
        }
        app.persist("removing a delivered event", || {
            store.remove_event(&event.id, &event.webhook)
        })
        .await;
    } else {
        let timing = &app.settings().timing;
        let delay = backoff(
            timing.event_retry_base,
            timing.event_retry_max,
            attempts - 1,
        );
        tracing::info!(event = %event.id, %host, attempts, status = status.unwrap_or(0), retry_in_ms = delay.as_millis() as u64, "event delivery failed");
        let next = ids::now_ms() + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX / 2);
        app.persist("rescheduling an event", || {
            store.retry_event(&event.id, &event.webhook, attempts, next)
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_matches_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification.
        let secret = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let (base, max) = (Duration::from_secs(10), Duration::from_secs(900));
        assert_eq!(backoff(base, max, 0), Duration::from_secs(10));
        assert_eq!(backoff(base, max, 3), Duration::from_secs(80));
        assert_eq!(backoff(base, max, 40), max);
    }
}
