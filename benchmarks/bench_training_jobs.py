"""``qcllp train --method auto`` on one process and on several: wall time, CPU, the same model.

The plant is the demo's (``qcllp demo``: the example plant, 100 charges of history and 30
fresh ones with their counts, so 130 labeled charges), built once in ``--folder``. Each run is
the installed CLI as a real process, ``--station cooling --method auto --jobs N``, on a copy
of the demo's database, the values of ``--jobs`` alternated ``--repeats`` times; CPU counts
every process of the run (the CLI and its loky workers, as children that were waited for).
"Same trials" compares what each run printed per method (CV bag error, expected saving) and
the method it chose with the first run (of the first ``--jobs`` given): a fixed seed must give
the same trials for any ``--jobs``. A run whose output has no trial lines (``--method`` other
than ``auto``) or no chosen model stops the benchmark.

``--code DIR [DIR ...]`` runs the CLI of each source folder (``python -m qcllp.cli`` with
``PYTHONPATH=DIR``, e.g. a ``git worktree`` of another commit) instead of the installed one,
the folders alternated run by run; a folder whose process imports qcllp from elsewhere is
refused. "Same trials" then also says whether two codes trained the same models.

    python benchmarks/bench_training_jobs.py                    # --jobs 1 and 2, 2 repeats
    python benchmarks/bench_training_jobs.py --jobs 1 2 --repeats 3 --method auto
    python benchmarks/bench_training_jobs.py --jobs 1 --code /tmp/before /tmp/after
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cli import demo_folder, qcllp  # noqa: E402
from code_runs import cli_env  # noqa: E402

TRIAL = re.compile(r"^\s+\*?\s*(\S+)\s+CV bag error (\S+), expected saving (\S+) .*?, (\d+) s$")


@dataclass(frozen=True)
class Run:
    """One training run: its wall and CPU seconds, what it chose and each method's trial."""

    code: str  # the source folder, or "installed"
    jobs: int
    wall_s: float
    cpu_s: float
    chose: str
    trials: dict[str, tuple[str, str, int]]  # method: (CV bag error, saving, seconds)


def train(folder: Path, station: str, method: str, jobs: int, code: Path | None = None) -> Run:
    """One ``qcllp train`` on a fresh copy of the demo's database (``code``'s CLI if given)."""
    database = folder / "bench-train.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    shutil.copy(folder / "plant.sqlite", database)
    cli = qcllp() if code is None else [sys.executable, "-m", "qcllp.cli"]
    command = [*cli, "--config", str(folder / "plant.yaml"), "train", "--db",
               f"sqlite:///{database}", "--station", station, "--method", method,
               "--jobs", str(jobs)]  # fmt: skip
    env = cli_env(code)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env, cwd=code)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    text = done.stdout + done.stderr
    trials = {
        m[1]: (m[2], m[3], int(m[4])) for line in text.splitlines() if (m := TRIAL.match(line))
    }
    chose = re.search(r"registered model \d+ \((\S+)\)", text)
    if chose is None or (method == "auto" and not trials):
        raise SystemExit(f"no chosen model or no trials in the output of {command}:\n{text}")
    return Run("installed" if code is None else str(code), jobs, wall, cpu, chose[1], trials)


def report(runs: list[Run]) -> None:
    """One row per code and ``--jobs``: medians, the runs, and whether every run chose and
    scored as the first."""
    first = runs[0]
    keys = dict.fromkeys((r.code, r.jobs) for r in runs)
    by_jobs = {key: [r for r in runs if (r.code, r.jobs) == key] for key in keys}
    print("| code | --jobs | wall s (median) | runs s | CPU s (median) | chose | same trials |")
    print("|---|---:|---:|---|---:|---|---|")
    for (code, jobs), mine in by_jobs.items():
        walls = " / ".join(f"{r.wall_s:.1f}" for r in mine)
        same = all(
            {m: t[:2] for m, t in r.trials.items()} == {m: t[:2] for m, t in first.trials.items()}
            and r.chose == first.chose
            for r in mine
        )
        print(f"| {code} | {jobs} | {statistics.median(r.wall_s for r in mine):.1f} | {walls} | "
              f"{statistics.median(r.cpu_s for r in mine):.1f} | {mine[0].chose} | "
              f"{'yes' if same else 'NO'} |")  # fmt: skip
    print("\n| code | --jobs | " + " | ".join(f"{m} s" for m in first.trials) + " |")
    print("|---|---:|" + "---:|" * len(first.trials))
    for (code, jobs), mine in by_jobs.items():
        cells = [
            f"{statistics.median(r.trials.get(m, ('', '', 0))[2] for r in mine):.0f}"
            for m in first.trials
        ]
        print(f"| {code} | {jobs} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/bench_training_jobs"))
    parser.add_argument("--station", default="cooling")
    parser.add_argument("--method", default="auto")
    parser.add_argument("--jobs", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--code", type=Path, nargs="+", default=[None],
                        help="source folders whose CLI runs, alternated")  # fmt: skip
    args = parser.parse_args(argv)
    args.code = [None if c is None else c.resolve() for c in args.code]  # runs start in it
    folder = demo_folder(args.folder).parent
    runs = []
    for repeat in range(args.repeats):
        for code in args.code:
            for jobs in args.jobs:
                run = train(folder, args.station, args.method, jobs, code)
                print(f"repeat {repeat + 1}, {run.code}, --jobs {jobs}: {run.wall_s:.1f} s wall, "
                      f"{run.cpu_s:.1f} s CPU, chose {run.chose}", file=sys.stderr)  # fmt: skip
                runs.append(run)
    print(f"\n`qcllp train --station {args.station} --method {args.method}` on the demo's plant; "
          f"nproc {os.cpu_count()}, Python {sys.version.split()[0]}\n")  # fmt: skip
    report(runs)


if __name__ == "__main__":
    main()
