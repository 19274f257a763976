//! Who may call what. The filter's callouts (`/v1/judge`, `/v1/tool-check`, `/v1/retry`,
//! `/v1/results`) carry the filter token in `x-livecheck-token` (`[filter] token_env`); the operator
//! API takes its own token as `Authorization: Bearer` (`[api] token_env`, checked in [`crate::api`]).
//! Neither token opens the other's routes, and the filter token is read from that one header only: a
//! callout's `authorization` and `x-api-key` are the turn's key, forwarded to the judge model.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use livecheck_wire::FILTER_TOKEN_HEADER;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::Secret;

/// Whether `given` is the token. The SHA-256 digests of both are compared in constant time, so the
/// time taken shows neither how much of the token matched nor its length.
pub fn same_token(token: &Secret, given: &[u8]) -> bool {
    let expected = Sha256::digest(token.expose().as_bytes());
    let given = Sha256::digest(given);
    expected.ct_eq(&given).into()
}

/// The token of an `Authorization: Bearer …` header (the operator's), if the request has one.
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
}

/// Middleware of the filter's routes: without a configured token every caller passes (the config
/// allows that on loopback only); with one, a request without it is answered 401 before its body
/// is read.
pub async fn filter_token(
    State(token): State<Option<Secret>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = token else {
        return next.run(request).await;
    };
    let given = request.headers().get(FILTER_TOKEN_HEADER);
    if given.is_some_and(|v| same_token(&token, v.as_bytes())) {
        return next.run(request).await;
    }
    // The path is one of the routes this layer guards; never the header's value.
    tracing::warn!(
        path = request.uri().path(),
        header = if given.is_some() { "wrong" } else { "missing" },
        "refused a callout without the filter token"
    );
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({ "error": "a valid filter token is needed" })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_itself_is_the_same_token() {
        let token = Secret::new("filter-token-0123456789");
        assert!(same_token(&token, b"filter-token-0123456789"));
        for other in [
            &b""[..],
            b"filter-token-012345678",
            b"filter-token-0123456780",
            b"filter-token-01234567890",
            b"Filter-token-0123456789",
        ] {
            assert!(!same_token(&token, other), "{other:?}");
        }
    }
}
