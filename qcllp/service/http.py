"""The services' HTTP endpoint: ``/healthz`` (JSON; 200 or 503) and ``/metrics`` (Prometheus).

The standard library's HTTP server: two read-only routes need no web framework.
``/metrics`` is rendered by ``prometheus_client.generate_latest`` from the service's own
registry. Bound to 127.0.0.1 by default (the plant config's ``scorer.host`` and
``retrainer.host``): the endpoint is for the local agent that scrapes it, not for the plant
network (:func:`qcllp.plant.config.exposed_host_warning` says so at start when it is).

Slow or idle clients cannot take the service down. ``ThreadingHTTPServer`` gives each
accepted connection a thread at once, so 800 clients that connect and send nothing hold
about 700 threads. Here one loop thread (:meth:`GuardedServer.run`) accepts connections and
keeps them in a selector until their request starts to arrive; only then does a worker
thread take it, at most ``max_workers`` at a time (a connection beyond that gets ``503`` at
once and is closed). A connection that sends nothing for ``idle_s`` seconds is closed by the
loop (and the longest silent one as soon as ``MAX_WAITING`` wait, to make room for a new
one: a scraper's request never waits behind them), and a worker's reads time out after
``idle_s`` too (the handler's ``timeout``), so a client that stalls mid-request frees its
thread.
"""

from __future__ import annotations

import json
import logging
import selectors
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["GuardedServer", "HealthServer"]

log = logging.getLogger("qcllp.http")

IDLE_S = 10.0  # a connection silent this long is closed (the scrapers send at once)
MAX_WORKERS = 16  # requests answered at once (a scrape takes milliseconds)
MAX_WAITING = 512  # connections accepted but silent (each costs a file descriptor)
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class HealthServer:
    """Serves ``state.health()`` and the metrics of ``registry`` until :meth:`stop`."""

    def __init__(
        self,
        host: str,
        port: int,
        state,  # noqa: ANN001 - anything with health() -> (status, body)
        registry: CollectorRegistry,
        *,
        idle_s: float = IDLE_S,
        max_workers: int = MAX_WORKERS,
    ):
        self.state, self.registry = state, registry
        handler = _handler(self, idle_s)
        self.server = GuardedServer((host, port), handler, idle_s=idle_s, max_workers=max_workers)
        self.thread = threading.Thread(target=self.server.run, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.stopping.set()
        self.thread.join(timeout=5)
        self.server.server_close()


class GuardedServer(ThreadingHTTPServer):
    """Accepts in one loop, hands a connection to a worker thread only once its request
    arrives, with at most ``max_workers`` workers (module docstring). Serves any request
    handler: the lock-out bay page (:mod:`qcllp.service.bay`) runs on it too."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, handler, *, idle_s: float, max_workers: int):  # noqa: ANN001
        super().__init__(address, handler)
        self.idle_s = idle_s
        self.slots = threading.BoundedSemaphore(max_workers)
        self.stopping = threading.Event()
        self.waiting: dict[socket.socket, tuple[float, object]] = {}  # -> (deadline, address)

    def run(self, poll_s: float = 0.2) -> None:
        """The loop: accept, wait for a request's first bytes, dispatch, expire the silent."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            try:
                while not self.stopping.is_set():
                    for key, _ in selector.select(poll_s):
                        if key.fileobj is self.socket:
                            self._accept(selector)
                        else:
                            selector.unregister(key.fileobj)
                            _, address = self.waiting.pop(key.fileobj)
                            self._dispatch(key.fileobj, address)
                    self._expire(selector)
            finally:
                for conn in self.waiting:
                    conn.close()
                self.waiting.clear()

    def _accept(self, selector: selectors.BaseSelector) -> None:
        try:
            conn, address = self.get_request()
        except OSError:  # the client gave up between select and accept
            return
        if len(self.waiting) >= MAX_WAITING:  # the longest silent one makes room
            oldest = next(iter(self.waiting))
            selector.unregister(oldest)
            del self.waiting[oldest]
            oldest.close()
        self.waiting[conn] = (time.monotonic() + self.idle_s, address)
        selector.register(conn, selectors.EVENT_READ)

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        for conn in [c for c, (deadline, _) in self.waiting.items() if deadline < now]:
            selector.unregister(conn)
            del self.waiting[conn]
            conn.close()

    def _dispatch(self, conn: socket.socket, address: object) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                conn.settimeout(0.1)
                conn.sendall(_BUSY)
            except OSError:
                pass
            conn.close()
            return
        threading.Thread(target=self._work, args=(conn, address), daemon=True).start()

    def _work(self, conn: socket.socket, address: object) -> None:
        try:
            self.finish_request(conn, address)
        except Exception:  # noqa: BLE001 - one client's trouble never ends the server
            self.handle_error(conn, address)
        finally:
            self.shutdown_request(conn)
            self.slots.release()

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001
        """A log record (one JSON line in the services), not socketserver's print."""
        log.exception("error while answering %s", client_address)


def _handler(owner: HealthServer, idle_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = idle_s  # StreamRequestHandler: the socket's read timeout

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
