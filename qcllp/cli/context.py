"""What every command shares: the global options' :class:`Context` (plant config, database,
output style) and the small argument helpers (a station's name, an ISO 8601 time, a
progress bar)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

import click

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

    def emit(self, result: Any, text: str | Callable[[], str]) -> None:
        """Print ``result`` as JSON with --json, else the human-readable ``text`` (a string,
        or a function making it: the rendering is not run when JSON is asked for)."""
        if self.as_json:
            click.echo(json.dumps(result, indent=2, default=str))
        else:
            click.echo(text() if callable(text) else text)

    def say(self, message: str) -> None:
        if not self.as_json:
            click.echo(message, err=True)


pass_ctx = click.make_pass_decorator(Context)


def check_station(ctx: Context, station: str) -> str:
    """``station`` if the plant has it; else a ConfigError listing the known stations."""
    ctx.config.station(station)
    return station


def parse_time(value: str | None) -> datetime | None:
    """An ISO 8601 option value as a zone-aware time (a time without zone is UTC)."""
    if value is None:
        return None
    import pandas as pd  # here: only the commands given a time pay for pandas

    try:
        stamp = pd.Timestamp(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time") from exc
    return (stamp if stamp.tzinfo else stamp.tz_localize("UTC")).to_pydatetime()


def progress_bar(ctx: Context, desc: str, unit: str):
    """A tqdm bar on stderr; none with --json or when stderr is not a terminal."""
    from tqdm import tqdm

    # None: no bar when stderr is not a terminal (a scheduler's log, a pipe)
    disable = True if ctx.as_json else None
    return tqdm(desc=desc, unit=unit, unit_scale=True, disable=disable, file=sys.stderr)
