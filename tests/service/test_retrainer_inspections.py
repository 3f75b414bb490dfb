"""Inspections dropped into the daemon's watched folder (``connectors.inspections`` with an
archive): ``qcllp serve retrainer`` as a real process on both engines ingests them on its
schedule, after the readings they are checked against, quarantines a bad row with its reason,
moves the file to the archive, and stores nothing twice when the same file is dropped again."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from qcllp.store import Store
from qcllp.store.events import events
from tests.conftest import TINY_PLANT
from tests.ingest.helpers import HEADER
from tests.service.harness import ServiceProcess, wait_until

INSPECTIONS = (
    "charge_id,stick_id,station,result,inspected_at\n"
    "c1,s1,furnace,crack,2025-01-06T07:00:00Z\n"
    "c1,s2,furnace,ok,\n"
    "c1,s2,rolling,ok,\n"  # s2 was not measured at rolling
)


def _drop(folder: Path, name: str, text: str) -> None:
    """Write as a careful exporter does: under a temporary name, then renamed."""
    partial = folder / f"{name}.part"
    partial.write_text(text)
    partial.rename(folder / name)


def _plant(folder: Path, url: str) -> Path:
    raw = dict(TINY_PLANT)
    raw["connectors"] = {
        "measurements": {"path": "drop/measurements", "format": "csv"},
        "inspections": {"path": "drop/inspections", "archive": "done/inspections"},
    }
    raw["schedules"] = {"ingest_interval_s": 0.3, "retrain_interval_s": 3600.0}
    for sub in ("measurements", "inspections"):
        (folder / "drop" / sub).mkdir(parents=True)
    Store.open(url).close()
    path = folder / "plant.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _count(url: str, sql: str) -> list[tuple]:
    with Store.open(url) as store:
        return store.execute_sql(sql)


def test_the_daemon_ingests_dropped_inspections_once_and_archives_them(tmp_path, store_url):
    folder = tmp_path / "plant"
    folder.mkdir()
    url = f"sqlite:///{folder / 'plant.sqlite'}" if store_url.startswith("sqlite") else store_url
    config = _plant(folder, url)
    daemon = ServiceProcess(
        ["--config", str(config), "--db", url], ["retrainer"], folder=folder, name="retrainer"
    )
    try:
        daemon.wait_up()
        readings = "".join(
            f"c1,s{i},furnace,2025-01-06T06:0{i}:00Z,temperature,1100\n" for i in (1, 2)
        )
        _drop(folder / "drop" / "measurements", "r.csv", HEADER + readings)
        wait_until(
            lambda: _count(url, "SELECT count(*) FROM readings") == [(2,)],
            what="the readings stored",
            procs=[daemon],
        )
        _drop(folder / "drop" / "inspections", "i.csv", INSPECTIONS)
        archived = folder / "done" / "inspections" / "i.csv"
        wait_until(archived.exists, what="the inspection file archived", procs=[daemon])
        stored = "SELECT stick_id, station, result, audit FROM inspections ORDER BY stick_id"
        assert [(s, st, r, bool(a)) for s, st, r, a in _count(url, stored)] == [
            ("s1", "furnace", "crack", True),
            ("s2", "furnace", "ok", True),
        ]
        [(reason, detail)] = _count(url, "SELECT reason, detail FROM quarantine")
        assert reason == "stick_not_at_station" and "it has at: furnace" in detail
        assert list((folder / "drop" / "inspections").iterdir()) == []
        with Store.open(url) as store:
            jobs = [e["detail"] for e in events(store, ["job"], limit=100)]
        assert {"job": "ingest", "inspections": 2, "audit_samples": 2}.items() <= jobs[0].items()

        shutil.copy(archived, folder / "drop" / "inspections" / "again.csv.part")
        (folder / "drop" / "inspections" / "again.csv.part").rename(
            folder / "drop" / "inspections" / "again.csv"
        )
        again = folder / "done" / "inspections" / "again.csv"
        wait_until(again.exists, what="the same file archived again", procs=[daemon])
        assert len(_count(url, stored)) == 2
        batches = "SELECT kind, status FROM ingestion_batches WHERE kind = 'inspections'"
        assert _count(url, batches) == [("inspections", "done")]
        assert daemon.health()[0] == 200
    finally:
        daemon.stop_if_running()
