//! `GET /ui/login` (the form), `POST /ui/login` (the token in, a session cookie out) and
//! `POST /ui/logout`. A wrong token gets one sentence, whatever was wrong with it.

use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use super::html::Html;
use super::session::{
    self, Access, Refusal, LOGIN_COOKIE, LOGIN_LIFETIME, SESSION_COOKIE, SESSION_LIFETIME,
};
use super::{message, page};
use crate::auth;
use crate::server::App;

const OFF: &str = "The operator pages are off: no operator token is configured ([api] token_env).";
const FORGED: &str =
    "This form did not come from this page or has expired. Open the page again and retry.";
const NO_RANDOMNESS: &str = "No session can be started: the system has no randomness to give.";

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    csrf: String,
}

#[derive(Deserialize)]
pub struct LogoutForm {
    csrf: String,
}

pub async fn form(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    match session::operator(app.settings().api_token.as_ref(), app.sessions(), &headers) {
        Ok(_) => Redirect::to("/ui/agents").into_response(),
        Err(Refusal::Off) => message(StatusCode::SERVICE_UNAVAILABLE, "Log in", OFF),
        Err(_) => login_page(StatusCode::OK, None),
    }
}

/// The form with a fresh login cookie; `problem` above it when the last try failed.
fn login_page(status: StatusCode, problem: Option<&'static str>) -> Response {
    let Some(nonce) = session::random_token() else {
        return message(StatusCode::INTERNAL_SERVER_ERROR, "Log in", NO_RANDOMNESS);
    };
    let mut body = Html::new();
    if let Some(problem) = problem {
        body.raw("<p role=\"alert\" class=\"problem\">")
            .text(problem)
            .raw("</p>");
    }
    body.raw("<form method=\"post\" action=\"/ui/login\" class=\"login\">")
        .raw("<input type=\"hidden\" name=\"csrf\" value=\"")
        .text(&nonce)
        .raw("\"><label for=\"token\">Operator token</label>")
        .raw("<input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required>")
        .raw("<button type=\"submit\">Log in</button></form>");
    let mut response = page(status, "Log in", None, body);
    response.headers_mut().append(
        header::SET_COOKIE,
        session::set_cookie(LOGIN_COOKIE, Some(&nonce), LOGIN_LIFETIME),
    );
    response
}

pub async fn submit(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let Some(token) = app.settings().api_token.as_ref() else {
        return message(StatusCode::SERVICE_UNAVAILABLE, "Log in", OFF);
    };
    let Ok(Form(form)) = form else {
        return message(StatusCode::BAD_REQUEST, "Log in", FORGED);
    };
    let cookie = session::cookie(&headers, LOGIN_COOKIE).unwrap_or_default();
    if !session::same_origin(&headers) || cookie.is_empty() || !session::same(cookie, &form.csrf) {
        tracing::warn!("refused a login form: not from this page");
        return message(StatusCode::FORBIDDEN, "Log in", FORGED);
    }
    if !auth::same_token(token, form.token.as_bytes()) {
        tracing::warn!("refused a login: not the operator token");
        return login_page(StatusCode::UNAUTHORIZED, Some("That token is not valid."));
    }
    let Some((id, _csrf)) = app.sessions().open() else {
        return message(StatusCode::INTERNAL_SERVER_ERROR, "Log in", NO_RANDOMNESS);
    };
    tracing::info!("operator logged in to the pages");
    let mut response = Redirect::to("/ui/agents").into_response();
    let h = response.headers_mut();
    h.append(
        header::SET_COOKIE,
        session::set_cookie(SESSION_COOKIE, Some(&id), SESSION_LIFETIME),
    );
    h.append(
        header::SET_COOKIE,
        session::set_cookie(LOGIN_COOKIE, None, LOGIN_LIFETIME),
    );
    response
}

pub async fn logout(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    form: Result<Form<LogoutForm>, FormRejection>,
) -> Response {
    let id = session::cookie(&headers, SESSION_COOKIE).unwrap_or_default();
    let live = app.sessions().csrf(id);
    let genuine = session::same_origin(&headers)
        && matches!((&live, &form), (Some(csrf), Ok(Form(f))) if session::same(csrf, &f.csrf));
    if !genuine {
        tracing::warn!("refused a logout form: not from this page");
        return message(StatusCode::FORBIDDEN, "Log out", FORGED);
    }
    app.sessions().close(id);
    let mut response = Redirect::to("/ui/login").into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        session::set_cookie(SESSION_COOKIE, None, SESSION_LIFETIME),
    );
    response
}

/// The answer to a request that is not the operator's.
pub fn refused(refusal: Refusal) -> Response {
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
    }
}

/// The operator's access, or the response that refuses the request.
pub fn guard(app: &App, headers: &HeaderMap) -> Result<Access, Box<Response>> {
    session::operator(app.settings().api_token.as_ref(), app.sessions(), headers)
        .map_err(|r| Box::new(refused(r)))
}
