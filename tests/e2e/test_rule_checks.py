"""Rule checks end to end: the official SDKs -> real Envoy running livecheck with the seed config
(examples/seed.json) -> the scripted upstream double.

For each vendor API (Anthropic Messages, OpenAI Chat Completions, OpenAI Responses):
  - a refused question (the seed's `no-passwords` input check): what the SDK hands its caller, plain
    and streamed, and that nothing reached upstream;
  - a withheld non-streamed answer (the seed's `no-iban` output check): the stop marker, the IBAN
    nowhere in the raw bytes, usage kept;
  - a clean turn: passes unchanged, no X-Core-Check;
  - a request livecheck refuses to read (an unknown agent 400, a body over max_body_bytes 413, an
    encoded body 415) or whose answer it could not check (a Responses `background: true` 400): the SDK
    raises its own typed error carrying the vendor-shaped message.
X-Core-Check is parsed with an independent RFC 8941 parser (http-sfv). Then the counters on the
admin's /stats/prometheus, and Envoy refusing a bad livecheck configuration at startup.
Streamed answers (cut where a match starts, held rounds, recovery) are in test_streaming.py and
test_recovery.py.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import subprocess
import time
import urllib.request
from typing import Any, Callable

import anthropic
import http_sfv
import openai
import pytest

from envoy_process import DELIVERY, HOLDS_ANSWER_HEADERS, STATS, REPO, SEED_CONFIG, Envoy, envoy_binary, render_config, wasm_path
from cut_support import x_core_check
from upstream_double import Answer

SEED = json.loads(SEED_CONFIG.read_text())
BLOCKED_REPLY = SEED["agents"]["orders"]["versions"]["1"]["blocked_reply"]

FORBIDDEN_QUESTION = "My password is hunter2. Can you remember it for my next order?"
CLEAN_QUESTION = "Where is my order 4711?"
IBAN = "NL91ABNA0417164300"
FORBIDDEN_ANSWER = f"Your refund goes to {IBAN} within three days."
CLEAN_ANSWER = "Your order 4711 left the warehouse this morning."


# --- the three vendor APIs ------------------------------------------------------------------------


@dataclasses.dataclass
class Vendor:
    name: str
    path: str
    # (envoy, question, stream, **create's keywords) -> the SDK's LegacyAPIResponse (headers + parse())
    create: Callable[..., Any]
    # a non-streamed upstream answer saying `text`
    answer: Callable[[str], dict]
    # the parsed non-streamed SDK result -> (stop marker, text, usage as dict)
    read: Callable[[Any], tuple]
    # the iterated stream events -> (final stop marker, text)
    read_stream: Callable[[list], tuple]
    refused: Any  # the stop marker of a refused / withheld turn
    ok: Any  # the stop marker of the double's clean answer


def _anthropic(envoy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=envoy.url, api_key="test", max_retries=0)


def _openai(envoy) -> openai.OpenAI:
    return openai.OpenAI(base_url=envoy.url + "/v1", api_key="test", max_retries=0)


def _anthropic_stream(events: list) -> tuple:
    stops = [e.delta.stop_reason for e in events if e.type == "message_delta"]
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert events[-1].type == "message_stop", [e.type for e in events]
    return (stops[-1] if stops else None), text


def _chat_stream(events: list) -> tuple:
    text = "".join(c.choices[0].delta.content or "" for c in events if c.choices)
    finishes = [c.choices[0].finish_reason for c in events if c.choices and c.choices[0].finish_reason]
    return (finishes[-1] if finishes else None), text


def _responses_stream(events: list) -> tuple:
    final = events[-1]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.type in ("response.completed", "response.incomplete"), [e.type for e in events]
    details = final.response.incomplete_details
    return (final.response.status, details.reason if details else None), text


ANTHROPIC = Vendor(
    name="anthropic",
    path="/v1/messages",
    create=lambda envoy, q, stream, **kw: _anthropic(envoy).messages.with_raw_response.create(
        model="claude-test", max_tokens=256, messages=[{"role": "user", "content": q}], stream=stream, **kw
    ),
    answer=lambda text: {
        "id": "msg_01Up",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 17, "output_tokens": 23},
    },
    read=lambda m: (m.stop_reason, "".join(b.text for b in m.content if b.type == "text"), m.usage.model_dump()),
    read_stream=_anthropic_stream,
    refused="refusal",
    ok="end_turn",
)

CHAT = Vendor(
    name="chat",
    path="/v1/chat/completions",
    create=lambda envoy, q, stream, **kw: _openai(envoy).chat.completions.with_raw_response.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": q}], stream=stream, **kw
    ),
    answer=lambda text: {
        "id": "chatcmpl-up",
        "object": "chat.completion",
        "created": 1790000000,
        "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 17, "completion_tokens": 23, "total_tokens": 40},
    },
    read=lambda c: (c.choices[0].finish_reason, c.choices[0].message.content, c.usage.model_dump()),
    read_stream=_chat_stream,
    refused="content_filter",
    ok="stop",
)

RESPONSES = Vendor(
    name="responses",
    path="/v1/responses",
    create=lambda envoy, q, stream, **kw: _openai(envoy).responses.with_raw_response.create(
        model="gpt-4.1-mini", input=q, stream=stream, **kw
    ),
    answer=lambda text: {
        "id": "resp_up",
        "object": "response",
        "created_at": 1790000000,
        "status": "completed",
        "model": "gpt-4.1-mini",
        "output": [
            {
                "type": "message",
                "id": "msg_up",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {"input_tokens": 17, "output_tokens": 23, "total_tokens": 40},
    },
    read=lambda r: (
        (r.status, r.incomplete_details.reason if r.incomplete_details else None),
        r.output_text,
        r.usage.model_dump(),
    ),
    read_stream=_responses_stream,
    refused=("incomplete", "content_filter"),
    ok=("completed", None),
)

VENDORS = [ANTHROPIC, CHAT, RESPONSES]
vendors = pytest.mark.parametrize("vendor", VENDORS, ids=lambda v: v.name)


def _json_answer(body: dict) -> Answer:
    return Answer(headers={"content-type": "application/json"}, body_chunks=[json.dumps(body)], chunked=False)


def _x_core_check(raw) -> dict:
    """X-Core-Check parsed as an RFC 8941 dictionary by http-sfv: {key: (python type, value)}."""
    values = raw.headers.get_list("x-core-check")
    assert len(values) == 1, values
    parsed = http_sfv.Dictionary()
    parsed.parse(values[0].encode("ascii"))  # raises ValueError on anything that is not a dictionary
    out = {}
    for key, member in parsed.items():
        assert isinstance(member, http_sfv.Item), f"{key} is an inner list: {values[0]}"
        assert not member.params, f"{key} has parameters: {values[0]}"
        out[key] = ("token" if isinstance(member.value, http_sfv.Token) else type(member.value).__name__, str(member.value))
    return out


def _subset(actual: dict, expected: dict) -> dict:
    return {k: actual.get(k) for k in expected}


# --- (a) a refused question -------------------------------------------------------------------------


@vendors
def test_a_refused_question_gets_the_blocked_reply_and_never_reaches_upstream(livecheck_envoy, double, vendor):
    double.script(default=_json_answer(vendor.answer(CLEAN_ANSWER)))

    raw = vendor.create(livecheck_envoy, FORBIDDEN_QUESTION, False)
    stop, text, _usage = vendor.read(raw.parse())

    assert stop == vendor.refused
    assert text == BLOCKED_REPLY
    assert raw.status_code == 200
    assert _x_core_check(raw) == {
        "stage": ("token", "input"),
        "check": ("str", "no-passwords"),
        "code": ("token", "input_check_failed"),
    }
    assert double.requests() == [], "a refused question reached upstream"


@vendors
def test_a_refused_streamed_question_streams_the_blocked_reply(livecheck_envoy, double, vendor):
    double.script(default=_json_answer(vendor.answer(CLEAN_ANSWER)))

    raw = vendor.create(livecheck_envoy, FORBIDDEN_QUESTION, True)
    events = list(raw.parse())  # iterating to the end raises nothing
    stop, text = vendor.read_stream(events)

    assert raw.headers["content-type"].startswith("text/event-stream")
    assert stop == vendor.refused
    assert text == BLOCKED_REPLY
    assert _x_core_check(raw) == {
        "stage": ("token", "input"),
        "check": ("str", "no-passwords"),
        "code": ("token", "input_check_failed"),
    }
    assert double.requests() == [], "a refused question reached upstream"


@vendors
@pytest.mark.parametrize(
    "disguise",
    ["pass\u200bword", "\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44", "pass\u00adw\U000e0041ord"],
    ids=["zero-width-space", "full-width", "soft-hyphen-and-tag"],
)
def test_a_disguised_forbidden_question_is_refused_too(livecheck_envoy, double, vendor, disguise):
    # Rule checks read text folded (docs/normalization.md): what reads as "password" is refused.
    double.script(default=_json_answer(vendor.answer(CLEAN_ANSWER)))

    raw = vendor.create(livecheck_envoy, FORBIDDEN_QUESTION.replace("password", disguise), False)
    stop, text, _usage = vendor.read(raw.parse())

    assert stop == vendor.refused
    assert text == BLOCKED_REPLY
    assert _x_core_check(raw)["check"] == ("str", "no-passwords")
    assert double.requests() == [], "a refused question reached upstream"


# --- (b) a withheld answer ---------------------------------------------------------------------------


@vendors
def test_an_answer_with_an_iban_is_withheld_with_usage_kept(livecheck_envoy, double, vendor):
    upstream = vendor.answer(FORBIDDEN_ANSWER)
    double.script(default=_json_answer(upstream))

    failed = f"{STATS}livecheck.orders.no-iban.failed"
    before = livecheck_envoy.stats(failed).get(failed, 0)
    raw = vendor.create(livecheck_envoy, CLEAN_QUESTION, False)
    body = raw.http_response.read()
    stop, text, usage = vendor.read(raw.parse())

    assert len(double.requests()) == 1  # the question was clean: it went upstream
    assert IBAN.encode() not in body and b"NL91" not in body, body
    assert stop == vendor.refused
    assert text == BLOCKED_REPLY
    assert _subset(usage, upstream["usage"]) == upstream["usage"]
    if HOLDS_ANSWER_HEADERS:
        # The module held the answer's headers with it: they name the check and the new length.
        assert x_core_check(raw.headers) == {"stage": "output", "check": "no-iban", "code": "output_check_failed"}
        assert raw.headers["content-length"] == str(len(body))
    else:
        # The answer's headers went on when they came: the check is named in the stats and results.
        assert "x-core-check" not in raw.headers
    assert livecheck_envoy.stats(failed)[failed] - before == 1


def _held_headers_envoy(double, tmp_path_factory, allow: bool):
    config = dict(SEED, hold_answer_headers=True)
    rendered = render_config(
        wasm_path("livecheck.wasm"),
        double.port,
        plugin_configuration=json.dumps(config),
        allow_on_headers_stop_iteration=allow,
    )
    return Envoy(rendered, tmp_path_factory.mktemp("envoy-held-headers"))


@pytest.fixture(scope="module")
def held_headers_envoy(double, tmp_path_factory):
    """The seed with `hold_answer_headers`, on an Envoy whose wasm filter sets
    `allow_on_headers_stop_iteration` (as envoy/livecheck.yaml does)."""
    envoy = _held_headers_envoy(double, tmp_path_factory, allow=True)
    yield envoy
    envoy.stop()


@pytest.fixture(scope="module")
def held_headers_mesh_envoy(double, tmp_path_factory):
    """The same setting where the flag is not set (as in Istio or Envoy Gateway)."""
    envoy = _held_headers_envoy(double, tmp_path_factory, allow=False)
    yield envoy
    envoy.stop()


@vendors
def test_with_hold_answer_headers_a_withheld_answer_names_its_check(held_headers_envoy, double, vendor):
    upstream = vendor.answer(FORBIDDEN_ANSWER)
    double.script(default=_json_answer(upstream))

    raw = vendor.create(held_headers_envoy, CLEAN_QUESTION, False)
    body = raw.http_response.read()
    stop, text, usage = vendor.read(raw.parse())

    assert IBAN.encode() not in body, body
    assert (stop, text) == (vendor.refused, BLOCKED_REPLY)
    assert _subset(usage, upstream["usage"]) == upstream["usage"]
    assert _x_core_check(raw) == {
        "stage": ("token", "output"),
        "check": ("str", "no-iban"),
        "code": ("token", "output_check_failed"),
    }
    assert raw.headers["content-length"] == str(len(body))
    assert raw.headers["x-core-response-id"].startswith("lc_")

    # A clean answer: byte for byte, no X-Core-Check.
    clean = json.dumps(vendor.answer(CLEAN_ANSWER))
    double.script(default=Answer(headers={"content-type": "application/json"}, body_chunks=[clean], chunked=False))
    raw = vendor.create(held_headers_envoy, CLEAN_QUESTION, False)
    assert raw.http_response.read() == clean.encode()
    assert "x-core-check" not in raw.headers
    # Framed as the vendor framed it: its length, not chunked.
    assert raw.headers["content-length"] == str(len(clean.encode()))


@pytest.mark.wasm_only  # the module holds headers with Envoy's own StopIteration: no Envoy lacks it
def test_hold_answer_headers_where_envoy_cannot_hold_them_costs_a_second_and_leaks_nothing(
    held_headers_mesh_envoy, double
):
    vendor = CHAT
    double.script(default=_json_answer(vendor.answer(FORBIDDEN_ANSWER)))

    began = time.monotonic()
    raw = vendor.create(held_headers_mesh_envoy, CLEAN_QUESTION, False)
    body = raw.http_response.read()
    took = time.monotonic() - began
    stop, text, _usage = vendor.read(raw.parse())

    assert IBAN.encode() not in body, body
    assert (stop, text) == (vendor.refused, BLOCKED_REPLY)
    assert "x-core-check" not in raw.headers  # the headers went before the answer was decided
    assert 0.9 <= took < 5, took
    assert "hold_answer_headers needs the wasm filter's allow_on_headers_stop_iteration" in held_headers_mesh_envoy.log()


@vendors
def test_an_answer_livecheck_cannot_read_is_withheld_as_errored(livecheck_envoy, double, vendor):
    # Upstream ignored `accept-encoding: identity` and compressed: livecheck cannot read the answer.
    body = gzip.compress(json.dumps(vendor.answer(FORBIDDEN_ANSWER)).encode())
    double.script(
        default=Answer(headers={"content-type": "application/json", "content-encoding": "gzip"}, body_chunks=[body], chunked=False)
    )

    raw = vendor.create(livecheck_envoy, CLEAN_QUESTION, False)
    stop, text, _usage = vendor.read(raw.parse())

    assert stop == vendor.refused
    assert text == BLOCKED_REPLY
    assert raw.headers.get("content-encoding", "identity") == "identity"
    assert _x_core_check(raw) == {
        "stage": ("token", "output"),
        "check": ("str", "no-iban"),
        "code": ("token", "check_errored"),
    }


# --- (c) a clean turn --------------------------------------------------------------------------------


@vendors
def test_a_clean_turn_passes_unchanged(livecheck_envoy, double, vendor):
    upstream = json.dumps(vendor.answer(CLEAN_ANSWER))
    double.script(default=Answer(headers={"content-type": "application/json"}, body_chunks=[upstream], chunked=False))

    raw = vendor.create(livecheck_envoy, CLEAN_QUESTION, False)
    body = raw.http_response.read()
    stop, text, usage = vendor.read(raw.parse())

    assert body == upstream.encode()  # byte for byte
    assert (stop, text) == (vendor.ok, CLEAN_ANSWER)
    assert "x-core-check" not in raw.headers
    (sent,) = double.requests()
    assert (sent.method, sent.path) == ("POST", vendor.path)
    assert CLEAN_QUESTION in sent.body.decode()


# --- (d) a question livecheck refuses to read: the vendor's error shape, raised by the SDKs --------------

# Each way a caller's request is refused before any check runs (status, the request, the message).
REFUSED_REQUESTS = {
    400: ({"extra_headers": {"x-core-agent": "nobody"}}, CLEAN_QUESTION,
          "the request names an agent this gateway does not know"),
    413: ({}, "x" * (1 << 20),  # the seed keeps the default max_body_bytes, 1 MiB
          "the request body is larger than this gateway reads (1048576 bytes)"),
    415: ({"extra_headers": {"content-encoding": "gzip"}}, CLEAN_QUESTION,
          "livecheck reads request bodies as they are written: send them without content-encoding"),
}


def _sdk_error(vendor: Vendor, status: int) -> tuple[type, dict]:
    """The exception the vendor's SDK raises for `status` and the fields of the error object it carries."""
    if vendor is ANTHROPIC:
        kind = "request_too_large" if status == 413 else "invalid_request_error"
        raised = {400: anthropic.BadRequestError, 413: anthropic.ContentTooLargeError}.get(status, anthropic.APIStatusError)
        return raised, {"type": kind}
    raised = openai.BadRequestError if status == 400 else openai.APIStatusError
    return raised, {"type": "invalid_request_error", "param": None, "code": None}


