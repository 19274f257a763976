"""A scripted HTTP/1.1 upstream test double: stands in for the model vendor and the callout cluster.

It answers every request from a script (the default answer, or one per path), writes response bodies
in chunked encoding with a delay between chunks so Envoy reads each chunk separately (one body
callback per chunk), and records every request it received.

`model_double_tool_answer` scripts the MODEL DOUBLE's answers that call tools, in each vendor's wire
format (Anthropic Messages `tool_use`, Chat Completions `tool_calls` or legacy `function_call`,
Responses `function_call` / `custom_tool_call` / other caller-run items), non-streamed or streamed
with one SSE event per HTTP chunk.
"""

from __future__ import annotations

import dataclasses
import http.server
import itertools
import json
import select
import socket
import struct
import threading
import time
from typing import Callable, Optional


@dataclasses.dataclass
class Answer:
    """One scripted answer. `body_chunks` go out as separate HTTP/1.1 chunks, `chunk_delay` apart;
    with `chunked=False` the body goes out at once with a content-length."""

    status: int = 200
    headers: dict = dataclasses.field(default_factory=dict)
    body_chunks: list = dataclasses.field(default_factory=list)
    chunk_delay: float = 0.06
    chunked: bool = True
    # Never answer (for callout timeouts): hold the request until the double stops or 10 s pass.
    hang: bool = False
    # Break off after the headers and the first chunk: the connection is reset (RST), never ended.
    reset_after_headers: bool = False
    # Answer only after the default (upstream) answer was fully written, plus this many seconds.
    after_upstream_end: Optional[float] = None
    # Before each chunk, check whether the peer (Envoy) closed the connection; if so stop writing.
    # What happened is recorded in `UpstreamDouble.writes` either way.
    watch_peer: bool = False
    # Record when the first chunk containing this text was written (`Written.marked_at`).
    mark: Optional[bytes] = None
    # Wait this long (instead of `chunk_delay`) before the first chunk.
    first_delay: Optional[float] = None
    # Wait this long (instead of `chunk_delay`) before the chunk at each index (negative: from the end).
    delays: dict = dataclasses.field(default_factory=dict)
    # Wait this long (instead of `chunk_delay`) before the chunk after the marked one: a model that
    # goes quiet.
    pause_after_mark: Optional[float] = None
    # Set by the test to stop writing (the double stops writing every answer when it stops, too).
    stop: Optional[threading.Event] = None
    # Called with the request as it arrived; an Answer it returns is sent instead (a vendor's own
    # refusal of the request, e.g. converse_double.SigV4Check's answer to a bad signature).
    admit: Optional[Callable[["Received"], Optional["Answer"]]] = None


@dataclasses.dataclass
class Written:
    """How the double's answer to one request went out (times are `time.monotonic()`)."""

    path: str
    started: float
    chunks_written: int = 0
    # The body bytes written (chunk payloads, without the chunked framing).
    body_bytes: int = 0
    first_write: Optional[float] = None
    last_write: Optional[float] = None
    marked_at: Optional[float] = None
    # When the double saw the peer go away (closed or reset) before it finished; None if it never did.
    gone_at: Optional[float] = None
    completed: bool = False
    # The test (`Answer.stop`) or the double stopping ended the answer before it finished.
    stopped: bool = False


@dataclasses.dataclass
class Received:
    method: str
    path: str
    headers: dict  # lower-cased names; the last value wins
    body: bytes


