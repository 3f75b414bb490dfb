"""Commands that flag sticks: ``score`` (one step at a station, or a file) and ``sink``
(the stations' flag files for the line's PLC/MES gateway)."""

from __future__ import annotations

import os

import click

from qcllp.cli.context import Context, check_station, pass_ctx
from qcllp.cli.group import QcllpCommand, QcllpGroup


def station_sink(ctx: Context, station: str, sink: str | None) -> str | None:
    """The sink to claim for the station: ``--sink``, else ``scorer.sink_dir``'s
    ``flags-<station>.jsonl``, else ``None`` (the steps use the one the station's checkpoint
    names, if any)."""
    if sink is None and ctx.config.scorer.sink_dir:
        sink = os.path.join(ctx.config.scorer.sink_dir, f"flags-{station}.jsonl")
    return sink


SINK_HELP = (
    "The station's JSON-lines flag file for the PLC/MES gateway (default: scorer.sink_dir's "
    "flags-<station>.jsonl, else the file the station already writes to). A file another "
    "station writes to, or another file than the station's, is refused (qcllp sink move)."
)


@click.command(cls=QcllpCommand)
@click.option("--station", required=True)
@click.option(
    "--input",
    "input_path",
    type=click.Path(dir_okay=False),
    help="Score the readings of this CSV/Parquet file (long or wide layout, checked as "
    "ingest checks it; no flags written).",
)
@click.option("--output", type=click.Path(dir_okay=False), help="Write the scores as CSV.")
@click.option("--sink", type=click.Path(dir_okay=False), help=SINK_HELP)
@pass_ctx
def score(
    ctx: Context, station: str, input_path: str | None, output: str | None, sink: str | None
) -> None:
    """Score sticks at a station with its active model; flags each stick once, into the
    database and the station's sink."""
    from qcllp.cli import render
    from qcllp.scoring.nothing_decided import checkpoint_seq, why_nothing_decided
    from qcllp.scoring.step import score_file, score_station

    check_station(ctx, station)
    why = ""
    with ctx.store() as store:
        if input_path:
            result = score_file(store, ctx.config, station, input_path)
        else:
            since = checkpoint_seq(store, station)
            sink = station_sink(ctx, station, sink)
            result = score_station(store, ctx.config, station, sink=sink)
            why = "" if len(result.scores) else why_nothing_decided(store, station, since)
    if output:
        result.scores.to_csv(output, index=False)
    summary = result.as_dict() | ({"nothing_decided": why} if why else {})
    delivered = render.delivery_text(station, result, input_path)
    ctx.emit(summary, lambda: render.score_line(station, summary, why, delivered))


@click.group(cls=QcllpGroup)
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
    from qcllp.cli import render
    from qcllp.scoring.flag_sink import claim_sink

    check_station(ctx, station)
    with ctx.store() as store:
        claim = claim_sink(store, station, target, move=True)
    ctx.emit(claim.__dict__, lambda: render.sink_moved_line(station, claim))
