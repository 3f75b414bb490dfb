"""Plant config: the example loads; every invalid file is rejected naming file, key and problem."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from qcllp.plant import ConfigError, load_plant_config, parse_plant_config
from qcllp.plant.config import Connectors, Retrainer, Training
from tests.plant.conftest import EXAMPLE


@pytest.fixture(scope="module")
def example_mapping() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def write_config(tmp_path: Path, mapping: dict, name: str = "plant.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    return path


def test_example_loads_with_four_stations_twelve_sensors_three_defect_types():
    config = load_plant_config(EXAMPLE)
    assert config.station_names == ("furnace", "rolling", "cooling", "straightening")
    assert sum(len(s.sensors) for s in config.stations) == 12
    assert config.classes == ("ok", "crack", "bend", "scale")
    assert all(s.unit and s.min < s.max for st in config.stations for s in st.sensors)
    fail_costs = [s.fail_cost for s in config.stations]
    assert fail_costs == sorted(fail_costs, reverse=True)  # later stations save less
    assert config.path == EXAMPLE
    assert config.timezone == "Europe/Berlin"
    assert config.schedules.retrain_cron == "30 2 * * *"
    assert config.schedules.scoring_interval_s["furnace"] == 1.0
    assert config.station("rolling").scoring_interval_s == 1.0
    furnace, rolling = config.station("furnace"), config.station("rolling")
    assert (furnace.settle_s, furnace.timeout_s) == (5.0, 600.0)  # the example's own rule
    assert (rolling.settle_s, rolling.timeout_s) == (2.0, 300.0)  # the defaults
    assert config.scorer.base_port == 9470 and config.scorer.max_batch_sticks == 5000


def test_a_completion_rule_that_gives_up_before_it_settles_is_refused(example_mapping):
    mapping = copy.deepcopy(example_mapping)
    mapping["stations"][0]["completion"] = {"settle_s": 10, "timeout_s": 5}
    with pytest.raises(ConfigError, match=r"completion.timeout_s: must be >= settle_s \(10\)"):
        parse_plant_config(mapping)


def test_relative_paths_resolve_against_the_config_folder_not_the_cwd(
    tmp_path, monkeypatch, example_mapping
):
    folder = tmp_path / "plant"
    folder.mkdir()
    mapping = copy.deepcopy(example_mapping)
    mapping["database_url"] = "sqlite:///db/plant.sqlite"
    path = write_config(folder, mapping)
    monkeypatch.chdir(tmp_path)
    config = load_plant_config("plant/plant.yaml")
    assert config.connectors.measurements.path == str(folder / "data" / "measurements")
    assert config.connectors.defects.path == str(folder / "data" / "defects")
    assert config.database_url == f"sqlite:///{folder / 'db' / 'plant.sqlite'}"
    assert config.path == path


def test_default_database_is_a_sqlite_file_next_to_the_config(tmp_path, example_mapping):
    config = load_plant_config(write_config(tmp_path, example_mapping))
    assert config.database_url == f"sqlite:///{tmp_path / 'example_mill.sqlite'}"


def test_server_database_url_is_kept_as_written(example_mapping):
    mapping = copy.deepcopy(example_mapping)
    mapping["database_url"] = "postgresql+psycopg://qcllp@db:5432/mill"
    config = parse_plant_config(mapping, "x.yaml", base_dir=Path("/somewhere"))
    assert config.database_url == "postgresql+psycopg://qcllp@db:5432/mill"


def test_a_password_in_the_database_url_is_refused_with_where_it_belongs(example_mapping):
    mapping = copy.deepcopy(example_mapping)
    mapping["database_url"] = "postgresql+psycopg://qcllp:secret@db:5432/mill"
    with pytest.raises(ConfigError) as caught:
        parse_plant_config(mapping, "x.yaml", base_dir=Path("/somewhere"))
    message = str(caught.value)
    assert "database_url" in message and "holds a password" in message
    assert "QCLLP_DATABASE_PASSWORD_FILE" in message
    assert "secret" not in message  # the error itself must not leak it into logs


def test_station_helpers_follow_line_order():
    config = load_plant_config(EXAMPLE)
    assert config.station_index("cooling") == 2
    assert [s.name for s in config.stations_up_to("rolling")] == ["furnace", "rolling"]
    assert config.station("rolling").sensor("force").unit == "kN"


def test_unknown_station_and_sensor_name_what_is_known():
    config = load_plant_config(EXAMPLE)
    with pytest.raises(ConfigError, match="unknown station 'qc'; known: furnace, rolling"):
        config.station("qc")
    with pytest.raises(KeyError, match="station 'rolling' has no sensor 'torque'"):
        config.station("rolling").sensor("torque")


def _set(path: str, value):
    """Mutation setting a dotted/indexed key path, e.g. 'stations.0.fail_cost'."""

    def mutate(m: dict) -> None:
        *parents, last = path.split(".")
        node = m
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        node[int(last) if last.isdigit() else last] = value

    return mutate


def _delete(path: str):
    def mutate(m: dict) -> None:
        *parents, last = path.split(".")
        node = m
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        del node[last]

    return mutate


BAD_CONFIGS = [
    ("unknown_key", _set("stations.0.colour", "red"), "stations[0].colour", "unknown key"),
    ("unknown_top_key", _set("owner", "me"), "owner", "unknown key"),
    ("missing_key", _delete("defect_types"), "defect_types", "missing required key"),
    (
        "missing_sensor_key",
        _delete("stations.1.sensors.0.unit"),
        "stations[1].sensors[0].unit",
        "missing required key",
    ),
    (
        "wrong_type_number",
        _set("stations.0.fail_cost", "cheap"),
        "stations[0].fail_cost",
        "must be a number",
    ),
    (
        "wrong_type_string",
        _set("stations.1.sensors.2.unit", 7),
        "stations[1].sensors[2].unit",
        "must be a non-empty string",
    ),
    ("wrong_type_list", _set("stations", {"furnace": {}}), "stations", "must be a list"),
    (
        "min_not_below_max",
        _set("stations.2.sensors.1.min", 60.0),
        "stations[2].sensors[1].min",
        "must be < max",
    ),
    (
        "duplicate_station",
        _set("stations.3.name", "cooling"),
        "stations[3].name",
        "duplicate station name 'cooling' (also at stations[2].name)",
    ),
    (
        "duplicate_sensor",
        _set("stations.0.sensors.1.name", "temperature"),
        "stations[0].sensors[1].name",
        "duplicate sensor name 'temperature'",
    ),
    ("negative_cost", _set("stations.1.good_cost", -5), "stations[1].good_cost", "must be >= 0"),
    (
        "bad_cron",
        _set("schedules.retrain_cron", "61 25 * *"),
        "schedules.retrain_cron",
        "invalid cron string",
    ),
    (
        "bad_cron_value",
        _set("schedules.retrain_cron", "0 25 * * *"),
        "schedules.retrain_cron",
        "invalid cron string",
    ),
    (
        "interval_and_cron",
        _set("schedules.ingest_cron", "*/5 * * * *"),
        "schedules.ingest_cron",
        "either ingest_interval_s or ingest_cron",
    ),
    ("bad_timezone", _set("timezone", "Mars/Olympus"), "timezone", "unknown time zone"),
    ("ok_is_implicit", _set("defect_types", ["crack", "ok"]), "defect_types[1]", "reserved"),
    (
        "duplicate_defect",
        _set("defect_types", ["crack", "crack"]),
        "defect_types[1]",
        "duplicate defect type",
    ),
    ("name_with_dot", _set("stations.0.name", "re.heat"), "stations[0].name", "not a valid name"),
    (
        "zero_interval",
        _set("schedules.scoring_interval_s", 0),
        "schedules.scoring_interval_s",
        "must be > 0",
    ),
    (
        "bad_format",
        _set("connectors.measurements.format", "xlsx"),
        "connectors.measurements.format",
        "must be one of csv, parquet",
    ),
    (
        "default_method_unknown",
        _set("training.default_method", "svm"),
        "training.default_method",
        "not among training.methods",
    ),
    (
        "no_training_processes",
        _set("training.n_jobs", 0),
        "training.n_jobs",
        "0 processes cannot train",
    ),
    (
        "training_processes_below_minus_one",
        _set("training.n_jobs", -2),
        "training.n_jobs",
        "must be >= -1, got -2",
    ),
    (
        "grid_not_list",
        _set("training.methods.inv_cal", {"C": 1.0}),
        "training.methods.inv_cal.C",
        "non-empty list",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "key", "problem"),
    [case[1:] for case in BAD_CONFIGS],
    ids=[case[0] for case in BAD_CONFIGS],
)
def test_invalid_config_error_names_file_key_path_and_problem(
    tmp_path, example_mapping, mutate, key, problem
):
    mapping = copy.deepcopy(example_mapping)
    mutate(mapping)
    path = write_config(tmp_path, mapping, "bad_plant.yaml")
    with pytest.raises(ConfigError) as info:
        load_plant_config(path)
    lines = [line for line in info.value.errors if f": {key}: " in line]
    assert lines, f"no error for {key!r} in:\n{info.value}"
    assert lines[0].startswith(f"{path}: {key}: ")
    assert problem in lines[0]


def test_all_problems_are_reported_at_once(tmp_path, example_mapping):
    mapping = copy.deepcopy(example_mapping)
    mapping["stations"][0]["fail_cost"] = -1
    mapping["stations"][2]["sensors"][0]["max"] = -10
    mapping["schedules"]["retrain_cron"] = "nightly"
    with pytest.raises(ConfigError) as info:
        load_plant_config(write_config(tmp_path, mapping))
    keys = [e.split(": ")[1] for e in info.value.errors]
    assert keys == ["stations[0].fail_cost", "stations[2].sensors[0].min", "schedules.retrain_cron"]


def test_duplicate_yaml_key_is_an_error_with_its_line(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("name: a\ndefect_types: [crack]\nname: b\n")
    with pytest.raises(ConfigError, match=r"dup\.yaml: line 3, column 1: .*duplicate key 'name'"):
        load_plant_config(path)


def test_unreadable_and_malformed_files_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"missing\.yaml: cannot read file"):
        load_plant_config(tmp_path / "missing.yaml")
    bad = tmp_path / "broken.yaml"
    bad.write_text("stations: [furnace\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml: line \d+, column \d+: invalid YAML"):
        load_plant_config(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match=r"empty\.yaml: <top>: must be a mapping, got nothing"):
        load_plant_config(empty)


def test_minimal_config_gets_documented_defaults():
    config = parse_plant_config(
        {
            "name": "mini",
            "defect_types": ["crack"],
            "stations": [
                {
                    "name": "furnace",
                    "fail_cost": 1,
                    "good_cost": 2,
                    "sensors": [{"name": "t", "unit": "degC", "min": 0, "max": 1}],
                }
            ],
        },
        base_dir=Path("/plants"),
    )
    assert config.timezone == "UTC"
    assert config.database_url == "sqlite:////plants/mini.sqlite"
    assert config.schedules.ingest_interval_s == 300.0
    assert config.schedules.ingest_cron is None
    assert config.schedules.retrain_cron == "0 3 * * *"
    assert config.station("furnace").scoring_interval_s == 1.0
    assert (config.station("furnace").settle_s, config.station("furnace").timeout_s) == (2.0, 300.0)
    assert config.scorer.host == "127.0.0.1" and config.scorer.max_lag_s == 60.0
    assert config.connectors == Connectors() and config.training == Training()
    assert config.training.default_method == "em-llp" and config.training.cv == 5
    assert config.path is None


def test_sql_source_is_checked_and_its_relative_sqlite_file_resolves(tmp_path, example_mapping):
    mapping = copy.deepcopy(example_mapping)
    mapping["connectors"]["sql"] = {
        "historian": {"url": "sqlite:///mes.sqlite", "table": "readings", "watermark": "id"},
        "mes": {"url": "postgresql+psycopg://r@mes/db", "query": "SELECT 1", "watermark": "t"},
    }
    config = load_plant_config(write_config(tmp_path, mapping))
    historian = config.connectors.sql["historian"]
    assert historian.url == f"sqlite:///{tmp_path / 'mes.sqlite'}"
    assert historian.kind == "measurements" and historian.name == "historian"
    assert config.connectors.sql["mes"].url == "postgresql+psycopg://r@mes/db"

    mapping["connectors"]["sql"] = {
        "bad": {"url": "not a url", "table": "t", "query": "SELECT 1", "kind": "stock"}
    }
    with pytest.raises(ConfigError) as info:
        load_plant_config(write_config(tmp_path, mapping))
    text = str(info.value)
    assert "connectors.sql.bad.watermark: missing required key" in text
    assert "connectors.sql.bad.url: not a valid SQLAlchemy URL" in text
    assert "connectors.sql.bad.table: give exactly one of 'table' or 'query'" in text
    assert "connectors.sql.bad.kind: must be one of measurements, defects" in text


def test_a_password_in_a_sql_sources_url_is_refused_naming_its_own_variables(
    tmp_path, example_mapping
):
    mapping = copy.deepcopy(example_mapping)
    mapping["connectors"]["sql"] = {
        "mes": {
            "url": "postgresql+psycopg://r:hunter2@mes/db",
            "query": "SELECT 1",
            "watermark": "t",
        }
    }
    with pytest.raises(ConfigError) as info:
        load_plant_config(write_config(tmp_path, mapping))
    text = str(info.value)
    assert "connectors.sql.mes.url: holds a password" in text
    assert "QCLLP_SOURCE_MES_PASSWORD_FILE" in text and "hunter2" not in text


def test_the_retrainer_section_is_read_and_checked(example_mapping):
    m = copy.deepcopy(example_mapping)
    m["retrainer"] = {
        "stations": ["cooling", "rolling"],
        "holdout_charges": 30,
        "training_charges": 0,
        "shadow_max_charges": 60,
        "drift": {"window_charges": 10, "psi_max": 0.4},
    }
    m["schedules"] = {"retrain_interval_s": 600}
    config = parse_plant_config(m, source="plant.yaml")
    r = config.retrainer
    assert r.stations == ("cooling", "rolling") and r.holdout_charges == 30
    assert r.training_charges == 0 and Retrainer().training_charges == 400
    assert r.min_holdout_charges == 8 and r.drift_window_charges == 10 and r.drift_psi_max == 0.4
    assert config.schedules.retrain_interval_s == 600
    assert r.shadow_max_charges == 60 and Retrainer().shadow_max_charges == 100
    m["retrainer"] = {
        "stations": ["coiler"],
        "holdout_charges": 1,
        "shadow_max_charges": 0,
        "drift": {"psi": 1},
    }
    m["schedules"] = {"retrain_interval_s": 600, "retrain_cron": "0 3 * * *"}
    with pytest.raises(ConfigError) as caught:
        parse_plant_config(m, source="plant.yaml")
    errors = caught.value.errors
    assert "plant.yaml: retrainer.stations[0]: unknown station 'coiler'" in errors
    assert "plant.yaml: retrainer.holdout_charges: must be >= 2, got 1" in errors
    assert "plant.yaml: retrainer.shadow_max_charges: must be >= 1, got 0" in errors
    assert any(e.startswith("plant.yaml: retrainer.drift.psi: unknown key") for e in errors)
    assert "plant.yaml: schedules.retrain_cron: give either retrain_interval_s or retrain_cron" in (
        errors
    )


def test_the_statement_timeout_has_a_default_and_must_be_positive(example_mapping):
    config = parse_plant_config(copy.deepcopy(example_mapping), "x.yaml", base_dir=Path("/x"))
    assert config.statement_timeout_s == 600.0
    mapping = copy.deepcopy(example_mapping)
    mapping["statement_timeout_s"] = 0
    with pytest.raises(ConfigError, match="statement_timeout_s: must be > 0, got 0"):
        parse_plant_config(mapping, "x.yaml", base_dir=Path("/x"))


def test_the_count_guard_interval_has_a_default_and_must_be_positive(example_mapping):
    config = parse_plant_config(copy.deepcopy(example_mapping), "x.yaml", base_dir=Path("/x"))
    assert config.scorer.count_guard_interval == 8.0
    for bad, message in ((0, "must be > 0, got 0"), ("eight", "must be a number")):
        mapping = copy.deepcopy(example_mapping)
        mapping["scorer"]["count_guard_interval"] = bad
        with pytest.raises(ConfigError, match=f"scorer.count_guard_interval: {message}"):
            parse_plant_config(mapping, "x.yaml", base_dir=Path("/x"))
