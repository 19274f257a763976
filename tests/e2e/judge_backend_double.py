"""A JUDGE BACKEND DOUBLE: stands in for the judge model behind the livecheck-judge sidecar.

One loopback HTTP/1.1 server speaking both judge APIs the sidecar calls:
  - OpenAI-compatible `POST /v1/chat/completions`: the verdict `{"passed", "score", "reason"}` as a JSON
    string in `choices[0].message.content` (what `response_format: json_schema` yields);
  - Anthropic `POST /v1/messages`: a forced `tool_use` block named `record_verdict` whose `input` is the
    same verdict object.

Judged checks (`POST /v1/judge` on the sidecar). It decides from the JUDGED TEXT only (the section
between the sidecar's `<<<JUDGED-TEXT tag>>>` markers, never the rule or the user's message): a text
containing `RUDE` fails, one containing `SLOW` is answered after `slow_seconds` (for timeouts), anything
else passes. `delay` holds every answer that long (for the overhead bench). It records every request:
path, headers (lower-cased), JSON body, the judged text, and how long it spent handling the request
(`handled_s`, from the request line read, headers parsed, body read, to the answer flushed; the delay
included).

Tool-call checks (`POST /v1/tool-check` on the sidecar, judge/src/tool_prompt.rs). A prompt is one when
its user message has the sidecar's `<<<CONDITION tag>>>` and `<<<TOOL-ARGUMENTS tag>>>` sections (the
tag is read from the system prompt's "secret tag ..."). The double reads the fenced sections
(CONDITION, TOOL-NAME, TOOL-ARGUMENTS, every USER-MESSAGE in order) into `JudgeCall.tool_check` and
answers the tool-check verdict `{"result", "explanation"}` (the same two API shapes as above), deciding
from the CONDITION and the ARGUMENTS only, in this order:
  - a condition containing `BROKEN`: HTTP 500 with an error body (the backend fails);
  - a condition containing `GARBAGE`: a malformed verdict (`result` is not a boolean);
  - a condition containing `SLOW`: answered after `slow_seconds` (`result: false`), for timeouts;
  - a condition containing `billing`: holds (`result: true`) when the arguments contain `invoice`;
  - any other condition holds when the arguments contain `HOLDS-FOR-JUDGE`;
  - otherwise `result: false`.
The explanation is `TOOL_HOLDS_EXPLANATION` or `TOOL_CLEAR_EXPLANATION`.
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

# Tool-call checks: how a condition is decided (see the module docstring).
BROKEN_MARKER = "BROKEN"
GARBAGE_MARKER = "GARBAGE"
BILLING_WORD = "billing"
INVOICE_WORD = "invoice"
HOLDS_MARKER = "HOLDS-FOR-JUDGE"
TOOL_HOLDS_EXPLANATION = "The call matches the condition."
TOOL_CLEAR_EXPLANATION = "The condition does not hold for this call."

_JUDGED = re.compile(r"<<<JUDGED-TEXT ([0-9a-f]+)>>>\n(.*)\n<<<END JUDGED-TEXT \1>>>", re.S)
_TAG = re.compile(r"secret tag ([0-9a-f]+)")


@dataclasses.dataclass
class ToolCheckSeen:
    """What the double read from a tool-check prompt's fenced sections, and what it answered."""

    condition: str
    tool: str
    arguments: str
    intent: list  # the USER-MESSAGE sections, in the prompt's order (oldest first)
    # "holds" / "clear" (a verdict), "garbage" (a malformed verdict), "broken" (HTTP 500)
    answered: str = ""


@dataclasses.dataclass
class JudgeCall:
    path: str
    headers: dict  # lower-cased names
    body: dict
    judged_text: Optional[str]
    passed: Optional[bool]
    handled_s: float = 0.0
    # Set for a tool-call check's prompt (then `judged_text` and `passed` are None).
    tool_check: Optional[ToolCheckSeen] = None


def judged_text(body: dict) -> Optional[str]:
    """The text between this call's JUDGED-TEXT markers in the one user message (both APIs)."""
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    if len(users) != 1 or not isinstance(users[0].get("content"), str):
        return None
    found = _JUDGED.search(users[0]["content"])
    return found.group(2) if found else None


def _system_prompt(body: dict) -> str:
    """The system prompt in either API's request shape."""
    if isinstance(body.get("system"), str):  # Anthropic
        return body["system"]
    return next((m.get("content") for m in body.get("messages", [])
                 if m.get("role") == "system" and isinstance(m.get("content"), str)), "")


def tool_check_seen(body: dict) -> Optional[ToolCheckSeen]:
    """The sections of a tool-call check's prompt (both APIs), or None when the body is not one: the
    user message must carry this call's CONDITION and TOOL-ARGUMENTS sections under the tag the
    system prompt names."""
    tag = _TAG.search(_system_prompt(body))
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    if tag is None or len(users) != 1 or not isinstance(users[0].get("content"), str):
        return None
    user, tag = users[0]["content"], tag.group(1)

    def sections(name: str) -> list[str]:
        return re.findall(rf"<<<{name} {tag}>>>\n(.*?)\n<<<END {name} {tag}>>>", user, re.S)

    condition, tool, arguments = sections("CONDITION"), sections("TOOL-NAME"), sections("TOOL-ARGUMENTS")
    if len(condition) != 1 or len(arguments) != 1 or len(tool) != 1:
        return None
    return ToolCheckSeen(condition[0], tool[0], arguments[0], sections("USER-MESSAGE"))


