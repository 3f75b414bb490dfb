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
        inspection_cost: float >= 0   # optional; one stick looked at (default 5 % of good_cost)
        audit_share: float in [0, 1]  # optional; eligible sticks marked inspect (default 1)
        trial_audit_share: float in [0, 1]  # optional; a shadow's would-be lock-outs (default 1)
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
      mqtt: {host, port, client_id, username, tls, ca_file, readings_topic, flags_topic,
             publish_flags, batch_max_messages, batch_max_s, keepalive_s, host_http,
             port_http}          # the line's broker: qcllp serve intake, flags out
      opcua: {endpoint, username, security, security_mode, certificate, private_key,
              server_certificate, timeout_s, poll_s, ack_timeout_s, session_timeout_s,
              stations: {<station>: {mode: write|method,
                                     nodes: {flag_id, ack, charge_id, stick_id, decision,
                                             probability},        # write
                                     object, method}}}            # method
                                  # the line's PLC: flags out over OPC UA (qcllp[opcua])
    schedules:                        # optional
      ingest_interval_s: float > 0    # default 300 when no ingest_cron is given
      ingest_cron: str                # crontab string, alternative to the interval
      retrain_cron: str               # crontab string (default "0 3 * * *")
      retrain_interval_s: float > 0   # alternative to retrain_cron (tests, fast-moving lines)
      scoring_interval_s: float > 0   # default for stations (default 1)
    scorer:                           # optional: the station scoring services
      {host, base_port, max_lag_s, max_batch_sticks, sink_dir, guard_min_sticks, ...}
    retrainer:                        # optional: the retraining daemon (qcllp serve retrainer)
      {host, port, stations, training_charges, holdout_charges, min_holdout_charges,
       promotion_margin, misfire_grace_s, lease_ttl_s, shadow_trials, shadow_confirm,
       shadow_min_charges, shadow_min_audits, shadow_max_charges, shadow_confirm_level,
       shadow_check_interval_s,
       drift: {window_charges, bag_error_ratio, psi_max}}
    bay:                              # optional: the lock-out bay page (qcllp serve bay)
      {host, port, session_days}
    training:                         # optional
      default_method: str             # one of ``methods``, or "auto" (try each, keep the best)
      methods: {<method>: {<param>: [values, ...]}}
      cv: int >= 2
      random_state: int
      any_defect: per-type-sum | per-type-noisy-or | direct | auto
      bootstrap: int >= 2               # resamples for the lock-out rule (default 30)
      max_sticks: int >= 1              # train on a seeded subset of whole charges when the
                                        # labeled ones hold more sticks (default 500,000)
      n_jobs: int >= 1 or -1            # processes a training fits on here (default 1)

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
* Nothing is coerced: ``"5"`` is no number and ``yes`` no number either. An optional number
  left empty (``key:``) takes its default; an empty text is refused.
* Rules spanning keys of different sections (a known ``retrainer.stations`` entry, retention
  on PostgreSQL) read the file as written, so they are reported with the other problems.

Why pydantic (v2): the schema is declared once, as typed models (:mod:`.document`), and from
them come the validation, the JSON Schema an editor checks a plant file with (``qcllp config
schema``), the key reference of docs/config.md, and the one default of each key, where a
hand-written validator kept defaults, checks and documentation in three places. What pydantic
does not say the way a plant engineer needs it is added around it: the one-line messages with
the key path (:mod:`.problems`), the value checks in the loader's words (:mod:`.fields`),
and the rules spanning several keys, reported together with the others. No setting comes from
the environment here (passwords are read by :mod:`qcllp.store.credentials`, and a password in
the YAML is refused), so there is no pydantic-settings.

Modules: :mod:`.document` and :mod:`.sections` (the YAML models), :mod:`.fields` (value
types), :mod:`.checks` (single-value checks, also used by the CLI and the services),
:mod:`.problems` (the error lines), :mod:`.message_bus` and :mod:`.plc` (the MQTT broker's
and the PLC's sections), :mod:`.model` (the frozen dataclasses the code uses),
:mod:`.loader` (file to config), :mod:`.reference` (JSON Schema and the docs' key tables).
"""

from qcllp.plant.config.checks import exposed_host_warning, scheduler_address_problem
from qcllp.plant.config.document import ANY_DEFECT_MODES, MAX_FUTURE_TOLERANCE_S, default_of
from qcllp.plant.config.document import Completion as _Completion
from qcllp.plant.config.document import Connectors as _Connectors
from qcllp.plant.config.document import Plant as _Plant
from qcllp.plant.config.document import Schedules as _Schedules
from qcllp.plant.config.document import Training as _Training
from qcllp.plant.config.loader import (
    check_plant_config,
    example_config_path,
    load_plant_config,
    parse_plant_config,
)
from qcllp.plant.config.model import (
    Bay,
    Connectors,
    FileConnector,
    MqttConnector,
    OpcuaConnector,
    PlantConfig,
    PlcStation,
    Retention,
    Retrainer,
    Schedules,
    Scorer,
    Sensor,
    SqlSource,
    Station,
    Training,
)
from qcllp.plant.config.problems import ConfigError

__all__ = [
    "ANY_DEFECT_MODES",
    "MAX_FUTURE_TOLERANCE_S",
    "Bay",
    "ConfigError",
    "Connectors",
    "FileConnector",
    "MqttConnector",
    "OpcuaConnector",
    "PlantConfig",
    "PlcStation",
    "Schedules",
    "Sensor",
    "Retrainer",
    "Retention",
    "Scorer",
    "SqlSource",
    "Station",
    "Training",
    "check_plant_config",
    "example_config_path",
    "exposed_host_warning",
    "load_plant_config",
    "parse_plant_config",
    "scheduler_address_problem",
]

# the defaults other modules name (each declared once, in its field of .document)
DEFAULT_RETRAIN_CRON = default_of(_Schedules, "retrain_cron")
DEFAULT_STATEMENT_TIMEOUT_S = default_of(_Plant, "statement_timeout_s")
DEFAULT_INGEST_INTERVAL_S = default_of(_Schedules, "ingest_interval_s")
DEFAULT_FUTURE_TOLERANCE_S = default_of(_Connectors, "future_tolerance_s")
DEFAULT_SCORING_INTERVAL_S = default_of(_Schedules, "scoring_interval_s")
DEFAULT_SETTLE_S = default_of(_Completion, "settle_s")
DEFAULT_TIMEOUT_S = default_of(_Completion, "timeout_s")
DEFAULT_METHOD = default_of(_Training, "default_method")
DEFAULT_CV_FOLDS = default_of(_Training, "cv")
DEFAULT_ANY_DEFECT = default_of(_Training, "any_defect")
DEFAULT_BOOTSTRAP = default_of(_Training, "bootstrap")
DEFAULT_RANDOM_STATE = default_of(_Training, "random_state")
DEFAULT_MAX_STICKS = default_of(_Training, "max_sticks")
