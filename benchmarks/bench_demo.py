"""``qcllp demo`` end to end: wall and CPU seconds of the whole command, and the demo's own
"finished in" figure, median of ``--runs``; each run a fresh process in a fresh folder.

The demo simulates a plant, ingests it, trains and promotes every station, scores the fresh
charges day by day and writes its report; issue 34's target for it is 30 s on the 2-core
reference machine. With ``--code DIR [DIR ...]`` each run is ``python -m qcllp.cli demo`` of
that source folder (``PYTHONPATH=DIR``, run from it, e.g. a ``git worktree`` of another
commit), the folders alternated run by run; a folder whose process imports qcllp from
elsewhere is refused. The figures each run prints per station must be the same for every
run and code ("same figures"): a faster demo that decides otherwise is another demo.

    .venv/bin/python benchmarks/bench_demo.py --runs 3
    .venv/bin/python benchmarks/bench_demo.py --runs 3 --code /tmp/before /tmp/after
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cli import qcllp  # noqa: E402
from code_runs import cli_env  # noqa: E402

FINISHED = re.compile(r"^demo finished in (\d+) s$", re.MULTILINE)
STATION_ROW = re.compile(r"^(furnace|rolling|cooling|straightening)\s+\d+ .*$", re.MULTILINE)


@dataclass(frozen=True)
class DemoRun:
    """One demo: its wall and CPU seconds, what it said it took, and its station rows."""

    code: str
    wall_s: float
    cpu_s: float
    said_s: int
    figures: tuple[str, ...]


def run_demo(code: Path | None) -> DemoRun:
    """One ``qcllp demo`` in a fresh temporary folder (``code``'s CLI if given)."""
    cli = qcllp() if code is None else [sys.executable, "-m", "qcllp.cli"]
    env = cli_env(code)
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as folder:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run([*cli, "demo", "--workdir", folder], capture_output=True,
                              text=True, check=False, env=env, cwd=code)  # fmt: skip
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        who = code or "the installed qcllp"
        raise SystemExit(f"a demo of {who} failed:\n{done.stderr[-3000:]}")
    said = FINISHED.search(done.stdout)
    if said is None:
        raise SystemExit(f"no 'demo finished in' line in:\n{done.stdout[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rows = tuple(m.group(0) for m in STATION_ROW.finditer(done.stdout))
    return DemoRun("installed" if code is None else str(code), wall, cpu, int(said[1]), rows)


def report(runs: list[DemoRun]) -> None:
    """One row per code: medians, the runs, and whether every run printed the first's rows."""
    print("| code | wall s (median) | runs s | CPU s (median) | demo's own s (median) | "
          "same figures |")  # fmt: skip
    print("|---|---:|---|---:|---:|---|")
    for code in dict.fromkeys(r.code for r in runs):
        mine = [r for r in runs if r.code == code]
        walls = " / ".join(f"{r.wall_s:.1f}" for r in mine)
        same = all(r.figures == runs[0].figures for r in mine)
        print(f"| {code} | {statistics.median(r.wall_s for r in mine):.1f} | {walls} | "
              f"{statistics.median(r.cpu_s for r in mine):.1f} | "
              f"{statistics.median(r.said_s for r in mine):.0f} | "
              f"{'yes' if same else 'NO'} |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--code", type=Path, nargs="+", default=[None],
                        help="source folders whose CLI runs, alternated")  # fmt: skip
    args = parser.parse_args(argv)
    args.code = [None if c is None else c.resolve() for c in args.code]  # runs start in it
    runs = []
    for repeat in range(args.runs):
        for code in args.code:
            run = run_demo(code)
            print(f"run {repeat + 1}, {run.code}: {run.wall_s:.1f} s wall, {run.cpu_s:.1f} s CPU, "
                  f"demo said {run.said_s} s", file=sys.stderr)  # fmt: skip
            runs.append(run)
    report(runs)


if __name__ == "__main__":
    main()
