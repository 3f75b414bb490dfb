"""The engineers' command line: thin commands that parse, call one function and print.

User errors (bad or missing config, unknown station or method, no labeled charges yet, an
unreadable file, a corrupt model artifact) print one line and exit 1; ``--debug`` shows the
traceback instead. ``--json`` prints machine-readable results. The global options (``--config``,
``--db``, ``--json``, ``--debug``) may come before or after the subcommand
(``qcllp --json models list`` and ``qcllp models list --json`` are the same). ``ingest`` takes
every good file of a folder, prints one ``error:`` line per file it could not ingest and then
exits 1, so a scheduler notices.

The package, a module a family of commands, each added to the root group :func:`main` below:

* :mod:`.context` -- the global options' :class:`Context` and the argument helpers;
* :mod:`.group` -- the click classes: global options at any level, errors as one line;
* :mod:`.errors` -- which errors are a person's to fix (one line, no traceback);
* :mod:`.render` -- every table, key/value block and line the commands print as text;
* :mod:`.render_status` -- the text of ``status``;
* :mod:`.data` -- ``init``, ``ingest``, ``simulate``, ``features rebuild``;
* :mod:`.training` -- ``train``, ``evaluate``;
* :mod:`.models` -- ``models`` (the registry);
* :mod:`.scoring` -- ``score``, ``sink``;
* :mod:`.serve` -- ``serve`` (the scorer and retrainer services);
* :mod:`.watch` -- ``status``, ``report``, ``retention``;
* :mod:`.tryout` -- ``demo``;
* :mod:`.config` -- ``config check``, ``config schema`` (the plant YAML alone).

A new family of commands lives in its own module and joins with one ``main.add_command``
line at the end of this file.

Importing this package and ``--help`` of any command load click and these small modules only:
a command imports what it needs (the store, pandas, the learners, :mod:`.render`) in its own
body, when it runs (``tests/cli/test_quick_cli.py`` holds every ``--help`` to that).
"""

from __future__ import annotations

import os

import click

from qcllp.cli import config, data, models, scoring, serve, training, tryout, watch
from qcllp.cli.context import DEFAULT_CONFIG, Context, pass_ctx
from qcllp.cli.group import QcllpCommand, QcllpGroup
from qcllp.cli.tryout import DEMO_LOOKS, own_command

__all__ = [
    "DEFAULT_CONFIG",
    "DEMO_LOOKS",
    "Context",
    "QcllpCommand",
    "QcllpGroup",
    "_trained_line",
    "main",
    "own_command",
    "pass_ctx",
]


def __getattr__(name: str):
    """``_trained_line`` (:func:`.render.trained_line`) without loading the rendering, which
    needs pandas, for every command."""
    if name == "_trained_line":
        from qcllp.cli.render import trained_line

        return trained_line
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


main.add_command(data.init)
main.add_command(data.ingest)
main.add_command(data.simulate)
main.add_command(data.features)
main.add_command(training.train)
main.add_command(training.evaluate)
main.add_command(models.models)
main.add_command(scoring.score)
main.add_command(scoring.sink)
main.add_command(serve.serve)
main.add_command(watch.status)
main.add_command(watch.report)
main.add_command(watch.retention)
main.add_command(tryout.demo)
main.add_command(config.config)
