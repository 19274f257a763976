//! Turn reports through the built `.wasm` in the harness: every result a turn's checks decided
//! reaches the sidecar after the turn, under the id the caller got, without any of the turn's text,
//! and survives a sidecar that does not take it.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Callout, Host};

const TICK: Duration = Duration::from_millis(250);

/// The seed's rule checks plus a judged output check.
const CONFIG: &str = r#"{"default_agent": "orders", "agents": {"orders": {"published": "3", "versions": {"3": {
    "blocked_reply": "Not allowed.",
    "live_checks": [
        {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
        {"name": "no-iban", "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18,
         "alert": {"failure_rate": 0.3, "over_last": 50}},
        {"name": "polite", "stage": "output", "kind": "polite_tone", "judge_model": "judge-1"}
    ]}}}}}"#;

fn reports(host: &Host) -> Vec<Callout> {
    report_callouts(host)
}

/// A Chat question the seed's rules refuse, sent whole and finished; the id its caller got.
fn refused_turn(host: &mut Host) -> String {
    let vendor = Vendor::Chat;
    let s = send_request(
        host,
        vendor.path(),
        &[],
        &vendor.request(FORBIDDEN_QUESTION, false),
        Chunking::Whole,
    );
    let id = host.caller_received(s).header("x-core-response-id");
    let id = id.unwrap().to_owned();
    host.finish_stream(s).unwrap();
    id
}

fn judge_calls(host: &Host) -> Vec<Callout> {
    callouts_to(host, "/v1/judge")
}

const VERDICT: &str = r#"{"outcome": "passed", "score": 0.875, "reason": "Courteous.", "usage": {"input_tokens": 3, "output_tokens": 1}}"#;

#[test]
fn a_refused_question_reports_its_results_under_the_id_the_caller_got() {
    for vendor in VENDORS {
        let mut host = livecheck(CONFIG);
        let s = send_request(
            &mut host,
            vendor.path(),
            &[("x-core-person", "person-7"), ("x-api-key", "sk-turn")],
            &vendor.request(FORBIDDEN_QUESTION, false),
            Chunking::Bytes(7),
        );
        let turn_id = host
            .caller_received(s)
            .header("x-core-response-id")
            .unwrap()
            .to_owned();
        assert!(
            turn_id.starts_with("lc_") && turn_id.len() == 35,
            "{turn_id}"
        );
        assert!(
            reports(&host).is_empty(),
            "nothing leaves from the turn itself"
        );
        host.finish_stream(s).unwrap();
        host.advance_time(TICK);
        let sent = reports(&host);
        assert_eq!(sent.len(), 1, "{vendor:?}");
        // No background checks: the report goes in a batch, without the turn's key.
        assert_eq!(sent[0].header(":path"), Some("/v1/results/batch"));
        assert_eq!(sent[0].header("x-api-key"), None);
        let report = report_of(&sent[0]);
        assert_eq!(report["turn_id"], turn_id.as_str());
        assert_eq!(
            (&report["agent"], &report["version"], &report["person"]),
            (
                &serde_json::json!("orders"),
                &serde_json::json!("3"),
                &serde_json::json!("person-7")
            )
        );
        let results = report["results"].as_array().unwrap();
        assert_eq!(results.len(), 1);
        let r = &results[0];
        assert_eq!(
            (
                &r["name"],
                &r["stage"],
                &r["kind"],
                &r["mode"],
                &r["outcome"]
            ),
            (
                &serde_json::json!("no-passwords"),
                &serde_json::json!("input"),
                &serde_json::json!("not_contains"),
                &serde_json::json!("block"),
                &serde_json::json!("failed")
            )
        );
        assert_eq!(r["reason"], "The answer contains text it had to avoid.");
        assert_eq!(r["attempt"], 1);
        let body = String::from_utf8_lossy(&sent[0].body).to_lowercase();
        assert!(!body.contains("hunter2") && !body.contains("password is"));
    }
}

#[test]
fn an_answer_reports_rules_and_the_judges_verdict_with_the_upstream_id() {
    for vendor in VENDORS {
        let mut host = livecheck(CONFIG);
        let s = send_request(
            &mut host,
            vendor.path(),
            &[],
            &vendor.request(CLEAN_QUESTION, false),
            Chunking::Whole,
        );
        send_answer(
            &mut host,
            s,
            &[("content-type", "application/json")],
            &vendor.answer(CLEAN_ANSWER),
            Chunking::Bytes(7),
        );
        let call = judge_calls(&host).remove(0);
        host.answer_callout(call.token, &[(":status", "200")], VERDICT.as_bytes())
            .unwrap();
        let caller = host.caller_received(s);
        let turn_id = caller.header("x-core-response-id").unwrap().to_owned();
        let answer = json(caller.body_text().as_bytes());
        host.finish_stream(s).unwrap();
        host.advance_time(TICK);
        let report = report_of(&reports(&host)[0]);
        assert_eq!(report["turn_id"], turn_id.as_str());
        assert_eq!(report["response_id"], answer["id"], "{vendor:?}");
        let results = report["results"].as_array().unwrap();
        let names: Vec<&str> = results
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["no-passwords", "no-iban", "polite"]);
        assert_eq!(results[1]["alert"]["over_last"], 50);
        let polite = &results[2];
        assert_eq!(polite["outcome"], "passed");
        assert_eq!(polite["score"], 0.875);
        assert_eq!(polite["reason"], "Courteous.");
        assert_eq!(polite["judge_model"], "judge-1");
        let body = String::from_utf8_lossy(&reports(&host)[0].body).into_owned();
        assert!(!body.contains(CLEAN_ANSWER) && !body.contains(CLEAN_QUESTION));
    }
}

