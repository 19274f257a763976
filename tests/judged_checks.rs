//! Judged checks through the built `.wasm` in the harness; the test answers the judge's callouts.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Callout, Host, StreamId};

/// Two judged input checks and one judged output check, plus the router list.
const JUDGED: &str = r#"{"default_agent": "a", "router_models": ["router/auto"], "agents": {"a": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "live_checks": [
        {"name": "on-topic", "stage": "input", "kind": "custom_rule", "expected": "The question is about orders.", "timeout_ms": 2000},
        {"name": "polite-in", "stage": "input", "kind": "polite_tone"},
        {"name": "polite-out", "stage": "output", "kind": "polite_tone", "judge_model": "judge-1"}
    ]}}}}}"#;

fn verdict(outcome: &str) -> String {
    format!(
        r#"{{"outcome": "{outcome}", "score": 0.5, "reason": "because", "usage": {{"input_tokens": 3, "output_tokens": 1}}}}"#
    )
}

fn host() -> Host {
    livecheck(JUDGED)
}

fn ask(host: &mut Host, vendor: Vendor) -> StreamId {
    send_request(
        host,
        vendor.path(),
        &[("authorization", "Bearer sk-turn")],
        &vendor.request(CLEAN_QUESTION, false),
        Chunking::Bytes(7),
    )
}

/// A clean question that asks for a streamed answer, its judged input checks passed.
fn ask_streamed_and_passed(host: &mut Host, vendor: Vendor) -> StreamId {
    let s = send_request(
        host,
        vendor.path(),
        &[("authorization", "Bearer sk-turn")],
        &vendor.request(CLEAN_QUESTION, true),
        Chunking::Whole,
    );
    answer_all(host, "passed");
    s
}

fn judge_request(c: &Callout) -> serde_json::Value {
    json(&c.body)
}

fn answer_all(host: &mut Host, outcome: &str) {
    for c in host.pending_callouts() {
        host.answer_callout(c.token, &[(":status", "200")], verdict(outcome).as_bytes())
            .unwrap();
    }
}

#[test]
fn judged_input_checks_go_out_in_parallel_with_the_turns_key_before_anything_goes_upstream() {
    for vendor in VENDORS {
        let mut host = host();
        let s = ask(&mut host, vendor);
        let callouts = host.pending_callouts();
        assert_eq!(callouts.len(), 2, "both judged input checks at once");
        assert!(common::question_held(&host, s), "held until judged");
        for c in &callouts {
            assert_eq!(c.cluster, "livecheck-judge");
            assert_eq!(c.header(":path"), Some("/v1/judge"));
            assert_eq!(c.header("authorization"), Some("Bearer sk-turn"));
            let req = judge_request(c);
            assert_eq!(req["stage"], "input");
            assert!(req["text"].as_str().unwrap().contains(CLEAN_QUESTION));
        }
        let on_topic = callouts
            .iter()
            .find(|c| judge_request(c)["kind"] == "custom_rule")
            .unwrap();
        assert_eq!(
            judge_request(on_topic)["rule"],
            "The question is about orders."
        );
        assert_eq!(
            on_topic.timeout,
            Some(std::time::Duration::from_millis(2000))
        );
        answer_all(&mut host, "passed");
        let up = host.upstream_received(s);
        assert!(
            up.end_of_stream,
            "{vendor:?}: the question went on once both passed"
        );
        assert_eq!(host.metric("livecheck.a.on-topic.passed"), Some(1));
    }
}

