"""The plant database's password comes from the environment or a private file, never the YAML,
and a server cancels statements that run past the timeout
(:mod:`qcllp.store.credentials`); real files with real modes, real URLs."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from qcllp.store import Store, StoreError
from qcllp.store.credentials import (
    BAY,
    PASSWORD_ENV,
    PASSWORD_FILE_ENV,
    CredentialError,
    secret_from_env,
    source_prefix,
    with_password,
)

SERVER = make_url("postgresql+psycopg://qcllp@db.example:5432/mill")


def private_file(tmp_path, text: str, mode: int = 0o600):
    path = tmp_path / "db-password"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_the_password_variable_completes_a_server_url():
    assert with_password(SERVER, {PASSWORD_ENV: "s3cret"}).password == "s3cret"


def test_a_private_password_file_completes_a_server_url(tmp_path):
    path = private_file(tmp_path, "s3cret\n")  # the trailing newline of `echo ... >` is no part
    assert with_password(SERVER, {PASSWORD_FILE_ENV: str(path)}).password == "s3cret"


def test_the_variable_wins_over_the_file_and_a_url_password_over_both(tmp_path):
    path = private_file(tmp_path, "from-file")
    both = {PASSWORD_ENV: "from-env", PASSWORD_FILE_ENV: str(path)}
    assert with_password(SERVER, both).password == "from-env"
    given = make_url("postgresql+psycopg://qcllp:from-db-flag@db.example/mill")
    assert with_password(given, both).password == "from-db-flag"


def test_a_sql_source_has_variables_of_its_own(tmp_path):
    """A historian source ``connectors.sql.mes-line2``: QCLLP_SOURCE_MES_LINE2_PASSWORD(_FILE),
    not the plant database's variables (and a too-open file names the source's variable)."""
    prefix = source_prefix("mes-line2")
    assert prefix == "QCLLP_SOURCE_MES_LINE2"
    env = {PASSWORD_ENV: "plant-db", f"{prefix}_PASSWORD": "historian"}
    assert with_password(SERVER, env, prefix=prefix).password == "historian"
    assert with_password(SERVER, {PASSWORD_ENV: "plant-db"}, prefix=prefix).password is None
    path = private_file(tmp_path, "historian", mode=0o604)
    with pytest.raises(CredentialError, match=f"^{prefix}_PASSWORD_FILE: {path} can be read"):
        with_password(SERVER, {f"{prefix}_PASSWORD_FILE": str(path)}, prefix=prefix)


def test_without_either_the_driver_decides_pgpass_or_peer_login():
    assert with_password(SERVER, {}).password is None


def test_sqlite_urls_take_no_password(tmp_path):
    url = make_url(f"sqlite:///{tmp_path / 'plant.sqlite'}")
    assert with_password(url, {PASSWORD_ENV: "s3cret"}) == url


def test_a_password_file_others_can_read_is_refused_naming_its_mode(tmp_path):
    path = private_file(tmp_path, "s3cret", mode=0o644)
    with pytest.raises(CredentialError, match=rf"{path} can be read by others \(mode 0644\)"):
        with_password(SERVER, {PASSWORD_FILE_ENV: str(path)})


def test_a_missing_or_empty_password_file_names_the_file(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(CredentialError, match=f"cannot read the password from {missing}"):
        with_password(SERVER, {PASSWORD_FILE_ENV: str(missing)})
    empty = private_file(tmp_path, "")
    with pytest.raises(CredentialError, match=f"{empty} is empty"):
        with_password(SERVER, {PASSWORD_FILE_ENV: str(empty)})


def test_opening_a_server_database_with_a_bad_password_file_is_one_store_error(
    tmp_path, monkeypatch
):
    path = private_file(tmp_path, "s3cret", mode=0o640)
    monkeypatch.setenv(PASSWORD_FILE_ENV, str(path))
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    with pytest.raises(StoreError, match="can be read by others"):
        Store.open(str(SERVER))


def test_a_server_that_asks_for_a_password_gets_it_from_the_private_file(
    pg_server, tmp_path, monkeypatch
):
    """A real PostgreSQL role that must log in by password (scram-sha-256 in pg_hba.conf):
    without the file the open fails naming the server, with it the plant database opens."""
    import psycopg

    admin = {"host": str(pg_server.socket_dir), "port": pg_server.port, "user": "postgres"}
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
        conn.execute("SET password_encryption = 'scram-sha-256'")
        conn.execute("DROP DATABASE IF EXISTS qcllp_pw")
        conn.execute("DROP ROLE IF EXISTS qcllp_pw")
        conn.execute("CREATE ROLE qcllp_pw LOGIN PASSWORD 'line-7-s3cret'")
        conn.execute("CREATE DATABASE qcllp_pw OWNER qcllp_pw")
        hba = pg_server.data / "pg_hba.conf"
        rule = "local qcllp_pw qcllp_pw scram-sha-256\n"
        if rule not in hba.read_text():
            hba.write_text(rule + hba.read_text())  # first match wins: only this role asks
        conn.execute("SELECT pg_reload_conf()")
    url = (
        f"postgresql+psycopg://qcllp_pw@/qcllp_pw?host={pg_server.socket_dir}&port={pg_server.port}"
    )
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    monkeypatch.delenv(PASSWORD_FILE_ENV, raising=False)
    with pytest.raises(StoreError, match="cannot open the plant database"):
        Store.open(url)
    monkeypatch.setenv(PASSWORD_FILE_ENV, str(private_file(tmp_path, "line-7-s3cret\n")))
    with Store.open(url) as store:
        assert store.engine.dialect.name == "postgresql"


def test_a_statement_running_past_the_timeout_is_cancelled_by_the_server(pg_test_url):
    """``statement_timeout_s`` reaches the server at login: a statement stuck longer (a lock
    wait, a runaway query) fails instead of hanging the service's step; without it, it runs."""
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    with Store.open(pg_test_url, statement_timeout_s=0.2) as store, store.engine.connect() as c:
        assert c.execute(text("SHOW statement_timeout")).scalar() == "200ms"
        with pytest.raises(OperationalError, match="statement timeout"):
            c.execute(text("SELECT pg_sleep(1)"))
    with Store.open(pg_test_url) as store, store.engine.connect() as c:
        assert c.execute(text("SELECT 1 FROM pg_sleep(0.3)")).scalar() == 1