#[test]
fn reports_of_many_turns_leave_in_one_batch_and_one_with_background_checks_alone() {
    let mut host = livecheck(BACKGROUND_CONFIG);
    let vendor = Vendor::Chat;
    let mut turn_ids = Vec::new();
    for _ in 0..3 {
        let s = send_request(
            &mut host,
            vendor.path(),
            &[("x-api-key", "sk-turn")],
            &vendor.request(FORBIDDEN_QUESTION, false),
            Chunking::Whole,
        );
        let caller = host.caller_received(s);
        turn_ids.push(caller.header("x-core-response-id").unwrap().to_owned());
        host.finish_stream(s).unwrap();
    }
    // A turn that is answered draws its background check: its report needs the turn's key.
    let s = send_request(
        &mut host,
        vendor.path(),
        &[("x-api-key", "sk-turn")],
        &vendor.request(CLEAN_QUESTION, false),
        Chunking::Whole,
    );
    send_answer(
        &mut host,
        s,
        &[("content-type", "application/json")],
        &vendor.answer(CLEAN_ANSWER),
        Chunking::Whole,
    );
    host.finish_stream(s).unwrap();
    host.advance_time(TICK);
    let sent = reports(&host);
    assert_eq!(sent.len(), 2, "one batch, one report alone");
    let batch = sent
        .iter()
        .find(|c| c.header(":path") == Some("/v1/results/batch"))
        .unwrap();
    assert_eq!(batch.header("x-api-key"), None);
    let ids: Vec<String> = reports_in(batch)
        .iter()
        .map(|r| r["turn_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, turn_ids, "in the order the turns ended");
    let alone = sent
        .iter()
        .find(|c| c.header(":path") == Some("/v1/results"))
        .unwrap();
    assert_eq!(alone.header("x-api-key"), Some("sk-turn"));
    assert_eq!(report_of(alone)["background"][0]["name"], "tone");
    // A sidecar from before batches answers 404: the batch's reports go again, each alone.
    host.answer_callout(batch.token, &[(":status", "404")], b"")
        .unwrap();
    host.answer_callout(alone.token, &[(":status", "200")], b"{}")
        .unwrap();
    host.advance_time(TICK);
    let again = reports(&host);
    assert_eq!(again.len(), 3);
    assert!(again
        .iter()
        .all(|c| c.header(":path") == Some("/v1/results") && c.header("x-api-key").is_none()));
    let ids: Vec<String> = again
        .iter()
        .map(|c| report_of(c)["turn_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, turn_ids);
}

/// The seed's input rule and a background judged check on every answer.
const BACKGROUND_CONFIG: &str = r#"{"default_agent": "orders", "agents": {"orders": {"published": "3", "versions": {"3": {
    "blocked_reply": "Not allowed.",
    "live_checks": [
        {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
        {"name": "tone", "stage": "output", "kind": "polite_tone", "mode": "background", "sample": 1, "judge_model": "judge-1"}
    ]}}}}}"#;

#[test]
fn a_report_the_sidecar_did_not_take_is_sent_again_until_stored() {
    let mut host = livecheck(CONFIG);
    refused_turn(&mut host);
    host.advance_time(TICK);
    let first = reports(&host).remove(0);
    // The sidecar is down: the report waits and goes again, the same report.
    host.fail_callout(first.token).unwrap();
    host.advance_time(Duration::from_millis(600));
    let second = reports(&host).remove(0);
    assert_eq!(second.body, first.body);
    host.answer_callout(second.token, &[(":status", "503")], b"")
        .unwrap();
    host.advance_time(Duration::from_millis(1_000));
    let third = reports(&host).remove(0);
    assert_eq!(third.body, first.body);
    host.answer_callout(third.token, &[(":status", "200")], b"{}")
        .unwrap();
    host.advance_time(Duration::from_secs(10));
    assert!(reports(&host).is_empty(), "stored: not sent again");
    assert_eq!(host.metric("livecheck.reports.retried"), Some(2));
}

