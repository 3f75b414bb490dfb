"""The bay page's routes on the services' hardened HTTP server.

Routes (everything but ``/healthz``, ``/bay.css`` and the login asks for a session):

* ``GET /healthz`` -- JSON, 200 while the database answers, else 503;
* ``GET /metrics`` -- Prometheus text (:mod:`.metrics`: results by outcome, refusals, logins);
* ``GET /login``, ``POST /login`` -- the token form; a right token sets the session cookie;
* ``GET /`` -- the station picker, or with ``?station=S`` the sticks awaiting inspection
  there (a single-station plant goes straight to its list);
* ``POST /inspect`` -- one result for one stick, stored as an inspection
  (:mod:`.entry`), answered by a redirect to the list with what became of it (post,
  redirect, get: reloading the list never sends the tap again);
* ``POST /logout`` -- forgets the session on this tablet.

Without a session a page redirects to the login (``303``), a ``POST`` gets ``401``. A
``POST`` that may come from another site (:func:`.auth.cross_site_problem`) or lacks the
session's anti-forgery token gets ``403`` and changes nothing. Every answer says
``Cache-Control: no-store`` (a tablet's back button shows no stale list), forbids framing
(no page of another site can lay the buttons under its own) and allows no script.
The request handler is the standard library's, on :class:`qcllp.service.http.GuardedServer`
(slow or silent clients cannot hold its threads); HTTP/1.0, one request per connection.
"""

from __future__ import annotations

import json
import logging
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlencode, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from qcllp.plant.config import PlantConfig
from qcllp.service.bay import pages
from qcllp.service.bay.auth import COOKIE, Sessions, cross_site_problem
from qcllp.service.bay.awaiting import awaiting, inspection_by_id
from qcllp.service.bay.entry import Entry, record_entry
from qcllp.service.bay.metrics import BayMetrics
from qcllp.service.http import IDLE_S
from qcllp.service.logs import log_event, one_line
from qcllp.store import Store

__all__ = ["BayApp", "handler_class"]

log = logging.getLogger("qcllp.bay")

MAX_FORM_BYTES = 8192  # a tap's form is a few hundred bytes
LOGIN_FAILURE_DELAY_S = 1.0  # a wrong token waits this long: guessing stays slow
_SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class BayApp:
    """What the handler needs: the store, the plant config and the sessions."""

    def __init__(self, store: Store, config: PlantConfig, sessions: Sessions):
        self.store, self.config, self.sessions = store, config, sessions
        self.metrics = BayMetrics()

    def health(self) -> tuple[int, dict]:
        """200 while the database answers a query, else 503 with the error."""
        try:
            with self.store.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except SQLAlchemyError as exc:
            return 503, {"service": "bay", "status": "unhealthy", "problems": [one_line(exc)]}
        return 200, {"service": "bay", "status": "ok", "problems": []}

    def station_view(self, station: str, query: dict[str, str], csrf: str) -> pages.StationView:
        """The list of ``station`` and the banner the redirect after a tap asks for."""
        with self.store.engine.connect() as conn:
            rows, more = awaiting(conn, station)
            banner = None
            for kind in ("stored", "same", "refused"):
                if query.get(kind, "").isdigit():
                    found = inspection_by_id(conn, int(query[kind]))
                    if found is not None and found.station == station:
                        banner = pages.Banner(kind, found, query.get("tried"))
        return pages.StationView(
            station=station,
            stations=self.config.station_names,
            rows=rows,
            more=more,
            classes=self.config.classes,
            csrf=csrf,
            timezone=self.config.timezone,
            banner=banner,
        )

    def counts(self) -> dict[str, tuple[int, bool]]:
        """Per station how many sticks wait (the picker)."""
        with self.store.engine.connect() as conn:
            found = {s: awaiting(conn, s) for s in self.config.station_names}
        return {s: (len(rows), more) for s, (rows, more) in found.items()}


