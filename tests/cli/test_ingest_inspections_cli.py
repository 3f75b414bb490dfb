"""``qcllp ingest inspections`` as a real process: what it stored, duplicated, quarantined and
how many were audit samples, in text and ``--json``; a file without a required column is one
line naming the file and column, exit 1, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import TINY_PLANT
from tests.ingest.helpers import write_csv

QCLLP = Path(sys.executable).parent / "qcllp"


def qcllp(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The installed ``qcllp`` on the tiny plant and an SQLite file in ``tmp_path``."""
    config = tmp_path / "plant.yaml"
    if not config.exists():
        config.write_text(yaml.safe_dump(dict(TINY_PLANT)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("QCLLP_")}
    base = [str(QCLLP), "--config", str(config), "--db", f"sqlite:///{tmp_path / 'plant.sqlite'}"]
    return subprocess.run(
        [*base, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_ingest_inspections_reports_and_fails_one_line_on_a_missing_column(tmp_path):
    readings = write_csv(tmp_path, "r.csv", "c1,s1,furnace,2025-01-06T06:00:00Z,temperature,1100\n")
    assert qcllp(tmp_path, "ingest", "measurements", str(readings)).returncode == 0
    good = write_csv(
        tmp_path,
        "i.csv",
        "c1,s1,furnace,crack\nc1,s1,furnace,crack\nc1,s2,furnace,ok\n",
        header="charge_id,stick_id,station,result\n",
    )
    done = qcllp(tmp_path, "ingest", "inspections", str(good))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "inspections: 3 records, 1 stored, 1 duplicates, 1 quarantined (unknown_stick: 1); "
        "1 of the stored are audit samples (not locked out)"
    )
    again = qcllp(tmp_path, "--json", "ingest", "inspections", str(good))
    report = json.loads(again.stdout)
    assert (report["stored"], report["files_skipped"], report["audit_samples"]) == (
        0,
        [str(good)],
        0,
    )

    bad = write_csv(tmp_path, "bad.csv", "c1,s1,furnace\n", header="charge_id,stick_id,station\n")
    failed = qcllp(tmp_path, "ingest", "inspections", str(bad))
    lines = failed.stderr.strip().splitlines()
    assert failed.returncode == 1 and lines == [
        f"error: {bad}: missing column(s) result; expected charge_id, stick_id, station, "
        "result and optionally inspected_at"
    ], failed.stderr
