//! Rule checks on every vendor × stage × outcome, through the built `.wasm` in the harness, under
//! 1-byte, 7-byte and whole-body chunkings.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::time::Duration;

use livecheck_harness::{Host, StreamId};

use common::fixtures::*;
use common::*;

const BLOCKED_REPLY: &str = "I cannot help with that. Never share a password in this conversation.";

#[test]
fn a_clean_question_reaches_upstream_unchanged() {
    for vendor in VENDORS {
        for chunking in CHUNKINGS {
            let mut host = livecheck(SEED);
            let body = vendor.request(CLEAN_QUESTION, false);
            let s = send_request(&mut host, vendor.path(), &[], &body, chunking);
            let up = host.upstream_received(s);
            assert_eq!(up.body_text(), body, "{vendor:?} {chunking:?}");
            assert!(up.end_of_stream);
            assert_eq!(up.header("accept-encoding"), Some("identity"));
            assert!(common::answer_held(&host, s));
            assert_eq!(host.metric("livecheck.orders.no-passwords.passed"), Some(1));
        }
    }
}

#[test]
fn a_forbidden_question_is_refused_in_the_vendors_shape_and_never_reaches_upstream() {
    for vendor in VENDORS {
        for chunking in CHUNKINGS {
            let mut host = livecheck(SEED);
            let body = vendor.request(FORBIDDEN_QUESTION, false);
            let s = send_request(&mut host, vendor.path(), &[], &body, chunking);
            assert!(common::question_held(&host, s), "{vendor:?} {chunking:?}");
            let caller = host.caller_received(s);
            assert_eq!(caller.status(), Some(200));
            assert_eq!(
                caller.header("x-core-check"),
                Some(r#"stage=input, check="no-passwords", code=input_check_failed"#)
            );
            assert_eq!(caller.header("content-type"), Some("application/json"));
            let reply = json(&caller.body);
            assert_eq!(
                vendor.stop_marker(&reply),
                vendor.refused_marker(),
                "{reply}"
            );
            assert_eq!(vendor.text_of(&reply), BLOCKED_REPLY);
            assert_eq!(host.metric("livecheck.orders.no-passwords.failed"), Some(1));
        }
    }
}

#[test]
fn a_forbidden_streamed_question_is_refused_as_server_sent_events() {
    for vendor in VENDORS {
        let mut host = livecheck(SEED);
        let body = vendor.request(FORBIDDEN_QUESTION, true);
        let s = send_request(&mut host, vendor.path(), &[], &body, Chunking::Bytes(7));
        assert!(common::question_held(&host, s));
        let caller = host.caller_received(s);
        assert_eq!(caller.header("content-type"), Some("text/event-stream"));
        assert!(caller.header("x-core-check").is_some());
        let events = caller.body_text();
        assert!(
            events.contains(vendor.refused_marker().rsplit('/').next().unwrap()),
            "{events}"
        );
        assert!(events.contains("I cannot help with that."), "{events}");
        if vendor == Vendor::Chat {
            assert!(events.ends_with("data: [DONE]\n\n"), "{events}");
        }
    }
}

#[test]
fn allow_on_headers_stop_iteration_changes_nothing_the_caller_or_upstream_sees() {
    // The filter never pauses in a headers callback, so the flag a mesh cannot set is not needed:
    // every turn goes the same with and without it.
    let turn = |allow: bool, question: &str, answer: &str| {
        let mut host = livecheck_with(SEED, allow).unwrap();
        let vendor = Vendor::Chat;
        let body = vendor.request(question, false);
        let s = send_request(&mut host, vendor.path(), &[], &body, Chunking::Bytes(7));
        let answer = vendor.answer(answer);
        if host.caller_received(s).headers.is_none() {
            send_answer(
                &mut host,
                s,
                &[("content-type", "application/json")],
                &answer,
                Chunking::Bytes(7),
            );
            if let Some(retry) = host.pending_callouts().first() {
                host.fail_callout(retry.token).unwrap();
            }
        }
        let (up, caller) = (host.upstream_received(s), host.caller_received(s));
        (
            up.body_text(),
            up.end_of_stream,
            caller.status(),
            caller.header("x-core-check").map(str::to_owned),
            caller.body_text(),
            caller.end_of_stream,
        )
    };
    for (question, answer) in [
        (CLEAN_QUESTION, CLEAN_ANSWER),
        (FORBIDDEN_QUESTION, CLEAN_ANSWER),
        (CLEAN_QUESTION, FORBIDDEN_ANSWER),
    ] {
        let without = turn(false, question, answer);
        assert_eq!(
            without,
            turn(true, question, answer),
            "{question} / {answer}"
        );
        assert!(without.5, "the caller got a whole answer");
    }
}

#[test]
fn a_clean_answer_reaches_the_caller_unchanged() {
    for vendor in VENDORS {
        for chunking in CHUNKINGS {
            let mut host = livecheck(SEED);
            let s = send_request(
                &mut host,
                vendor.path(),
                &[],
                &vendor.request(CLEAN_QUESTION, false),
                chunking,
            );
            let answer = vendor.answer(CLEAN_ANSWER);
            send_answer(
                &mut host,
                s,
                &[("content-type", "application/json")],
                &answer,
                chunking,
            );
            let caller = host.caller_received(s);
            assert_eq!(caller.status(), Some(200));
            assert_eq!(caller.body_text(), answer, "{vendor:?} {chunking:?}");
            assert!(caller.header("x-core-check").is_none());
            assert!(caller.end_of_stream && !caller.reset);
            assert_eq!(host.metric("livecheck.orders.no-iban.passed"), Some(1));
        }
    }
}

#[test]
fn a_forbidden_answer_is_withheld_in_the_vendors_shape_with_usage_kept() {
    for vendor in VENDORS {
        for chunking in CHUNKINGS {
            let mut host = livecheck(SEED);
            let s = send_request(
                &mut host,
                vendor.path(),
                &[],
                &vendor.request(CLEAN_QUESTION, false),
                chunking,
            );
            let answer = vendor.answer(FORBIDDEN_ANSWER);
            send_answer(
                &mut host,
                s,
                &[
                    ("content-type", "application/json"),
                    ("content-length", &answer.len().to_string()),
                ],
                &answer,
                chunking,
            );
            // The seed's no-iban recovers: the model is asked again through the sidecar, which
            // is unreachable here, so the first answer is withheld.
            let retry = host.pending_callouts();
            assert_eq!(retry.len(), 1);
            assert_eq!(retry[0].header(":path"), Some("/v1/retry"));
            host.fail_callout(retry[0].token).unwrap();
            let caller = host.caller_received(s);
            assert_eq!(caller.status(), Some(200));
            // The answer's headers went on when they came: the check is named in the stats.
            assert_eq!(caller.header("x-core-check"), None);
            assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
            assert!(
                caller
                    .header("content-length")
                    .is_none_or(|l| l == caller.body.len().to_string()),
                "the body changed size"
            );
            let text = caller.body_text();
            assert!(!text.contains("NL91"), "{vendor:?} {chunking:?}: {text}");
            let reply = json(&caller.body);
            assert_eq!(
                vendor.stop_marker(&reply),
                vendor.refused_marker(),
                "{reply}"
            );
            assert_eq!(vendor.text_of(&reply), BLOCKED_REPLY);
            let usage = &reply["usage"];
            assert!(
                usage["output_tokens"] == 7 || usage["completion_tokens"] == 7,
                "{reply}"
            );
            assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
        }
    }
}

/// A forbidden answer to a seed question, its retry refused (the sidecar is unreachable here): what
/// the caller received, under `config`, with the wasm filter's `allow_on_headers_stop_iteration`
/// as given; `wait` lets that much time pass (root ticks) before the answer's body comes.
fn withheld_answer(
    config: &str,
    allow: bool,
    vendor: Vendor,
    chunking: Chunking,
    wait: Duration,
) -> (Host, StreamId) {
    let mut host = livecheck_with(config, allow).unwrap();
    let body = vendor.request(CLEAN_QUESTION, false);
    let s = send_request(&mut host, vendor.path(), &[], &body, chunking);
    let answer = vendor.answer(FORBIDDEN_ANSWER);
    let headers = [
        (":status", "200"),
        ("content-type", "application/json"),
        ("content-length", &answer.len().to_string()),
    ];
    host.send_response_headers(s, &headers, false).unwrap();
    host.advance_time(wait);
    for chunk in chunking.split(answer.as_bytes()) {
        host.send_response_body(s, chunk, false).unwrap();
    }
    host.send_response_body(s, b"", true).unwrap();
    let retry = host.pending_callouts();
    assert_eq!(retry.len(), 1, "{vendor:?} {chunking:?}");
    host.fail_callout(retry[0].token).unwrap();
    (host, s)
}

#[test]
fn with_hold_answer_headers_a_withheld_answer_names_its_check_and_its_length() {
    let config = with_setting(SEED, "hold_answer_headers", "true");
    for vendor in VENDORS {
        for chunking in CHUNKINGS {
            let (host, s) = withheld_answer(&config, true, vendor, chunking, Duration::ZERO);
            let caller = host.caller_received(s);
            assert_eq!(caller.status(), Some(200));
            assert_eq!(
                caller.header("x-core-check"),
                Some(r#"stage=output, check="no-iban", code=output_check_failed"#),
                "{vendor:?} {chunking:?}"
            );
            assert_eq!(
                caller.header("content-length"),
                Some(caller.body.len().to_string().as_str())
            );
            assert!(caller.end_of_stream);
            let reply = json(&caller.body);
            assert_eq!(vendor.stop_marker(&reply), vendor.refused_marker());
            assert_eq!(vendor.text_of(&reply), BLOCKED_REPLY);
            assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
        }
    }
    // A clean answer: as it came, and no X-Core-Check.
    let mut host = livecheck_with(&config, true).unwrap();
    let vendor = Vendor::Chat;
    let s = send_request(
        &mut host,
        vendor.path(),
        &[],
        &vendor.request(CLEAN_QUESTION, false),
        Chunking::Whole,
    );
    let answer = vendor.answer(CLEAN_ANSWER);
    send_answer(
        &mut host,
        s,
        &[("content-type", "application/json")],
        &answer,
        Chunking::Bytes(7),
    );
    let caller = host.caller_received(s);
    assert_eq!(caller.body_text(), answer);
    assert_eq!(caller.header("x-core-check"), None);
    assert!(caller.end_of_stream);
}

/// The setting on an Envoy that cannot hold headers (the flag unset, as in a mesh): the body never
/// comes behind them, so a tick lets them go after a second; the answer is then decided as with
/// headers gone, and the VM says why in its log.
#[test]
fn held_headers_that_get_no_body_go_on_after_a_second_and_the_answer_is_still_checked() {
    let config = with_setting(SEED, "hold_answer_headers", "true");
    let vendor = Vendor::Anthropic;
    let (host, s) = withheld_answer(
        &config,
        false,
        vendor,
        Chunking::Bytes(7),
        Duration::from_millis(1500),
    );
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(200));
    assert_eq!(caller.header("x-core-check"), None);
    assert!(caller.end_of_stream);
    let text = caller.body_text();
    assert!(!text.contains("NL91"), "{text}");
    let reply = json(&caller.body);
    assert_eq!(vendor.stop_marker(&reply), vendor.refused_marker());
    assert!(host.logs_contain("allow_on_headers_stop_iteration"));

    // Before the second is up nothing reached the caller.
    let mut host = livecheck_with(&config, false).unwrap();
    let s = send_request(
        &mut host,
        vendor.path(),
        &[],
        &vendor.request(CLEAN_QUESTION, false),
        Chunking::Whole,
    );
    let headers = [(":status", "200"), ("content-type", "application/json")];
    host.send_response_headers(s, &headers, false).unwrap();
    host.send_response_body(s, vendor.answer(CLEAN_ANSWER).as_bytes(), true)
        .unwrap();
    host.advance_time(Duration::from_millis(500));
    assert!(host.caller_received(s).headers.is_none());
    host.advance_time(Duration::from_millis(1000));
    let caller = host.caller_received(s);
    assert_eq!(caller.body_text(), vendor.answer(CLEAN_ANSWER));
    assert!(caller.end_of_stream);
}

#[test]
fn an_answer_that_cannot_be_read_is_withheld_as_errored() {
    for vendor in VENDORS {
        let mut host = livecheck(SEED);
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
            &[
                ("content-type", "application/json"),
                ("content-encoding", "gzip"),
            ],
            "\u{1f}\u{8b} not really gzip",
            Chunking::Whole,
        );
        let caller = host.caller_received(s);
        assert_eq!(
            caller.header("x-core-check"),
            Some(r#"stage=output, check="no-iban", code=check_errored"#),
            "{vendor:?}"
        );
        assert!(!caller.body_text().contains("not really"));
        assert!(
            caller.header("content-encoding").is_none(),
            "the refusal is not gzip"
        );
        let reply = json(&caller.body);
        assert_eq!(
            vendor.stop_marker(&reply),
            vendor.refused_marker(),
            "{reply}"
        );
        assert_eq!(host.metric("livecheck.orders.no-iban.errored"), Some(1));
    }
}

#[test]
fn upstream_errors_pass_through_unchecked() {
    let mut host = livecheck(SEED);
    let vendor = Vendor::Anthropic;
    let s = send_request(
        &mut host,
        vendor.path(),
        &[],
        &vendor.request(CLEAN_QUESTION, false),
        Chunking::Whole,
    );
    let error = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    host.send_response_headers(
        s,
        &[(":status", "529"), ("content-type", "application/json")],
        false,
    )
    .unwrap();
    host.send_response_body(s, error.as_bytes(), true).unwrap();
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(529));
    assert_eq!(caller.body_text(), error);
}

