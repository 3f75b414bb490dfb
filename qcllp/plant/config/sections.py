"""The sections of the plant YAML about the line and its data: stations with their sensors
and completion rule, the connectors (files and SQL sources) and the schedules. Part of the
schema of :mod:`.document`, which holds the plant and the services' sections."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from qcllp.plant.config.checks import password_problem, url_problem
from qcllp.plant.config.fields import (
    Columns,
    Cron,
    Integer,
    LocalPath,
    Name,
    Number,
    SqlUrl,
    Text,
    choice,
    is_number,
)
from qcllp.plant.config.message_bus import Mqtt
from qcllp.plant.config.plc import Opcua
from qcllp.plant.config.problems import Problem, Section, default_of, duplicates

MAX_FUTURE_TOLERANCE_S = 31 * 86_400  # no reading more than a month ahead: no far-future partition


class Sensor(Section):
    """One sensor of a station: readings outside ``[min, max]`` are quarantined."""

    cross_keys: ClassVar[bool] = True
    name: Name = Field(description="The sensor's name: an identifier, unique within the station.")
    unit: Text = Field(description="Unit of the readings, e.g. degC, kN (shown in reports).")
    min: Number = Field(
        description="The lowest valid reading (inclusive); readings outside [min, max] are "
        "quarantined."
    )
    max: Number = Field(description="The highest valid reading (inclusive), above min.")

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        lo, hi = raw.get("min"), raw.get("max")
        if is_number(lo) and is_number(hi) and lo >= hi:
            return [Problem(("min",), f"min ({lo:g}) must be < max ({hi:g})")]
        return []


class Completion(Section):
    """When a stick has completed a station, so that its scorer may decide."""

    cross_keys: ClassVar[bool] = True
    settle_s: Number = Field(
        2.0,
        ge=0,
        description="A stick whose every sensor reported has completed the station after this many "
        "quiet seconds.",
    )
    timeout_s: Number = Field(
        300.0,
        gt=0,
        description="A stick still missing a sensor this long after its first reading here is "
        "complete too, and unscorable (the sensor is named).",
    )

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        settle = raw.get("settle_s", default_of(cls, "settle_s"))
        timeout = raw.get("timeout_s", default_of(cls, "timeout_s"))
        if is_number(settle) and is_number(timeout) and timeout < settle:
            return [Problem(("timeout_s",), f"must be >= settle_s ({settle:g}), got {timeout}")]
        return []


class Station(Section):
    """A station of the line (in line order), its sensors and lock-out costs."""

    cross_keys: ClassVar[bool] = True
    name: Name = Field(description="The station's name: an identifier, unique in the plant.")
    fail_cost: Number = Field(
        ge=0, description="Saved per failing stick locked out here (the rest of the line)."
    )
    good_cost: Number = Field(ge=0, description="Lost per good stick locked out here.")
    inspection_cost: Number = Field(
        None,
        ge=0,
        description="Cost of looking at one stick here (a lock-out at the bay or an audit "
        "sample). Every lock-out pays it, so a lock-out breaks even at a failure probability "
        "of (good_cost + inspection_cost) / (good_cost + fail_cost); set 0 where locked-out "
        "sticks are scrapped unseen. Default: 5 % of good_cost.",
    )
    audit_share: Number = Field(
        1.0,
        ge=0,
        le=1,
        description="Share of the sticks eligible for an audit that the scorer marks inspect "
        "instead of pass: the active model's passes between break-even (or the top 2 % of "
        "its training ranking, when its probabilities stay below break-even; never below "
        "inspection_cost / fail_cost, where a look costs more than it saves) and its "
        "threshold. Drawn per stick by a hash, so a repeated step draws the same. Default 1, "
        "the whole band: on the running line that was 0.7-3 % of a station's sticks, and it "
        "saved about twice what a quarter of the band did. Lower it where the lock-out bay "
        "cannot take them all.",
    )
    trial_audit_share: Number = Field(
        1.0,
        ge=0,
        le=1,
        description="Share of a shadow model's would-be lock-outs that the scorer marks "
        "inspect (the active model's passes the shadow would lock out; with a shadow model "
        "alone, all its would-be lock-outs): its trial's evidence. A look pays from "
        "inspection_cost / fail_cost, far below break-even, and a trial needs "
        "20 of them inspected (retrainer.shadow_min_audits): at 0.25 a trial took weeks and "
        "often ended undecided. Lower it where the lock-out bay cannot take them all.",
    )
    scoring_interval_s: Number = Field(
        None,
        gt=0,
        description="Poll interval of this station's scorer; default: "
        "schedules.scoring_interval_s.",
    )
    completion: Completion = Field(
        Completion(),
        description="When a stick has completed the station, so that its scorer may decide.",
    )
    sensors: list[Sensor] = Field(
        min_length=1, description="The station's sensors: {name, unit, min, max}."
    )

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        return duplicates(raw.get("sensors"), "sensor name", ("sensors",))


class FileSource(Section):
    """A drop folder (or file) of input files: final-QC defect counts or inspections."""

    cross_keys: ClassVar[bool] = True
    path: LocalPath = Field(
        description="A file or drop folder (relative: to the config file's folder)."
    )
    format: choice("csv", "parquet") = Field(
        None, description="csv or parquet; default: from each file's name."
    )
    pattern: Text = Field(
        None, description='File name pattern in the folder, e.g. "*.csv"; default: all files.'
    )
    archive: LocalPath = Field(
        None,
        description="A folder the stored files are moved to, so the drop folder holds only new "
        "work; "
        "default: they stay.",
    )

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        path, archive = raw.get("path"), raw.get("archive")
        if not (isinstance(path, str) and isinstance(archive, str)):
            return []
        folder = Path(context.get("base_dir") or Path.cwd())
        if (folder / Path(path).expanduser()).resolve() == (
            folder / Path(archive).expanduser()
        ).resolve():
            return [Problem(("archive",), "must be another folder than path")]
        return []


class MeasurementFiles(FileSource):
    """A drop folder (or file) of measurement files."""

    layout: choice("long", "wide") = Field(
        "long", description="long (one reading per row) or wide (one column per station.sensor)."
    )
    chunk_rows: Integer = Field(
        None, ge=1, description="Rows read per chunk (bounds memory); default: the reader's."
    )


class SqlSource(Section):
    """A SQL source (historian, MES) read incrementally by its watermark column."""

    cross_keys: ClassVar[bool] = True
    url: SqlUrl = Field(
        description="SQLAlchemy URL, without a password (QCLLP_SOURCE_<NAME>_"
        "PASSWORD or ~/.pgpass)."
    )
    table: Text = Field(None, description="The table to read (give table or query).")
    query: Text = Field(None, description="The SELECT to read (give table or query).")
    watermark: Text = Field(
        description="A column that grows with new data (timestamp or id): where the last read "
        "stopped."
    )
    kind: choice("measurements", "defects", "inspections") = Field(
        "measurements",
        description="What the source holds: readings (long layout), defect counts per charge, "
        "or inspections (charge_id, stick_id, station, result, optional inspected_at).",
    )
    columns: Columns = Field(
        {},
        description="{<long-format, count or inspection column>: <source column>} for the names "
        "that differ.",
    )
    chunk_rows: Integer = Field(
        None, ge=1, description="Rows read per chunk (bounds memory); default: the reader's."
    )

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        if ("table" in raw) == ("query" in raw):
            return [Problem(("table",), "give exactly one of 'table' or 'query'")]
        return []


class Connectors(Section):
    """Where the plant's data comes from (all optional)."""

    cross_keys: ClassVar[bool] = True
    measurements: MeasurementFiles | None = Field(
        None, description="A file or drop folder of measurement files."
    )
    defects: FileSource | None = Field(None, description="Final QC's defect-count files.")
    inspections: FileSource | None = Field(
        None,
        description="Inspection files: charge_id, stick_id, station, result (ok or a defect "
        "type), optional inspected_at; one per stick looked at (lock-out bay, audit sample).",
    )
    sql: dict[str, SqlSource] | None = Field(
        None, description="SQL sources (a historian, the MES) read incrementally, by name."
    )
    mqtt: Mqtt | None = Field(
        None,
        description="The line's MQTT broker: readings in real time (qcllp serve intake) and "
        "the scorers' flags out.",
    )
    opcua: Opcua | None = Field(
        None, description="The line's PLC over OPC UA: the scorers' flags out (qcllp[opcua])."
    )
    future_tolerance_s: Number = Field(
        86_400.0,
        ge=0,
        le=MAX_FUTURE_TOLERANCE_S,
        description="A reading stamped later than its ingestion plus this is quarantined "
        "(clock skew; at most 31 days).",
    )

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        sources = raw.get("sql")
        if not isinstance(sources, Mapping):
            return []
        found = []
        for name, source in sources.items():
            url = source.get("url") if isinstance(source, Mapping) else None
            if isinstance(url, str) and (said := _url_password(url, str(name))):
                found.append(Problem(("sql", str(name), "url"), said))
        return found


def _url_password(url: str, source: str) -> str | None:
    """Where a password in a parsable ``url`` of SQL source ``source`` belongs instead."""
    return None if url_problem(url) else password_problem(url, source)


class Schedules(Section):
    """When ingestion, retraining and scoring run."""

    cross_keys: ClassVar[bool] = True
    ingest_interval_s: Number = Field(
        300.0,
        gt=0,
        description="The daemon polls the connectors this often (unless ingest_cron is given).",
    )
    ingest_cron: Cron | None = Field(None, description="A crontab string instead of the interval.")
    retrain_cron: Cron = Field(
        "0 3 * * *", description="When the daemon retrains (crontab string, plant time zone)."
    )
    retrain_interval_s: Number = Field(
        None,
        gt=0,
        description="Retrain this often instead of retrain_cron (tests, fast-moving lines).",
    )
    scoring_interval_s: Number = Field(
        1.0, gt=0, description="The station scorers' poll interval (a station may override)."
    )

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        found = []
        for job in ("ingest", "retrain"):
            if raw.get(f"{job}_interval_s") is not None and raw.get(f"{job}_cron") is not None:
                message = f"give either {job}_interval_s or {job}_cron"
                found.append(Problem((f"{job}_cron",), message))
        return found
