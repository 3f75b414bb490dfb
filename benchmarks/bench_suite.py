"""Where the default test suite spends its CPU: per test file and per test, this process's CPU
and its waited-for children's (the service processes and CLI runs a test starts), and wall.

The suite on 2 cores is bound by CPU, not by waiting: 3 workers instead of 2 made it no
faster (docs/benchmarks.md, "The test suite's CPU"). So what to cut is CPU, and this says
where it is. It runs the README's default suite once with a small plugin that reads
``getrusage`` around every test; children's CPU counts when they are reaped, so a process a
fixture keeps for a module is counted at its teardown, loky's reusable workers (a training
with ``n_jobs`` > 1) when they idle out or the worker exits, and servers shared by a worker
(PostgreSQL, Mosquitto) are not counted at all. Service processes forked from a worker's
preloaded interpreter (``tests/service/forked.py``) count when the worker reads their exit;
that interpreter's own imports, once a worker, are not counted (``QCLLP_TESTS_EXEC=1`` starts
every process from scratch, as before).

    python benchmarks/bench_suite.py              # the default suite, top 25 files and tests
    python benchmarks/bench_suite.py --top 40 -- tests/service
    python benchmarks/bench_suite.py --from-scratch   # no process forked (QCLLP_TESTS_EXEC=1)
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = """
import os, resource, sys, time
import pytest


def _cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    forked = sys.modules.get("tests.service.forked")  # children of the worker's zygote
    more = 0.0 if forked is None else forked.reaped_cpu_s()
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime + more


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    own, kids = _cpu()
    started = time.perf_counter()
    yield
    own_after, kids_after = _cpu()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(os.environ["QCLLP_BENCH_SUITE_OUT"], worker + ".tsv"), "a") as out:
        wall = time.perf_counter() - started
        out.write(f"{item.nodeid}\\t{own_after - own}\\t{kids_after - kids}\\t{wall}\\n")
"""


def run_suite(
    folder: Path, pytest_args: list[str], *, from_scratch: bool
) -> tuple[float, float, str]:
    """The suite under the plugin: its wall seconds, the CPU seconds of every process it ran
    (reaped by the end), and pytest's summary line after the lines naming a failed test.
    ``from_scratch``: every service process started from scratch (``QCLLP_TESTS_EXEC=1``),
    not forked from a preloaded interpreter."""
    (folder / "qcllp_bench_suite_plugin.py").write_text(textwrap.dedent(PLUGIN))
    env = {**os.environ, "QCLLP_BENCH_SUITE_OUT": str(folder)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    if from_scratch:
        env["QCLLP_TESTS_EXEC"] = "1"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-p", "qcllp_bench_suite_plugin", *pytest_args]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, check=False, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    lines = done.stdout.strip().splitlines()
    failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    summary = lines[-1] if lines else done.stderr[-300:]
    return wall, cpu, "\n".join([*failed, summary])  # a failed test named, not only counted


def rows(folder: Path) -> list[tuple[str, float, float, float]]:
    """Every test's (node id, own CPU s, children's CPU s, wall s)."""
    found = []
    for path in folder.glob("*.tsv"):
        for line in path.read_text().splitlines():
            node, own, kids, wall = line.split("\t")
            found.append((node, float(own), float(kids), float(wall)))
    return found


def report(
    tests: list[tuple[str, float, float, float]], run: tuple[float, float, str], top: int
) -> None:
    """The totals, then the files and the tests with the most CPU."""
    wall, cpu, summary = run
    own, kids = sum(t[1] for t in tests), sum(t[2] for t in tests)
    print(f"{summary}\n{len(tests)} tests in {wall:.0f} s wall, {cpu:.0f} CPU-s in all its "
          f"processes; CPU in the tests: {own:.0f} s in the workers, {kids:.0f} s in the "
          "processes they started\n")  # fmt: skip
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for node, o, k, w in tests:
        totals = files[node.split("::")[0]]
        totals[0], totals[1], totals[2] = totals[0] + o, totals[1] + k, totals[2] + w
    print("| file | CPU s | in the worker | in its processes | wall s |")
    print("|---|---:|---:|---:|---:|")
    for name, (o, k, w) in sorted(files.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:top]:
        print(f"| {name} | {o + k:.1f} | {o:.1f} | {k:.1f} | {w:.1f} |")
    print("\n| test | CPU s | in the worker | in its processes | wall s |")
    print("|---|---:|---:|---:|---:|")
    for node, o, k, w in sorted(tests, key=lambda t: -(t[1] + t[2]))[:top]:
        print(f"| {node} | {o + k:.1f} | {o:.1f} | {k:.1f} | {w:.1f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--from-scratch", action="store_true", help="QCLLP_TESTS_EXEC=1: no forked processes"
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: passed on to pytest")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="qcllp-bench-suite-") as folder:
        run = run_suite(Path(folder), args.pytest_args, from_scratch=args.from_scratch)
        report(rows(Path(folder)), run, args.top)


if __name__ == "__main__":
    main()