@vendors
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("status", sorted(REFUSED_REQUESTS))
def test_the_sdk_raises_its_typed_error_for_a_request_livecheck_refuses(livecheck_envoy, double, vendor, status, stream):
    double.script(default=_json_answer(vendor.answer(CLEAN_ANSWER)))
    keywords, question, message = REFUSED_REQUESTS[status]
    raised, fields = _sdk_error(vendor, status)

    with pytest.raises(raised) as caught:
        vendor.create(livecheck_envoy, question, stream, **keywords)

    error = caught.value
    assert type(error) is raised, type(error)  # not a subclass for another status
    assert error.status_code == status
    assert error.response.headers["content-type"] == "application/json"
    assert "x-core-check" not in error.response.headers  # no check stopped it: it never ran
    body = error.response.json()
    if vendor is ANTHROPIC:
        assert body == {"type": "error", "error": {"message": message, **fields}}
        assert error.body == body
    else:
        assert body == {"error": {"message": message, **fields}}
        assert error.body == body["error"] and error.type == fields["type"]
    assert message in str(error)
    assert double.requests() == [], "a refused request reached upstream"


def test_a_background_response_is_refused_before_the_model_is_asked(livecheck_envoy, double):
    """`background: true` answers at once with a queued response whose answer the caller reads back
    later (`responses.retrieve`), a request the filter does not check: with the seed's blocking output
    checks it is refused with the vendor's error, and never reaches upstream."""
    double.script(default=_json_answer(RESPONSES.answer(CLEAN_ANSWER)))
    raised, fields = _sdk_error(RESPONSES, 400)

    with pytest.raises(raised) as caught:
        _openai(livecheck_envoy).responses.create(model="gpt-4.1-mini", input=CLEAN_QUESTION, background=True)

    error = caught.value
    assert error.status_code == 400
    assert "x-core-check" not in error.response.headers
    body = error.response.json()
    assert body["error"]["type"] == fields["type"]
    assert "without `background: true`" in body["error"]["message"]
    assert double.requests() == [], "a background request reached upstream"
    # The same request without it goes on.
    answer = _openai(livecheck_envoy).responses.create(model="gpt-4.1-mini", input=CLEAN_QUESTION)
    assert answer.output_text == CLEAN_ANSWER
    assert len(double.requests()) == 1


