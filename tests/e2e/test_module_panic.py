"""A panic in the dynamic module fails only its own stream, in real Envoy (issue 56): every hook catches it
(`native/src/envoy/hooks.rs`), so Envoy never goes down, the other turns in flight go on as if nothing happened,
and later turns are checked as before. The module has no VM to reload: the next stream starts afresh.

The panic comes from a fault-injection build (`make faults-module`: `--features faults` into
target/envoy-module/faults/, never the shipped module): `x-livecheck-fault: panic` panics in the request's
headers hook (nothing has gone to the caller: a 500), `panic-answer` in the answer's first body hook (its
headers went on: the stream is reset).
"""

from __future__ import annotations

import threading

import pytest

import raw_client
from envoy_process import REPO, SEED_CONFIG, Envoy, module_filter, module_path, render_config, wasm_path
from test_vm_failure import _ask, _chat_answer, _slow_stream
from tool_check_support import wait_for

pytestmark = pytest.mark.module_only

FAULTS_MODULE = REPO / "target" / "envoy-module" / "faults" / "liblivecheck.so"


def _faults_module():
    if not FAULTS_MODULE.is_file() or FAULTS_MODULE.stat().st_mtime < module_path().stat().st_mtime - 600:
        pytest.fail(f"{FAULTS_MODULE} is missing or older than the module: run `make faults-module`")
    return FAULTS_MODULE


def test_the_shipped_module_holds_no_fault_trigger():
    assert b"x-livecheck-fault" not in module_path().read_bytes()
    assert b"x-livecheck-fault" in _faults_module().read_bytes()


def test_a_panic_fails_only_its_own_stream_and_envoy_serves_on(double, tmp_path):
    config = render_config(wasm_path("livecheck.wasm"), double.port, plugin_configuration=SEED_CONFIG.read_text())
    filters = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]
    (at,) = [i for i, f in enumerate(filters) if f["name"] == "envoy.filters.http.dynamic_modules"]
    filters[at] = module_filter(SEED_CONFIG.read_text(), module=_faults_module())
    envoy = Envoy(config, tmp_path / "envoy")
    try:
        # Turns in flight: streamed answers still coming when another stream panics.
        double.script(default=_slow_stream(words=20, delay=0.05))
        in_flight: list[raw_client.Reply] = []
        threads = [threading.Thread(target=lambda: in_flight.append(_ask(envoy, "Tell me a story", stream=True)))
                   for _ in range(4)]
        for t in threads:
            t.start()
        wait_for(lambda: sum(w.chunks_written > 0 for w in double.writes) == len(threads), 30.0,
                 "every in-flight answer begun")

        # A panic before anything went to the caller: a 500, and the question never reached the model.
        asked = len(double.requests())
        failed = _ask(envoy, "Where is my order?", headers={"x-livecheck-fault": "panic"})
        assert failed.status == 500, failed
        assert failed.body == b"livecheck failed on this turn\n"
        assert len(double.requests()) == asked, "a failed turn's question is not sent on"

        # A panic in the answer's body hook, its headers gone: the stream is reset, nothing of the answer
        # (checked or not) reaches the caller.
        double.script(default=_chat_answer("Pay to NL91ABNA0417164300 today."))
        reset = _ask(envoy, "Where is my order?", headers={"x-livecheck-fault": "panic-answer"})
        assert reset.reset or reset.status == 500, reset
        assert b"NL91" not in reset.body

        for t in threads:
            t.join(timeout=30)
        assert len(in_flight) == 4
        for reply in in_flight:
            # The other streams went on untouched: every word arrived and the stream ended normally.
            assert reply.status == 200 and not reply.reset, reply
            assert reply.body.count(b"word") == 20 and reply.body.endswith(b"data: [DONE]\n\n"), reply.body[-200:]

        # Envoy is alive and still checks: a forbidden question is refused, a clean one answered.
        double.script(default=_chat_answer("Your order ships tomorrow."))
        refused = _ask(envoy, "My password is hunter2")
        assert refused.status == 200 and refused.headers.get("x-core-check", "").startswith("stage=input"), refused
        clean = _ask(envoy, "Where is my order?")
        assert clean.status == 200 and b"ships tomorrow" in clean.body
        log = envoy.log()
        assert log.count("livecheck panicked at") == 2, log[-3000:]
        assert "fault injected" not in log and "x-livecheck-fault" not in log, "a panic's message is never logged"
    finally:
        envoy.stop()
