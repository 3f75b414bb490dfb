"""The click classes of every qcllp command and group: the global options (``--config``,
``--db``, ``--json``, ``--debug``) at any level, and a person's errors turned into one line on
stderr with exit code 1 (the traceback only with ``--debug``).

A command module declares its commands with ``@click.command(cls=QcllpCommand)`` and its
groups with ``@click.group(cls=QcllpGroup)``; their subcommands inherit the classes.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from qcllp.cli.context import DEFAULT_CONFIG, Context
from qcllp.cli.errors import is_database_error, is_user_error


def _one_line(exc: BaseException, obj: Context | None) -> str:
    """The error's line: a database error names the database (password masked) and the
    driver's first line; any other its own message, its lines joined."""
    if is_database_error(exc):
        from qcllp.store.credentials import display_url
        from qcllp.store.problems import database_problem

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
        except Exception as exc:
            obj = ctx.obj
            if not is_user_error(exc) or (obj is not None and obj.debug):
                raise
            click.echo(f"error: {_one_line(exc, obj)}", err=True)
            sys.exit(1)
