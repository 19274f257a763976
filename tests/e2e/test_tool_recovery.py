"""Tool-call checks that recover, end to end (issue 51, item 2): the official SDKs -> real Envoy running
livecheck.wasm -> the model double, the `when` row judged by the REAL livecheck-judge sidecar (its judge
backend the judge backend double: a billing condition holds when the arguments contain `invoice`), and
the retry sent by that same sidecar to the model double (its `[[upstreams]]` name the double).

With `"recover": true` on the row that denies a call of a non-streamed answer, the model is asked again:
the retry the double receives is the caller's own request with the denial and its reason added where
the vendor keeps instructions, its tools still there, and nothing of the denied call's arguments. A
clean call in the new answer is what the caller gets; a repeat of the denied call is denied again, up
to `recover_attempts`, and the caller then gets the first denial. A streamed answer's text already went
out, so there it is cut with the reason and never asked again (README, "Tool-call checks").
Harness counterpart: tests/tool_checks.rs (`RECOVERING`).
"""

from __future__ import annotations

from envoy_process import STATS

import json

import pytest

from test_tool_checks import (AGENT, ANTHROPIC_KEY, BILLING_EMAIL, CLEAN_EMAIL, END_ALLOWED, END_DENIED, OPENAI_KEY,
                              TEXT_BEFORE, TURN, Got, _same_calls)
from tool_check_support import stack_owning, start_sidecar, x_core_check
from upstream_double import DOUBLE_IDS, DOUBLE_MODEL, DOUBLE_USAGE, model_double_tool_answer

REASON = "No billing info in email."
# What the model is told of the denial (the filter's sentence, as tests/tool_checks.rs pins it).
DENIAL = f'Your call of the tool "send_email" was denied: {REASON}'
RECOVER_ATTEMPTS = 2

POLICY = {
    "default_agent": AGENT,
    "agents": {AGENT: {"published": "1", "versions": {"1": {
        "blocked_reply": "I cannot help with that.",
        "recover_attempts": RECOVER_ATTEMPTS,
        "tool_checks": [
            {"name": "no-billing", "tool": "send_email", "when": "The email contains billing information",
             "reason": REASON, "recover": True},
        ],
    }}}},
}

# Where each vendor's request keeps its instructions: the retry adds the denial there.
INSTRUCTIONS = {"anthropic": "system", "chat": "messages", "responses": "instructions"}
# Of the denied call, what a clean call of the same tool does not share (its recipient it does).
BILLING_ONLY = [b"invoice", b"2231"]

vendors = pytest.mark.parametrize("vendor", ["anthropic", "chat", "responses"])


