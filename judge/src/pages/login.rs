//! `GET /ui/login` (the form), `POST /ui/login` (the token in, a session cookie out) and
//! `POST /ui/logout`. A wrong token gets one sentence, whatever was wrong with it. Sessions live in
//! the results store ([`session`]): without a store there is no login, and when the store fails the
//! answer is 503, never a way in.

use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use super::error::{PageError, NO_STORE, OFF};
use super::html::Html;
use super::page;
use super::session::{
    self, Access, Refusal, LOGIN_COOKIE, LOGIN_LIFETIME, SESSION_COOKIE, SESSION_LIFETIME,
};
use crate::app::App;
use crate::auth;
use crate::store::StoreError;

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

pub async fn form(State(app): State<Arc<App>>, headers: HeaderMap) -> Result<Response, PageError> {
    match operator(&app, &headers).await {
        Ok(_) => Ok(Redirect::to("/ui/agents").into_response()),
        Err(refusal @ (Refusal::Off | Refusal::NoStore | Refusal::StoreDown)) => {
            Err(PageError::Refused(refusal))
        }
        Err(Refusal::WrongToken | Refusal::LogIn) => login_page(StatusCode::OK, None),
    }
}

/// The form with a fresh login cookie; `problem` above it when the last try failed.
fn login_page(status: StatusCode, problem: Option<&'static str>) -> Result<Response, PageError> {
    let Some(nonce) = session::random_token() else {
        return Err(PageError::Message(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Log in",
            NO_RANDOMNESS,
        ));
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
    Ok(response)
}

pub async fn submit(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Result<Response, PageError> {
    let Some(token) = app.settings().api_token.as_ref() else {
        return Err(PageError::Message(
            StatusCode::SERVICE_UNAVAILABLE,
            "Log in",
            OFF,
        ));
    };
    let Some(store) = app.store() else {
        return Err(PageError::Message(
            StatusCode::SERVICE_UNAVAILABLE,
            "Log in",
            NO_STORE,
        ));
    };
    let Ok(Form(form)) = form else {
        return Err(PageError::Message(
            StatusCode::BAD_REQUEST,
            "Log in",
            FORGED,
        ));
    };
    let cookie = session::cookie(&headers, LOGIN_COOKIE).unwrap_or_default();
    if !session::same_origin(&headers) || cookie.is_empty() || !session::same(cookie, &form.csrf) {
        tracing::warn!("refused a login form: not from this page");
        return Err(PageError::Message(StatusCode::FORBIDDEN, "Log in", FORGED));
    }
    if !auth::same_token(token, form.token.as_bytes()) {
        tracing::warn!("refused a login: not the operator token");
        return login_page(StatusCode::UNAUTHORIZED, Some("That token is not valid."));
    }
    let opened = app
        .sessions()
        .open(store)
        .await
        .map_err(|error: StoreError| PageError::FormStoreDown {
            title: "Log in",
            what: "a login",
            error: error.into(),
        })?;
    let Some((id, _csrf)) = opened else {
        return Err(PageError::Message(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Log in",
            NO_RANDOMNESS,
        ));
    };
    tracing::info!("operator logged in to the pages");
    let mut response = Redirect::to("/ui/agents").into_response();
    let h = response.headers_mut();
    h.append(
        header::SET_COOKIE,
        session::set_cookie(SESSION_COOKIE, Some(&id), app.sessions().lifetime()),
    );
    h.append(
        header::SET_COOKIE,
        session::set_cookie(LOGIN_COOKIE, None, LOGIN_LIFETIME),
    );
    Ok(response)
}

pub async fn logout(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    form: Result<Form<LogoutForm>, FormRejection>,
) -> Result<Response, PageError> {
    let Some(store) = app.store() else {
        return Err(PageError::Message(
            StatusCode::SERVICE_UNAVAILABLE,
            "Log out",
            NO_STORE,
        ));
    };
    let store_down = |error: StoreError| PageError::FormStoreDown {
        title: "Log out",
        what: "a logout",
        error: error.into(),
    };
    let id = session::cookie(&headers, SESSION_COOKIE).unwrap_or_default();
    let live = if session::same_origin(&headers) {
        app.sessions().csrf(store, id).await.map_err(store_down)?
    } else {
        None
    };
    let genuine =
        matches!((&live, &form), (Some(csrf), Ok(Form(f))) if session::same(csrf, &f.csrf));
    if !genuine {
        tracing::warn!("refused a logout form: not from this page");
        return Err(PageError::Message(StatusCode::FORBIDDEN, "Log out", FORGED));
    }
    app.sessions().close(store, id).await.map_err(store_down)?;
    let mut response = Redirect::to("/ui/login").into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        session::set_cookie(SESSION_COOKIE, None, SESSION_LIFETIME),
    );
    Ok(response)
}

async fn operator(app: &App, headers: &HeaderMap) -> Result<Access, Refusal> {
    let token = app.settings().api_token.as_ref();
    session::operator(token, app.sessions(), app.store(), headers).await
}

/// The operator's access, or the refusal.
pub async fn guard(app: &App, headers: &HeaderMap) -> Result<Access, PageError> {
    operator(app, headers).await.map_err(PageError::Refused)
}
