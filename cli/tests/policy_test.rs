//! `livecheck test`: the example cases pass against the built `.wasm`, and a case that does not
//! hold fails with the expectation it broke and what happened instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root, where the filter's package (whose `.wasm` the CLI runs) and the examples live.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn wasm() -> PathBuf {
    livecheck_harness::fresh_wasm(Path::new(ROOT), "livecheck").unwrap_or_else(|e| panic!("{e}"))
}

fn root(path: &str) -> String {
    format!("{ROOT}/{path}")
}

/// Runs `livecheck test POLICY CASES --wasm <fresh .wasm> EXTRA...`: (exit code, stdout, stderr).
fn livecheck_test(policy: &str, cases: &str, extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_livecheck"))
        .arg("test")
        .arg(policy)
        .arg(cases)
        .arg("--wasm")
        .arg(wasm())
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A case file in a temporary directory.
fn case_file(name: &str, yaml: &str) -> String {
    let dir = std::env::temp_dir().join(format!("livecheck-policy-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, yaml).unwrap();
    path.display().to_string()
}

const PASSWORD_QUESTION: &str = r#"
    api: anthropic
    request: {model: claude-sonnet-4-5, max_tokens: 64, messages: [{role: user, content: "my password is hunter2"}]}
"#;

#[test]
fn the_example_cases_pass() {
    for name in ["seed", "every-kind", "tools"] {
        let (code, out, err) = livecheck_test(
            &root(&format!("examples/{name}.json")),
            &root(&format!("examples/tests/{name}.yaml")),
            &[],
        );
        assert_eq!(code, 0, "{name}: {out}{err}");
        assert!(out.contains(" 0 failed, 0 could not run"), "{out}");
        assert!(!out.contains("FAIL"), "{out}");
    }
}

#[test]
fn a_case_that_does_not_hold_names_the_expectation_and_what_happened() {
    let cases = format!(
        "cases:\n  - name: wrongly expected to pass\n{}    expect: {{outcome: passed, text: \"hello\"}}\n",
        PASSWORD_QUESTION
    );
    let (code, out, _) = livecheck_test(
        &root("examples/seed.json"),
        &case_file("fails.yaml", &cases),
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL   wrongly expected to pass"), "{out}");
    assert!(
        out.contains("expected the turn passed, but it was refused by no-passwords"),
        "{out}"
    );
    assert!(
        out.contains(
            "expected the caller to get the text \"hello\", but it got \"I cannot help with that."
        ),
        "{out}"
    );
    assert!(
        out.contains("happened: the turn was refused by no-passwords (status 200; results: no-passwords failed)"),
        "{out}"
    );
    assert!(out.contains("1 case(s): 0 passed, 1 failed"), "{out}");
}

#[test]
fn each_expectation_fails_on_its_own() {
    // The refused case as written holds; each variant breaks one expectation.
    let holds = "{outcome: refused, check: no-passwords, code: input_check_failed, status: 200}";
    let variants = [
        (holds, None),
        (
            "{outcome: refused, check: no-iban}",
            Some("expected refused by no-iban, but it was refused by no-passwords"),
        ),
        (
            "{outcome: refused, code: check_errored}",
            Some("expected X-Core-Check code=check_errored, but got input_check_failed"),
        ),
        (
            "{outcome: refused, status: 400}",
            Some("expected status 400, but the caller got 200"),
        ),
        (
            "{outcome: refused, results: {no-passwords: passed}}",
            Some("expected no-passwords passed, but it failed"),
        ),
        (
            "{outcome: refused, results: {no-iban: passed}}",
            Some("expected no-iban passed, but it has no result in the turn"),
        ),
    ];
    for (expect, message) in variants {
        let cases = format!("cases:\n  - name: c\n{PASSWORD_QUESTION}    expect: {expect}\n");
        let (code, out, _) = livecheck_test(
            &root("examples/seed.json"),
            &case_file("one.yaml", &cases),
            &[],
        );
        match message {
            None => assert_eq!(code, 0, "{expect}: {out}"),
            Some(m) => {
                assert_eq!(code, 1, "{expect}: {out}");
                assert!(out.contains(m), "{expect}: {out}");
            }
        }
    }
}

#[test]
fn a_cut_a_recovery_and_a_denial_that_do_not_hold_say_what_happened_instead() {
    // The example cases, each with one expectation changed.
    let tools = std::fs::read_to_string(root("examples/tests/tools.yaml")).unwrap();
    let broken = tools
        .replace("before_char: 7, text: \"Pay to \"", "before_char: 9")
        .replace("denied_by: no-billing}", "denied_by: on-task}");
    let (code, out, _) = livecheck_test(
        &root("examples/tools.json"),
        &case_file("tools.yaml", &broken),
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "expected the caller to get 9 character(s) before the cut, but it got 7: \"Pay to \""
        ),
        "{out}"
    );
    assert!(
        out.contains("expected a tool call denied by on-task, but denied by no-billing"),
        "{out}"
    );
    let seed = std::fs::read_to_string(root("examples/tests/seed.yaml")).unwrap();
    let broken = seed.replacen("attempt: 2", "attempt: 3", 1);
    let (code, out, _) = livecheck_test(
        &root("examples/seed.json"),
        &case_file("seed.yaml", &broken),
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("expected the caller to get attempt 3, but it got attempt 2"),
        "{out}"
    );
}

#[test]
fn a_judged_check_without_a_verdict_cannot_run_and_says_how_to_script_one() {
    let cases = r#"cases:
  - name: no verdict
    api: chat
    request: {model: gpt-4.1-mini, messages: [{role: user, content: "Where is order 17?"}]}
    expect: {outcome: passed}
"#;
    let (code, out, _) = livecheck_test(
        &root("examples/every-kind.json"),
        &case_file("unscripted.yaml", cases),
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ERROR  no verdict"), "{out}");
    assert!(
        out.contains("the filter asked the judge about check about-orders, and the case scripts no verdict for it"),
        "{out}"
    );
    assert!(out.contains("--judge URL"), "{out}");
}

#[test]
fn without_a_wasm_nothing_is_tested() {
    let out = Command::new(env!("CARGO_BIN_EXE_livecheck"))
        .args([
            "test",
            &root("examples/seed.json"),
            &root("examples/tests/seed.yaml"),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--wasm names the livecheck.wasm to test"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_livecheck"))
        .args([
            "test",
            &root("examples/seed.json"),
            &root("examples/tests/seed.yaml"),
        ])
        .args(["--wasm", "/nonexistent/livecheck.wasm"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("/nonexistent/livecheck.wasm: No such file"),
        "{err}"
    );
}

#[test]
fn a_policy_the_filter_refuses_is_reported_before_any_case_runs() {
    let policy = case_file(
        "bad.json",
        r#"{"agents": {"a": {"published": "9", "versions": {"1": {}}}}}"#,
    );
    let (code, out, err) = livecheck_test(&policy, &root("examples/tests/seed.yaml"), &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("published"), "{err}");
    assert!(out.is_empty(), "{out}");
}
