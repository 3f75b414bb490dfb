"""A quick command line: ``--help`` of every command loads click and qcllp's small CLI modules,
none of the heavy libraries; ``models list`` loads the store and the plant config, not pandas
or the learners. Each case is a real ``qcllp`` process; what it imported is read from its own
``sys.modules`` when it exits (no timings: they are benchmarks/bench_cli.py's)."""

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
