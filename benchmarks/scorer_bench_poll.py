"""``bench_scorer.py poll``: the cost of a scorer's poll against stored histories of
growing size (one new charge a poll, then an empty poll); see ``bench_scorer.py``'s
docstring for what it measures."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scorer_bench_support import (  # noqa: E402
    READINGS_PER_STICK,
    STICKS_PER_CHARGE,
    TimedService,
    cached_history,
    fast_config,
    ingest_frame,
    machine,
    median,
    profiled,
    remove_db,
    say,
    scalar,
    simulated_pieces,
    sqlite_url,
    trained_model,
)

from qcllp.plant.config import PlantConfig  # noqa: E402
from qcllp.store import Store  # noqa: E402

DEFAULT_POLL_READINGS = [100_000, 1_000_000]


# ----------------------------------------------------------------------------- poll
def poll_db(cache: Path, config: PlantConfig, readings: int, args, record: dict) -> tuple:
    """A cached history of about ``readings`` readings, everything flagged already."""
    n_charges = max(1, round(readings / (STICKS_PER_CHARGE * READINGS_PER_STICK)))

    def flag_everything(store: Store) -> dict:
        decided, drain_s = TimedService(store, config, None).tick()
        say(f"  history flagged: {decided:,} sticks in {drain_s:.1f} s (setup, not measured)")
        return {"drain_s": round(drain_s, 1)}

    return cached_history(cache, "poll", n_charges, config, args, record, flag_everything)


def run_poll(args) -> None:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    config = fast_config()
    record = trained_model(cache, config)
    results = [poll_size(cache, config, size, args, record) for size in args.readings]
    print_poll(results, args)


def poll_size(cache: Path, config: PlantConfig, size: int, args, record: dict) -> tuple:
    """``args.polls`` timed polls (one new charge each, then an empty poll) on a copy of the
    cached history of about ``size`` readings: (meta, flags, busy s, idle s, DB bytes)."""
    db, meta = poll_db(cache, config, size, args, record)
    work = cache / "poll-work.sqlite"
    remove_db(work)
    shutil.copyfile(db, work)
    new = list(
        simulated_pieces(
            config,
            args.polls + 1,
            args.seed + 7,
            first_charge=800_001,
            start=pd.Timestamp(meta["last"]) + pd.Timedelta(hours=1),
            sticks_per_charge=(50, 50),
        )
    )[0]
    codes = new["charge_id"].cat.codes.to_numpy()
    busy, idle = [], []
    with Store.open(sqlite_url(work), create=False) as store:
        service = TimedService(store, config, cache / "poll-sink.jsonl")
        service.tick()  # nothing new: warm caches
        profile = args.profile and size == max(args.readings)
        with profiled(profile, f"{args.polls} polls with {meta['readings']:,} readings stored"):
            for i in range(args.polls + 1):
                ingest_frame(store, config, new[codes == i], f"bench:poll:{i}")
                decided, seconds = service.tick()
                if decided != 50:
                    raise RuntimeError(f"poll {i} decided {decided} sticks, expected 50")
                _, idle_s = service.tick()
                if i:  # the first poll after opening is a warm-up
                    busy.append(seconds)
                    idle.append(idle_s)
        flags = scalar(store, "SELECT count(*) FROM flags")
    remove_db(work)
    say(
        f"  {meta['readings']:,} readings: poll with 50 new sticks {median(busy) * 1e3:.1f} ms,"
        f" empty poll {median(idle) * 1e3:.1f} ms"
    )
    return meta, flags, busy, idle, db.stat().st_size


def print_poll(results: list[tuple], args) -> None:
    base_busy, base_idle = median(results[0][2]), median(results[0][3])
    print("## poll: one poll against the stored history (SQLite)\n")
    print(f"Machine: {machine()}.  ")
    sizes = " vs ".join(f"{r / 1e6:g}M" for r in args.readings)
    mode = "quick mode (default)" if args.readings == DEFAULT_POLL_READINGS else "custom sizes"
    print(
        f"History sizes requested: {sizes} readings ({mode}); every stored stick already flagged."
        f"  \nPer poll: one new ingestion batch (1 charge, 50 sticks, all stations; ingest not "
        f"timed), then `tick()` (takes it in, flags 50), then `tick()` with nothing new. "
        f"Median of {args.polls} polls after one warm-up.\n"
    )
    print(
        "| readings stored | sticks stored | flags stored | DB MB | poll, 50 new sticks ms "
        "| vs smallest | empty poll ms | vs smallest |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for meta, flags, busy, idle, size in results:
        print(
            f"| {meta['readings']:,} | {meta['sticks']:,} | {flags:,} | {size / 1e6:,.0f} "
            f"| {median(busy) * 1e3:.1f} | {median(busy) / base_busy:.2f}x "
            f"| {median(idle) * 1e3:.1f} | {median(idle) / base_idle:.2f}x |"
        )