#[test]
fn bad_request_bodies_are_refused_with_the_vendors_error_shape() {
    for vendor in VENDORS {
        let mut host = livecheck(SEED);
        let s = send_request(
            &mut host,
            vendor.path(),
            &[],
            "{not json",
            Chunking::Bytes(3),
        );
        let caller = host.caller_received(s);
        assert_eq!(caller.status(), Some(400), "{vendor:?}");
        let body = json(&caller.body);
        assert!(body["error"]["message"].is_string(), "{body}");
        assert!(common::question_held(&host, s));
    }
}

#[test]
fn compressed_request_bodies_are_refused_415() {
    let mut host = livecheck(SEED);
    let vendor = Vendor::Chat;
    let s = send_request(
        &mut host,
        vendor.path(),
        &[("content-encoding", "gzip")],
        &vendor.request(CLEAN_QUESTION, false),
        Chunking::Whole,
    );
    assert_eq!(host.caller_received(s).status(), Some(415));
    assert!(common::question_held(&host, s));
}

#[test]
fn bodies_over_the_limit_are_refused_413_whether_declared_or_not() {
    let config = SEED.replacen(
        "\"agent_header\"",
        "\"max_body_bytes\": 64, \"agent_header\"",
        1,
    );
    let vendor = Vendor::Responses;
    let body = vendor.request(CLEAN_QUESTION, false);
    assert!(body.len() > 64);
    for declared in [true, false] {
        let mut host = livecheck(&config);
        let len = body.len().to_string();
        let headers: &[(&str, &str)] = if declared {
            &[("content-length", &len)]
        } else {
            &[]
        };
        let s = send_request(
            &mut host,
            vendor.path(),
            headers,
            &body,
            Chunking::Bytes(16),
        );
        assert_eq!(
            host.caller_received(s).status(),
            Some(413),
            "declared: {declared}"
        );
        assert!(common::question_held(&host, s));
    }
}

