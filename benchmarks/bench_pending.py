"""The scorer's pending sticks: the cost of each statement of ``qcllp.scoring.pending``.

A step writes ``scorer_pending`` three ways: the arrivals it takes in (``_upsert_pending``),
the sticks it postpones while a sensor is missing (``postpone``: a failed sensor postpones
every stick the line brings) and the sticks it decided (``forget_pending``). This times each
on ``--sticks`` pending sticks of one station, inside a transaction rolled back after each
call, on a fresh SQLite file and on a PostgreSQL server started here (``tests/pgserver.py``,
Debian's package); medians of ``--repeats`` calls.

With ``--code DIR [DIR ...]`` each code (``PYTHONPATH=DIR``, e.g. a ``git worktree`` of another
commit) runs in a process of its own, the codes alternated ``--runs`` times, so two commits
compare in one session:

    .venv/bin/python benchmarks/bench_pending.py --sticks 500 5000
    .venv/bin/python benchmarks/bench_pending.py --code /tmp/before /tmp/after --runs 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from code_runs import alternated, run_in_code

ROOT = Path(__file__).resolve().parents[1]
PG_PORT = 54419
T0 = datetime(2026, 3, 1, tzinfo=UTC)
STATEMENTS = ("arrivals", "postpone", "forget")


def time_statements(url: str, n: int, repeats: int) -> dict[str, float]:
    """Median ms of each statement on ``n`` pending sticks of the example plant's cooling."""
    from qcllp.plant.config import load_plant_config
    from qcllp.scoring import pending
    from qcllp.store import Store

    st = load_plant_config(ROOT / "plant_config" / "example.yaml").station("cooling")
    keys = {(f"C{i // 50:05d}", f"S{i:06d}"): (T0, T0) for i in range(n)}
    store = Store.open(url)
    with store.write() as conn:
        pending._upsert_pending(conn, st, keys, later=set())
    with store.engine.connect() as conn:
        due = pending.due_sticks(conn, st.name, T0 + timedelta(hours=1), n, False)
    calls = {
        "arrivals": lambda conn: pending._upsert_pending(conn, st, keys, later=set()),
        "postpone": lambda conn: pending.postpone(conn, st, due, due["first_arrived_at"]),
        "forget": lambda conn: pending.forget_pending(conn, st.name, due),
    }
    times: dict[str, list[float]] = {name: [] for name in STATEMENTS}
    for _ in range(repeats):
        for name in STATEMENTS:
            with store.engine.connect() as conn, conn.begin() as tx:
                started = time.perf_counter()
                calls[name](conn)
                times[name].append(1000 * (time.perf_counter() - started))
                tx.rollback()
    store.close()
    return {name: statistics.median(v) for name, v in times.items()}


def one_run(sizes: list[int], repeats: int) -> dict:
    """Every size on both engines, in this process: ``{engine: {size: {statement: ms}}}``."""
    sys.path.append(str(ROOT))  # tests.pgserver, after the code under test
    import qcllp
    from tests.pgserver import TempPostgres, find_pg_bin

    out: dict = {"qcllp": qcllp.__file__, "sqlite": {}, "postgresql": {}}
    with tempfile.TemporaryDirectory() as folder:
        for n in sizes:
            url = f"sqlite:///{folder}/pending-{n}.sqlite"
            out["sqlite"][n] = time_statements(url, n, repeats)
        server = TempPostgres(find_pg_bin(), port=PG_PORT)
        try:
            for n in sizes:
                url = server.create_database(f"pending{n}")
                out["postgresql"][n] = time_statements(url, n, repeats)
        finally:
            server.stop()
    return out


def run_code(code: Path | None, args: argparse.Namespace) -> dict:
    """One run in a process of ``code`` (this checkout when ``None``)."""
    worker = ["--one-run", "--repeats", str(args.repeats), "--sticks", *map(str, args.sticks)]
    return run_in_code(code, __file__, worker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sticks", type=int, nargs="+", default=[500, 5000])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--code", type=Path, nargs="+", default=[None])
    parser.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_run:
        print(json.dumps(one_run(args.sticks, args.repeats)))
        return
    runs = alternated(args.code, args.runs, lambda code: run_code(code, args))
    print(f"\nms a call, median of {args.repeats}, run by run (rolled back after each call)\n")
    print("| engine | sticks | statement | " + " | ".join(str(c or ROOT) for c in runs) + " |")
    print("|---|---:|---|" + "---:|" * len(runs))
    for engine in ("sqlite", "postgresql"):
        for n in args.sticks:
            for name in STATEMENTS:
                cells = [" / ".join(f"{r[engine][str(n)][name]:.1f}" for r in results)
                         for results in runs.values()]  # fmt: skip
                print(f"| {engine} | {n:,} | {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
