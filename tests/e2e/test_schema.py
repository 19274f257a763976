"""The configuration's JSON Schema (schema/livecheck-config.schema.json, `livecheck schema`) agrees with
the compiler (`Policy::from_json`, run as `livecheck lint -`): every shipped configuration passes both,
configurations at the edges of each constraint pass both, and broken ones (an unknown field, a wrong enum
value, a wrong type, a number out of range) fail both. The schema is for editors; where the two differ the
compiler decides, so the schema must never refuse what the compiler accepts.
"""

from __future__ import annotations

import copy
import json
import subprocess
from typing import Any, Callable, Iterator

import jsonschema
import pytest
import yaml

from envoy_process import REPO, cargo_binary

SCHEMA = json.loads((REPO / "schema" / "livecheck-config.schema.json").read_text())
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)
EXAMPLES = sorted((REPO / "examples").glob("*.json"))
ENVOY_CONFIGS = sorted((REPO / "envoy").glob("*.yaml"))
SEED = json.loads((REPO / "examples" / "seed.json").read_text())
TOOLS = json.loads((REPO / "examples" / "tools.json").read_text())


@pytest.fixture(scope="module")
def lint():
    livecheck = cargo_binary("livecheck-cli", "livecheck")

    def run(config: Any) -> subprocess.CompletedProcess:
        text = config if isinstance(config, str) else json.dumps(config)
        return subprocess.run([str(livecheck), "lint", "-"], input=text, capture_output=True, text=True,
                              timeout=30)

    return run


def schema_errors(config: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(config)]


def livecheck_configurations(node: Any) -> Iterator[str]:
    """The plugin configurations (StringValue JSON) of the wasm filters named `livecheck` in an Envoy config,
    and the filter configs of the dynamic module's filter `livecheck` (envoy/livecheck-native.yaml)."""
    if isinstance(node, dict):
        configuration = node.get("configuration")
        if node.get("name") == "livecheck" and isinstance(configuration, dict) and "value" in configuration:
            yield configuration["value"]
        filter_config = node.get("filter_config")
        if node.get("filter_name") == "livecheck" and isinstance(filter_config, dict) and "value" in filter_config:
            yield filter_config["value"]
        for value in node.values():
            yield from livecheck_configurations(value)
    elif isinstance(node, list):
        for value in node:
            yield from livecheck_configurations(value)


def test_the_schema_is_a_draft_07_schema():
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_follows_the_schema(example):
    assert schema_errors(json.loads(example.read_text())) == []


