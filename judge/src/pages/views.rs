//! The pages' contents: agents, an agent, a check, a turn. Each reads the store through
//! [`crate::store`] and writes through [`Html`]; a window (`?window=1h|24h|7d|30d`, a GET form:
//! it changes nothing) sets what the counts and charts cover.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::chart::{self, Bar, Size};
use super::error::PageError;
use super::html::{href, Html};
use super::login::guard;
use super::session::Access;
use super::{page, reason};
use crate::app::App;
use crate::ids;
use crate::store::{self, Store};

/// Results that did not pass listed on a check's page at most.
const FAILURES_SHOWN: i64 = 50;
/// Results of a turn listed at most.
const TURN_RESULTS_SHOWN: i64 = 1000;

/// What the counts and charts cover, and how the chart cuts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Window {
    Hour,
    Day,
    Week,
    Month,
}

const WINDOWS: [Window; 4] = [Window::Hour, Window::Day, Window::Week, Window::Month];
const MINUTE_MS: i64 = 60_000;

impl Window {
    fn parse(value: Option<&str>) -> Option<Self> {
        match value {
            None | Some("") => Some(Self::Day),
            Some(v) => WINDOWS.into_iter().find(|w| w.key() == v),
        }
    }

    fn key(self) -> &'static str {
        match self {
            Self::Hour => "1h",
            Self::Day => "24h",
            Self::Week => "7d",
            Self::Month => "30d",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Hour => "the last hour",
            Self::Day => "the last 24 hours",
            Self::Week => "the last 7 days",
            Self::Month => "the last 30 days",
        }
    }

    /// (buckets, width of one in ms).
    fn buckets(self) -> (i64, i64) {
        match self {
            Self::Hour => (12, 5 * MINUTE_MS),
            Self::Day => (24, 60 * MINUTE_MS),
            Self::Week => (28, 6 * 60 * MINUTE_MS),
            Self::Month => (30, 24 * 60 * MINUTE_MS),
        }
    }

    /// The window's start: whole buckets, the last one the current.
    fn since(self, now_ms: i64) -> i64 {
        let (n, width) = self.buckets();
        now_ms.div_euclid(width) * width - (n - 1) * width
    }
}

type Params = Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>;

/// The operator's access, the store and the window, or the refusal.
async fn open(
    app: &App,
    headers: &HeaderMap,
    query: Params,
) -> Result<(Access, Store, Window), PageError> {
    let access = guard(app, headers).await?;
    let Some(store) = app.store().cloned() else {
        return Err(PageError::Message(
            StatusCode::SERVICE_UNAVAILABLE,
            "Operator pages",
            "This sidecar runs without a results store.",
        ));
    };
    let window = query
        .ok()
        .and_then(|Query(q)| Window::parse(q.get("window").map(String::as_str)));
    match window {
        Some(w) => Ok((access, store, w)),
        None => Err(PageError::Message(
            StatusCode::BAD_REQUEST,
            "Operator pages",
            "The window must be one of 1h, 24h, 7d or 30d.",
        )),
    }
}

/// The window chooser: a GET form back to `path`.
fn chooser(h: &mut Html, path: &str, window: Window) {
    h.raw("<form method=\"get\" action=\"")
        .text(path)
        .raw("\" class=\"window\"><label for=\"window\">Window</label><select id=\"window\" name=\"window\">");
    for w in WINDOWS {
        h.raw("<option value=\"").text(w.key()).raw("\"");
        if w == window {
            h.raw(" selected");
        }
        h.raw(">").text(w.label()).raw("</option>");
    }
    h.raw("</select><button type=\"submit\">Show</button></form>");
}

fn with_window(path: &str, window: Window) -> String {
    format!("{path}?window={}", window.key())
}

/// `part` of `total` as a percentage, `–` without results.
fn rate(part: i64, total: i64) -> String {
    if total <= 0 {
        "–".to_owned()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / total as f64)
    }
}

/// A time as `2026-12-02 10:00 UTC`.
fn minute(ms: i64) -> String {
    let t = ids::rfc3339(ms);
    format!("{} UTC", t.get(..16).unwrap_or(&t).replace('T', " "))
}

fn counts_cells(h: &mut Html, passed: i64, failed: i64, errored: i64) {
    let total = passed + failed + errored;
    for n in [passed, failed, errored] {
        h.raw("<td class=\"n\">").num(n).raw("</td>");
    }
    for n in [passed, failed, errored] {
        h.raw("<td class=\"n\">").text(&rate(n, total)).raw("</td>");
    }
}