#[test]
fn a_streamed_turn_reports_its_results_too() {
    for vendor in VENDORS {
        for (pieces, outcome) in [
            (vec!["Your order ", "ships."], "passed"),
            (vec!["Pay to NL91ABNA0417164300", " now."], "failed"),
        ] {
            let config = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {"live_checks": [
                {"name": "no-iban", "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18}]}}}}}"#;
            let mut host = livecheck(config);
            let s = send_request(
                &mut host,
                vendor.path(),
                &[],
                &vendor.request(CLEAN_QUESTION, true),
                Chunking::Whole,
            );
            send_answer(
                &mut host,
                s,
                &[("content-type", "text/event-stream")],
                &stream(vendor, &pieces).concat(),
                Chunking::Bytes(7),
            );
            let turn_id = host
                .caller_received(s)
                .header("x-core-response-id")
                .unwrap()
                .to_owned();
            host.finish_stream(s).unwrap();
            host.advance_time(TICK);
            let report = report_of(&reports(&host)[0]);
            assert_eq!(report["turn_id"], turn_id.as_str());
            let upstream_id = report["response_id"].as_str().unwrap();
            assert!(
                ["msg_", "chatcmpl-", "resp_"]
                    .iter()
                    .any(|p| upstream_id.starts_with(p)),
                "{upstream_id}"
            );
            assert_eq!(report["results"][0]["outcome"], outcome, "{vendor:?}");
            assert_eq!(report["results"].as_array().unwrap().len(), 1);
        }
    }
}

#[test]
fn a_half_minute_sidecar_outage_at_200_turns_a_second_loses_no_report() {
    // The soak's sidecar restarts (SIGKILL, start, PostgreSQL restart) took seconds; a Kubernetes
    // pod restart takes tens. Every report of the outage waits and is stored once it is back.
    let mut host = livecheck(CONFIG);
    let turns = 6_000;
    let mut ids = BTreeSet::new();
    for _ in 0..turns {
        ids.insert(refused_turn(&mut host));
        host.advance_time(Duration::from_millis(5));
        for c in reports(&host) {
            host.fail_callout(c.token).unwrap();
        }
    }
    let mut stored = BTreeSet::new();
    for _ in 0..200 {
        host.advance_time(TICK);
        for c in reports(&host) {
            for report in reports_in(&c) {
                stored.insert(report["turn_id"].as_str().unwrap().to_owned());
            }
            host.answer_callout(c.token, &[(":status", "200")], b"{}")
                .unwrap();
        }
    }
    assert_eq!(host.metric("livecheck.reports.dropped"), None);
    assert_eq!(stored.len(), turns);
    assert_eq!(
        stored, ids,
        "every turn's report, under the id its caller got"
    );
}

#[test]
fn a_full_outbox_drops_reports_and_counts_them() {
    let mut host = livecheck(CONFIG);
    // No tick runs: every report waits. The outbox holds 16,384.
    for _ in 0..16_390 {
        refused_turn(&mut host);
    }
    assert_eq!(host.metric("livecheck.reports.dropped"), Some(6));
}

#[test]
fn a_call_the_filter_does_not_check_reports_nothing() {
    let mut host = livecheck(CONFIG);
    let s = host.new_stream();
    host.send_request_headers(s, &[(":method", "GET"), (":path", "/v1/models")], true)
        .unwrap();
    host.send_response_headers(s, &[(":status", "200")], true)
        .unwrap();
    assert!(host
        .caller_received(s)
        .header("x-core-response-id")
        .is_none());
    host.finish_stream(s).unwrap();
    host.advance_time(TICK);
    assert!(reports(&host).is_empty());
}

#[test]
fn the_upstream_id_is_reported_whatever_reads_the_answer() {
    let input_only = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {"live_checks": [
        {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"}]}}}}}"#;
    let background = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {"live_checks": [
        {"name": "tone", "stage": "output", "kind": "polite_tone", "mode": "background", "sample": 1, "judge_model": "j"}]}}}}}"#;
    for config in [input_only, background] {
        for vendor in VENDORS {
            for streamed in [false, true] {
                let mut host = livecheck(config);
                let s = send_request(
                    &mut host,
                    vendor.path(),
                    &[],
                    &vendor.request(CLEAN_QUESTION, streamed),
                    Chunking::Whole,
                );
                let (content_type, body) = if streamed {
                    (
                        "text/event-stream",
                        stream(vendor, &["Your order ", "ships."]).concat(),
                    )
                } else {
                    ("application/json", vendor.answer(CLEAN_ANSWER))
                };
                send_answer(
                    &mut host,
                    s,
                    &[("content-type", content_type)],
                    &body,
                    Chunking::Bytes(5),
                );
                assert_eq!(host.caller_received(s).body_text(), body, "untouched");
                host.finish_stream(s).unwrap();
                host.advance_time(TICK);
                let report = report_of(&reports(&host)[0]);
                let id = report["response_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                assert!(
                    body.contains(&format!("\"{id}\"")) && id.len() > 3,
                    "{vendor:?} streamed={streamed}: {id:?}"
                );
            }
        }
    }
}