@pytest.mark.parametrize("envoy_config", ENVOY_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_envoy_config_carries_a_configuration_both_accept(envoy_config, lint):
    configurations = list(livecheck_configurations(yaml.safe_load(envoy_config.read_text())))
    assert configurations, f"no livecheck plugin configuration found in {envoy_config.name}"
    for text in configurations:
        assert schema_errors(json.loads(text)) == []
        run = lint(text)
        assert run.returncode == 0, run.stdout + run.stderr


def edit(base: dict, change: Callable[[dict], None]) -> dict:
    config = copy.deepcopy(base)
    change(config)
    return config


def top(c: dict) -> dict:
    return c


def seed_agent(c: dict) -> dict:
    return c["agents"]["orders"]


def seed_version(c: dict) -> dict:
    return c["agents"]["orders"]["versions"]["1"]


def seed_check(c: dict) -> dict:
    return seed_version(c)["live_checks"][1]  # no-iban: an output matches_pattern check


def tools_version(c: dict) -> dict:
    return c["agents"]["mail"]["versions"]["1"]


def tool_row(c: dict) -> dict:
    return tools_version(c)["tool_checks"][1]  # no-card-numbers: an args row


def when_row(c: dict) -> dict:
    return tools_version(c)["tool_checks"][3]  # on-task: a judged row


def add_judged_check(**fields: Any) -> Callable[[dict], None]:
    """Adds a judged output check (`tone`, polite_tone) with these fields to the seed's version."""
    check = {"name": "tone", "stage": "output", "kind": "polite_tone", **fields}
    return lambda c: seed_version(c)["live_checks"].append(check)


def put(get: Callable[[dict], dict], key: str, value: Any) -> Callable[[dict], None]:
    return lambda c: get(c).__setitem__(key, value)


# Each at the edge of a constraint the schema states: the compiler accepts them, so the schema must too.
ACCEPTED = {
    "$schema as editors write it": (SEED, put(top, "$schema", "../schema/livecheck-config.schema.json")),
    "recover_attempts 3": (SEED, put(seed_version, "recover_attempts", 3)),
    "deadline_ms 3600000": (SEED, put(seed_version, "deadline_ms", 3_600_000)),
    "max_match 200": (SEED, put(seed_check, "max_match", 200)),
    "stream_frame_bytes 0": (SEED, put(top, "stream_frame_bytes", 0)),
    "stream_frame_bytes 64 KiB": (SEED, put(top, "stream_frame_bytes", 65536)),
    "max_body_bytes 1": (SEED, put(top, "max_body_bytes", 1)),
    "an upper-case header name": (SEED, put(top, "agent_header", "X-Agent")),
    "an Istio judge_cluster": (SEED, put(top, "judge_cluster", "outbound|8181||judge.ns.svc.cluster.local")),
    "a judge_authority with port": (SEED, put(top, "judge_authority", "[::1]:8181")),
    "a judge_token of 16 characters": (SEED, put(top, "judge_token", "abcdefghijklmnop")),
    "mcp_paths of two characters": (TOOLS, put(top, "mcp_paths", ["/m", "/a/b.c-d"])),
    "a background check sampled at 1": (SEED, add_judged_check(mode="background", sample=1,
                                                                alert={"failure_rate": 1, "over_last": 1000})),
    "a judged check's timeout_ms 120000": (SEED, add_judged_check(timeout_ms=120000, on_error="pass")),
    "an args pointer of all the arguments": (TOOLS, put(tool_row, "args", [{"pointer": "", "not_contains": "x"}])),
    "a tool glob": (TOOLS, put(tool_row, "tool", "github/*_issue?")),
    "null for an optional field": (SEED, put(seed_version, "model", None)),
}

# Each broken in one place; the schema and the compiler both refuse it, the compiler naming that field.
REFUSED = {
    "unknown top-level field": (SEED, put(top, "agent_headers", "x-agent"), "agent_headers"),
    "unknown check field": (SEED, put(seed_check, "severity", "high"), "severity"),
    "unknown tool-check field": (TOOLS, put(tool_row, "deny", True), "deny"),
    "unknown agent field": (SEED, put(seed_agent, "draft", "2"), "draft"),
    "stage not an enum value": (SEED, put(seed_check, "stage", "both"), "stage"),
    "kind not a known kind": (SEED, put(seed_check, "kind", "regex"), "kind"),
    "kind not yet supported": (SEED, put(seed_check, "kind", "response_time"), "kind"),
    "mode not an enum value": (SEED, put(seed_check, "mode", "async"), "mode"),
    "on_error not an enum value": (SEED, put(seed_check, "on_error", "ignore"), "on_error"),
    "max_body_bytes a string": (SEED, put(top, "max_body_bytes", "1MiB"), "max_body_bytes"),
    "recover a string": (SEED, put(seed_check, "recover", "yes"), "recover"),
    "live_checks an object": (SEED, put(seed_version, "live_checks", {"no-iban": {}}), "live_checks"),
    "agents a list": (SEED, put(top, "agents", []), "agents"),
    "$schema a number": (SEED, put(top, "$schema", 7), "$schema"),
    "no agents": (SEED, put(top, "agents", {}), "agents"),
    "an agent without versions": (SEED, put(seed_agent, "versions", {}), "published"),
    "recover_attempts 0": (SEED, put(seed_version, "recover_attempts", 0), "recover_attempts"),
    "recover_attempts 4": (SEED, put(seed_version, "recover_attempts", 4), "recover_attempts"),
    "deadline_ms above an hour": (SEED, put(seed_version, "deadline_ms", 3_600_001), "deadline_ms"),
    "max_match 201": (SEED, put(seed_check, "max_match", 201), "max_match"),
    "max_match 0": (SEED, put(seed_check, "max_match", 0), "max_match"),
    "max_match negative": (SEED, put(seed_check, "max_match", -1), "max_match"),
    "max_body_bytes 0": (SEED, put(top, "max_body_bytes", 0), "max_body_bytes"),
    "stream_frame_bytes below 64 KiB": (SEED, put(top, "stream_frame_bytes", 65535), "stream_frame_bytes"),
    "sample 0": (SEED, add_judged_check(mode="background", sample=0), "sample"),
    "sample above 1": (SEED, add_judged_check(mode="background", sample=1.5), "sample"),
    "alert over_last 1001": (SEED, add_judged_check(alert={"failure_rate": 0.5, "over_last": 1001}), "alert.over_last"),
    "alert without over_last": (SEED, add_judged_check(alert={"failure_rate": 0.5}), "over_last"),
    "a judged timeout_ms 0": (SEED, add_judged_check(timeout_ms=0), "timeout_ms"),
    "a check without stage": (SEED, lambda c: seed_check(c).pop("stage"), "stage"),
    "a check name with a space": (SEED, put(seed_check, "name", "no iban"), "name"),
    "a check name of 65 characters": (SEED, put(seed_check, "name", "a" * 65), "name"),
    "an agent id with a slash": (SEED, lambda c: c["agents"].__setitem__("a/b", c["agents"]["orders"]), "agent id"),
    "a header name with a space": (SEED, put(top, "agent_header", "x agent"), "agent_header"),
    "a judge_token of 15 characters": (SEED, put(top, "judge_token", "abcdefghijklmno"), "judge_token"),
    "an mcp path ending in /": (TOOLS, put(top, "mcp_paths", ["/mcp/"]), "mcp_paths[0]"),
    "an mcp path with a query": (TOOLS, put(top, "mcp_paths", ["/mcp?x=1"]), "mcp_paths[0]"),
    "an mcp path of /": (TOOLS, put(top, "mcp_paths", ["/"]), "mcp_paths[0]"),
    "a pattern of 501 characters": (SEED, put(seed_check, "pattern", "a" * 501), "pattern"),
    "an args pointer without /": (TOOLS, put(tool_row, "args", [{"pointer": "to", "not_contains": "x"}]),
                                  "args[0].pointer"),
    "an args rule's not_contains of 201 characters": (
        TOOLS, put(tool_row, "args", [{"pointer": "", "not_contains": "x" * 201}]), "args[0].not_contains"),
    "empty args": (TOOLS, put(tool_row, "args", []), "args"),
    "a tool glob with a space": (TOOLS, put(tool_row, "tool", "send email"), "tool"),
    "allowed_tools with a space": (TOOLS, put(tools_version, "allowed_tools", ["a b"]), "allowed_tools[0]"),
    "a tool check's timeout_ms above 120000": (TOOLS, put(when_row, "timeout_ms", 120001), "timeout_ms"),
}


@pytest.mark.parametrize("case", ACCEPTED, ids=str)
def test_configurations_at_the_edges_pass_the_schema_and_the_compiler(case, lint):
    base, change = ACCEPTED[case]
    config = edit(base, change)
    run = lint(config)
    assert run.returncode == 0, run.stdout + run.stderr  # the case itself is valid
    assert schema_errors(config) == []


@pytest.mark.parametrize("case", REFUSED, ids=str)
def test_broken_configurations_fail_the_schema_and_the_compiler(case, lint):
    base, change, field = REFUSED[case]
    config = edit(base, change)
    run = lint(config)
    assert run.returncode == 1, run.stdout + run.stderr
    assert field in run.stdout, run.stdout  # refused for this change, not another
    assert schema_errors(config), f"the schema accepts what the compiler refuses: {run.stdout}"
