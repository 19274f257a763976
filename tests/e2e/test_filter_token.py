"""The shared filter token end to end: real Envoy running livecheck.wasm with `judge_token_env` in its
plugin configuration and the token given to the wasm VM by Envoy's
`vm_config.environment_variables.key_values`, and the REAL livecheck-judge binary requiring the same
token (`[filter] token_env`) on its filter endpoints.

  (a) with the shared token a judged input check passes and fails as usual, the turn's report is stored
      (`/v1/results` took the token too), and the judge backend gets the turn's key, never the token;
  (b) with a wrong token in the filter the judged check cannot decide: the sidecar answered 401, the turn
      fails closed with code=check_errored and nothing reaches upstream;
  (c) a `judge_token_env` naming a variable the VM does not have is refused in `on_configure`: Envoy
      does not start, and its log names `judge_token_env` and the variable, never a token.

One sidecar for the module, one Envoy per token; no token value is ever logged by either.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

import openai
import pytest

from cut_support import x_core_check
from envoy_process import STATS, Envoy, JudgeSidecar, render_config, wasm_path
from judge_backend_double import FAIL_MARKER
from tool_check_support import wait_for
from upstream_double import Answer

TOKEN_VAR = "LIVECHECK_JUDGE_TOKEN"  # the wasm VM's variable (the filter's `judge_token_env`)
FILTER_TOKEN_ENV = "LIVECHECK_FILTER_TOKEN"  # the sidecar's (`[filter] token_env`)
TOKEN = "e2e-filter-token-4b8d0f17c2"
WRONG_TOKEN = "e2e-filter-token-4b8d0f17c3"  # the same length
API_TOKEN_ENV = "LIVECHECK_API_TOKEN"
API_TOKEN = "e2e-operator-token-9a3e"
TOKEN_HEADER = "x-livecheck-token"

KEY = "sk-openai-turn-key-e2e-token"
BLOCKED = "I can only help with orders."
CLEAN_QUESTION = "Where is my order 4711?"
RUDE_QUESTION = f"Where is my order 4711, you {FAIL_MARKER} bot?"
CLEAN_ANSWER = "Your order 4711 left the warehouse this morning."

CONFIG = {
    "judge_token_env": TOKEN_VAR,
    "default_agent": "ask",
    "agents": {
        "ask": {"published": "1", "versions": {"1": {"blocked_reply": BLOCKED, "live_checks": [
            {"name": "on-topic", "stage": "input", "kind": "custom_rule",
             "expected": "The question is about orders.", "timeout_ms": 3000},
        ]}}},
    },
}


def _envoy_config(double, sidecar: JudgeSidecar, token: Optional[str]) -> dict:
    """Envoy in front of the upstream double, its `livecheck-judge` cluster on the sidecar, and the
    filter's environment holding `token` as TOKEN_VAR (nothing when None): the wasm VM's
    `environment_variables`, or the process environment the module reads."""
    return render_config(wasm_path("livecheck.wasm"), double.port, plugin_configuration=json.dumps(CONFIG),
                         extra_clusters={"livecheck-judge": sidecar.port},
                         environment=None if token is None else {TOKEN_VAR: token})


# --- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sidecar(judge_backend, tmp_path_factory):
    s = JudgeSidecar(
        tmp_path_factory.mktemp("token-judge"),
        [{"name": "double-openai", "api": "openai", "base_url": judge_backend.base_url, "models": ["*"]}],
        tables={"filter": {"token_env": FILTER_TOKEN_ENV}, "api": {"token_env": API_TOKEN_ENV}},
        env={FILTER_TOKEN_ENV: TOKEN, API_TOKEN_ENV: API_TOKEN},
    )
    yield s
    s.close()


@pytest.fixture(scope="module")
def right_envoy(double, sidecar, tmp_path_factory):
    envoy = Envoy(_envoy_config(double, sidecar, TOKEN), tmp_path_factory.mktemp("token-right"))
    yield envoy
    envoy.stop()


@pytest.fixture(scope="module")
def wrong_envoy(double, sidecar, tmp_path_factory):
    envoy = Envoy(_envoy_config(double, sidecar, WRONG_TOKEN), tmp_path_factory.mktemp("token-wrong"))
    yield envoy
    envoy.stop()


def _chat(envoy: Envoy, question: str):
    client = openai.OpenAI(base_url=envoy.url + "/v1", api_key=KEY, max_retries=0, timeout=10.0)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": question}])
    c = raw.parse()
    return raw, c.choices[0].finish_reason, c.choices[0].message.content


def _chat_answer(text: str) -> Answer:
    body = {"id": "chatcmpl-up", "object": "chat.completion", "created": 1790000000, "model": "gpt-4.1-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 17, "completion_tokens": 23, "total_tokens": 40}}
    return Answer(headers={"content-type": "application/json"}, body_chunks=[json.dumps(body)], chunked=False)


def _judge_401s(envoy: Envoy) -> int:
    """How often the sidecar answered this Envoy's callouts 401 (Envoy's own cluster counter)."""
    return envoy.stats("cluster.livecheck-judge.").get("cluster.livecheck-judge.upstream_rq_401", 0)


def _reports_refused(envoy: Envoy) -> int:
    """Turn reports the sidecar refused (4xx, dropped, never sent again), as the filter counts them."""
    name = f"{STATS}livecheck.reports.refused"
    return envoy.stats(name).get(name, 0)


def _refused_paths(sidecar: JudgeSidecar) -> list[str]:
    """The paths of the callouts the sidecar refused for want of the filter token, in its log's order."""
    return re.findall(r'refused a callout without the filter token path="([^"]+)"', sidecar.log())


