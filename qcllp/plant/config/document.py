"""The plant YAML as pydantic models: every key, its type, its one default and its meaning.

These models are the schema: they validate a file (:func:`qcllp.plant.config.loader.
parse_plant_config`), give its JSON Schema (``qcllp config schema``) and the key reference of
docs/config.md, and they hold the only declaration of each default (the objects the rest of
qcllp uses, :mod:`.model`, read theirs from here). They mirror the file as written; the
loader turns them into the :class:`~qcllp.plant.config.model.PlantConfig` the code uses.
The sections of the line and its data are in :mod:`.sections`; here are the services',
training's and the plant's own keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from qcllp.plant.config.fields import (
    Cluster,
    Cron,
    Currency,
    DatabaseUrl,
    DefectType,
    Encoding,
    Grid,
    Integer,
    LocalPath,
    Name,
    Number,
    Switch,
    Text,
    Timezone,
    choice,
)
from qcllp.plant.config.message_bus import Mqtt
from qcllp.plant.config.plc import Opcua, PlcNodes, PlcStation
from qcllp.plant.config.problems import Problem, Section, default_of, duplicates
from qcllp.plant.config.sections import (
    MAX_FUTURE_TOLERANCE_S,
    Completion,
    Connectors,
    FileSource,
    MeasurementFiles,
    Schedules,
    Sensor,
    SqlSource,
    Station,
)

ANY_DEFECT_MODES = ("per-type-sum", "per-type-noisy-or", "direct", "auto")

__all__ = [
    "ANY_DEFECT_MODES",
    "MAX_FUTURE_TOLERANCE_S",
    "Bay",
    "Completion",
    "Connectors",
    "Drift",
    "FileSource",
    "MeasurementFiles",
    "Mqtt",
    "Opcua",
    "Plant",
    "PlcNodes",
    "PlcStation",
    "Retention",
    "Retrainer",
    "Schedules",
    "Scorer",
    "Sensor",
    "SqlSource",
    "Station",
    "Training",
    "default_of",
]


class Scorer(Section):
    """The station scoring services (qcllp serve scorer --station S)."""

    host: Text = Field(
        "127.0.0.1",
        description="/healthz and /metrics listen here: 127.0.0.1, this machine only; 0.0.0.0, "
        "every interface, so any machine that reaches this one (a scraper elsewhere). They have "
        "no authentication: a host other than loopback logs a warning.",
    )
    base_port: Integer = Field(
        9470, ge=1, description="A station listens on base_port + its position in the line."
    )
    max_lag_s: Number = Field(
        60.0, gt=0, description="/healthz answers 503 when work waits longer than this."
    )
    max_batch_sticks: Integer = Field(
        5000, ge=1, description="Sticks decided per transaction (a backlog drains in steps)."
    )
    sink_dir: LocalPath = Field(
        None,
        description="The folder of flags-<station>.jsonl for the PLC/MES gateway; default: none.",
    )
    sink_max_bytes: Integer = Field(
        100_000_000,
        ge=0,
        description="A sink file holding this many bytes of flags is moved aside as "
        "<file>.<id of its last flag> and a new one started (0: never rotate).",
    )
    sink_keep_rotated: Integer = Field(
        10, ge=0, description="Rotated sink files kept per station, the newest (0: all)."
    )
    guard_min_sticks: Integer = Field(
        300,
        ge=1,
        description="The lock-out guard judges a model's lock-out share after this many decided "
        "sticks.",
    )
    count_guard_interval: Number = Field(
        8.0,
        gt=0,
        description="Count guard: suspend a model once final QC's counts show it over-predicts "
        "by this many standard deviations (qcllp.scoring.count_guard).",
    )
    inspection_guard_interval: Number = Field(
        6.0,
        gt=0,
        description="Inspection guard: suspend a model once its lock-outs inspected at the bay "
        "fall this many failing sticks short of break-even precision, counted since they last "
        "paid (qcllp.scoring.inspection_guard).",
    )


class Drift(Section):
    """The retrainer's drift alarms."""

    window_charges: Integer = Field(
        20, ge=2, description="The newest charges the drift signals look at."
    )
    bag_error_ratio: Number = Field(
        1.5,
        gt=0,
        description="Count signal: alarm (and retrain) past this times the training error.",
    )
    psi_max: Number = Field(
        0.25, gt=0, description="Feature signal: alarm past this population stability index."
    )


