"""``qcllp serve``: the line's long-running services (a station's scorer, the plant's MQTT
intake, retraining daemon and lock-out bay page), each until SIGTERM, logging JSON lines on
stderr."""

from __future__ import annotations

import sys

import click

from qcllp.cli.context import Context, check_station, pass_ctx
from qcllp.cli.group import QcllpGroup
from qcllp.cli.scoring import SINK_HELP, station_sink


@click.group(cls=QcllpGroup)
def serve() -> None:
    """Run a service of the line (until SIGTERM)."""


@serve.command("scorer")
@click.option("--station", required=True, help="The station this scorer flags sticks at.")
@click.option("--sink", type=click.Path(dir_okay=False), help=SINK_HELP)
@click.option("--port", type=int, help="HTTP port of /healthz and /metrics (default: config).")
@click.option("--interval", type=float, help="Seconds between polls (default: config).")
@pass_ctx
def serve_scorer(ctx: Context, station: str, sink, port, interval) -> None:
    """Flag sticks as they complete STATION, exactly once; /healthz and /metrics on 127.0.0.1."""
    from qcllp.service.scorer import run_scorer

    check_station(ctx, station)
    _service_logging()
    sink = station_sink(ctx, station, sink)
    with ctx.store() as store:
        code = run_scorer(store, ctx.config, station, sink=sink, port=port, interval_s=interval)
    sys.exit(code)


@serve.command("intake")
@click.option("--port", type=int, help="HTTP port of /healthz and /metrics (default: config).")
@pass_ctx
def serve_intake(ctx: Context, port) -> None:
    """Store readings from the line's MQTT broker as they arrive (one per plant)."""
    from qcllp.service.mqtt.intake import run_intake

    _service_logging()
    with ctx.store() as store:
        code = run_intake(store, ctx.config, port=port)
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


@serve.command("bay")
@click.option("--port", type=int, help="HTTP port of the page (default: config bay.port).")
@pass_ctx
def serve_bay(ctx: Context, port) -> None:
    """The lock-out bay page: sticks awaiting inspection, one tap per result (one per plant).

    Needs the page's token in QCLLP_BAY_TOKEN or a private file named by QCLLP_BAY_TOKEN_FILE;
    listens on bay.host:bay.port of the plant config."""
    from qcllp.service.bay import run_bay
    from qcllp.service.bay.auth import load_token

    load_token()  # no token: one line and exit 1, before the database is opened
    _service_logging()
    with ctx.store() as store:
        code = run_bay(store, ctx.config, port=port)
    sys.exit(code)


def _service_logging() -> None:
    """JSON lines on stderr (journald keeps them); the libraries' INFO chatter muted."""
    import logging

    from qcllp.service.logs import JsonLines, SkippedRunsAsInfo

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    for noisy in ("apscheduler", "alembic"):  # their INFO lines are not the service's story
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("apscheduler.scheduler").addFilter(SkippedRunsAsInfo())
