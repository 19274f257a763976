//! Tool-call checks through the built `.wasm` in the harness: the test answers the judge's
//! `/v1/tool-check` callouts. Every vendor, non-streamed and streamed, under several chunkings.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Callout, Host, StreamId};
use serde_json::{json, Value};

const POLICY: &str = r#"{"default_agent": "mail", "router_models": ["router/auto"], "agents": {"mail": {"published": "1", "versions": {"1": {
    "model": "gpt-4.1-mini",
    "allowed_tools": ["send_email", "lookup_*"],
    "tool_checks": [
        {"name": "no-billing", "tool": "send_email", "when": "The email contains billing information", "reason": "No billing info in email."},
        {"name": "on-task", "when": "The call does not match what the user asked for", "timeout_ms": 3000},
        {"name": "no-rival", "args": [{"pointer": "/to", "not_contains": "@rival.example"}]}
    ]}}}}}"#;

const TOOL_CHECK: &str = "/v1/tool-check";

/// A call the model makes: tool name and JSON arguments.
type Call<'a> = (&'a str, Value);

fn email(to: &str) -> Call<'static> {
    (
        "send_email",
        json!({"to": to, "body": "The notes from Monday."}),
    )
}

/// A non-streamed answer: a sentence, then `calls`.
fn answer_with(vendor: Vendor, calls: &[Call<'_>]) -> String {
    let args = |v: &Value| v.to_string();
    let body = match vendor {
        Vendor::Anthropic => {
            let mut content = vec![json!({"type": "text", "text": "Sending it."})];
            for (i, (name, input)) in calls.iter().enumerate() {
                content.push(json!({"type": "tool_use", "id": format!("toolu_{i}"), "name": name, "input": input}));
            }
            json!({"id": "msg_t", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                   "content": content, "stop_reason": "tool_use", "stop_sequence": null,
                   "usage": {"input_tokens": 11, "output_tokens": 7}})
        }
        Vendor::Chat => {
            let tool_calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, input))| {
                    json!({"id": format!("call_{i}"), "type": "function",
                    "function": {"name": name, "arguments": args(input)}})
                })
                .collect();
            json!({"id": "chatcmpl-t", "object": "chat.completion", "created": 1790000000, "model": "gpt-4.1-mini",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "Sending it.", "tool_calls": tool_calls},
                                "finish_reason": "tool_calls", "logprobs": null}],
                   "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
        }
        Vendor::Responses => {
            let output: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, input))| json!({"type": "function_call", "id": format!("fc_{i}"), "call_id": format!("call_{i}"),
                    "name": name, "arguments": args(input), "status": "completed"}))
                .collect();
            json!({"id": "resp_t", "object": "response", "created_at": 1790000000, "status": "completed",
                   "model": "gpt-4.1-mini", "incomplete_details": null, "output": output,
                   "usage": {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}})
        }
    };
    body.to_string()
}

