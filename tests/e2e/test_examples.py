"""Every configuration in examples/ passes `livecheck lint` (the binary operators run in their CI, built
here with `cargo build --locked -p livecheck-cli`), and examples/every-kind.json keeps
showing every check kind and mode."""

from __future__ import annotations

import json
import subprocess

import pytest

from envoy_process import REPO, cargo_binary

EXAMPLES = sorted((REPO / "examples").glob("*.json"))


@pytest.fixture(scope="module")
def livecheck_bin():
    return cargo_binary("livecheck-cli", "livecheck")


def test_there_are_examples():
    assert {p.name for p in EXAMPLES} >= {"seed.json", "every-kind.json"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_lints_clean(livecheck_bin, example):
    run = subprocess.run([str(livecheck_bin), "lint", str(example)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith(f"{example}: ok ("), run.stdout


def test_lint_refuses_a_broken_config(livecheck_bin):
    """The lint test is not vacuous: a bad check is refused with a line naming its field."""
    bad = json.loads((REPO / "examples" / "every-kind.json").read_text())
    bad["agents"]["orders"]["versions"]["2"]["live_checks"][0]["on_error"] = "pass"  # a rule check
    run = subprocess.run([str(livecheck_bin), "lint", "-"], input=json.dumps(bad), capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "on_error" in run.stdout, run.stdout


def test_every_kind_shows_every_kind_and_mode():
    config = json.loads((REPO / "examples" / "every-kind.json").read_text())
    checks = [c for agent in config["agents"].values() for version in agent["versions"].values()
              for c in version.get("live_checks", [])]
    kinds = {c["kind"] for c in checks}
    assert kinds == {"not_contains", "matches_pattern", "polite_tone", "correct_format", "no_made_up_facts",
                     "custom_rule"}
    judged = {"polite_tone", "correct_format", "no_made_up_facts", "custom_rule"}
    for stage in ("input", "output"):
        for family in (judged, {"not_contains", "matches_pattern"}):
            assert any(c["stage"] == stage and c["kind"] in family for c in checks), (stage, family)
    background = [c for c in checks if c.get("mode") == "background"]
    assert background and any("sample" in c for c in background) and any("alert" in c for c in background)
    assert any(c.get("mode", "block") == "block" for c in checks)
    assert any(c.get("on_error") == "pass" for c in checks)
    assert any("judge_model" in c for c in checks)
    assert any(c.get("recover") for c in checks if c["kind"] in judged)
    assert any(c.get("recover") for c in checks if c["kind"] not in judged)
    assert any("timeout_ms" in c for c in checks)
    assert config.get("router_models")