class Retrainer(Section):
    """The retraining daemon (qcllp serve retrainer), one per plant."""

    cross_keys: ClassVar[bool] = True
    host: Text = Field(
        "127.0.0.1",
        description="/healthz and /metrics listen here: 127.0.0.1, this machine only; 0.0.0.0, "
        "every interface, so any machine that reaches this one (a scraper elsewhere). They have "
        "no authentication: a host other than loopback logs a warning.",
    )
    port: Integer = Field(9469, ge=1, description="The port of /healthz and /metrics.")
    stations: list[Name] = Field(
        [], min_length=1, description="The stations it retrains; default: all."
    )
    training_charges: Integer = Field(
        400,
        ge=0,
        description="A candidate learns from the newest this many labeled charges "
        "before the holdout (0: all).",
    )
    holdout_charges: Integer = Field(
        20, ge=2, description="The newest labeled charges kept out of training: the promotion test."
    )
    min_holdout_charges: Integer = Field(
        8, ge=2, description="With fewer charges that neither model saw, nothing is promoted."
    )
    promotion_margin: Number = Field(
        0.02,
        ge=0,
        description="A challenger's bag-level error must be this much (relative) lower, and its "
        "saving "
        "not lower.",
    )
    misfire_grace_s: Number = Field(
        86_400.0,
        gt=0,
        description="A run missed while the daemon was down still runs (once) within this.",
    )
    lease_ttl_s: Number = Field(
        120.0, gt=0, description="A dead daemon's lease frees after this long."
    )
    shadow_trials: Switch = Field(
        True,
        description="A station's first model, and a candidate whose threshold moved from the "
        "active model's, go on a shadow trial (scored, acted on by nobody) instead of active; "
        "a model that locks out nothing goes straight to active.",
    )
    shadow_confirm: choice("auto", "manual") = Field(
        "auto",
        description="auto: the daemon promotes a shadow model whose inspected would-be "
        "lock-outs pay and retires one whose do not; manual: it only says so (qcllp status), "
        "an operator promotes.",
    )
    shadow_min_charges: Integer = Field(
        25, ge=1, description="A shadow trial is judged once this many of its charges are counted."
    )
    shadow_min_audits: Integer = Field(
        20, ge=1, description="... and this many of its would-be lock-outs were inspected."
    )
    shadow_max_charges: Integer = Field(
        100,
        ge=1,
        description="A shadow trial runs until it is decided; one still undecided after this "
        "many counted charges ends inconclusive (retired). Until then a candidate that would "
        "go on trial waits.",
    )
    shadow_confirm_level: Number = Field(
        0.90,
        gt=0.5,
        lt=1,
        description="Confidence of the one-sided bounds of the inspected precision: confirmed "
        "when the lower bound reaches break-even, rejected when the upper one is below it.",
    )
    shadow_check_interval_s: Number = Field(
        3600.0, gt=0, description="How often the daemon judges the stations' shadow trials."
    )
    drift: Drift = Field(Drift(), description="The drift alarms.")


class Bay(Section):
    """The lock-out bay page (qcllp serve bay), one per plant: the sticks awaiting inspection
    at each station, and the inspectors' results stored as inspections."""

    host: Text = Field(
        "127.0.0.1",
        description="The page listens here: 127.0.0.1, this machine only (behind a reverse "
        "proxy); 0.0.0.0 or the plant network's address for the tablets at the bay. It asks "
        "for the token of QCLLP_BAY_TOKEN(_FILE) and refuses to start without one.",
    )
    port: Integer = Field(9467, ge=1, description="The port of the page (and its /healthz).")
    session_days: Integer = Field(
        30,
        ge=1,
        description="A tablet stays logged in this many days after the token was entered "
        "(a new token logs every tablet out at once).",
    )


class Retention(Section):
    """How long readings are kept (PostgreSQL only)."""

    readings_days: Integer = Field(
        None,
        ge=1,
        description="Drop a month of readings once all of it is this old; default: keep all.",
    )
    archive_dir: LocalPath = Field(
        None,
        description="Each month is saved here first, as readings_YYYY-MM.csv.gz; default: no copy.",
    )
    cron: Cron = Field(
        "30 2 * * *",
        description="When the retraining daemon applies it (qcllp retention does it by hand).",
    )


class Training(Section):
    """Training defaults: the method, its grids, folds and seed."""

    cross_keys: ClassVar[bool] = True
    default_method: Text = Field(
        "em-llp", description="One of methods, or auto (try each, keep the best)."
    )
    methods: dict[str, Grid | None] = Field(
        {}, description="Grids by method: {<method>: {<parameter>: [values, ...]}}."
    )
    cv: Integer = Field(5, ge=2, description="Charge folds of the grid search.")
    random_state: Integer = Field(0, ge=0, description="The seed of training (folds, subsets).")
    # why not auto: docs/benchmarks.md, "Quality on the simulated plant"
    any_defect: choice(*ANY_DEFECT_MODES) = Field(
        "per-type-sum",
        description="The defective target: one model per defect type summed (per-type-sum) or "
        "combined (per-type-noisy-or), one model on the any-defect shares (direct), or auto "
        "(the counts choose).",
    )
    bootstrap: Integer = Field(
        30, ge=2, description="Charge resamples behind the lock-out threshold's lower bound."
    )
    # why 1: a training next to the station scorers leaves them a core (model.Training)
    n_jobs: Integer = Field(
        1,
        ge=-1,
        description="Processes a training on this machine fits in parallel (grid points, "
        "folds); -1: one per core. Ignored on a Dask cluster.",
    )
    # 10,000 charges of ~50 sticks (the cost of more: model.Training's docstring)
    max_sticks: Integer = Field(
        500_000,
        ge=1,
        description="More labeled sticks than this: train on a seeded subset of whole charges.",
    )

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        problems = []
        if raw.get("n_jobs") == 0 and not isinstance(raw.get("n_jobs"), bool):
            message = "0 processes cannot train: give 1, 2, ... or -1 (one per core)"
            problems.append(Problem(("n_jobs",), message))
        default, methods = raw.get("default_method"), raw.get("methods")
        if not isinstance(methods, Mapping) or not isinstance(default, str):
            return problems
        if default == "auto" or default in methods:
            return problems
        known = ", ".join(map(str, methods))
        message = f"{default!r} is not among training.methods ({known})"
        return [*problems, Problem(("default_method",), message)]


