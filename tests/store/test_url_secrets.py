"""A password in a database URL, in every form libpq accepts, is refused in the plant YAML
(one line naming the key, never the secret) and masked wherever a URL is printed or logged:
``status --json``, the services' start-up log lines, the store's errors
(:func:`qcllp.store.credentials.display_url`). Real files, real processes, a real PostgreSQL
server (trust login: it ignores the password, so the URL opens and gets printed)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from qcllp.cli import main
from qcllp.plant.config import ConfigError, load_plant_config
from qcllp.store.credentials import display_url, password_places
from tests.plant.conftest import EXAMPLE
from tests.service.forked import run_qcllp
from tests.service.harness import ServiceProcess, wait_until

SECRET = "Hunter2xyzzy"
HOST = "db.example:5432"

# every place libpq reads a password from, as a URL of the plant config may carry it
FORMS = {
    "userinfo": f"postgresql+psycopg://qcllp:{SECRET}@{HOST}/mill",
    "query": f"postgresql+psycopg://qcllp@{HOST}/mill?password={SECRET}",
    "conninfo-style query": f"postgresql+psycopg:///mill?host=db&user=qcllp&password={SECRET}",
    "sslpassword": f"postgresql+psycopg://qcllp@{HOST}/mill?sslpassword={SECRET}",
    "upper-case key": f"postgresql+psycopg://qcllp@{HOST}/mill?PASSWORD={SECRET}",
    "conninfo in a value": f"postgresql+psycopg://qcllp@{HOST}/mill?dsn=host%3Ddb%20"
    f"password%3D{SECRET}",
    "quoted conninfo value": f"postgresql+psycopg://qcllp@{HOST}/mill?options=password%3D%27"
    f"{SECRET}%20x%27",
    "conninfo as database name": f"postgresql+psycopg://qcllp@{HOST}/host=db password={SECRET}",
}


@pytest.mark.parametrize("form", FORMS)
def test_every_form_is_found_and_masked(form):
    url = FORMS[form]
    assert password_places(url), f"{form}: not found"
    shown = display_url(url)
    assert SECRET not in shown and "***" in shown, shown


def test_a_url_without_a_password_is_shown_as_it_is():
    url = "postgresql+psycopg://qcllp@db.example:5432/mill?sslmode=require"
    assert password_places(url) == []
    assert display_url(url) == url


def test_text_that_is_no_url_is_masked_too():
    assert SECRET not in display_url(f"garbage password={SECRET} x://u:{SECRET}@h")


def qcllp(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_qcllp(list(args), cwd=cwd, env={**os.environ, **(env or {})})


def config_with(tmp_path: Path, **changes) -> Path:
    raw = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    for key, value in changes.items():
        raw[key] = value
    path = tmp_path / "plant.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("form", FORMS)
def test_the_plant_yaml_refuses_every_form_naming_the_key_not_the_secret(tmp_path, form):
    path = config_with(tmp_path, database_url=FORMS[form])
    with pytest.raises(ConfigError) as caught:
        load_plant_config(path)
    (line,) = caught.value.errors
    assert "database_url: holds a password" in line and SECRET not in line


@pytest.mark.parametrize("form", ["query", "conninfo-style query", "conninfo in a value"])
def test_a_sql_sources_url_refuses_them_too(tmp_path, form):
    source = {"url": FORMS[form], "table": "readings", "watermark": "ts"}
    path = config_with(tmp_path, connectors={"sql": {"mes": source}})
    with pytest.raises(ConfigError) as caught:
        load_plant_config(path)
    (line,) = caught.value.errors
    assert "connectors.sql.mes.url: holds a password" in line and SECRET not in line


def test_the_cli_says_it_in_one_line_and_exits_1(tmp_path):
    path = config_with(tmp_path, database_url=FORMS["query"])
    done = qcllp("--config", str(path), "status", cwd=tmp_path)
    assert done.returncode == 1, done
    assert SECRET not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "database_url: holds a password" in lines[0], done.stderr


def secret_urls(pg_url: str) -> dict[str, str]:
    """The session server's URL with a password in each form it can still open with (the
    server logs in by trust and ignores it)."""
    base, _, query = pg_url.partition("?")
    return {
        "userinfo": base.replace("postgres@", f"postgres:{SECRET}@") + "?" + query,
        "query": f"{pg_url}&password={SECRET}",
        "sslpassword": f"{pg_url}&sslpassword={SECRET}",
    }


@pytest.mark.parametrize("form", ["userinfo", "query", "sslpassword"])
def test_status_json_prints_the_database_without_its_password(tmp_path, pg_store, form):
    url = secret_urls(pg_store.url.render_as_string(hide_password=False))[form]
    done = CliRunner().invoke(main, ["--config", str(EXAMPLE), "--db", url, "status", "--json"])
    assert done.exit_code == 0, done.output
    assert SECRET not in done.output
    assert "***" in json.loads(done.stdout)["database"]


def test_an_unreachable_server_is_named_without_the_password(tmp_path):
    url = f"postgresql+psycopg://qcllp@127.0.0.1:1/mill?password={SECRET}&connect_timeout=2"
    done = qcllp("--config", str(EXAMPLE), "--db", url, "status", cwd=tmp_path)
    assert done.returncode == 1
    assert "cannot open the plant database" in done.stderr and "***" in done.stderr
    assert SECRET not in done.stdout + done.stderr


@pytest.mark.parametrize("service", ["scorer", "retrainer"])
def test_the_services_start_up_lines_mask_the_password(tmp_path, pg_store, service):
    url = secret_urls(pg_store.url.render_as_string(hide_password=False))["query"]
    args = ["scorer", "--station", "cooling"] if service == "scorer" else ["retrainer"]
    proc = ServiceProcess(
        ["--config", str(EXAMPLE), "--db", url], args, folder=tmp_path, name=service
    )
    try:
        wait_until(
            lambda: any(e.get("event") == "started" for e in proc.events()),
            what="the start-up line",
            procs=[proc],
        )
        proc.wait_up()
        assert proc.terminate() == 0
    finally:
        proc.stop_if_running()
    started = next(e for e in proc.events() if e["event"] == "started")
    assert "***" in started["database"]
    assert SECRET not in proc.log_path.read_text()