#[test]
fn an_unknown_agent_is_refused_not_let_through() {
    let mut host = livecheck(SEED);
    let vendor = Vendor::Anthropic;
    let s = send_request(
        &mut host,
        vendor.path(),
        &[("x-core-agent", "nobody")],
        &vendor.request(CLEAN_QUESTION, false),
        Chunking::Whole,
    );
    assert_eq!(host.caller_received(s).status(), Some(400));
    assert!(common::question_held(&host, s));
}

#[test]
fn a_draft_version_is_selected_by_header() {
    let config = r#"{
        "default_agent": "a",
        "agents": {"a": {"published": "1", "versions": {
            "1": {"live_checks": []},
            "2": {"blocked_reply": "draft says no", "live_checks": [
                {"name": "no-orders", "stage": "input", "kind": "not_contains", "expected": "order"}]}
        }}}
    }"#;
    let vendor = Vendor::Chat;
    let body = vendor.request(CLEAN_QUESTION, false);
    let mut host = livecheck(config);
    let published = send_request(&mut host, vendor.path(), &[], &body, Chunking::Whole);
    assert!(host.upstream_received(published).headers.is_some());
    let draft = send_request(
        &mut host,
        vendor.path(),
        &[("x-core-version", "2")],
        &body,
        Chunking::Whole,
    );
    assert_eq!(
        vendor.text_of(&json(&host.caller_received(draft).body)),
        "draft says no"
    );
}

