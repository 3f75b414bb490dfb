"""The lock-out guard on final QC's counts: the model's predicted failures among the sticks that
reached QC against those reported, a CUSUM of the over-prediction, lock-outs suspended once it
trips; exactly once per charge, on SQLite and PostgreSQL, with real count files."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from qcllp.ingest import ingest_defect_counts, ingest_measurements
from qcllp.plant.simulate import simulate_plant, write_simulation
from qcllp.reporting.status import plant_status
from qcllp.scoring.count_guard import compare_counts
from qcllp.scoring.share_guard import guard_state
from qcllp.scoring.step import flags_frame, score_station, score_step
from qcllp.station.guard_bounds import (
    COUNT_INTERVAL,
    COUNT_REFERENCE,
    COUNT_Z_CAP,
    count_excess_path,
)
from qcllp.station.registry import load_model, promote
from qcllp.store import Store
from qcllp.training.train import labeled_data, record_model
from tests.support.eager_model import promote_locking_all

TYPES = ["crack", "bend", "scale"]


def cusum(predicted, variance, observed, start=0.0):
    """The count CUSUM written out charge by charge (the reference for the closed form)."""
    s, path = start, []
    for p, v, o in zip(predicted, variance, observed, strict=True):
        s = max(0.0, s + min((p - o) / np.sqrt(v + 1e-9), COUNT_Z_CAP) - COUNT_REFERENCE)
        path.append(s)
    return np.array(path)


def poisson_binomial_plant(rng, n_charges, shift=1.0):
    """Per charge the model's probabilities ``q`` (summed, with variance) and the failures of
    sticks whose true probability is ``shift * q``."""
    codes = np.repeat(np.arange(n_charges), rng.integers(20, 60, n_charges))
    q = rng.beta(0.5, 4.0, len(codes))
    failed = rng.random(len(codes)) < shift * q
    return (
        np.bincount(codes, q),
        np.bincount(codes, q * (1 - q)),
        np.bincount(codes, failed).astype(int),
    )


def test_the_count_cusum_is_the_recursion_in_closed_form():
    rng = np.random.default_rng(0)
    args = poisson_binomial_plant(rng, 300, shift=0.8)
    assert np.allclose(count_excess_path(*args, 1.5), cusum(*args, 1.5))


def test_no_single_charge_trips_the_rule():
    # twenty near-certain sticks, none failed: z is about 200, but counts 8 at most
    one = count_excess_path([19.99], [0.01], [0])
    assert one[0] == pytest.approx(COUNT_Z_CAP - COUNT_REFERENCE)
    assert one[0] < COUNT_INTERVAL
    two = count_excess_path([19.99] * 2, [0.01] * 2, [0] * 2)
    assert two[-1] > COUNT_INTERVAL


def test_a_calibrated_model_does_not_trip_and_an_over_predicting_one_does_within_charges():
    rng = np.random.default_rng(1)
    # twenty plants of 1,000 charges each (most of a year each): a calibrated model trips in
    # about 1.5 % of them (a false-alarm run length of some 60,000 charges)
    healthy = [count_excess_path(*poisson_binomial_plant(rng, 1000)).max() for _ in range(20)]
    assert np.sum(np.array(healthy) > COUNT_INTERVAL) <= 2
    over = count_excess_path(*poisson_binomial_plant(rng, 200, shift=0.5))
    trips = np.flatnonzero(over > COUNT_INTERVAL)
    assert len(trips) and trips[0] < 15
    # under-prediction is another matter (the share rules and training see to it): no trip
    under = count_excess_path(*poisson_binomial_plant(rng, 500, shift=1.5))
    assert under.max() < COUNT_INTERVAL


def frames(rows, elsewhere=()):
    columns = ["charge_id", "stick_id", "model_id", "probability", "decision"]
    here = pd.DataFrame(rows, columns=columns)
    locked = pd.DataFrame(list(elsewhere), columns=["charge_id", "stick_id"])
    return here, locked


def test_compare_counts_takes_the_sticks_that_reached_qc_or_skips_the_charge_with_a_reason():
    rows = [
        # A: the line acted on the flags: one lock-out here, one at another station
        ("A", "1", 7, 0.9, "lock_out"),
        ("A", "2", 7, 0.2, "pass"),
        ("A", "3", 7, 0.1, "pass"),
        ("A", "4", 7, 0.4, "pass"),
        # B: shadow mode, QC saw all sticks
        ("B", "1", 7, 0.8, "lock_out"),
        ("B", "2", 7, 0.3, "pass"),
        # C: an unscorable stick: no probability for a stick that reached QC
        ("C", "1", 7, None, "unscorable"),
        ("C", "2", 7, 0.3, "pass"),
        # D: QC counted a stick the station never decided
        ("D", "1", 7, 0.3, "pass"),
        # E: decided by an earlier model only: not this model's business
        ("E", "1", 6, 0.3, "pass"),
        # F: one stick by the earlier model, one by this one
        ("F", "1", 6, 0.5, "pass"),
        ("F", "2", 7, 0.5, "pass"),
        # G: unscorable here, but locked out at another station: it never reached QC
        ("G", "1", 7, None, "unscorable"),
        ("G", "2", 7, 0.6, "pass"),
    ]
    here, elsewhere = frames(rows, [("A", "4"), ("G", "1")])
    charges = pd.DataFrame({"charge_id": list("ABCDEFG"), "n_sticks": [2, 2, 2, 2, 1, 2, 1]})
    observed = pd.Series({"A": 1, "B": 1, "C": 0, "D": 1, "E": 0, "F": 1, "G": 0}, dtype=float)
    check = compare_counts(charges, here, elsewhere, observed, 7)
    assert list(check.charges) == ["A", "B", "G"]
    assert np.allclose(check.predicted, [0.3, 1.1, 0.6])
    assert np.allclose(check.variance, [0.2 * 0.8 + 0.1 * 0.9, 0.8 * 0.2 + 0.3 * 0.7, 0.24])
    assert np.allclose(check.observed, [1, 1, 0])
    assert set(check.skipped) == {"C", "D", "F"}
    assert (
        "1 of its sticks that reached QC have no probability from model 7" in (check.skipped["C"])
    )
    assert check.skipped["D"] == "final QC reported 2 sticks; the line kept 1 of the 1 decided here"
    assert "no probability from model 7" in check.skipped["F"]


def test_audit_samples_leave_the_prediction_and_a_failing_one_leaves_qc():
    """An audit sample's outcome is known: a failing one was scrapped (not in QC's n), an ok
    one went back (in n, no failure) and neither is predicted; one not inspected yet makes
    the charge's count unplaceable, so the charge is skipped with the reason."""
    rows = [
        # H: a failing audit sample here (scrapped), two passes that reached QC
        ("H", "1", 7, 0.6, "inspect"),
        ("H", "2", 7, 0.2, "pass"),
        ("H", "3", 7, 0.1, "pass"),
        # I: an ok audit sample here (back on the line) and one pass
        ("I", "1", 7, 0.6, "inspect"),
        ("I", "2", 7, 0.3, "pass"),
        # J: an audit sample whose inspection has not arrived
        ("J", "1", 7, 0.6, "inspect"),
        ("J", "2", 7, 0.3, "pass"),
        # K: a failing audit sample at another station: it never reached QC either
        ("K", "1", 7, 0.5, "pass"),
        ("K", "2", 7, 0.4, "pass"),
    ]
    here, elsewhere = frames(rows, [])
    audits = pd.DataFrame(
        [("H", "1", "gone"), ("I", "1", "back"), ("J", "1", "pending"), ("K", "1", "gone")],
        columns=["charge_id", "stick_id", "fate"],
    )
    charges = pd.DataFrame({"charge_id": list("HIJK"), "n_sticks": [2, 2, 2, 1]})
    observed = pd.Series({"H": 1, "I": 0, "J": 0, "K": 0}, dtype=float)
    check = compare_counts(charges, here, elsewhere, observed, 7, audits)
    assert list(check.charges) == ["H", "I", "K"]
    assert np.allclose(check.predicted, [0.3, 0.3, 0.4])
    assert np.allclose(check.variance, [0.2 * 0.8 + 0.1 * 0.9, 0.3 * 0.7, 0.4 * 0.6])
    assert set(check.skipped) == {"J"}
    assert "1 of its audit samples are not inspected yet" in check.skipped["J"]
    # without the audits' fates H and K are skipped (QC counted fewer sticks than stayed)
    # and I predicts the ok sample's 0.6 against its known 0
    blind = compare_counts(charges, here, elsewhere, observed, 7)
    assert list(blind.charges) == ["I", "J"] and np.allclose(blind.predicted, [0.9, 0.9])


