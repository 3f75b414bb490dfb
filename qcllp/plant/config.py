"""Plant configuration: the YAML schema describing one plant, its loader and its validation.

A plant is a line of stations (in line order), each with sensors (name, unit, valid range) and
lock-out costs; the quality classes are ``"ok"`` plus the configured defect types. The same file
holds where the data comes from (connectors), where it is stored (database URL), when things
run (schedules) and training defaults. Everything downstream -- ingestion, the simulator,
feature tables, scoring -- takes its names and ranges from here, so the file is validated once,
completely, and every problem is reported as ``"<file>: <key path>: <what is wrong>"`` (all
problems at once, one per line, so a plant engineer can fix the file in one pass).

Schema (see ``plant_config/example.yaml`` for a full example)::

    name: str                         # plant name; names the default SQLite file
    timezone: str                     # IANA zone for naive input timestamps (default "UTC")
    encoding: str                     # text encoding of CSV input files (default "utf-8")
    currency: str                     # of the lock-out costs, in reports (default "EUR")
    database_url: str                 # optional; default sqlite:///<config dir>/<name>.sqlite
    statement_timeout_s: float        # a server database cancels a statement running longer
                                      # (default 600; a hung lock wait fails, is retried)
    cluster: str                      # optional Dask scheduler (tcp://HOST:PORT) that runs the
                                      # parallel parts of training (qcllp train, the daemon);
                                      # default none: train on this machine
    retention:                        # optional, PostgreSQL only; Retention
      readings_days: int >= 1         # drop a month of readings once all of it is this old
      archive_dir: str                # optional; each month saved here first (.csv.gz)
      cron: str                       # when the daemon applies it (default "30 2 * * *")
    defect_types: [str, ...]          # quality classes besides the implicit "ok"
    stations:                         # in line order
      - name: str
        fail_cost: float >= 0         # saved per failing stick locked out here
        good_cost: float >= 0         # lost per good stick locked out here
        scoring_interval_s: float > 0 # optional; default schedules.scoring_interval_s
        completion: {settle_s: float >= 0, timeout_s: float > 0}   # optional; Station
        sensors:
          - {name: str, unit: str, min: float, max: float}
    connectors:                       # optional
      future_tolerance_s: float >= 0  # a reading stamped later than the time of ingestion plus
                                      # this is quarantined (default 86400: one day of clock
                                      # skew; at most 31 days)
      measurements: {path, format: csv|parquet, layout: long|wide, pattern, chunk_rows, archive}
      defects: {path, format: csv|parquet, pattern, archive}   # archive: folder for done files
      sql: {<source name>: {url, table | query, watermark, kind: measurements|defects,
                            columns: {<long-format name>: <source column>}, chunk_rows}}
    schedules:                        # optional
      ingest_interval_s: float > 0    # default 300 when no ingest_cron is given
      ingest_cron: str                # crontab string, alternative to the interval
      retrain_cron: str               # crontab string (default "0 3 * * *")
      retrain_interval_s: float > 0   # alternative to retrain_cron (tests, fast-moving lines)
      scoring_interval_s: float > 0   # default for stations (default 1)
    scorer:                           # optional: the station scoring services
      {host, base_port, max_lag_s, max_batch_sticks, sink_dir, guard_min_sticks}
    retrainer:                        # optional: the retraining daemon (qcllp serve retrainer)
      {host, port, stations, training_charges, holdout_charges, min_holdout_charges,
       promotion_margin, misfire_grace_s, lease_ttl_s,
       drift: {window_charges, bag_error_ratio, psi_max}}
    training:                         # optional
      default_method: str             # one of ``methods``, or "auto" (try each, keep the best)
      methods: {<method>: {<param>: [values, ...]}}
      cv: int >= 2
      random_state: int
      any_defect: per-type-sum | per-type-noisy-or | direct | auto
      bootstrap: int >= 2               # resamples for the lock-out rule (default 30)
      max_sticks: int >= 1              # train on a seeded subset of whole charges when the
                                        # labeled ones hold more sticks (default 500,000)

Choices made where a plant could reasonably expect otherwise:

* Names of stations, sensors and defect types must be identifiers (letters, digits, ``_``,
  not starting with a digit): feature columns are named ``"<station>.<sensor>.<stat>"`` and
  defect types are column names of the defect-count files, so dots, spaces and clashes with
  ``charge_id``/``n_sticks`` would be ambiguous.
* The same sensor name may appear at several stations (a temperature at the furnace and at
  cooling); within one station names are unique.
* Duplicate keys in a YAML mapping are errors (PyYAML silently keeps the last one).
* Relative paths (connector ``path`` and a relative SQLite database file) resolve against the
  config file's folder, so a config works from any working directory.
"""

from __future__ import annotations

import ipaddress
import math
import re
import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "ConfigError",
    "Connectors",
    "FileConnector",
    "PlantConfig",
    "Schedules",
    "Sensor",
    "Retrainer",
    "Retention",
    "Scorer",
    "SqlSource",
    "Station",
    "Training",
    "exposed_host_warning",
    "load_plant_config",
    "parse_plant_config",
    "scheduler_address_problem",
]