class UpstreamDouble:
    def __init__(self) -> None:
        self.default = Answer(body_chunks=["no script"])
        # Upstream requests take these answers in turn (the last one repeats) before `default`.
        self.sequence: list[Answer] = []
        self.by_path: dict[str, Answer] = {}
        self.received: list[Received] = []
        self.incomplete: list[str] = []  # paths of requests whose body never completed
        self.writes: list[Written] = []  # one per answered request, in arrival order
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._upstream_done = threading.Event()
        double = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep pytest output readable
                pass

            def _serve(self) -> None:
                try:
                    body = self._read_body()
                except (ValueError, ConnectionError):
                    # Envoy gave up on the request mid-body (e.g. a 413 after the headers went out).
                    with double._lock:
                        double.incomplete.append(self.path)
                    self.close_connection = True
                    return
                path = self.path
                received = Received(self.command, path, {k.lower(): v for k, v in self.headers.items()}, body)
                with double._lock:
                    double.received.append(received)
                    answer = double.by_path.get(path.split("?", 1)[0])
                    is_upstream = answer is None
                    if is_upstream and double.sequence:
                        answer = double.sequence.pop(0) if len(double.sequence) > 1 else double.sequence[0]
                    answer = answer or double.default
                if answer.admit is not None:
                    answer = answer.admit(received) or answer
                written = Written(path, time.monotonic())
                with double._lock:
                    double.writes.append(written)
                try:
                    self._answer(answer, written)
                except (BrokenPipeError, ConnectionResetError):
                    written.gone_at = written.gone_at or time.monotonic()
                    self.close_connection = True
                finally:
                    if is_upstream:
                        double._upstream_done.set()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

            def _read_body(self) -> bytes:
                if "chunked" in self.headers.get("transfer-encoding", "").lower():
                    body = b""
                    while True:
                        line = self.rfile.readline()
                        if not line:
                            raise ConnectionError("the request ended before its body")
                        size = int(line.split(b";", 1)[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return body
                        body += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("content-length", "0") or 0)
                body = self.rfile.read(length) if length else b""
                if len(body) < length:
                    # Envoy reset a request whose body the filter held (a refused question: its
                    # headers go upstream at once, its body never): no model would answer it.
                    raise ConnectionError("the request ended before its body")
                return body

            def _peer_closed(self) -> bool:
                sock = self.connection
                try:
                    readable, _, _ = select.select([sock], [], [], 0)
                    return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
                except (ConnectionResetError, OSError):
                    return True

            def _reset(self, chunks: list) -> None:
                """Writes `chunks` (chunked), waits for the peer to read them, then resets the connection."""
                for chunk in chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                time.sleep(0.1)
                # SO_LINGER on with a zero timeout: close() sends RST instead of FIN.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True

            def _answer(self, answer: Answer, written: Written) -> None:
                if answer.hang:
                    double._stopping.wait(10)
                    self.close_connection = True
                    return
                if answer.after_upstream_end is not None:
                    double._upstream_done.wait(10)
                    time.sleep(answer.after_upstream_end)
                chunks = [c.encode() if isinstance(c, str) else c for c in answer.body_chunks]
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                if answer.chunked and chunks:
                    self.send_header("transfer-encoding", "chunked")
                else:
                    self.send_header("content-length", str(sum(len(c) for c in chunks)))
                self.end_headers()
                self.wfile.flush()
                if answer.reset_after_headers:
                    self._reset(chunks[:1])
                    return
                if not (answer.chunked and chunks):
                    self.wfile.write(b"".join(chunks))
                    self.wfile.flush()
                    written.body_bytes = sum(len(c) for c in chunks)
                    written.completed = True
                    return
                for i, chunk in enumerate(chunks):
                    delay = answer.first_delay if (i == 0 and answer.first_delay is not None) else answer.chunk_delay
                    delay = answer.delays.get(i, answer.delays.get(i - len(chunks), delay))
                    if answer.pause_after_mark is not None and written.marked_at is not None and i > 0 \
                            and answer.mark in chunks[i - 1]:
                        delay = answer.pause_after_mark
                    # A long wait watches the peer meanwhile, so a close is seen when it happens.
                    until = time.monotonic() + delay
                    while True:
                        step = min(until - time.monotonic(), 0.01 if answer.watch_peer else delay)
                        if step <= 0 or (answer.stop is not None and answer.stop.wait(step)):
                            break
                        if answer.stop is None:
                            time.sleep(step)
                        if answer.watch_peer and delay > 0.1 and self._peer_closed():
                            break
                    if double._stopping.is_set() or (answer.stop is not None and answer.stop.is_set()):
                        written.stopped = True
                        self.close_connection = True
                        return
                    if answer.watch_peer and self._peer_closed():
                        written.gone_at = time.monotonic()
                        self.close_connection = True
                        return
                    data = b"%x\r\n%s\r\n" % (len(chunk), chunk)
                    if i == len(chunks) - 1:
                        # The last chunk and the terminator in one write: Envoy delivers them as
                        # one body callback with end_of_stream.
                        data += b"0\r\n\r\n"
                    self.wfile.write(data)
                    self.wfile.flush()
                    written.chunks_written += 1
                    written.body_bytes += len(chunk)
                    written.last_write = time.monotonic()
                    written.first_write = written.first_write or written.last_write
                    if answer.mark is not None and written.marked_at is None and answer.mark in chunk:
                        written.marked_at = written.last_write
                written.completed = True

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="upstream-double", daemon=True)

    def start(self) -> "UpstreamDouble":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def script(self, default: Optional[Answer] = None, by_path: Optional[dict] = None,
               sequence: Optional[list[Answer]] = None) -> None:
        """Replace the script and forget what was received. `sequence`: the answers to upstream
        requests in turn (a first answer, then a retry's), the last one repeating."""
        with self._lock:
            self.default = default or Answer(body_chunks=["no script"])
            self.sequence = list(sequence or [])
            self.by_path = dict(by_path or {})
            self.received = []
            self.incomplete = []
            self.writes = []
            self._upstream_done.clear()

    def add_path(self, path: str, answer: Answer) -> None:
        """Script one more path without forgetting anything (for concurrent streams, one path each)."""
        with self._lock:
            self.by_path[path] = answer

    def written(self, path: str) -> Optional[Written]:
        """How the (first) answer to `path` went out, if it was requested."""
        with self._lock:
            return next((w for w in self.writes if w.path.split("?", 1)[0] == path), None)

    def requests(self, callouts: bool = False) -> list[Received]:
        """What the double received: upstream requests, or (callouts=True) requests to scripted paths."""
        with self._lock:
            return [r for r in self.received if (r.path.split("?", 1)[0] in self.by_path) == callouts]


