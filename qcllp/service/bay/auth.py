"""Who may use the bay page, and which requests may change data.

**The token.** One secret per plant, from ``QCLLP_BAY_TOKEN`` or the private file named by
``QCLLP_BAY_TOKEN_FILE`` (:func:`qcllp.store.credentials.secret_from_env`, the same rules
as the database password: systemd's ``LoadCredential=`` hands such a file). Without one,
or with one shorter than :data:`MIN_TOKEN_CHARS`, the service does not start: a page that
stores inspections is never open to whoever reaches the port.

**The session.** An inspector types the token once into the tablet's login form; the answer
sets a cookie ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page
makes the browser send it) and ``Path=/``, valid ``session_days``. The cookie holds a random
session id, its time of issue and an HMAC of both under a key derived from the token: the
server keeps no session table (a restart logs nobody out, login attempts fill no memory),
and a new token invalidates every cookie at once. The token is compared with
:func:`hmac.compare_digest`, and so is every MAC.

**Cross-site request forgery.** A request that changes data (``POST``) must carry

* the session's anti-forgery token in the form (an HMAC of the session id: a page of another
  site cannot read it), and
* an ``Origin`` (else ``Referer``) of this very host, and no ``Sec-Fetch-Site`` other than
  ``same-origin``; a request with neither header is refused too.

The login form is checked the same way (no login forged into a tablet).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

from qcllp.store.credentials import BAY, CredentialError, secret_from_env

__all__ = [
    "COOKIE",
    "MIN_TOKEN_CHARS",
    "Sessions",
    "cross_site_problem",
    "load_token",
]

COOKIE = "qcllp_bay"
MIN_TOKEN_CHARS = 16  # e.g. `openssl rand -hex 16` gives 32


def load_token(environ: Mapping[str, str] | None = None) -> str:
    """The page's token (module docstring); a :class:`CredentialError` saying how to set one
    when it is missing or too short."""
    token = secret_from_env(BAY, environ, kind="TOKEN")
    if not token:
        raise CredentialError(
            f"the lock-out bay page needs a token: set {BAY}_TOKEN, or {BAY}_TOKEN_FILE to a "
            "file only its owner can read (e.g. openssl rand -hex 16 > bay-token; "
            "chmod 600 bay-token)"
        )
    if len(token.strip()) < MIN_TOKEN_CHARS:
        raise CredentialError(
            f"the lock-out bay page's token is {len(token.strip())} characters long; use at "
            f"least {MIN_TOKEN_CHARS} (e.g. openssl rand -hex 16)"
        )
    return token.strip()


class Sessions:
    """Signed session cookies and their anti-forgery tokens (module docstring)."""

    def __init__(self, token: str, max_age_s: float):
        self._token = token.encode()
        self._key = hmac.new(self._token, b"qcllp-bay-session-v1", hashlib.sha256).digest()
        self.max_age_s = max_age_s

    def token_ok(self, given: str) -> bool:
        """Whether ``given`` is the page's token (constant time)."""
        return hmac.compare_digest(given.strip().encode(), self._token)

    def issue(self, now: float | None = None) -> str:
        """A new session cookie's value: ``<id>.<issued>.<mac>``."""
        body = f"{secrets.token_urlsafe(24)}.{int(now if now is not None else time.time())}"
        return f"{body}.{self._mac('session', body)}"

    def session_of(self, cookie: str | None, now: float | None = None) -> str | None:
        """The session id of a valid, unexpired cookie value, else ``None``."""
        if not cookie or cookie.count(".") != 2:
            return None
        body, mac = cookie.rsplit(".", 1)
        if not hmac.compare_digest(mac, self._mac("session", body)):
            return None
        sid, issued = body.split(".")
        now = now if now is not None else time.time()
        if not issued.isdigit() or not 0 <= now - int(issued) <= self.max_age_s:
            return None
        return sid

    def csrf_token(self, sid: str) -> str:
        """The anti-forgery token of session ``sid`` (a hidden field of each form)."""
        return self._mac("csrf", sid)

    def csrf_ok(self, sid: str, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(given, self.csrf_token(sid))

    def _mac(self, purpose: str, text: str) -> str:
        return hmac.new(self._key, f"{purpose}|{text}".encode(), hashlib.sha256).hexdigest()


def cross_site_problem(headers: Mapping[str, str]) -> str | None:
    """Why a data-changing request may come from another site (module docstring), or
    ``None`` when it comes from this host's own page. ``headers``: the request's (a
    :class:`email.message.Message` as the standard library's server gives them)."""
    host = (headers.get("Host") or "").strip().lower()
    if not host:
        return "the request names no Host"
    fetch_site = headers.get("Sec-Fetch-Site")
    if fetch_site is not None and fetch_site != "same-origin":
        return f"Sec-Fetch-Site is {fetch_site!r}, not same-origin"
    origin = headers.get("Origin")
    which, value = ("Origin", origin) if origin is not None else ("Referer", headers.get("Referer"))
    if value is None:
        return "the request has neither Origin nor Referer"
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or parts.netloc.lower() != host:
        return f"{which} {value!r} is not this page's ({host})"
    return None
