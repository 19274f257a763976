//! Who hears of failed checks: alert notifications (`[alerts]`: Slack, SMTP) and the webhooks that
//! receive `response.check_failed` events (`[[webhooks]]`), each with its secret from an env var.

use reqwest::Url;

use super::file::{RawAlerts, RawWebhook, SmtpTls};
use super::secret::{secret_from, Secret};

#[derive(Debug, Clone, Default)]
pub struct AlertSettings {
    /// A Slack incoming webhook URL (`[alerts] slack_webhook_url_env`).
    pub slack_webhook_url: Option<Secret>,
    pub smtp: Option<SmtpSettings>,
}

#[derive(Debug, Clone)]
pub struct SmtpSettings {
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    pub from: String,
    pub to: Vec<String>,
    pub username: Option<String>,
    pub password: Option<Secret>,
}

/// A webhook receiver of `response.check_failed` events.
#[derive(Debug, Clone)]
pub struct Webhook {
    pub url: Url,
    /// Standard Webhooks style: `whsec_<base64>` is the base64 key, anything else the key's bytes.
    pub secret: Secret,
}

pub(super) fn compile_alerts(
    raw: RawAlerts,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> AlertSettings {
    let slack_webhook_url = raw.slack_webhook_url_env.and_then(|var| {
        let url = secret_from(env, &var, "alerts: slack_webhook_url_env", problems)?;
        match Url::parse(url.expose()) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => Some(url),
            _ => {
                problems.push(format!("alerts: {var} does not hold an http(s) URL"));
                None
            }
        }
    });
    let smtp = raw.smtp.and_then(|smtp| {
        let tls = smtp.tls.unwrap_or(SmtpTls::Starttls);
        let loopback = smtp.host == "localhost"
            || smtp
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        let mut ok = true;
        if smtp.host.trim().is_empty() {
            problems.push("alerts.smtp: host is empty".to_owned());
            ok = false;
        }
        if tls == SmtpTls::None && !loopback {
            problems.push(
                "alerts.smtp: tls = \"none\" is only allowed for a relay on loopback".to_owned(),
            );
            ok = false;
        }
        if !smtp.from.contains('@') {
            problems.push("alerts.smtp: from is not a mail address".to_owned());
            ok = false;
        }
        if smtp.to.is_empty() {
            problems.push("alerts.smtp: to lists no address".to_owned());
            ok = false;
        }
        for (i, to) in smtp.to.iter().enumerate() {
            if !to.contains('@') {
                problems.push(format!("alerts.smtp: to[{i}] is not a mail address"));
                ok = false;
            }
        }
        let password = match (&smtp.username, smtp.password_env) {
            (Some(_), Some(var)) => secret_from(env, &var, "alerts.smtp: password_env", problems),
            (None, None) => None,
            _ => {
                problems.push("alerts.smtp: username and password_env go together".to_owned());
                ok = false;
                None
            }
        };
        ok.then(|| SmtpSettings {
            port: smtp.port.unwrap_or(match tls {
                SmtpTls::Starttls => 587,
                SmtpTls::Tls => 465,
                SmtpTls::None => 25,
            }),
            host: smtp.host,
            tls,
            from: smtp.from,
            to: smtp.to,
            username: smtp.username,
            password,
        })
    });
    AlertSettings {
        slack_webhook_url,
        smtp,
    }
}

pub(super) fn compile_webhooks(
    raw: Vec<RawWebhook>,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Vec<Webhook> {
    let mut hooks: Vec<Webhook> = Vec::new();
    for (i, w) in raw.into_iter().enumerate() {
        let at = format!("webhooks[{i}]");
        let url = match Url::parse(&w.url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => Some(u),
            _ => {
                problems.push(format!("{at}: url {:?} is not an http(s) URL", w.url));
                None
            }
        };
        let secret = secret_from(env, &w.secret_env, &format!("{at}: secret_env"), problems);
        if let (Some(url), Some(secret)) = (url, secret) {
            if hooks.iter().any(|h| h.url == url) {
                problems.push(format!("{at}: url {:?} is listed twice", w.url));
                continue;
            }
            hooks.push(Webhook { url, secret });
        }
    }
    hooks
}
