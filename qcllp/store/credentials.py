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

Why libpq's files are not enough on their own: ``~/.pgpass`` lives in the service user's home,
which systemd units often do not have, and one environment variable per service is what
container platforms hand in; the ``_FILE`` variant keeps the secret out of ``ps`` and
``/proc/<pid>/environ``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from sqlalchemy.engine import URL

__all__ = ["PASSWORD_ENV", "PASSWORD_FILE_ENV", "CredentialError", "with_password"]

PASSWORD_ENV = "QCLLP_DATABASE_PASSWORD"
PASSWORD_FILE_ENV = "QCLLP_DATABASE_PASSWORD_FILE"


class CredentialError(RuntimeError):
    """The password file named in the environment is missing, unreadable or too open."""


def with_password(url: URL, environ: Mapping[str, str] | None = None) -> URL:
    """``url`` with the password from the environment (module docstring) where it has none.

    SQLite URLs and URLs that carry a password come back unchanged."""
    environ = os.environ if environ is None else environ
    if url.get_backend_name() == "sqlite" or url.password is not None:
        return url
    if environ.get(PASSWORD_ENV):
        return url.set(password=environ[PASSWORD_ENV])
    if environ.get(PASSWORD_FILE_ENV):
        return url.set(password=_read_private(Path(environ[PASSWORD_FILE_ENV])))
    return url


def _read_private(path: Path) -> str:
    """The first line of a file only its owner can read."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise CredentialError(
                f"{PASSWORD_FILE_ENV}: {path} can be read by others (mode {mode:04o}); "
                f"make it private: chmod 600 {path}"
            )
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CredentialError(
            f"{PASSWORD_FILE_ENV}: cannot read the database password from {path}: "
            f"{exc.strerror or exc}"
        ) from exc
    password = text.splitlines()[0] if text else ""
    if not password:
        raise CredentialError(f"{PASSWORD_FILE_ENV}: {path} is empty")
    return password
