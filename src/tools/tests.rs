#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::rc::Rc;

use livecheck_wire::{JudgeVerdict, Outcome as WireOutcome, ToolCheckRequest, Usage};

use super::*;
use crate::host::fake::FakeHost;

fn policy(version: &str) -> Policy {
    let json = format!(
        r#"{{"router_models": ["router/auto"], "default_agent": "a", "agents": {{"a": {{"published": "1", "versions": {{"1": {version}}}}}}}}}"#
    );
    Policy::from_json(json.as_bytes()).unwrap()
}

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        name: name.into(),
        arguments: arguments.into(),
        json: true,
    }
}

const INTENT: [&str; 2] = ["Email Bob the invoice", "Only the PDF please"];

fn start(
    p: &Policy,
    host: &mut FakeHost,
    model: Option<&str>,
    calls: Vec<ToolCall>,
) -> (Rc<Version>, Checking) {
    let version = p.select(None, None, None).unwrap();
    let creds = vec![("x-api-key".to_owned(), "sk-test".to_owned())];
    let cx = Context {
        policy: p,
        version: &version,
        intent: INTENT.to_vec(),
        turn_model: model,
        credentials: &creds,
        attempt: 1,
    };
    let checking = Checking::start(host, &cx, calls, 0);
    (version, checking)
}

fn verdict(outcome: WireOutcome, reason: &str) -> JudgeVerdict {
    JudgeVerdict {
        outcome,
        score: None,
        reason: reason.into(),
        usage: Usage::default(),
    }
}

/// Each result's row name (as the version names it), tool, call and outcome.
fn outcomes(v: &Version, results: &[ToolResult]) -> Vec<(String, String, u32, Outcome)> {
    results
        .iter()
        .map(|r| {
            let (name, _, _) = r.decider(&v.tools).unwrap();
            (name.to_owned(), r.tool.clone(), r.call, r.outcome)
        })
        .collect()
}

#[test]
fn a_tool_outside_allowed_tools_is_denied_at_once_without_a_judge() {
    let p = policy(
        r#"{"allowed_tools": ["get_*", "search"], "tool_checks": [{"name": "billing", "when": "The email has billing info"}]}"#,
    );
    let mut host = FakeHost::default();
    let (v, mut c) = start(
        &p,
        &mut host,
        Some("m"),
        vec![call("get_order", "{}"), call("delete_all", "{}")],
    );
    let Next::Denied(d) = c.next() else {
        panic!("{:?}", c.next())
    };
    assert_eq!((d.check.as_str(), d.call), ("allowed_tools", 1));
    assert_eq!(d.reason, "The tool is not one this agent may call.");
    assert_eq!(d.tool, "delete_all");
    assert!(
        host.callouts.is_empty(),
        "a denied answer costs no judge call"
    );
    assert_eq!(
        outcomes(&v, &c.take_results()),
        vec![
            (
                "allowed_tools".into(),
                "get_order".into(),
                1,
                Outcome::Passed
            ),
            (
                "allowed_tools".into(),
                "delete_all".into(),
                2,
                Outcome::Failed
            ),
        ]
    );
}