/// The same answer streamed: the sentence, then each call's start and its arguments in two
/// deltas, then the vendor's end.
fn stream_with(vendor: Vendor, calls: &[Call<'_>]) -> String {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let halves = |v: &Value| {
        let s = v.to_string();
        let mid = s.len() / 2;
        (s[..mid].to_owned(), s[mid..].to_owned())
    };
    let mut out = String::new();
    match vendor {
        Vendor::Anthropic => {
            out += &ev(
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_t", "type": "message",
                "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": 11, "output_tokens": 1}}}),
            );
            out += &ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            );
            out += &ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Sending it."}}),
            );
            out += &ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            );
            for (i, (name, input)) in calls.iter().enumerate() {
                let (a, b) = halves(input);
                out += &ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i + 1,
                    "content_block": {"type": "tool_use", "id": format!("toolu_{i}"), "name": name, "input": {}}}),
                );
                for part in [a, b] {
                    out += &ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": i + 1,
                        "delta": {"type": "input_json_delta", "partial_json": part}}),
                    );
                }
                out += &ev(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": i + 1}),
                );
            }
            out += &ev(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 7}}),
            );
            out += &ev("message_stop", json!({"type": "message_stop"}));
        }
        Vendor::Chat => {
            let chunk = |delta: Value, finish: Value| {
                format!(
                    "data: {}\n\n",
                    json!({"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1790000000,
                    "model": "gpt-4.1-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                )
            };
            out += &chunk(
                json!({"role": "assistant", "content": "Sending it."}),
                Value::Null,
            );
            for (i, (name, input)) in calls.iter().enumerate() {
                let (a, b) = halves(input);
                out += &chunk(
                    json!({"tool_calls": [{"index": i, "id": format!("call_{i}"), "type": "function",
                    "function": {"name": name, "arguments": ""}}]}),
                    Value::Null,
                );
                for part in [a, b] {
                    out += &chunk(
                        json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                        Value::Null,
                    );
                }
            }
            out += &chunk(json!({}), json!("tool_calls"));
            out += "data: [DONE]\n\n";
        }
        Vendor::Responses => {
            let mut seq = 0;
            let mut push = |name: &str, mut data: Value| {
                data["type"] = json!(name);
                data["sequence_number"] = json!(seq);
                seq += 1;
                out += &ev(name, data);
            };
            let response = |status: &str| {
                json!({"id": "resp_t", "object": "response", "created_at": 1790000000,
                "status": status, "model": "gpt-4.1-mini", "output": []})
            };
            push(
                "response.created",
                json!({"response": response("in_progress")}),
            );
            for (i, (name, input)) in calls.iter().enumerate() {
                let (a, b) = halves(input);
                let item = |args: &str, status: &str| {
                    json!({"type": "function_call", "id": format!("fc_{i}"),
                    "call_id": format!("call_{i}"), "name": name, "arguments": args, "status": status})
                };
                push(
                    "response.output_item.added",
                    json!({"output_index": i, "item": item("", "in_progress")}),
                );
                for part in [a, b] {
                    push(
                        "response.function_call_arguments.delta",
                        json!({"item_id": format!("fc_{i}"), "output_index": i, "delta": part}),
                    );
                }
                push(
                    "response.function_call_arguments.done",
                    json!({"item_id": format!("fc_{i}"), "output_index": i, "arguments": input.to_string()}),
                );
                push(
                    "response.output_item.done",
                    json!({"output_index": i, "item": item(&input.to_string(), "completed")}),
                );
            }
            push(
                "response.completed",
                json!({"response": response("completed")}),
            );
        }
    }
    out
}

/// A request whose conversation has `users` user messages (and an assistant reply between each).
fn request_with(vendor: Vendor, users: usize, stream: bool) -> String {
    let mut messages = Vec::new();
    for i in 1..=users {
        if i > 1 {
            messages.push(json!({"role": "assistant", "content": format!("reply {i}")}));
        }
        messages.push(json!({"role": "user", "content": format!("user message {i}")}));
    }
    let body = match vendor {
        Vendor::Anthropic => {
            json!({"model": "claude-sonnet-4-5", "max_tokens": 256, "stream": stream, "messages": messages})
        }
        Vendor::Chat => json!({"model": "gpt-4.1-mini", "stream": stream, "messages": messages}),
        Vendor::Responses => json!({"model": "gpt-4.1-mini", "stream": stream, "input": messages}),
    };
    body.to_string()
}

/// Each tool call's arguments as a caller's stream carries them, put back together.
fn call_arguments(vendor: Vendor, text: &str) -> Vec<String> {
    let mut calls: Vec<String> = Vec::new();
    for block in text.split("\n\n") {
        let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        match vendor {
            Vendor::Anthropic => match v["type"].as_str() {
                Some("content_block_start") if v["content_block"]["type"] == "tool_use" => {
                    calls.push(String::new())
                }
                Some("content_block_delta") if v["delta"]["type"] == "input_json_delta" => calls
                    .last_mut()
                    .unwrap()
                    .push_str(v["delta"]["partial_json"].as_str().unwrap()),
                _ => {}
            },
            Vendor::Chat => {
                for call in v["choices"][0]["delta"]["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    if call.get("id").is_some() {
                        calls.push(String::new());
                    }
                    calls
                        .last_mut()
                        .unwrap()
                        .push_str(call["function"]["arguments"].as_str().unwrap_or_default());
                }
            }
            Vendor::Responses => {
                if v["type"] == "response.output_item.done" && v["item"]["type"] == "function_call"
                {
                    calls.push(v["item"]["arguments"].as_str().unwrap().to_owned());
                }
            }
        }
    }
    calls
}

fn ask(host: &mut Host, vendor: Vendor, stream: bool) -> StreamId {
    send_request(
        host,
        vendor.path(),
        &[("authorization", "Bearer sk-turn")],
        &request_with(vendor, 1, stream),
        Chunking::Bytes(7),
    )
}

fn content_type(stream: bool) -> (&'static str, &'static str) {
    (
        "content-type",
        if stream {
            "text/event-stream"
        } else {
            "application/json"
        },
    )
}

fn checks(host: &Host) -> Vec<Callout> {
    callouts_to(host, TOOL_CHECK)
}

fn say(host: &mut Host, c: &Callout, outcome: &str, reason: &str) {
    let body = json!({"outcome": outcome, "reason": reason}).to_string();
    host.answer_callout(c.token, &[(":status", "200")], body.as_bytes())
        .unwrap();
}

fn report(host: &Host) -> Value {
    let reports = report_callouts(host);
    assert_eq!(reports.len(), 1);
    report_of(&reports[0])
}