def test_migrations_run_without_the_services_statement_timeout(pg_server):
    """A migration may take longer than a service's statement may: on a fresh database with a
    1 ms statement timeout the whole schema is still created."""
    from sqlalchemy import create_engine, event

    from qcllp.store import migrate

    url = pg_server.create_database("qcllp_migrate_timeout")
    engine = create_engine(url)
    engine.connect().close()  # the dialect's own first queries run without the timeout
    engine.dispose()

    @event.listens_for(engine, "connect")
    def _one_millisecond(dbapi_connection, _record):  # noqa: ANN001
        dbapi_connection.execute("SET statement_timeout = 1")
        dbapi_connection.commit()

    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    # read back without the 1 ms limit: on a loaded machine even that one SELECT can take
    # longer (seen once in a full run), and it is not what this test is about
    check = create_engine(url)
    try:
        assert migrate.current_revision(check) == migrate.head_revision()
    finally:
        check.dispose()


def test_a_token_has_variables_of_its_own_under_the_same_rules(tmp_path):
    """The bay page's token (``kind="TOKEN"``): QCLLP_BAY_TOKEN, else the private file of
    QCLLP_BAY_TOKEN_FILE; a password variable of the same prefix is not a token, and a
    too-open file is refused naming the token's variable."""
    assert secret_from_env(BAY, {"QCLLP_BAY_TOKEN": "t0ken"}, kind="TOKEN") == "t0ken"
    assert secret_from_env(BAY, {"QCLLP_BAY_PASSWORD": "pw"}, kind="TOKEN") is None
    path = private_file(tmp_path, "from-file\n")
    assert secret_from_env(BAY, {"QCLLP_BAY_TOKEN_FILE": str(path)}, kind="TOKEN") == "from-file"
    path.chmod(0o640)
    with pytest.raises(CredentialError, match="^QCLLP_BAY_TOKEN_FILE: .* can be read by others"):
        secret_from_env(BAY, {"QCLLP_BAY_TOKEN_FILE": str(path)}, kind="TOKEN")
    missing = tmp_path / "nowhere"
    with pytest.raises(CredentialError, match=f"cannot read the token from {missing}"):
        secret_from_env(BAY, {"QCLLP_BAY_TOKEN_FILE": str(missing)}, kind="TOKEN")
