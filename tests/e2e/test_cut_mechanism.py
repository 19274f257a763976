"""After a cut, the caller's SDK call returns at once and normally, and the upstream stops (issue 4, item 4).

The mechanism these tests pin (measured against the alternatives by `cut_matrix.py`; see
tests/fidelity-filter/src/cut.rs, case `cut`, mechanism `pad_close_response_next`):

1. At response headers of a streamed (SSE) answer the filter frames the body by length: it removes
   `transfer-encoding` and sets `content-length: L`, so Envoy's HTTP/1.1 codec does not chunk.
2. On the cut it replaces the current chunk with the vendor's closing events followed by SSE comment
   lines up to exactly L bytes: the caller's response is complete, its SDK ends normally.
3. On the next upstream chunk (dropped) it calls `proxy_close_stream(HttpResponse)`: Envoy resets the
   stream, which closes the upstream connection (the upstream stops) and, the response being complete
   already, costs the caller nothing.
4. Envoy's HTTP connection manager sets `common_http_protocol_options.max_requests_per_connection: 1`:
   the reset closes the caller's HTTP/1.1 connection (after Envoy's 1 s delayed close), and a caller that
   pooled it sends its next request into it and gets "Server disconnected" (measured: APIConnectionError
   with max_retries=0, a hidden ~1.5 s retry with the default retries). With one request per connection
   Envoy says `connection: close` (a filter cannot: Envoy strips a `connection` header a filter sets).

Without (1)-(2) every reset raises in the Anthropic SDK and the Responses clients (they read to the end of
the body: an unterminated chunked body is `RemoteProtocolError` / `APIConnectionError`), and without (3)
the upstream generates to its end. The double here streams for 30 s; every call is bounded.
"""

from __future__ import annotations

import pytest

from cut_support import EXPECTED_END, SDK_PATHS, measure, start_envoy
from upstream_double import UpstreamDouble

CHOSEN = "pad_close_response_next"


@pytest.fixture(scope="module")
def cut_double():
    d = UpstreamDouble().start()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def cut_envoy(cut_double, tmp_path_factory):
    envoy = start_envoy(cut_double, tmp_path_factory.mktemp("envoy-cut"), one_request_per_connection=True)
    yield envoy
    envoy.stop()


@pytest.mark.parametrize("sdk", list(SDK_PATHS))
def test_chosen_mechanism_returns_at_once_and_stops_upstream(sdk, cut_envoy, cut_double):
    o = measure(cut_envoy.url, cut_double, sdk, CHOSEN)
    seen = o.row()
    assert o.raised is None, seen
    assert EXPECTED_END[SDK_PATHS[sdk][0]] in o.result, seen
    assert o.returned_after is not None and o.returned_after < 2.0, seen
    assert o.upstream_gone_after is not None and o.upstream_gone_after < 2.0, seen
    assert not o.upstream_completed, seen


@pytest.mark.parametrize("sdk", [s for s in SDK_PATHS if "Async" not in s])
def test_uncut_stream_ends_normally_when_framed_by_length(sdk, cut_envoy, cut_double):
    """The padding at the upstream's own end keeps an uncut answer whole (the same framing applies)."""
    o = measure(cut_envoy.url, cut_double, sdk, CHOSEN, seconds=1.0, cut=False)
    assert o.raised is None, o.row()
    assert "refusal" not in o.result and "content_filter" not in o.result, o.row()
    assert o.upstream_completed, o.row()


def test_same_client_streams_again_after_a_cut(cut_envoy, cut_double):
    """The reset after a complete response must not break the caller's next call (needs step 4)."""
    import anthropic

    from cut_support import CLIENT_TIMEOUT, MESSAGES, VENDOR_PATH, vendor_answer

    client = anthropic.Anthropic(base_url=cut_envoy.url + "/reuse", api_key="test", timeout=CLIENT_TIMEOUT,
                                 max_retries=0, default_headers={"x-fidelity-case": "cut",
                                                                 "x-fidelity-cut-vendor": "anthropic",
                                                                 "x-fidelity-cut-how": CHOSEN})
    cut_double.add_path("/reuse" + VENDOR_PATH["anthropic"], vendor_answer("anthropic", 5.0))
    for _ in range(3):
        with client.messages.stream(model="claude-sonnet-4-5", max_tokens=100, messages=MESSAGES) as stream:
            assert stream.get_final_message().stop_reason == "refusal"