# --- counters on /stats/prometheus --------------------------------------------------------------------

# Envoy's name for wasmcustom.livecheck.orders.<check>.<outcome> on /stats/prometheus: the
# `wasmcustom.` namespace is dropped (no `envoy_` prefix either) and every other character that is not
# [a-zA-Z0-9_] becomes `_`, e.g. `# TYPE livecheck_orders_no_passwords_failed counter` and the sample
# line `livecheck_orders_no_passwords_failed{} 1`. A counter appears once the filter defined it.
# Envoy's Prometheus output drops a wasm filter's `wasmcustom` namespace but keeps a module's.
PROMETHEUS_NAME = ("envoy_dynamicmodulescustom_" if DELIVERY == "module" else "") + "livecheck_orders_{check}_{outcome}"


def _prometheus(envoy) -> dict[str, float]:
    with urllib.request.urlopen(envoy.admin + "/stats/prometheus", timeout=2) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name.removesuffix("{}")] = float(value)  # an unlabelled sample reads `name{} 1`
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    return {"samples": samples, "types": types}


COUNTED = [(c, o) for c in ("no-passwords", "no-iban") for o in ("passed", "failed")]


def test_counters_are_on_the_prometheus_endpoint(livecheck_envoy, double):
    before = _prometheus(livecheck_envoy)["samples"]
    double.script(default=_json_answer(ANTHROPIC.answer(FORBIDDEN_ANSWER)))
    ANTHROPIC.create(livecheck_envoy, FORBIDDEN_QUESTION, False).parse()  # no-passwords failed
    ANTHROPIC.create(livecheck_envoy, CLEAN_QUESTION, False).parse()  # no-passwords passed, no-iban failed
    double.script(default=_json_answer(ANTHROPIC.answer(CLEAN_ANSWER)))
    ANTHROPIC.create(livecheck_envoy, CLEAN_QUESTION, False).parse()  # no-passwords passed, no-iban passed

    after = _prometheus(livecheck_envoy)
    json_stats = livecheck_envoy.stats(f"{STATS}livecheck.")
    expected_delta = {
        ("no-passwords", "passed"): 2,
        ("no-passwords", "failed"): 1,
        ("no-iban", "passed"): 1,
        ("no-iban", "failed"): 1,
    }
    for (check, outcome), delta in expected_delta.items():
        name = PROMETHEUS_NAME.format(check=check.replace("-", "_"), outcome=outcome)
        assert name in after["samples"], sorted(n for n in after["samples"] if "livecheck" in n)
        assert after["types"][name] == "counter"
        assert after["samples"][name] - before.get(name, 0) == delta, name
        # the same counter as Envoy's own stats name it
        assert after["samples"][name] == json_stats[f"{STATS}livecheck.orders.{check}.{outcome}"]
    assert after["samples"][PROMETHEUS_NAME.format(check="no_passwords", outcome="failed")] >= 1