#[test]
fn a_bad_configuration_is_refused_by_the_filter() {
    let config = r#"{"agents": {"a": {"published": "1", "versions": {"1": {"live_checks": [
        {"name": "x", "stage": "input", "kind": "response_time"},
        {"name": "y", "stage": "output", "kind": "matches_pattern", "pattern": "\\w+"}
    ]}}}}}"#;
    let refused = try_livecheck(config);
    assert!(matches!(
        refused,
        Err(livecheck_harness::HarnessError::ConfigRejected)
    ));
}

/// A clean Chat question, then an answer of over 1,000 bytes in 64-byte chunks, through `config`
/// (whose `max_body_bytes` is 400): the host, the stream and the answer the upstream sent.
fn an_answer_over_the_limit(
    config: &str,
) -> (livecheck_harness::Host, livecheck_harness::StreamId, String) {
    let vendor = Vendor::Chat;
    let mut host = livecheck(config);
    let question = vendor.request(CLEAN_QUESTION, false);
    assert!(question.len() <= 400);
    let s = send_request(&mut host, vendor.path(), &[], &question, Chunking::Whole);
    let answer = vendor.answer(&"Your order ships tomorrow. ".repeat(40));
    assert!(answer.len() > 1000);
    send_answer(
        &mut host,
        s,
        &[("content-type", "application/json")],
        &answer,
        Chunking::Bytes(64),
    );
    assert!(host.caller_received(s).end_of_stream && !host.caller_received(s).reset);
    (host, s, answer)
}