# ----------------------------------------------------------------------------- with a database
def counts_file(path, n_sticks: pd.Series, failures: pd.Series) -> None:
    """A final-QC file: every failure reported as a crack."""
    frame = pd.DataFrame({"charge_id": n_sticks.index, "n_sticks": n_sticks.to_numpy()})
    frame["crack"] = failures.reindex(n_sticks.index).fillna(0).astype(int).to_numpy()
    frame["bend"] = 0
    frame["scale"] = 0
    frame.to_csv(path, index=False)


def expected_path(flags: pd.DataFrame, n_sticks: pd.Series, failures: pd.Series) -> np.ndarray:
    """The CUSUM the test expects, from the stored flags, charge by charge (report order)."""
    predicted, variance, observed = [], [], []
    for charge, n in n_sticks.items():
        mine = flags[flags["charge_id"] == charge]
        passed = mine[mine["decision"] == "pass"]
        used = passed if len(passed) == n else mine
        q = used["probability"].to_numpy(float)
        predicted.append(q.sum())
        variance.append(np.sum(q * (1 - q)))
        observed.append(failures.get(charge, 0))
    return cusum(predicted, variance, observed)


def eager_cooling(store, config, plant) -> int:
    """An active cooling model trained on the store's history that locks out every stick (a
    model trained before the share rules: none apply); its id."""
    return promote_locking_all(
        store, config, "cooling", plant.record_trained(store, config, "cooling")
    )