@pytest.fixture(scope="module")
def stack(double, judge_backend, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tool-recovery")
    with stack_owning(start_sidecar(judge_backend, workdir, upstream_port=double.port), double, workdir,
                      POLICY) as s:
        yield s


def recovering_turn(stack, double, vendor: str, stream: bool, answers: list) -> tuple[Got, dict]:
    """One SDK turn; the model double answers with `answers` in turn (the first to the caller's request,
    the next to each retry), each the sentence TEXT_BEFORE and one call. Returns what the caller got and
    the filter's counters for the row that moved (`passed` / `failed` / `errored`)."""
    double.script(sequence=[model_double_tool_answer(vendor, [case.call], text=TEXT_BEFORE, stream=stream)
                            for case in answers])
    before = row_counters(stack)
    got = TURN[vendor](stack.envoy, stream)
    after = row_counters(stack)
    return got, {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def row_counters(stack) -> dict:
    prefix = f"{STATS}livecheck.{AGENT}.no-billing."
    return {name[len(prefix):]: value for name, value in stack.envoy.stats(prefix).items()}


def attempts(stack, got: Got, count: int) -> list[tuple[int, str]]:
    """The row's stored results for the turn: (attempt, outcome), in attempt order."""
    items, _ = stack.wait_checks(got.headers.get("x-core-response-id"), count)
    return sorted((i["attempt"], i["outcome"]) for i in items if i["name"] == "no-billing")


def assert_asked_again_with_the_denial_and_the_tools(vendor: str, first, retry) -> None:
    """The retry is the caller's request with the denial added to its instructions, and nothing else
    changed: the same conversation and tools, not streamed, none of the denied call's arguments."""
    assert retry.path == first.path
    asked, again = json.loads(first.body), json.loads(retry.body)
    field = INSTRUCTIONS[vendor]
    if vendor == "chat":
        *kept, told = again["messages"]
        assert kept == asked["messages"], "the same conversation"
        assert told["role"] == "system", told
        instruction = told["content"]
    else:
        assert again[field].startswith(asked[field] + "\n\n"), again[field]
        instruction = again[field][len(asked[field]):]
    assert f"- {DENIAL}\n" in instruction, instruction
    assert again.get("tools") == asked["tools"], "the tools are still there"
    rest = {k: v for k, v in again.items() if k != field}
    assert rest == {k: v for k, v in asked.items() if k not in (field, "stream")}, "nothing else changed"
    for piece in BILLING_EMAIL.never[1:]:
        assert piece not in retry.body, f"{piece!r}: the retry carries the denied call"
    keys = [(name, first.headers.get(name)) for name in ("authorization", "x-api-key")]
    assert any(key in (value or "") for _, value in keys for key in (ANTHROPIC_KEY, OPENAI_KEY)), keys
    assert [(name, retry.headers.get(name)) for name, _ in keys] == keys, "asked again with the turn's own key"


def usage_of(attempts_made: int, vendor: str) -> tuple:
    """The model double's usage, once per answer."""
    return tuple(n * attempts_made for n in DOUBLE_USAGE[vendor].values())


@vendors
def test_a_denied_call_is_asked_again_with_its_reason_and_tools_and_a_clean_call_goes(stack, double, judge_backend,
                                                                                      vendor):
    judge_backend.reset()
    got, counted = recovering_turn(stack, double, vendor, False, [BILLING_EMAIL, CLEAN_EMAIL])

    first, retry = double.requests()
    assert_asked_again_with_the_denial_and_the_tools(vendor, first, retry)
    assert [c.tool_check.answered for c in judge_backend.tool_checks()] == ["holds", "clear"], \
        "the new answer's call was checked too"
    assert got.status == 200 and got.end == END_ALLOWED[vendor], got.end
    assert _same_calls(got.calls, [CLEAN_EMAIL.call]), got.calls
    assert got.texts == [TEXT_BEFORE]
    for piece in BILLING_ONLY:
        assert piece not in got.body, f"{piece!r} of the denied call reached the caller"
    assert x_core_check(got.headers) is None, "a recovered turn names no check"
    assert got.ident == (DOUBLE_IDS[vendor], DOUBLE_MODEL[vendor], usage_of(2, vendor)), "the usage of both answers"
    assert counted == {"failed": 1, "passed": 1}, counted
    assert attempts(stack, got, 2) == [(1, "failed"), (2, "passed")]


@vendors
def test_a_repeated_denied_call_is_denied_again_and_the_caller_gets_the_first_denial(stack, double, judge_backend,
                                                                                    vendor):
    judge_backend.reset()
    got, counted = recovering_turn(stack, double, vendor, False, [BILLING_EMAIL] * (1 + RECOVER_ATTEMPTS))

    first, *retries = double.requests()
    assert len(retries) == RECOVER_ATTEMPTS, "asked again recover_attempts times, then no more"
    for retry in retries:
        assert_asked_again_with_the_denial_and_the_tools(vendor, first, retry)
    assert [c.tool_check.answered for c in judge_backend.tool_checks()] == ["holds"] * (1 + RECOVER_ATTEMPTS), \
        "each repeat of the call was judged again"
    assert got.status == 200 and got.end == END_DENIED[vendor], got.end
    assert got.calls == [] and got.texts == [REASON], (got.calls, got.texts)
    for piece in BILLING_EMAIL.never:
        assert piece not in got.body, f"{piece!r} of the denied call reached the caller"
    assert got.ident == (DOUBLE_IDS[vendor], DOUBLE_MODEL[vendor], usage_of(1 + RECOVER_ATTEMPTS, vendor)), \
        "the first denial, with the usage of every answer"
    assert counted == {"failed": 1 + RECOVER_ATTEMPTS}, counted
    assert attempts(stack, got, 1 + RECOVER_ATTEMPTS) == [(n, "failed") for n in range(1, 2 + RECOVER_ATTEMPTS)]


@vendors
def test_a_streamed_answer_whose_call_is_denied_is_cut_and_not_asked_again(stack, double, judge_backend, vendor):
    """The text before the call already streamed to the caller: no retry could be shown in its place."""
    judge_backend.reset()
    got, counted = recovering_turn(stack, double, vendor, True, [BILLING_EMAIL, CLEAN_EMAIL])

    assert len(double.requests()) == 1, "never asked again"
    assert got.end == END_DENIED[vendor], (got.end, got.texts, got.raised)
    assert got.calls == [], got.calls
    assert got.texts and got.texts[-1] == REASON and "".join(got.texts[:-1]) == TEXT_BEFORE, got.texts
    for piece in BILLING_EMAIL.never:
        assert piece not in got.body, f"{piece!r} of the denied call reached the caller"
    assert counted == {"failed": 1}, counted
