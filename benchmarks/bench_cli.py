"""How long the ``qcllp`` command line takes: ``--help`` of the group and of the subcommands,
and the two look-around commands the demo prints (``models list``, ``status``) on a demo's
database.

Each command runs as its own process (the installed ``qcllp`` script beside this Python, as
a person types it), ``--runs`` times; the table gives the median, fastest and slowest wall
seconds and the heavy libraries the command imported (``python -X importtime``'s report,
read from one extra run). Before/after a change is two runs of this script on the two commits.

    .venv/bin/python benchmarks/bench_cli.py [--runs 5] [--demo /tmp/bench_cli_demo]

The demo folder is made once with ``qcllp demo --workdir DIR`` (about a minute) and reused.
Target of issue 34: every ``--help`` <= 0.3 s, ``qcllp models list`` <= 1 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("pandas", "numpy", "sklearn", "scipy", "numba", "sqlalchemy", "joblib", "pydantic")
HELPS = (
    ["--help"],
    ["models", "list", "--help"],
    ["train", "--help"],
    ["serve", "scorer", "--help"],
    ["status", "--help"],
)
ON_DEMO = (["models", "list"], ["status"])


def qcllp() -> list[str]:
    """The ``qcllp`` script beside this Python (how people run it), else ``-m qcllp.cli``."""
    script = Path(sys.executable).parent / "qcllp"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "qcllp.cli"]


def wall_seconds(argv: list[str], runs: int) -> list[float]:
    """Wall seconds of ``runs`` runs of ``argv``, each a fresh process; a failing run stops."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def heavy_imports(args: list[str]) -> list[str]:
    """The :data:`HEAVY` top-level packages one run of ``qcllp ARGS`` imports (from
    ``-X importtime``'s stderr report)."""
    code = "import sys; from qcllp.cli import main; sys.argv[0] = 'qcllp'; main()"
    env = os.environ | {"PYTHONPROFILEIMPORTTIME": "1"}
    run = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True
    )
    seen = {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in run.stderr.splitlines()
        if line.startswith("import time:")
    }
    return [name for name in HEAVY if name in seen]


def demo_options(doc: str, runs: int) -> tuple[argparse.Namespace, Path]:
    """The options of a benchmark on the demo plant (``--runs``, default ``runs``; ``--demo``,
    its folder, made first if needed) and the demo's plant YAML."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--demo", type=Path, default=Path("/tmp/bench_cli_demo"))
    opts = parser.parse_args()
    return opts, demo_folder(opts.demo)


def demo_folder(folder: Path) -> Path:
    """The demo's plant YAML in ``folder``, running ``qcllp demo`` there first if needed."""
    config = folder / "plant.yaml"
    if not config.is_file():
        print(f"making the demo plant in {folder} (about a minute)", file=sys.stderr)
        subprocess.run([*qcllp(), "demo", "--workdir", str(folder)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return config


def main() -> None:
    """Measure every command and print the markdown table."""
    opts, config = demo_options(__doc__, runs=5)
    commands = [*HELPS, *(["--config", str(config), *c] for c in ON_DEMO)]
    print(f"{os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.1f}, {opts.runs} runs each\n")  # fmt: skip
    print("| command | median s | min s | max s | heavy imports |")
    print("|---|---:|---:|---:|---|")
    for args in commands:
        times = wall_seconds([*qcllp(), *args], opts.runs)
        shown = " ".join(a if a != str(config) else "DEMO/plant.yaml" for a in args)
        heavy = ", ".join(heavy_imports(args)) or "-"
        print(f"| `qcllp {shown}` | {statistics.median(times):.2f} | {min(times):.2f} | "
              f"{max(times):.2f} | {heavy} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
