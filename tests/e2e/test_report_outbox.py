"""A full turn-report outbox through real Envoy: while the sidecar cannot be reached every report waits in
the VM's outbox (src/outbox.rs); once the outbox is full the newest report is dropped and counted in
`wasmcustom.livecheck.reports.dropped`, and nothing else changes: every turn is served and checked as
before, and the reports that waited are stored once the sidecar is back (harness:
tests/reports.rs `a_full_outbox_drops_reports_and_counts_them`).

The outbox holds 16,384 reports or 16 MiB, whichever comes first. 16,384 turns cost minutes here, so
the bytes fill it: a report carries the text its background checks judge, and each turn below answers
6 MiB of text that a sampled background check reads. Two such reports fit (12 MiB), a third does not
(18 MiB), so of four turns exactly the last two are dropped, whatever a report adds to its text.
"""

from __future__ import annotations

import json

import httpx2 as httpx
import pytest

from envoy_process import STATS, JudgeSidecar
from tool_check_support import (API_TOKEN, API_TOKEN_ENV, JUDGE_OWN_KEY, JUDGE_OWN_KEY_ENV, judge_backends,
                                stack_owning, wait_for, x_core_check)
from upstream_double import Answer

DROPPED = f"{STATS}livecheck.reports.dropped"
OUTBOX_BYTES = 16 << 20  # src/outbox.rs MAX_BYTES
TEXT_BYTES = 6 << 20  # more than a third of the outbox, at most half
BLOCKED = "Not here."

POLICY = {
    "default_agent": "big",
    # The answers are read whole for the background check: more than the 1 MiB default.
    "max_body_bytes": 8 << 20,
    "agents": {"big": {"published": "1", "versions": {"1": {
        "blocked_reply": BLOCKED,
        "live_checks": [
            {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
            {"name": "tone", "stage": "output", "kind": "polite_tone", "mode": "background", "sample": 1,
             "judge_model": "gpt-judge"},
        ],
    }}}},
}


@pytest.fixture
def stack(double, judge_backend, tmp_path):
    """Envoy running POLICY, its `livecheck-judge` cluster on a real sidecar that takes reports of the size
    these turns write (its `[limits]` default is 8 MiB a request)."""
    sidecar = JudgeSidecar(tmp_path / "judge", judge_backends(judge_backend.base_url),
                           tables={"api": {"token_env": API_TOKEN_ENV}, "limits": {"max_request_bytes": 32 << 20}},
                           env={API_TOKEN_ENV: API_TOKEN, JUDGE_OWN_KEY_ENV: JUDGE_OWN_KEY})
    with stack_owning(sidecar, double, tmp_path, POLICY) as s:
        yield s


def _chat_answer(text: str) -> bytes:
    return json.dumps({"id": "chatcmpl-big", "object": "chat.completion", "created": 1790000000,
                       "model": "gpt-4.1-mini",
                       "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}]}).encode()


def _turn(stack, double, question: str, answer: bytes) -> httpx.Response:
    double.script(default=Answer(headers={"content-type": "application/json"}, body_chunks=[answer], chunked=False))
    return httpx.post(stack.envoy.url + "/v1/chat/completions", timeout=30,
                      json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": question}]})


def _dropped(stack) -> int:
    return stack.envoy.stats(DROPPED).get(DROPPED, 0)


def test_a_full_outbox_drops_the_newest_reports_counts_exactly_those_and_breaks_nothing(stack, double):
    assert 2 * TEXT_BYTES <= OUTBOX_BYTES < 3 * TEXT_BYTES
    stack.judge.stop()  # the cluster's port now refuses: every report waits in the outbox
    answer = _chat_answer(("every word of this answer is polite " * (TEXT_BYTES // 36 + 1))[:TEXT_BYTES])

    big = []
    for i in range(4):
        reply = _turn(stack, double, f"Tell me everything, part {i}.", answer)
        assert reply.status_code == 200
        assert reply.content == answer, "a turn is never changed by its report"
        big.append(reply.headers["x-core-response-id"])
    wait_for(lambda: _dropped(stack) >= 2, 10.0, "two reports dropped")

    # Nothing else changed: a clean turn is served, a password still refused, and their (small)
    # reports wait with the two big ones instead of being dropped.
    clean = _turn(stack, double, "Where is my order?", _chat_answer("It ships today."))
    assert (clean.status_code, clean.json()["choices"][0]["message"]["content"]) == (200, "It ships today.")
    refused = _turn(stack, double, "My password is hunter2.", _chat_answer("Noted."))
    assert refused.json()["choices"][0]["message"]["content"] == BLOCKED
    assert x_core_check(refused.headers) == {"stage": "input", "check": "no-passwords", "code": "input_check_failed"}
    assert _dropped(stack) == 2, "only the two reports that did not fit"

    # The sidecar is back: what waited is stored (after the outbox's backoff, at most 5 s), and the
    # dropped reports never are.
    stack.judge.start(same_port=True)
    waited = [big[0], big[1], clean.headers["x-core-response-id"], refused.headers["x-core-response-id"]]
    wait_for(lambda: all(stack.checks(turn)[0] for turn in waited), 20.0, "the waiting reports stored", every=0.2)
    outcomes = [[(c["name"], c["outcome"]) for c in stack.checks(turn)[0] if c["name"] == "no-passwords"]
                for turn in waited]
    assert outcomes == [[("no-passwords", "passed")]] * 3 + [[("no-passwords", "failed")]]
    assert [stack.checks(turn)[0] for turn in big[2:]] == [[], []], "a dropped report was stored"
    assert _dropped(stack) == 2
