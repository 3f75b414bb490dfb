"""The systemd units in deploy/ are what systemd accepts: ``systemd-analyze verify`` reports
nothing (an unknown key or one in the wrong section is silently ignored by systemd at run
time: `StartLimitIntervalSec=` in [Service] left the crash-loop window at its 10 s default).
Skips where systemd is not installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
UNITS = sorted(DEPLOY.glob("*.service"))
VERIFY = shutil.which("systemd-analyze")


def verify(unit_text: str, name: str, tmp_path: Path) -> str:
    """What ``systemd-analyze verify`` says of a unit, its ExecStart pointed at this
    environment's ``qcllp`` (the unit's /opt/qcllp does not exist on a test machine)."""
    qcllp = Path(sys.executable).with_name("qcllp")
    path = tmp_path / name
    path.write_text(unit_text.replace("/opt/qcllp/.venv/bin/qcllp", str(qcllp)))
    target = path.with_name(name.replace("@.", "@cooling.")) if "@." in name else path
    done = subprocess.run(
        [VERIFY, "verify", str(target)], capture_output=True, text=True, timeout=60
    )
    return (done.stdout + done.stderr).strip() + ("" if done.returncode == 0 else " (failed)")


@pytest.mark.skipif(VERIFY is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_systemd_accepts_the_unit_without_a_word(unit, tmp_path):
    assert verify(unit.read_text(), unit.name, tmp_path) == ""


@pytest.mark.skipif(VERIFY is None, reason="systemd-analyze not installed")
def test_a_key_in_the_wrong_section_is_reported(tmp_path):
    unit = UNITS[0].read_text().replace("[Service]\n", "[Service]\nStartLimitIntervalSec=600\n")
    assert "Unknown key" in verify(unit, UNITS[0].name, tmp_path)


def test_there_are_units_to_check():
    assert {u.name for u in UNITS} >= {"qcllp-retrainer.service", "qcllp-scorer@.service"}


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_the_units_create_no_world_readable_files(unit):
    """``UMask=0027``: the gateway (group qcllp) reads the flag files, others nothing; without
    it systemd's 0022 made the database, the sink and the artifacts world-readable."""
    lines = [line.strip() for line in unit.read_text().splitlines()]
    assert "UMask=0027" in lines