fn header_row(h: &mut Html, first: &'static [&'static str], last: &'static [&'static str]) {
    h.raw("<thead><tr>");
    for name in first
        .iter()
        .chain(&[
            "Passed",
            "Failed",
            "Errored",
            "Pass rate",
            "Fail rate",
            "Error rate",
        ])
        .chain(last)
    {
        h.raw("<th scope=\"col\">").text(name).raw("</th>");
    }
    h.raw("</tr></thead>");
}

/// A check's bars over the window from the agent's buckets.
fn check_bars(buckets: &[store::Bucket], check: &str, window: Window, since: i64) -> Vec<Bar> {
    let (n, width) = window.buckets();
    (0..n)
        .map(|i| {
            let b = buckets.iter().find(|b| b.name == check && b.index == i);
            Bar {
                label: minute(since + i * width),
                passed: b.map_or(0, |b| b.passed),
                failed: b.map_or(0, |b| b.failed),
                errored: b.map_or(0, |b| b.errored),
            }
        })
        .collect()
}

fn threshold(alert: &store::AlertView) -> String {
    format!(
        "{:.0}% not passed of the last {}",
        alert.failure_rate * 100.0,
        alert.over_last
    )
}

fn last_fired(alert: &store::AlertView) -> String {
    alert
        .last_fired_at_ms
        .map_or_else(|| "never".to_owned(), minute)
}

pub async fn agents(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    query: Params,
) -> Result<Response, PageError> {
    let (access, store, window) = open(&app, &headers, query).await?;
    let agents = store
        .agents(window.since(ids::now_ms()))
        .await
        .map_err(PageError::store_down)?;
    let mut h = Html::new();
    chooser(&mut h, "/ui/agents", window);
    h.raw("<p>Results of ").text(window.label()).raw(".</p>");
    if agents.is_empty() {
        h.raw("<p>No turn has been reported yet.</p>");
    } else {
        h.raw("<table class=\"counts\" id=\"agents\">");
        header_row(&mut h, &["Agent", "Turns"], &[]);
        h.raw("<tbody>");
        for a in &agents {
            h.raw("<tr><th scope=\"row\">")
                .link(&with_window(&href(&["agents", &a.agent]), window), &a.agent)
                .raw("</th><td class=\"n\">")
                .num(a.turns)
                .raw("</td>");
            counts_cells(&mut h, a.passed, a.failed, a.errored);
            h.raw("</tr>");
        }
        h.raw("</tbody></table>");
    }
    Ok(page(StatusCode::OK, "Agents", Some(&access), h))
}

/// What an agent's page and its checks' pages read: the window's start, each check's counts, the
/// counts per check and bucket, the alerting checks.
struct Read {
    since: i64,
    checks: Vec<store::CheckCounts>,
    buckets: Vec<store::Bucket>,
    alerts: Vec<store::AlertView>,
}

impl Read {
    async fn agent(store: &Store, agent: &str, window: Window) -> Result<Self, store::StoreError> {
        let since = window.since(ids::now_ms());
        let (_, width) = window.buckets();
        Ok(Self {
            since,
            checks: store.summary(agent, since).await?,
            buckets: store.buckets(agent, since, width).await?,
            alerts: store.alerts(agent).await?,
        })
    }
}

pub async fn agent(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(agent): Path<String>,
    query: Params,
) -> Result<Response, PageError> {
    let (access, store, window) = open(&app, &headers, query).await?;
    let Read {
        since,
        checks,
        buckets,
        alerts,
    } = Read::agent(&store, &agent, window)
        .await
        .map_err(PageError::store_down)?;
    let path = href(&["agents", &agent]);
    let mut h = Html::new();
    chooser(&mut h, &path, window);
    h.raw("<h2>Checks</h2><p>Results of ")
        .text(window.label())
        .raw(", every version. Chart: results per ")
        .text(bucket_name(window))
        .raw(", passed (green) at the bottom, failed (red), errored (brown) on top.</p>");
    if checks.is_empty() {
        h.raw("<p>No results in this window.</p>");
    } else {
        h.raw("<table class=\"counts\" id=\"checks\">");
        header_row(&mut h, &["Check"], &["Over time"]);
        h.raw("<tbody>");
        for c in &checks {
            h.raw("<tr><th scope=\"row\">")
                .link(
                    &with_window(&href(&["agents", &agent, "checks", &c.name]), window),
                    &c.name,
                )
                .raw("</th>");
            counts_cells(&mut h, c.passed, c.failed, c.errored);
            h.raw("<td>")
                .push(chart::bars(
                    &c.name,
                    &check_bars(&buckets, &c.name, window, since),
                    Size::Small,
                ))
                .raw("</td></tr>");
        }
        h.raw("</tbody></table>");
    }
    alerts_table(&mut h, &store, &agent, &alerts).await;
    Ok(page(
        StatusCode::OK,
        &format!("Agent {agent}"),
        Some(&access),
        h,
    ))
}

