"""Files the plant's processes create are nobody else's to read (issue 31, item 14): a new
SQLite database and its -wal/-shm files are owner-only whatever the umask, the processes run
with a umask of at least 0027 (the group -- the line's gateway -- may read a flag file,
others nothing), and a scorer whose HTTP endpoint listens beyond the loopback interface says
so at start. Real processes, real files, the umask of a systemd service without ``UMask=``
(0022)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from qcllp.plant.config import exposed_host_warning
from qcllp.store import Store
from tests.plant.conftest import EXAMPLE
from tests.service.forked import run_qcllp
from tests.service.harness import ServiceProcess, wait_until


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_0022():
    """The umask systemd gives a service that sets no ``UMask=`` (and most shells)."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_sqlite_database_and_its_wal_files_are_owner_only(tmp_path, umask_0022):
    path = tmp_path / "plant.sqlite"
    with Store.open(f"sqlite:///{path}") as store:
        store.execute_sql("SELECT 1")
        files = sorted(tmp_path.glob("plant.sqlite*"))
        assert {f.name for f in files} >= {"plant.sqlite", "plant.sqlite-wal", "plant.sqlite-shm"}
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}


def test_an_existing_database_keeps_the_mode_its_operator_gave_it(tmp_path, umask_0022):
    path = tmp_path / "plant.sqlite"
    Store.open(f"sqlite:///{path}").close()
    path.chmod(0o640)
    Store.open(f"sqlite:///{path}").close()
    assert mode(path) == 0o640


def plant_config(tmp_path: Path, host: str | None) -> Path:
    raw = yaml.safe_load(EXAMPLE.read_text())
    if host is not None:
        raw["scorer"] = {**raw.get("scorer", {}), "host": host}
    path = tmp_path / "plant.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def umask_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise AssertionError("no Umask in /proc/<pid>/status")


@pytest.mark.parametrize("host", ["0.0.0.0", None])
def test_a_scorer_runs_with_umask_0027_and_warns_of_an_exposed_endpoint(tmp_path, umask_0022, host):
    config = plant_config(tmp_path, host)
    db = f"sqlite:///{tmp_path / 'plant.sqlite'}"
    init = run_qcllp(["--config", str(config), "--db", db, "init"], cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    scorer = ServiceProcess(
        ["--config", str(config), "--db", db],
        ["scorer", "--station", "cooling"],
        folder=tmp_path,
        name="scorer",
    )
    try:
        scorer.wait_up()
        assert umask_of(scorer.pid) & 0o027 == 0o027
        wait_until(
            lambda: any(e["event"] == "started" for e in scorer.events()),
            what="the start-up line",
            procs=[scorer],
        )
        assert scorer.terminate() == 0
    finally:
        scorer.stop_if_running()
    warnings = [e for e in scorer.events() if e["event"] == "exposed"]
    if host is None:  # the default, 127.0.0.1
        assert warnings == []
    else:
        assert [w["warning"] for w in warnings] == [exposed_host_warning("scorer.host", host)]
    files = sorted(tmp_path.glob("plant.sqlite*"))
    assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_addresses_are_not_warned_of(host):
    assert exposed_host_warning("scorer.host", host) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "scorer.plant.example"])
def test_other_addresses_are_warned_of_naming_the_key(host):
    assert exposed_host_warning("scorer.host", host).startswith(f"scorer.host: {host} makes")
