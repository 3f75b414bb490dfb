"""Migration 0008 on a database with flags: every existing scorer checkpoint starts its sink's
cursor at the station's highest flag id, so the upgrade sends no flag to a sink twice."""

from __future__ import annotations

from sqlalchemy import create_engine

from qcllp.store.migrate import upgrade

_NOW = "'2026-01-05 10:00:00'"


def test_existing_checkpoints_take_the_flags_before_the_upgrade_as_delivered(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'plant.sqlite'}")
    upgrade(engine, "0007")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO models (id, station, method, target, params, metrics, features, "
            "artifact_path, sha256, status, n_charges, n_sticks, qcllp_version, created_at) "
            f"VALUES (1, 'cooling', 'm', 't', '{{}}', '{{}}', '[]', 'a', 's', 'active', 1, 1, "
            f"'0', {_NOW})"
        )
        for i, station in enumerate(["cooling", "cooling", "straightening", "cooling"], 1):
            conn.exec_driver_sql(
                "INSERT INTO flags (id, station, charge_id, stick_id, model_id, flagged, "
                f"decision, threshold, scored_at) VALUES ({i}, '{station}', 'C', 'S{i}', 1, 0, "
                f"'pass', 0.5, {_NOW})"
            )
        conn.exec_driver_sql(
            "INSERT INTO scorer_checkpoints (station, commit_seq, sink_path, sink_offset, "
            f"updated_at) VALUES ('cooling', 7, '/gw/flags.jsonl', 300, {_NOW}), "
            f"('straightening', 7, NULL, 0, {_NOW}), ('forming', 0, NULL, 0, {_NOW})"
        )
    upgrade(engine)
    with engine.connect() as conn:
        cursors = dict(
            conn.exec_driver_sql("SELECT station, sink_flag_id FROM scorer_checkpoints").all()
        )
    assert cursors == {"cooling": 4, "straightening": 3, "forming": 0}
    engine.dispose()