fn bucket_name(window: Window) -> &'static str {
    match window {
        Window::Hour => "5 minutes",
        Window::Day => "hour",
        Window::Week => "6 hours",
        Window::Month => "day",
    }
}

/// The agent's alerting checks: threshold, how their latest results stand, when they last fired.
async fn alerts_table(h: &mut Html, store: &Store, agent: &str, alerts: &[store::AlertView]) {
    h.raw("<h2>Alerts</h2>");
    if alerts.is_empty() {
        h.raw("<p>No check of this agent has an alert.</p>");
        return;
    }
    h.raw("<table id=\"alerts\"><thead><tr><th scope=\"col\">Check</th><th scope=\"col\">Alerts at</th>")
        .raw("<th scope=\"col\">Now</th><th scope=\"col\">Last fired</th></tr></thead><tbody>");
    for a in alerts {
        let over = u32::try_from(a.over_last).unwrap_or(u32::MAX);
        let now = match store.latest_counts(agent, &a.check, over).await {
            Ok((n, bad)) => format!("{bad} of the last {n} not passed"),
            Err(e) => {
                tracing::warn!(
                    error = store::error_kind(&e),
                    "cannot count results for an alert"
                );
                "unknown".to_owned()
            }
        };
        h.raw("<tr><th scope=\"row\">")
            .text(&a.check)
            .raw("</th><td>")
            .text(&threshold(a))
            .raw("</td><td>")
            .text(&now)
            .raw("</td><td>")
            .text(&last_fired(a))
            .raw("</td></tr>");
    }
    h.raw("</tbody></table>");
}

pub async fn check(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path((agent, check)): Path<(String, String)>,
    query: Params,
) -> Result<Response, PageError> {
    let (access, store, window) = open(&app, &headers, query).await?;
    let read = async {
        let read = Read::agent(&store, &agent, window).await?;
        let failures = store
            .failures(&agent, &check, read.since, FAILURES_SHOWN)
            .await?;
        Ok::<_, store::StoreError>((read, failures))
    };
    let (
        Read {
            since,
            checks: summary,
            buckets,
            alerts,
        },
        failures,
    ) = read.await.map_err(PageError::store_down)?;
    let counts = summary.iter().find(|c| c.name == check);
    let (passed, failed, errored) = counts.map_or((0, 0, 0), |c| (c.passed, c.failed, c.errored));
    let mut h = Html::new();
    h.raw("<p>Agent ")
        .link(&with_window(&href(&["agents", &agent]), window), &agent)
        .raw(".</p>");
    chooser(&mut h, &href(&["agents", &agent, "checks", &check]), window);
    h.raw("<table class=\"counts\" id=\"rates\">");
    header_row(&mut h, &["Window"], &[]);
    h.raw("<tbody><tr><th scope=\"row\">")
        .text(window.label())
        .raw("</th>");
    counts_cells(&mut h, passed, failed, errored);
    h.raw("</tr></tbody></table><figure>")
        .push(chart::bars(
            &check,
            &check_bars(&buckets, &check, window, since),
            Size::Large,
        ))
        .raw("<figcaption>Results per ")
        .text(bucket_name(window))
        .raw(": passed (green), failed (red), errored (brown).</figcaption></figure>");
    let alert = alerts.iter().find(|a| a.check == check);
    h.raw("<h2>Alert</h2><p id=\"alert\">");
    match alert {
        Some(a) => {
            h.raw("Alerts at ")
                .text(&threshold(a))
                .raw("; last fired: ")
                .text(&last_fired(a))
                .raw(".");
        }
        None => {
            h.raw("This check has no alert.");
        }
    }
    h.raw("</p><h2>Recent results that did not pass</h2>");
    if failures.is_empty() {
        h.raw("<p>None in this window.</p>");
    } else {
        h.raw("<table id=\"failures\"><thead><tr>");
        for name in [
            "Time", "Turn", "Outcome", "Stage", "Attempt", "Call", "Reason",
        ] {
            h.raw("<th scope=\"col\">").text(name).raw("</th>");
        }
        h.raw("</tr></thead><tbody>");
        for f in &failures {
            h.raw("<tr><td>")
                .text(&minute(f.created_at_ms))
                .raw("</td><td>")
                .link(&href(&["turns", &f.turn_id]), &f.turn_id)
                .raw("</td><td class=\"")
                .text(&f.outcome)
                .raw("\">")
                .text(&f.outcome)
                .raw("</td><td>")
                .text(&f.stage)
                .raw("</td><td class=\"n\">")
                .num(f.attempt)
                .raw("</td><td class=\"n\">")
                .text(&f.call.map_or_else(String::new, |c| c.to_string()))
                .raw("</td><td>");
            reason_cell(&mut h, &f.reason);
            h.raw("</td></tr>");
        }
        h.raw("</tbody></table>");
    }
    let title = format!("Check {check} of agent {agent}");
    Ok(page(StatusCode::OK, &title, Some(&access), h))
}

