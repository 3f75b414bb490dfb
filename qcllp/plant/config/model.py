"""The plant configuration as the rest of qcllp uses it: frozen dataclasses.

They are built from the validated YAML (:mod:`.document`, :func:`.loader.parse_plant_config`)
and differ from it where the code wants another shape: a station carries its completion rule
and its resolved scoring interval, the retrainer its drift settings flat, a SQL source its
name, the plant its file and its resolved database URL. Plain frozen dataclasses, not pydantic
models, because code and tests derive variants with :func:`dataclasses.replace` (a training
grid for a demo, a faster retrainer for a test). Their defaults are the document's, read from
its fields: each default is declared once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qcllp.plant import lockout_costs as costs
from qcllp.plant.config import document as doc
from qcllp.plant.config.document import default_of
from qcllp.plant.config.problems import ConfigError

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Sensor:
    """One sensor of a station: readings outside ``[min, max]`` are invalid (quarantined)."""

    name: str
    unit: str
    min: float
    max: float


@dataclass(frozen=True)
class Station:
    """One station of the line with its sensors and lock-out costs.

    ``fail_cost``: cost saved per stick that will fail if it is locked out here (the remaining
    processing cost; smaller at later stations). ``good_cost``: cost of locking out a good stick
    here (the lost value of a good stick). ``inspection_cost``: cost of looking at one stick
    here (at the lock-out bay or as an audit sample; the YAML's default, 5 % of ``good_cost``,
    is resolved by the loader). ``audit_share``: the share of the sticks eligible for an audit
    that the scorer marks ``inspect``, ``trial_audit_share`` that of a shadow model's would-be
    lock-outs (:mod:`qcllp.scoring.audits`).

    When a stick has *completed* the station (its scorer may decide): it has a reading at a
    later station, or every sensor of this station has reported and no new reading of the
    stick arrived here for ``settle_s`` seconds. A stick still missing a sensor ``timeout_s``
    seconds after its first reading here is complete too, and unscorable (the sensor is named).
    """

    name: str
    sensors: tuple[Sensor, ...]
    fail_cost: float
    good_cost: float
    scoring_interval_s: float
    settle_s: float = default_of(doc.Completion, "settle_s")
    timeout_s: float = default_of(doc.Completion, "timeout_s")
    inspection_cost: float = 0.0
    audit_share: float = default_of(doc.Station, "audit_share")
    trial_audit_share: float = default_of(doc.Station, "trial_audit_share")

    @property
    def sensor_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sensors)

    @property
    def break_even(self) -> float:
        """The failure probability at which a lock-out here neither saves nor loses,
        ``(good_cost + inspection_cost) / (good_cost + fail_cost)``: every locked-out stick
        is looked at before it is scrapped (:mod:`qcllp.plant.lockout_costs`)."""
        return costs.break_even(self.fail_cost, self.good_cost, self.inspection_cost)

    def lockout_value(self, precision: np.ndarray | float) -> np.ndarray | float:
        """What one lock-out here brings when its stick fails with probability
        ``precision``, its look included (:mod:`qcllp.plant.lockout_costs`)."""
        return costs.lockout_value(precision, self.fail_cost, self.good_cost, self.inspection_cost)

    @property
    def audit_pays_from(self) -> float:
        """The failure probability above which an audit sample pays for its look:
        ``inspection_cost / fail_cost`` (:mod:`qcllp.plant.lockout_costs`)."""
        return costs.audit_pays_from(self.fail_cost, self.inspection_cost)

    def sensor(self, name: str) -> Sensor:
        if (found := _by_name(self.sensors, name)) is not None:
            return found
        raise KeyError(
            f"station {self.name!r} has no sensor {name!r}; known: {', '.join(self.sensor_names)}"
        )


@dataclass(frozen=True)
class Schedules:
    """When ingestion, retraining and scoring run.

    Exactly one of ``ingest_interval_s`` / ``ingest_cron`` is set. ``scoring_interval_s`` maps
    each station name to its scorer's polling interval in seconds.
    """

    ingest_interval_s: float | None
    ingest_cron: str | None
    retrain_cron: str
    scoring_interval_s: dict[str, float] = field(default_factory=dict)
    retrain_interval_s: float | None = None  # set: it replaces retrain_cron


@dataclass(frozen=True)
class Scorer:
    """The station scoring services: where their HTTP endpoint listens (``base_port`` plus the
    station's position in the line), when ``/healthz`` reports unhealthy (``max_lag_s``), how
    many sticks one transaction decides at most, the folder of the line's flag files, and
    after how many decided sticks the lock-out guard may suspend a model that locks out far
    more than in training (``guard_min_sticks``, :mod:`qcllp.scoring.share_guard`), and
    the decision interval of the guard on final QC's counts (``count_guard_interval``, in
    standard deviations of the model's over-prediction summed over charges;
    :mod:`qcllp.scoring.count_guard`), and that of the guard on inspected lock-outs
    (``inspection_guard_interval``, in failing sticks short of break-even;
    :mod:`qcllp.scoring.inspection_guard`)."""

    host: str = default_of(doc.Scorer, "host")
    base_port: int = default_of(doc.Scorer, "base_port")
    max_lag_s: float = default_of(doc.Scorer, "max_lag_s")
    max_batch_sticks: int = default_of(doc.Scorer, "max_batch_sticks")
    sink_dir: str | None = default_of(doc.Scorer, "sink_dir")
    sink_max_bytes: int = default_of(doc.Scorer, "sink_max_bytes")
    sink_keep_rotated: int = default_of(doc.Scorer, "sink_keep_rotated")
    guard_min_sticks: int = default_of(doc.Scorer, "guard_min_sticks")
    count_guard_interval: float = default_of(doc.Scorer, "count_guard_interval")
    inspection_guard_interval: float = default_of(doc.Scorer, "inspection_guard_interval")


@dataclass(frozen=True)
class Retrainer:
    """The retraining daemon (``qcllp serve retrainer``, :mod:`qcllp.service.retrainer`).

    ``stations``: the stations it retrains (empty: all). ``training_charges``: a candidate
    learns from at most this many labeled charges, the newest before the holdout (0: all): the
    process the model must follow is the recent one, and a nightly training stays as long in
    the third year as in the first. ``holdout_charges``: the most recent
    labeled charges, kept out of the candidate's training, on which candidate and active model
    are compared; fewer than ``min_holdout_charges`` that neither model saw, and no model is
    promoted. ``promotion_margin``: how much lower (relative) the candidate's bag-level error
    must be. ``misfire_grace_s``: how late a missed run may still start (a daemon that was
    down runs each job once, not once per missed time). ``lease_ttl_s``: how long a lease of a
    dead holder blocks others. ``drift``: the count-based drift alarm fires when the active
    model's bag-level error over the last ``window_charges`` labeled charges exceeds
    ``bag_error_ratio`` times its out-of-fold error in training (and retrains the station); the
    feature drift alarm when a feature's population stability index (recent sticks against
    the training window) exceeds ``psi_max``. ``shadow_*``: the shadow trials of new models
    and the rule that confirms or rejects them (:mod:`qcllp.retraining.shadow_trial`).
    """

    host: str = default_of(doc.Retrainer, "host")
    port: int = default_of(doc.Retrainer, "port")
    stations: tuple[str, ...] = tuple(default_of(doc.Retrainer, "stations"))
    training_charges: int = default_of(doc.Retrainer, "training_charges")
    holdout_charges: int = default_of(doc.Retrainer, "holdout_charges")
    min_holdout_charges: int = default_of(doc.Retrainer, "min_holdout_charges")
    promotion_margin: float = default_of(doc.Retrainer, "promotion_margin")
    misfire_grace_s: float = default_of(doc.Retrainer, "misfire_grace_s")
    lease_ttl_s: float = default_of(doc.Retrainer, "lease_ttl_s")
    shadow_trials: bool = default_of(doc.Retrainer, "shadow_trials")
    shadow_confirm: str = default_of(doc.Retrainer, "shadow_confirm")
    shadow_min_charges: int = default_of(doc.Retrainer, "shadow_min_charges")
    shadow_min_audits: int = default_of(doc.Retrainer, "shadow_min_audits")
    shadow_max_charges: int = default_of(doc.Retrainer, "shadow_max_charges")
    shadow_confirm_level: float = default_of(doc.Retrainer, "shadow_confirm_level")
    shadow_check_interval_s: float = default_of(doc.Retrainer, "shadow_check_interval_s")
    drift_window_charges: int = default_of(doc.Drift, "window_charges")
    drift_bag_error_ratio: float = default_of(doc.Drift, "bag_error_ratio")
    drift_psi_max: float = default_of(doc.Drift, "psi_max")


@dataclass(frozen=True)
class Bay:
    """The lock-out bay page (``qcllp serve bay``, :mod:`qcllp.service.bay`): where it
    listens, and how long a tablet stays logged in (``session_days``)."""

    host: str = default_of(doc.Bay, "host")
    port: int = default_of(doc.Bay, "port")
    session_days: int = default_of(doc.Bay, "session_days")


@dataclass(frozen=True)
class Retention:
    """How long readings are kept (``retention:``; PostgreSQL, :mod:`qcllp.store.retention`).

    ``readings_days``: a month of readings is dropped once all of it is older than this many
    days (``None``: kept for ever). ``archive_dir``: where each month is written first, as a
    gzipped CSV in the measurements' long layout that ``qcllp ingest measurements`` takes back
    (``None``: dropped without a copy). ``cron``: when the retraining daemon applies it.
    Training never uses a charge older than ``readings_days``: its readings may be gone.
    """

    readings_days: int | None = default_of(doc.Retention, "readings_days")
    archive_dir: str | None = default_of(doc.Retention, "archive_dir")
    cron: str = default_of(doc.Retention, "cron")


@dataclass(frozen=True)
class Training:
    """Training defaults: the method, its grids (learner parameter names), folds and seed.

    ``any_defect``: how the any-defect target (the lock-out decision) is learned, one of
    :data:`ANY_DEFECT_MODES` (``qcllp.training.train.TrainingPlan``). ``bootstrap``: resamples
    of the charges behind the lock-out threshold's lower bound (``qcllp.station.lockout_rule``).

    ``max_sticks``: when the labeled charges hold more sticks, training reads and fits a
    seeded random subset of whole charges (seeded by ``random_state``) whose sticks sum to at
    most this (``qcllp.training.train.subsample_charges``). Default 500,000: 10,000 charges of
    50 sticks, far more bags than the learners need for a few dozen weights per defect type;
    the default training (em-llp, its grid over 5 charge folds, one model per defect type) of
    500,000 sticks x 30 features peaks at 1.1 GB, far below the 8 GB a station may use, and
    takes 15 minutes on one core, so a nightly retraining of four stations stays within about
    an hour, while one em-llp fit on 5M sticks alone peaks at 8.4 GB (docs/benchmarks.md,
    "Large training sets", ``benchmarks/bench_large_training.py``). Set it higher for a
    plant whose stations need more: time and memory grow in proportion.

    ``n_jobs``: joblib processes (loky) a training on this machine runs its parallel parts on
    -- the grid search's fits, the out-of-fold folds, the k-means labeler's population; the
    same seed gives the same model for any number (``qcllp.training.cluster``). Default 1: the
    retraining daemon shares its machine with the station scorers, whose flags must not wait
    for a training (the daemon's systemd unit sets ``OMP_NUM_THREADS=1``, so one process stays
    one core); ``qcllp train --jobs`` overrides it for a training by hand. 0 is refused as
    joblib refuses it; -1 is one per core.

    ``methods`` maps a method name as written in the YAML to its grid; the pipeline resolves
    spellings (``alter_psvm`` = ``alter-psvm``).
    """

    default_method: str = default_of(doc.Training, "default_method")
    methods: Mapping[str, Mapping[str, list]] = field(default_factory=dict)
    cv: int = default_of(doc.Training, "cv")
    random_state: int = default_of(doc.Training, "random_state")
    any_defect: str = default_of(doc.Training, "any_defect")
    bootstrap: int = default_of(doc.Training, "bootstrap")
    max_sticks: int = default_of(doc.Training, "max_sticks")
    n_jobs: int = default_of(doc.Training, "n_jobs")


@dataclass(frozen=True)
class FileConnector:
    """A drop file or folder of measurement, defect-count or inspection files.

    ``format`` ``None``: from each file's suffix; ``layout`` (measurements) ``None``: from the
    columns; ``chunk_rows`` ``None``: the ingester's default. ``archive``: a folder the files
    are moved to once stored (or found already stored), so a watched folder holds only what
    is still to do and its poll stays as cheap as the new files; ``None``: files stay.
    """

    path: str
    format: str | None = None
    pattern: str | None = None
    layout: str | None = None
    chunk_rows: int | None = None
    archive: str | None = None


@dataclass(frozen=True)
class SqlSource:
    """A SQL source (historian, MES) read incrementally by its ``watermark`` column.

    Exactly one of ``table`` and ``query``; ``columns`` maps our column names to the source's
    where they differ; ``chunk_rows`` ``None``: the ingester's default.
    """

    name: str
    url: str
    watermark: str
    table: str | None = None
    query: str | None = None
    kind: str = default_of(doc.SqlSource, "kind")
    columns: Mapping[str, str] = field(default_factory=dict)
    chunk_rows: int | None = None


@dataclass(frozen=True)
class MqttConnector:
    """The line's MQTT broker (:mod:`.message_bus` says what each field is for).

    ``port`` ``None``: 1883, or 8883 with ``tls``; ``client_id`` ``None``:
    ``qcllp-intake-<plant name>`` (:meth:`PlantConfig.mqtt_client_id`).
    """

    host: str
    port: int | None = None
    client_id: str | None = None
    username: str | None = None
    tls: bool = False
    ca_file: str | None = None
    readings_topic: str = default_of(doc.Mqtt, "readings_topic")
    flags_topic: str = default_of(doc.Mqtt, "flags_topic")
    publish_flags: bool = True
    batch_max_messages: int = default_of(doc.Mqtt, "batch_max_messages")
    batch_max_s: float = default_of(doc.Mqtt, "batch_max_s")
    keepalive_s: int = default_of(doc.Mqtt, "keepalive_s")
    host_http: str = default_of(doc.Mqtt, "host_http")
    port_http: int = default_of(doc.Mqtt, "port_http")

    @property
    def broker_port(self) -> int:
        """The port to connect to."""
        return self.port if self.port is not None else (8883 if self.tls else 1883)

    def readings_topic_of(self, station: str) -> str:
        return self.readings_topic.replace("{station}", station)

    def flags_topic_of(self, station: str) -> str:
        return self.flags_topic.replace("{station}", station)


@dataclass(frozen=True)
class PlcStation:
    """How one station's flags reach the PLC (:mod:`.plc`): ``mode`` ``"write"`` with
    ``nodes`` (field name -> node id: ``flag_id``, ``ack``, ``charge_id``, ``stick_id``,
    ``decision``, optionally ``probability``), or ``"method"`` with ``object`` and ``method``."""

    mode: str = default_of(doc.PlcStation, "mode")
    nodes: Mapping[str, str] = field(default_factory=dict)
    object: str | None = None
    method: str | None = None


@dataclass(frozen=True)
class OpcuaConnector:
    """The line's PLC over OPC UA (:mod:`.plc` says what each field is for); ``stations``:
    the stations whose flags go to it."""

    endpoint: str
    stations: Mapping[str, PlcStation] = field(default_factory=dict)
    username: str | None = None
    security: str = default_of(doc.Opcua, "security")
    security_mode: str = default_of(doc.Opcua, "security_mode")
    certificate: str | None = None
    private_key: str | None = None
    server_certificate: str | None = None
    timeout_s: float = default_of(doc.Opcua, "timeout_s")
    poll_s: float = default_of(doc.Opcua, "poll_s")
    ack_timeout_s: float = default_of(doc.Opcua, "ack_timeout_s")
    session_timeout_s: int = default_of(doc.Opcua, "session_timeout_s")


@dataclass(frozen=True)
class Connectors:
    """Where the plant's data comes from -- drop folders, SQL sources, the MQTT broker -- and
    where the flags go besides the sink (MQTT, the PLC over OPC UA); all optional.

    ``future_tolerance_s``: how far past the time of ingestion a reading's timestamp may lie
    (clocks of plant systems drift); a later one is quarantined as ``future_timestamp``.
    """

    measurements: FileConnector | None = None
    defects: FileConnector | None = None
    inspections: FileConnector | None = None
    sql: Mapping[str, SqlSource] = field(default_factory=dict)
    mqtt: MqttConnector | None = None
    opcua: OpcuaConnector | None = None
    future_tolerance_s: float = default_of(doc.Connectors, "future_tolerance_s")


@dataclass(frozen=True)
class PlantConfig:
    """A validated plant configuration (build it with :func:`load_plant_config`)."""

    name: str
    path: Path | None
    stations: tuple[Station, ...]
    defect_types: tuple[str, ...]
    database_url: str
    timezone: str
    connectors: Connectors
    schedules: Schedules
    training: Training
    scorer: Scorer = field(default_factory=Scorer)
    retrainer: Retrainer = field(default_factory=Retrainer)
    retention: Retention = field(default_factory=Retention)
    bay: Bay = field(default_factory=Bay)
    encoding: str = default_of(doc.Plant, "encoding")
    currency: str = default_of(doc.Plant, "currency")
    cluster: str | None = None  # Dask scheduler for training (qcllp.training.cluster); None: local
    statement_timeout_s: float = default_of(doc.Plant, "statement_timeout_s")

    @property
    def classes(self) -> tuple[str, ...]:
        """Quality classes: ``("ok", *defect_types)``."""
        return ("ok", *self.defect_types)

    @property
    def mqtt_client_id(self) -> str:
        """The intake's MQTT client id: ``connectors.mqtt.client_id`` or
        ``qcllp-intake-<plant name>`` (a session the broker keeps across restarts)."""
        mqtt = self.connectors.mqtt
        given = mqtt.client_id if mqtt is not None else None
        return given or f"qcllp-intake-{self.name}"

    @property
    def station_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.stations)

    @property
    def models_dir(self) -> Path:
        """Model artifacts of a server database: ``models/`` beside this config file (or the
        working directory for a config built in memory)."""
        return (self.path.parent if self.path is not None else Path.cwd()) / "models"

    def station(self, name: str) -> Station:
        if (found := _by_name(self.stations, name)) is not None:
            return found
        raise ConfigError(f"unknown station {name!r}; known: {', '.join(self.station_names)}")

    def station_index(self, name: str) -> int:
        """Position of station ``name`` in line order (0 = first)."""
        return self.stations.index(self.station(name))

    def stations_up_to(self, name: str) -> tuple[Station, ...]:
        """The stations up to and including ``name``, in line order."""
        return self.stations[: self.station_index(name) + 1]


def _by_name(items: Sequence[Any], name: str) -> Any:
    """The first item whose ``.name`` is ``name``, else None."""
    return next((item for item in items if item.name == name), None)