/// (name, tool, call, outcome) of every tool-check result in a report.
fn tool_results(report: &Value) -> Vec<(String, String, u64, String)> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r.get("tool").is_some())
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["tool"].as_str().unwrap().to_owned(),
                r["call"].as_u64().unwrap(),
                r["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn every_when_row_of_every_call_is_judged_in_parallel_while_the_answer_waits() {
    for vendor in VENDORS {
        let mut host = livecheck(POLICY);
        let s = ask(&mut host, vendor, false);
        let body = answer_with(
            vendor,
            &[email("bob@ok.example"), ("lookup_order", json!({"id": 17}))],
        );
        send_answer(
            &mut host,
            s,
            &[content_type(false)],
            &body,
            Chunking::Bytes(7),
        );
        let out = checks(&host);
        // no-billing and on-task on the email, on-task on the lookup: all at once.
        assert_eq!(out.len(), 3, "{vendor:?}");
        assert!(
            common::answer_held(&host, s),
            "{vendor:?}: held until decided"
        );
        for c in &out {
            assert_eq!(c.header("authorization"), Some("Bearer sk-turn"));
            assert_eq!(c.cluster, "livecheck-judge");
        }
        let sent: Vec<Value> = out.iter().map(|c| json(&c.body)).collect();
        let pairs: Vec<(&str, &str)> = sent
            .iter()
            .map(|r| {
                (
                    r["tool"].as_str().unwrap(),
                    r["condition"].as_str().unwrap(),
                )
            })
            .collect();
        assert!(pairs.contains(&("send_email", "The email contains billing information")));
        assert!(pairs.contains(&(
            "lookup_order",
            "The call does not match what the user asked for"
        )));
        let email_args: Value =
            serde_json::from_str(sent[0]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(email_args["to"], "bob@ok.example");
        assert_eq!(out[1].timeout, Some(std::time::Duration::from_millis(3000)));
        for c in &out {
            say(&mut host, c, "passed", "Fine.");
        }
        let got = host.caller_received(s);
        assert_eq!(got.status(), Some(200));
        assert!(got.header("x-core-check").is_none());
        assert_eq!(
            json(&got.body),
            json(body.as_bytes()),
            "{vendor:?}: the answer passes unchanged"
        );
        host.finish_stream(s).unwrap();
        host.advance_time(std::time::Duration::from_millis(250));
        let results = tool_results(&report(&host));
        assert_eq!(
            results.len(),
            2 + 3 + 2,
            "allowed_tools and no-rival on each call, then the 3 judged"
        );
        assert!(results.contains(&("no-billing".into(), "send_email".into(), 1, "passed".into())));
        assert!(results.contains(&("on-task".into(), "lookup_order".into(), 2, "passed".into())));
        assert!(
            !report(&host).to_string().contains("bob@ok.example"),
            "never the arguments"
        );
    }
}

#[test]
fn the_first_condition_that_holds_denies_at_once_with_the_rows_reason() {
    for vendor in VENDORS {
        let mut host = livecheck(POLICY);
        let s = ask(&mut host, vendor, false);
        send_answer(
            &mut host,
            s,
            &[content_type(false)],
            &answer_with(vendor, &[email("bob@ok.example")]),
            Chunking::Whole,
        );
        let out = checks(&host);
        assert_eq!(out.len(), 2);
        let billing = out
            .iter()
            .find(|c| json(&c.body)["condition"] == "The email contains billing information")
            .unwrap();
        say(&mut host, billing, "failed", "It attaches an invoice.");
        // The other row is not waited for.
        let got = host.caller_received(s);
        // The answer's headers went on when they came: the row is named in the stats.
        assert_eq!(got.header("x-core-check"), None, "{vendor:?}");
        assert_eq!(
            host.metric("livecheck.mail.no-billing.failed"),
            Some(1),
            "{vendor:?}"
        );
        let body = json(&got.body);
        assert_eq!(
            vendor.text_of(&body),
            "No billing info in email.",
            "{vendor:?}"
        );
        assert_eq!(
            vendor.stop_marker(&body),
            vendor.refused_marker(),
            "{vendor:?}"
        );
        assert!(
            !got.body_text().contains("bob@ok.example"),
            "{vendor:?}: nothing of the call"
        );
        assert!(!got.body_text().contains("send_email"), "{vendor:?}");
    }
}

/// With `hold_answer_headers` (and the flag Envoy needs for it) a denied call's answer names the
/// row in `X-Core-Check`, whether the filter denied it or the judge did (the answer then goes on
/// from the callout's answer); an answer whose calls are allowed goes on without it.
#[test]
fn with_hold_answer_headers_a_denied_call_is_named_in_x_core_check() {
    let config = with_setting(POLICY, "hold_answer_headers", "true");
    for vendor in VENDORS {
        for (to, verdict, check) in [
            ("bob@ok.example", "failed", Some("no-billing")),
            ("eve@rival.example", "", Some("no-rival")),
            ("bob@ok.example", "passed", None),
        ] {
            let mut host = livecheck_with(&config, true).unwrap();
            let s = ask(&mut host, vendor, false);
            send_answer(
                &mut host,
                s,
                &[content_type(false)],
                &answer_with(vendor, &[email(to)]),
                Chunking::Bytes(7),
            );
            // Held while the judge decides (the filter's own denial goes at once).
            let judged = !verdict.is_empty();
            assert_eq!(
                host.caller_received(s).headers.is_none(),
                judged,
                "{vendor:?} {to}"
            );
            for c in checks(&host) {
                say(&mut host, &c, verdict, "It attaches an invoice.");
            }
            let got = host.caller_received(s);
            let expected = check
                .map(|check| format!(r#"stage=output, check="{check}", code=tool_call_denied"#));
            assert_eq!(
                got.header("x-core-check"),
                expected.as_deref(),
                "{vendor:?} {to} {verdict}"
            );
            assert!(got.end_of_stream);
            if check.is_some() {
                assert_eq!(
                    got.header("content-length"),
                    Some(got.body.len().to_string().as_str())
                );
                assert!(!got.body_text().contains("send_email"), "{vendor:?}");
            } else {
                assert!(got.body_text().contains("send_email"), "{vendor:?}");
            }
        }
    }
}

#[test]
fn a_judge_that_errs_times_out_or_answers_garbage_denies() {
    let answers: [(&str, &[u8]); 4] = [
        ("504", b"upstream request timeout"),
        ("200", b"{\"outcome\": \"maybe\"}"),
        ("200", b"not json"),
        (
            "200",
            b"{\"outcome\": \"errored\", \"reason\": \"The judge model did not answer.\"}",
        ),
    ];
    for (status, answer) in answers {
        let vendor = Vendor::Chat;
        let mut host = livecheck(POLICY);
        let s = ask(&mut host, vendor, false);
        send_answer(
            &mut host,
            s,
            &[content_type(false)],
            &answer_with(vendor, &[("lookup_order", json!({}))]),
            Chunking::Whole,
        );
        let out = checks(&host);
        assert_eq!(out.len(), 1);
        host.answer_callout(out[0].token, &[(":status", status)], answer)
            .unwrap();
        let got = host.caller_received(s);
        assert_eq!(
            host.metric("livecheck.mail.on-task.errored"),
            Some(1),
            "{status} {}",
            String::from_utf8_lossy(answer)
        );
        assert_eq!(
            vendor.text_of(&json(&got.body)),
            "The tool call could not be checked."
        );
        host.finish_stream(s).unwrap();
        host.advance_time(std::time::Duration::from_millis(250));
        assert_eq!(tool_results(&report(&host)).last().unwrap().3, "errored");
    }
}

#[test]
fn allowed_tools_and_args_rows_deny_in_the_filter_without_a_judge() {
    let cases = [
        (
            vec![("drop_tables", json!({}))],
            "allowed_tools",
            "The tool is not one this agent may call.",
        ),
        (vec![email("eve@RIVAL.example")], "no-rival", "rule forbids"),
        // One denied call denies the answer, however clean the others.
        (
            vec![
                ("lookup_order", json!({"id": 1})),
                email("eve@rival.example"),
            ],
            "no-rival",
            "rule forbids",
        ),
    ];
    for vendor in VENDORS {
        for (calls, check, says) in &cases {
            let mut host = livecheck(POLICY);
            let s = ask(&mut host, vendor, false);
            send_answer(
                &mut host,
                s,
                &[content_type(false)],
                &answer_with(vendor, calls),
                Chunking::Bytes(7),
            );
            assert!(
                checks(&host).is_empty(),
                "{vendor:?} {check}: no judge for a denied answer"
            );
            let got = host.caller_received(s);
            assert_eq!(
                host.metric(&format!("livecheck.mail.{check}.failed")),
                Some(1),
                "{vendor:?} {check}"
            );
            assert!(
                vendor.text_of(&json(&got.body)).contains(says),
                "{vendor:?}"
            );
            assert!(!got.body_text().contains("rival"));
            assert!(
                !got.body_text().contains("drop_tables"),
                "nothing of a denied call, its name included"
            );
        }
    }
}

#[test]
fn the_judge_reads_the_last_ten_user_messages_as_intent() {
    for vendor in VENDORS {
        let mut host = livecheck(POLICY);
        let s = send_request(
            &mut host,
            vendor.path(),
            &[],
            &request_with(vendor, 12, false),
            Chunking::Whole,
        );
        send_answer(
            &mut host,
            s,
            &[content_type(false)],
            &answer_with(vendor, &[("lookup_order", json!({}))]),
            Chunking::Whole,
        );
        let sent = json(&checks(&host)[0].body);
        let expected: Vec<String> = (3..=12).map(|i| format!("user message {i}")).collect();
        assert_eq!(sent["intent"], json!(expected), "{vendor:?}");
        assert!(
            !sent.to_string().contains("reply"),
            "{vendor:?}: never the model's own messages"
        );
    }
}

#[test]
fn a_streamed_call_is_held_whole_until_its_checks_allow_it() {
    for vendor in VENDORS {
        for chunking in CHUNKINGS {
            let mut host = livecheck(POLICY);
            let s = ask(&mut host, vendor, true);
            let upstream = stream_with(vendor, &[email("bob@ok.example")]);
            host.send_response_headers(s, &[(":status", "200"), content_type(true)], false)
                .unwrap();
            for chunk in chunking.split(upstream.as_bytes()) {
                host.send_response_body(s, chunk, false).unwrap();
            }
            host.send_response_body(s, b"", true).unwrap();
            let before = host.caller_received(s).body_text();
            assert!(
                !before.contains("bob@ok.example"),
                "{vendor:?} {chunking:?}: the call waits"
            );
            if vendor != Vendor::Responses {
                assert!(
                    before.contains("Sending it."),
                    "{vendor:?} {chunking:?}: text before the call streams"
                );
            }
            assert!(!host.caller_received(s).end_of_stream);
            for c in checks(&host) {
                say(&mut host, &c, "passed", "Fine.");
            }
            let got = host.caller_received(s);
            assert!(got.end_of_stream, "{vendor:?} {chunking:?}");
            let text = got.body_text();
            assert!(text.contains("bob@ok.example"), "{vendor:?} {chunking:?}");
            let seen = read_stream(vendor, &text);
            assert!(
                ["tool_use", "tool_calls", "completed"]
                    .contains(&seen.end.trim_end_matches("+[DONE]")),
                "{vendor:?}: {}",
                seen.end
            );
            assert_eq!(
                call_arguments(vendor, &text),
                vec![email("bob@ok.example").1.to_string()],
                "{vendor:?}: the call once, whole"
            );
        }
    }
}

#[test]
fn a_streamed_call_denied_never_reaches_the_caller_and_the_reason_ends_the_stream() {
    for vendor in VENDORS {
        let mut host = livecheck(POLICY);
        let s = ask(&mut host, vendor, true);
        let upstream = stream_with(
            vendor,
            &[("lookup_order", json!({"id": 17})), email("bob@ok.example")],
        );
        send_answer(
            &mut host,
            s,
            &[content_type(true)],
            &upstream,
            Chunking::Bytes(7),
        );
        let out = checks(&host);
        assert_eq!(out.len(), 3, "{vendor:?}");
        let billing = out
            .iter()
            .find(|c| json(&c.body)["condition"] == "The email contains billing information")
            .unwrap();
        say(&mut host, billing, "failed", "It attaches an invoice.");
        let got = host.caller_received(s);
        assert!(got.end_of_stream, "{vendor:?}");
        let text = got.body_text();
        assert!(
            !text.contains("bob@ok.example") && !text.contains("send_email"),
            "{vendor:?}: {text}"
        );
        let seen = read_stream(vendor, &text);
        assert!(
            seen.text.ends_with("No billing info in email."),
            "{vendor:?}: {}",
            seen.text
        );
        assert_eq!(
            seen.end.trim_end_matches("+[DONE]"),
            vendor.refused_marker(),
            "{vendor:?}"
        );
    }
}

#[test]
fn a_streamed_call_denied_in_the_filter_ends_the_stream_in_the_same_callback() {
    for vendor in VENDORS {
        let mut host = livecheck(POLICY);
        let s = ask(&mut host, vendor, true);
        let upstream = stream_with(vendor, &[email("eve@rival.example")]);
        send_answer(
            &mut host,
            s,
            &[content_type(true)],
            &upstream,
            Chunking::Bytes(7),
        );
        assert!(checks(&host).is_empty());
        let text = host.caller_received(s).body_text();
        assert!(!text.contains("rival"), "{vendor:?}");
        let seen = read_stream(vendor, &text);
        assert!(
            seen.text
                .ends_with("The call's arguments hold something a rule forbids."),
            "{vendor:?}: {}",
            seen.text
        );
        assert_eq!(
            seen.end.trim_end_matches("+[DONE]"),
            vendor.refused_marker(),
            "{vendor:?}"
        );
    }
}

/// An MCP client's JSON-RPC POST to `/mcp` (Streamable HTTP), with the caller's MCP credentials.
fn mcp_post(host: &mut Host, body: &Value) -> StreamId {
    send_request(
        host,
        "/mcp",
        &[
            ("authorization", "Bearer mcp-server-token"),
            ("accept", "application/json, text/event-stream"),
        ],
        &body.to_string(),
        Chunking::Bytes(7),
    )
}

fn tools_call(id: Value, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
}

#[test]
fn an_mcp_tools_call_denied_never_reaches_the_server_and_the_client_gets_an_error_result() {
    for (call, check) in [
        (
            tools_call(json!(7), "send_email", json!({"to": "eve@rival.example"})),
            "no-rival",
        ),
        (
            tools_call(json!("req-1"), "drop_tables", json!({})),
            "allowed_tools",
        ),
    ] {
        let mut host = livecheck(POLICY);
        let s = mcp_post(&mut host, &call);
        assert!(checks(&host).is_empty(), "{check}: decided in the filter");
        assert!(
            common::question_held(&host, s),
            "{check}: the MCP server is never called"
        );
        let got = host.caller_received(s);
        assert_eq!(got.status(), Some(200));
        assert_eq!(
            got.header("x-core-check").unwrap(),
            format!(r#"stage=output, check="{check}", code=tool_call_denied"#)
        );
        let body = json(&got.body);
        assert_eq!(body["id"], call["id"]);
        assert_eq!(body["result"]["isError"], true);
        assert_eq!(body["result"]["content"][0]["type"], "text");
        assert!(!got.body_text().contains("rival"));
        host.finish_stream(s).unwrap();
        host.advance_time(std::time::Duration::from_millis(250));
        assert!(tool_results(&report(&host))
            .iter()
            .any(|r| r.0 == check && r.3 == "failed"));
    }
}

#[test]
fn an_mcp_tools_call_waits_for_its_judge_then_goes_to_the_server_untouched() {
    for (outcome, reaches) in [("passed", true), ("failed", false)] {
        let mut host = livecheck(POLICY);
        let call = tools_call(
            json!(3),
            "send_email",
            json!({"to": "bob@ok.example", "body": "hi"}),
        );
        let s = mcp_post(&mut host, &call);
        assert!(common::question_held(&host, s), "held while judged");
        let out = checks(&host);
        assert_eq!(out.len(), 2, "no-billing and on-task");
        for c in &out {
            let sent = json(&c.body);
            assert_eq!(sent["judge_model"], "gpt-4.1-mini", "the version's model");
            assert!(
                sent.get("intent").is_none(),
                "an MCP request carries no user messages"
            );
            assert!(
                c.header("authorization").is_none(),
                "the MCP server's token never goes to the judge"
            );
        }
        for c in &out {
            if !host.caller_received(s).body.is_empty() {
                break;
            }
            say(&mut host, c, outcome, "The email attaches an invoice.");
        }
        if reaches {
            let up = host.upstream_received(s);
            assert_eq!(json(&up.body), call, "forwarded untouched");
            assert!(common::answer_held(&host, s));
        } else {
            assert!(common::question_held(&host, s));
            let body = json(&host.caller_received(s).body);
            assert_eq!(
                body["result"]["content"][0]["text"],
                "No billing info in email."
            );
        }
    }
}

#[test]
fn other_mcp_messages_pass_and_what_cannot_be_checked_is_refused() {
    let mut host = livecheck(POLICY);
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ] {
        let s = mcp_post(&mut host, &message);
        assert_eq!(json(&host.upstream_received(s).body), message);
    }
    let batch = json!([tools_call(json!(1), "lookup_order", json!({}))]);
    let s = mcp_post(&mut host, &batch);
    assert!(common::question_held(&host, s));
    assert_eq!(host.caller_received(s).status(), Some(400));
    assert_eq!(json(&host.caller_received(s).body)["error"]["code"], -32600);
    // A key twice: the server might run the other `arguments`.
    let s = send_request(
        &mut host,
        "/mcp",
        &[],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_email","arguments":{"to":"a@ok.example"},"arguments":{"to":"eve@rival.example"}}}"#,
        Chunking::Whole,
    );
    assert!(common::question_held(&host, s));
    assert_eq!(json(&host.caller_received(s).body)["error"]["code"], -32700);
    // A version without tool checks reads no MCP request.
    let mut plain = livecheck(SEED);
    let call = tools_call(json!(1), "anything", json!({"x": 1}));
    let s = mcp_post(&mut plain, &call);
    assert_eq!(json(&plain.upstream_received(s).body), call);
}

const RECOVERING: &str = r#"{"default_agent": "mail", "agents": {"mail": {"published": "1", "versions": {"1": {
    "recover_attempts": 2,
    "tool_checks": [
        {"name": "no-billing", "tool": "send_email", "when": "The email contains billing information",
         "reason": "No billing info in email.", "recover": true}
    ]}}}}}"#;

