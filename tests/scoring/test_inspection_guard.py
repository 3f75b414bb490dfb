"""The lock-out guard on inspected lock-outs: the CUSUM of their precision's shortfall against
break-even, its detection bound on seeded streams, and the real scorer step on SQLite and
PostgreSQL taking in inspection rows (stored through a real ingestion batch) of the real flags
of a model that locks out every stick: a suspension once below break-even, none above, every
inspection counted once; ``qcllp status`` (text and JSON) shows the realized (inspected) saving
and the reason, and what the station sent to the lock-out bay lately."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from sqlalchemy import select

from qcllp.cli import main
from qcllp.cli.render_status import status_text
from qcllp.ingest.batches import run_batch
from qcllp.plant.config import PlantConfig, load_plant_config
from qcllp.reporting.status import plant_status
from qcllp.scoring.inspection_guard import (
    INSPECTION_INTERVAL,
    model_realized,
    shortfall_path,
)
from qcllp.scoring.share_guard import GuardState, guard_state
from qcllp.scoring.step import score_station, score_step
from qcllp.station.registry import load_model, promote
from qcllp.store import Flag, Inspection, Store, dialect_insert
from tests.support.eager_model import promote_locking_all
from tests.support.plants import ROOT, with_station

STATION = "cooling"
ISSUE_BREAK_EVEN = 0.69  # the issue's: good_cost 69, fail_cost 31 (the detection bound's case)
# the issue's costs at cooling, and a look at the bay at 5 % of good_cost: break-even
# (69 + 3.45) / (69 + 31)
BREAK_EVEN = 0.7245


def shortfall_loop(failed, b, start=0.0):
    """The CUSUM written out stick by stick (the reference for the closed form)."""
    s, path = start, []
    for y in failed:
        s = max(0.0, s + b - float(y))
        path.append(s)
    return np.array(path)


def test_the_shortfall_is_the_recursion_in_closed_form():
    failed = np.random.default_rng(0).random(500) < 0.6
    b = ISSUE_BREAK_EVEN
    assert np.allclose(shortfall_path(failed, b, 2.5), shortfall_loop(failed, b, 2.5))
    # one good inspection moves it by break-even, less than one: no single one trips it
    assert shortfall_path([False], b)[0] == pytest.approx(b)


def latest_run(failed, trip: int) -> tuple[int, int]:
    """Failing and inspected lock-outs of the CUSUM's run that tripped at ``trip`` (since it
    last stood at zero)."""
    path = shortfall_path(failed[: trip + 1], BREAK_EVEN)
    zeros = np.flatnonzero(path == 0.0)
    start = int(zeros[-1]) + 1 if len(zeros) else 0
    return int(failed[start : trip + 1].sum()), trip + 1 - start


def first_trips(precision: float, streams: int, length: int, rng) -> np.ndarray:
    """The inspected lock-out at which the guard trips (1-based; ``length + 1``: never) on
    ``streams`` seeded streams of lock-outs failing with ``precision``."""
    good = rng.random((streams, length)) >= precision
    walk = np.cumsum(good - (1.0 - ISSUE_BREAK_EVEN), axis=1)
    path = walk - np.minimum(np.minimum.accumulate(walk, axis=1), 0.0)
    over = path > INSPECTION_INTERVAL
    return np.where(over.any(axis=1), over.argmax(axis=1) + 1, length + 1)


def test_the_detection_bound_at_the_issues_case_and_the_false_trips_at_the_claim(capsys):
    """The numbers of the module docstring and docs/services.md, on 4,000 seeded streams: the
    issue's lock-outs (claimed 0.81-0.86, failing at 0.636, break-even 0.69), and a model whose
    lock-outs fail as often as it claims (0.835) over 2,000 inspected lock-outs."""
    rng = np.random.default_rng(20261126)
    bad = first_trips(0.636, 4000, 2000, rng)
    median, p95 = np.median(bad), np.percentile(bad, 95)
    good = first_trips(0.835, 4000, 2000, rng)
    false_trips = np.mean(good <= 2000)
    with capsys.disabled():
        print(
            f"\n[inspection guard] h {INSPECTION_INTERVAL:g}: precision 0.636 trips after a "
            f"median {median:.0f} (95th percentile {p95:.0f}) inspected lock-outs; at 0.835, "
            f"{false_trips:.1%} trip within 2,000"
        )
    assert (bad <= 2000).all()
    assert 55 <= median <= 85 and p95 <= 230
    assert false_trips <= 0.03


# ----------------------------------------------------------------------------- with a database
def issue_costs(config: PlantConfig) -> PlantConfig:
    """The cooling station with the issue's costs and the default inspection cost (5 % of
    good_cost): break-even :data:`BREAK_EVEN`."""
    return with_station(config, STATION, fail_cost=31.0, good_cost=69.0, inspection_cost=3.45)


@pytest.fixture
def eager_plant(history_store, history_plant, tmp_path):
    """Both engines: the history plant's measurements and counts, a cooling model that locks
    out every stick (no share rule applies), the fresh charges scored by it."""
    store = history_store
    config = issue_costs(replace(history_plant.config, path=tmp_path / "plant.yaml"))
    model_id = promote_locking_all(
        store, config, STATION, history_plant.record_trained(store, config, STATION)
    )
    score_station(store, config, STATION)
    return store, config, model_id


def station_flags(store: Store) -> list:
    """The station's flags in id order: id, charge, stick, decision."""
    f = Flag.__table__
    query = select(f.c.id, f.c.charge_id, f.c.stick_id, f.c.decision).where(f.c.station == STATION)
    with store.engine.connect() as conn:
        return conn.execute(query.order_by(f.c.id)).all()