def _stored_checks(sidecar: JudgeSidecar, turn_id: str, timeout: float = 5.0) -> list[dict]:
    """The turn's stored results, read through the operator API once the filter's report arrived."""
    request = urllib.request.Request(f"{sidecar.url}/responses/{urllib.parse.quote(turn_id)}/checks",
                                     headers={"Authorization": f"Bearer {API_TOKEN}"})
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(request, timeout=2) as r:
                return json.load(r)["items"]
        except urllib.error.HTTPError as e:
            if e.code != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def _question_reached_upstream(double) -> bool:
    """Whether the question (not only request headers) reached the upstream double."""
    return any(b"4711" in r.body for r in double.requests())


def _no_token_in(*logs: str) -> None:
    for log in logs:
        for secret in (TOKEN, WRONG_TOKEN, "e2e-filter-token"):
            assert secret not in log, f"{secret!r} was logged"


# --- (a) the shared token ------------------------------------------------------------------------------


def test_with_the_shared_token_a_judged_check_passes_and_fails_as_usual(right_envoy, sidecar, double,
                                                                        judge_backend):
    double.script(default=_chat_answer(CLEAN_ANSWER))
    judge_backend.reset()
    raw, finish, text = _chat(right_envoy, CLEAN_QUESTION)
    assert (finish, text) == ("stop", CLEAN_ANSWER)
    assert x_core_check(raw.headers) is None
    assert len(double.requests()) == 1, "the question went upstream once judged"
    (call,) = judge_backend.seen()
    assert call.headers.get("authorization") == f"Bearer {KEY}", "the turn's key reached the judge"
    assert TOKEN_HEADER not in call.headers, "the filter token went on to the judge backend"

    (stored,) = _stored_checks(sidecar, raw.headers["x-core-response-id"])
    assert (stored["name"], stored["outcome"]) == ("on-topic", "passed"), stored

    double.script(default=_chat_answer(CLEAN_ANSWER))
    raw, finish, text = _chat(right_envoy, RUDE_QUESTION)
    assert (finish, text) == ("content_filter", BLOCKED)
    assert x_core_check(raw.headers) == {"stage": "input", "check": "on-topic", "code": "input_check_failed"}
    assert not _question_reached_upstream(double), "a refused question reached upstream"
    assert _judge_401s(right_envoy) == 0


# --- (b) a wrong token ---------------------------------------------------------------------------------


def test_with_a_wrong_token_the_judged_check_is_errored_and_the_turn_fails_closed(wrong_envoy, sidecar, double,
                                                                                  judge_backend):
    double.script(default=_chat_answer(CLEAN_ANSWER))
    judge_backend.reset()
    before, reports_before, refused_before = _judge_401s(wrong_envoy), _reports_refused(wrong_envoy), \
        len(_refused_paths(sidecar))

    raw, finish, text = _chat(wrong_envoy, CLEAN_QUESTION)

    assert (finish, text) == ("content_filter", BLOCKED)
    assert x_core_check(raw.headers) == {"stage": "input", "check": "on-topic", "code": "check_errored"}
    assert not _question_reached_upstream(double), "an undecided question reached upstream"
    assert judge_backend.seen() == [], "the sidecar judged a callout with the wrong token"
    # The turn's report carries the same wrong token: once it went out (the root's next tick) it was
    # refused too, and dropped, never sent again. So exactly two 401s: the judge's and the report's.
    wait_for(lambda: _reports_refused(wrong_envoy) > reports_before, 5.0, "the turn's report refused")
    assert _reports_refused(wrong_envoy) == reports_before + 1
    assert _judge_401s(wrong_envoy) == before + 2, "the judged check's callout and the turn's report"
    assert _refused_paths(sidecar)[refused_before:] == ["/v1/judge", "/v1/results/batch"]
    _no_token_in(sidecar.log(), wrong_envoy.log())


# --- (c) the filter refuses a token it cannot read -----------------------------------------------------


def test_the_filter_refuses_its_configuration_when_the_token_variable_is_unset(double, sidecar, tmp_path):
    """(A variable holding no valid token is refused the same way, its value never shown: the filter's
    own config tests pin that; each refused Envoy costs seconds here.)"""
    with pytest.raises(RuntimeError, match="Envoy exited"):
        Envoy(_envoy_config(double, sidecar, None), tmp_path)
    log = (tmp_path / "envoy.log").read_text(errors="replace")
    assert "judge_token_env" in log and f"{TOKEN_VAR} is not set" in log, log[-4000:]
    _no_token_in(log)