fn retry_answer(body: &str) -> Vec<u8> {
    json!({"outcome": "answered", "body": body})
        .to_string()
        .into_bytes()
}

#[test]
fn a_denied_call_with_recover_asks_the_model_again_with_its_tools_and_checks_the_new_calls() {
    let vendor = Vendor::Chat;
    let mut host = livecheck(RECOVERING);
    let s = ask(&mut host, vendor, false);
    send_answer(
        &mut host,
        s,
        &[content_type(false)],
        &answer_with(vendor, &[email("bob@ok.example")]),
        Chunking::Whole,
    );
    let first = checks(&host);
    say(&mut host, &first[0], "failed", "It attaches an invoice.");
    // Asked again: tools kept, told which call was denied and why, never its arguments.
    let retries = callouts_to(&host, "/v1/retry");
    assert_eq!(retries.len(), 1, "asked again, not withheld");
    let retry = json(&retries[0].body);
    assert_eq!(retry["keep_tools"], true);
    assert_eq!(
        retry["rules"],
        json!([r#"Your call of the tool "send_email" was denied: No billing info in email."#])
    );
    assert!(!retry["rules"].to_string().contains("bob@ok.example"));
    assert!(common::answer_held(&host, s), "still held");
    // The second answer repeats the call: denied again, and asked once more.
    let again = answer_with(vendor, &[email("bob@ok.example")]);
    host.answer_callout(
        retries[0].token,
        &[(":status", "200")],
        &retry_answer(&again),
    )
    .unwrap();
    let second = checks(&host);
    assert_eq!(second.len(), 1);
    say(&mut host, &second[0], "failed", "Still the invoice.");
    let retries = callouts_to(&host, "/v1/retry");
    assert_eq!(retries.len(), 1);
    assert_eq!(json(&retries[0].body)["attempt"], 3);
    // The third answer calls the tool cleanly: it passes and is what the caller gets.
    let clean = answer_with(
        vendor,
        &[(
            "send_email",
            json!({"to": "bob@ok.example", "body": "Meeting notes."}),
        )],
    );
    host.answer_callout(
        retries[0].token,
        &[(":status", "200")],
        &retry_answer(&clean),
    )
    .unwrap();
    let third = checks(&host);
    assert_eq!(third.len(), 1);
    say(&mut host, &third[0], "passed", "No billing data.");
    let got = host.caller_received(s);
    assert!(got.header("x-core-check").is_none());
    let body = json(&got.body);
    assert_eq!(
        body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        json!({"to": "bob@ok.example", "body": "Meeting notes."}).to_string()
    );
    host.finish_stream(s).unwrap();
    host.advance_time(std::time::Duration::from_millis(250));
    let attempts: Vec<(String, u64)> = report(&host)["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap().to_owned(),
                r["attempt"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        vec![
            ("failed".into(), 1),
            ("failed".into(), 2),
            ("passed".into(), 3)
        ]
    );
}

#[test]
fn when_no_retry_passes_the_first_denial_is_what_the_caller_gets() {
    let vendor = Vendor::Anthropic;
    let mut host = livecheck(RECOVERING);
    let s = ask(&mut host, vendor, false);
    send_answer(
        &mut host,
        s,
        &[content_type(false)],
        &answer_with(vendor, &[email("bob@ok.example")]),
        Chunking::Whole,
    );
    let c = checks(&host).remove(0);
    say(&mut host, &c, "failed", "It attaches an invoice.");
    for _ in 0..2 {
        let retry = callouts_to(&host, "/v1/retry");
        let again = answer_with(vendor, &[email("bob@ok.example")]);
        host.answer_callout(retry[0].token, &[(":status", "200")], &retry_answer(&again))
            .unwrap();
        let c = checks(&host).remove(0);
        say(&mut host, &c, "failed", "Still the invoice.");
    }
    assert!(
        callouts_to(&host, "/v1/retry").is_empty(),
        "recover_attempts used up"
    );
    let got = host.caller_received(s);
    assert_eq!(got.header("x-core-check"), None);
    let body = json(&got.body);
    assert_eq!(vendor.text_of(&body), "No billing info in email.");
    assert_eq!(
        body["usage"]["output_tokens"], 21,
        "the usage of every attempt"
    );
}

/// A version that also holds the answer text whole (a judged output check) or every event of the
/// round (a check that recovers): a streamed call still waits for its own checks, and goes whole.
#[test]
fn held_rounds_wait_for_their_calls_checks_too() {
    for extra in [
        r#"{"name": "polite", "stage": "output", "kind": "polite_tone", "judge_model": "judge-1"}"#,
        r#"{"name": "no-iban", "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18, "recover": true}"#,
    ] {
        let policy = format!(
            r#"{{"default_agent": "mail", "agents": {{"mail": {{"published": "1", "versions": {{"1": {{
                "live_checks": [{extra}],
                "tool_checks": [{{"name": "no-billing", "tool": "send_email", "when": "The email contains billing information"}}]}}}}}}}}}}"#
        );
        for vendor in VENDORS {
            for (outcome, arrives) in [("passed", true), ("failed", false)] {
                let mut host = livecheck(&policy);
                let s = ask(&mut host, vendor, true);
                let upstream = stream_with(vendor, &[email("bob@ok.example")]);
                send_answer(
                    &mut host,
                    s,
                    &[content_type(true)],
                    &upstream,
                    Chunking::Bytes(7),
                );
                assert!(
                    callouts_to(&host, "/v1/judge").is_empty(),
                    "an answer asking for a tool is not judged"
                );
                let out = checks(&host);
                assert_eq!(out.len(), 1, "{vendor:?} {extra}");
                assert!(!host
                    .caller_received(s)
                    .body_text()
                    .contains("bob@ok.example"));
                say(&mut host, &out[0], outcome, "It attaches an invoice.");
                let got = host.caller_received(s);
                assert!(got.end_of_stream, "{vendor:?} {extra}");
                let calls = call_arguments(vendor, &got.body_text());
                if arrives {
                    assert_eq!(
                        calls,
                        vec![email("bob@ok.example").1.to_string()],
                        "{vendor:?} {extra}: {}",
                        got.body_text()
                    );
                } else {
                    assert!(calls.is_empty(), "{vendor:?} {extra}");
                    let seen = read_stream(vendor, &got.body_text());
                    assert_eq!(
                        seen.end.trim_end_matches("+[DONE]"),
                        vendor.refused_marker(),
                        "{vendor:?} {extra}"
                    );
                }
            }
        }
    }
}

