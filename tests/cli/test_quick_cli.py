"""A quick command line: ``--help`` of every command loads click and qcllp's small CLI modules,
none of the heavy libraries; ``models list`` loads the store and the plant config, not
pandas, NumPy or the learners. Each case is a real ``qcllp`` process; what it imported
is read from its own ``sys.modules`` when it exits (no timings: benchmarks/bench_cli.py's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from qcllp.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "plant_config" / "example.yaml"
# what no --help may load: the science stack, the learners' helpers, the database layer, the
# plant config's validation
NOT_FOR_HELP = (
    "pandas", "numpy", "pyarrow", "sklearn", "scipy", "numba", "joblib", "skops", "dask",
    "sqlalchemy", "alembic", "pydantic", "yaml",
)  # fmt: skip
# what listing models does not need (it needs the store and the plant config)
NOT_FOR_LISTING = (
    "pandas", "numpy", "pyarrow", "sklearn", "scipy", "numba", "joblib", "skops", "dask",
)  # fmt: skip
# runs `qcllp ARGS` in this process, then prints the top-level packages it loaded as the last
# line of stderr
PROBE = """
import json, sys
from qcllp.cli import main
sys.argv[0] = "qcllp"
try:
    main()
finally:
    print("loaded:" + json.dumps(sorted({m.split(".")[0] for m in sys.modules})), file=sys.stderr)
"""


def command_paths(group: click.Group = main, prefix: tuple[str, ...] = ()) -> list[tuple]:
    """Every command and group of the CLI, as the words that name it (the root is ``()``)."""
    paths = [prefix]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            paths += command_paths(command, (*prefix, name))
        else:
            paths.append((*prefix, name))
    return paths


def run_qcllp(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``qcllp ARGS`` in a fresh Python; its result and the top-level packages it loaded."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=ROOT
    )
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("loaded:"), done.stderr
    return done, set(json.loads(last.removeprefix("loaded:")))


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "qcllp")
def test_help_of_every_command_loads_no_heavy_library(path):
    done, loaded = run_qcllp(*path, "--help")
    assert done.returncode == 0, done.stderr
    assert "Usage: qcllp" in done.stdout
    assert sorted(loaded & set(NOT_FOR_HELP)) == []


def test_every_command_is_probed():
    """The walk over the groups finds the commands (a lazy group would hide them from it)."""
    names = {" ".join(p) for p in command_paths()}
    assert {"", "models list", "train", "serve scorer", "status", "config check"} <= names


@pytest.fixture(scope="module")
def trained_row(history_plant, tmp_path_factory) -> dict:
    """The registry row of a real model, trained and promoted at cooling."""
    from qcllp.station.registry import list_models, promote
    from qcllp.store import Store
    from qcllp.training.train import train_station

    url = history_plant.copy_to(tmp_path_factory.mktemp("quick_cli"))
    with Store.open(url) as store:
        model_id = train_station(store, history_plant.config, "cooling", random_state=0).model_id
        promote(store, model_id)
        (row,) = list_models(store)
    return row


def test_models_list_loads_neither_pandas_nor_a_learning_library(store, store_url, trained_row):
    from qcllp.station.registry import register_model

    register_model(store, **{k: v for k, v in trained_row.items() if k != "id"})
    done, loaded = run_qcllp("--config", str(EXAMPLE), "--db", store_url, "models", "list")
    assert done.returncode == 0, done.stderr
    header, line = done.stdout.splitlines()
    assert header.split()[:3] == ["id", "station", "method"]
    assert line.split()[1:5] == ["cooling", "invcal", "defective", "active"]
    assert sorted(loaded & set(NOT_FOR_LISTING)) == []


def test_status_without_a_shadow_trial_loads_no_learning_library(store, store_url, trained_row):
    """``qcllp status`` reads the database with pandas, but SciPy and the learners are for a
    running shadow trial's bounds only."""
    from qcllp.station.registry import register_model

    register_model(store, **{k: v for k, v in trained_row.items() if k != "id"})
    done, loaded = run_qcllp("--config", str(EXAMPLE), "--db", store_url, "status")
    assert done.returncode == 0, done.stderr
    assert "cooling" in done.stdout
    assert sorted(loaded & {"sklearn", "scipy", "numba", "skops", "joblib", "dask"}) == []


def test_a_user_error_is_still_one_line_without_loading_the_learners(tmp_path):
    """A bad plant file is a person's error (one line, exit 1), found without importing the
    classes of every other person's error."""
    bad = tmp_path / "plant.yaml"
    bad.write_text("stations: [\n")
    done, loaded = run_qcllp("--config", str(bad), "models", "list")
    assert done.returncode == 1
    error_lines = [line for line in done.stderr.splitlines() if not line.startswith("loaded:")]
    assert len(error_lines) == 1 and error_lines[0].startswith("error: "), done.stderr
    assert str(bad) in error_lines[0]
    assert sorted(loaded & {"sklearn", "scipy", "skops", "joblib"}) == []


def test_each_named_error_is_an_exception_class_of_its_module():
    """The errors are named, not imported: a class moved to another module must move there."""
    import importlib

    from qcllp.cli.errors import DATABASE_ERROR, USER_ERRORS

    for module, name in [*USER_ERRORS, DATABASE_ERROR]:
        cls = getattr(importlib.import_module(module), name)
        assert isinstance(cls, type) and issubclass(cls, Exception), (module, name)
        assert cls.__module__ == module, (module, name)