DEFAULT_RETRAIN_CRON = "0 3 * * *"
DEFAULT_STATEMENT_TIMEOUT_S = 600.0
DEFAULT_INGEST_INTERVAL_S = 300.0
DEFAULT_FUTURE_TOLERANCE_S = 86_400.0
MAX_FUTURE_TOLERANCE_S = 31 * 86_400  # no reading more than a month ahead: no far-future partition
DEFAULT_SCORING_INTERVAL_S = 1.0
DEFAULT_SETTLE_S = 2.0
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_METHOD = "em-llp"
DEFAULT_CV_FOLDS = 5
ANY_DEFECT_MODES = ("per-type-sum", "per-type-noisy-or", "direct", "auto")
# why not auto: docs/benchmarks.md, "Quality on the simulated plant"
DEFAULT_ANY_DEFECT = "per-type-sum"
DEFAULT_BOOTSTRAP = 30
DEFAULT_RANDOM_STATE = 0
# Sticks a station trains on at most (Training.max_sticks): 10,000 charges of ~50 sticks
DEFAULT_MAX_STICKS = 500_000
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ASCII = "".join(map(chr, range(128)))
_RESERVED_COLUMNS = {"charge_id", "stick_id", "station", "timestamp", "sensor", "value", "n_sticks"}
# a Dask scheduler: tcp:// (or tls://, with TLS set up in Dask's own config), a host name or
# IPv4 address or [IPv6] address, and a port
_SCHEDULER_RE = re.compile(
    r"^(tcp|tls)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):(\d{1,5})$"
)


class ConfigError(ValueError):
    """An invalid plant configuration; ``errors``: one ``"<file>: <key>: <what>"`` per problem."""

    def __init__(self, errors: Sequence[str] | str):
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))


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
    here (the lost value of a good stick).

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
    settle_s: float = DEFAULT_SETTLE_S
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def sensor_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sensors)

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
    :mod:`qcllp.scoring.count_guard`)."""

    host: str = "127.0.0.1"
    base_port: int = 9470
    max_lag_s: float = 60.0
    max_batch_sticks: int = 5000
    sink_dir: str | None = None
    guard_min_sticks: int = 300
    count_guard_interval: float = 8.0  # qcllp.station.guard_bounds.COUNT_INTERVAL


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
    the training window) exceeds ``psi_max``.
    """

    host: str = "127.0.0.1"
    port: int = 9469
    stations: tuple[str, ...] = ()
    training_charges: int = 400
    holdout_charges: int = 20
    min_holdout_charges: int = 8
    promotion_margin: float = 0.02
    misfire_grace_s: float = 86400.0
    lease_ttl_s: float = 120.0
    drift_window_charges: int = 20
    drift_bag_error_ratio: float = 1.5
    drift_psi_max: float = 0.25


@dataclass(frozen=True)
class Retention:
    """How long readings are kept (``retention:``; PostgreSQL, :mod:`qcllp.store.retention`).

    ``readings_days``: a month of readings is dropped once all of it is older than this many
    days (``None``: kept for ever). ``archive_dir``: where each month is written first, as a
    gzipped CSV in the measurements' long layout that ``qcllp ingest measurements`` takes back
    (``None``: dropped without a copy). ``cron``: when the retraining daemon applies it.
    Training never uses a charge older than ``readings_days``: its readings may be gone.
    """

    readings_days: int | None = None
    archive_dir: str | None = None
    cron: str = "30 2 * * *"


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

    ``methods`` maps a method name as written in the YAML to its grid; the pipeline resolves
    spellings (``alter_psvm`` = ``alter-psvm``).
    """

    default_method: str = DEFAULT_METHOD
    methods: Mapping[str, Mapping[str, list]] = field(default_factory=dict)
    cv: int = DEFAULT_CV_FOLDS
    random_state: int = DEFAULT_RANDOM_STATE
    any_defect: str = DEFAULT_ANY_DEFECT
    bootstrap: int = DEFAULT_BOOTSTRAP
    max_sticks: int = DEFAULT_MAX_STICKS


@dataclass(frozen=True)
class FileConnector:
    """A drop file or folder of measurement or defect-count files.

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
    kind: str = "measurements"
    columns: Mapping[str, str] = field(default_factory=dict)
    chunk_rows: int | None = None


@dataclass(frozen=True)
class Connectors:
    """Where the plant's data comes from: drop folders and SQL sources (all optional).

    ``future_tolerance_s``: how far past the time of ingestion a reading's timestamp may lie
    (clocks of plant systems drift); a later one is quarantined as ``future_timestamp``.
    """

    measurements: FileConnector | None = None
    defects: FileConnector | None = None
    sql: Mapping[str, SqlSource] = field(default_factory=dict)
    future_tolerance_s: float = DEFAULT_FUTURE_TOLERANCE_S


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
    encoding: str = "utf-8"  # of CSV input files; an ASCII-compatible codec (utf-8, cp1252, ...)
    currency: str = "EUR"  # of fail_cost / good_cost: how reports print money
    cluster: str | None = None  # Dask scheduler for training (qcllp.training.cluster); None: local
    statement_timeout_s: float = 600.0  # the longest one SQL statement may run (server databases)

    @property
    def classes(self) -> tuple[str, ...]:
        """Quality classes: ``("ok", *defect_types)``."""
        return ("ok", *self.defect_types)

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