/// One denied call denies the answer: an earlier call of the same stream that was allowed does not
/// go either; every call is numbered once in the results, across the steps that completed them.
#[test]
fn a_streamed_answer_sends_no_call_until_every_call_is_decided() {
    for vendor in VENDORS {
        let mut host = livecheck(POLICY);
        let s = ask(&mut host, vendor, true);
        let upstream = stream_with(
            vendor,
            &[("lookup_order", json!({"id": 17})), email("bob@ok.example")],
        );
        host.send_response_headers(s, &[(":status", "200"), content_type(true)], false)
            .unwrap();
        let events: Vec<&str> = upstream.split_inclusive("\n\n").collect();
        // Through the event that starts the email (Chat completes a call when the next starts).
        let lookup_done = events
            .iter()
            .position(|e| e.contains("send_email"))
            .unwrap()
            + 1;
        for e in &events[..lookup_done] {
            host.send_response_body(s, e.as_bytes(), false).unwrap();
        }
        // The lookup is complete and checked first: allowed, yet not sent while the answer goes on.
        let lookup = checks(&host);
        assert_eq!(lookup.len(), 1, "{vendor:?}");
        say(&mut host, &lookup[0], "passed", "On task.");
        for e in &events[lookup_done..] {
            host.send_response_body(s, e.as_bytes(), false).unwrap();
        }
        host.send_response_body(s, b"", true).unwrap();
        assert!(
            call_arguments(vendor, &host.caller_received(s).body_text()).is_empty(),
            "{vendor:?}"
        );
        let email_checks: Vec<Callout> = checks(&host)
            .into_iter()
            .filter(|c| json(&c.body)["tool"] == "send_email")
            .collect();
        assert_eq!(email_checks.len(), 2, "{vendor:?}");
        let billing = email_checks
            .iter()
            .find(|c| json(&c.body)["condition"] == "The email contains billing information")
            .unwrap();
        say(&mut host, billing, "failed", "It attaches an invoice.");
        let got = host.caller_received(s);
        assert!(got.end_of_stream);
        let text = got.body_text();
        assert!(
            call_arguments(vendor, &text).is_empty(),
            "{vendor:?}: no call of a denied answer: {text}"
        );
        assert!(
            !text.contains("lookup_order") && !text.contains("send_email"),
            "{vendor:?}"
        );
        host.finish_stream(s).unwrap();
        host.advance_time(std::time::Duration::from_millis(250));
        let results = tool_results(&report(&host));
        assert!(
            results.contains(&("on-task".into(), "lookup_order".into(), 1, "passed".into())),
            "{vendor:?} {results:?}"
        );
        assert!(
            results.contains(&("no-billing".into(), "send_email".into(), 2, "failed".into())),
            "{vendor:?} {results:?}"
        );
    }
}

