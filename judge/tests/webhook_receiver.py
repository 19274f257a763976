"""A WEBHOOK RECEIVER double for the sidecar's events, verifying them as a real receiver would
(Standard Webhooks: HMAC-SHA256 over "{id}.{timestamp}.{body}", base64, "v1," prefix; a `whsec_` secret is
base64 after the prefix). Standard library only (Python 3.11).

    python3 webhook_receiver.py SECRET [--fail-first N] [--tolerance SECONDS]

Prints the port it listens on (127.0.0.1), then serves until killed:
- POST /       verifies and answers 204; 401 bad or missing signature, 400 timestamp outside the tolerance,
               409 an id already accepted (a replay); the first N valid deliveries get 500 (not accepted).
- GET /log     {"accepted": [{"id", "body"}], "rejected": ["signature" | "timestamp" | "replay"]}.
"""

import argparse
import base64
import hashlib
import hmac
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def key_of(secret: str) -> bytes:
    if secret.startswith("whsec_"):
        return base64.b64decode(secret[len("whsec_"):])
    return secret.encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("secret")
    parser.add_argument("--fail-first", type=int, default=0)
    parser.add_argument("--tolerance", type=int, default=300)
    args = parser.parse_args()
    key = key_of(args.secret)
    lock = threading.Lock()
    state = {"accepted": [], "rejected": [], "failures_left": args.fail_first}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_):  # quiet
            pass

        def answer(self, status: int, body: bytes = b"") -> None:
            self.send_response(status)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            with lock:
                body = json.dumps({"accepted": state["accepted"], "rejected": state["rejected"]})
            self.answer(200, body.encode())

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            msg_id = self.headers.get("webhook-id", "")
            stamp = self.headers.get("webhook-timestamp", "")
            signatures = self.headers.get("webhook-signature", "").split()
            signed = f"{msg_id}.{stamp}.".encode() + body
            expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
            with lock:
                if not any(hmac.compare_digest(expected, s) for s in signatures):
                    state["rejected"].append("signature")
                    return self.answer(401)
                if not stamp.isdigit() or abs(time.time() - int(stamp)) > args.tolerance:
                    state["rejected"].append("timestamp")
                    return self.answer(400)
                if any(a["id"] == msg_id for a in state["accepted"]):
                    state["rejected"].append("replay")
                    return self.answer(409)
                if state["failures_left"] > 0:
                    state["failures_left"] -= 1
                    return self.answer(500)
                state["accepted"].append({"id": msg_id, "body": json.loads(body)})
            self.answer(204)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