# --------------------------------------------------------------------------------------------
# loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys instead of keeping the last one."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep=False):
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first at line {seen[key]})",
                key_node.start_mark,
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def example_config_path() -> Path:
    """The example plant shipped with the package (``plant_config/example.yaml``)."""
    return Path(str(resources.files("qcllp.plant").joinpath("example.yaml")))


def load_plant_config(path: str | Path) -> PlantConfig:
    """Read and validate a plant YAML file; raises :class:`ConfigError` naming file and key."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read file: {exc.strerror or exc}") from exc
    try:
        mapping = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(yaml)"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}: {where}: invalid YAML: {problem}") from exc
    config = parse_plant_config(mapping, source=source, base_dir=path.resolve().parent)
    return _with_path(config, path.resolve())


def _with_path(config: PlantConfig, path: Path) -> PlantConfig:
    from dataclasses import replace

    return replace(config, path=path)


def parse_plant_config(
    mapping: dict, source: str = "<dict>", base_dir: Path | None = None
) -> PlantConfig:
    """Validate a plant mapping (as read from YAML) and build a :class:`PlantConfig`.

    ``source`` names the file in error messages; ``base_dir`` is where relative paths resolve
    (default: the current working directory).
    """
    v = _Validator(source, Path(base_dir) if base_dir is not None else Path.cwd())
    config = v.plant(mapping)
    if v.errors:
        raise ConfigError(v.errors)
    assert config is not None
    return config


# --------------------------------------------------------------------------------------------
# validation

_MISSING = object()


class _Validator:
    """Walks the mapping, collecting ``"<source>: <key path>: <problem>"`` messages."""

    def __init__(self, source: str, base_dir: Path):
        self.source = source
        self.base_dir = base_dir
        self.errors: list[str] = []

    # -- primitives ------------------------------------------------------------------------
    def error(self, key: str, what: str) -> None:
        self.errors.append(f"{self.source}: {key or '<top>'}: {what}")

    def mapping(
        self, value: Any, key: str, required: Sequence[str], optional: Sequence[str]
    ) -> dict | None:
        if not isinstance(value, Mapping):
            self.error(key, f"must be a mapping, got {_type_name(value)}")
            return None
        allowed = [*required, *optional]
        for k in value:
            if k not in allowed:
                self.error(_join(key, k), f"unknown key; allowed: {', '.join(allowed)}")
        for k in required:
            if k not in value:
                self.error(_join(key, k), "missing required key")
        return dict(value)

    def string(self, m: Mapping, k: str, key: str, default: Any = _MISSING) -> str | None:
        value = m.get(k, default)
        if value is _MISSING:
            return None  # missing required key already reported
        if value is None and default is None:
            return None
        if not isinstance(value, str) or not value.strip():
            self.error(_join(key, k), f"must be a non-empty string, got {_describe(value)}")
            return None
        return value

    def name(self, m: Mapping, k: str, key: str) -> str | None:
        value = self.string(m, k, key)
        if value is not None and not _NAME_RE.match(value):
            self.error(
                _join(key, k),
                f"{value!r} is not a valid name (letters, digits and '_', not starting with a "
                "digit)",
            )
            return None
        return value

    def number(
        self,
        m: Mapping,
        k: str,
        key: str,
        default: Any = _MISSING,
        *,
        min_value: float | None = None,
        positive: bool = False,
    ) -> float | None:
        value = m.get(k, default)
        if value is _MISSING or value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            self.error(_join(key, k), f"must be a number, got {_describe(value)}")
            return None
        if not math.isfinite(value):
            self.error(_join(key, k), f"must be finite, got {value}")
            return None
        if positive and value <= 0:
            self.error(_join(key, k), f"must be > 0, got {value}")
            return None
        if min_value is not None and value < min_value:
            self.error(_join(key, k), f"must be >= {min_value:g}, got {value}")
            return None
        return float(value)

    def integer(self, m: Mapping, k: str, key: str, *, min_value: int | None = None) -> int | None:
        value = m.get(k)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(_join(key, k), f"must be an integer, got {_describe(value)}")
            return None
        if min_value is not None and value < min_value:
            self.error(_join(key, k), f"must be >= {min_value}, got {value}")
            return None
        return value

    def cron(self, m: Mapping, k: str, key: str, default: Any = _MISSING) -> str | None:
        value = self.string(m, k, key, default)
        if value is None:
            return None
        from apscheduler.triggers.cron import CronTrigger

        try:
            CronTrigger.from_crontab(value)
        except (ValueError, TypeError) as exc:
            self.error(_join(key, k), f"invalid cron string {value!r}: {exc}")
            return None
        return value

    def choice(self, m: Mapping, k: str, key: str, choices: Sequence[str]) -> str | None:
        value = m.get(k)
        if value is None:
            return None
        if value not in choices:
            self.error(_join(key, k), f"must be one of {', '.join(choices)}; got {value!r}")
            return None
        return value

    def path(self, m: Mapping, k: str, key: str) -> str | None:
        value = self.string(m, k, key)
        if value is None:
            return None
        p = Path(value).expanduser()
        return str(p if p.is_absolute() else (self.base_dir / p).resolve())

    def sequence(self, value: Any, key: str, *, non_empty: bool = True) -> list | None:
        if not isinstance(value, list):
            self.error(key, f"must be a list, got {_type_name(value)}")
            return None
        if non_empty and not value:
            self.error(key, "must not be empty")
            return None
        return value

    def unique(self, names: list[tuple[str, str | None]], what: str) -> None:
        seen: dict[str, str] = {}
        for key, name in names:
            if name is None:
                continue
            if name in seen:
                self.error(key, f"duplicate {what} {name!r} (also at {seen[name]})")
            else:
                seen[name] = key

    # -- sections --------------------------------------------------------------------------
    def plant(self, raw: Any) -> PlantConfig | None:
        m = self.mapping(
            raw,
            "",
            required=["name", "stations", "defect_types"],
            optional=[
                "timezone",
                "encoding",
                "currency",
                "database_url",
                "connectors",
                "schedules",
                "training",
                "scorer",
                "retrainer",
                "cluster",
                "statement_timeout_s",
                "retention",
            ],
        )
        if m is None:
            return None
        name = self.string(m, "name", "")
        timezone = self.timezone(m)
        encoding = self.encoding(m)
        currency = self.string(m, "currency", "", default="EUR")
        if currency is not None and not 1 <= len(currency.strip()) <= 8:
            self.error("currency", f"must be a short code or sign such as EUR, got {currency!r}")
        defect_types = self.defect_types(m.get("defect_types", _MISSING))
        stations_raw = self.stations_raw(m.get("stations", _MISSING))
        schedules = self.schedules(m.get("schedules", {}), stations_raw)
        stations = tuple(
            Station(
                name=s["name"],
                sensors=s["sensors"],
                fail_cost=s["fail_cost"],
                good_cost=s["good_cost"],
                scoring_interval_s=(
                    schedules.scoring_interval_s.get(s["name"], DEFAULT_SCORING_INTERVAL_S)
                    if schedules
                    else DEFAULT_SCORING_INTERVAL_S
                ),
                settle_s=s["settle_s"],
                timeout_s=s["timeout_s"],
            )
            for s in stations_raw
        )
        scorer = self.scorer(m.get("scorer", {}))
        retrainer = self.retrainer(m.get("retrainer", {}), stations=stations)
        database_url = self.database_url(m, name)
        connectors = self.connectors(m.get("connectors", {}))
        training = self.training(m.get("training", {}))
        cluster = self.cluster(m.get("cluster"))
        statement_timeout_s = self.number(
            m, "statement_timeout_s", "", default=DEFAULT_STATEMENT_TIMEOUT_S, positive=True
        )
        retention = self.retention(m.get("retention", {}), database_url)
        if self.errors:
            return None
        return PlantConfig(
            name=name,
            path=None,
            stations=stations,
            defect_types=defect_types,
            database_url=database_url,
            timezone=timezone,
            connectors=connectors,
            schedules=schedules,
            training=training,
            scorer=scorer,
            retrainer=retrainer,
            encoding=encoding,
            currency=(currency or "EUR").strip(),
            cluster=cluster,
            statement_timeout_s=statement_timeout_s,
            retention=retention,
        )

    def retention(self, raw: Any, database_url: str | None) -> Retention:
        m = self.mapping(
            raw, "retention", required=[], optional=["readings_days", "archive_dir", "cron"]
        )
        d = Retention()
        if m is None:
            return d
        days = self.integer(m, "readings_days", "retention", min_value=1)
        archive = self.path(m, "archive_dir", "retention") if "archive_dir" in m else None
        cron = self.cron(m, "cron", "retention", default=d.cron)
        if days is not None and database_url is not None and database_url.startswith("sqlite"):
            self.error(
                "retention.readings_days",
                "needs a PostgreSQL database (it drops monthly partitions of the readings); "
                "this plant's database is SQLite",
            )
        return Retention(readings_days=days, archive_dir=archive, cron=cron or d.cron)

    def cluster(self, value: Any) -> str | None:
        """The Dask scheduler that training runs on; ``None`` (absent, or ``cluster:`` left
        empty): on this machine."""
        if value is None:
            return None
        problem = scheduler_address_problem(value)
        if problem is not None:
            self.error("cluster", problem)
            return None
        return value.strip()

    def encoding(self, m: Mapping) -> str | None:
        """The CSV files' encoding: a codec Python knows that reads ASCII bytes as ASCII, because
        the CSV reader splits fields on the raw bytes (so UTF-16 is refused, cp1252 is fine)."""
        name = self.string(m, "encoding", "", default="utf-8")
        if name is None:
            return None
        try:
            ascii_compatible = bytes(range(128)).decode(name) == _ASCII
        except LookupError:
            self.error("encoding", f"unknown encoding {name!r} (e.g. utf-8, latin-1, cp1252)")
            return None
        except UnicodeError:
            ascii_compatible = False
        if not ascii_compatible:
            self.error(
                "encoding",
                f"{name!r} does not read ASCII bytes as ASCII; export the files as utf-8 "
                "(or latin-1, cp1252)",
            )
            return None
        return name

    def timezone(self, m: Mapping) -> str | None:
        tz = self.string(m, "timezone", "", default="UTC")
        if tz is None:
            return None
        try:
            zoneinfo.ZoneInfo(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            self.error(
                "timezone", f"unknown time zone {tz!r} (use an IANA name, e.g. Europe/Berlin)"
            )
            return None
        return tz

    def defect_types(self, raw: Any) -> tuple[str, ...] | None:
        if raw is _MISSING:
            return None
        items = self.sequence(raw, "defect_types")
        if items is None:
            return None
        names: list[tuple[str, str | None]] = []
        for i, item in enumerate(items):
            key = f"defect_types[{i}]"
            if not isinstance(item, str) or not _NAME_RE.match(item):
                self.error(key, f"must be a name (letters, digits, '_'), got {_describe(item)}")
                names.append((key, None))
            elif item == "ok" or item in _RESERVED_COLUMNS:
                self.error(key, f"{item!r} is reserved ('ok' is the implicit good class)")
                names.append((key, None))
            else:
                names.append((key, item))
        self.unique(names, "defect type")
        return tuple(n for _, n in names if n is not None)

    def stations_raw(self, raw: Any) -> list[dict]:
        if raw is _MISSING:
            return []
        items = self.sequence(raw, "stations")
        if items is None:
            return []
        out = []
        for i, item in enumerate(items):
            key = f"stations[{i}]"
            s = self.mapping(
                item,
                key,
                required=["name", "sensors", "fail_cost", "good_cost"],
                optional=["scoring_interval_s", "completion"],
            )
            if s is None:
                continue
            settle, timeout = self.completion(s.get("completion", {}), _join(key, "completion"))
            out.append(
                {
                    "key": key,
                    "name": self.name(s, "name", key),
                    "sensors": self.sensors(s.get("sensors", _MISSING), _join(key, "sensors")),
                    "fail_cost": self.number(s, "fail_cost", key, min_value=0.0),
                    "good_cost": self.number(s, "good_cost", key, min_value=0.0),
                    "scoring_interval_s": self.number(
                        s, "scoring_interval_s", key, default=None, positive=True
                    ),
                    "settle_s": settle,
                    "timeout_s": timeout,
                }
            )
        self.unique([(s["key"] + ".name", s["name"]) for s in out], "station name")
        return out

    def completion(self, raw: Any, key: str) -> tuple[float, float]:
        m = self.mapping(raw, key, required=[], optional=["settle_s", "timeout_s"])
        if m is None:
            return DEFAULT_SETTLE_S, DEFAULT_TIMEOUT_S
        settle = self.number(m, "settle_s", key, default=DEFAULT_SETTLE_S, min_value=0.0)
        timeout = self.number(m, "timeout_s", key, default=DEFAULT_TIMEOUT_S, positive=True)
        settle = DEFAULT_SETTLE_S if settle is None else settle
        timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
        if timeout < settle:
            self.error(_join(key, "timeout_s"), f"must be >= settle_s ({settle:g}), got {timeout}")
        return settle, timeout

    def scorer(self, raw: Any) -> Scorer:
        fields = ["host", "base_port", "max_lag_s", "max_batch_sticks", "sink_dir"]
        fields += ["guard_min_sticks", "count_guard_interval"]
        m = self.mapping(raw, "scorer", required=[], optional=fields)
        if m is None:
            return Scorer()
        default = Scorer()
        host = self.string(m, "host", "scorer") if "host" in m else default.host
        port = self.integer(m, "base_port", "scorer", min_value=1)
        lag = self.number(m, "max_lag_s", "scorer", default=None, positive=True)
        batch = self.integer(m, "max_batch_sticks", "scorer", min_value=1)
        sink = self.path(m, "sink_dir", "scorer") if "sink_dir" in m else None
        guard = self.integer(m, "guard_min_sticks", "scorer", min_value=1)
        interval = self.number(m, "count_guard_interval", "scorer", default=None, positive=True)
        return Scorer(
            host=host or default.host,
            base_port=default.base_port if port is None else port,
            max_lag_s=default.max_lag_s if lag is None else lag,
            max_batch_sticks=default.max_batch_sticks if batch is None else batch,
            sink_dir=sink,
            guard_min_sticks=default.guard_min_sticks if guard is None else guard,
            count_guard_interval=(default.count_guard_interval if interval is None else interval),
        )

    def retrainer(self, raw: Any, *, stations: tuple[Station, ...]) -> Retrainer:
        fields = ["host", "port", "stations", "training_charges", "holdout_charges"]
        fields += ["min_holdout_charges"]
        fields += ["promotion_margin", "misfire_grace_s", "lease_ttl_s", "drift"]
        m = self.mapping(raw, "retrainer", required=[], optional=fields)
        d = Retrainer()
        if m is None:
            return d
        key = "retrainer"
        names = [s.name for s in stations]
        chosen: list[str] = []
        if "stations" in m:
            for i, name in enumerate(self.sequence(m["stations"], f"{key}.stations") or []):
                if name not in names:
                    self.error(f"{key}.stations[{i}]", f"unknown station {name!r}")
                else:
                    chosen.append(name)
        drift = (
            self.mapping(
                m.get("drift", {}),
                f"{key}.drift",
                required=[],
                optional=["window_charges", "bag_error_ratio", "psi_max"],
            )
            or {}
        )

        def pick(value: Any, default: Any) -> Any:
            return default if value is None else value

        return Retrainer(
            host=self.string(m, "host", key) if "host" in m else d.host,
            port=pick(self.integer(m, "port", key, min_value=1), d.port),
            stations=tuple(chosen),
            training_charges=pick(
                self.integer(m, "training_charges", key, min_value=0), d.training_charges
            ),
            holdout_charges=pick(
                self.integer(m, "holdout_charges", key, min_value=2), d.holdout_charges
            ),
            min_holdout_charges=pick(
                self.integer(m, "min_holdout_charges", key, min_value=2), d.min_holdout_charges
            ),
            promotion_margin=pick(
                self.number(m, "promotion_margin", key, default=None, min_value=0.0),
                d.promotion_margin,
            ),
            misfire_grace_s=pick(
                self.number(m, "misfire_grace_s", key, default=None, positive=True),
                d.misfire_grace_s,
            ),
            lease_ttl_s=pick(
                self.number(m, "lease_ttl_s", key, default=None, positive=True), d.lease_ttl_s
            ),
            drift_window_charges=pick(
                self.integer(drift, "window_charges", f"{key}.drift", min_value=2),
                d.drift_window_charges,
            ),
            drift_bag_error_ratio=pick(
                self.number(drift, "bag_error_ratio", f"{key}.drift", default=None, positive=True),
                d.drift_bag_error_ratio,
            ),
            drift_psi_max=pick(
                self.number(drift, "psi_max", f"{key}.drift", default=None, positive=True),
                d.drift_psi_max,
            ),
        )

    def sensors(self, raw: Any, key: str) -> tuple[Sensor, ...]:
        if raw is _MISSING:
            return ()
        items = self.sequence(raw, key)
        if items is None:
            return ()
        sensors, names = [], []
        for i, item in enumerate(items):
            k = f"{key}[{i}]"
            s = self.mapping(item, k, required=["name", "unit", "min", "max"], optional=[])
            if s is None:
                continue
            name = self.name(s, "name", k)
            unit = self.string(s, "unit", k)
            lo = self.number(s, "min", k)
            hi = self.number(s, "max", k)
            names.append((_join(k, "name"), name))
            if lo is not None and hi is not None and lo >= hi:
                self.error(_join(k, "min"), f"min ({lo:g}) must be < max ({hi:g})")
                continue
            if None not in (name, unit, lo, hi):
                sensors.append(Sensor(name=name, unit=unit, min=lo, max=hi))
        self.unique(names, "sensor name")
        return tuple(sensors)

    def schedules(self, raw: Any, stations: list[dict]) -> Schedules | None:
        m = self.mapping(
            raw,
            "schedules",
            required=[],
            optional=[
                "ingest_interval_s",
                "ingest_cron",
                "retrain_cron",
                "retrain_interval_s",
                "scoring_interval_s",
            ],
        )
        if m is None:
            return None
        interval = self.number(m, "ingest_interval_s", "schedules", default=None, positive=True)
        cron = self.cron(m, "ingest_cron", "schedules", default=None)
        if m.get("ingest_interval_s") is not None and m.get("ingest_cron") is not None:
            self.error("schedules.ingest_cron", "give either ingest_interval_s or ingest_cron")
        if interval is None and m.get("ingest_cron") is None:
            interval = DEFAULT_INGEST_INTERVAL_S
        retrain = self.cron(m, "retrain_cron", "schedules", default=DEFAULT_RETRAIN_CRON)
        retrain_every = self.number(
            m, "retrain_interval_s", "schedules", default=None, positive=True
        )
        if m.get("retrain_interval_s") is not None and m.get("retrain_cron") is not None:
            self.error("schedules.retrain_cron", "give either retrain_interval_s or retrain_cron")
        scoring_default = self.number(
            m, "scoring_interval_s", "schedules", default=DEFAULT_SCORING_INTERVAL_S, positive=True
        )
        scoring = {
            s["name"]: s["scoring_interval_s"] or scoring_default or DEFAULT_SCORING_INTERVAL_S
            for s in stations
            if s["name"] is not None
        }
        return Schedules(
            ingest_interval_s=interval,
            ingest_cron=cron,
            retrain_cron=retrain or DEFAULT_RETRAIN_CRON,
            scoring_interval_s=scoring,
            retrain_interval_s=retrain_every,
        )

    def database_url(self, m: Mapping, name: str | None) -> str | None:
        url = self.string(m, "database_url", "", default=None)
        if url is None:
            if "database_url" in m and m["database_url"] is not None:
                return None  # invalid, reported
            stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name or "plant")
            return f"sqlite:///{(self.base_dir / f'{stem}.sqlite').resolve()}"
        checked = self.sqlalchemy_url(url, "database_url")
        if checked is not None and not self.no_password(checked, "database_url", None):
            return None
        return checked

    def no_password(self, url: str, key: str, source: str | None) -> bool:
        """Whether ``url`` holds no password; else the error says where it belongs instead:
        the plant database's variables (``source`` None) or SQL source ``source``'s."""
        from qcllp.store.credentials import DATABASE, password_places, source_prefix

        places = password_places(url)  # the user part, ?password=, a password= in a value
        if not places:
            return True
        variable = DATABASE if source is None else source_prefix(source)
        self.error(
            key,
            f"holds a password (in {', '.join(places)}), which does not belong in the plant "
            "config: set "
            f"{variable}_PASSWORD, or {variable}_PASSWORD_FILE to a file only the "
            "service user can read, or use ~/.pgpass (qcllp.store.credentials)",
        )
        return False

    def sqlalchemy_url(self, url: str, key: str) -> str | None:
        """Check an SQLAlchemy URL; a relative SQLite file resolves against the config folder."""
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            parsed = make_url(url)
        except (ArgumentError, ValueError) as exc:  # ValueError: e.g. a port that is no number
            self.error(key, f"not a valid SQLAlchemy URL: {exc}")
            return None
        db = parsed.database
        if parsed.get_backend_name() == "sqlite" and db and db != ":memory:":
            p = Path(db).expanduser()
            if not db.startswith("file:") and not p.is_absolute():
                resolved = parsed.set(database=str((self.base_dir / p).resolve()))
                return resolved.render_as_string(hide_password=False)
        return url

    def connectors(self, raw: Any) -> Connectors:
        m = self.mapping(
            raw,
            "connectors",
            required=[],
            optional=["measurements", "defects", "sql", "future_tolerance_s"],
        )
        if m is None:
            return Connectors()
        tolerance = self.future_tolerance(m)
        measurements = defects = None
        if m.get("measurements") is not None:
            measurements = self.file_connector(
                m["measurements"],
                "connectors.measurements",
                extra=["layout", "chunk_rows"],
            )
        if m.get("defects") is not None:
            defects = self.file_connector(m["defects"], "connectors.defects", extra=[])
        sql: dict[str, SqlSource] = {}
        if m.get("sql") is not None:
            names = list(m["sql"]) if isinstance(m["sql"], Mapping) else []
            sources = self.mapping(m["sql"], "connectors.sql", required=[], optional=names)
            for name, src in (sources or {}).items():
                source = self.sql_source(str(name), src, f"connectors.sql.{name}")
                if source is not None:
                    sql[str(name)] = source
        return Connectors(
            measurements=measurements, defects=defects, sql=sql, future_tolerance_s=tolerance
        )

    def future_tolerance(self, m: Mapping) -> float:
        """``connectors.future_tolerance_s``: 0 up to :data:`MAX_FUTURE_TOLERANCE_S`."""
        key, name = "connectors", "future_tolerance_s"
        value = self.number(m, name, key, default=DEFAULT_FUTURE_TOLERANCE_S, min_value=0)
        if value is not None and value > MAX_FUTURE_TOLERANCE_S:
            self.error(
                _join(key, name),
                f"must be at most {MAX_FUTURE_TOLERANCE_S} (31 days), got {m[name]}",
            )
        return DEFAULT_FUTURE_TOLERANCE_S if value is None else value

    def file_connector(self, raw: Any, key: str, extra: list[str]) -> FileConnector | None:
        optional = ["format", "pattern", "archive", *extra]
        m = self.mapping(raw, key, required=["path"], optional=optional)
        if m is None:
            return None
        path = self.path(m, "path", key)
        fmt = self.choice(m, "format", key, ["csv", "parquet"])
        layout = self.choice(m, "layout", key, ["long", "wide"]) if "layout" in extra else None
        pattern = self.string(m, "pattern", key) if "pattern" in m else None
        chunk_rows = self.integer(m, "chunk_rows", key, min_value=1) if "chunk_rows" in m else None
        archive = self.path(m, "archive", key) if "archive" in m else None
        if path is None:
            return None
        if archive is not None and Path(archive).resolve() == Path(path).resolve():
            self.error(_join(key, "archive"), "must be another folder than path")
        return FileConnector(
            path=path,
            format=fmt,
            pattern=pattern,
            layout=(layout or "long") if "layout" in extra else None,
            chunk_rows=chunk_rows,
            archive=archive,
        )

    def sql_source(self, name: str, raw: Any, key: str) -> SqlSource | None:
        m = self.mapping(
            raw,
            key,
            required=["url", "watermark"],
            optional=["table", "query", "kind", "columns", "chunk_rows"],
        )
        if m is None:
            return None
        url = self.string(m, "url", key)
        if url is not None:
            checked = self.sqlalchemy_url(url, _join(key, "url"))
            url = checked or url
            if checked is not None:
                self.no_password(checked, _join(key, "url"), name)
        watermark = self.string(m, "watermark", key)
        if ("table" in m) == ("query" in m):
            self.error(_join(key, "table"), "give exactly one of 'table' or 'query'")
        table = self.string(m, "table", key) if "table" in m else None
        query = self.string(m, "query", key) if "query" in m else None
        kind = self.choice(m, "kind", key, ["measurements", "defects"])
        columns = m.get("columns") or {}
        if "columns" in m and (
            not isinstance(m["columns"], Mapping)
            or not all(isinstance(a, str) and isinstance(b, str) for a, b in columns.items())
        ):
            self.error(_join(key, "columns"), "must map column names to source column names")
            columns = {}
        chunk_rows = self.integer(m, "chunk_rows", key, min_value=1) if "chunk_rows" in m else None
        if url is None or watermark is None:
            return None
        return SqlSource(
            name=name,
            url=url,
            watermark=watermark,
            table=table,
            query=query,
            kind=kind or "measurements",
            columns=dict(columns),
            chunk_rows=chunk_rows,
        )

    def training(self, raw: Any) -> Training:
        m = self.mapping(
            raw,
            "training",
            required=[],
            optional=[
                "default_method",
                "methods",
                "cv",
                "random_state",
                "any_defect",
                "bootstrap",
                "max_sticks",
            ],
        )
        if m is None:
            return Training()
        default = self.string(m, "default_method", "training") if "default_method" in m else None
        cv = self.integer(m, "cv", "training", min_value=2)
        seed = self.integer(m, "random_state", "training", min_value=0)
        any_defect = self.choice(m, "any_defect", "training", ANY_DEFECT_MODES)
        bootstrap = self.integer(m, "bootstrap", "training", min_value=2)
        max_sticks = self.integer(m, "max_sticks", "training", min_value=1)
        methods = m.get("methods")
        grids: dict[str, dict[str, list]] = {}
        if methods is not None:
            if not isinstance(methods, Mapping):
                self.error("training.methods", f"must be a mapping, got {_type_name(methods)}")
            else:
                for meth, grid in methods.items():
                    k = f"training.methods.{meth}"
                    if grid is None:
                        continue
                    if not isinstance(grid, Mapping):
                        self.error(k, f"must map parameter names to lists, got {_type_name(grid)}")
                        continue
                    for p, values in grid.items():
                        if not isinstance(values, list) or not values:
                            self.error(f"{k}.{p}", "must be a non-empty list of values")
                        else:
                            grids.setdefault(str(meth), {})[str(p)] = list(values)
            named = isinstance(default, str) and default != "auto" and default not in methods
            if isinstance(methods, Mapping) and named:
                self.error(
                    "training.default_method",
                    f"{default!r} is not among training.methods ({', '.join(map(str, methods))})",
                )
        return Training(
            default_method=default or DEFAULT_METHOD,
            methods=grids,
            cv=DEFAULT_CV_FOLDS if cv is None else cv,
            random_state=DEFAULT_RANDOM_STATE if seed is None else seed,
            any_defect=any_defect or DEFAULT_ANY_DEFECT,
            bootstrap=DEFAULT_BOOTSTRAP if bootstrap is None else bootstrap,
            max_sticks=DEFAULT_MAX_STICKS if max_sticks is None else max_sticks,
        )


def exposed_host_warning(key: str, host: str) -> str | None:
    """A warning when the HTTP endpoint at ``key`` (``scorer.host``, ``retrainer.host``) listens
    beyond this machine: ``/healthz`` and ``/metrics`` have no authentication and are meant for
    the local agent that scrapes them. ``None`` for a loopback address or ``localhost``. Not an
    error: a plant may scrape over a network it trusts, but it should say so knowingly."""
    if host == "localhost" or host.endswith(".localhost"):
        return None
    try:
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return None
    except ValueError:
        pass  # a host name: it resolves beyond the loopback interface as far as we know
    reach = "every interface" if host in ("0.0.0.0", "::", "[::]", "") else host
    return (
        f"{key}: {host} makes /healthz and /metrics reachable from the network ({reach}) "
        "without authentication; use 127.0.0.1 unless a trusted scraper needs it"
    )


def scheduler_address_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as a Dask scheduler address, or ``None`` when it is one:
    ``tcp://HOST:PORT`` (or ``tls://``). Checked here, not by connecting, so that a typo fails
    when the config is loaded rather than at the night's retraining."""
    example = "such as tcp://scheduler.example:8786"
    if not isinstance(value, str):
        return f"must be a Dask scheduler address {example}, got {_describe(value)}"
    found = _SCHEDULER_RE.match(value.strip())
    if found is None:
        return f"must be a Dask scheduler address {example}, got {value!r}"
    if not 1 <= int(found.group(3)) <= 65535:
        return f"port must be 1..65535, got {value!r}"
    return None


def _by_name(items: Sequence[Any], name: str) -> Any:
    """The first item whose ``.name`` is ``name``, else None."""
    return next((item for item in items if item.name == name), None)


def _join(key: str, k: Any) -> str:
    return f"{key}.{k}" if key else str(k)


def _type_name(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def _describe(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"
