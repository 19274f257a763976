"""`livecheck eval`: a suite run through two versions of a policy that differ, the model's answers
asked of the upstream double (tests/e2e/upstream_double.py, a test double standing in for a model
API) with `--upstream`, or recorded in the suite."""

import json
import pathlib
import subprocess

from envoy_process import cargo_binary, wasm_path
from upstream_double import Answer, UpstreamDouble

POLICY = {
    "default_agent": "orders",
    "agents": {"orders": {"published": "1", "versions": {
        "1": {"blocked_reply": "Not here.", "live_checks": [
            {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
            {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
             "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18},
        ]},
        "2": {"blocked_reply": "Not here.", "live_checks": [
            {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
            {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
             "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18},
            {"name": "no-refunds", "stage": "output", "kind": "not_contains", "expected": "refund"},
            {"name": "tone", "stage": "output", "kind": "polite_tone", "mode": "background", "sample": 1.0},
        ]},
    }}},
}


def chat_answer(text: str) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1790000000, "model": "gpt-4.1-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}


def line(turn_id: str, question: str, recorded: str | None = None) -> dict:
    entry = {"id": turn_id, "api": "chat", "path": f"/eval/{turn_id}/v1/chat/completions",
             "request": {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": question}]}}
    if recorded is not None:
        entry["answer"] = {"body": chat_answer(recorded)}
    return entry


# What the double (the stand-in model) answers per turn.
ANSWERS = {
    "t1": "Your order ships tomorrow.",
    "t2": "You get a refund within 5 days.",
    "t3": "never asked: the question is refused",
    "t4": "Pay to NL91ABNA0417164300.",
}
SUITE = [
    line("t1", "Where is order 17?"),
    line("t2", "Can I return it?"),
    line("t3", "My password is hunter2."),
    line("t4", "Where do I pay?"),
    line("t5", "And the shoes?", recorded="A refund is on its way."),
]


def evaluate(tmp_path: pathlib.Path, *extra: str) -> subprocess.CompletedProcess:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    suite = tmp_path / "suite.jsonl"
    suite.write_text("\n".join(json.dumps(entry) for entry in SUITE) + "\n")
    double = UpstreamDouble().start()
    try:
        double.script(by_path={
            f"/eval/{turn_id}/v1/chat/completions": Answer(
                headers={"content-type": "application/json"},
                body_chunks=[json.dumps(chat_answer(text))], chunked=False)
            for turn_id, text in ANSWERS.items()})
        done = subprocess.run(
            [str(cargo_binary("livecheck-cli", "livecheck")), "eval", str(policy), "--version", "1",
             "--against", "2", str(suite), "--wasm", str(wasm_path("livecheck.wasm")),
             "--upstream", f"http://127.0.0.1:{double.port}", *extra],
            capture_output=True, text=True, timeout=120)
        asked = sorted(r.path for r in double.received)
    finally:
        double.stop()
    # Each version asked the model once per turn without a recorded answer whose question passed.
    assert asked == sorted(2 * [f"/eval/{t}/v1/chat/completions" for t in ("t1", "t2", "t4")]), asked
    return done


def test_two_versions_side_by_side_name_the_turns_whose_outcome_differs(tmp_path: pathlib.Path) -> None:
    done = evaluate(tmp_path, "--format", "json")
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(done.stdout)
    v1, v2 = report["versions"]
    assert (v1["version"], v2["version"]) == ("1", "2")
    assert v1["checks"]["no-passwords"] == {"passed": 4, "failed": 1, "errored": 0, "pass_rate": 0.8}
    assert v1["checks"]["no-iban"] == {"passed": 3, "failed": 1, "errored": 0, "pass_rate": 0.75}
    assert "no-refunds" not in v1["checks"]
    assert v2["checks"]["no-refunds"] == {"passed": 2, "failed": 2, "errored": 0, "pass_rate": 0.5}
    # The background check is skipped: it has no result, and never blocks.
    assert "tone" not in v2["checks"]
    assert v1["outcomes"] == {"passed": 3, "refused": 1, "withheld": 1}
    assert v2["outcomes"] == {"passed": 1, "refused": 1, "withheld": 3}
    assert [d["id"] for d in report["differs"]] == ["t2", "t5"]
    assert report["differs"][0]["versions"] == {
        "1": {"outcome": "passed", "check": None, "attempt": 1},
        "2": {"outcome": "withheld", "check": "no-refunds", "attempt": 1},
    }
    assert "refund within" not in done.stdout, "no text without --show-text"


def test_text_output_shows_ids_only_unless_asked_for_text(tmp_path: pathlib.Path) -> None:
    done = evaluate(tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    out = done.stdout
    assert "outcome differs on 2 turn(s)" in out, out
    assert "  t2: 1 passed | 2 withheld by no-refunds" in out, out
    assert "refund within" not in out, out
    shown = evaluate(tmp_path, "--show-text")
    assert '"You get a refund within 5 days."' in shown.stdout, shown.stdout