def store_inspections(store: Store, flags: list, failed, *, audit: bool = False) -> None:
    """One real ingestion batch of inspections of these flags' sticks, in this order:
    ``failed`` a crack, else ok."""
    now = datetime.now(UTC)

    def body(conn, batch_id, report) -> None:
        rows = [
            {
                "station": STATION,
                "charge_id": flag.charge_id,
                "stick_id": flag.stick_id,
                "result": "crack" if bad else "ok",
                "inspected_at": now,
                "flag_id": flag.id,
                "audit": audit,
                "batch_id": batch_id,
                "stored_at": now,
            }
            for flag, bad in zip(flags, failed, strict=True)
        ]
        conn.execute(dialect_insert(conn, Inspection.__table__).values(rows))
        report.records = report.stored = len(rows)

    run_batch(store, "inspections", f"test-{now.timestamp()}", None, body)


def stored_guard(store: Store, model_id: int) -> GuardState:
    with store.engine.connect() as conn:
        return guard_state(conn, STATION, model_id)


def cooling(store: Store, config: PlantConfig) -> dict:
    return next(s for s in plant_status(store, config)["stations"] if s["station"] == STATION)


def test_lockouts_inspected_below_break_even_suspend_the_model_once_with_counts(eager_plant):
    store, config, model_id = eager_plant
    flags = [f for f in station_flags(store) if f.decision == "lock_out"]
    assert len(flags) > 60
    failed = np.random.default_rng(7).random(len(flags)) < 0.45  # precision 0.45 < 0.7245
    path = shortfall_loop(failed, BREAK_EVEN)
    trip = int(np.flatnonzero(path > INSPECTION_INTERVAL)[0])  # the test knows where
    assert trip >= 10
    store_inspections(store, flags[:10], failed[:10])
    step = score_step(store, config, STATION, None)  # no model loaded: nothing taken in
    assert not step.inspected.any
    model = load_model(store, model_id)
    step = score_step(store, config, STATION, model)
    assert (step.inspected.fail, step.inspected.good) == (failed[:10].sum(), 10 - failed[:10].sum())
    assert not step.alarms
    assert step.guard == stored_guard(store, model_id)  # carried in memory, as stored
    store_inspections(store, flags[10:], failed[10:])
    step = score_step(store, config, STATION, model)
    assert [kind for kind, _ in step.alarms] == ["lockout_suspended"]
    assert step.guard == stored_guard(store, model_id) and step.guard.suspended_at is not None

    status = cooling(store, config)
    fail, n = latest_run(failed, trip)
    reason = status["lockout_suspended"]
    assert reason.startswith(
        f"lock-out suspended at {STATION}: the lock-outs of model {model_id} inspected at the bay "
        f"lately fail at {fail / n:.1%} ({fail} failing of the last {n} inspected; since "
        f"promotion {failed[: trip + 1].sum()} of {trip + 1}), below break-even {BREAK_EVEN:.1%}"
    )
    guard = status["lockout_guard"]
    assert guard["inspected_failing"] == failed.sum()
    assert guard["inspected_good"] == len(flags) - failed.sum()
    assert guard["inspection_shortfall"] == pytest.approx(path[-1])
    realized = status["realized_inspected"]["since_promotion"]
    expected = 31 * failed.sum() - 69 * (len(flags) - failed.sum()) - 3.45 * len(flags)
    assert realized == {
        "lockouts_failing": int(failed.sum()),
        "lockouts_good": int(len(flags) - failed.sum()),
        "audit_samples": 0,
        "audit_samples_scrapped": 0,
        "saving": pytest.approx(expected),
    }
    assert status["realized_inspected"]["last_7_days"] == realized

    # exactly once: more steps read nothing again and raise no second alarm
    again = score_step(store, config, STATION, model)
    assert not again.inspected.any and not again.alarms
    assert cooling(store, config)["lockout_guard"]["inspected_failing"] == failed.sum()
    alarms = [a for a in plant_status(store, config)["alarms"] if a["kind"] == "lockout_suspended"]
    assert len(alarms) == 1 and alarms[0]["message"] == reason


