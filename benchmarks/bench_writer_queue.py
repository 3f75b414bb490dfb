"""SQLite's writers with and without qcllp's writer queue (:mod:`qcllp.store.writer_queue`).

N processes write to one SQLite file in WAL mode, as the intake and the station scorers do:
each loops ``BEGIN IMMEDIATE``, holds the writer lock ``--hold-ms`` (busy on the CPU, as a
scoring step is), commits, and sleeps ``--gap-s``. Printed: transactions done and the wait for
the lock, p50 / p99 / max, with SQLite's busy handler alone and with the queue's turn first.

    python benchmarks/bench_writer_queue.py --writers 6 --hold-ms 20 --gap-s 0.1 --seconds 15
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import sqlite3
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from qcllp.store.writer_queue import WriterQueue


def writer(path: str, queued: bool, args: argparse.Namespace, out: mp.Queue) -> None:
    """One writing process: the waits for the lock, in seconds."""
    con = sqlite3.connect(path, timeout=60, isolation_level=None)
    con.execute("PRAGMA synchronous=NORMAL")
    queue = WriterQueue(path) if queued else None  # its file beside the database, as the store's
    waits, end = [], time.time() + args.seconds
    while time.time() < end:
        start = time.perf_counter()
        with queue.turn() if queue is not None else nullcontext():
            con.execute("BEGIN IMMEDIATE")
            waits.append(time.perf_counter() - start)
            held = time.perf_counter()
            while time.perf_counter() - held < args.hold_ms / 1000:
                pass
            con.execute("INSERT INTO t VALUES (?)", (os.getpid(),))
            con.execute("COMMIT")
        time.sleep(args.gap_s)
    out.put(waits)


def run(folder: Path, queued: bool, args: argparse.Namespace) -> np.ndarray:
    """All writers' waits for one mode, on a fresh database."""
    path = str(folder / f"bench-{'queue' if queued else 'busy'}.sqlite")
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t (x)")
    con.close()
    out: mp.Queue = mp.Queue()
    procs = [mp.Process(target=writer, args=(path, queued, args, out)) for _ in range(args.writers)]
    for p in procs:
        p.start()
    waits = [w for _ in procs for w in out.get()]
    for p in procs:
        p.join()
    return np.array(waits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=6)
    parser.add_argument("--hold-ms", type=float, default=20.0)
    parser.add_argument("--gap-s", type=float, default=0.1)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    print(f"{args.writers} writers, each holding the lock {args.hold_ms:g} ms then pausing "
          f"{args.gap_s:g} s, {args.seconds:g} s per mode; nproc {os.cpu_count()}, "
          f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}\n")  # fmt: skip
    print("| writers wait with | transactions | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for queued, name in ((False, "SQLite's busy handler"), (True, "the writer queue")):
            w = run(Path(tmp), queued, args) * 1000
            print(f"| {name} | {len(w):,} | {np.median(w):.1f} | {np.quantile(w, 0.99):.1f} "
                  f"| {w.max():.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
