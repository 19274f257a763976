//! The `livecheck lint` command: the filter's configuration errors, offline.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::io::Write;
use std::process::{Command, Stdio};

fn lint(config: &str) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_livecheck"))
        .args(["lint", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(config.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn the_seed_example_lints_clean() {
    let (code, out) = lint(include_str!("../../examples/seed.json"));
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("ok (1 agent(s), 1 version(s), 3 check(s))"),
        "{out}"
    );
}

#[test]
fn each_problem_is_one_line_naming_agent_check_and_field() {
    let config = r#"{"agents": {"support": {"published": "1", "versions": {"1": {"live_checks": [
        {"name": "latency", "stage": "output", "kind": "response_time"},
        {"name": "iban", "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d+"},
        {"name": "pw", "stage": "input", "kind": "not_contains", "expected": "password", "recover": true}
    ]}}}}}"#;
    let (code, out) = lint(config);
    assert_eq!(code, 1);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].contains(r#"agent "support" version "1" check "latency" field `kind`: response_time is not yet supported"#), "{out}");
    assert!(
        lines[1].contains(r#"check "iban" field `pattern`"#),
        "{out}"
    );
    assert!(lines[2].contains(r#"check "pw" field `recover`"#), "{out}");
    assert!(!out.contains("NL\\d+"), "patterns are never printed: {out}");
}

#[test]
fn a_missing_file_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_livecheck"))
        .args(["lint", "/nonexistent/livecheck.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn help_prints_the_usage_of_every_command_and_succeeds() {
    for args in [
        &["--help"][..],
        &["eval", "--help"],
        &["test", "-h"],
        &["help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_livecheck"))
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        for command in ["livecheck lint", "livecheck test", "livecheck eval"] {
            assert!(text.contains(command), "{args:?}: {text}");
        }
    }
}

#[test]
fn tool_checks_lint_with_the_rest_one_line_per_problem() {
    let (code, out) = lint(include_str!("../../examples/tools.json"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 check(s), 4 tool check(s))"), "{out}");
    let config = r#"{"agents": {"mail": {"published": "1", "versions": {"1": {
        "allowed_tools": ["send email"],
        "tool_checks": [
            {"name": "a", "when": "x", "args": [{"pointer": "/to", "not_contains": "y"}]},
            {"name": "b", "args": [{"pointer": "/to", "pattern": "secret.*"}]}
        ]}}}}}"#;
    let (code, out) = lint(config);
    assert_eq!(code, 1);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].contains("field `allowed_tools[0]`"), "{out}");
    assert!(
        lines[1].contains(r#"check "a" field `when`: a tool check has either"#),
        "{out}"
    );
    assert!(
        lines[2].contains(r#"check "b" field `args[0].pattern`"#),
        "{out}"
    );
    assert!(!out.contains("secret"), "patterns are never printed: {out}");
}

#[test]
fn unread_pass_lints_with_a_warning_and_passes() {
    let seed = include_str!("../../examples/seed.json");
    let config = seed.replacen('{', r#"{"unread": "pass","#, 1);
    let (code, out) = lint(&config);
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].contains(
            r#"warning: `unread: "pass"` forwards every request livecheck does not read unchecked"#
        ),
        "{out}"
    );
    let (_, out) = lint(seed);
    assert!(!out.contains("warning"), "the default refuses: {out}");
}
