//! Who may see the pages: the operator token (`[api] token_env`) as `Authorization: Bearer`, or a
//! session from the login form. The session cookie holds a random 256-bit id and nothing else; the
//! sidecar keeps only its SHA-256 with the session's CSRF token and expiry, in memory (a restart
//! logs everyone out; sessions are not shared between replicas). The token itself is never in a
//! cookie, a page or a URL.
//!
//! Forgery: every form that changes something (login, logout) is a POST that must come from this
//! origin (`Origin` / `Sec-Fetch-Site`, when the browser sends them) and carry a CSRF token: the
//! session's own for logout, and for login (no session yet) the value of a short-lived login cookie
//! the form was served with (double submit). Cookies are `HttpOnly; Secure; SameSite=Strict;
//! Path=/` with the `__Host-` prefix; browsers keep `Secure` cookies from `http://127.0.0.1` and
//! `http://localhost` (secure contexts), and anywhere else the pages must be served over HTTPS.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::auth;
use crate::config::Secret;

pub const SESSION_COOKIE: &str = "__Host-livecheck-session";
pub const LOGIN_COOKIE: &str = "__Host-livecheck-login";
/// How long a session lasts from login.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// How long a login form may wait before it is sent.
pub const LOGIN_LIFETIME: Duration = Duration::from_secs(600);
/// Sessions kept at most; past that the one closest to expiry goes.
const MAX_SESSIONS: usize = 256;

/// Live sessions by the SHA-256 of their id.
#[derive(Default)]
pub struct Sessions {
    live: Mutex<HashMap<[u8; 32], Session>>,
}

#[derive(Clone)]
struct Session {
    csrf: String,
    expires: Instant,
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
}

/// 32 random bytes as hex, or `None` when the OS has no randomness to give (then no session).
pub fn random_token() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// Whether two tokens are equal, in constant time for equal lengths.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

impl Sessions {
    /// A new session: (its id for the cookie, its CSRF token); `None` without randomness.
    pub fn open(&self) -> Option<(String, String)> {
        let id = random_token()?;
        let csrf = random_token()?;
        let now = Instant::now();
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|_, s| s.expires > now);
        if live.len() >= MAX_SESSIONS {
            if let Some(oldest) = live.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| *k) {
                live.remove(&oldest);
            }
        }
        live.insert(
            digest(&id),
            Session {
                csrf: csrf.clone(),
                expires: now + SESSION_LIFETIME,
            },
        );
        Some((id, csrf))
    }

    /// The CSRF token of a live session.
    pub fn csrf(&self, id: &str) -> Option<String> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let key = digest(id);
        match live.get(&key) {
            Some(s) if s.expires > Instant::now() => Some(s.csrf.clone()),
            Some(_) => {
                live.remove(&key);
                None
            }
            None => None,
        }
    }

    pub fn close(&self, id: &str) {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&digest(id));
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
/// even with a session), else a live session.
pub fn operator(
    token: Option<&Secret>,
    sessions: &Sessions,
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
    cookie(headers, SESSION_COOKIE)
        .and_then(|id| sessions.csrf(id))
        .map(|csrf| Access::Session { csrf })
        .ok_or(Refusal::LogIn)
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
    fn a_session_is_found_by_its_id_only_and_ends_on_close() {
        let sessions = Sessions::default();
        let (id, csrf) = sessions.open().unwrap();
        assert_eq!(id.len(), 64);
        assert_eq!(sessions.csrf(&id), Some(csrf.clone()));
        assert_ne!(csrf, id);
        assert_eq!(sessions.csrf(&id[..63]), None);
        sessions.close(&id);
        assert_eq!(sessions.csrf(&id), None);
    }

    #[test]
    fn sessions_are_bounded() {
        let sessions = Sessions::default();
        let first = sessions.open().unwrap().0;
        for _ in 0..MAX_SESSIONS {
            sessions.open().unwrap();
        }
        assert_eq!(sessions.csrf(&first), None);
        assert_eq!(sessions.live.lock().unwrap().len(), MAX_SESSIONS);
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