#[test]
fn the_first_failing_verdict_refuses_the_question_without_waiting_for_the_rest() {
    for vendor in VENDORS {
        let mut host = host();
        let s = ask(&mut host, vendor);
        let callouts = host.pending_callouts();
        let polite = callouts
            .iter()
            .find(|c| judge_request(c)["kind"] == "polite_tone")
            .unwrap();
        host.answer_callout(
            polite.token,
            &[(":status", "200")],
            verdict("failed").as_bytes(),
        )
        .unwrap();
        let caller = host.caller_received(s);
        assert_eq!(
            caller.header("x-core-check"),
            Some(r#"stage=input, check="polite-in", code=input_check_failed"#)
        );
        assert_eq!(vendor.text_of(&json(&caller.body)), "Not allowed.");
        assert!(common::question_held(&host, s));
        // The other verdict arrives later and changes nothing.
        answer_all(&mut host, "passed");
        assert!(common::question_held(&host, s));
        assert!(!host.vm_failed());
    }
}

#[test]
fn a_judge_that_cannot_decide_fails_closed() {
    // A timeout (Envoy answers 504), a 5xx, garbage, a reset.
    type Answer = fn(&mut Host, u32);
    let answers: [(&str, Answer); 4] = [
        // on-topic waits 2 s; polite-in's default 10 s is still running.
        ("timeout", |h, _| {
            h.advance_time(std::time::Duration::from_millis(2100))
        }),
        ("5xx", |h, t| {
            h.answer_callout(t, &[(":status", "503")], b"upstream down")
                .unwrap()
        }),
        ("garbage", |h, t| {
            h.answer_callout(t, &[(":status", "200")], b"{not a verdict")
                .unwrap()
        }),
        ("reset", |h, t| h.fail_callout(t).unwrap()),
    ];
    for (what, answer) in answers {
        let mut host = host();
        let vendor = Vendor::Chat;
        let s = ask(&mut host, vendor);
        let callouts = host.pending_callouts();
        let on_topic = callouts
            .iter()
            .find(|c| judge_request(c)["kind"] == "custom_rule")
            .unwrap();
        answer(&mut host, on_topic.token);
        let caller = host.caller_received(s);
        assert_eq!(
            caller.header("x-core-check"),
            Some(r#"stage=input, check="on-topic", code=check_errored"#),
            "{what}"
        );
        assert!(common::question_held(&host, s), "{what}");
        assert_eq!(
            host.metric("livecheck.a.on-topic.errored"),
            Some(1),
            "{what}"
        );
    }
}

#[test]
fn on_error_pass_lets_an_undecided_check_through() {
    let config = JUDGED.replace(
        r#""kind": "polite_tone"}"#,
        r#""kind": "polite_tone", "on_error": "pass"}"#,
    );
    let mut host = livecheck(&config);
    let s = ask(&mut host, Vendor::Anthropic);
    for c in host.pending_callouts() {
        host.answer_callout(c.token, &[(":status", "500")], b"")
            .unwrap();
    }
    // on-topic has no on_error: it errored and stopped the turn; polite-in alone would have passed.
    assert_eq!(
        host.caller_received(s).header("x-core-check"),
        Some(r#"stage=input, check="on-topic", code=check_errored"#)
    );
    let config = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {"live_checks": [
        {"name": "tone", "stage": "input", "kind": "polite_tone", "on_error": "pass"}]}}}}}"#;
    let mut host = livecheck(config);
    let s = ask(&mut host, Vendor::Anthropic);
    for c in host.pending_callouts() {
        host.answer_callout(c.token, &[(":status", "500")], b"")
            .unwrap();
    }
    assert!(host.upstream_received(s).end_of_stream, "passed on error");
    assert_eq!(host.metric("livecheck.a.tone.errored"), Some(1));
}

