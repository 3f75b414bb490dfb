"""Checks of single plant config values that are more than a type: each returns what is wrong
as one phrase (or ``None``), so the YAML validation (:mod:`.fields`) and other callers (the
CLI's ``--cluster``, the services' start-up warning) say it in the same words."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

_ASCII = "".join(map(chr, range(128)))
# a Dask scheduler: tcp:// (or tls://, with TLS set up in Dask's own config), a host name or
# IPv4 address or [IPv6] address, and a port
_SCHEDULER_RE = re.compile(
    r"^(tcp|tls)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):(\d{1,5})$"
)


def ascii_compatible_problem(name: str) -> str | None:
    """The CSV files' encoding must be a codec Python knows that reads ASCII bytes as ASCII,
    because the CSV reader splits fields on the raw bytes (so UTF-16 is refused, cp1252 is
    fine)."""
    try:
        compatible = bytes(range(128)).decode(name) == _ASCII
    except LookupError:
        return f"unknown encoding {name!r} (e.g. utf-8, latin-1, cp1252)"
    except UnicodeError:
        compatible = False
    if not compatible:
        return (
            f"{name!r} does not read ASCII bytes as ASCII; export the files as utf-8 "
            "(or latin-1, cp1252)"
        )
    return None


def currency_problem(currency: str) -> str | None:
    """A currency is a short code or sign: reports print it beside every amount."""
    if not 1 <= len(currency.strip()) <= 8:
        return f"must be a short code or sign such as EUR, got {currency!r}"
    return None


def url_problem(url: str) -> str | None:
    """What keeps ``url`` from being an SQLAlchemy URL, or ``None``."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(url)
    except (ArgumentError, ValueError) as exc:  # ValueError: e.g. a port that is no number
        return f"not a valid SQLAlchemy URL: {exc}"
    return None


def password_problem(url: str, source: str | None) -> str | None:
    """Where a password in ``url`` belongs instead of the plant config: the plant database's
    variables (``source`` None) or SQL source ``source``'s (:mod:`qcllp.store.credentials`).
    The message names the places, never the password itself."""
    from qcllp.store.credentials import DATABASE, password_places, source_prefix

    places = password_places(url)  # the user part, ?password=, a password= in a value
    if not places:
        return None
    variable = DATABASE if source is None else source_prefix(source)
    return (
        f"holds a password (in {', '.join(places)}), which does not belong in the plant "
        f"config: set {variable}_PASSWORD, or {variable}_PASSWORD_FILE to a file only the "
        "service user can read, or use ~/.pgpass (qcllp.store.credentials)"
    )


def database_url_problems(url: str, source: str | None) -> str | None:
    """A database URL's first problem: no SQLAlchemy URL, or a password in it."""
    return url_problem(url) or password_problem(url, source)


def resolve_sqlite(url: str, base_dir: Path) -> str:
    """``url`` with a relative SQLite file resolved against ``base_dir`` (the config's folder),
    so that a config works from any working directory; any other URL as written."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    db = parsed.database
    if parsed.get_backend_name() == "sqlite" and db and db != ":memory:":
        path = Path(db).expanduser()
        if not db.startswith("file:") and not path.is_absolute():
            resolved = parsed.set(database=str((base_dir / path).resolve()))
            return resolved.render_as_string(hide_password=False)
    return url


def exposed_host_warning(key: str, host: str) -> str | None:
    """A warning when the HTTP endpoint at ``key`` (``scorer.host``, ``retrainer.host``) listens
    beyond this machine: ``/healthz`` and ``/metrics`` have no authentication and are meant for
    the local agent that scrapes them. ``None`` for a loopback address or ``localhost``. Not an
    error: a plant may scrape over a network it trusts, but it should say so knowingly."""
    if host == "localhost" or host.endswith(".localhost"):
        return None
    try:
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return None
    except ValueError:
        pass  # a host name: it resolves beyond the loopback interface as far as we know
    reach = "every interface" if host in ("0.0.0.0", "::", "[::]", "") else host
    return (
        f"{key}: {host} makes /healthz and /metrics reachable from the network ({reach}) "
        "without authentication; use 127.0.0.1 unless a trusted scraper needs it"
    )


def scheduler_address_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as a Dask scheduler address, or ``None`` when it is one:
    ``tcp://HOST:PORT`` (or ``tls://``). Checked here, not by connecting, so that a typo fails
    when the config is loaded rather than at the night's retraining."""
    example = "such as tcp://scheduler.example:8786"
    if not isinstance(value, str):
        shown = "nothing" if value is None else f"{type(value).__name__} {value!r}"
        return f"must be a Dask scheduler address {example}, got {shown}"
    found = _SCHEDULER_RE.match(value.strip())
    if found is None:
        return f"must be a Dask scheduler address {example}, got {value!r}"
    if not 1 <= int(found.group(3)) <= 65535:
        return f"port must be 1..65535, got {value!r}"
    return None
