"""`livecheck test --format junit`: the report a CI system reads, parsed by junitparser (a real JUnit
XML parser), with a passing, a failing and a case that cannot run."""

import json
import pathlib
import subprocess

import junitparser

from envoy_process import REPO, cargo_binary, wasm_path

CASES = """
cases:
  - name: a clean question passes
    api: anthropic
    request: {model: claude-sonnet-4-5, max_tokens: 64, messages: [{role: user, content: "Where is order 17?"}]}
    expect: {outcome: passed}
  - name: a password wrongly expected to pass
    api: anthropic
    request: {model: claude-sonnet-4-5, max_tokens: 64, messages: [{role: user, content: "my password is <b>hunter2</b>"}]}
    expect: {outcome: passed}
  - name: a retry the case does not script
    api: chat
    request: {model: gpt-4.1-mini, messages: [{role: user, content: "Where do I pay?"}]}
    answer:
      body: {id: c, object: chat.completion, created: 1, model: gpt-4.1-mini,
             choices: [{index: 0, message: {role: assistant, content: "Pay to NL91ABNA0417164300."}, finish_reason: stop}]}
    expect: {outcome: recovered}
"""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(cargo_binary("livecheck", "livecheck")), "test", *args,
                           "--wasm", str(wasm_path("livecheck.wasm"))],
                          capture_output=True, text=True, timeout=120)


def test_junit_output_parses_with_one_testcase_per_case_and_the_failure_named(tmp_path: pathlib.Path) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    done = run(str(REPO / "examples" / "seed.json"), str(cases), "--format", "junit")
    assert done.returncode == 1, done.stderr
    report = tmp_path / "report.xml"
    report.write_text(done.stdout)
    xml = junitparser.JUnitXml.fromfile(str(report))
    suites = list(xml)
    assert len(suites) == 1
    suite = suites[0]
    assert (suite.name, suite.tests, suite.failures, suite.errors) == (str(cases), 3, 1, 1)
    by_name = {case.name: case for case in suite}
    assert set(by_name) == {"a clean question passes", "a password wrongly expected to pass",
                            "a retry the case does not script"}
    assert by_name["a clean question passes"].is_passed
    [failure] = by_name["a password wrongly expected to pass"].result
    assert isinstance(failure, junitparser.Failure)
    assert failure.message == "expected the turn passed, but it was refused by no-passwords"
    assert "happened: was refused by no-passwords (status 200; results: no-passwords failed)" in failure.text
    [error] = by_name["a retry the case does not script"].result
    assert isinstance(error, junitparser.Error)
    assert "asked the model again (attempt 2)" in error.message
    assert all(case.classname == str(cases) for case in suite)
    assert "sha256" in str(suite.properties().__next__().value)


def test_every_example_case_passes_in_junit_too() -> None:
    done = run(str(REPO / "examples" / "seed.json"), str(REPO / "examples" / "tests" / "seed.yaml"),
               "--format", "junit")
    assert done.returncode == 0, done.stdout
    xml = junitparser.JUnitXml.fromstring(done.stdout)
    suite = next(iter(xml))
    assert suite.tests >= 7 and suite.failures == 0 and suite.errors == 0
    assert all(case.is_passed for case in suite)


def test_judged_checks_can_be_answered_by_a_live_sidecar(tmp_path: pathlib.Path) -> None:
    """`--judge URL`: the real livecheck-judge answers the filter's judge callouts, asking the JUDGE
    BACKEND DOUBLE (a scripted model: a text containing its fail marker fails)."""
    from envoy_process import JudgeSidecar
    from judge_backend_double import FAIL_MARKER, JudgeBackendDouble

    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
        "model": "gpt-4.1-mini", "blocked_reply": "Be nice.",
        "live_checks": [{"name": "polite-in", "stage": "input", "kind": "polite_tone"}]}}}}}))
    cases = tmp_path / "cases.yaml"
    cases.write_text(f"""
cases:
  - name: a polite question goes on
    api: chat
    request: {{model: gpt-4.1-mini, messages: [{{role: user, content: "Where is order 17, please?"}}]}}
    expect: {{outcome: passed, results: {{polite-in: passed}}}}
  - name: a rude question is refused by the judge
    api: chat
    request: {{model: gpt-4.1-mini, messages: [{{role: user, content: "{FAIL_MARKER} where is my order"}}]}}
    expect: {{outcome: refused, check: polite-in, text: "Be nice."}}
""")
    backend = JudgeBackendDouble().start()
    try:
        judge = JudgeSidecar(tmp_path / "judge", [
            {"name": "double-openai", "api": "openai", "base_url": backend.base_url, "models": ["*"]}])
        try:
            done = run(str(policy), str(cases), "--judge", judge.url)
            unscripted = run(str(policy), str(cases))
        finally:
            judge.stop()
    finally:
        backend.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 case(s): 2 passed" in done.stdout, done.stdout
    # Without the sidecar nothing answers the judge: the cases cannot run, and say so.
    assert unscripted.returncode == 1
    assert "scripts no verdict for it" in unscripted.stdout, unscripted.stdout
