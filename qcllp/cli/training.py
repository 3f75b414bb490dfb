"""Commands that learn: ``train`` (station models, entered as candidates) and ``evaluate``
(what training would produce, judged on held-out charges)."""

from __future__ import annotations

import click

from qcllp.cli.context import Context, parse_time, pass_ctx
from qcllp.cli.group import QcllpCommand


@click.command(cls=QcllpCommand)
@click.option("--station", help="Station to train (default: every station).")
@click.option(
    "--method",
    "method_name",
    help="kmeans-labeler, alter-psvm, conv-psvm, twin-psvm, invcal, meanmap, lmm, amm, llpfc, "
    "proportion-boosting, em-llp, or auto (each of the config's methods, the best kept per "
    "station) (default: the config's).",
)
@click.option(
    "--target",
    default="defective",
    show_default=True,
    help="defective, multiclass or a defect type.",
)
@click.option("--since", help="Only charges first seen at or after this time (ISO 8601).")
@click.option("--until", help="Only charges first seen before this time (ISO 8601).")
@click.option("--seed", type=int, help="Random seed (default: the config's).")
@click.option(
    "--cluster",
    metavar="ADDRESS",
    help="Dask scheduler (tcp://HOST:PORT) to run the parallel parts of training on "
    "(default: the config's cluster, else this machine); needs qcllp[dask].",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=-1),
    help="Processes of this machine to fit in parallel: 1, 2, ... or -1 (one per core); "
    "default: the config's training.n_jobs (1). The same seed gives the same model. Not used "
    "with a Dask cluster.",
)
@pass_ctx
def train(ctx: Context, station, method_name, target, since, until, seed, cluster, jobs) -> None:
    """Train station models on the charges with final-QC counts; they enter as candidates."""
    from qcllp.cli import render
    from qcllp.training.cluster import compute_on
    from qcllp.training.train import train_stations

    if jobs == 0:
        raise click.BadParameter(
            "0 processes cannot train: give 1, 2, ... or -1", param_hint="'--jobs'"
        )
    n_jobs = ctx.config.training.n_jobs if jobs is None else jobs
    with compute_on(cluster or ctx.config.cluster, n_jobs=n_jobs), ctx.store() as store:
        results = train_stations(
            store,
            ctx.config,
            [station] if station else None,
            method_name=method_name,
            target=target,
            since=parse_time(since),
            until=parse_time(until),
            random_state=seed,
            progress=ctx.say,
        )
    ctx.emit(
        [r.as_dict() for r in results], lambda: "\n".join(render.trained_line(r) for r in results)
    )


@click.command(cls=QcllpCommand)
@click.option("--station", required=True)
@click.option("--method", "method_name", help="Default: the config's default method.")
@click.option("--target", default="defective", show_default=True)
@click.option("--folds", default=5, show_default=True, help="Charge-grouped CV folds.")
@click.option(
    "--truth",
    type=click.Path(dir_okay=False),
    help="Per-stick truth (charge_id, stick_id, defect) for stick-level metrics.",
)
@click.option("--seed", default=0, show_default=True)
@pass_ctx
def evaluate(ctx: Context, station, method_name, target, folds, truth, seed) -> None:
    """What `train` would produce at a station, trained and decided on held-out charges."""
    from qcllp.cli import render
    from qcllp.training.station_evaluation import evaluate_station

    with ctx.store() as store:
        result = evaluate_station(
            store,
            ctx.config,
            station,
            method_name=method_name,
            target=target,
            folds=folds,
            truth_path=truth,
            random_state=seed,
            progress=ctx.say,
        )
    ctx.emit(result.as_dict(), lambda: render.evaluation_text(station, result))