@pytest.fixture
def counted_plant(store, history_plant, tmp_path):
    """Both engines: history and fresh measurements ingested, the eager cooling model."""
    config = replace(history_plant.config, path=tmp_path / "plant.yaml")
    history_plant.ingest_into(store, config)
    return store, config, eager_cooling(store, config, history_plant)


@pytest.fixture
def sqlite_plant(history_plant, tmp_path):
    """SQLite only (the engines are compared by the test above): a copy of the history
    plant's database, the eager cooling model."""
    config = replace(history_plant.config, path=tmp_path / "plant.yaml")
    store = Store.open(history_plant.copy_to(tmp_path))
    yield store, config, eager_cooling(store, config, history_plant)
    store.close()


def test_over_predicted_failures_suspend_the_lockouts_once_with_an_alarm(
    counted_plant, history_plant, tmp_path
):
    store, config, model_id = counted_plant
    first = score_station(store, config, "cooling")
    assert (first.scores["decision"] == "lock_out").sum() > 20
    flags = flags_frame(store, "cooling")
    decided = flags[flags["decision"] != "unscorable"]
    # the line ran in shadow mode: QC saw every stick, and none failed
    n_sticks = decided.groupby("charge_id").size()
    failures = pd.Series(0, index=n_sticks.index)
    path = expected_path(decided, n_sticks, failures)
    interval = float(path[-1]) / 2  # trips on the way, at a charge the test knows
    config = replace(config, scorer=replace(config.scorer, count_guard_interval=interval))
    counts_file(tmp_path / "qc.csv", n_sticks, failures)
    ingest_defect_counts(store, config, tmp_path / "qc.csv")
    step = score_station(store, config, "cooling")  # takes in the counts batch, decides none
    assert step.scores.empty
    status = plant_status(store, config)
    cooling = next(s for s in status["stations"] if s["station"] == "cooling")
    trip_at = int(np.flatnonzero(path > interval)[0])
    assert cooling["lockout_suspended"].startswith("lock-out suspended at cooling: final QC")
    assert f"last charge {n_sticks.index[trip_at]}" in cooling["lockout_suspended"]
    guard = cooling["lockout_guard"]
    assert guard["locks_out"] is True
    assert guard["qc_charges"] == len(n_sticks) and guard["qc_skipped"] == 0
    assert guard["qc_reported"] == 0
    assert guard["qc_predicted"] == pytest.approx(decided["probability"].sum())
    assert guard["qc_excess"] == pytest.approx(path[-1])
    alarms = [a for a in status["alarms"] if a["kind"] == "lockout_suspended"]
    assert len(alarms) == 1 and f"model {model_id}" in alarms[0]["message"]

    # new charges arrive: the model still wants to lock out every stick; all pass, with why
    later = simulate_plant(config, 2, random_state=11, first_charge=90)
    write_simulation(later, tmp_path / "later")
    ingest_measurements(store, config, tmp_path / "later" / "measurements")
    held = score_station(store, config, "cooling").scores
    scored = held[held["decision"] != "unscorable"]
    assert len(scored) > 0 and (scored["decision"] == "pass").all()
    assert scored["reason"].str.startswith("lock-out suspended at cooling: final QC").all()

    # exactly once: the counts are not compared again, and no second alarm
    again = plant_status(store, config)
    cooling = next(s for s in again["stations"] if s["station"] == "cooling")
    assert cooling["lockout_guard"]["qc_charges"] == len(n_sticks)
    assert len([a for a in again["alarms"] if a["kind"] == "lockout_suspended"]) == 1
    # promoting the model again lifts the suspension and starts the count afresh
    promote(store, model_id)
    cooling = next(s for s in plant_status(store, config)["stations"] if s["station"] == "cooling")
    assert cooling["lockout_suspended"] is None


