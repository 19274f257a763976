"""A JUDGE BACKEND DOUBLE: stands in for the judge model behind the livecheck-judge sidecar.

One loopback HTTP/1.1 server speaking both judge APIs the sidecar calls:
  - OpenAI-compatible `POST /v1/chat/completions`: the verdict `{"passed", "score", "reason"}` as a JSON
    string in `choices[0].message.content` (what `response_format: json_schema` yields);
  - Anthropic `POST /v1/messages`: a forced `tool_use` block named `record_verdict` whose `input` is the
    same verdict object.

It decides from the JUDGED TEXT only (the section between the sidecar's `<<<JUDGED-TEXT tag>>>` markers,
never the rule or the user's message): a text containing `RUDE` fails, one containing `SLOW` is
answered after `slow_seconds` (for timeouts), anything else passes. `delay` holds every answer that long
(for the overhead bench). It records every request: path, headers (lower-cased), JSON body, the judged
text, and how long it spent handling the request (`handled_s`, from the request line read, headers
parsed, body read, to the answer flushed; the delay included).
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import re
import threading
import time
from typing import Optional

FAIL_MARKER = "RUDE"
SLOW_MARKER = "SLOW"
TOOL_NAME = "record_verdict"

_JUDGED = re.compile(r"<<<JUDGED-TEXT ([0-9a-f]+)>>>\n(.*)\n<<<END JUDGED-TEXT \1>>>", re.S)


@dataclasses.dataclass
class JudgeCall:
    path: str
    headers: dict  # lower-cased names
    body: dict
    judged_text: Optional[str]
    passed: Optional[bool]
    handled_s: float = 0.0


def judged_text(body: dict) -> Optional[str]:
    """The text between this call's JUDGED-TEXT markers in the one user message (both APIs)."""
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    if len(users) != 1 or not isinstance(users[0].get("content"), str):
        return None
    found = _JUDGED.search(users[0]["content"])
    return found.group(2) if found else None


class JudgeBackendDouble:
    def __init__(self, delay: float = 0.0, slow_seconds: float = 3.0) -> None:
        self.delay = delay
        self.slow_seconds = slow_seconds
        self.calls: list[JudgeCall] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        double = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm and
            # the peer's delayed ACK hold the body back ~40 ms.
            disable_nagle_algorithm = True

            def log_message(self, *args) -> None:
                pass

            def parse_request(self) -> bool:
                # The request line has arrived: the double's handling starts here (headers included).
                self._started = time.perf_counter()
                return super().parse_request()

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                started = getattr(self, "_started", None) or time.perf_counter()
                length = int(self.headers.get("content-length", "0") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                text = judged_text(body)
                passed = None if text is None else FAIL_MARKER not in text
                call = JudgeCall(self.path, {k.lower(): v for k, v in self.headers.items()}, body, text, passed)
                with double._lock:
                    double.calls.append(call)
                wait = double.delay + (double.slow_seconds if text and SLOW_MARKER in text else 0.0)
                if wait and double._stopping.wait(wait):
                    self.close_connection = True
                    return
                if self.path == "/v1/chat/completions":
                    status, answer = 200, _openai_answer(body, passed)
                elif self.path == "/v1/messages":
                    status, answer = 200, _anthropic_answer(body, passed)
                else:
                    status, answer = 404, {"error": {"message": f"no route {self.path}"}}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                call.handled_s = time.perf_counter() - started

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="judge-backend-double", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "JudgeBackendDouble":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.calls = []

    def seen(self) -> list[JudgeCall]:
        with self._lock:
            return list(self.calls)


def _verdict(passed: Optional[bool]) -> dict:
    if passed is None:  # no judged text found: the double cannot judge; say so plainly
        return {"passed": False, "score": 0.0, "reason": "The double found no judged text."}
    if passed:
        return {"passed": True, "score": 0.95, "reason": "The text keeps the rule."}
    return {"passed": False, "score": 0.05, "reason": "The text breaks the rule."}


def _openai_answer(body: dict, passed: Optional[bool]) -> dict:
    return {
        "id": "chatcmpl-judge",
        "object": "chat.completion",
        "created": 1790000000,
        "model": body.get("model", "judge"),
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": json.dumps(_verdict(passed)), "refusal": None},
            "finish_reason": "stop",
        }],
        "usage": {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140},
    }


def _anthropic_answer(body: dict, passed: Optional[bool]) -> dict:
    return {
        "id": "msg_judge",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "judge"),
        "content": [{"type": "tool_use", "id": "toolu_judge", "name": TOOL_NAME, "input": _verdict(passed)}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 120, "output_tokens": 20},
    }
