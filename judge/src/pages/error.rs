//! The one error of the operator pages' HTML handlers: each refusal's status, page and headers in
//! one place ([`PageError`]'s `IntoResponse`), so a handler returns `Err(…)` and never builds an
//! error page itself. A store error is logged by its kind only ([`crate::store::StoreFailure`]) and answered
//! with one fixed sentence.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::message;
use super::session::Refusal;
use crate::store::{StoreError, StoreFailure};

pub const OFF: &str =
    "The operator pages are off: no operator token is configured ([api] token_env).";
pub const NO_STORE: &str =
    "This sidecar runs without a results store: the pages and their login need one.";
const STORE_DOWN: &str = "The results store is unavailable.";

#[derive(Debug)]
pub enum PageError {
    /// A page that says one thing: its status, title and sentence.
    Message(StatusCode, &'static str, &'static str),
    /// The request is not the operator's.
    Refused(Refusal),
    /// The results store failed while a page was read.
    StoreDown(StoreFailure),
    /// The results store failed while the form `what` ("a login") of the page `title` was handled:
    /// nothing changed.
    FormStoreDown {
        title: &'static str,
        what: &'static str,
        error: StoreFailure,
    },
}

impl PageError {
    /// The store failed while a page was read: for `map_err`.
    pub fn store_down(e: StoreError) -> Self {
        Self::StoreDown(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        match self {
            Self::Message(status, title, text) => message(status, title, text),
            Self::Refused(refusal) => refused(refusal),
            Self::StoreDown(e) => {
                tracing::warn!(
                    error = %e,
                    "results store unavailable for a page"
                );
                message(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Operator pages",
                    "The results store is unavailable.",
                )
            }
            Self::FormStoreDown { title, what, error } => {
                tracing::warn!(
                    error = %error,
                    "refused {what}: the results store is unavailable"
                );
                message(StatusCode::SERVICE_UNAVAILABLE, title, STORE_DOWN)
            }
        }
    }
}

/// The answer to a request that is not the operator's.
fn refused(refusal: Refusal) -> Response {
    match refusal {
        Refusal::Off => message(StatusCode::SERVICE_UNAVAILABLE, "Operator pages", OFF),
        Refusal::WrongToken => {
            let mut response = message(
                StatusCode::UNAUTHORIZED,
                "Operator pages",
                "That token is not valid.",
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            response
        }
        Refusal::LogIn => Redirect::to("/ui/login").into_response(),
        Refusal::NoStore => message(StatusCode::SERVICE_UNAVAILABLE, "Operator pages", NO_STORE),
        Refusal::StoreDown => message(
            StatusCode::SERVICE_UNAVAILABLE,
            "Operator pages",
            STORE_DOWN,
        ),
    }
}
