"""The inspection guard in ``qcllp serve scorer`` run as the plant runs it: inspections of the
active model's lock-outs arrive in real ingestion batches while the scorer process is SIGKILLed
at random moments and restarted (3 kills in the default run, 12 in the slow one); every
inspection is counted exactly once, the guard trips once (one alarm) at the inspection the
stream says, and ``/metrics`` and ``/healthz`` show the realized (inspected) saving. The
plant, the scorer process and its helpers are those of
:mod:`tests.service.test_scorer_process`."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
import yaml
from sqlalchemy import func, select

from qcllp.plant.config import load_plant_config
from qcllp.scoring.inspection_guard import INSPECTION_INTERVAL
from qcllp.scoring.share_guard import guard_state
from qcllp.store import Inspection
from tests.scoring.test_inspection_guard import (
    BREAK_EVEN,
    latest_run,
    shortfall_loop,
    station_flags,
    store_inspections,
)
from tests.service.scorer_plant import (
    KILL_SEED,
    STATION,
    all_flagged,
    make_plant,
    wait_until,
)
from tests.support.eager_model import promote_locking_all


def issue_costs(plant) -> None:  # noqa: ANN001
    """Cooling with the issue's costs (fail_cost 31, good_cost 69) in the plant file: with the
    default look at the bay (3.45), break-even :data:`BREAK_EVEN`."""
    raw = yaml.safe_load(plant.config_path.read_text())
    for station in raw["stations"]:
        if station["name"] == STATION:
            station.update(fail_cost=31.0, good_cost=69.0)
    plant.config_path.write_text(yaml.safe_dump(raw))
    plant.config = load_plant_config(plant.config_path)


def taken_in(plant, model_id: int) -> bool:  # noqa: ANN001
    """Whether the model's guard has taken in every stored inspection."""
    i = Inspection.__table__
    with plant.store.engine.connect() as conn:
        top = conn.execute(select(func.max(i.c.id))).scalar() or 0
        return guard_state(conn, STATION, model_id).inspect_id == top


@pytest.mark.parametrize(
    "kills", [pytest.param(3, id="3"), pytest.param(12, id="12", marks=pytest.mark.slow)]
)
def test_kill_9_while_inspections_arrive_counts_each_once_and_alarms_once(
    tmp_path,
    history,
    start_scorer,
    kills,
):
    plant = make_plant(tmp_path, history)
    issue_costs(plant)
    model_id = promote_locking_all(plant.store, plant.config, STATION, plant.model_a)
    scorer = start_scorer(plant)
    plant.feed(5)
    wait_until(lambda: all_flagged(plant), what="the feed flagged", procs=[scorer])
    flags = [f for f in station_flags(plant.store) if f.decision == "lock_out"]
    failed = np.random.default_rng(KILL_SEED).random(len(flags)) < 0.5  # below break-even
    path = shortfall_loop(failed, BREAK_EVEN)
    trip = int(np.flatnonzero(path > INSPECTION_INTERVAL)[0])  # within the stream
    rng = random.Random(KILL_SEED)
    cuts = sorted(rng.sample(range(1, len(flags)), kills * 2 - 1))
    batches = np.split(np.arange(len(flags)), cuts)
    for round_ in range(kills):
        if round_:
            scorer = start_scorer(plant)
        scorer.wait_up()
        for part in batches[2 * round_ : 2 * round_ + 2]:
            store_inspections(plant.store, [flags[k] for k in part], failed[part])
            time.sleep(rng.uniform(0.0, 0.4))  # somewhere in a step taking them in, or not
        assert scorer.proc.poll() is None, scorer.log()
        scorer.kill9()
    final = start_scorer(plant)
    final.wait_stepped()  # the last kill may have come after everything was taken in
    wait_until(lambda: taken_in(plant, model_id), what="every inspection taken in", procs=[final])

    with plant.store.engine.connect() as conn:
        state = guard_state(conn, STATION, model_id)
    assert (state.inspect_fail, state.inspect_good) == (failed.sum(), (~failed).sum())
    assert abs(state.inspect_excess - path[-1]) < 1e-9
    fail, n = latest_run(failed, trip)
    assert f"({fail} failing of the last {n} inspected; since promotion " in state.reason
    alarms = plant.alarms()
    assert list(alarms["kind"]) == ["lockout_suspended"] and alarms["message"][0] == state.reason
    # the restarted process reads the model's realized (inspected) saving at its first step
    expected = 31 * failed.sum() - 69 * (~failed).sum() - 3.45 * len(flags)
    wait_until(
        lambda: abs(final.metric("qcllp_scorer_realized_saving") - expected) < 1e-6,
        what="the realized saving in /metrics",
        procs=[final],
        timeout=10,
    )
    assert final.metric("qcllp_scorer_lockouts_suspended") == 1
    problems = final.body()["problems"]
    assert any(
        p.startswith("lock-outs suspended:") and f"realized (inspected) {expected:+,.0f}" in p
        for p in problems
    ), problems
    assert final.terminate() == 0, final.log()