#[test]
fn a_router_turn_without_a_judge_model_is_errored_at_once() {
    let mut host = host();
    let vendor = Vendor::Chat;
    let body = vendor
        .request(CLEAN_QUESTION, false)
        .replace("gpt-4.1-mini", "router/auto");
    let s = send_request(&mut host, vendor.path(), &[], &body, Chunking::Whole);
    assert_eq!(
        host.caller_received(s).header("x-core-check"),
        Some(r#"stage=input, check="on-topic", code=check_errored"#)
    );
    assert!(common::question_held(&host, s));
}

#[test]
fn a_judged_output_check_holds_the_answer_until_its_verdict() {
    for (outcome, withheld) in [("passed", false), ("failed", true)] {
        for vendor in VENDORS {
            let mut host = host();
            let s = ask(&mut host, vendor);
            answer_all(&mut host, "passed");
            let answer = vendor.answer(CLEAN_ANSWER);
            send_answer(
                &mut host,
                s,
                &[("content-type", "application/json")],
                &answer,
                Chunking::Bytes(7),
            );
            assert!(common::answer_held(&host, s), "headers held while judged");
            let callouts = host.pending_callouts();
            assert_eq!(callouts.len(), 1);
            let req = judge_request(&callouts[0]);
            assert_eq!(
                (req["stage"].as_str(), req["judge_model"].as_str()),
                (Some("output"), Some("judge-1"))
            );
            assert_eq!(req["text"], CLEAN_ANSWER);
            assert_eq!(req["question"], CLEAN_QUESTION);
            assert_eq!(callouts[0].header("authorization"), Some("Bearer sk-turn"));
            answer_all(&mut host, outcome);
            let caller = host.caller_received(s);
            assert_eq!(caller.status(), Some(200));
            if withheld {
                // The answer's headers went on when they came: the check is named in the stats.
                assert_eq!(caller.header("x-core-check"), None);
                assert_eq!(host.metric("livecheck.a.polite-out.failed"), Some(1));
                let reply = json(&caller.body);
                assert_eq!(
                    vendor.stop_marker(&reply),
                    vendor.refused_marker(),
                    "{reply}"
                );
                assert_eq!(vendor.text_of(&reply), "Not allowed.");
            } else {
                assert!(caller.header("x-core-check").is_none());
                assert_eq!(caller.body_text(), answer, "{vendor:?}");
            }
        }
    }
}

#[test]
fn a_streamed_answer_is_held_whole_until_the_judge_passed_it() {
    for (outcome, passed) in [("passed", true), ("failed", false), ("errored", false)] {
        for vendor in VENDORS {
            let mut host = host();
            let s = ask_streamed_and_passed(&mut host, vendor);
            let pieces = ["Your order ", "ships ", "tomorrow."];
            let body = stream(vendor, &pieces).concat();
            send_answer(
                &mut host,
                s,
                &[("content-type", "text/event-stream")],
                &body,
                Chunking::Bytes(7),
            );
            let before = read_stream(vendor, &host.caller_received(s).body_text());
            assert_eq!(
                before.text, "",
                "{vendor:?}: nothing of the answer before the verdict"
            );
            let callouts = host.pending_callouts();
            assert_eq!(callouts.len(), 1, "{vendor:?}");
            assert_eq!(judge_request(&callouts[0])["text"], pieces.concat());
            answer_all(&mut host, outcome);
            let caller = host.caller_received(s);
            let got = read_stream(vendor, &caller.body_text());
            if passed {
                assert_eq!(got.text, pieces.concat(), "{vendor:?}");
            } else {
                assert_eq!(got.text, "Not allowed.", "{vendor:?} {outcome}");
                assert!(!caller.body_text().contains("tomorrow"));
            }
            assert!(
                caller.end_of_stream,
                "{vendor:?} {outcome}: the stream completed"
            );
            assert_eq!(
                host.metric(&format!("livecheck.a.polite-out.{outcome}")),
                Some(1)
            );
        }
    }
}

#[test]
fn a_background_check_is_handed_to_the_sidecar_after_the_turn_without_touching_it() {
    let config = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {"live_checks": [
        {"name": "tone", "stage": "output", "kind": "polite_tone", "mode": "background", "sample": 1, "judge_model": "judge-1"}]}}}}}"#;
    for vendor in VENDORS {
        let mut host = livecheck(config);
        let s = ask(&mut host, vendor);
        assert!(
            host.pending_callouts().is_empty(),
            "background checks never hold the question"
        );
        let answer = vendor.answer(CLEAN_ANSWER);
        send_answer(
            &mut host,
            s,
            &[("content-type", "application/json")],
            &answer,
            Chunking::Bytes(7),
        );
        assert_eq!(
            host.caller_received(s).body_text(),
            answer,
            "the turn is not changed"
        );
        assert!(
            host.pending_callouts().is_empty(),
            "nothing is sent from the turn itself"
        );
        host.finish_stream(s).unwrap();
        assert_eq!(
            host.tick_period(),
            Some(std::time::Duration::from_millis(200))
        );
        host.advance_time(std::time::Duration::from_millis(250));
        let callouts = host.pending_callouts();
        assert_eq!(callouts.len(), 1, "{vendor:?}");
        assert_eq!(callouts[0].header(":path"), Some("/v1/results"));
        assert_eq!(callouts[0].header("authorization"), Some("Bearer sk-turn"));
        let report = judge_request(&callouts[0]);
        assert_eq!(report["agent"], "a");
        assert_eq!(report["background"][0]["name"], "tone");
        assert_eq!(report["background"][0]["judge"]["text"], CLEAN_ANSWER);
        // An unreachable sidecar is counted, and changes nothing.
        host.fail_callout(callouts[0].token).unwrap();
        assert_eq!(host.metric("livecheck.reports.retried"), Some(1));
        assert!(!host.vm_failed());
    }
}

