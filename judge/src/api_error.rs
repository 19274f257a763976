//! The one error of the sidecar's JSON routes (the filter's callouts and the operator API): each
//! refusal's status, headers and `{"error": "…"}` body in one place, and store errors redacted here:
//! a database error's message can quote values, so it is logged by its kind only and answered with
//! one fixed sentence. No message quotes a request.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::store::{StoreError, StoreFailure};

#[derive(Debug)]
pub enum ApiError {
    /// 400: what is wrong with the request, naming a field or a place, never quoting it.
    BadRequest(String),
    /// 401 with `WWW-Authenticate: Bearer`: the operator token is missing or wrong.
    NeedsOperatorToken,
    /// 404.
    NotFound(&'static str),
    /// 503: no operator token is configured, so the operator API is off (never open).
    NoOperatorToken,
    /// 503: a judge-only sidecar (no results store).
    NoStore,
    /// 503: the results store failed while doing what the first field says.
    StoreDown(&'static str, StoreFailure),
}

impl ApiError {
    /// The store failed while doing `what`: for `map_err`.
    pub fn store(what: &'static str) -> impl FnOnce(StoreError) -> Self {
        move |e| Self::StoreDown(what, e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, message) = match &self {
            Self::BadRequest(problem) => (StatusCode::BAD_REQUEST, problem.as_str()),
            Self::NeedsOperatorToken => {
                (StatusCode::UNAUTHORIZED, "a valid operator token is needed")
            }
            Self::NotFound(what) => (StatusCode::NOT_FOUND, *what),
            Self::NoOperatorToken => (
                StatusCode::SERVICE_UNAVAILABLE,
                "no operator token configured",
            ),
            Self::NoStore => (
                StatusCode::SERVICE_UNAVAILABLE,
                "this sidecar runs without a results store",
            ),
            Self::StoreDown(what, e) => {
                tracing::warn!(
                    error = %e,
                    what = *what,
                    "results store unavailable"
                );
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the results store is unavailable",
                )
            }
        };
        let body = Json(json!({ "error": message }));
        match self {
            Self::NeedsOperatorToken => {
                (status, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
            }
            _ => (status, body).into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parts(e: ApiError) -> (u16, Option<String>, String) {
        let response = e.into_response();
        let status = response.status().as_u16();
        let challenge = response
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .map(|v| v.to_str().unwrap_or_default().to_owned());
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        (status, challenge, body)
    }

    #[tokio::test]
    async fn a_store_error_is_answered_without_its_message() {
        let e = StoreError::Protocol("value 'sk-secret' in row".into());
        let (status, _, body) = parts(ApiError::store("reading a turn")(e)).await;
        assert_eq!(status, 503);
        assert_eq!(body, r#"{"error":"the results store is unavailable"}"#);
    }

    #[tokio::test]
    async fn a_missing_operator_token_is_a_bearer_challenge() {
        let (status, challenge, body) = parts(ApiError::NeedsOperatorToken).await;
        assert_eq!((status, challenge.as_deref()), (401, Some("Bearer")));
        assert_eq!(body, r#"{"error":"a valid operator token is needed"}"#);
        let (status, challenge, _) = parts(ApiError::NotFound("no stored turn has this id")).await;
        assert_eq!((status, challenge), (404, None));
    }
}
