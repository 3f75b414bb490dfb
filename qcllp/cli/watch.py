"""Commands that tell people how the plant does and keep its database in shape: ``status``,
``report`` (the HTML report) and ``retention`` (old months of readings archived and
dropped)."""

from __future__ import annotations

import click

from qcllp.cli.context import Context, pass_ctx
from qcllp.cli.group import QcllpCommand


@click.command(cls=QcllpCommand)
@pass_ctx
def status(ctx: Context) -> None:
    """Scorers, ingestion and alarms at a glance."""
    from qcllp.cli import render_status
    from qcllp.reporting.status import plant_status

    with ctx.store() as store:
        result = plant_status(store, ctx.config)
    ctx.emit(result, lambda: render_status.status_text(result))


@click.command(cls=QcllpCommand)
@click.option("--dry-run", is_flag=True, help="Say which months would go; change nothing.")
@pass_ctx
def retention(ctx: Context, dry_run: bool) -> None:
    """Archive and drop the months of readings past retention.readings_days (PostgreSQL).

    The retraining daemon does this on retention.cron; this runs it now."""
    from qcllp.store.retention import apply_retention

    with ctx.store() as store:
        report = apply_retention(store, ctx.config, dry_run=dry_run)
    ctx.emit(report.as_dict(), report.summary())


@click.command(cls=QcllpCommand)
@click.option(
    "--output", type=click.Path(dir_okay=False), default="qcllp-report.html", show_default=True
)
@click.option(
    "--truth",
    type=click.Path(exists=True, dir_okay=False),
    help="CSV charge_id,stick_id,defect (simulator truth, inspected sticks): adds fresh ROC AUC "
    "and realized saving of the flags.",
)
@pass_ctx
def report(ctx: Context, output: str, truth: str | None) -> None:
    """Write the self-contained HTML report of every station."""
    from qcllp.reporting.plant_report import build_plant_report
    from qcllp.training.station_evaluation import read_stick_truth

    defects = read_stick_truth(truth) if truth else None
    with ctx.store() as store:
        path = build_plant_report(store, ctx.config, output, truth=defects)
    ctx.emit({"report": str(path)}, f"report written to {path}")
