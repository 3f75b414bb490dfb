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

    python benchmarks/bench_training_jobs.py                    # --jobs 1 and 2, 2 repeats
    python benchmarks/bench_training_jobs.py --jobs 1 2 --repeats 3 --method auto
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

TRIAL = re.compile(r"^\s+\*?\s*(\S+)\s+CV bag error (\S+), expected saving (\S+) .*?, (\d+) s$")


@dataclass(frozen=True)
class Run:
    """One training run: its wall and CPU seconds, what it chose and each method's trial."""

    jobs: int
    wall_s: float
    cpu_s: float
    chose: str
    trials: dict[str, tuple[str, str, int]]  # method: (CV bag error, saving, seconds)


def train(folder: Path, station: str, method: str, jobs: int) -> Run:
    """One ``qcllp train`` on a fresh copy of the demo's database."""
    database = folder / "bench-train.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    shutil.copy(folder / "plant.sqlite", database)
    command = [*qcllp(), "--config", str(folder / "plant.yaml"), "train", "--db",
               f"sqlite:///{database}", "--station", station, "--method", method,
               "--jobs", str(jobs)]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
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
    return Run(jobs, wall, cpu, chose[1], trials)


def report(runs: list[Run]) -> None:
    """One row per ``--jobs``: medians, the runs, and whether every run chose as the first."""
    first = runs[0]
    by_jobs = {
        jobs: [r for r in runs if r.jobs == jobs] for jobs in dict.fromkeys(r.jobs for r in runs)
    }
    print("| --jobs | wall s (median) | runs s | CPU s (median) | chose | same trials |")
    print("|---:|---:|---|---:|---|---|")
    for jobs, mine in by_jobs.items():
        walls = " / ".join(f"{r.wall_s:.1f}" for r in mine)
        same = all(
            {m: t[:2] for m, t in r.trials.items()} == {m: t[:2] for m, t in first.trials.items()}
            and r.chose == first.chose
            for r in mine
        )
        print(f"| {jobs} | {statistics.median(r.wall_s for r in mine):.1f} | {walls} | "
              f"{statistics.median(r.cpu_s for r in mine):.1f} | {mine[0].chose} | "
              f"{'yes' if same else 'NO'} |")  # fmt: skip
    print("\n| --jobs | " + " | ".join(f"{m} s" for m in first.trials) + " |")
    print("|---:|" + "---:|" * len(first.trials))
    for jobs, mine in by_jobs.items():
        cells = [
            f"{statistics.median(r.trials.get(m, ('', '', 0))[2] for r in mine):.0f}"
            for m in first.trials
        ]
        print(f"| {jobs} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/bench_training_jobs"))
    parser.add_argument("--station", default="cooling")
    parser.add_argument("--method", default="auto")
    parser.add_argument("--jobs", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    folder = demo_folder(args.folder).parent
    runs = []
    for repeat in range(args.repeats):
        for jobs in args.jobs:
            run = train(folder, args.station, args.method, jobs)
            print(f"repeat {repeat + 1}, --jobs {jobs}: {run.wall_s:.1f} s wall, "
                  f"{run.cpu_s:.1f} s CPU, chose {run.chose}", file=sys.stderr)  # fmt: skip
            runs.append(run)
    print(f"\n`qcllp train --station {args.station} --method {args.method}` on the demo's plant; "
          f"nproc {os.cpu_count()}, Python {sys.version.split()[0]}\n")  # fmt: skip
    report(runs)


if __name__ == "__main__":
    main()
