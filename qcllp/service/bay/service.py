"""``qcllp serve bay``: the lock-out bay page as a service, until SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading

from qcllp.plant.config import PlantConfig
from qcllp.service.bay.auth import Sessions, load_token
from qcllp.service.bay.server import BayApp, handler_class
from qcllp.service.http import IDLE_S, GuardedServer
from qcllp.service.logs import log_event
from qcllp.store import Store

__all__ = ["run_bay"]

log = logging.getLogger("qcllp.bay")

MAX_WORKERS = 8  # requests answered at once: a bay has a few tablets


def run_bay(store: Store, config: PlantConfig, *, port: int | None = None) -> int:
    """Serve the bay page on ``bay.host:bay.port`` (``port`` overrides) until SIGTERM or
    SIGINT; returns the exit code, 0. Without a token (:func:`.auth.load_token`) it raises
    before it listens."""
    sessions = Sessions(load_token(), max_age_s=config.bay.session_days * 86_400.0)
    handler = handler_class(BayApp(store, config, sessions))
    host = config.bay.host
    server = GuardedServer(
        (host, config.bay.port if port is None else port),
        handler,
        idle_s=IDLE_S,
        max_workers=MAX_WORKERS,
    )
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    thread = threading.Thread(target=server.run, name="http", daemon=True)
    thread.start()
    bound = server.server_address[1]
    _log("started", url=f"http://{host}:{bound}/", stations=list(config.station_names),
         database=store.display_url)  # fmt: skip
    stopping.wait()
    _log("stopping")
    server.stopping.set()
    thread.join(timeout=5)
    server.server_close()
    _log("stopped")
    return 0


def _log(event: str, **fields) -> None:  # noqa: ANN003
    log_event(log, event, service="bay", **fields)
