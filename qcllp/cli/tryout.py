"""``qcllp demo``: a whole simulated plant in one command, and the commands it prints to look
at the results (:func:`own_command`: they run as printed from any shell)."""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import click

from qcllp.cli.context import Context, pass_ctx
from qcllp.cli.group import QcllpCommand

DEMO_LOOKS = (["models", "list"], ["status"], ["report", "--output", "demo-report.html"])


@click.command(cls=QcllpCommand)
@click.option(
    "--workdir",
    "--folder",
    "folder",
    type=click.Path(file_okay=False),
    help="Where the demo writes its plant: files, database, models, report, plant.yaml "
    "(default: a new temporary folder).",
)
@click.option("--charges", default=100, show_default=True, help="Charges of history.")
@click.option("--fresh-charges", default=30, show_default=True, help="Charges to score.")
@click.option("--method", "method_name", help="Learner for every station (default: config's).")
@click.option("--seed", default=0, show_default=True)
@pass_ctx
def demo(ctx: Context, folder, charges, fresh_charges, method_name, seed) -> None:
    """Simulate a plant, ingest, train, promote, score a fresh batch and write the report.

    The plant is the one of --config / $QCLLP_CONFIG, else the example shipped with qcllp.
    """
    from qcllp.cli import render
    from qcllp.demo import demo_database_url, run_demo
    from qcllp.plant.config import example_config_path, load_plant_config

    config = ctx.config if ctx.config_given else load_plant_config(example_config_path())
    folder = folder or tempfile.mkdtemp(prefix="qcllp-demo-")
    ctx.opened_url = demo_database_url(folder)  # named by a database error
    started = datetime.now()
    result = run_demo(
        config,
        folder,
        n_charges=charges,
        fresh_charges=fresh_charges,
        method_name=method_name,
        random_state=seed,
        say=ctx.say,
    )
    seconds = (datetime.now() - started).total_seconds()
    looks = [
        shlex.join([*own_command(), "--config", str(result.config_path), *c]) for c in DEMO_LOOKS
    ]
    ctx.emit(
        {**result.as_dict(), "seconds": seconds, "look": looks},
        lambda: render.demo_text(result, seconds, looks),
    )


def own_command() -> list[str]:
    """How to run this very qcllp from any shell, for the commands qcllp prints: the absolute
    path of the running ``qcllp`` script, so that they work as printed without an activated
    virtual environment; else the ``qcllp`` beside this Python; else ``python -m qcllp.cli``."""
    script = Path(sys.argv[0])
    if script.stem == "qcllp" and script.is_file():
        return [os.path.abspath(script)]
    beside = Path(sys.executable).parent / "qcllp"
    if beside.is_file():
        return [str(beside)]
    return [sys.executable, "-m", "qcllp.cli"]
