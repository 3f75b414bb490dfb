"""Connectors from the plant config: drop folders and a named SQL source, in one call."""

import sqlite3

from qcllp.ingest import ingest_from_config
from qcllp.plant.config import parse_plant_config
from tests.conftest import TINY_PLANT
from tests.ingest.helpers import write_csv


def test_configured_connectors_ingest_folders_and_sql_source(store, tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "d").mkdir()
    write_csv(tmp_path / "m", "a.csv", "c1,s1,furnace,2025-01-06T06:00:00Z,temperature,1100\n")
    write_csv(tmp_path / "d", "d.csv", "c1,20,1,0\n", header="charge_id,n_sticks,crack,bend\n")
    mes = sqlite3.connect(tmp_path / "mes.sqlite")
    mes.execute("CREATE TABLE r (charge_id, stick_id, station, timestamp, sensor, value, id)")
    mes.execute("INSERT INTO r VALUES ('c1','s2','rolling','2025-01-06T06:10:00Z','force',9e3,1)")
    mes.commit()
    mes.close()
    plant = dict(TINY_PLANT)
    plant["connectors"] = {
        "measurements": {"path": "m", "format": "csv", "layout": "long"},
        "defects": {"path": "d"},
        "sql": {"mes": {"url": "sqlite:///mes.sqlite", "table": "r", "watermark": "id"}},
    }
    config = parse_plant_config(plant, source="<test>", base_dir=tmp_path)
    reports = ingest_from_config(store, config)
    assert {k: r.stored for k, r in reports.items()} == {
        "measurements": 1,
        "defects": 1,
        "sql:mes": 1,
    }
    assert len(store.read_readings()) == 2
    assert store.read_defect_counts(config.defect_types).loc["c1"].tolist() == [20, 1, 0]


def test_an_archive_folder_takes_every_done_file_and_leaves_a_bad_one(store, tmp_path):
    from qcllp.ingest.batches import FileMemo

    (tmp_path / "m").mkdir()
    row = "c1,s{},furnace,2025-01-06T06:00:00Z,temperature,1100\n"
    write_csv(tmp_path / "m", "a.csv", row.format(1))
    write_csv(tmp_path / "m", "b.csv", row.format(2))
    (tmp_path / "m" / "bad.csv").write_bytes(b"\x00\x01\x02 not a csv\n")
    plant = dict(TINY_PLANT)
    plant["connectors"] = {
        "measurements": {"path": "m", "format": "csv", "layout": "long", "archive": "done/m"}
    }
    config = parse_plant_config(plant, source="<test>", base_dir=tmp_path)
    memo = FileMemo()
    report = ingest_from_config(store, config, memo=memo)["measurements"]
    assert report.stored == 2 and list(report.files_failed) == [str(tmp_path / "m" / "bad.csv")]
    assert sorted(p.name for p in (tmp_path / "done" / "m").iterdir()) == ["a.csv", "b.csv"]
    assert [p.name for p in (tmp_path / "m").iterdir()] == ["bad.csv"]  # for a person to see
    # the same content dropped again: already stored, so archived under a new name
    write_csv(tmp_path / "m", "a.csv", row.format(1))
    again = ingest_from_config(store, config, memo=memo)["measurements"]
    assert again.stored == 0 and again.files_skipped == [str(tmp_path / "m" / "a.csv")]
    assert sorted(p.name for p in (tmp_path / "done" / "m").iterdir()) == [
        "a.1.csv",
        "a.csv",
        "b.csv",
    ]
    assert again.files_failed == {}  # the bad file is reported once, not at every poll


def test_an_archive_that_is_the_watched_folder_is_refused(tmp_path):
    import pytest

    from qcllp.plant.config import ConfigError

    plant = dict(TINY_PLANT)
    plant["connectors"] = {"defects": {"path": "d", "archive": "d"}}
    with pytest.raises(ConfigError, match="connectors.defects.archive: must be another folder"):
        parse_plant_config(plant, source="<test>", base_dir=tmp_path)