/// An answer the tool checks cannot read (over `max_body_bytes`, not JSON) may hold calls nobody
/// checked: it is withheld (fail closed: tool checks have no `on_error`) and each check counts one
/// errored result, as for a stream cut because a call in it outgrew the limit.
#[test]
fn an_answer_the_tool_checks_cannot_read_is_withheld() {
    let policy = with_max_body_bytes(POLICY, 4096);
    let long = "x".repeat(8192);
    for vendor in VENDORS {
        for (what, headers, body) in [
            (
                "over the limit",
                vec![content_type(false)],
                answer_with(vendor, &[("drop_tables", json!({"why": long}))]),
            ),
            (
                "not JSON",
                vec![content_type(false)],
                "drop_tables(now)".to_owned(),
            ),
            (
                "not JSON by its type",
                vec![("content-type", "text/plain")],
                answer_with(vendor, &[("drop_tables", json!({}))]),
            ),
            (
                "streamed, over the limit",
                vec![content_type(true)],
                stream_with(vendor, &[("drop_tables", json!({"why": long}))]),
            ),
            (
                "streamed, encoded",
                vec![content_type(true), ("content-encoding", "gzip")],
                stream_with(vendor, &[("drop_tables", json!({}))]),
            ),
        ] {
            let streamed = what.starts_with("streamed");
            let mut host = livecheck(&policy);
            let s = ask(&mut host, vendor, streamed);
            send_answer(&mut host, s, &headers, &body, Chunking::Bytes(512));
            assert!(checks(&host).is_empty(), "{vendor:?} {what}: no judge");
            let got = host.caller_received(s);
            if what == "not JSON by its type" {
                // Decided with the answer's headers: the caller's say which check could not.
                assert_eq!(
                    got.header("x-core-check"),
                    Some(r#"stage=output, check="allowed_tools", code=check_errored"#),
                    "{vendor:?}"
                );
            }
            assert!(
                !got.body_text().contains("drop_tables"),
                "{vendor:?} {what}: withheld"
            );
            assert_eq!(
                host.metric("livecheck.mail.allowed_tools.errored"),
                Some(1),
                "{vendor:?} {what}"
            );
            host.finish_stream(s).unwrap();
            host.advance_time(std::time::Duration::from_millis(250));
            // One result per check for the turn: no tool, no call (none could be read).
            let report = report(&host);
            let results: Vec<(&str, &str)> = report["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    assert!(r.get("tool").is_none() && r.get("call").is_none());
                    (r["name"].as_str().unwrap(), r["outcome"].as_str().unwrap())
                })
                .collect();
            assert_eq!(
                results,
                [
                    ("allowed_tools", "errored"),
                    ("no-billing", "errored"),
                    ("on-task", "errored"),
                    ("no-rival", "errored")
                ],
                "{vendor:?} {what}"
            );
        }
    }
}