def test_a_model_whose_lockouts_paid_is_stopped_as_soon_as_they_stop_paying(eager_plant):
    store, config, model_id = eager_plant
    flags = [f for f in station_flags(store) if f.decision == "lock_out"]
    assert len(flags) >= 100
    # 80 lock-outs that all failed (they paid), then good steel only: 9 of them are 6.5
    # failing sticks short of break-even (9 x 0.7245), the first shortfall above 6
    failed = np.r_[np.ones(80, bool), np.zeros(len(flags) - 80, bool)]
    store_inspections(store, flags, failed)
    score_station(store, config, STATION)
    reason = cooling(store, config)["lockout_suspended"]
    assert (
        "lately fail at 0.0% (0 failing of the last 9 inspected; since promotion 80 of 89), "
        f"below break-even {BREAK_EVEN:.1%}"
    ) in reason
    assert "6.5 failing sticks short, above 6" in reason


def test_lockouts_inspected_above_break_even_do_not_trip_and_audits_count_in_the_saving(
    eager_plant,
):
    store, config, model_id = eager_plant
    flags = [f for f in station_flags(store) if f.decision == "lock_out"]
    failed = np.random.default_rng(8).random(len(flags)) < 0.9  # precision 0.9 > 0.7245
    path = shortfall_loop(failed, BREAK_EVEN)
    assert path.max() < INSPECTION_INTERVAL
    store_inspections(store, flags[:-5], failed[:-5])
    store_inspections(store, flags[-5:], failed[-5:], audit=True)  # as if they had passed
    score_station(store, config, STATION)

    status = cooling(store, config)
    assert status["lockout_suspended"] is None
    guard = status["lockout_guard"]
    assert guard["inspected_failing"] + guard["inspected_good"] == len(flags) - 5
    shortfall = shortfall_loop(failed[:-5], BREAK_EVEN)[-1]
    assert guard["inspection_shortfall"] == pytest.approx(shortfall)
    realized = status["realized_inspected"]["since_promotion"]
    fail, good = int(failed[:-5].sum()), int((~failed[:-5]).sum())
    assert (realized["lockouts_failing"], realized["lockouts_good"]) == (fail, good)
    assert realized["audit_samples"] == 5
    assert realized["saving"] == pytest.approx(31 * fail - 69 * good - 3.45 * len(flags))
    later = model_realized(
        store, config.station(STATION), model_id, datetime.now(UTC) + timedelta(hours=1)
    )
    assert later.inspected == 0 and later.saving == 0


def example_with_issue_costs(path) -> None:
    """The example plant file with the issue's costs at cooling (inspection_cost: default)."""
    doc = yaml.safe_load((ROOT / "plant_config" / "example.yaml").read_text())
    for station in doc["stations"]:
        if station["name"] == STATION:
            station.update(fail_cost=31.0, good_cost=69.0)
    path.write_text(yaml.safe_dump(doc))


def test_status_text_and_json_show_the_realized_saving_and_the_reason(eager_plant, tmp_path):
    store, config, model_id = eager_plant
    store_url = store.engine.url.render_as_string(hide_password=False)
    before = status_text(plant_status(store, config))  # nothing inspected: no figure, not 0
    assert "realized (inspected):" not in before
    row = next(line for line in before.splitlines() if line.startswith(STATION))
    assert row.split()[-2] == "-"  # the realized (inspected) column, before the bag error
    flags = [f for f in station_flags(store) if f.decision == "lock_out"]
    store_inspections(store, flags, [False] * len(flags))  # every lock-out was good steel
    score_station(store, config, STATION)
    example_with_issue_costs(tmp_path / "plant.yaml")
    args = ["--config", str(tmp_path / "plant.yaml"), "--db", store_url]
    shown = CliRunner().invoke(main, [*args, "status"])
    assert shown.exit_code == 0, shown.output
    n = len(flags)
    saving = -(69 + 3.45) * n  # inspection_cost by default 5 % of good_cost
    header = next(line for line in shown.output.splitlines() if "saving/1,000" in line)
    assert "realized (inspected)" in header  # next to the expected figure
    row = next(line for line in shown.output.splitlines() if line.startswith(STATION))
    assert row.split()[-2] == f"{saving:+,.0f}"
    assert f"the lock-outs of model {model_id} inspected at the bay lately fail at 0.0%" in (
        shown.output
    )
    assert (
        f"realized (inspected): since promotion {saving:+,.0f} {config.currency} "
        f"(0 failing and {n} good lock-outs inspected, 0 audit samples)" in shown.output
    )
    as_json = CliRunner().invoke(main, [*args, "--json", "status"])
    assert as_json.exit_code == 0, as_json.output
    station = next(s for s in json.loads(as_json.stdout)["stations"] if s["station"] == STATION)
    assert station["lockout_suspended"].startswith(f"lock-out suspended at {STATION}: the lock")
    assert station["realized_inspected"]["since_promotion"] == {
        "lockouts_failing": 0,
        "lockouts_good": n,
        "audit_samples": 0,
        "audit_samples_scrapped": 0,
        "saving": pytest.approx(saving),
    }


