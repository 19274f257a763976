//! Who may see the pages: the operator token (`[api] token_env`) as `Authorization: Bearer`, or a
//! session from the login form. The session cookie holds a random 256-bit id and nothing else; the
//! results store keeps only its SHA-256 with the session's CSRF token and expiry
//! ([`crate::store::sessions`]), so every replica on the database knows a login made on any of them,
//! a logout on any ends it everywhere, and a restart logs no one out. A sidecar without a store (a
//! judge-only app) has no sessions: only the bearer token gets in, and its pages say there is no
//! store. When the store cannot say whether a session is live, the request is refused (503), never
//! let in. The token itself is never in a cookie, a page or a URL.
//!
//! Forgery: every form that changes something (login, logout) is a POST that must come from this
//! origin (`Origin` / `Sec-Fetch-Site`, when the browser sends them) and carry a CSRF token: the
//! session's own for logout, and for login (no session yet) the value of a short-lived login cookie
//! the form was served with (double submit). Cookies are `HttpOnly; Secure; SameSite=Strict;
//! Path=/` with the `__Host-` prefix; browsers keep `Secure` cookies from `http://127.0.0.1` and
//! `http://localhost` (secure contexts), and anywhere else the pages must be served over HTTPS.

use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderValue};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::auth;
use crate::config::Secret;
use crate::ids;
use crate::store::{self, Store, StoreError};

pub const SESSION_COOKIE: &str = "__Host-livecheck-session";
pub const LOGIN_COOKIE: &str = "__Host-livecheck-login";
/// How long a session lasts from login.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// How long a login form may wait before it is sent.
pub const LOGIN_LIFETIME: Duration = Duration::from_secs(600);

/// The pages' login sessions: what one is (a random id, of which the results store sees only the
/// SHA-256, a CSRF token, a lifetime). The store keeps them, shared by the replicas; nothing of a
/// session is kept here.
pub struct Sessions {
    lifetime: Duration,
}

impl Default for Sessions {
    fn default() -> Self {
        Self {
            lifetime: SESSION_LIFETIME,
        }
    }
}

/// How a request was let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// The bearer token: no cookie, no forms to protect.
    Bearer,
    /// A browser session; its CSRF token goes into the page's forms.
    Session { csrf: String },
}

/// Why a request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No operator token is configured: the pages are off.
    Off,
    /// A bearer token that is not the operator token.
    WrongToken,
    /// Neither a token nor a live session: log in.
    LogIn,
    /// No bearer token, and no store to keep sessions in (a judge-only app): no login possible.
    NoStore,
    /// The store could not say whether the session is live.
    StoreDown,
}

