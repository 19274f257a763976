"""The fidelity suite against real Envoy: every scenario in tests/fidelity/scenarios.json, asserted.

The harness runs the same file; where the two disagree, the harness is wrong (these expectations
were recorded from Envoy).
"""

from __future__ import annotations

import json
import pathlib
import time

import pytest

import raw_client
from upstream_double import Answer

SCENARIOS_PATH = pathlib.Path(__file__).resolve().parents[1] / "fidelity" / "scenarios.json"
SCENARIOS = json.loads(SCENARIOS_PATH.read_text())["scenarios"]


def _answer(spec) -> Answer:
    if spec == "timeout":
        return Answer(hang=True)
    if spec == "reset":
        return Answer(headers={"content-type": "text/plain"}, body_chunks=["the answer breaks off"],
                      reset_after_headers=True)
    return Answer(
        status=spec.get("status", 200),
        headers=spec.get("headers", {}),
        body_chunks=spec.get("body_chunks", [spec["body"]] if spec.get("body") else []),
        after_upstream_end=0.2 if spec.get("after") == "upstream_end" else None,
    )


def _exchange(envoy, double, step: dict, name: str) -> None:
    upstream = step.get("upstream")
    double.script(
        default=_answer(upstream) if upstream else Answer(status=599, body_chunks=["upstream was not scripted"]),
        by_path={path: _answer(spec) for path, spec in step.get("callouts", {}).items()},
    )
    req = step["request"]
    reply = raw_client.send(
        envoy.port,
        req.get("method", "GET"),
        req.get("path", "/"),
        req.get("headers", {}),
        req.get("body_chunks", []),
    )
    expect = step["expect"]
    seen = f"{name}: status={reply.status} reset={reply.reset} headers={reply.headers} body={reply.body!r}"

    if "status" in expect:
        assert reply.status == expect["status"], seen
    for header, value in expect.get("headers", {}).items():
        assert reply.headers.get(header.lower()) == value, f"{header}: {seen}"
    for header in expect.get("absent_headers", []):
        assert header.lower() not in reply.headers, f"{header} present: {seen}"
    if "body" in expect:
        assert reply.body.decode(errors="replace") == expect["body"], seen
    assert reply.reset == expect.get("reset", False), seen

    upstream_requests = double.requests()
    assert bool(double.incomplete) == expect.get("upstream_incomplete", False), f"incomplete upstream requests: {double.incomplete}"
    if upstream is None:
        assert upstream_requests == [], f"the request reached upstream: {seen}"
    else:
        assert len(upstream_requests) == 1, seen
        got = upstream_requests[0]
        if "upstream_body" in expect:
            assert got.body.decode(errors="replace") == expect["upstream_body"], seen
        for header, value in expect.get("upstream_headers", {}).items():
            assert got.headers.get(header.lower()) == value, f"upstream {header}: {got.headers}"
    if "callout_paths" in expect:
        assert [r.path for r in double.requests(callouts=True)] == expect["callout_paths"], seen
    if "metrics" in expect:
        stats = envoy.stats("wasmcustom.")
        for metric, value in expect["metrics"].items():
            assert stats.get(metric) == value, f"{metric}: {stats}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario_matches_envoy(scenario, fidelity_envoy, double):
    envoy = fidelity_envoy(scenario.get("filter", {}))
    try:
        _exchange(envoy, double, scenario, scenario["name"])
        for i, step in enumerate(scenario.get("then", [])):
            time.sleep(step.get("after_ms", 0) / 1000)
            _exchange(envoy, double, step, f"{scenario['name']} (then #{i + 1})")
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- Envoy log ({envoy.log_path}), last lines:\n{envoy.log()[-2500:]}") from None


# The fields both runners replay (tests/fidelity/README.md); harness/tests/fidelity.rs refuses any other.
SCENARIO_FIELDS = {"name", "rule", "filter", "request", "upstream", "callouts", "expect", "then"}


def test_scenario_names_are_unique_and_rules_stated():
    names = [s["name"] for s in SCENARIOS]
    assert len(names) == len(set(names))
    for s in SCENARIOS:
        assert s.get("rule", "").strip(), f"{s['name']} states no rule"
        assert "expect" in s, s["name"]
        # Every scenario runs in both runners: there is no field to skip one (no `envoy_only`).
        assert set(s) <= SCENARIO_FIELDS, f"{s['name']}: {set(s) - SCENARIO_FIELDS}"