#[test]
fn an_answer_over_the_limit_is_withheld_whole_and_nothing_more_of_it_reaches_the_caller() {
    let config = SEED.replacen(
        "\"agent_header\"",
        "\"max_body_bytes\": 400, \"agent_header\"",
        1,
    );
    let (host, s, _) = an_answer_over_the_limit(&config);
    // Exactly the withheld reply: decided unread (every check errored) once the held body passed
    // the limit, and the rest of the upstream's answer dropped.
    let caller = host.caller_received(s);
    let reply = json(&caller.body);
    assert_eq!(
        Vendor::Chat.stop_marker(&reply),
        Vendor::Chat.refused_marker(),
        "{reply}"
    );
    assert!(!caller.body_text().contains("ships tomorrow"));
    assert_eq!(host.metric("livecheck.orders.no-iban.errored"), Some(1));
}

#[test]
fn an_answer_over_the_limit_that_every_check_lets_through_undecided_arrives_whole() {
    let config = r#"{"default_agent": "a", "max_body_bytes": 400, "agents": {"a": {"published": "1", "versions": {"1": {
        "live_checks": [{"name": "tone", "stage": "output", "kind": "polite_tone", "judge_model": "judge-1", "on_error": "pass"}]}}}}}"#;
    let (host, s, answer) = an_answer_over_the_limit(config);
    assert_eq!(
        host.caller_received(s).body_text(),
        answer,
        "nothing of it dropped"
    );
    assert_eq!(host.metric("livecheck.a.tone.errored"), Some(1));
}
