"""A throwaway PostgreSQL server for tests and benchmarks (``initdb`` + ``pg_ctl``).

Finds the server binaries in ``/usr/lib/postgresql/*/bin`` (Debian's ``postgresql`` package,
installed by ``deploy/bootstrap.sh --test``) or on ``PATH``; :func:`find_pg_bin` returns
``None`` when there are none, and the fixtures then skip with that reason. The cluster lives in
a temporary folder and listens on a Unix socket only (no TCP port to collide with), with
durability switched off (``fsync=off``): it is thrown away anyway. PostgreSQL refuses to run as
root, so as root the cluster is created and started as the ``postgres`` system user (its
folder is handed to that user).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["TempPostgres", "find_pg_bin"]


def find_pg_bin() -> Path | None:
    """Folder holding ``initdb`` and ``pg_ctl``, newest version first; ``None`` if absent."""
    for initdb in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True):
        return Path(initdb).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


class TempPostgres:
    """A running throwaway cluster; ``url(db)`` gives a ``postgresql+psycopg://`` URL."""

    def __init__(self, bin_dir: Path, port: int = 54329, options: str = ""):
        self.bin_dir = bin_dir
        self.port = port
        self.root = Path(tempfile.mkdtemp(prefix="qcllp-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.socket_dir.mkdir()
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "postgres"
            try:
                entry = pwd.getpwnam(self.user)
            except KeyError as exc:
                raise RuntimeError("running as root but there is no 'postgres' user") from exc
            os.chmod(self.root, 0o755)
            for path in (self.root, self.socket_dir):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--no-sync",
        )  # fmt: skip
        self.options = (
            f"-c listen_addresses='' -c unix_socket_directories={self.socket_dir} "
            f"-c port={port} -c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            f"{options}"
        ).strip()
        self.start()

    def start(self) -> None:
        """Start the server (again, after :meth:`halt`) and wait until it takes connections."""
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o",
            self.options, "-w", "-t", "60", "start",
        )  # fmt: skip

    def halt(self) -> None:
        """Stop the server as an operator's restart does (``-m fast``: open sessions are
        terminated, their transactions rolled back), keeping its data for :meth:`start`."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin_dir / tool), *args]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=self.root)
        if done.returncode:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{tool} failed: {done.stderr or done.stdout}\n{tail}")

    def postmaster_pid(self) -> int:
        """The running server's postmaster (the first line of ``postmaster.pid``)."""
        return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@/{database}?host={self.socket_dir}&port={self.port}"

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create a database (optionally a copy of ``template``) and return its URL."""
        suffix = f" TEMPLATE {template}" if template else ""
        self.execute("postgres", f'CREATE DATABASE "{name}"{suffix}')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database (its connections closed first: ``WITH (FORCE)``)."""
        self.execute("postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def execute(self, database: str, *statements: str) -> None:
        """Run ``statements`` in ``database`` as the superuser, each committed on its own
        (``CREATE DATABASE`` runs in no transaction)."""
        import psycopg

        with psycopg.connect(
            host=str(self.socket_dir), port=self.port, user="postgres", dbname=database,
            autocommit=True,
        ) as conn:  # fmt: skip
            for statement in statements:
                conn.execute(statement)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