#[test]
fn a_streamed_answer_feeds_background_checks_once_it_completed() {
    // Rules block the stream (held back 18 characters); the background check reads the answer
    // from a copy after the stream ended normally, and never from a cut one.
    let config = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {"live_checks": [
        {"name": "no-iban", "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18},
        {"name": "tone", "stage": "output", "kind": "polite_tone", "mode": "background", "sample": 1, "judge_model": "judge-1"}]}}}}}"#;
    for vendor in VENDORS {
        for (pieces, expected) in [
            (vec!["Your order ", "ships."], Some("Your order ships.")),
            (vec!["Pay to NL91ABNA0417164300", " now."], None),
        ] {
            let mut host = livecheck(config);
            let s = send_request(
                &mut host,
                vendor.path(),
                &[],
                &vendor.request(CLEAN_QUESTION, true),
                Chunking::Whole,
            );
            let body = stream(vendor, &pieces).concat();
            send_answer(
                &mut host,
                s,
                &[("content-type", "text/event-stream")],
                &body,
                Chunking::Bytes(7),
            );
            host.finish_stream(s).unwrap();
            host.advance_time(std::time::Duration::from_millis(250));
            let texts: Vec<String> = host
                .pending_callouts()
                .iter()
                .flat_map(|c| {
                    let report = judge_request(c);
                    report["background"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|b| b["judge"]["text"].as_str().unwrap().to_owned())
                        .collect::<Vec<_>>()
                })
                .collect();
            assert_eq!(
                texts,
                expected.map(str::to_owned).into_iter().collect::<Vec<_>>(),
                "{vendor:?}"
            );
        }
    }
}

/// A streamed answer of over 8 KiB (200 sentences) through `config`, sent in 512-byte chunks after
/// a question that passed; the host, the stream and the answer's text.
fn long_held_stream(config: &str, vendor: Vendor) -> (Host, StreamId, String) {
    let mut host = livecheck(config);
    let s = ask_streamed_and_passed(&mut host, vendor);
    let pieces: Vec<String> = (0..200).map(|i| format!("order {i} ships. ")).collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let body = stream(vendor, &pieces).concat();
    assert!(body.len() > 8192, "{vendor:?}");
    send_answer(
        &mut host,
        s,
        &[("content-type", "text/event-stream")],
        &body,
        Chunking::Bytes(512),
    );
    (host, s, pieces.concat())
}

#[test]
fn a_held_stream_past_max_body_bytes_goes_on_unjudged_when_its_judged_check_passes_on_error() {
    // `on_error: "pass"` on the only judged output check: past the limit it cannot decide and lets
    // the answer through, as for a non-streamed answer over the limit: what was held is sent, the
    // rest streams, the judge is never asked, and the result says errored, passed on error.
    let config = with_max_body_bytes(JUDGED, 4096).replacen(
        r#""judge_model": "judge-1"}"#,
        r#""judge_model": "judge-1", "on_error": "pass"}"#,
        1,
    );
    assert_ne!(config, JUDGED);
    for vendor in VENDORS {
        let (mut host, s, text) = long_held_stream(&config, vendor);
        assert!(
            callouts_to(&host, "/v1/judge").is_empty(),
            "{vendor:?}: no judge call"
        );
        let caller = host.caller_received(s);
        let got = read_stream(vendor, &caller.body_text());
        assert_eq!(got.text, text, "{vendor:?}");
        assert!(!caller.reset, "{vendor:?}");
        assert_eq!(
            host.metric("livecheck.a.polite-out.errored"),
            Some(1),
            "{vendor:?}"
        );
        host.finish_stream(s).unwrap();
        host.advance_time(std::time::Duration::from_millis(250));
        let report = report_of(&report_callouts(&host)[0]);
        let result = report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "polite-out")
            .unwrap()
            .clone();
        assert_eq!(result["outcome"], "errored", "{vendor:?}");
        assert_eq!(result["passed_on_error"], true, "{vendor:?}");
    }
}