def _tool_decision(seen: ToolCheckSeen) -> str:
    """What the double answers a tool-call check (the module docstring's rules)."""
    if BROKEN_MARKER in seen.condition:
        return "broken"
    if GARBAGE_MARKER in seen.condition:
        return "garbage"
    if SLOW_MARKER in seen.condition:
        return "clear"
    if BILLING_WORD in seen.condition:
        return "holds" if INVOICE_WORD in seen.arguments else "clear"
    return "holds" if HOLDS_MARKER in seen.arguments else "clear"


class JudgeBackendDouble:
    """`chaos` (set while it runs, for the soak) makes every answer fail one way: "5xx" (HTTP 503),
    "garbage" (a 200 whose body is not the API's JSON) or "late" (held `late_seconds` first)."""

    def __init__(self, delay: float = 0.0, slow_seconds: float = 3.0, late_seconds: float = 5.0) -> None:
        self.delay = delay
        self.slow_seconds = slow_seconds
        self.late_seconds = late_seconds
        self.chaos: Optional[str] = None
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
                tool = tool_check_seen(body) if text is None else None
                if tool is not None:
                    tool.answered = _tool_decision(tool)
                call = JudgeCall(self.path, {k.lower(): v for k, v in self.headers.items()}, body, text, passed,
                                 tool_check=tool)
                with double._lock:
                    double.calls.append(call)
                slow = (text and SLOW_MARKER in text) or (tool is not None and SLOW_MARKER in tool.condition)
                wait = double.delay + (double.slow_seconds if slow else 0.0)
                if wait and double._stopping.wait(wait):
                    self.close_connection = True
                    return
                chaos = double.chaos
                if chaos == "late":
                    # Past the sidecar's timeout: the caller is gone, so nothing is written.
                    double._stopping.wait(double.late_seconds)
                    self.close_connection = True
                    return
                if chaos == "5xx":
                    self._send(503, b"upstream overloaded")
                    return
                if chaos == "garbage":
                    self._send(200, b'{"choices": "not a list", "content": 7')
                    return
                if self.path not in ("/v1/chat/completions", "/v1/messages"):
                    status, answer = 404, {"error": {"message": f"no route {self.path}"}}
                elif tool is not None and tool.answered == "broken":
                    status, answer = 500, {"error": {"type": "server_error", "message": "the double is broken"}}
                elif tool is not None:
                    verdict = _tool_verdict(tool.answered)
                    status = 200
                    answer = (_openai_answer(body, None, verdict) if self.path == "/v1/chat/completions"
                              else _anthropic_answer(body, None, verdict))
                elif self.path == "/v1/chat/completions":
                    status, answer = 200, _openai_answer(body, passed)
                else:
                    status, answer = 200, _anthropic_answer(body, passed)
                self._send(status, json.dumps(answer).encode())
                call.handled_s = time.perf_counter() - started

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

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

    def tool_checks(self) -> list[JudgeCall]:
        """The tool-call checks among the calls seen, in arrival order."""
        return [c for c in self.seen() if c.tool_check is not None]


def _verdict(passed: Optional[bool]) -> dict:
    if passed is None:  # no judged text found: the double cannot judge; say so plainly
        return {"passed": False, "score": 0.0, "reason": "The double found no judged text."}
    if passed:
        return {"passed": True, "score": 0.95, "reason": "The text keeps the rule."}
    return {"passed": False, "score": 0.05, "reason": "The text breaks the rule."}


def _tool_verdict(answered: str) -> dict:
    if answered == "garbage":
        return {"result": "maybe", "explanation": 42}
    if answered == "holds":
        return {"result": True, "explanation": TOOL_HOLDS_EXPLANATION}
    return {"result": False, "explanation": TOOL_CLEAR_EXPLANATION}


def _openai_answer(body: dict, passed: Optional[bool], verdict: Optional[dict] = None) -> dict:
    verdict = _verdict(passed) if verdict is None else verdict
    return {
        "id": "chatcmpl-judge",
        "object": "chat.completion",
        "created": 1790000000,
        "model": body.get("model", "judge"),
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": json.dumps(verdict), "refusal": None},
            "finish_reason": "stop",
        }],
        "usage": {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140},
    }


def _anthropic_answer(body: dict, passed: Optional[bool], verdict: Optional[dict] = None) -> dict:
    verdict = _verdict(passed) if verdict is None else verdict
    return {
        "id": "msg_judge",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "judge"),
        "content": [{"type": "tool_use", "id": "toolu_judge", "name": TOOL_NAME, "input": verdict}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 120, "output_tokens": 20},
    }
