"""The engineers' command line: thin commands that parse, call one function and print.

User errors (bad or missing config, unknown station or method, no labeled charges yet, an
unreadable file, a corrupt model artifact) print one line and exit 1; ``--debug`` shows the
traceback instead. ``--json`` prints machine-readable results. The global options (``--config``,
``--db``, ``--json``, ``--debug``) may come before or after the subcommand
(``qcllp --json models list`` and ``qcllp models list --json`` are the same). ``ingest`` takes
every good file of a folder, prints one ``error:`` line per file it could not ingest and then
exits 1, so a scheduler notices.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import pandas as pd

DEFAULT_CONFIG = "plant_config/example.yaml"


class Context:
    """What the global options decide: the plant config, the database, the output style."""

    def __init__(
        self,
        config_path: str | None = None,
        db: str | None = None,
        as_json: bool = False,
        debug: bool = False,
    ):
        given = config_path or os.environ.get("QCLLP_CONFIG")
        self.config_given = bool(given)
        self.config_path = given or DEFAULT_CONFIG
        self.db = db
        self.as_json = as_json
        self.debug = debug
        self.opened_url: str | None = None
        self._config = None

    @property
    def config(self):
        if self._config is None:
            from qcllp.plant.config import load_plant_config

            self._config = load_plant_config(self.config_path)
        return self._config

    @property
    def database_url(self) -> str:
        return self.db or self.config.database_url

    def store(self, *, create: bool = False):
        from qcllp.plant.config import DEFAULT_STATEMENT_TIMEOUT_S
        from qcllp.store import Store

        # --db alone (no config named) opens with the default timeout, not the example's
        known = self.db is None or self.config_given
        timeout = self.config.statement_timeout_s if known else DEFAULT_STATEMENT_TIMEOUT_S
        self.opened_url = self.database_url  # named by a database error (password masked)
        models = self.config.models_dir if known else None  # a server database's artifacts
        return Store.open(
            self.database_url, create=create, statement_timeout_s=timeout, models_dir=models
        )

    def emit(self, result: Any, text: str) -> None:
        """Print ``result`` as JSON with --json, else the human-readable ``text``."""
        if self.as_json:
            click.echo(json.dumps(result, indent=2, default=str))
        else:
            click.echo(text)

    def say(self, message: str) -> None:
        if not self.as_json:
            click.echo(message, err=True)


def _user_errors() -> tuple[type[BaseException], ...]:
    """The errors printed as one line: a person's (:mod:`qcllp.cli.errors`) and a
    database that cannot be used mid-command (a full disk, a server gone away)."""
    from sqlalchemy.exc import OperationalError

    from qcllp.cli.errors import USER_ERRORS

    return (*USER_ERRORS, OperationalError)


def _one_line(exc: BaseException, obj: Context | None) -> str:
    """The error's line: a database error names the database (password masked) and the
    driver's first line; any other its own message, its lines joined."""
    from sqlalchemy.exc import OperationalError

    from qcllp.store.credentials import display_url
    from qcllp.store.problems import database_problem

    if isinstance(exc, OperationalError):
        url = obj.opened_url if obj is not None else None
        return database_problem(exc, display_url(url) if url else "(unknown)")
    message = str(exc).strip().splitlines()
    return "; ".join(message) or type(exc).__name__