def test_counts_where_the_line_acted_are_compared_on_the_passed_sticks(sqlite_plant, tmp_path):
    store, config, model_id = sqlite_plant
    # the share rule stops the eager model after 30 sticks: the line locks out those
    model = replace(
        load_model(store, model_id).model, lockout_rate_bound=0.05, lockout_excess_bound=None
    )
    config = replace(config, scorer=replace(config.scorer, guard_min_sticks=30))
    guarded = record_model(store, config, model, labeled_data(store, config, "cooling")).model_id
    promote(store, guarded)
    score_station(store, config, "cooling")
    flags = flags_frame(store, "cooling")
    decided = flags[flags["decision"] != "unscorable"]
    passed = decided[decided["decision"] == "pass"].groupby("charge_id").size()
    total = decided.groupby("charge_id").size()
    assert (decided["decision"] == "lock_out").sum() == 29
    n_sticks = passed.reindex(total.index, fill_value=0)
    odd = n_sticks.index[-1]
    n_sticks[odd] = total[odd] + 1  # QC counted a stick the station never decided
    n_sticks = n_sticks[n_sticks > 0]  # a charge whose every stick was locked out never reaches QC
    failures = (n_sticks // 4).astype(int)
    counts_file(tmp_path / "qc.csv", n_sticks, failures)
    ingest_defect_counts(store, config, tmp_path / "qc.csv")
    score_station(store, config, "cooling")
    cooling = next(s for s in plant_status(store, config)["stations"] if s["station"] == "cooling")
    guard = cooling["lockout_guard"]
    compared = n_sticks.index.drop(odd)
    assert guard["qc_charges"] == len(compared) and guard["qc_skipped"] == 1
    assert guard["qc_skip_reason"] == (
        f"charge {odd}: final QC reported {n_sticks[odd]} sticks; the line kept "
        f"{passed.get(odd, 0)} of the {total[odd]} decided here"
    )
    mine = decided[decided["charge_id"].isin(compared) & (decided["decision"] == "pass")]
    assert guard["qc_predicted"] == pytest.approx(mine["probability"].sum())
    assert guard["qc_reported"] == int(failures[compared].sum())
    path = expected_path(decided, n_sticks[compared], failures)
    assert guard["qc_excess"] == pytest.approx(path[-1])


def test_a_model_that_locks_out_nothing_is_compared_but_never_suspended(sqlite_plant, tmp_path):
    store, config, model_id = sqlite_plant
    eager = load_model(store, model_id).model
    declined = replace(
        eager, threshold=1.0 + 1e-9, metrics={**eager.metrics, "threshold": 1.0 + 1e-9}
    )
    declined_id = record_model(
        store, config, declined, labeled_data(store, config, "cooling")
    ).model_id
    promote(store, declined_id)
    score_station(store, config, "cooling")
    flags = flags_frame(store, "cooling")
    assert not flags["flagged"].any()
    n_sticks = flags[flags["decision"] != "unscorable"].groupby("charge_id").size()
    counts_file(tmp_path / "qc.csv", n_sticks, pd.Series(0, index=n_sticks.index))
    tiny = replace(config, scorer=replace(config.scorer, count_guard_interval=1e-6))
    ingest_defect_counts(store, tiny, tmp_path / "qc.csv")
    score_station(store, tiny, "cooling")
    status = plant_status(store, tiny)
    cooling = next(s for s in status["stations"] if s["station"] == "cooling")
    assert cooling["lockout_suspended"] is None
    guard = cooling["lockout_guard"]
    assert guard["qc_charges"] == len(n_sticks) and guard["qc_excess"] > 1e-6
    assert guard["locks_out"] is False
    assert not [a for a in status["alarms"] if a["kind"] == "lockout_suspended"]


def shadow_counts(store, path, charges=None) -> pd.Series:
    """Final QC of the cooling flags' charges in shadow mode, nothing failed; ``n_sticks``."""
    flags = flags_frame(store, "cooling")
    n_sticks = flags[flags["decision"] != "unscorable"].groupby("charge_id").size()
    if charges is not None:
        n_sticks = n_sticks.loc[charges]
    counts_file(path, n_sticks, pd.Series(0, index=n_sticks.index))
    return n_sticks


def test_counts_taken_in_while_the_scorer_has_no_model_still_reach_the_model(
    sqlite_plant, tmp_path
):
    store, config, model_id = sqlite_plant
    score_station(store, config, "cooling")
    n_sticks = shadow_counts(store, tmp_path / "qc.csv")
    ingest_defect_counts(store, config, tmp_path / "qc.csv")
    # the service steps without a model (its artifact was refused): the counts batch is taken
    step = score_step(store, config, "cooling", None)
    assert step.batches_taken == 1
    guard = next(s for s in plant_status(store, config)["stations"] if s["station"] == "cooling")[
        "lockout_guard"
    ]
    assert guard["qc_charges"] == len(n_sticks)


def test_promoting_a_model_again_starts_its_comparison_afresh(sqlite_plant, tmp_path):
    store, config, model_id = sqlite_plant
    score_station(store, config, "cooling")
    charges = sorted(flags_frame(store, "cooling")["charge_id"].unique())
    tiny = replace(config, scorer=replace(config.scorer, count_guard_interval=1e-6))
    shadow_counts(store, tmp_path / "first.csv", charges[:1])
    ingest_defect_counts(store, tiny, tmp_path / "first.csv")
    score_station(store, tiny, "cooling")

    def cooling() -> dict:
        return next(s for s in plant_status(store, tiny)["stations"] if s["station"] == "cooling")

    assert cooling()["lockout_suspended"] is not None
    promote(store, model_id)  # the cause fixed: the operator lifts the suspension
    # QC reports the other charges, decided before the lift: not held against the new term
    shadow_counts(store, tmp_path / "rest.csv", charges[1:])
    ingest_defect_counts(store, tiny, tmp_path / "rest.csv")
    score_station(store, tiny, "cooling")
    assert cooling()["lockout_suspended"] is None
    assert cooling()["lockout_guard"] is None or cooling()["lockout_guard"]["qc_charges"] == 0


def test_a_model_no_longer_active_is_compared_but_never_suspended(sqlite_plant, tmp_path):
    store, config, model_id = sqlite_plant
    score_station(store, config, "cooling")  # the eager model decides the fresh charges
    successor = record_model(
        store, config, load_model(store, model_id).model, labeled_data(store, config, "cooling")
    ).model_id
    promote(store, successor)  # ... and is retired before final QC reports them
    shadow_counts(store, tmp_path / "qc.csv")
    tiny = replace(config, scorer=replace(config.scorer, count_guard_interval=1e-6))
    ingest_defect_counts(store, tiny, tmp_path / "qc.csv")
    score_station(store, tiny, "cooling")
    with store.engine.connect() as conn:
        retired = guard_state(conn, "cooling", model_id)
    assert retired.qc_charges > 0 and retired.qc_excess > 1e-6
    assert retired.suspended_at is None
    assert not [a for a in plant_status(store, tiny)["alarms"] if a["kind"] == "lockout_suspended"]
