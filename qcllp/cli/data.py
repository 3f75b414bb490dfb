"""Commands that bring data in: ``init`` (the database), ``ingest`` (files and SQL sources),
``simulate`` (a simulated plant's files) and ``features rebuild`` (the series statistics
kept at ingest, recomputed from the readings)."""

from __future__ import annotations

import sys

import click

from qcllp.cli.context import Context, pass_ctx, progress_bar
from qcllp.cli.group import QcllpCommand, QcllpGroup


@click.command(cls=QcllpCommand)
@pass_ctx
def init(ctx: Context) -> None:
    """Create the plant database or migrate it to the newest schema."""
    with ctx.store(create=True) as store:
        revision, where = store.revision, store.display_url
    ctx.emit(
        {"database": where, "revision": revision},
        f"database ready at schema revision {revision}",
    )


@click.group(cls=QcllpGroup)
def ingest() -> None:
    """Bring measurements, defect counts and inspections into the database."""


def _finish_ingest(ctx: Context, report) -> None:
    """Print the report, then one ``error:`` line per file that failed; exit 1 if any did."""
    from qcllp.cli import render

    ctx.emit(report.as_dict(), lambda: render.ingest_text(report))
    for file, why in report.files_failed.items():
        click.echo(render.failed_file_line(file, why), err=True)
    if report.files_failed:
        sys.exit(1)


@ingest.command("measurements")
@click.argument("path", type=click.Path())
@click.option("--layout", type=click.Choice(["long", "wide"]), help="Default: from the columns.")
@pass_ctx
def ingest_measurements_cmd(ctx: Context, path: str, layout: str | None) -> None:
    """Ingest a measurement file, or the new files of a folder."""
    from qcllp.ingest import ingest_measurements

    with ctx.store(create=True) as store, progress_bar(ctx, "readings", "rec") as bar:
        report = ingest_measurements(
            store, ctx.config, path, layout=layout, progress=lambda done: bar.update(done - bar.n)
        )
    _finish_ingest(ctx, report)


@ingest.command("defects")
@click.argument("path", type=click.Path())
@pass_ctx
def ingest_defects_cmd(ctx: Context, path: str) -> None:
    """Ingest final-QC defect counts (a file or the new files of a folder)."""
    from qcllp.ingest import ingest_defect_counts

    with ctx.store(create=True) as store:
        report = ingest_defect_counts(store, ctx.config, path)
    _finish_ingest(ctx, report)


@ingest.command("inspections")
@click.argument("path", type=click.Path())
@pass_ctx
def ingest_inspections_cmd(ctx: Context, path: str) -> None:
    """Ingest inspections of single sticks (lock-out bay, audit samples): a file or the new
    files of a folder with charge_id, stick_id, station, result and optional inspected_at."""
    from qcllp.ingest import ingest_inspections

    with ctx.store(create=True) as store:
        report = ingest_inspections(store, ctx.config, path)
    _finish_ingest(ctx, report)


@ingest.command("sql")
@click.option("--source", help="One configured SQL source (default: all of them).")
@pass_ctx
def ingest_sql_cmd(ctx: Context, source: str | None) -> None:
    """Pull new rows from the configured SQL sources (historian / MES)."""
    from qcllp.cli import render
    from qcllp.ingest import ingest_sql_sources

    with ctx.store(create=True) as store:
        reports = ingest_sql_sources(store, ctx.config, source)
    ctx.emit(
        {name: report.as_dict() for name, report in reports.items()},
        lambda: render.sql_ingest_text(reports),
    )


@click.command(cls=QcllpCommand)
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--charges", default=100, show_default=True, help="Number of charges.")
@click.option("--seed", default=0, show_default=True)
@click.option("--first-charge", default=1, show_default=True, help="Number of the first charge.")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv")
@click.option("--layout", type=click.Choice(["long", "wide"]), default="long")
@pass_ctx
def simulate(ctx: Context, folder, charges, seed, first_charge, fmt, layout) -> None:
    """Write a simulated plant's measurement, defect-count and (separate) truth files."""
    from qcllp.plant.simulate import simulate_plant, write_simulation

    sim = simulate_plant(ctx.config, charges, random_state=seed, first_charge=first_charge)
    paths = write_simulation(sim, folder, format=fmt, layout=layout)
    result = {k: [str(p) for p in v] if isinstance(v, list) else str(v) for k, v in paths.items()}
    ctx.emit(
        result,
        f"{len(sim.truth):,} sticks in {charges} charges "
        f"({sim.defect_rate:.1%} defective) written to {folder}",
    )


@click.group(cls=QcllpGroup)
def features() -> None:
    """The series statistics every feature follows from, kept as readings arrive."""


@features.command(cls=QcllpCommand)
@pass_ctx
def rebuild(ctx: Context) -> None:
    """Recompute every series' statistics from the stored readings.

    The ingester keeps them as readings arrive; run this after a change of their definition
    (a new qcllp says so) or to check them. Batches go on meanwhile."""
    import time

    from qcllp.store.kept_stats import rebuild_all_series_stats

    started = time.perf_counter()
    with ctx.store() as store:
        written = rebuild_all_series_stats(store)
    seconds = time.perf_counter() - started
    ctx.emit(
        {"series": written, "seconds": round(seconds, 2)},
        f"rebuilt the statistics of {written:,} series from their readings in {seconds:.1f} s",
    )
