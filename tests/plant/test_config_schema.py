"""``qcllp config schema`` and ``qcllp config check`` as real processes, and the key reference
of docs/config.md: the JSON Schema an editor validates a plant file with accepts the shipped
examples and refuses what the loader refuses; the check says one line per problem without
touching a database; the docs' tables come from the same models and cover every key."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from qcllp.plant.config import (
    Bay,
    Connectors,
    Retention,
    Retrainer,
    Scorer,
    Training,
    parse_plant_config,
)
from qcllp.plant.config.reference import reference_table, sections
from tests.conftest import TINY_PLANT
from tests.plant.conftest import EXAMPLE
from tests.service.forked import run_qcllp

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "qcllp" / "plant" / "example.yaml"  # what `qcllp demo` runs


def qcllp(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_qcllp(list(args), cwd=cwd)


@pytest.fixture(scope="module")
def validator(tmp_path_factory) -> jsonschema.Draft202012Validator:
    """The validator an editor builds from ``qcllp config schema``'s output."""
    done = qcllp("config", "schema", cwd=tmp_path_factory.mktemp("schema"))
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)  # a valid JSON Schema itself
    return jsonschema.Draft202012Validator(schema)


def schema_errors(validator, document) -> list[str]:
    """``"<key path>: <message>"`` of each error the schema finds, with the errors behind an
    ``anyOf`` (an optional section is a mapping or nothing) as an editor lists them."""

    def walk(errors) -> list:
        return [x for e in errors for x in [e, *walk(e.context or [])]]

    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in walk(validator.iter_errors(document))
    ]


@pytest.mark.parametrize("path", [EXAMPLE, SHIPPED], ids=["plant_config", "packaged"])
def test_the_schema_accepts_the_example_plants(validator, path):
    assert schema_errors(validator, yaml.safe_load(path.read_text())) == []


def test_the_schema_accepts_the_tiny_test_plant(validator):
    assert schema_errors(validator, copy.deepcopy(TINY_PLANT)) == []


BAD = [
    ("unknown_key", ("stations", 0, "colour"), "red", "stations.0", "'colour' was unexpected"),
    ("unknown_section", ("owner",), "me", "", "'owner' was unexpected"),
    ("text_for_number", ("stations", 0, "fail_cost"), "cheap", "stations.0.fail_cost", "number"),
    ("bool_for_number", ("scorer", "max_lag_s"), True, "scorer.max_lag_s", "number"),
    ("negative_cost", ("stations", 1, "good_cost"), -5, "stations.1.good_cost", "minimum"),
    ("float_for_int", ("training", "cv"), 2.5, "training.cv", "integer"),
    ("bad_choice", ("connectors", "measurements", "format"), "xlsx", "format", "is not one of"),
    ("dotted_name", ("stations", 0, "name"), "re.heat", "stations.0.name", "does not match"),
    ("empty_sensors", ("stations", 0, "sensors"), [], "stations.0.sensors", "should be non-empty"),
]


@pytest.mark.parametrize(
    ("where", "value", "path", "says"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_the_schema_refuses_what_the_loader_refuses(validator, where, value, path, says):
    """Each bad file is refused by the schema (naming the key) and by the loader alike."""
    mapping = yaml.safe_load(EXAMPLE.read_text())
    node = mapping
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    found = schema_errors(validator, mapping)
    assert any(path in e and says in e for e in found), found
    with pytest.raises(ValueError, match=re.escape(str(where[-1]))):
        parse_plant_config(mapping, source="plant.yaml")


def test_config_check_says_ok_and_creates_no_database(tmp_path):
    plant = tmp_path / "plant"
    plant.mkdir()
    path = plant / "mill.yaml"
    path.write_text(EXAMPLE.read_text())
    done = qcllp("config", "check", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{path}: ok (plant example_mill, 4 stations)"
    assert done.stderr == ""
    assert not [p for p in tmp_path.rglob("*") if p.suffix in (".sqlite", ".db")]


def test_config_check_lists_every_problem_one_line_each_and_exits_1(tmp_path):
    mapping = yaml.safe_load(EXAMPLE.read_text())
    mapping["stations"][2]["sensors"][0]["max"] = -10
    mapping["stations"][1]["colour"] = "red"
    mapping["database_url"] = "sqlite:///mill.sqlite"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    done = qcllp("config", "check", str(path), cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"{path}: stations[1].colour: unknown key; allowed: name, fail_cost, good_cost, "
        "inspection_cost, audit_share, trial_audit_share, scoring_interval_s, completion, "
        "sensors",
        f"{path}: stations[2].sensors[0].min: min (0) must be < max (-10)",
    ]
    assert not (tmp_path / "mill.sqlite").exists()


def test_config_check_json_names_the_problems(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ndefect_types: [crack]\nstations: []\n")
    done = qcllp("config", "check", str(path), "--json", cwd=tmp_path)
    assert done.returncode == 1
    assert json.loads(done.stdout) == {
        "file": str(path),
        "ok": False,
        "errors": [f"{path}: stations: must not be empty"],
    }


def test_the_docs_have_a_table_of_every_section_and_every_key():
    """docs/config.md names a generated table for each section (the MkDocs hook fails the
    build otherwise), and the tables hold every key of the schema with its default."""
    page = (ROOT / "docs" / "config.md").read_text()
    assert set(re.findall(r"<!-- plant-config-keys (\w+) -->", page)) == {"plant", *sections()}
    assert "| `name` | string | required |" in reference_table()
    assert "| `max_sticks` | integer >= 1 | `500000` |" in reference_table("training")
    assert "| `sensors[].min` | number | required |" in reference_table("stations")
    assert "| `sql.<name>.kind` | one of measurements, defects, inspections | `measurements` |" in (
        reference_table("connectors")
    )
    assert "| `drift.psi_max` | number > 0 | `0.25` |" in reference_table("retrainer")
    assert "| `port` | integer >= 1 | `9467` |" in reference_table("bay")


def test_a_section_left_out_gets_the_defaults_of_the_objects_the_code_builds():
    """One default per key: the YAML's (the models') and the dataclasses' are the same."""
    config = parse_plant_config(copy.deepcopy(TINY_PLANT), base_dir=Path("/plants"))
    assert config.scorer == Scorer() and config.retrainer == Retrainer()
    assert config.training == Training() and config.retention == Retention()
    assert config.connectors == Connectors()
    assert config.bay == Bay()