class Plant(Section):
    """One plant: its stations in line order, the defect types, where the data comes from and
    goes, and when things run."""

    cross_keys: ClassVar[bool] = True
    model_config = {**Section.model_config, "title": "qcllp plant config"}
    name: Text = Field(description="The plant's name; names the default SQLite file.")
    timezone: Timezone = Field(
        "UTC", description="IANA zone of input timestamps without an offset."
    )
    encoding: Encoding = Field(
        "utf-8",
        description="Text encoding of CSV input files (ASCII-compatible: utf-8, cp1252, ...); "
        "rows not "
        "in it are quarantined.",
    )
    currency: Currency = Field(
        "EUR", description="Of the lock-out costs; reports print money in it."
    )
    database_url: DatabaseUrl | None = Field(
        None,
        description="SQLAlchemy URL without a password; default: sqlite:///<config "
        "folder>/<name>.sqlite.",
    )
    statement_timeout_s: Number = Field(
        600.0,
        gt=0,
        description="A server database cancels a statement running longer (a hung lock wait "
        "fails and "
        "is retried).",
    )
    cluster: Cluster = Field(
        None,
        description="Dask scheduler (tcp://HOST:PORT) that runs training's parallel "
        "parts; default: this machine.",
    )
    retention: Retention = Field(
        Retention(), description="How long readings are kept (PostgreSQL only)."
    )
    defect_types: list[DefectType] = Field(
        min_length=1,
        description="The quality classes besides the implicit ok, e.g. [crack, bend, scale].",
    )
    stations: list[Station] = Field(min_length=1, description="The stations, in line order.")
    connectors: Connectors = Field(Connectors(), description="Where the data comes from.")
    schedules: Schedules = Field(
        Schedules(), description="When ingestion, retraining and scoring run."
    )
    scorer: Scorer = Field(
        Scorer(), description="The station scoring services (qcllp serve scorer)."
    )
    retrainer: Retrainer = Field(
        Retrainer(), description="The retraining daemon (qcllp serve retrainer)."
    )
    bay: Bay = Field(Bay(), description="The lock-out bay page (qcllp serve bay).")
    training: Training = Field(Training(), description="Training defaults.")

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        found = duplicates(raw.get("defect_types"), "defect type", ("defect_types",), key=None)
        found += duplicates(raw.get("stations"), "station name", ("stations",))
        return found + _unknown_stations(raw) + _retention_needs_postgresql(raw)


def _unknown_stations(raw: Mapping) -> list[Problem]:
    """``retrainer.stations`` and ``connectors.opcua.stations`` name only stations of the
    plant."""
    stations = raw.get("stations")
    known = (
        {s.get("name") for s in stations if isinstance(s, Mapping)}
        if isinstance(stations, list)
        else set()
    )
    chosen = _below(raw, "retrainer", "stations")
    found = [
        Problem(("retrainer", "stations", i), f"unknown station {name!r}")
        for i, name in enumerate(chosen if isinstance(chosen, list) else [])
        if name not in known
    ]
    plc = _below(raw, "connectors", "opcua", "stations")
    return found + [
        Problem(("connectors", "opcua", "stations", str(name)), f"unknown station {name!r}")
        for name in (plc if isinstance(plc, Mapping) else {})
        if name not in known
    ]


def _below(raw: Mapping, *keys: str) -> Any:
    """The value at ``keys`` of the mapping as written, or ``None`` where it is not one."""
    for key in keys:
        if not isinstance(raw, Mapping):
            return None
        raw = raw.get(key)
    return raw


def _retention_needs_postgresql(raw: Mapping) -> list[Problem]:
    """Retention drops monthly partitions of the readings: PostgreSQL only."""
    retention, url = raw.get("retention"), raw.get("database_url")
    days = retention.get("readings_days") if isinstance(retention, Mapping) else None
    sqlite = url is None or (isinstance(url, str) and url.startswith("sqlite"))
    if not (sqlite and isinstance(days, int) and not isinstance(days, bool) and days >= 1):
        return []
    message = (
        "needs a PostgreSQL database (it drops monthly partitions of the readings); "
        "this plant's database is SQLite"
    )
    return [Problem(("retention", "readings_days"), message)]