# --- a bad configuration ----------------------------------------------------------------------------

BAD_CONFIG = {
    "default_agent": "orders",
    "agents": {
        "orders": {
            "published": "1",
            "versions": {
                "1": {
                    "blocked_reply": "No.",
                    "live_checks": [
                        {"name": "fast", "stage": "output", "kind": "response_time", "expected": "2s"},
                        {"name": "words", "stage": "output", "kind": "matches_pattern", "pattern": "\\w+"},
                    ],
                }
            },
        }
    },
}


def test_envoy_refuses_to_start_with_a_bad_livecheck_configuration(double, tmp_path):
    config = render_config(wasm_path("livecheck.wasm"), double.port, plugin_configuration=json.dumps(BAD_CONFIG))
    config_path = tmp_path / "envoy.json"
    config_path.write_text(json.dumps(config))
    admin_path = tmp_path / "admin-address"
    process = subprocess.Popen(
        [
            envoy_binary(),
            "-c", str(config_path),
            "--admin-address-path", str(admin_path),
            "--disable-hot-restart",
            "--concurrency", "1",
            "--log-level", "info",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        log, _ = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()  # our own Envoy, by its handle
        log, _ = process.communicate(timeout=5)
        pytest.fail(f"Envoy kept running with a refused livecheck configuration:\n{log[-4000:]}")

    # Envoy 1.40 exits 1 at startup: the plugin's on_configure returned false, so the plugin
    # "failed to load" and the listener's filter chain cannot be created.
    assert process.returncode == 1, log[-4000:]
    if DELIVERY == "module":
        # The module's config_new returned null: "the filter configuration will be rejected".
        assert "Failed to initialize dynamic module" in log, log[-4000:]
    else:
        assert "Unable to create Wasm plugin livecheck" in log, log[-4000:]
    # (the admin listener comes up before the configuration is loaded, so its address may be written)
    assert "starting main dispatch loop" not in log, "Envoy started serving"

    # One log line per problem, each naming agent, check and field, in any order.
    # (Envoy 1.40's wheel prints a module's log lines with `[:]` for their source location, 1.39's with the
    # callback's own: `[source/extensions/dynamic_modules/abi_impl.cc:60]`.)
    line = r"\[dynamic_modules\] \[[^\]]*\] (config: .*)$" if DELIVERY == "module" else r"wasm log livecheck livecheck: (config: .*)$"
    problems = sorted(m.group(1) for m in re.finditer(line, log, re.M))
    assert len(problems) == 2, problems
    assert re.fullmatch(r'config: agent "orders" version "1" check "fast" field `kind`: .*not yet supported.*', problems[0]), problems
    assert re.fullmatch(r'config: agent "orders" version "1" check "words" field `pattern`: .+', problems[1]), problems
    assert "config refused: 2 problem(s)" in log
