"""A WEBHOOK RECEIVER DOUBLE: a loopback HTTP server in a thread that records every POST (headers and
body) and answers 204. It stands in for an operator's webhook endpoint (the sidecar's signed
`response.check_failed` events) and for a Slack incoming webhook (its alerts). The e2e results tests
check the events' signatures; `make chaos-replicas` counts deliveries per `webhook-id`."""

from __future__ import annotations

import dataclasses
import http.server
import threading
import time


@dataclasses.dataclass
class Delivery:
    headers: dict  # lower-cased names
    body: bytes


class WebhookReceiver:
    """A loopback http.server in a thread: records every POST when it arrives and answers 204, `delay`
    seconds later (a receiver doing its own work)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length", "0") or 0)
                body = self.rfile.read(length) if length else b""
                with receiver._lock:
                    receiver.deliveries.append(Delivery({k.lower(): v for k, v in self.headers.items()}, body))
                time.sleep(delay)
                self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks/livecheck"
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook-receiver", daemon=True)
        self._thread.start()

    def seen(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
