"""``qcllp retention`` and the readings line of ``qcllp status`` on a PostgreSQL plant."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import yaml
from click.testing import CliRunner

from qcllp.cli import main
from qcllp.ingest.measurements import ingest_measurements
from tests.conftest import TINY_PLANT
from tests.store.test_partitions import MONTHS, month_measurements


def readings(status: str) -> str:
    """The readings line of ``qcllp status``'s plant block (``readings  <what is stored>``)."""
    (line,) = [line for line in status.splitlines() if line.startswith("readings ")]
    return line.removeprefix("readings").strip()


def test_retention_dry_run_then_for_real_and_status_shows_the_months(
    pg_store, pg_test_url, tiny_config, tmp_path
):
    for i, when in enumerate(MONTHS):
        ingest_measurements(pg_store, tiny_config, month_measurements(tmp_path, f"c{i}", when))
    days = (datetime.now(UTC) - datetime(2024, 3, 1, tzinfo=UTC)).days
    path = tmp_path / "plant.yaml"
    raw = {**TINY_PLANT, "database_url": pg_test_url, "retention": {"readings_days": days}}
    path.write_text(yaml.safe_dump(raw))

    def qcllp(*args: str) -> str:
        result = CliRunner().invoke(main, ["--config", str(path), *args])
        assert result.exit_code == 0, (result.output, result.exception)
        return result.output

    status = readings(qcllp("status"))
    assert status == f"3 monthly partitions (2024-01 .. 2024-03); kept {days} days"
    dry = qcllp("retention", "--dry-run")
    assert "would drop 2 month(s): 2024-01, 2024-02; 1 month(s) kept (2024-03 .. 2024-03)" in dry
    assert readings(qcllp("status")).startswith("3 monthly partitions")
    done = json.loads(qcllp("--json", "retention"))
    assert done["dropped"] == ["2024-01", "2024-02"] and done["kept"] == ["2024-03"]
    assert readings(qcllp("status")).startswith("1 monthly partitions (2024-03 .. 2024-03)")