def handler_class(app: BayApp) -> type[BaseHTTPRequestHandler]:
    """The request handler of ``app`` (module docstring)."""

    class Handler(_Handler):
        bay = app

    return Handler


class _Handler(BaseHTTPRequestHandler):
    timeout = IDLE_S  # a client that stalls mid-request frees its thread
    server_version = "qcllp-bay"
    sys_version = ""
    bay: BayApp

    def handle_one_request(self) -> None:
        """The standard library's, with a database that does not answer said on the page
        (503) instead of a dropped connection."""
        try:
            super().handle_one_request()
        except SQLAlchemyError as exc:
            self._event("database_error", level=logging.ERROR, error=one_line(exc))
            why = (
                "The database does not answer, so a result may not be stored. Tap again in a "
                "minute: a result stored already is not stored twice."
            )
            self._html(503, pages.message_page("Not available", why))

    # ------------------------------------------------------------------ GET
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        url = urlsplit(self.path)
        if url.path == "/healthz":
            status, body = self.bay.health()
            self._send(status, json.dumps(body).encode(), "application/json")
        elif url.path == "/metrics":
            self._send(200, generate_latest(self.bay.metrics.registry), CONTENT_TYPE_LATEST)
        elif url.path == "/bay.css":
            self._send(200, pages.CSS.encode(), "text/css; charset=utf-8")
        elif url.path == "/login":
            if self._session() is not None:
                self._redirect("/")
            else:
                self._html(200, pages.login_page())
        elif url.path == "/":
            self._list(url.query)
        else:
            self._html(404, pages.message_page("Not found", f"No page {url.path} here."))

    def _list(self, query_text: str) -> None:
        sid = self._session()
        if sid is None:
            self._redirect("/login")
            return
        query = {k: v[0] for k, v in parse_qs(query_text).items()}
        csrf = self.bay.sessions.csrf_token(sid)
        stations = self.bay.config.station_names
        station = query.get("station") or (stations[0] if len(stations) == 1 else None)
        if station is None:
            self._html(200, pages.picker_page(self.bay.counts(), csrf))
        elif station not in stations:
            known = ", ".join(stations)
            self._html(404, pages.message_page("Not found", f"No station {station}: {known}."))
        else:
            self._html(200, pages.station_page(self.bay.station_view(station, query, csrf)))

    # ------------------------------------------------------------------ POST
    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        path = urlsplit(self.path).path
        if path not in ("/login", "/inspect", "/logout"):
            self._html(404, pages.message_page("Not found", f"No page {path} here."))
            return
        problem = cross_site_problem(self.headers)
        if problem is not None:
            self._refuse(403, f"refused: {problem}", path)
            return
        form = self._form()
        if form is None:
            return
        if path == "/login":
            self._login(form)
            return
        sid = self._session()
        if sid is None:
            self._refuse(401, "the session is over or missing: log in again", path)
        elif not self.bay.sessions.csrf_ok(sid, form.get("csrf")):
            self._refuse(403, "refused: the form's anti-forgery token is missing or wrong", path)
        elif path == "/logout":
            self._redirect("/login", cookie=f"{COOKIE}=; Max-Age=0; {_COOKIE_FLAGS}")
        else:
            self._inspect(form)

    def _login(self, form: dict[str, str]) -> None:
        if self.bay.sessions.token_ok(form.get("token", "")):
            cookie = self.bay.sessions.issue()
            age = int(self.bay.sessions.max_age_s)
            # behind a TLS proxy the browser's Origin is https: the cookie then never
            # travels unencrypted
            https = urlsplit(self.headers.get("Origin") or "").scheme == "https"
            flags = _COOKIE_FLAGS + ("; Secure" if https else "")
            self._event("login")
            self.bay.metrics.logins.labels(outcome="ok").inc()
            self._redirect("/", cookie=f"{COOKIE}={cookie}; Max-Age={age}; {flags}")
            return
        self._event("login_refused", level=logging.WARNING)
        self.bay.metrics.logins.labels(outcome="wrong").inc()
        time.sleep(LOGIN_FAILURE_DELAY_S)
        self._html(401, pages.login_page("That is not the token. Try again."))

    def _inspect(self, form: dict[str, str]) -> None:
        entry = Entry(
            station=form.get("station", ""),
            charge_id=form.get("charge_id", ""),
            stick_id=form.get("stick_id", ""),
            result=form.get("result", ""),
        )
        source = f"bay page, {self.client_address[0]}"
        outcome = record_entry(self.bay.store, self.bay.config, entry, source)
        self._event(
            "inspection", station=entry.station, charge_id=entry.charge_id,
            stick_id=entry.stick_id, result=entry.result, outcome=outcome.status,
            reason=outcome.reason,
        )  # fmt: skip
        self.bay.metrics.results.labels(outcome=outcome.status).inc()
        if outcome.status == "invalid" or outcome.inspection is None:
            text_ = f"Not stored: {outcome.detail or outcome.reason}"
            self._html(422, pages.message_page("Not stored", text_, link=_list_url(entry)))
            return
        asked = {outcome.status: str(outcome.inspection.id)}
        if outcome.status == "refused":
            asked["tried"] = entry.result
        self._redirect(_list_url(entry, asked))

    # ------------------------------------------------------------------ parts
    def _session(self) -> str | None:
        cookies = self.headers.get_all("Cookie") or []
        for header in cookies:
            for part in header.split(";"):
                name, _, value = part.strip().partition("=")
                if name == COOKIE:
                    return self.bay.sessions.session_of(value)
        return None

    def _form(self) -> dict[str, str] | None:
        """The urlencoded form of the request (first value of each field); ``None`` after
        answering a request whose body is missing, too large or of another type."""
        length = self.headers.get("Content-Length", "")
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if kind != "application/x-www-form-urlencoded":
            self._html(415, pages.message_page("Not accepted", "Send the page's form."))
            return None
        if not length.isdigit() or int(length) > MAX_FORM_BYTES:
            self._html(413, pages.message_page("Not accepted", "The form is too large."))
            return None
        body = self.rfile.read(int(length)).decode("utf-8", errors="replace")
        try:
            fields = parse_qs(body, max_num_fields=32)
        except ValueError:  # more fields than any form of the page has
            self._html(413, pages.message_page("Not accepted", "The form is too large."))
            return None
        return {k: v[0] for k, v in fields.items()}

    def _refuse(self, status: int, why: str, path: str) -> None:
        self._event("refused", level=logging.WARNING, status=status, path=path, why=why)
        self.bay.metrics.refused.labels(status=str(status)).inc()
        link = "/login" if status == 401 else "/"
        title = "Log in again" if status == 401 else "Refused"
        self._html(status, pages.message_page(title, why, link=link, link_text="Go on"))

    def _event(self, event: str, *, level: int = logging.INFO, **fields) -> None:  # noqa: ANN003
        log_event(log, event, level=level, service="bay", client=self.client_address[0], **fields)

    def _redirect(self, location: str, *, cookie: str | None = None) -> None:
        extra = {"Location": location}
        if cookie is not None:
            extra["Set-Cookie"] = cookie
        self._send(303, b"", "text/plain", extra)

    def _html(self, status: int, page: str) -> None:
        self._send(status, page.encode(), "text/html; charset=utf-8")

    def _send(self, status: int, body: bytes, content_type: str, extra: dict | None = None) -> None:
        self.send_response(status)
        for name, value in {**_SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args) -> None:  # the events above say what matters
        return


_COOKIE_FLAGS = "Path=/; HttpOnly; SameSite=Strict"


def _list_url(entry: Entry, asked: dict[str, str] | None = None) -> str:
    return "/?" + urlencode({"station": entry.station, **(asked or {})})