#[test]
fn args_rows_read_the_text_at_their_pointer() {
    let p = policy(
        r#"{"tool_checks": [
            {"name": "no-competitor", "tool": "send_*", "args": [{"pointer": "/to", "not_contains": "@rival.example"}], "reason": "Never email a competitor."},
            {"name": "no-card", "args": [{"pointer": "", "pattern": "[0-9]{16}", "max_match": 16}]}
        ]}"#,
    );
    let run = |calls: Vec<ToolCall>| {
        let mut host = FakeHost::default();
        let (v, mut c) = start(&p, &mut host, Some("m"), calls);
        assert!(host.callouts.is_empty());
        (c.next(), outcomes(&v, &c.take_results()))
    };
    // Nested values and case are read: the whole list under /to.
    let (next, results) = run(vec![call(
        "send_email",
        r#"{"to": ["a@ok.example", "B@RIVAL.example"], "body": "hi"}"#,
    )]);
    let Next::Denied(d) = next else { panic!() };
    assert_eq!(
        (d.check.as_str(), d.reason.as_str()),
        ("no-competitor", "Never email a competitor.")
    );
    assert_eq!(results[0].3, Outcome::Failed);
    // Another tool is not read by the send_* row; the card row reads all arguments, keys included.
    let (next, _) = run(vec![call("note", r#"{"4111111111111111": true}"#)]);
    let Next::Denied(d) = next else { panic!() };
    assert_eq!(d.check, "no-card");
    assert!(d.reason.contains("rule forbids"), "{}", d.reason);
    // A missing field has nothing to read.
    let (next, results) = run(vec![call("send_email", r#"{"body": "hi"}"#)]);
    assert_eq!(next, Next::Allowed);
    assert_eq!(
        results,
        vec![
            (
                "no-competitor".into(),
                "send_email".into(),
                1,
                Outcome::Passed
            ),
            ("no-card".into(), "send_email".into(), 1, Outcome::Passed),
        ]
    );
}

#[test]
fn unreadable_arguments_deny_rather_than_count_as_empty() {
    let p = policy(
        r#"{"tool_checks": [{"name": "no-x", "args": [{"pointer": "/to", "not_contains": "x"}]}]}"#,
    );
    for arguments in [r#"{"to": "a""#, r#"{"to": "ok", "to": "x"}"#, "not json"] {
        let mut host = FakeHost::default();
        let (_, mut c) = start(&p, &mut host, Some("m"), vec![call("send", arguments)]);
        let Next::Denied(d) = c.next() else {
            panic!("{arguments}")
        };
        assert_eq!(d.check, "no-x");
        assert_eq!(c.take_results()[0].outcome, Outcome::Errored, "{arguments}");
    }
}

#[test]
fn when_rows_of_every_call_go_to_the_judge_in_parallel_with_the_intent() {
    let p = policy(
        r#"{"tool_checks": [
            {"name": "billing", "tool": "send_email", "when": "The email contains billing information"},
            {"name": "off-topic", "when": "The call does not match what the user asked", "timeout_ms": 5000}
        ]}"#,
    );
    let mut host = FakeHost::default();
    let (_, c) = start(
        &p,
        &mut host,
        Some("gpt-4.1-mini"),
        vec![
            call("send_email", r#"{"to": "bob@x.example"}"#),
            call("lookup", r#"{"q": 1}"#),
        ],
    );
    assert_eq!(c.next(), Next::Waiting);
    assert_eq!(
        host.callouts.len(),
        3,
        "billing and off-topic on the email, off-topic on lookup"
    );
    let sent: Vec<ToolCheckRequest> = host
        .callouts
        .iter()
        .map(|(_, _, b, _)| serde_json::from_slice(b).unwrap())
        .collect();
    assert_eq!(sent[0].condition, "The email contains billing information");
    assert_eq!(
        (sent[0].tool.as_str(), sent[0].arguments.as_str()),
        ("send_email", r#"{"to": "bob@x.example"}"#)
    );
    assert_eq!(sent[0].intent, INTENT);
    assert_eq!(sent[0].judge_model, "gpt-4.1-mini");
    assert_eq!(sent[2].tool, "lookup");
    let (cluster, headers, _, timeout) = &host.callouts[0];
    assert_eq!(cluster, "livecheck-judge");
    assert!(headers.contains(&(":path".into(), "/v1/tool-check".into())));
    assert!(headers.contains(&("x-api-key".into(), "sk-test".into())));
    assert_eq!((*timeout, host.callouts[1].3), (60_000, 5_000));
}

#[test]
fn the_first_condition_that_holds_denies_without_waiting_for_the_rest() {
    let p = policy(
        r#"{"tool_checks": [
            {"name": "billing", "when": "The email contains billing information"},
            {"name": "off-topic", "when": "The call does not match what the user asked", "reason": "Stay on task."}
        ]}"#,
    );
    let mut host = FakeHost::default();
    let (v, mut c) = start(&p, &mut host, Some("m"), vec![call("send_email", "{}")]);
    c.verdict(
        &v,
        2,
        Some(&verdict(
            WireOutcome::Failed,
            "It asks to email a stranger.",
        )),
    );
    let Next::Denied(d) = c.next() else { panic!() };
    // The row's own reason is shown; the judge's sentence is recorded.
    assert_eq!(
        (d.check.as_str(), d.reason.as_str()),
        ("off-topic", "Stay on task.")
    );
    let results = c.take_results();
    assert_eq!(results.len(), 1, "the billing row was not waited for");
    assert_eq!(results[0].reason, "It asks to email a stranger.");
    assert_eq!(results[0].judge_model.as_deref(), Some("m"));
    // A late verdict changes nothing.
    c.verdict(&v, 1, Some(&verdict(WireOutcome::Passed, "fine")));
    assert!(matches!(c.next(), Next::Denied(d) if d.check == "off-topic"));
}

#[test]
fn a_judge_that_cannot_decide_denies() {
    let p = policy(
        r#"{"tool_checks": [{"name": "billing", "when": "The email contains billing information"}]}"#,
    );
    for answer in [
        None,
        Some(verdict(WireOutcome::Errored, "The judge timed out.")),
    ] {
        let mut host = FakeHost::default();
        let (v, mut c) = start(&p, &mut host, Some("m"), vec![call("send_email", "{}")]);
        c.verdict(&v, 1, answer.as_ref());
        let Next::Denied(d) = c.next() else { panic!() };
        assert_eq!(d.reason, "The tool call could not be checked.");
        assert_eq!(c.take_results()[0].outcome, Outcome::Errored);
    }
    // A router turn whose row names no judge model cannot be judged at all.
    let p = policy(
        r#"{"tool_checks": [{"name": "billing", "when": "The email contains billing information"}]}"#,
    );
    let mut host = FakeHost::default();
    let (_, c) = start(
        &p,
        &mut host,
        Some("router/auto"),
        vec![call("send_email", "{}")],
    );
    assert!(matches!(c.next(), Next::Denied(_)));
    assert!(host.callouts.is_empty());
}

#[test]
fn calls_pass_when_every_row_passed_with_one_result_per_row_and_call() {
    let p = policy(
        r#"{"tool_checks": [{"name": "billing", "when": "The email contains billing information", "judge_model": "judge-1"}]}"#,
    );
    let mut host = FakeHost::default();
    let (v, mut c) = start(
        &p,
        &mut host,
        Some("router/auto"),
        vec![call("send_email", "{}"), call("send_email", "{}")],
    );
    c.verdict(
        &v,
        2,
        Some(&verdict(WireOutcome::Passed, "No billing data.")),
    );
    assert_eq!(c.next(), Next::Waiting);
    c.verdict(
        &v,
        1,
        Some(&verdict(WireOutcome::Passed, "No billing data.")),
    );
    assert_eq!(c.next(), Next::Allowed);
    assert_eq!(
        outcomes(&v, &c.take_results()),
        vec![
            ("billing".into(), "send_email".into(), 2, Outcome::Passed),
            ("billing".into(), "send_email".into(), 1, Outcome::Passed),
        ]
    );
}

#[test]
fn tool_checks_are_validated_one_line_per_problem() {
    let errors = |version: &str| {
        let json = format!(
            r#"{{"agents": {{"a": {{"published": "1", "versions": {{"1": {version}}}}}}}}}"#
        );
        Policy::from_json(json.as_bytes())
            .err()
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    let errs = errors(
        r#"{"live_checks": [{"name": "dup", "stage": "output", "kind": "not_contains", "expected": "x"}],
            "allowed_tools": ["ok", "bad name!"],
            "tool_checks": [
              {"name": "dup", "when": "x"},
              {"name": "both", "when": "x", "args": [{"pointer": "/a", "not_contains": "y"}]},
              {"name": "neither"},
              {"name": "ptr", "args": [{"pointer": "a", "not_contains": "y"}, {"pointer": "/b", "pattern": "a+"}]},
              {"name": "judge-on-args", "args": [{"pointer": "", "not_contains": "y"}], "judge_model": "m"},
              {"name": "slow", "when": "x", "timeout_ms": 0},
              {"name": "extra", "when": "x", "unknown": 1}
            ]}"#,
    );
    for expected in [
        "field `allowed_tools[1]`",
        r#"check "dup" field `name`"#,
        r#"check "both" field `when`"#,
        r#"check "neither" field `when`"#,
        r#"check "ptr" field `args[0].pointer`"#,
        r#"check "ptr" field `args[1].pattern`: has no longest match"#,
        r#"check "judge-on-args" field `judge_model`"#,
        r#"check "slow" field `timeout_ms`"#,
        r#"check "extra" field `unknown`"#,
    ] {
        assert!(
            errs.iter().any(|e| e.contains(expected)),
            "{expected} not in {errs:#?}"
        );
    }
    assert_eq!(errs.len(), 9, "{errs:#?}");
}

/// An `args` row reads the parsed tree as a `serde_json::Value` of the same text is read (its
/// `pointer`, and every key, string, number and boolean under it, an object's in key order): the
/// same text at every pointer, missing where it is missing.
#[test]
fn args_rows_read_the_tree_as_serde_json_values_read() {
    fn value_text(value: &serde_json::Value, out: &mut String) {
        let mut push = |s: &str| {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(s);
        };
        match value {
            serde_json::Value::Null => {}
            serde_json::Value::Bool(b) => push(if *b { "true" } else { "false" }),
            serde_json::Value::Number(n) => push(&n.to_string()),
            serde_json::Value::String(s) => push(s),
            serde_json::Value::Array(items) => items.iter().for_each(|v| value_text(v, out)),
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    if !out.is_empty() {
                        out.push('\n');
                    }
                    out.push_str(k);
                    value_text(v, out);
                }
            }
        }
    }
    let texts = [
        r#"{"z": 1, "a": [10, -0, 1.50, 1e3, 12345678901234567890, 0.1, true, null, "x\"y"], "B": {"é": "ü", "~": "t", "/": "s", "a/b": 2, "m~n": 3}}"#,
        r#"{"to": ["a@ok.example", "B@RIVAL.example"], "body": "line\nbreak", "": "empty key", "arr": [0,1,2,3,4,5,6,7,8,9,"ten",{"k":[false]}]}"#,
        r#"[{"b": 2, "a": 1}, [], {}, "s", 3]"#,
        r#""just a string""#,
        "42",
        "null",
    ];
    let pointers = [
        "",
        "/",
        "/a",
        "/a/0",
        "/a/00",
        "/a/01",
        "/a/+1",
        "/a/-",
        "/a/8",
        "/a/9",
        "/B",
        "/B/é",
        "/B/~0",
        "/B/~1",
        "/B/a~1b",
        "/B/m~0n",
        "/B/~01",
        "/to",
        "/to/1",
        "/arr/10",
        "/arr/11/k/0",
        "/0",
        "/0/a",
        "/1",
        "/4",
        "/5",
        "/body",
        "//",
        "a",
        "/z/x",
    ];
    for text in texts {
        let arena = crate::json::arena_for(text.as_bytes());
        let node = crate::json::parse_node(text.as_bytes(), &arena).unwrap();
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        for p in pointers {
            let ours = pointer(&node, p).map(|n| {
                let mut s = String::new();
                text_under(n, &mut s);
                s
            });
            let theirs = value.pointer(p).map(|v| {
                let mut s = String::new();
                value_text(v, &mut s);
                s
            });
            assert_eq!(ours, theirs, "{text} at {p:?}");
        }
    }
}
