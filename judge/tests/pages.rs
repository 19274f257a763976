//! The operator pages (`/ui`) of a whole sidecar in process: who gets in (the bearer token, or a
//! session from the login form; a wrong token gets one sentence), forms refused without their CSRF
//! token or from another origin, the security headers on every response, names escaped wherever
//! they appear, and what the pages show of stored results (rates, failures with links to their
//! turns, alert state) and never (a judge's own sentence, a tool's name). The content test runs on
//! SQLite and on PostgreSQL.
//!
//! Sessions live in the results store: kept as the SHA-256 of their id only, bounded, ended on
//! logout (on SQLite and on PostgreSQL); shared by two sidecars on one database (a login on one, a
//! logout on the other); refused when the store cannot say (503), and impossible without a store.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::results::*;
use livecheck_judge::pages::{Sessions, CONTENT_SECURITY_POLICY};
use livecheck_judge::store::sessions::MAX_SESSIONS;
use livecheck_judge::store::Store;
use livecheck_wire::Outcome::{Errored, Failed, Passed};
use livecheck_wire::{CheckResult, Stage};

/// A browser-like client that follows no redirect and keeps cookies by hand.
struct Browser {
    base: String,
    client: reqwest::Client,
    cookies: Vec<(String, String)>,
}

struct Page {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Page {
    fn location(&self) -> &str {
        self.headers
            .get("location")
            .map_or("", |v| v.to_str().unwrap())
    }

    fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }

    /// The value of the form field `name` (`name="…" value="…"`).
    fn field(&self, name: &str) -> String {
        let at = self
            .body
            .find(&format!("name=\"{name}\" value=\""))
            .unwrap_or_else(|| panic!("no field {name} in {}", self.body));
        let rest = &self.body[at + name.len() + 15..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

impl Browser {
    fn new(sidecar: &Sidecar) -> Self {
        Self::at(&sidecar.url)
    }

    fn at(base: &str) -> Self {
        Self {
            base: base.to_owned(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: Vec::new(),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn send(&mut self, req: reqwest::RequestBuilder) -> Page {
        let req = if self.cookies.is_empty() {
            req
        } else {
            req.header("cookie", self.cookie_header())
        };
        let resp = req.send().await.unwrap();
        let page = Page {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: String::new(),
        };
        let body = resp.text().await.unwrap();
        let page = Page { body, ..page };
        for line in page.set_cookies() {
            let (pair, attrs) = line.split_once(';').unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            self.cookies.retain(|(n, _)| n != name);
            if !value.is_empty() && !attrs.contains("Max-Age=0") {
                self.cookies.push((name.to_owned(), value.to_owned()));
            }
        }
        page
    }

    async fn get(&mut self, path: &str) -> Page {
        let req = self.client.get(format!("{}{path}", self.base));
        self.send(req).await
    }

    async fn get_with_token(&mut self, path: &str, token: &str) -> Page {
        let req = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(token);
        self.send(req).await
    }

    /// A form POST as a browser sends it from one of the pages (same origin).
    async fn post_form(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let host = self.base.trim_start_matches("http://").to_owned();
        self.post_form_from(path, form, &format!("http://{host}"), "same-origin")
            .await
    }

    async fn post_form_from(
        &mut self,
        path: &str,
        form: &[(&str, &str)],
        origin: &str,
        site: &str,
    ) -> Page {
        let body: String = form
            .iter()
            .map(|(k, v)| format!("{k}={}", urlencode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let req = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", origin)
            .header("sec-fetch-site", site)
            .body(body);
        self.send(req).await
    }

    async fn log_in(&mut self) -> Page {
        let form = self.get("/ui/login").await;
        assert_eq!(form.status, 200, "{}", form.body);
        let csrf = form.field("csrf");
        self.post_form("/ui/login", &[("token", TOKEN), ("csrf", &csrf)])
            .await
    }

    fn cookie(&self, name: &str) -> Option<String> {
        self.cookies
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }
}

const SESSION: &str = "__Host-livecheck-session";

fn urlencode(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn with_token() -> Extras {
    Extras {
        token: true,
        ..Extras::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_need_the_bearer_token_or_a_session() {
    let db = Db::sqlite().await;
    let sidecar = Sidecar::start(&db, &with_token()).await;
    let mut b = Browser::new(&sidecar);

    let page = b.get("/ui/agents").await;
    assert_eq!((page.status, page.location()), (303, "/ui/login"));
    assert_eq!(b.get("/ui").await.location(), "/ui/agents");

    let wrong = b.get_with_token("/ui/agents", "op-token-7f3a9d").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("That token is not valid."));
    assert!(!wrong.body.contains("op-token"), "{}", wrong.body);

    let right = b.get_with_token("/ui/agents", TOKEN).await;
    assert_eq!(right.status, 200, "{}", right.body);
    assert!(right.body.contains("<h1>Agents</h1>"));
    // With the bearer token there is no session, so no logout form.
    assert!(!right.body.contains("/ui/logout"));
    assert!(!right.body.contains(TOKEN));
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_operator_token_the_pages_are_off() {
    let db = Db::sqlite().await;
    let sidecar = Sidecar::start(&db, &Extras::default()).await;
    let mut b = Browser::new(&sidecar);
    for path in ["/ui/agents", "/ui/login", "/ui/turns/lc_x"] {
        let page = b.get(path).await;
        assert_eq!(page.status, 503, "{path}");
        assert!(page.body.contains("no operator token is configured"));
    }
    let page = b
        .post_form("/ui/login", &[("token", "anything"), ("csrf", "x")])
        .await;
    assert_eq!(page.status, 503);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_gives_a_session_cookie_without_the_token_and_logout_ends_it() {
    let db = Db::sqlite().await;
    let sidecar = Sidecar::start(&db, &with_token()).await;
    let mut b = Browser::new(&sidecar);

    let form = b.get("/ui/login").await;
    let login_cookie = form
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("__Host-livecheck-login="))
        .unwrap();
    assert!(login_cookie.contains("; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=600"));
    assert!(form.body.contains("type=\"password\""));

    let csrf = form.field("csrf");
    let done = b
        .post_form("/ui/login", &[("token", TOKEN), ("csrf", &csrf)])
        .await;
    assert_eq!((done.status, done.location()), (303, "/ui/agents"));
    let session = done
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("__Host-livecheck-session="))
        .unwrap();
    assert!(session.ends_with("; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=43200"));
    let id = session
        .trim_start_matches("__Host-livecheck-session=")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert!(id.len() == 64 && id.bytes().all(|c| c.is_ascii_hexdigit()));
    assert!(!session.contains(TOKEN));
    // The login cookie is cleared.
    assert!(done
        .set_cookies()
        .iter()
        .any(|c| c.starts_with("__Host-livecheck-login=;") && c.contains("Max-Age=0")));

    let agents = b.get("/ui/agents").await;
    assert_eq!(agents.status, 200, "{}", agents.body);
    assert!(!agents.body.contains(TOKEN) && !agents.body.contains(&id));
    let logout_csrf = agents.field("csrf");
    assert_ne!(logout_csrf, csrf);
    // Logged in, the login page sends you on.
    assert_eq!(b.get("/ui/login").await.location(), "/ui/agents");

    let out = b.post_form("/ui/logout", &[("csrf", &logout_csrf)]).await;
    assert_eq!((out.status, out.location()), (303, "/ui/login"));
    // The old cookie, sent again, is no session any more.
    b.cookies = vec![("__Host-livecheck-session".into(), id)];
    assert_eq!(b.get("/ui/agents").await.location(), "/ui/login");
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_gets_one_sentence_and_no_session() {
    let db = Db::sqlite().await;
    let sidecar = Sidecar::start(&db, &with_token()).await;
    let mut bodies = Vec::new();
    for wrong in ["op-token-7f3a9d", "x", "", "op-token-7f3a9c-and-more"] {
        let mut b = Browser::new(&sidecar);
        let csrf = b.get("/ui/login").await.field("csrf");
        let page = b
            .post_form("/ui/login", &[("token", wrong), ("csrf", &csrf)])
            .await;
        assert_eq!(page.status, 401, "{wrong}");
        assert!(page.body.contains("That token is not valid."));
        assert!(
            !page.set_cookies().iter().any(|c| c.contains("session=")),
            "{wrong}"
        );
        if !wrong.is_empty() {
            assert!(!page.body.contains(wrong), "{wrong}");
        }
        // The same page whatever was wrong, but for the form's fresh CSRF value.
        bodies.push(page.body.replace(&page.field("csrf"), ""));
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]));
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_without_their_csrf_token_or_from_elsewhere_are_refused() {
    let db = Db::sqlite().await;
    let sidecar = Sidecar::start(&db, &with_token()).await;
    let host = sidecar.url.trim_start_matches("http://").to_owned();
    let here = format!("http://{host}");

    // Login: no login cookie, another value, another origin, a cross-site fetch.
    let mut b = Browser::new(&sidecar);
    let csrf = b.get("/ui/login").await.field("csrf");
    let mut fresh = Browser::new(&sidecar);
    let no_cookie = fresh
        .post_form("/ui/login", &[("token", TOKEN), ("csrf", &csrf)])
        .await;
    assert_eq!(no_cookie.status, 403);
    let other = b
        .post_form("/ui/login", &[("token", TOKEN), ("csrf", "0123abcd")])
        .await;
    assert_eq!(other.status, 403);
    let elsewhere = b
        .post_form_from(
            "/ui/login",
            &[("token", TOKEN), ("csrf", &csrf)],
            "http://127.0.0.1:1",
            "same-site",
        )
        .await;
    assert_eq!(elsewhere.status, 403);
    let cross = b
        .post_form_from(
            "/ui/login",
            &[("token", TOKEN), ("csrf", &csrf)],
            &here,
            "cross-site",
        )
        .await;
    assert_eq!(cross.status, 403);
    for refused in [&no_cookie, &other, &elsewhere, &cross] {
        assert!(refused.body.contains("did not come from this page"));
        assert!(!refused.set_cookies().iter().any(|c| c.contains("session=")));
    }

    // Logout: without the session's token, with another, from elsewhere: the session stays.
    assert_eq!(b.log_in().await.status, 303);
    let csrf = b.get("/ui/agents").await.field("csrf");
    assert_eq!(b.post_form("/ui/logout", &[]).await.status, 403);
    assert_eq!(
        b.post_form("/ui/logout", &[("csrf", "0123abcd")])
            .await
            .status,
        403
    );
    let elsewhere = b
        .post_form_from(
            "/ui/logout",
            &[("csrf", &csrf)],
            "http://127.0.0.1:1",
            "same-site",
        )
        .await;
    assert_eq!(elsewhere.status, 403);
    assert_eq!(b.get("/ui/agents").await.status, 200);

    // The JSON API never takes the session cookie (its DELETE could otherwise be forged).
    let api = reqwest::Client::new()
        .delete(format!("{}/people/p1/checks", sidecar.url))
        .header("cookie", b.cookie_header())
        .send()
        .await
        .unwrap();
    assert_eq!(api.status().as_u16(), 401);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_under_ui_carries_the_security_headers() {
    let db = Db::sqlite().await;
    let sidecar = Sidecar::start(&db, &with_token()).await;
    let id = turn_id();
    sidecar
        .post_report(&report(&id, "orders", vec![result("no-pw", Failed, 1)]))
        .await;
    let mut b = Browser::new(&sidecar);
    let mut pages = vec![
        b.get("/ui/login").await,
        b.get("/ui/agents").await,
        b.get("/ui/style.css").await,
        b.post_form("/ui/login", &[("token", TOKEN), ("csrf", "x")])
            .await,
    ];
    for path in [
        "/ui/agents",
        "/ui/agents/orders",
        "/ui/agents/orders/checks/no-pw?window=7d",
        &format!("/ui/turns/{id}"),
        "/ui/turns/lc_none",
        "/ui/agents?window=2d",
    ] {
        pages.push(b.get_with_token(path, TOKEN).await);
    }
    let statuses: Vec<u16> = pages.iter().map(|p| p.status).collect();
    assert_eq!(statuses, [200, 303, 200, 403, 200, 200, 200, 200, 404, 400]);
    for page in &pages {
        let h = &page.headers;
        assert_eq!(h["content-security-policy"], CONTENT_SECURITY_POLICY);
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["referrer-policy"], "same-origin");
        assert_eq!(h["cache-control"], "no-store");
        // No script and no inline style anywhere: the policy would block them anyway.
        assert!(!page.body.contains("<script") && !page.body.contains("style="));
    }
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_are_escaped_on_every_page() {
    let db = Db::sqlite().await;
    let sidecar = Sidecar::start(&db, &with_token()).await;
    // The filter refuses such names in its configuration; the sidecar stores what a report says.
    let agent = "<script>alert('agent')</script>";
    let check = "\"><img src=x onerror=alert(1)>";
    let id = turn_id();
    let (status, _) = sidecar
        .post_report(&report(
            &id,
            agent,
            vec![alerting(result(check, Failed, 1), 0.5, 1)],
        ))
        .await;
    assert_eq!(status, 200);
    let mut b = Browser::new(&sidecar);
    let agent_path = "/ui/agents/%3Cscript%3Ealert%28%27agent%27%29%3C%2Fscript%3E";
    let check_path =
        format!("{agent_path}/checks/%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E");
    for path in [
        "/ui/agents".to_owned(),
        agent_path.to_owned(),
        check_path.clone(),
        format!("/ui/turns/{id}"),
    ] {
        let page = b.get_with_token(&path, TOKEN).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(!page.body.contains("<script"), "{path}: {}", page.body);
        assert!(!page.body.contains("<img"), "{path}: {}", page.body);
        assert!(
            page.body
                .contains("&lt;script&gt;alert(&#39;agent&#39;)&lt;/script&gt;"),
            "{path}: {}",
            page.body
        );
    }
    // The links on the pages lead to the same pages.
    let agents = b.get_with_token("/ui/agents", TOKEN).await;
    assert!(agents
        .body
        .contains(&format!("href=\"{agent_path}?window=24h\"")));
    let check_page = b.get_with_token(&check_path, TOKEN).await;
    assert!(check_page
        .body
        .contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"));
    sidecar.stop().await;
}

fn judged(name: &str, outcome: livecheck_wire::Outcome, reason: &str) -> CheckResult {
    CheckResult {
        kind: "polite_tone".into(),
        stage: Stage::Output,
        score: Some(0.2),
        reason: reason.into(),
        judge_model: Some("judge-model".into()),
        ..result(name, outcome, 1)
    }
}

on_both!(pages_show_rates_failures_and_alerts_but_never_a_judges_sentence);

async fn pages_show_rates_failures_and_alerts_but_never_a_judges_sentence(db: Db) {
    let sidecar = Sidecar::start(&db, &with_token()).await;
    const QUOTE: &str = "The answer repeats the card number 4111-QUOTED-MARKER.";
    let mut ids = Vec::new();
    let start = livecheck_judge::ids::now_ms() as u64 - 10_000;
    for (at, (rule, mut polite)) in (0..).zip([
        (Passed, judged("polite", Passed, "Courteous QUOTED-MARKER.")),
        (Passed, judged("polite", Failed, QUOTE)),
        (
            Passed,
            judged("polite", Errored, "The judge model did not answer in time."),
        ),
        (Failed, judged("polite", Passed, "Fine QUOTED-MARKER.")),
    ]) {
        let id = turn_id();
        let mut r = alerting(result("no-pw", rule, 1), 0.25, 4);
        r.stage = Stage::Input;
        let mut tool = tool_result("safe-mail", Failed, "send_QUOTED-MARKER", 2);
        tool.reason = "The mail would leak QUOTED-MARKER.".into();
        // One second apart, so "newest first" has one answer.
        for x in [&mut r, &mut polite, &mut tool] {
            x.created_at_ms = start + at * 1000;
        }
        let (status, body) = sidecar
            .post_report(&report(&id, "orders", vec![r, polite, tool]))
            .await;
        assert_eq!(status, 200, "{body}");
        ids.push(id);
    }
    let mut b = Browser::new(&sidecar);
    assert_eq!(b.log_in().await.status, 303);

    let agents = b.get("/ui/agents").await;
    assert!(
        agents
            .body
            .contains(">orders</a></th><td class=\"n\">4</td>"),
        "{}",
        agents.body
    );

    let agent = b.get("/ui/agents/orders?window=1h").await;
    assert_eq!(agent.status, 200, "{}", agent.body);
    // no-pw: 3 passed, 1 failed; polite: 2 passed, 1 failed, 1 errored.
    assert!(
        agent.body.contains(
            "no-pw</a></th><td class=\"n\">3</td><td class=\"n\">1</td><td class=\"n\">0</td>\
         <td class=\"n\">75.0%</td><td class=\"n\">25.0%</td><td class=\"n\">0.0%</td>"
        ),
        "{}",
        agent.body
    );
    assert!(agent.body.contains(
        "polite</a></th><td class=\"n\">2</td><td class=\"n\">1</td><td class=\"n\">1</td>\
         <td class=\"n\">50.0%</td><td class=\"n\">25.0%</td><td class=\"n\">25.0%</td>"
    ));
    assert!(agent
        .body
        .contains("aria-label=\"no-pw: 3 passed, 1 failed, 0 errored\""));
    // The alert fired: 1 of the last 4 is 25%.
    assert!(agent.body.contains(
        "<th scope=\"row\">no-pw</th><td>25% not passed of the last 4</td><td>1 of the last 4 not passed</td>"
    ), "{}", agent.body);
    assert!(!agent.body.contains("<td>never</td>"));

    let check = b.get("/ui/agents/orders/checks/polite?window=1h").await;
    assert_eq!(check.status, 200);
    // The failed and the errored result, newest first, each linking to its turn.
    assert!(check
        .body
        .contains(&format!("<a href=\"/ui/turns/{}\">{}</a>", ids[2], ids[2])));
    assert!(check
        .body
        .contains(&format!("<a href=\"/ui/turns/{}\">{}</a>", ids[1], ids[1])));
    assert!(!check.body.contains(&ids[0]) && !check.body.contains(&ids[3]));
    assert!(check.body.find(&ids[2]) < check.body.find(&ids[1]));
    assert!(check
        .body
        .contains("The judge model did not answer in time."));
    assert!(check
        .body
        .contains("not shown: the judge's own words may quote the turn"));
    assert!(check.body.contains("This check has no alert."));

    let tool_page = b.get("/ui/agents/orders/checks/safe-mail").await;
    assert!(
        tool_page.body.contains("<td class=\"n\">2</td><td>"),
        "the call number"
    );

    let turn = b.get(&format!("/ui/turns/{}", ids[3])).await;
    assert_eq!(turn.status, 200);
    assert!(turn
        .body
        .contains("The answer contains text it had to avoid."));
    assert!(turn.body.contains("<td class=\"failed\">failed</td>"));
    assert!(turn
        .body
        .contains("href=\"/ui/agents/orders/checks/no-pw\""));

    for page in [&agents, &agent, &check, &tool_page, &turn] {
        assert!(!page.body.contains("QUOTED-MARKER"), "{}", page.body);
    }
    sidecar.stop().await;
}

on_both!(
    a_session_is_kept_as_the_sha256_of_its_id_and_ends_on_close,
    sessions_are_bounded_and_those_ended_or_closest_to_expiry_go,
);

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn a_session_is_kept_as_the_sha256_of_its_id_and_ends_on_close(db: Db) {
    let store = Store::open(&db.url).await.unwrap();
    let sessions = Sessions::default();
    let before = livecheck_judge::ids::now_ms();
    let (id, csrf) = sessions.open(&store).await.unwrap().unwrap();
    assert!(id.len() == 64 && id.bytes().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(csrf, id);
    assert_eq!(
        sessions.csrf(&store, &id).await.unwrap(),
        Some(csrf.clone())
    );
    assert_eq!(sessions.csrf(&store, &id[..63]).await.unwrap(), None);
    assert_eq!(sessions.csrf(&store, &sha256_hex(&id)).await.unwrap(), None);

    // The database holds the id's SHA-256 and never the id (the cookie's value).
    let rows = db
        .rows("SELECT digest, csrf, expires_at FROM sessions")
        .await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][..2], [sha256_hex(&id), csrf]);
    assert!(!rows[0].iter().any(|v| v.contains(&id)));
    let expires: i64 = rows[0][2]
        .trim_start_matches("Some(")
        .trim_end_matches(')')
        .parse()
        .unwrap();
    let twelve_hours = 12 * 3600 * 1000;
    assert!(
        (before + twelve_hours..=livecheck_judge::ids::now_ms() + twelve_hours).contains(&expires)
    );

    sessions.close(&store, &id).await.unwrap();
    assert_eq!(sessions.csrf(&store, &id).await.unwrap(), None);
    assert!(db.rows("SELECT digest FROM sessions").await.is_empty());
    store.close().await;
}

async fn sessions_are_bounded_and_those_ended_or_closest_to_expiry_go(db: Db) {
    let store = Store::open(&db.url).await.unwrap();
    let now = livecheck_judge::ids::now_ms();
    let live = |digest: &'static str, at: i64| {
        let store = store.clone();
        async move { store.session_csrf(digest, at).await.unwrap().is_some() }
    };

    // A session ends at its expiry, and the next login deletes it.
    store.open_session("ends", "c", now + 5, now).await.unwrap();
    assert!(live("ends", now + 4).await);
    assert!(!live("ends", now + 5).await);
    store
        .open_session("longest", "c", now + 9_000_000, now + 10)
        .await
        .unwrap();
    assert_eq!(db.rows("SELECT digest FROM sessions").await, [["longest"]]);

    // Full: a login drops the session closest to expiry, not the oldest.
    for i in 0..MAX_SESSIONS - 1 {
        let digest = format!("s{i}");
        store
            .open_session(&digest, "c", now + 1_000 + i, now + 10)
            .await
            .unwrap();
    }
    let count = || async { db.rows("SELECT COUNT(*) FROM sessions").await };
    assert_eq!(count().await, [[format!("Some({MAX_SESSIONS})")]]);
    store
        .open_session("newest", "c", now + 2_000_000, now + 10)
        .await
        .unwrap();
    assert_eq!(count().await, [[format!("Some({MAX_SESSIONS})")]]);
    assert!(!live("s0", now + 10).await);
    for kept in ["s1", "longest", "newest"] {
        assert!(live(kept, now + 10).await, "{kept}");
    }
    store.close().await;
}

/// A sidecar with the operator token on `db`, as one replica of several.
async fn replica(db: &Db) -> Sidecar {
    Sidecar::start(db, &with_token()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_from_one_replica_is_known_to_the_other_and_a_logout_on_either_ends_it() {
    let db = Db::postgres().await;
    let (one, two) = (replica(&db).await, replica(&db).await);

    // The login form from one replica is accepted by the other (its cookie is the whole state).
    let mut on_one = Browser::new(&one);
    let mut on_two = Browser::new(&two);
    let csrf = on_two.get("/ui/login").await.field("csrf");
    on_one.cookies = on_two.cookies.clone();
    let done = on_one
        .post_form("/ui/login", &[("token", TOKEN), ("csrf", &csrf)])
        .await;
    assert_eq!((done.status, done.location()), (303, "/ui/agents"));
    let id = on_one.cookie(SESSION).unwrap();

    // The other replica knows the session, with the same CSRF token for its forms.
    on_two.cookies = on_one.cookies.clone();
    let page = on_two.get("/ui/agents").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let logout_csrf = page.field("csrf");
    assert_eq!(on_one.get("/ui/agents").await.field("csrf"), logout_csrf);

    // Logged out on the second, the first refuses the cookie too.
    let out = on_two
        .post_form("/ui/logout", &[("csrf", &logout_csrf)])
        .await;
    assert_eq!((out.status, out.location()), (303, "/ui/login"));
    on_one.cookies = vec![(SESSION.to_owned(), id.clone())];
    let refused = on_one.get("/ui/agents").await;
    assert_eq!((refused.status, refused.location()), (303, "/ui/login"));
    assert!(db.rows("SELECT digest FROM sessions").await.is_empty());
    one.stop().await;
    two.stop().await;

    // A restart logs no one out: a new replica knows a session made before it started.
    let three = replica(&db).await;
    let mut b = Browser::new(&three);
    assert_eq!(b.log_in().await.status, 303);
    three.stop().await;
    let four = replica(&db).await;
    let mut after = Browser::new(&four);
    after.cookies = b.cookies.clone();
    assert_eq!(after.get("/ui/agents").await.status, 200);
    four.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_store_cannot_say_a_session_is_live_no_one_gets_in() {
    let db = Db::sqlite().await;
    let sidecar = Sidecar::start(&db, &with_token()).await;
    let mut b = Browser::new(&sidecar);
    assert_eq!(b.log_in().await.status, 303);
    let logout_csrf = b.get("/ui/agents").await.field("csrf");
    let mut fresh = Browser::new(&sidecar);
    let login_csrf = fresh.get("/ui/login").await.field("csrf");
    sidecar.app.store().unwrap().close().await;

    // Let in, the login form would send the browser on to the pages (303): it answers 503.
    let form = b.get("/ui/login").await;
    assert_eq!(form.status, 503, "{}", form.body);
    assert!(form.body.contains("The results store is unavailable."));
    let page = b.get("/ui/agents").await;
    assert_eq!(page.status, 503, "{}", page.body);
    assert!(!page.body.contains("/ui/logout"), "{}", page.body);
    let out = b.post_form("/ui/logout", &[("csrf", &logout_csrf)]).await;
    assert_eq!(out.status, 503);
    let login = fresh
        .post_form("/ui/login", &[("token", TOKEN), ("csrf", &login_csrf)])
        .await;
    assert_eq!(login.status, 503);
    assert!(!login.set_cookies().iter().any(|c| c.contains("session=")));
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_without_a_store_has_no_login_but_takes_the_bearer_token() {
    let config = "[api]\ntoken_env = \"LC_TEST_TOKEN\"\n[[backends]]\napi = \"openai\"\n\
                  base_url = \"http://127.0.0.1:9\"\nmodels = [\"*\"]\n";
    let judge = common::Judge::start_with_env(config, &|var: &str| {
        (var == "LC_TEST_TOKEN").then(|| TOKEN.to_owned())
    })
    .await;
    let mut b = Browser::at(&judge.url);
    let form = b.get("/ui/login").await;
    assert_eq!(form.status, 503);
    assert!(
        form.body.contains("without a results store"),
        "{}",
        form.body
    );
    assert!(form.set_cookies().is_empty());
    let login = b
        .post_form("/ui/login", &[("token", TOKEN), ("csrf", "x")])
        .await;
    assert_eq!(login.status, 503);
    assert!(login.set_cookies().is_empty());
    b.cookies = vec![(SESSION.to_owned(), "ab".repeat(32))];
    assert_eq!(b.get("/ui/agents").await.status, 503);
    let bearer = b.get_with_token("/ui/agents", TOKEN).await;
    assert_eq!(bearer.status, 503);
    assert!(bearer.body.contains("without a results store"));
    assert_eq!(
        b.get_with_token("/ui/agents", "op-token-7f3a9d")
            .await
            .status,
        401
    );
}
