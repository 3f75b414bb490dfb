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
rules under its own variables, ``QCLLP_SOURCE_<NAME>_PASSWORD`` and ``..._PASSWORD_FILE``.

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

__all__ = [
    "DATABASE",
    "PASSWORD_ENV",
    "PASSWORD_FILE_ENV",
    "CredentialError",
    "source_prefix",
    "with_password",
]

DATABASE = "QCLLP_DATABASE"  # the plant database's variables: QCLLP_DATABASE_PASSWORD(_FILE)
PASSWORD_ENV = f"{DATABASE}_PASSWORD"
PASSWORD_FILE_ENV = f"{DATABASE}_PASSWORD_FILE"


def source_prefix(name: str) -> str:
    """The variables of SQL source ``name`` (``connectors.sql.<name>``): the same rules, under
    ``QCLLP_SOURCE_<NAME>_PASSWORD`` and ``..._PASSWORD_FILE`` (the name upper-cased, other
    characters than letters and digits as ``_``)."""
    return "QCLLP_SOURCE_" + "".join(c if c.isalnum() else "_" for c in name.upper())


class CredentialError(RuntimeError):
    """The password file named in the environment is missing, unreadable or too open."""


def with_password(
    url: URL, environ: Mapping[str, str] | None = None, *, prefix: str = DATABASE
) -> URL:
    """``url`` with the password from the environment (module docstring) where it has none;
    ``prefix``: whose variables (the plant database's, or a source's: :func:`source_prefix`).

    SQLite URLs and URLs that carry a password come back unchanged."""
    environ = os.environ if environ is None else environ
    if url.get_backend_name() == "sqlite" or url.password is not None:
        return url
    variable, file_variable = f"{prefix}_PASSWORD", f"{prefix}_PASSWORD_FILE"
    if environ.get(variable):
        return url.set(password=environ[variable])
    if environ.get(file_variable):
        return url.set(password=_read_private(Path(environ[file_variable]), file_variable))
    return url


def _read_private(path: Path, variable: str) -> str:
    """The first line of a file only its owner can read."""
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
            f"{variable}: cannot read the password from {path}: {exc.strerror or exc}"
        ) from exc
    password = text.splitlines()[0] if text else ""
    if not password:
        raise CredentialError(f"{variable}: {path} is empty")
    return password
