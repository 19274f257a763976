//! The operator pages under `/ui`: agents, an agent's checks with their pass / fail / error rates
//! over a chosen window and a chart over time, a check's recent results that did not pass with
//! links to their turns, a turn's results, and alert state. Behind the operator token ([`session`]).
//!
//! What a page shows of a turn: ids, outcomes, the fixed fields of a result and a reason only when
//! it is one of the fixed sentences ([`reason`]); a judge's own sentence may quote the turn and is
//! never shown, nor a tool's name (the model writes it). Names come from the reports (the filter's
//! configuration) and are escaped like every other value ([`html`]). Every response carries a
//! Content-Security-Policy without any script and with styles from `/ui/style.css` only. A handler
//! that refuses returns an [`error::PageError`], whose one `IntoResponse` renders the error page.

mod chart;
mod error;
mod html;
mod login;
mod reason;
pub mod session;
mod views;

use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::app::App;
use html::Html;
use session::Access;

pub use session::Sessions;

/// No script at all, styles and images from this origin only, forms posting here only, never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
     form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const STYLE: &str = include_str!("style.css");

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/agents") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/agents") }))
        .route("/ui/style.css", get(style))
        .route("/ui/login", get(login::form).post(login::submit))
        .route("/ui/logout", post(login::logout))
        .route("/ui/agents", get(views::agents))
        .route("/ui/agents/{agent}", get(views::agent))
        .route("/ui/agents/{agent}/checks/{check}", get(views::check))
        .route("/ui/turns/{id}", get(views::turn))
        .layer(middleware::map_response(security_headers))
}

/// The headers of every response under `/ui`.
async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

/// A whole page: the banner (with a logout form for a session), the title as `<h1>`, the body.
fn page(status: StatusCode, title: &str, access: Option<&Access>, body: Html) -> Response {
    let mut h = Html::new();
    h.raw("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>")
        .text(title)
        .raw(" · livecheck</title><link rel=\"stylesheet\" href=\"/ui/style.css\"></head><body>")
        .raw("<header><a class=\"brand\" href=\"/ui/agents\">livecheck</a>");
    if let Some(access) = access {
        h.raw("<nav aria-label=\"Site\"><a href=\"/ui/agents\">Agents</a>");
        if let Access::Session { csrf } = access {
            h.raw("<form method=\"post\" action=\"/ui/logout\" class=\"logout\">")
                .raw("<input type=\"hidden\" name=\"csrf\" value=\"")
                .text(csrf)
                .raw("\"><button type=\"submit\">Log out</button></form>");
        }
        h.raw("</nav>");
    }
    h.raw("</header><main><h1>")
        .text(title)
        .raw("</h1>")
        .push(body)
        .raw("</main></body></html>\n");
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        h.into_string(),
    )
        .into_response()
}

/// A page that says one thing (an error).
fn message(status: StatusCode, title: &str, text: &str) -> Response {
    let mut body = Html::new();
    body.raw("<p role=\"alert\">").text(text).raw("</p>");
    page(status, title, None, body)
}
