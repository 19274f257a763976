"""The streamed answers `make bench` measures for Gemini and Bedrock Converse (benches/stream_shapes.py) are
what the official SDKs read as a clean answer, and the bench's own reader of them catches a broken stream.

No Envoy here: the bench's CPU figures are only worth something if its double speaks the vendors' wire
format, so google-genai and botocore read these bytes exactly as they read Google's and Bedrock's.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benches"))

import stream_shapes  # noqa: E402

DELTAS = ["Your", " ord", "er s", "hips", " Mon", "day."]


def splits(raw: bytes, size: int) -> list[bytes]:
    return [raw[i:i + size] for i in range(0, len(raw), size)]


@pytest.mark.parametrize("size", [1, 7, 1 << 20])
def test_google_genai_reads_the_gemini_stream_as_its_text_then_a_stop(size):
    import httpx2  # google-genai's HTTP client
    from google.genai import _api_client, types

    head, body, tail = stream_shapes.gemini_stream(DELTAS)
    raw = b"".join(head + body + tail)
    assert raw.count(b"\r\n\r\n") == len(DELTAS) + 1, "one event per chunk, ended as Google ends them"
    # What `Models.generate_content_stream` runs on the HTTP body: its SSE reader, then each chunk parsed
    # into a GenerateContentResponse.
    response = _api_client.HttpResponse({}, httpx2.Response(200, content=iter(splits(raw, size))))
    chunks = [types.GenerateContentResponse.model_validate(c) for c in response.segments()]
    assert [c.text for c in chunks] == DELTAS + [None]
    assert [c.candidates[0].finish_reason for c in chunks] == [None] * len(DELTAS) + [types.FinishReason.STOP]
    assert [c.usage_metadata.candidates_token_count for c in chunks] == [1, 2, 3, 4, 5, 6, 6]
    assert {c.model_version for c in chunks} == {stream_shapes.GEMINI_MODEL}
    # The bench's client reads the same events.
    events = [e for c in chunks for e in stream_shapes.gemini_events(c.model_dump(by_alias=True, exclude_none=True))]
    assert [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"] == DELTAS
    assert events[-1] == {"type": "message_stop"}


def converse_events_by_botocore(raw: bytes, size: int) -> list[dict]:
    """The events boto3's `converse_stream(...)["stream"]` yields for these bytes."""
    import botocore.session
    from botocore.eventstream import EventStream
    from botocore.parsers import EventStreamJSONParser

    class Body:
        def stream(self):
            yield from splits(raw, size)

    operation = botocore.session.get_session().get_service_model("bedrock-runtime").operation_model("ConverseStream")
    return list(EventStream(Body(), operation.output_shape.members["stream"], EventStreamJSONParser(),
                            "ConverseStream"))


@pytest.mark.parametrize("size", [1, 7, 1 << 20])
def test_boto3_reads_the_converse_stream_as_bedrocks_events_in_bedrocks_order(size):
    head, body, tail = stream_shapes.converse_stream(DELTAS)
    events = converse_events_by_botocore(b"".join(head + body + tail), size)
    assert [next(iter(e)) for e in events] == (["messageStart"] + ["contentBlockDelta"] * len(DELTAS)
                                               + ["contentBlockStop", "messageStop", "metadata"])
    assert [e["contentBlockDelta"]["delta"]["text"] for e in events[1:-3]] == DELTAS
    assert events[-2] == {"messageStop": {"stopReason": "end_turn"}}
    assert events[-1]["metadata"]["usage"] == {"inputTokens": 12, "outputTokens": len(DELTAS), "totalTokens": 18}


def test_the_bench_reads_the_converse_stream_as_boto3_does_and_stops_on_a_broken_one():
    head, body, tail = stream_shapes.converse_stream(DELTAS)
    raw = b"".join(head + body + tail)
    messages = list(stream_shapes.eventstream_messages(raw))
    events = [stream_shapes.converse_events(headers, payload) for _, headers, payload in messages]
    assert [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"] == DELTAS
    assert events[-1] == {"type": "message_stop"} and messages[-1][0] == len(raw)
    # Padding is Bedrock's `p`, never text.
    assert all(b'"p":"' in payload for _, _, payload in messages)
    # A changed byte anywhere, or a stream ending inside a message, is an error, not fewer events.
    for at in (1, 9, 40, len(raw) // 2, len(raw) - 1):
        broken = raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1:]
        with pytest.raises(stream_shapes.BadEventStream):
            list(stream_shapes.eventstream_messages(broken))
    with pytest.raises(stream_shapes.BadEventStream):
        list(stream_shapes.eventstream_messages(raw[:-1]))


def test_an_event_message_is_framed_byte_for_byte_as_bedrock_frames_it():
    # A frame Bedrock sent (an invoke-with-response-stream `chunk`), as AI21Labs/ai21-python keeps it in
    # tests/unittests/test_aws_stream_decoder.py (661c5f574a3128749fb8316e950e0b2602d8c8d0); the filter's
    # decoder test (src/eventstream.rs, BEDROCK_CHUNK) holds the same bytes.
    payload = (b'{"bytes":"eyJpZCI6ImNtcGwtOTgxZjdmMTc2YWQ0NDE0NTliOTRlNDVlZTI5MmEzMjEiLCJjaG9pY2VzIjpbeyJpbmRleC'
               b'I6MCwiZGVsdGEiOnsicm9sZSI6ImFzc2lzdGFudCJ9LCJmaW5pc2hfcmVhc29uIjpudWxsfV0sInVzYWdlIjp7InByb21wd'
               b'F90b2tlbnMiOjQ0LCJ0b3RhbF90b2tlbnMiOjQ0LCJjb21wbGV0aW9uX3Rva2VucyI6MH19","p":"abcdefghijklmnopq'
               b'rstuv"}')
    frame = (b"\x00\x00\x01\x80\x00\x00\x00K\xfe\x96$F"
             b"\x0b:event-type\x07\x00\x05chunk\r:content-type\x07\x00\x10application/json"
             b"\r:message-type\x07\x00\x05event" + payload + b"5\xca\xa7\x98")
    assert stream_shapes.eventstream_message("chunk", payload) == frame
    assert json.loads(list(stream_shapes.eventstream_messages(frame))[0][2])["p"] == "abcdefghijklmnopqrstuv"
