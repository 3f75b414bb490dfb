"""A station scorer's start: from the process's start to its first healthy ``/healthz`` (its
model loaded, its first step done), and its CPU until a SIGTERM then; on the demo plant.

This is how long a line waits for flags after a scorer is restarted (``kill -9``, a deploy, a
machine's reboot), and most of the CPU the test suite's service tests spend per scorer. Two
ways, alternated run by run so that the machine's noise falls on both alike:

* ``compiled``: the scorer as ``deploy/bootstrap.sh`` installs it, qcllp's modules compiled;
* ``from source``: the same from a copy of qcllp's source without bytecode and with
  ``PYTHONDONTWRITEBYTECODE`` set (as on CI), so every qcllp module is compiled in every
  process, as in an editable install before the bootstrap compiled them.

    python benchmarks/bench_scorer_start.py --runs 7
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_cli import demo_options

WAYS = ("compiled", "from source")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as reply:
            return reply.status == 200 and bool(json.load(reply))
    except OSError:
        return False


def one_start(config: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from the scorer's start to healthy, and its CPU seconds until it exited after
    a SIGTERM sent then."""
    port = free_port()
    argv = [sys.executable, "-m", "qcllp.cli", "--config", str(config), "serve", "scorer",
            "--station", "cooling", "--port", str(port)]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while not healthy(port):
            if proc.poll() is not None or time.perf_counter() - started > 120:
                raise SystemExit(f"the scorer did not come up: {proc.stderr.read()[-2000:]!r}")
            time.sleep(0.02)
        up = time.perf_counter() - started
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return up, cpu


def environments(folder: Path) -> dict[str, dict[str, str]]:
    """The environment of each way (see the module docstring)."""
    import qcllp

    package = Path(qcllp.__file__).parent
    if not Path(importlib.util.cache_from_source(str(package / "cli" / "__init__.py"))).is_file():
        raise SystemExit(f"{package}'s modules are not compiled: run deploy/bootstrap.sh first")
    source = folder / "source"
    shutil.copytree(package, source / "qcllp",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    base = dict(os.environ)
    path = os.pathsep.join([str(source), *filter(None, [base.get("PYTHONPATH")])])
    return {
        "compiled": base,
        "from source": {**base, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"},
    }


def main() -> None:
    """Start the scorer ``--runs`` times each way, alternated, and print the table."""
    opts, config = demo_options(__doc__, runs=7)
    results: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="qcllp-bench-start-") as folder:
        envs = environments(Path(folder))
        for _ in range(opts.runs):
            for way in WAYS:
                results[way].append(one_start(config, envs[way]))
    print(f"{os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{opts.runs} starts each, alternated; medians\n")  # fmt: skip
    print("| way | start to healthy s | CPU s | CPU vs compiled |")
    print("|---|---:|---:|---:|")
    base_cpu = statistics.median(cpu for _, cpu in results["compiled"])
    for way in WAYS:
        up = statistics.median(u for u, _ in results[way])
        cpu = statistics.median(c for _, c in results[way])
        print(f"| {way} | {up:.2f} | {cpu:.2f} | {cpu / base_cpu:.2f}x |")


if __name__ == "__main__":
    main()