fn reason_cell(h: &mut Html, text: &str) {
    match reason::shown(text) {
        Some(r) => {
            h.text(r);
        }
        None => {
            h.raw("<span class=\"withheld\">not shown: the judge's own words may quote the turn</span>");
        }
    }
}

pub async fn turn(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Params,
) -> Result<Response, PageError> {
    let (access, store, _) = open(&app, &headers, query).await?;
    let turn = store
        .find_turn(&id)
        .await
        .map_err(PageError::store_down)?
        .ok_or(PageError::Message(
            StatusCode::NOT_FOUND,
            "Turn",
            "No stored turn has this id.",
        ))?;
    let results = store
        .results_page(&turn.turn_id, 0, TURN_RESULTS_SHOWN)
        .await
        .map_err(PageError::store_down)?;
    let mut h = Html::new();
    h.raw("<dl class=\"ids\"><dt>Turn id</dt><dd>")
        .text(&turn.turn_id)
        .raw("</dd><dt>Upstream response id</dt><dd>")
        .text(turn.response_id.as_deref().unwrap_or("none"))
        .raw("</dd><dt>Agent</dt><dd>")
        .link(&href(&["agents", &turn.agent]), &turn.agent)
        .raw("</dd></dl>");
    h.raw("<table id=\"results\"><thead><tr>");
    for name in [
        "Check", "Stage", "Kind", "Mode", "Attempt", "Call", "Outcome", "Score", "Reason", "Time",
    ] {
        h.raw("<th scope=\"col\">").text(name).raw("</th>");
    }
    h.raw("</tr></thead><tbody>");
    for r in &results {
        h.raw("<tr><th scope=\"row\">")
            .link(&href(&["agents", &turn.agent, "checks", &r.name]), &r.name)
            .raw("</th><td>")
            .text(&r.stage)
            .raw("</td><td>")
            .text(&r.kind)
            .raw("</td><td>")
            .text(&r.mode)
            .raw("</td><td class=\"n\">")
            .num(r.attempt)
            .raw("</td><td class=\"n\">")
            .text(&r.call.map_or_else(String::new, |c| c.to_string()))
            .raw("</td><td class=\"")
            .text(&r.outcome)
            .raw("\">")
            .text(&r.outcome);
        if r.passed_on_error {
            h.raw(" (passed on error)");
        }
        h.raw("</td><td class=\"n\">")
            .text(&r.score.map_or_else(String::new, |s| format!("{s:.2}")))
            .raw("</td><td>");
        reason_cell(&mut h, &r.reason);
        h.raw("</td><td>")
            .text(&minute(r.created_at_ms))
            .raw("</td></tr>");
    }
    h.raw("</tbody></table>");
    Ok(page(
        StatusCode::OK,
        &format!("Turn {}", turn.public_id()),
        Some(&access),
        h,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_their_keys_only() {
        assert_eq!(Window::parse(None), Some(Window::Day));
        assert_eq!(Window::parse(Some("7d")), Some(Window::Week));
        assert_eq!(Window::parse(Some("2d")), None);
    }

    #[test]
    fn a_window_starts_on_a_whole_bucket_and_holds_now() {
        let now = 1_790_000_123_456;
        for w in WINDOWS {
            let (n, width) = w.buckets();
            let since = w.since(now);
            assert_eq!(since % width, 0);
            assert!(since + n * width > now && since + (n - 1) * width <= now);
        }
    }

    #[test]
    fn rates_are_percentages_of_the_total() {
        assert_eq!(rate(1, 3), "33.3%");
        assert_eq!(rate(0, 0), "–");
    }
}