# --- the model double's tool-call answers ------------------------------------------------------------------


@dataclasses.dataclass
class DoubleToolCall:
    """One tool call the MODEL DOUBLE makes.

    `arguments` is the text as the model writes it (JSON text for a function tool, free text for a
    Responses custom tool); it goes on the wire byte for byte (non-streamed: spliced into the body
    unparsed; streamed: the concatenation of `pieces`). `kind`: Chat `function` (a `tool_calls`
    entry) or `legacy` (the deprecated `function_call`); Responses `function_call`,
    `custom_tool_call`, or any other caller-run item type, whose item then carries `item` as its
    fields (e.g. `{"action": {...}}` for a `local_shell_call`) and no name. Anthropic ignores `kind`.
    """

    name: str
    arguments: str
    kind: str = "function"
    # The argument deltas of a streamed call (default: the arguments in three pieces).
    pieces: Optional[list] = None
    # A Responses item's own fields for the item types that have no name or arguments.
    item: Optional[dict] = None

    def deltas(self) -> list[str]:
        if self.pieces is not None:
            assert "".join(self.pieces) == self.arguments, "pieces must join to the arguments"
            return list(self.pieces)
        third = max(1, len(self.arguments) // 3)
        return [p for p in (self.arguments[:third], self.arguments[third:2 * third], self.arguments[2 * third:]) if p]


# What the model double says about itself in every answer.
DOUBLE_IDS = {"anthropic": "msg_double_tools", "chat": "chatcmpl-double-tools", "responses": "resp_double_tools"}
DOUBLE_MODEL = {"anthropic": "claude-test", "chat": "gpt-4.1-mini", "responses": "gpt-4.1-mini"}
DOUBLE_USAGE = {"anthropic": {"input_tokens": 31, "output_tokens": 47},
                "chat": {"prompt_tokens": 31, "completion_tokens": 47, "total_tokens": 78},
                "responses": {"input_tokens": 31, "output_tokens": 47, "total_tokens": 78}}
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache"}
JSON_HEADERS = {"content-type": "application/json"}


def sse_event(event: Optional[str], data) -> bytes:
    """One SSE event (`event:` line when named); `data` a JSON value or a raw string (`[DONE]`)."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return ((f"event: {event}\n" if event else "") + f"data: {text}\n\n").encode()


def _raw_json(value, raw: dict[str, str]) -> str:
    """`value` as JSON, with each placeholder string in `raw` replaced by its text unquoted: how the
    double puts arguments on the wire exactly as the model wrote them."""
    text = json.dumps(value)
    for placeholder, verbatim in raw.items():
        text = text.replace(json.dumps(placeholder), verbatim)
    return text


def model_double_tool_answer(api: str, calls: list[DoubleToolCall], *, text: str = "", stream: bool = False,
                             chunk_delay: float = 0.01, **answer) -> Answer:
    """The model double's answer that writes `text`, then makes `calls`, in the `api`'s wire format
    (`anthropic`, `chat` or `responses`). Non-streamed: one JSON body with a content-length.
    Streamed: one SSE event per HTTP chunk, `chunk_delay` apart. `answer`: more `Answer` fields."""
    if stream:
        events = {"anthropic": _anthropic_events, "chat": _chat_events, "responses": _responses_events}[api](text, calls)
        return Answer(headers=dict(SSE_HEADERS), body_chunks=events, chunk_delay=chunk_delay, **answer)
    body = {"anthropic": _anthropic_body, "chat": _chat_body, "responses": _responses_body}[api](text, calls)
    return Answer(headers=dict(JSON_HEADERS), body_chunks=[body], chunked=False, **answer)


def _anthropic_body(text: str, calls: list[DoubleToolCall]) -> str:
    raw = {f"@@args{i}@@": c.arguments for i, c in enumerate(calls)}
    content = ([{"type": "text", "text": text}] if text else []) + [
        {"type": "tool_use", "id": f"toolu_{i + 1}", "name": c.name, "input": f"@@args{i}@@"}
        for i, c in enumerate(calls)]
    return _raw_json({"id": DOUBLE_IDS["anthropic"], "type": "message", "role": "assistant",
                      "model": DOUBLE_MODEL["anthropic"], "content": content,
                      "stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None,
                      "usage": DOUBLE_USAGE["anthropic"]}, raw)


def _anthropic_events(text: str, calls: list[DoubleToolCall]) -> list[bytes]:
    def ev(name: str, data: dict) -> bytes:
        return sse_event(name, {"type": name, **data})

    out = [ev("message_start", {"message": {
        "id": DOUBLE_IDS["anthropic"], "type": "message", "role": "assistant", "model": DOUBLE_MODEL["anthropic"],
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": DOUBLE_USAGE["anthropic"]["input_tokens"], "output_tokens": 1}}})]
    index = itertools.count()
    if text:
        i = next(index)
        out += [ev("content_block_start", {"index": i, "content_block": {"type": "text", "text": ""}}),
                ev("content_block_delta", {"index": i, "delta": {"type": "text_delta", "text": text}}),
                ev("content_block_stop", {"index": i})]
    for n, call in enumerate(calls):
        i = next(index)
        out.append(ev("content_block_start", {"index": i, "content_block": {
            "type": "tool_use", "id": f"toolu_{n + 1}", "name": call.name, "input": {}}}))
        out += [ev("content_block_delta", {"index": i, "delta": {"type": "input_json_delta", "partial_json": piece}})
                for piece in call.deltas()]
        out.append(ev("content_block_stop", {"index": i}))
    out += [ev("message_delta", {"delta": {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None},
                                 "usage": {"output_tokens": DOUBLE_USAGE["anthropic"]["output_tokens"]}}),
            ev("message_stop", {})]
    return out


def _chat_body(text: str, calls: list[DoubleToolCall]) -> str:
    message: dict = {"role": "assistant", "content": text or None, "refusal": None}
    finish = "stop"
    legacy = [c for c in calls if c.kind == "legacy"]
    if legacy:
        (call,) = legacy
        message["function_call"] = {"name": call.name, "arguments": call.arguments}
        finish = "function_call"
    elif calls:
        message["tool_calls"] = [{"id": f"call_{i + 1}", "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for i, c in enumerate(calls)]
        finish = "tool_calls"
    return json.dumps({"id": DOUBLE_IDS["chat"], "object": "chat.completion", "created": 1790000000,
                       "model": DOUBLE_MODEL["chat"],
                       "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                       "usage": DOUBLE_USAGE["chat"]})


def _chat_events(text: str, calls: list[DoubleToolCall]) -> list[bytes]:
    def chunk(delta: dict, finish: Optional[str] = None, usage: Optional[dict] = None) -> bytes:
        body = {"id": DOUBLE_IDS["chat"], "object": "chat.completion.chunk", "created": 1790000000,
                "model": DOUBLE_MODEL["chat"], "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if usage is not None:
            body["usage"] = usage
        return sse_event(None, body)

    out = [chunk({"role": "assistant", "content": text})] if text else [chunk({"role": "assistant", "content": ""})]
    finish = "stop"
    for i, call in enumerate(calls):
        if call.kind == "legacy":
            out.append(chunk({"function_call": {"name": call.name, "arguments": ""}}))
            out += [chunk({"function_call": {"arguments": piece}}) for piece in call.deltas()]
            finish = "function_call"
            continue
        out.append(chunk({"tool_calls": [{"index": i, "id": f"call_{i + 1}", "type": "function",
                                          "function": {"name": call.name, "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}) for piece in call.deltas()]
        finish = "tool_calls"
    out += [chunk({}, finish, DOUBLE_USAGE["chat"]), sse_event(None, "[DONE]")]
    return out


def _responses_items(text: str, calls: list[DoubleToolCall]) -> list[dict]:
    items: list[dict] = []
    if text:
        items.append({"type": "message", "id": "msg_double_1", "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": text, "annotations": []}]})
    for i, call in enumerate(calls):
        kind = "function_call" if call.kind == "function" else call.kind
        item: dict = {"type": kind, "id": f"fc_{i + 1}", "call_id": f"call_{i + 1}", "status": "completed"}
        if kind == "function_call":
            item.update(name=call.name, arguments=call.arguments)
        elif kind == "custom_tool_call":
            item.update(name=call.name, input=call.arguments)
            item.pop("status")
        else:
            item.update(call.item or {})
        items.append(item)
    return items


def _response(status: str, output: list, usage: Optional[dict] = None) -> dict:
    return {"id": DOUBLE_IDS["responses"], "object": "response", "created_at": 1790000000, "status": status,
            "error": None, "incomplete_details": None, "model": DOUBLE_MODEL["responses"], "output": output,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": usage}


def _responses_body(text: str, calls: list[DoubleToolCall]) -> str:
    return json.dumps(_response("completed", _responses_items(text, calls), DOUBLE_USAGE["responses"]))


def _responses_events(text: str, calls: list[DoubleToolCall]) -> list[bytes]:
    items = _responses_items(text, calls)
    events: list[tuple[str, dict]] = [("response.created", {"response": _response("in_progress", [])}),
                                      ("response.in_progress", {"response": _response("in_progress", [])})]
    for index, item in enumerate(items):
        at = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "message":
            part = item["content"][0]
            events += [
                ("response.output_item.added", {"output_index": index,
                                                "item": {**item, "status": "in_progress", "content": []}}),
                ("response.content_part.added", {**at, "content_index": 0, "part": {**part, "text": ""}}),
                ("response.output_text.delta", {**at, "content_index": 0, "delta": part["text"], "logprobs": []}),
                ("response.output_text.done", {**at, "content_index": 0, "text": part["text"], "logprobs": []}),
                ("response.content_part.done", {**at, "content_index": 0, "part": part}),
                ("response.output_item.done", {"output_index": index, "item": item})]
            continue
        call = calls[index - (1 if text else 0)]
        if item["type"] == "function_call":
            events.append(("response.output_item.added",
                           {"output_index": index, "item": {**item, "status": "in_progress", "arguments": ""}}))
            events += [("response.function_call_arguments.delta", {**at, "delta": piece}) for piece in call.deltas()]
            events.append(("response.function_call_arguments.done", {**at, "arguments": call.arguments}))
        elif item["type"] == "custom_tool_call":
            events.append(("response.output_item.added", {"output_index": index, "item": {**item, "input": ""}}))
            events += [("response.custom_tool_call_input.delta", {**at, "delta": piece}) for piece in call.deltas()]
            events.append(("response.custom_tool_call_input.done", {**at, "input": call.arguments}))
        else:
            events.append(("response.output_item.added",
                           {"output_index": index, "item": {**item, "status": "in_progress"}}))
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
    events.append(("response.completed", {"response": _response("completed", items, DOUBLE_USAGE["responses"])}))
    return [sse_event(name, {"type": name, "sequence_number": i, **data}) for i, (name, data) in enumerate(events)]
