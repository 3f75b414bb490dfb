"""The plant database's password: from the environment or a private file, never the YAML.

A plant config is read by engineers, copied into tickets and kept in version control, so the
loader refuses a ``database_url`` that holds a password (:mod:`qcllp.plant.config`). The
password of a server database comes, in this order, from

1. the URL itself when it was given on the command line (``--db``), for a one-off session;
2. ``QCLLP_DATABASE_PASSWORD``;
3. the file named by ``QCLLP_DATABASE_PASSWORD_FILE``, which must be readable by its owner
   only (``chmod 600``; a file others can read is refused, naming its mode). systemd's
   ``LoadCredential=`` provides exactly such a file (``deploy/qcllp-*.service``);
4. otherwise the driver's own: libpq's ``PGPASSWORD`` and ``~/.pgpass`` (psycopg reads them
   when the URL has no password), or no password at all (peer or certificate login).

A SQL source of the connectors (``connectors.sql.<name>.url``, a historian) follows the same
rules under its own variables, ``QCLLP_SOURCE_<NAME>_PASSWORD`` and ``..._PASSWORD_FILE``;
so does the MQTT broker's (``connectors.mqtt``), under ``QCLLP_MQTT_PASSWORD`` and
``QCLLP_MQTT_PASSWORD_FILE`` (:func:`secret_from_env`), the PLC's OPC UA user's
(``connectors.opcua``), under ``QCLLP_OPCUA_PASSWORD`` and ``QCLLP_OPCUA_PASSWORD_FILE``, and
the lock-out bay page's access token, under ``QCLLP_BAY_TOKEN`` and ``QCLLP_BAY_TOKEN_FILE``
(:data:`BAY`, the same function with ``kind="TOKEN"``).

**Printing a URL**: :func:`display_url` is the one way a URL reaches a log line, ``status``
or an error message. libpq takes a password in three places -- the URL's user part
(``user:secret@host``), a query parameter (``?password=secret``, also ``sslpassword``) and a
``key=value`` connection string inside a value (``?dsn=host=h password=secret``, or the
database name) -- and :func:`password_places` names which of them a URL uses (the plant
config refuses every one); :func:`display_url` masks all three as ``***``.

Why libpq's files are not enough on their own: ``~/.pgpass`` lives in the service user's home,
which systemd units often do not have, and one environment variable per service is what
container platforms hand in; the ``_FILE`` variant keeps the secret out of ``ps`` and
``/proc/<pid>/environ``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

__all__ = [
    "BAY",
    "DATABASE",
    "MQTT",
    "OPCUA",
    "PASSWORD_ENV",
    "PASSWORD_FILE_ENV",
    "CredentialError",
    "display_url",
    "mask_secrets",
    "password_places",
    "secret_from_env",
    "source_prefix",
    "with_password",
]

DATABASE = "QCLLP_DATABASE"  # the plant database's variables: QCLLP_DATABASE_PASSWORD(_FILE)
PASSWORD_ENV = f"{DATABASE}_PASSWORD"
PASSWORD_FILE_ENV = f"{DATABASE}_PASSWORD_FILE"


MASK = "***"
# a libpq keyword naming a secret: password, sslpassword (case as a user might type it)
_SECRET_KEY = re.compile(r"password", re.IGNORECASE)
# ``password=secret`` in a key=value connection string (quoted or not), also percent-encoded
_CONNINFO_SECRET = re.compile(
    r"(\w*password\s*(?:=|%3D)\s*)('(?:[^'\\]|\\.)*'|[^\s&;'\"]*)", re.IGNORECASE
)
# ``scheme://user:secret@`` anywhere in a text (a URL inside an error message or a value)
_USERINFO_SECRET = re.compile(r"(://[^:/@\s?#]*):([^@\s/?#]*)@")


def mask_secrets(text: str) -> str:
    """``text`` with every password a URL or a libpq connection string in it carries replaced
    by ``***`` (``user:***@``, ``password=***``): for free text such as an error message."""
    text = _USERINFO_SECRET.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    return _CONNINFO_SECRET.sub(lambda m: f"{m.group(1)}{MASK}", text)


def _values(value: str | tuple[str, ...]) -> tuple[str, ...]:
    return value if isinstance(value, tuple) else (value,)


def password_places(url: str | URL) -> list[str]:
    """Where ``url`` holds a password, in words (``[]``: nowhere); never the password itself.

    Checked: the user part, query parameters named like ``password`` (libpq's ``password``
    and ``sslpassword``), and a ``password=`` inside any query value, the database name or
    the host (libpq reads a connection string in them)."""
    parsed = url if isinstance(url, URL) else make_url(url)
    places = ["the user part (user:password@)"] if parsed.password is not None else []
    for key, value in parsed.query.items():
        if _SECRET_KEY.search(key):
            places.append(f"query parameter {key!r}")
        elif any(_CONNINFO_SECRET.search(v) for v in _values(value)):
            places.append(f"a password= in query parameter {key!r}")
    for what, value in (("the database name", parsed.database), ("the host", parsed.host)):
        if value and (_CONNINFO_SECRET.search(value) or _USERINFO_SECRET.search(value)):
            places.append(f"a password in {what}")
    return places


def display_url(url: str | URL) -> str:
    """``url`` as it may be printed or logged: every password :func:`password_places` finds
    masked as ``***`` (SQLAlchemy's ``hide_password`` covers the user part only). A string
    that is no URL at all is masked as text (:func:`mask_secrets`)."""
    try:
        parsed = url if isinstance(url, URL) else make_url(url)
    except (ArgumentError, ValueError):  # no URL, or a part SQLAlchemy cannot convert (a port)
        return mask_secrets(str(url))
    query = {
        key: MASK if _SECRET_KEY.search(key) else tuple(mask_secrets(v) for v in _values(value))
        for key, value in parsed.query.items()
    }
    masked = parsed.set(
        query={k: v[0] if isinstance(v, tuple) and len(v) == 1 else v for k, v in query.items()},
        database=mask_secrets(parsed.database) if parsed.database else parsed.database,
        host=mask_secrets(parsed.host) if parsed.host else parsed.host,
    )
    shown = masked.render_as_string(hide_password=True).replace("%2A%2A%2A", MASK)
    return mask_secrets(shown)


def source_prefix(name: str) -> str:
    """The variables of SQL source ``name`` (``connectors.sql.<name>``): the same rules, under
    ``QCLLP_SOURCE_<NAME>_PASSWORD`` and ``..._PASSWORD_FILE`` (the name upper-cased, other
    characters than letters and digits as ``_``)."""
    return "QCLLP_SOURCE_" + "".join(c if c.isalnum() else "_" for c in name.upper())


class CredentialError(RuntimeError):
    """The password file named in the environment is missing, unreadable or too open."""


MQTT = "QCLLP_MQTT"  # the broker's variables: QCLLP_MQTT_PASSWORD(_FILE)
BAY = "QCLLP_BAY"  # the lock-out bay page's access token: QCLLP_BAY_TOKEN(_FILE)
OPCUA = "QCLLP_OPCUA"  # the PLC's OPC UA user's variables: QCLLP_OPCUA_PASSWORD(_FILE)


def secret_from_env(
    prefix: str, environ: Mapping[str, str] | None = None, *, kind: str = "PASSWORD"
) -> str | None:
    """The secret under ``prefix``'s variables (``<prefix>_<kind>``, else the private file
    named by ``<prefix>_<kind>_FILE``), or ``None`` when neither is set: for credentials that
    are not part of a URL, such as the MQTT broker's password (:data:`MQTT`) or the bay page's
    token (:data:`BAY` with ``kind="TOKEN"``)."""
    environ = os.environ if environ is None else environ
    variable, file_variable = f"{prefix}_{kind}", f"{prefix}_{kind}_FILE"
    if environ.get(variable):
        return environ[variable]
    if environ.get(file_variable):
        return _read_private(Path(environ[file_variable]), file_variable, kind.lower())
    return None


def with_password(
    url: URL, environ: Mapping[str, str] | None = None, *, prefix: str = DATABASE
) -> URL:
    """``url`` with the password from the environment (module docstring) where it has none;
    ``prefix``: whose variables (the plant database's, or a source's: :func:`source_prefix`).

    SQLite URLs and URLs that carry a password come back unchanged."""
    environ = os.environ if environ is None else environ
    if url.get_backend_name() == "sqlite" or url.password is not None:
        return url
    password = secret_from_env(prefix, environ)
    return url if password is None else url.set(password=password)


def _read_private(path: Path, variable: str, what: str = "password") -> str:
    """The first line of a file only its owner can read (``what`` it holds names it in the
    errors)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise CredentialError(
                f"{variable}: {path} can be read by others (mode {mode:04o}); "
                f"make it private: chmod 600 {path}"
            )
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CredentialError(
            f"{variable}: cannot read the {what} from {path}: {exc.strerror or exc}"
        ) from exc
    password = text.splitlines()[0] if text else ""
    if not password:
        raise CredentialError(f"{variable}: {path} is empty")
    return password