def test_status_shows_what_the_station_sent_to_the_bay_in_the_last_seven_days(eager_plant):
    store, config, _ = eager_plant
    flags = station_flags(store)
    old = [f.id for f in flags[:10]]  # scored 8 days ago: out of the window
    f = Flag.__table__
    with store.engine.begin() as conn:
        conn.execute(
            f.update()
            .where(f.c.id.in_(old))
            .values(scored_at=datetime.now(UTC) - timedelta(days=8))
        )
    recent = flags[10:]
    locked = sum(r.decision == "lock_out" for r in recent)
    audits = sum(r.decision == "inspect" for r in recent)
    assert locked > 0
    status = plant_status(store, config)
    station = next(s for s in status["stations"] if s["station"] == STATION)
    assert station["bay"] == {
        "days": 7,
        "decided": len(recent),
        "lock_out": locked,
        "inspect": audits,
    }
    assert sum(station["flags"].values()) == len(flags)  # the flags column: all of them
    looked = locked + audits
    assert (
        f"lock-out bay, last 7 days: {looked:,} sticks to look at ({locked:,} lock-outs, "
        f"{audits:,} audit samples) of {len(recent):,} decided ({looked / len(recent):.1%})"
    ) in status_text(status)
    others = [s for s in status["stations"] if s["station"] != STATION]
    assert all(s["bay"]["lock_out"] + s["bay"]["inspect"] == 0 for s in others)
    assert status_text(status).count("lock-out bay") == 1
    station["active_model"] = None  # a shadow trial alone: the line's flags are its audits
    assert (
        f"lock-out bay, last 7 days: {looked:,} sticks to look at (audit samples of its "
        "shadow model's would-be lock-outs)"
    ) in status_text(status)


def test_promoting_the_model_again_does_not_hold_earlier_inspections_against_it(eager_plant):
    store, config, model_id = eager_plant
    flags = [f for f in station_flags(store) if f.decision == "lock_out"]
    store_inspections(store, flags, [False] * len(flags))
    score_station(store, config, STATION)
    assert cooling(store, config)["lockout_suspended"] is not None
    promote(store, model_id)  # the cause fixed: the operator lifts the suspension
    score_station(store, config, STATION)  # reads the station's inspections once more
    status = cooling(store, config)
    assert status["lockout_suspended"] is None
    guard = status["lockout_guard"]
    assert guard is None or guard["inspected_failing"] + guard["inspected_good"] == 0
    assert status["realized_inspected"]["since_promotion"]["lockouts_good"] == 0


def test_inspection_cost_defaults_to_5_percent_of_good_cost_and_a_negative_one_is_one_line(
    tmp_path,
):
    doc = yaml.safe_load((ROOT / "plant_config" / "example.yaml").read_text())
    doc["stations"][0]["inspection_cost"] = 7.5
    doc["stations"][1]["inspection_cost"] = -1
    path = tmp_path / "plant.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    checked = CliRunner().invoke(main, ["config", "check", str(path)])
    assert checked.exit_code == 1
    assert checked.stderr.strip() == (
        f"{path}: stations[1].inspection_cost: must be >= 0, got -1"
    ), checked.stderr
    doc["stations"][1].pop("inspection_cost")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    config = load_plant_config(path)
    first, second = config.stations[0], config.stations[1]
    assert first.inspection_cost == 7.5
    assert second.inspection_cost == pytest.approx(0.05 * second.good_cost)
    assert config.scorer.inspection_guard_interval == INSPECTION_INTERVAL
