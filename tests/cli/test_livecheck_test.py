"""`livecheck test --format junit`: the report a CI system reads, parsed by junitparser (a real JUnit
XML parser), with a passing, a failing and a case that cannot run."""

import contextlib
import json
import os
import pathlib
import subprocess
from typing import Iterator, Optional

import junitparser
import yaml

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


def run(*args: str, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
    """`livecheck test ARGS --wasm livecheck.wasm`; `env` replaces the LIVECHECK_JUDGE_* variables."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("LIVECHECK_JUDGE_")}
    environment.update(env or {})
    return subprocess.run([str(cargo_binary("livecheck-cli", "livecheck")), "test", *args,
                           "--wasm", str(wasm_path("livecheck.wasm"))],
                          capture_output=True, text=True, timeout=120, env=environment)


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
    cases = REPO / "examples" / "tests" / "seed.yaml"
    names = [case["name"] for case in yaml.safe_load(cases.read_text())["cases"]]
    done = run(str(REPO / "examples" / "seed.json"), str(cases), "--format", "junit")
    assert done.returncode == 0, done.stdout
    xml = junitparser.JUnitXml.fromstring(done.stdout)
    (suite,) = xml
    assert (suite.tests, suite.failures, suite.errors) == (len(names), 0, 0)
    assert [case.name for case in suite] == names, "one testcase per case of the file, in its order"
    assert all(case.is_passed for case in suite)


def _polite_policy_and_cases(tmp_path: pathlib.Path, **policy: object) -> tuple[pathlib.Path, pathlib.Path]:
    """A policy whose one judged input check (`polite-in`) the judge backend double decides (a text
    with its fail marker fails), with `policy`'s top-level fields, and two cases for it."""
    from judge_backend_double import FAIL_MARKER

    policy_path = tmp_path / "policy.json"
    policy_path.write_text(json.dumps({**policy, "default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
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
    return policy_path, cases


@contextlib.contextmanager
def _sidecar(tmp_path: pathlib.Path, **settings: object) -> Iterator[object]:
    """The real livecheck-judge asking the JUDGE BACKEND DOUBLE, stopped on exit."""
    from envoy_process import JudgeSidecar
    from judge_backend_double import JudgeBackendDouble

    backend = JudgeBackendDouble().start()
    try:
        judge = JudgeSidecar(tmp_path / "judge", [
            {"name": "double-openai", "api": "openai", "base_url": backend.base_url, "models": ["*"]}], **settings)
        try:
            yield judge
        finally:
            judge.stop()
    finally:
        backend.stop()


def test_judged_checks_can_be_answered_by_a_live_sidecar(tmp_path: pathlib.Path) -> None:
    """`--judge URL`: the real livecheck-judge answers the filter's judge callouts, asking the JUDGE
    BACKEND DOUBLE (a scripted model: a text containing its fail marker fails)."""
    policy, cases = _polite_policy_and_cases(tmp_path)
    with _sidecar(tmp_path) as judge:
        done = run(str(policy), str(cases), "--judge", judge.url)
        unscripted = run(str(policy), str(cases))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 case(s): 2 passed" in done.stdout, done.stdout
    # Without the sidecar nothing answers the judge: the cases cannot run, and say so.
    assert unscripted.returncode == 1
    assert "scripts no verdict for it" in unscripted.stdout, unscripted.stdout


def test_a_policy_reading_its_token_from_the_vm_environment_runs_against_a_sidecar_that_checks_it(
        tmp_path: pathlib.Path) -> None:
    """`judge_token_env` (as examples/mesh.json): the VM gets the variable from the CLI's environment, as
    Envoy's `host_env_keys` reads Envoy's. The real sidecar checks it (`[filter] token_env`): the right
    token passes, a wrong one is refused there (the judged check errors, fail closed); unset with
    `--judge`, or not a usable token, the CLI says so before any case runs, naming the variable only."""
    from envoy_process import JudgeSidecar
    from judge_backend_double import FAIL_MARKER, JudgeBackendDouble

    token = "cli-filter-token-5c9e1a77d0"
    policy, cases = _polite_policy_and_cases(tmp_path, judge_token_env="LIVECHECK_JUDGE_TOKEN")
    with _sidecar(tmp_path, tables={"filter": {"token_env": "LIVECHECK_FILTER_TOKEN"}},
                  env={"LIVECHECK_FILTER_TOKEN": token}) as judge:
        right = run(str(policy), str(cases), "--judge", judge.url, env={"LIVECHECK_JUDGE_TOKEN": token})
        wrong = run(str(policy), str(cases), "--judge", judge.url,
                    env={"LIVECHECK_JUDGE_TOKEN": token[:-1] + "X"})
        unset = run(str(policy), str(cases), "--judge", judge.url)
    assert right.returncode == 0, right.stdout + right.stderr
    assert "2 case(s): 2 passed" in right.stdout, right.stdout
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "expected the turn passed, but it was refused by polite-in" in wrong.stdout, wrong.stdout
    assert "polite-in errored" in wrong.stdout, wrong.stdout
    assert unset.returncode == 2 and unset.stdout.count("ok ") == 0, "refused before any case ran"
    assert ("the policy's judge_token_env names LIVECHECK_JUDGE_TOKEN, which is not set: with --judge the "
            "sidecar checks the token") in unset.stderr, unset.stderr

    short = run(str(policy), str(cases), env={"LIVECHECK_JUDGE_TOKEN": "short"})
    assert short.returncode == 2
    assert "LIVECHECK_JUDGE_TOKEN is set, but not to 16 to 256 visible ASCII characters" in short.stderr, short.stderr
    assert "short" not in short.stderr.replace("LIVECHECK_JUDGE_TOKEN is set", "")
    assert token not in right.stdout + wrong.stdout + unset.stderr
