#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs into corpus/<target>/ from the repository's own fixtures
(the stream and API fixtures of the unit tests, the example policies, the sidecar's example config):
each seed is the target's mode bytes, then a body. `make fuzz` grows a working copy of the corpus in
fuzz/target/; `make fuzz-cmin` minimizes that back into corpus/. Run from the repository root."""
import binascii
import hashlib
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fuzz" / "corpus"


def consts(path):
    text = (ROOT / path).read_text()
    return dict(re.findall(r'pub const ([A-Z_]+): &str = r#"(.*?)"#;', text, re.S))


def seed(target, head, body):
    data = bytes(head) + (body.encode() if isinstance(body, str) else body)
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / ("seed-" + hashlib.sha1(data).hexdigest()[:16])).write_bytes(data)


streams = consts("src/stream/fixtures.rs")
api = consts("src/api/fixtures.rs")
vendor = {"ANTHROPIC": 0, "CHAT": 1, "RESPONSES": 2}

for name, body in streams.items():
    v = next((i for k, i in vendor.items() if name.startswith(k)), None)
    if v is None:
        continue
    seed("sse_decoder", [255, 7], body)
    for hold in range(3):
        seed("stream_rewriter", [9 + v + 3 * hold, 11], body)  # raw upstream bytes
    seed("tool_calls", [4 + v, 5], body)
for v in range(3):
    seed("stream_rewriter", [v, 3], "Pay to NL91ABNA0417164300 now, password \xff")
seed("sse_decoder", [2, 0], "\ufeffdata: a\r\ndata:b\r\rid: 1\nevent: x\n: keep-alive\n\n")



def es_frame(headers, payload, block=None):
    """An AWS event-stream message framed here, independently of src/eventstream.rs (Python's
    binascii.crc32): string headers, or a raw headers `block`."""
    if block is None:
        block = b"".join(
            bytes([len(n)]) + n.encode() + b"\x07" + len(v.encode()).to_bytes(2, "big") + v.encode()
            for n, v in headers
        )
    prelude = (16 + len(block) + len(payload)).to_bytes(4, "big") + len(block).to_bytes(4, "big")
    body = prelude + binascii.crc32(prelude).to_bytes(4, "big") + block + payload
    return body + binascii.crc32(body).to_bytes(4, "big")


def es_event(event, payload):
    headers = [(":event-type", event), (":content-type", "application/json"), (":message-type", "event")]
    return es_frame(headers, payload.encode())


# A Converse stream (botocore's bedrock-runtime model, ConverseStreamOutput) ending in a guardrail stop.
converse = b"".join([
    es_event("messageStart", '{"role":"assistant"}'),
    es_event("contentBlockDelta", '{"contentBlockIndex":0,"delta":{"text":"H\u00e9 password"},"p":"abcd"}'),
    es_event("contentBlockStop", '{"contentBlockIndex":0}'),
    es_event("contentBlockStart", '{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"t","name":"pay"}}}'),
    es_event("contentBlockDelta", '{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\\"to\\":"}}}'),
    es_event("messageStop", '{"stopReason":"guardrail_intervened"}'),
    es_event("metadata", '{"usage":{"inputTokens":1,"outputTokens":2,"totalTokens":3},"metrics":{"latencyMs":4}}'),
])
thrown = es_frame([(":exception-type", "throttlingException"), (":content-type", "application/json"),
                   (":message-type", "exception")], b'{"message":"Rate exceeded"}')
typed = es_frame(None, b"", block=(
    b"\x010\x00\x011\x01\x012\x02\x02\x013\x03\x00\x03\x014\x04\x00\x00\x00\x04"
    b"\x015\x05" + bytes(7) + b"\x05\x016\x06\x00\x05bytes\x017\x07\x00\x04utf8"
    b"\x018\x08" + bytes(7) + b"\x08\x019\x090123456789abcdef"))
seed("eventstream_decoder", [255, 6], converse)
seed("eventstream_decoder", [255, 0], converse + thrown + typed)
seed("eventstream_decoder", [255, 11], converse[:-3])  # ends inside a message
seed("eventstream_decoder", [2, 3], converse)  # over a small limit
seed("eventstream_decoder", [255, 5], typed[:-1] + bytes([typed[-1] ^ 1]))  # a message CRC off
seed("eventstream_decoder", [255, 2], es_frame(None, b"x", block=b"\x01a\x0a"))  # an unknown type
seed("eventstream_decoder", [255, 9], es_frame(None, b"", block=b"\x01a\x07\x00\x09ab"))  # overrun

for name, body in api.items():
    v = next((i for k, i in vendor.items() if name.startswith(k)), None)
    if v is None:
        continue
    if "REQUEST" in name:
        seed("request_text", [v], body)
    else:
        seed("tool_calls", [1 + v, 0], body)
seed("request_text", [0], '{"messages":[{"role":"user","content":"a"}],"messages":[]}')
seed("request_text", [2], '{"prompt":{"variables":{"b":"x","a":{"type":"input_text","text":"y"}}},"input":"z"}')
seed("request_text", [3], '{"model":"claude-2.1","prompt":"Be terse.\\n\\nHuman: a password\\n\\nAssistant: no\\n\\n\\nHuman: why\\n\\nAssistant:","max_tokens_to_sample":9,"stream":true}')
seed("request_text", [3], '{"prompt":["\\n\\nHuman: a"]}')

seed("tool_calls", [0, 0], '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"to":"NL91ABNA0417164300"}}}')
seed("tool_calls", [0, 0], '[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]')

for example in sorted((ROOT / "examples").glob("*.json")):
    seed("policy", [0, 0], example.read_text())
for pattern, hay in [("NL\\d{2}[A-Z]{4}\\d{10}", "Pay NL91ABNA0417164300"), ("\\bpass(word)?\\b", "a password"),
                     ("(?i)secret-[a-f0-9]{8}", "SECRET-deadbeef"), ("^hi", "hi there"), ("x$", "box")]:
    seed("policy", [1, 18], pattern + "\0" + hay)

wire = [
    {"stage": "output", "kind": "polite_tone", "text": "Go away.", "question": "Where?", "judge_model": "judge"},
    {"condition": "pays abroad", "tool": "pay", "arguments": "{\"to\":\"x\"}", "intent": ["pay"], "judge_model": "judge"},
    {"outcome": "passed", "score": 0.9, "reason": "ok", "usage": {"input_tokens": 1, "output_tokens": 2}},
]
for mode, value in enumerate(wire):
    seed("sidecar_wire", [mode, 0], json.dumps(value))
seed("sidecar_wire", [7, 200], json.dumps({"choices": [{"message": {"content": json.dumps({"passed": True, "score": 1, "reason": "fine"})}}], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}))
seed("sidecar_wire", [9, 200], json.dumps({"content": [{"type": "tool_use", "name": "verdict", "input": {"passed": False, "score": 0.1, "reason": "rude"}}], "usage": {"input_tokens": 3, "output_tokens": 4}}))
seed("sidecar_wire", [11, 0], (ROOT / "judge" / "example.toml").read_text())