def _set_global(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """Callback of a global option: set it on the shared :class:`Context`, wherever it was
    given (an option after the subcommand overrides the same one before it)."""
    if value is None or value is False:
        return  # not given at this level
    obj = ctx.ensure_object(Context)
    setattr(obj, param.name, value)
    if param.name == "config_path":
        obj.config_given = True  # the plant named on the command line, not the default
        obj._config = None


def _global_options() -> list[click.Option]:
    """``--config``, ``--db``, ``--json``, ``--debug``: accepted by every command and group."""
    common = {"expose_value": False, "callback": _set_global}
    return [
        click.Option(
            ["--config", "config_path"],
            type=click.Path(dir_okay=False),
            help=f"Plant YAML (default: $QCLLP_CONFIG or {DEFAULT_CONFIG}).",
            **common,
        ),
        click.Option(
            ["--db"],
            help="Database URL overriding the config's (e.g. postgresql+psycopg://...).",
            **common,
        ),
        click.Option(
            ["--json", "as_json"], is_flag=True, help="Machine-readable output.", **common
        ),
        click.Option(["--debug"], is_flag=True, help="Show tracebacks.", **common),
    ]


class QcllpCommand(click.Command):
    """A command that also takes the global options after its name."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.params += _global_options()


class QcllpGroup(click.Group):
    """Takes the global options (at any level) and turns the known user errors into one line on
    stderr and exit code 1."""

    command_class = QcllpCommand
    group_class = type  # subgroups are QcllpGroups too

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.params += _global_options()

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except _user_errors() as exc:
            obj = ctx.obj
            if obj is not None and obj.debug:
                raise
            click.echo(f"error: {_one_line(exc, obj)}", err=True)
            sys.exit(1)


@click.group(cls=QcllpGroup)
@click.version_option(package_name="qcllp")
@click.pass_context
def main(ctx: click.Context) -> None:
    """qcllp: flag the sticks that will fail, learned from per-charge defect counts.

    The options --config, --db, --json and --debug may also follow the subcommand.
    """
    # what qcllp writes (sink, archives, exports) is nobody else's to read; the group may
    # (the line's gateway reads the flag files); a stricter umask of the user's stays
    os.umask(os.umask(0o027) | 0o027)
    ctx.ensure_object(Context)


pass_ctx = click.make_pass_decorator(Context)


def _station(ctx: Context, station: str) -> str:
    ctx.config.station(station)  # ConfigError listing the known stations
    return station


def _progress_bar(ctx: Context, desc: str, unit: str):
    from tqdm import tqdm

    # None: no bar when stderr is not a terminal (a scheduler's log, a pipe)
    disable = True if ctx.as_json else None
    return tqdm(desc=desc, unit=unit, unit_scale=True, disable=disable, file=sys.stderr)


# ----------------------------------------------------------------------------- database
@main.command()
@pass_ctx
def init(ctx: Context) -> None:
    """Create the plant database or migrate it to the newest schema."""
    with ctx.store(create=True) as store:
        revision, where = store.revision, store.display_url
    ctx.emit(
        {"database": where, "revision": revision},
        f"database ready at schema revision {revision}",
    )


# ----------------------------------------------------------------------------- ingest
@main.group()
def ingest() -> None:
    """Bring measurements and defect counts into the database."""


def _ingest_text(report) -> str:
    quarantined = ", ".join(f"{k}: {v}" for k, v in sorted(report.quarantined.items()))
    lines = [
        f"{report.kind}: {report.records:,} records, {report.stored:,} stored, "
        f"{report.duplicates:,} duplicates, {report.quarantined_total:,} quarantined"
        + (f" ({quarantined})" if quarantined else "")
    ]
    lines += [f"skipped (already ingested): {f}" for f in report.files_skipped]
    return "\n".join(lines)


def _finish_ingest(ctx: Context, report) -> None:
    """Print the report, then one ``error:`` line per file that failed; exit 1 if any did."""
    ctx.emit(report.as_dict(), _ingest_text(report))
    for file, why in report.files_failed.items():
        line = " ".join(why.split())  # one line, whatever the underlying error printed
        click.echo(f"error: {line if line.startswith(file) else f'{file}: {line}'}", err=True)
    if report.files_failed:
        sys.exit(1)


@ingest.command("measurements")
@click.argument("path", type=click.Path())
@click.option("--layout", type=click.Choice(["long", "wide"]), help="Default: from the columns.")
@pass_ctx
def ingest_measurements_cmd(ctx: Context, path: str, layout: str | None) -> None:
    """Ingest a measurement file, or the new files of a folder."""
    from qcllp.ingest import ingest_measurements

    with ctx.store(create=True) as store, _progress_bar(ctx, "readings", "rec") as bar:
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


@ingest.command("sql")
@click.option("--source", help="One configured SQL source (default: all of them).")
@pass_ctx
def ingest_sql_cmd(ctx: Context, source: str | None) -> None:
    """Pull new rows from the configured SQL sources (historian / MES)."""
    from qcllp.ingest import ingest_sql_sources

    with ctx.store(create=True) as store:
        reports = ingest_sql_sources(store, ctx.config, source)
    ctx.emit(
        {name: report.as_dict() for name, report in reports.items()},
        "\n".join(f"[{name}] {_ingest_text(report)}" for name, report in reports.items()),
    )


# ----------------------------------------------------------------------------- simulate
@main.command()
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


# ----------------------------------------------------------------------------- train
def _time(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        stamp = pd.Timestamp(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time") from exc
    return (stamp if stamp.tzinfo else stamp.tz_localize("UTC")).to_pydatetime()


@main.command()
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
@pass_ctx
def train(ctx: Context, station, method_name, target, since, until, seed, cluster) -> None:
    """Train station models on the charges with final-QC counts; they enter as candidates."""
    from qcllp.training.cluster import compute_on
    from qcllp.training.train import train_stations

    with compute_on(cluster or ctx.config.cluster), ctx.store() as store:
        results = train_stations(
            store,
            ctx.config,
            [station] if station else None,
            method_name=method_name,
            target=target,
            since=_time(since),
            until=_time(until),
            random_state=seed,
            progress=ctx.say,
        )
    ctx.emit([r.as_dict() for r in results], "\n".join(_trained_line(r) for r in results))


def _trained_line(r) -> str:  # noqa: ANN001 - a TrainingResult
    m = r.metrics
    rule = (
        "locks out nothing (no threshold's saving is significant)"
        if m.get("lockout_declined")
        else f"threshold {m['threshold']:.3f}"
    )
    saving = (
        "expected saving 0 (it locks out nothing)"
        if m.get("lockout_declined")
        else f"expected saving {m['expected_saving_per_1000']:+.0f} per 1,000 sticks "
        f"(90 % interval {m['saving_low_per_1000']:+.0f} to {m['saving_high_per_1000']:+.0f}, "
        "on charges it did not see)"
    )
    subsampled = m.get("labeled_sticks", 0) > m.get("max_sticks", float("inf"))
    of = f" (of {m['labeled_charges']:,.0f}: training.max_sticks)" if subsampled else ""
    line = (
        f"model {r.model_id}: {r.station} {r.method} on {r.n_charges} charges{of} / "
        f"{r.n_sticks} sticks, bag error {m['bag_error']:.3f}, {rule}, {saving}"
    )
    for trial in r.params.get("auto", []):  # --method auto: what each method did
        mark = "*" if trial["method"] == r.method else " "
        line += (
            f"\n  {mark} {trial['method']:<15} CV bag error {trial['cv_bag_error']:.4f}, "
            f"expected saving {trial['expected_saving_per_1000']:+.0f} "
            f"[{trial['saving_low_per_1000']:+.0f}, {trial['saving_high_per_1000']:+.0f}], "
            f"{trial['seconds']:.0f} s"
        )
    return line


# ----------------------------------------------------------------------------- evaluate
@main.command()
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
    metrics, per_charge = result.evaluation.metrics, result.evaluation.per_charge
    lines = [
        f"{station} {result.method}, target {result.target}: {result.n_charges} charges, "
        f"{result.n_sticks} sticks; thresholds per fold "
        + ", ".join(f"{t:.3f}" for t in result.thresholds)
    ]
    lines += [
        f"  {k:<20} {v:.4f}" if isinstance(v, float) else f"  {k:<20} {v}"
        for k, v in metrics.items()
    ]
    worst = per_charge.sort_values("abs_error", ascending=False).head(5)
    lines += ["  charges with the largest share error:", worst.to_string(float_format="%.3f")]
    ctx.emit(result.as_dict(), "\n".join(lines))


# ----------------------------------------------------------------------------- models
@main.group()
def models() -> None:
    """The model registry: list, show, promote, roll back."""


def _model_line(m: dict) -> str:
    metrics = m["metrics"] or {}
    bag = metrics.get("bag_error")
    return (
        f"{m['id']:>4}  {m['station']:<14} {m['method']:<15} {m['target']:<10} "
        f"{m['status']:<9} charges={m['n_charges']:<5} "
        f"bag_error={'-' if bag is None else f'{bag:.3f}'}  {m['created_at']:%Y-%m-%d %H:%M}"
    )


@models.command("list")
@click.option("--station")
@pass_ctx
def models_list(ctx: Context, station: str | None) -> None:
    """All registered models, newest first."""
    from qcllp.station.registry import list_models

    with ctx.store() as store:
        rows = list_models(store, station)
    ctx.emit(rows, "\n".join(_model_line(m) for m in rows) or "no models registered yet")


@models.command("show")
@click.argument("model_id", type=int)
@pass_ctx
def models_show(ctx: Context, model_id: int) -> None:
    """Everything recorded about one model."""
    from qcllp.station.registry import get_model

    with ctx.store() as store:
        row = get_model(store, model_id)
    text = "\n".join(f"{k:<15} {v}" for k, v in row.items() if k != "features")
    text += f"\n{'features':<15} {len(row['features'])}: {', '.join(row['features'][:8])} ..."
    ctx.emit(row, text)


@models.command("promote")
@click.argument("model_id", type=int)
@pass_ctx
def models_promote(ctx: Context, model_id: int) -> None:
    """Make a model its station's active one (its artifact must verify)."""
    from qcllp.station.registry import promote

    with ctx.store() as store:
        row = promote(store, model_id)
    ctx.emit(row, f"model {row['id']} is now active at {row['station']}")


@models.command("rollback")
@click.argument("station")
@pass_ctx
def models_rollback(ctx: Context, station: str) -> None:
    """Reactivate the model that was active before the current one."""
    from qcllp.station.registry import rollback

    _station(ctx, station)
    with ctx.store() as store:
        row = rollback(store, station)
    ctx.emit(row, f"model {row['id']} is active again at {station}")


@models.command("resave")
@click.argument("model_ids", type=int, nargs=-1)
@pass_ctx
def models_resave(ctx: Context, model_ids: tuple[int, ...]) -> None:
    """Rewrite models' pickle artifacts (earlier qcllp versions) in the format that runs no
    code when read (all models, or the given ones)."""
    from qcllp.station.registry import list_models, resave_model

    with ctx.store() as store:
        ids = list(model_ids) or [m["id"] for m in reversed(list_models(store))]
        rows = [(i, resave_model(store, i)) for i in ids]
    done = [row for _, row in rows if row is not None]
    ctx.emit(
        done,
        "\n".join(
            f"model {i}: " + ("already a skops artifact" if r is None else r["artifact_path"])
            for i, r in rows
        )
        or "no models registered yet",
    )


# ----------------------------------------------------------------------------- score
def _station_sink(ctx: Context, station: str, sink: str | None) -> str | None:
    """The sink to claim for the station: ``--sink``, else ``scorer.sink_dir``'s
    ``flags-<station>.jsonl``, else ``None`` (the steps use the one the station's checkpoint
    names, if any)."""
    if sink is None and ctx.config.scorer.sink_dir:
        sink = os.path.join(ctx.config.scorer.sink_dir, f"flags-{station}.jsonl")
    return sink


_SINK_HELP = (
    "The station's JSON-lines flag file for the PLC/MES gateway (default: scorer.sink_dir's "
    "flags-<station>.jsonl, else the file the station already writes to). A file another "
    "station writes to, or another file than the station's, is refused (qcllp sink move)."
)


@main.command()
@click.option("--station", required=True)
@click.option(
    "--input",
    "input_path",
    type=click.Path(dir_okay=False),
    help="Score the readings of this CSV/Parquet file (long or wide layout, checked as "
    "ingest checks it; no flags written).",
)
@click.option("--output", type=click.Path(dir_okay=False), help="Write the scores as CSV.")
@click.option("--sink", type=click.Path(dir_okay=False), help=_SINK_HELP)
@pass_ctx
def score(
    ctx: Context, station: str, input_path: str | None, output: str | None, sink: str | None
) -> None:
    """Score sticks at a station with its active model; flags each stick once, into the
    database and the station's sink."""
    from qcllp.scoring.nothing_decided import checkpoint_seq, why_nothing_decided
    from qcllp.scoring.step import score_file, score_station

    _station(ctx, station)
    why = ""
    with ctx.store() as store:
        if input_path:
            result = score_file(store, ctx.config, station, input_path)
        else:
            since = checkpoint_seq(store, station)
            sink = _station_sink(ctx, station, sink)
            result = score_station(store, ctx.config, station, sink=sink)
            why = "" if len(result.scores) else why_nothing_decided(store, station, since)
    if output:
        result.scores.to_csv(output, index=False)
    summary = result.as_dict() | ({"nothing_decided": why} if why else {})
    ctx.emit(summary, _score_line(station, summary, why, _delivery(station, result, input_path)))


def _delivery(station: str, result: Any, input_path: str | None) -> str:
    """Where a score run's flags went: the station's sink, or that it has none."""
    if input_path:
        return ""
    if result.sink is None:
        return (
            f"; {station} has no sink: the flags are in the database only "
            "(give --sink or scorer.sink_dir)"
        )
    return f", {result.sink_lines} lines appended to {result.sink}"


def _score_line(station: str, summary: dict, why: str, delivered: str) -> str:
    """The one line ``qcllp score`` prints: what it decided, or why it decided nothing."""
    if why:
        return f"{station}: decided 0 sticks with model {summary['model_id']}: {why}{delivered}"
    return (
        f"{station}: decided {summary['sticks_decided']} sticks with model {summary['model_id']}"
        f" (threshold {summary['threshold']:.3f}): {summary['locked_out']} locked out, "
        f"{summary['passed']} passed, {summary['unscorable']} unscorable; "
        f"{summary['flags_written']} flags written{delivered}"
    )


@main.group()
def sink() -> None:
    """The stations' flag files for the line's PLC/MES gateway."""


@sink.command("move")
@click.option("--station", required=True)
@click.option("--to", "target", required=True, type=click.Path(dir_okay=False))
@pass_ctx
def sink_move(ctx: Context, station: str, target: str) -> None:
    """Send STATION's flags to another file from now on.

    The old file is cut back to the flags committed to it and left as it is; every flag it
    has not got goes to the new file (bytes already in it are kept), each flag in exactly one
    of the two. Safe while the station's scorer runs: its next step writes to the new file.
    Point the scorer's --sink (or scorer.sink_dir) at the new file before it restarts.
    """
    from qcllp.scoring.flag_sink import claim_sink

    _station(ctx, station)
    with ctx.store() as store:
        claim = claim_sink(store, station, target, move=True)
    ctx.emit(
        claim.__dict__,
        f"{station}: flags go to {claim.path} from flag id {claim.flag_id + 1} on"
        + (f" (before: {claim.previous})" if claim.previous else ""),
    )


# ----------------------------------------------------------------------------- services
@main.group()
def serve() -> None:
    """Run a service of the line (until SIGTERM)."""


@serve.command("scorer")
@click.option("--station", required=True, help="The station this scorer flags sticks at.")
@click.option("--sink", type=click.Path(dir_okay=False), help=_SINK_HELP)
@click.option("--port", type=int, help="HTTP port of /healthz and /metrics (default: config).")
@click.option("--interval", type=float, help="Seconds between polls (default: config).")
@pass_ctx
def serve_scorer(ctx: Context, station: str, sink, port, interval) -> None:
    """Flag sticks as they complete STATION, exactly once; /healthz and /metrics on 127.0.0.1."""
    from qcllp.service.scorer import run_scorer

    _station(ctx, station)
    _service_logging()
    sink = _station_sink(ctx, station, sink)
    with ctx.store() as store:
        code = run_scorer(store, ctx.config, station, sink=sink, port=port, interval_s=interval)
    sys.exit(code)


@serve.command("retrainer")
@click.option("--port", type=int, help="HTTP port of /healthz and /metrics (default: config).")
@pass_ctx
def serve_retrainer(ctx: Context, port) -> None:
    """Ingest, retrain on schedule, promote only better models, watch drift (one per plant)."""
    from qcllp.service.retrainer import run_retrainer

    _service_logging()
    with ctx.store() as store:
        code = run_retrainer(store, ctx.config, port=port)
    sys.exit(code)


def _service_logging() -> None:
    """JSON lines on stderr (journald keeps them); the libraries' INFO chatter muted."""
    import logging

    from qcllp.service.logs import JsonLines

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    for noisy in ("apscheduler", "alembic"):  # their INFO lines are not the service's story
        logging.getLogger(noisy).setLevel(logging.WARNING)


@main.command()
@pass_ctx
def status(ctx: Context) -> None:
    """Scorers, ingestion and alarms at a glance."""
    from qcllp.reporting.status import plant_status

    with ctx.store() as store:
        result = plant_status(store, ctx.config)
    lines = [f"database {result['database']}; newest batch {result['newest_batch']}"]
    stored = result["readings"]
    if stored["months"] or stored["retention_days"]:
        months = stored["months"]
        span = f"{months[0]} .. {months[-1]}" if months else "none"
        keep = stored["retention_days"]
        lines.append(
            f"readings: {len(months)} monthly partitions ({span}); kept "
            + (f"{keep} days" if keep else "for ever")
            + (
                f"; being dropped: {', '.join(stored['being_dropped'])}"
                if stored["being_dropped"]
                else ""
            )
        )
    retrainer = result["retrainer"]
    lines.append(f"retrainer: {retrainer['leader'] or 'not running (no lease held)'}")
    for job in retrainer["jobs"]:
        since = f"queued {job['why']}" if job.get("why") else f"last {job['last']}"
        lines.append(f"  job {job['job']:<8} next {job['next_run']}; {since}")
    for s in result["stations"]:
        flags = ", ".join(f"{k} {v}" for k, v in sorted(s["flags"].items())) or "none"
        lines.append(
            f"{s['station']:<14} model {s['active_model']} (scorer uses {s['scorer_model']}), "
            f"{s['batches_behind']} batches behind, {s['pending_sticks']} pending; flags: {flags}"
        )
        if s["active_model"] is not None:
            m = s["model_metrics"]
            lines.append(
                f"{'':<14} age {s['model_age_h']} h; expected saving "
                f"{_num(m.get('expected_saving_per_1000'))} per 1,000 sticks "
                f"[{_num(m.get('saving_low_per_1000'))}, {_num(m.get('saving_high_per_1000'))}]"
                f"; bag error {_num(m.get('calibration_error'), '.4f')}"
            )
        if s["training_by"]:
            lines.append(f"{'':<14} being trained by {s['training_by']}")
        for kind, text in s["drift"].items():
            lines.append(f"{'':<14} {kind} {text}")
        if s["lockout_suspended"]:
            lines.append(f"{'':<14} {s['lockout_suspended']}")
        elif s["lockout_guard"]:
            g = s["lockout_guard"]
            share = g["locked"] / g["decided"] if g["decided"] else 0.0
            lines.append(
                f"{'':<14} lock-out guard: {g['locked']} of {g['decided']} sticks locked out "
                f"({share:.1%}); recent excess {g['excess']:.0f} sticks "
                f"(suspends above {_num(g['excess_bound'], '.0f')})"
            )
            lines.append(
                f"{'':<14} final QC: {g['qc_charges']} charges compared, "
                f"{g['qc_predicted']:.1f} failures predicted, {g['qc_reported']} reported; "
                f"over-prediction {g['qc_excess']:.1f} "
                + (
                    f"(suspends above {g['qc_interval']:g})"
                    if g["locks_out"]
                    else "(the model locks out nothing: nothing to suspend)"
                )
                + (
                    f"; {g['qc_skipped']} not comparable, latest {g['qc_skip_reason']}"
                    if g["qc_skipped"]
                    else ""
                )
            )
    lines += [
        f"DECISION {d['at']:%Y-%m-%d %H:%M} {d['station']} model {d['model_id']} "
        f"{d['outcome']}: {d['reason']}"
        for d in result["decisions"]
    ]
    lines += [
        f"ALARM {a['at']} {a['station']} {a['kind']}: {a['message']}" for a in result["alarms"]
    ]
    ctx.emit(result, "\n".join(lines))


@main.command()
@click.option("--dry-run", is_flag=True, help="Say which months would go; change nothing.")
@pass_ctx
def retention(ctx: Context, dry_run: bool) -> None:
    """Archive and drop the months of readings past retention.readings_days (PostgreSQL).

    The retraining daemon does this on retention.cron; this runs it now."""
    from qcllp.store.retention import apply_retention

    with ctx.store() as store:
        report = apply_retention(store, ctx.config, dry_run=dry_run)
    ctx.emit(report.as_dict(), report.summary())


def _num(value: Any, spec: str = "+.0f") -> str:
    return "n/a" if value is None else format(value, spec)


# ----------------------------------------------------------------------------- report / demo
@main.command()
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


@main.command()
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
    table = result.table.to_string(float_format=lambda v: f"{v:.3f}")
    qc = "" if result.final_qc is None else result.final_qc.to_string(float_format="{:.1f}".format)
    looks = [
        shlex.join([*own_command(), "--config", str(result.config_path), *c]) for c in DEMO_LOOKS
    ]
    ctx.emit(
        {**result.as_dict(), "seconds": seconds, "look": looks},
        f"\nfresh charges scored at every station (against the simulator's hidden truth):\n"
        f"{table}\n\nfinal QC's counts of the fresh charges against each model (lock-out "
        f"guard):\n{qc}\n\ndemo finished in {seconds:.0f} s\nreport: {result.report}\n"
        f"database: {result.database_url}\nlook at the results:\n"
        + "\n".join(f"  {c}" for c in looks),
    )


DEMO_LOOKS = (["models", "list"], ["status"], ["report", "--output", "demo-report.html"])


# ----------------------------------------------------------------------------- config
@main.group("config")
def config_group() -> None:
    """The plant YAML: check a file, print its JSON Schema."""


@config_group.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@pass_ctx
def config_check(ctx: Context, file: str) -> None:
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


@config_group.command("schema")
def config_schema() -> None:
    """Print the JSON Schema of the plant YAML (for an editor that validates and completes)."""
    from qcllp.plant.config.reference import plant_schema

    click.echo(json.dumps(plant_schema(), indent=2))


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
