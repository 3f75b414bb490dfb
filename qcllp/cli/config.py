"""``qcllp config``: the plant YAML on its own, without a database: ``check`` a file,
print its JSON ``schema`` (for an editor that validates and completes a plant file)."""

from __future__ import annotations

import json
import sys

import click

from qcllp.cli.context import Context, pass_ctx
from qcllp.cli.group import QcllpGroup


@click.group("config", cls=QcllpGroup)
def config() -> None:
    """The plant YAML: check a file, print its JSON Schema."""


@config.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@pass_ctx
def check(ctx: Context, file: str) -> None:
    """Validate the plant YAML FILE without touching a database: every problem on its own
    line (exit 1), or one line saying it is fine."""
    from qcllp.plant.config import check_plant_config

    ok, lines = check_plant_config(file)
    if ctx.as_json:
        click.echo(json.dumps({"file": file, "ok": ok, "errors": [] if ok else lines}, indent=2))
    else:
        click.echo("\n".join(lines), err=not ok)
    if not ok:
        sys.exit(1)


@config.command("schema")
def schema() -> None:
    """Print the JSON Schema of the plant YAML (for an editor that validates and completes)."""
    from qcllp.plant.config.reference import plant_schema

    click.echo(json.dumps(plant_schema(), indent=2))
