"""The scorer's HTTP endpoint: ``/healthz`` (JSON; 200 or 503) and ``/metrics`` (Prometheus).

The standard library's ``ThreadingHTTPServer`` in a daemon thread: two read-only routes need
no web framework. ``/metrics`` is rendered by ``prometheus_client.generate_latest`` from the
service's own registry. Bound to 127.0.0.1 by default (the plant config's ``scorer.host``):
the endpoint is for the local agent that scrapes it, not for the plant network.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["HealthServer"]


class HealthServer:
    """Serves ``state.health()`` and the metrics of ``registry`` until :meth:`stop`."""

    def __init__(self, host: str, port: int, state, registry: CollectorRegistry):  # noqa: ANN001
        self.state, self.registry = state, registry
        handler = _handler(self)
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(owner: HealthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path == "/healthz":
                status, body = owner.state.health()
                self._send(status, "application/json", json.dumps(body).encode())
            elif self.path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(owner.registry))
            else:
                self._send(404, "text/plain", b"not found: try /healthz or /metrics\n")

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args) -> None:  # scrapes every few seconds: not worth a line
            return

    return Handler