/// 32 random bytes as hex, or `None` when the OS has no randomness to give (then no session).
pub fn random_token() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// What the store keeps of a session id: its SHA-256, as hex.
pub fn digest(id: &str) -> String {
    Sha256::digest(id.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether two tokens are equal, in constant time for equal lengths.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

impl Sessions {
    /// How long a session lasts from login (the cookie's `Max-Age` too).
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// A new session, kept in `store` for its lifetime: (its id for the cookie, its CSRF token);
    /// `None` without randomness.
    pub async fn open(&self, store: &Store) -> Result<Option<(String, String)>, StoreError> {
        let (Some(id), Some(csrf)) = (random_token(), random_token()) else {
            return Ok(None);
        };
        let now = ids::now_ms();
        let lifetime = i64::try_from(self.lifetime.as_millis()).unwrap_or(i64::MAX);
        store
            .open_session(&digest(&id), &csrf, now.saturating_add(lifetime), now)
            .await?;
        Ok(Some((id, csrf)))
    }

    /// The CSRF token of a live session.
    pub async fn csrf(&self, store: &Store, id: &str) -> Result<Option<String>, StoreError> {
        store.session_csrf(&digest(id), ids::now_ms()).await
    }

    /// Ends a session, on every replica.
    pub async fn close(&self, store: &Store, id: &str) -> Result<(), StoreError> {
        store.close_session(&digest(id)).await
    }
}

/// A cookie's value from the request's `Cookie` headers.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// `Set-Cookie` for a cookie of these pages (`None`: one that clears it).
pub fn set_cookie(name: &str, value: Option<&str>, lifetime: Duration) -> HeaderValue {
    let line = match value {
        Some(v) => format!(
            "{name}={v}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={}",
            lifetime.as_secs()
        ),
        None => format!("{name}=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0"),
    };
    // Names are constants and values hex: always a valid header value.
    HeaderValue::from_str(&line).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Whether a request is the operator's: the bearer token when one is sent (a wrong one is refused,
/// even with a session), else a live session in `store`.
pub async fn operator(
    token: Option<&Secret>,
    sessions: &Sessions,
    store: Option<&Store>,
    headers: &HeaderMap,
) -> Result<Access, Refusal> {
    let Some(token) = token else {
        return Err(Refusal::Off);
    };
    if let Some(given) = auth::bearer(headers) {
        return if auth::same_token(token, given.as_bytes()) {
            Ok(Access::Bearer)
        } else {
            Err(Refusal::WrongToken)
        };
    }
    let Some(store) = store else {
        return Err(Refusal::NoStore);
    };
    let Some(id) = cookie(headers, SESSION_COOKIE) else {
        return Err(Refusal::LogIn);
    };
    match sessions.csrf(store, id).await {
        Ok(Some(csrf)) => Ok(Access::Session { csrf }),
        Ok(None) => Err(Refusal::LogIn),
        Err(e) => {
            tracing::warn!(
                error = store::error_kind(&e),
                "refused a page: the results store cannot say whether its session is live"
            );
            Err(Refusal::StoreDown)
        }
    }
}

/// Whether a form POST comes from this origin, as far as the browser says: `Sec-Fetch-Site` must
/// be `same-origin` (or `none`: typed by the user) and `Origin` must be this host when present.
/// Clients that send neither are not browsers, which forgery needs.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name: header::HeaderName| headers.get(name).map(|v| v.to_str().unwrap_or("\u{0}"));
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        if site != "same-origin" && site != "none" {
            return false;
        }
    }
    match text(header::ORIGIN) {
        None => true,
        Some(origin) => {
            let host = text(header::HOST).unwrap_or("\u{0}");
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(|o| o == host)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    #[test]
    fn the_store_sees_a_sessions_id_only_as_its_sha256() {
        let id = random_token().unwrap();
        assert_eq!(id.len(), 64);
        assert_ne!(random_token().unwrap(), id);
        let kept = digest(&id);
        assert_eq!(kept.len(), 64);
        assert_ne!(kept, id);
        assert_eq!(
            digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn cookies_are_read_by_exact_name() {
        let h = headers(&[
            ("cookie", "a=1; __Host-livecheck-session=abc"),
            ("cookie", "b=2"),
        ]);
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "b"), Some("2"));
        assert_eq!(cookie(&h, "__Host-livecheck"), None);
    }

    #[test]
    fn a_cross_site_post_is_not_same_origin() {
        assert!(same_origin(&headers(&[("host", "127.0.0.1:8181")])));
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:8181"),
            ("origin", "http://127.0.0.1:8181"),
            ("sec-fetch-site", "same-origin"),
        ])));
        for (origin, site) in [
            ("http://127.0.0.1:9999", "same-site"),
            ("http://127.0.0.1:9999", "same-origin"),
            ("null", "cross-site"),
            ("http://127.0.0.1:8181", "cross-site"),
        ] {
            let h = headers(&[
                ("host", "127.0.0.1:8181"),
                ("origin", origin),
                ("sec-fetch-site", site),
            ]);
            assert!(!same_origin(&h), "{origin} {site}");
        }
    }

    #[test]
    fn cookies_are_secure_http_only_and_strict() {
        let c = set_cookie(SESSION_COOKIE, Some("ab12"), SESSION_LIFETIME);
        assert_eq!(
            c.to_str().unwrap(),
            "__Host-livecheck-session=ab12; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=43200"
        );
    }
}
