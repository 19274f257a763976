#!/usr/bin/env python3
"""A JUDGE BACKEND DOUBLE for `benches/tool_checks.py`: stands in for the judge model behind the
livecheck-judge sidecar on tool-call checks. It is not a model: every verdict is scripted.

Run as its own process (so the bench client's GIL never delays it):

    python benches/tool_judge_double.py DELAY_SECONDS

It binds 127.0.0.1 on a port the OS picks and prints the port on stdout. Then, one command per line on
stdin, each answered with one line of JSON on stdout:

- `dump`: every call seen since the last dump, as `[ref, handled_s, kind]` (`ref`: the `"ref"` value in
  the call's TOOL-ARGUMENTS section, or null; `handled_s`: request line read -> answer flushed, the delay
  included; `kind`: "tool" for a tool-call check prompt, "other" otherwise), then forgets them;
- `sample`: the JSON body of the last tool-check prompt the sidecar sent (null before the first);
- `quit`: stops (also when stdin closes).

Only the OpenAI-compatible API (`POST /v1/chat/completions`, the sidecar's `api = "openai"` backends):
a tool-check prompt (its user message holds `<<<CONDITION tag>>>` and `<<<TOOL-ARGUMENTS tag>>>` with the
tag the system prompt names, judge/src/tool_prompt.rs) is answered after DELAY with the verdict
`{"result": <the arguments contain "invoice">, "explanation": "..."}` as the message content, what
`response_format: json_schema` yields. Any other body gets a 400.

`POST /floor` (the floor variants, `benches/noop-filter`'s `callout=`): the body is a Chat Completions
answer as the model double sent it; the call is answered after the same DELAY with a small JSON body and
recorded with kind "floor" and the `ref` in the answer's first tool call's arguments.
"""

from __future__ import annotations

import http.server
import json
import re
import sys
import threading
import time

HOLDS_WORD = "invoice"
_TAG = re.compile(r"secret tag ([0-9a-f]+)")
_REF = re.compile(r'"ref"\s*:\s*"([^"]+)"')


def tool_arguments(body: dict) -> str | None:
    """The TOOL-ARGUMENTS section of a tool-check prompt (OpenAI request shape), or None."""
    messages = body.get("messages") or []
    system = next((m.get("content") for m in messages if m.get("role") == "system"), "") or ""
    user = next((m.get("content") for m in messages if m.get("role") == "user"), "") or ""
    tag = _TAG.search(system)
    if tag is None or not isinstance(user, str):
        return None
    t = tag.group(1)
    if f"<<<CONDITION {t}>>>" not in user:
        return None
    found = re.search(rf"<<<TOOL-ARGUMENTS {t}>>>\n(.*?)\n<<<END TOOL-ARGUMENTS {t}>>>", user, re.S)
    return found.group(1) if found else None


def floor_arguments(body: dict) -> str | None:
    """The first tool call's arguments of a Chat Completions answer (what the floor filter sends), or None."""
    try:
        return body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    except (KeyError, IndexError, TypeError):
        return None


def main() -> None:
    delay = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    lock = threading.Lock()
    calls: list = []
    sample: list = [None]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are separate writes

        def log_message(self, *args) -> None:
            pass

        def parse_request(self) -> bool:
            self._started = time.perf_counter()  # the request line has arrived
            return super().parse_request()

        def do_POST(self) -> None:  # noqa: N802
            started = getattr(self, "_started", None) or time.perf_counter()
            raw = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = {}
            floor = self.path == "/floor"
            if floor:
                arguments = floor_arguments(body)
            else:
                arguments = tool_arguments(body) if self.path == "/v1/chat/completions" else None
            if arguments is None:
                status, answer = 400, {"error": {"message": "the double answers tool-check prompts only"}}
            else:
                if delay:
                    time.sleep(delay)
                verdict = {"result": HOLDS_WORD in arguments,
                           "explanation": "The double decided from the word it looks for."}
                status, answer = 200, {
                    "id": "chatcmpl-judge-double", "object": "chat.completion", "created": 1790000000,
                    "model": body.get("model", "judge"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": json.dumps(verdict), "refusal": None}}],
                    "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320},
                }
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            handled = time.perf_counter() - started
            ref = _REF.search(arguments) if arguments is not None else None
            with lock:
                kind = "other" if arguments is None else "floor" if floor else "tool"
                calls.append([ref.group(1) if ref else None, handled, kind])
                if kind == "tool":
                    sample[0] = body

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="tool-judge-double", daemon=True).start()
    print(server.server_address[1], flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "dump":
            with lock:
                out, calls[:] = list(calls), []
            print(json.dumps(out), flush=True)
        elif command == "sample":
            with lock:
                print(json.dumps(sample[0]), flush=True)
        elif command == "quit":
            break
    server.shutdown()
    server.server_close()


if __name__ == "__main__":
    main()