#[test]
fn a_held_stream_past_max_body_bytes_is_withheld_as_errored_without_asking_the_judge() {
    // The held round lives in the filter's memory: bounded by `max_body_bytes`, as a
    // non-streamed answer is, and then undecidable (fail closed), so the judge is never asked.
    let config = with_max_body_bytes(JUDGED, 4096);
    for vendor in VENDORS {
        let (host, s, _) = long_held_stream(&config, vendor);
        assert!(
            host.pending_callouts().is_empty(),
            "{vendor:?}: no judge call"
        );
        let caller = host.caller_received(s);
        let got = read_stream(vendor, &caller.body_text());
        assert_eq!(got.text, "Not allowed.", "{vendor:?}");
        assert!(!caller.body_text().contains("ships"), "{vendor:?}");
        assert!(
            caller.reset,
            "{vendor:?}: closed, so the model stops generating"
        );
        assert_eq!(
            host.metric("livecheck.a.polite-out.errored"),
            Some(1),
            "{vendor:?}"
        );
    }
}

#[test]
fn a_streamed_round_with_the_judge_ends_as_unreadable_when_the_rest_of_the_stream_cannot_be_read() {
    // The round's text is whole and with the judge; then the upstream sends an event that cannot
    // be read, or more than the filter may hold (SSE comments past `max_body_bytes`). The stream
    // ends there, as any unreadable stream does (fail closed): the output check errored, and the
    // judge's verdict, arriving after, changes nothing. The same when that tail comes in the
    // round's last chunk (`split` false): then the judge is never asked.
    let small = with_max_body_bytes(JUDGED, 4096);
    let comments = ": keep-alive\n\n".repeat(400);
    let tails: [(&str, &str, &[u8]); 2] = [
        ("unreadable", JUDGED, b"data: {\"not json\n\n"),
        ("outgrown", &small, comments.as_bytes()),
    ];
    for (why, config, tail) in tails {
        for (verdict, vendor, split) in ["passed", "failed"]
            .into_iter()
            .flat_map(|o| VENDORS.into_iter().map(move |v| (o, v)))
            .flat_map(|(o, v)| [(o, v, true), (o, v, false)])
        {
            let outcome = format!("{why} {verdict}, split {split}");
            let mut host = livecheck(config);
            let s = ask_streamed_and_passed(&mut host, vendor);
            let pieces = ["Your order ", "ships ", "tomorrow."];
            let body = stream(vendor, &pieces).concat();
            host.send_response_headers(
                s,
                &[(":status", "200"), ("content-type", "text/event-stream")],
                false,
            )
            .unwrap();
            if split {
                host.send_response_body(s, body.as_bytes(), false).unwrap();
                assert_eq!(host.pending_callouts().len(), 1, "{vendor:?}: judging");
                host.send_response_body(s, tail, false).unwrap();
            } else {
                // The tail in the round's last chunk: cut before the judge was asked.
                let whole = [body.as_bytes(), tail].concat();
                host.send_response_body(s, &whole, false).unwrap();
                assert!(host.pending_callouts().is_empty(), "{vendor:?}: not asked");
            }
            let caller = host.caller_received(s);
            let got = read_stream(vendor, &caller.body_text());
            assert_eq!(got.text, "Not allowed.", "{vendor:?} {outcome}");
            assert!(!caller.body_text().contains("tomorrow"), "{vendor:?}");
            assert_eq!(
                host.metric("livecheck.a.polite-out.errored"),
                Some(1),
                "{vendor:?} {outcome}: counted as a stream that cannot be read"
            );
            answer_all(&mut host, verdict);
            host.send_response_body(s, b"", true).unwrap();
            let caller = host.caller_received(s);
            assert_eq!(
                read_stream(vendor, &caller.body_text()).text,
                "Not allowed.",
                "{vendor:?} {outcome}: the verdict changes nothing"
            );
            assert!(caller.end_of_stream, "{vendor:?} {outcome}");
            for o in ["passed", "failed"] {
                assert_eq!(
                    host.metric(&format!("livecheck.a.polite-out.{o}")),
                    None,
                    "{vendor:?} {outcome}: one result for the check"
                );
            }
        }
    }
}
