"""``qcllp models``: the model registry (list, show, promote, roll back, resave)."""

from __future__ import annotations

import click

from qcllp.cli.context import Context, check_station, pass_ctx
from qcllp.cli.group import QcllpGroup


@click.group(cls=QcllpGroup)
def models() -> None:
    """The model registry: list, show, promote, roll back."""


@models.command("list")
@click.option("--station")
@pass_ctx
def models_list(ctx: Context, station: str | None) -> None:
    """All registered models, newest first."""
    from qcllp.cli import render
    from qcllp.station.registry import list_models

    with ctx.store() as store:
        rows = list_models(store, station)
    ctx.emit(rows, lambda: render.models_table(rows))


@models.command("show")
@click.argument("model_id", type=int)
@pass_ctx
def models_show(ctx: Context, model_id: int) -> None:
    """Everything recorded about one model."""
    from qcllp.cli import render
    from qcllp.station.registry import get_model

    with ctx.store() as store:
        row = get_model(store, model_id)
    ctx.emit(row, lambda: render.model_text(row))


@models.command("promote")
@click.argument("model_id", type=int)
@click.option(
    "--shadow",
    is_flag=True,
    help="Put it on a shadow trial: scored and recorded, the line acts on nothing.",
)
@pass_ctx
def models_promote(ctx: Context, model_id: int, shadow: bool) -> None:
    """Make a model its station's active one (its artifact must verify)."""
    from qcllp.station.registry import promote

    with ctx.store() as store:
        row = promote(store, model_id, shadow=shadow)
    state = "on a shadow trial" if shadow else "now active"
    ctx.emit(row, f"model {row['id']} is {state} at {row['station']}")


@models.command("rollback")
@click.argument("station")
@pass_ctx
def models_rollback(ctx: Context, station: str) -> None:
    """Reactivate the model that was active before the current one."""
    from qcllp.station.registry import rollback

    check_station(ctx, station)
    with ctx.store() as store:
        row = rollback(store, station)
    ctx.emit(row, f"model {row['id']} is active again at {station}")


@models.command("resave")
@click.argument("model_ids", type=int, nargs=-1)
@pass_ctx
def models_resave(ctx: Context, model_ids: tuple[int, ...]) -> None:
    """Rewrite models' pickle artifacts (earlier qcllp versions) in the format that runs no
    code when read (all models, or the given ones)."""
    from qcllp.cli import render
    from qcllp.station.registry import list_models, resave_model

    with ctx.store() as store:
        ids = list(model_ids) or [m["id"] for m in reversed(list_models(store))]
        rows = [(i, resave_model(store, i)) for i in ids]
    done = [row for _, row in rows if row is not None]
    ctx.emit(done, lambda: render.resave_text(rows))
