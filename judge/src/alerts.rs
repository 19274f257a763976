//! Alerts: after new results of a check that carries `alert {failure_rate, over_last}`, its latest
//! `over_last` results of every version of the agent are counted; at or above the rate, one
//! notification goes out, at most once per (agent, check) per UTC day. The day is claimed in the store
//! (one atomic upsert), so a burst of reports, several sidecars on one PostgreSQL and restarts all
//! notify once. A notification names the agent, the check and the counts, never a text or a reason.
//! Channels: a Slack incoming webhook and SMTP mail; failures are logged (without content) and retried.

use std::sync::Arc;
use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde_json::json;

use crate::app::App;
use crate::config::{AlertSettings, SmtpSettings, SmtpTls};
use crate::ids;
use crate::store::{self, AlertCheck, Store};

const SEND_TIMEOUT: Duration = Duration::from_secs(15);

/// What a fired alert says.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub agent: String,
    pub check: String,
    pub not_passed: i64,
    pub over_last: i64,
    pub failure_rate: f64,
}

impl Notification {
    pub fn subject(&self) -> String {
        format!("Live check failing: {} on agent {}", self.check, self.agent)
    }

    pub fn text(&self) -> String {
        format!(
            "Live check failing: check \"{}\" of agent \"{}\": {} of its last {} results did not pass \
             (alert at {}%).",
            self.check,
            self.agent,
            self.not_passed,
            self.over_last,
            (self.failure_rate * 100.0).round()
        )
    }
}

/// Counts the checks' latest results and fires the ones over their rate that have not fired today.
/// Returns what fired; sending happens in the background.
pub async fn evaluate(app: &Arc<App>, store: &Store, checks: Vec<AlertCheck>) -> Vec<Notification> {
    let mut fired = Vec::new();
    for check in checks {
        let over_last = check.alert.over_last.max(1);
        let (n, bad) = match store
            .latest_counts(&check.agent, &check.check, over_last)
            .await
        {
            Ok(counts) => counts,
            Err(e) => {
                tracing::warn!(error = store::error_kind(&e), agent = %check.agent, check = %check.check, "cannot count results for an alert");
                continue;
            }
        };
        if n < i64::from(over_last) || (bad as f64) < check.alert.failure_rate * (n as f64) {
            continue;
        }
        match store
            .claim_alert(&check.agent, &check.check, ids::now_ms())
            .await
        {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(error = store::error_kind(&e), agent = %check.agent, check = %check.check, "cannot claim an alert");
                continue;
            }
        }
        let note = Notification {
            agent: check.agent,
            check: check.check,
            not_passed: bad,
            over_last: n,
            failure_rate: check.alert.failure_rate,
        };
        tracing::warn!(agent = %note.agent, check = %note.check, not_passed = bad, over_last = n, "live check failing: alert fired");
        let sender = Arc::clone(app);
        let sent = note.clone();
        tokio::spawn(async move { send(&sender, &sent).await });
        fired.push(note);
    }
    fired
}

/// Sends to every configured channel, each retried a few times.
async fn send(app: &App, note: &Notification) {
    let settings: &AlertSettings = &app.settings().alerts;
    let timing = &app.settings().timing;
    if settings.slack_webhook_url.is_none() && settings.smtp.is_none() {
        tracing::warn!(agent = %note.agent, check = %note.check, "alert fired but no alert channel is configured");
    }
    if let Some(url) = &settings.slack_webhook_url {
        for attempt in 1..=timing.alert_attempts {
            let sent = app
                .client()
                .post(url.expose())
                .timeout(SEND_TIMEOUT)
                .header("content-type", "application/json")
                .body(json!({ "text": note.text() }).to_string())
                .send()
                .await;
            match sent {
                Ok(resp) if resp.status().is_success() => {
                    tracing::info!(agent = %note.agent, check = %note.check, "alert sent to Slack");
                    break;
                }
                Ok(resp) => tracing::warn!(
                    attempt,
                    status = resp.status().as_u16(),
                    "alert to Slack failed"
                ),
                Err(_) => tracing::warn!(attempt, "alert to Slack failed: not reached"),
            }
            if attempt < timing.alert_attempts {
                tokio::time::sleep(timing.alert_retry).await;
            }
        }
    }
    if let Some(smtp) = &settings.smtp {
        for attempt in 1..=timing.alert_attempts {
            match mail(smtp, note).await {
                Ok(()) => {
                    tracing::info!(agent = %note.agent, check = %note.check, "alert mailed");
                    break;
                }
                Err(why) => tracing::warn!(attempt, why, "alert mail failed"),
            }
            if attempt < timing.alert_attempts {
                tokio::time::sleep(timing.alert_retry).await;
            }
        }
    }
}

/// One mail to every address in `to`. The error says what kind of failure, never the content.
async fn mail(smtp: &SmtpSettings, note: &Notification) -> Result<(), &'static str> {
    let mut message = Message::builder()
        .from(smtp.from.parse().map_err(|_| "bad from address")?)
        .subject(note.subject())
        .header(ContentType::TEXT_PLAIN);
    for to in &smtp.to {
        message = message.to(to.parse().map_err(|_| "bad to address")?);
    }
    let message = message
        .body(note.text())
        .map_err(|_| "cannot build the mail")?;
    let builder = match smtp.tls {
        SmtpTls::Starttls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&smtp.host)
            .map_err(|_| "cannot set up STARTTLS")?,
        SmtpTls::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&smtp.host)
            .map_err(|_| "cannot set up TLS")?,
        SmtpTls::None => AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&smtp.host),
    };
    let mut builder = builder.port(smtp.port).timeout(Some(SEND_TIMEOUT));
    if let (Some(user), Some(password)) = (&smtp.username, &smtp.password) {
        builder = builder.credentials(Credentials::new(user.clone(), password.expose().to_owned()));
    }
    let transport = builder.build();
    match transport.send(message).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_permanent() => Err("refused by the server"),
        Err(e) if e.is_transient() => Err("temporarily refused by the server"),
        Err(_) => Err("the server was not reached or the connection failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_names_agent_check_and_counts() {
        let note = Notification {
            agent: "orders".into(),
            check: "polite".into(),
            not_passed: 16,
            over_last: 50,
            failure_rate: 0.3,
        };
        assert_eq!(
            note.text(),
            "Live check failing: check \"polite\" of agent \"orders\": 16 of its last 50 results did not pass (alert at 30%)."
        );
    }
}
