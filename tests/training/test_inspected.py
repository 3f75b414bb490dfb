"""Training with inspected sticks: their labels known to the learner, a locked-out stick back in
its bag with its result in the counts, the recalibration's units, the model's metrics."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score
from sqlalchemy import select, update

from qcllp.cli.render import trained_line
from qcllp.ingest import ingest_defect_counts
from qcllp.learn import EMLLP, PerDefectClassifier
from qcllp.retraining.promotion import labeled_counts, window_data
from qcllp.scoring.step import flags_frame, score_station
from qcllp.station.lockout_rule import LockoutCosts
from qcllp.station.precision import precision_bounds
from qcllp.station.registry import get_model, load_model
from qcllp.station.saving_estimate import charges_per_week
from qcllp.store import Charge, DefectCount, Flag, IngestionBatch, Inspection, Store
from qcllp.training.out_of_fold import calibration_units
from qcllp.training.train import (
    TrainingError,
    fit_station_model,
    labeled_data,
    station_costs,
    train_station,
    training_plan,
)
from tests.support.eager_model import promote_locking_all

STATION = "cooling"


@dataclass(frozen=True)
class Inspected:
    """A plant database whose line acted on lock-outs at cooling, with inspections stored."""

    url: str
    config: object
    acted: str  # a charge with lock-outs and passes: QC counted only the passed sticks
    shadow: str  # a charge QC counted whole
    history: str  # a charge of the history (no flags)
    passed: list[str]  # sticks of ``acted`` that passed
    locked: list[str]  # sticks of ``acted`` locked out
    inspected: dict[tuple[str, str], str]  # (charge, stick) -> result at cooling


def _insert_inspections(store: Store, rows: list[dict]) -> None:
    """Inspection rows as the ingestion stores them, with a real ingestion batch."""
    now = datetime.now(UTC)
    with store.engine.begin() as conn:
        batch = conn.execute(
            IngestionBatch.__table__.insert().values(
                kind="inspections", source="test", status="done", started_at=now
            )
        ).inserted_primary_key[0]
        conn.execute(
            Inspection.__table__.insert(),
            [{**row, "batch_id": batch, "stored_at": now} for row in rows],
        )


@pytest.fixture(scope="module")
def inspected(history_plant, tmp_path_factory) -> Inspected:
    """Score the fresh charges at cooling with a model locking out everything until the guard
    stops it (real flags), report final QC's counts of the sticks the line let pass, and store
    inspections: two lock-outs (crack, ok) and audit samples (bend; ok; scale in the history),
    plus one at another station."""
    config = replace(
        history_plant.config, scorer=replace(history_plant.config.scorer, guard_min_sticks=30)
    )
    folder = tmp_path_factory.mktemp("inspected")
    store = Store.open(history_plant.copy_to(folder))
    trained = train_station(store, config, STATION).model_id
    promote_locking_all(store, config, STATION, trained, rate_bound=0.05)
    score_station(store, config, STATION)
    flags = flags_frame(store, STATION)
    per = flags.groupby(["charge_id", "decision"]).size().unstack(fill_value=0)
    acted = per[(per.get("lock_out", 0) >= 3) & (per.get("pass", 0) >= 2)].index[0]
    shadow = next(c for c in per.index if c != acted)
    mine = flags[flags["charge_id"] == acted]
    locked = mine[mine["decision"] == "lock_out"]
    passed = mine[mine["decision"] == "pass"]["stick_id"].tolist()
    shadow_stick = flags[flags["charge_id"] == shadow]["stick_id"].iloc[0]
    shadow_total = int(per.loc[shadow].sum())
    qc = pd.DataFrame(
        {"charge_id": [acted, shadow], "n_sticks": [len(passed), shadow_total]}
        | {"crack": [1, 2], "bend": [1, 0], "scale": [0, 0]}
    )
    qc.to_csv(folder / "qc.csv", index=False)
    ingest_defect_counts(store, config, folder / "qc.csv")
    history = history_plant.history.truth
    h_charge, h_stick = str(history["charge_id"].iloc[0]), str(history["stick_id"].iloc[0])
    with store.engine.connect() as conn:
        flag_ids = {
            (row.charge_id, row.stick_id): row.id
            for row in conn.execute(select(Flag.id, Flag.charge_id, Flag.stick_id))
        }
    base = {"station": STATION, "inspected_at": None}
    rows = [
        {**base, "charge_id": acted, "stick_id": locked["stick_id"].iloc[0], "result": "crack"},
        {**base, "charge_id": acted, "stick_id": locked["stick_id"].iloc[1], "result": "ok"},
        {**base, "charge_id": acted, "stick_id": passed[0], "result": "bend"},
        {**base, "charge_id": shadow, "stick_id": shadow_stick, "result": "ok"},
        {**base, "charge_id": h_charge, "stick_id": h_stick, "result": "scale"},
    ]
    for row in rows:
        row["flag_id"] = flag_ids.get((row["charge_id"], row["stick_id"]))
        row["audit"] = row["stick_id"] not in set(locked["stick_id"])
    elsewhere = {**rows[2], "station": "rolling", "stick_id": passed[1], "result": "crack"}
    _insert_inspections(store, [*rows, elsewhere])
    store.close()
    return Inspected(
        url=f"sqlite:///{folder / 'plant.sqlite'}",
        config=config,
        acted=acted,
        shadow=shadow,
        history=h_charge,
        passed=passed,
        locked=locked["stick_id"].tolist(),
        inspected={(r["charge_id"], r["stick_id"]): r["result"] for r in rows},
    )


def test_inspected_sticks_are_known_labels_and_lockouts_return_to_their_bags(inspected):
    with Store.open(inspected.url) as store:
        data = labeled_data(store, inspected.config, STATION)
    acted = data.features.X.loc[inspected.acted].index
    # the bag: the sticks QC counted and the two inspected lock-outs, not the other lock-outs
    assert set(acted) == {*inspected.passed, *inspected.locked[:2]}
    assert data.n_sticks[inspected.acted] == len(inspected.passed) + 2
    # their results join QC's counts (crack 1 + 1; the audited bend was among QC's)
    n = len(inspected.passed) + 2
    assert data.defective_counts[inspected.acted] == 3
    assert data.type_shares.loc[inspected.acted].tolist() == pytest.approx([2 / n, 1 / n, 0.0])
    shadow = data.features.X.loc[inspected.shadow]
    assert data.n_sticks[inspected.shadow] == len(shadow)  # an audit sample: counts as reported
    assert data.defective_counts[inspected.shadow] == 2
    # the labels: the station's own inspections only (not the one at rolling)
    labels = data.labels.dropna()
    assert dict(labels.items()) == inspected.inspected
    known = pd.Series(data.known(), index=data.features.X.index).dropna()
    expected = {k: float(v != "ok") for k, v in inspected.inspected.items()}
    assert dict(known.items()) == expected
    per_type = pd.Series(data.known(per_type=True), index=data.features.X.index).dropna()
    assert dict(per_type.items()) == inspected.inspected
    crack = pd.Series(data.for_type("crack").known(), index=data.features.X.index).dropna()
    assert dict(crack.items()) == {k: float(v == "crack") for k, v in inspected.inspected.items()}


def test_the_recalibration_sees_uninspected_sticks_with_reduced_counts_and_each_inspected_alone(
    inspected,
):
    with Store.open(inspected.url) as store:
        data = labeled_data(store, inspected.config, STATION)
    charges, uniques = pd.factorize(data.bags)
    uniques = pd.Index(uniques)
    positives = data.failing_shares.reindex(uniques).to_numpy() * np.bincount(charges)
    failing = data.known()
    codes, units = calibration_units(charges, positives, failing)
    h, given = len(uniques), ~np.isnan(failing)
    assert len(units) == h + given.sum() == h + 5
    np.testing.assert_array_equal(codes[~given], charges[~given])  # uninspected: their charge
    np.testing.assert_array_equal(codes[given], h + np.arange(5))  # inspected: one unit each
    np.testing.assert_array_equal(units[h:], failing[given])
    a = uniques.get_loc(inspected.acted)
    assert units[a] == pytest.approx(3 - 2)  # 3 failing, 2 of them inspected
    s = uniques.get_loc(inspected.shadow)
    assert units[s] == pytest.approx(2)  # its inspected stick was ok
    # counts below the inspected failures (an inspector and QC disagree) clip at 0
    _, clipped = calibration_units(np.array([0, 0, 0]), np.array([0.0]), np.array([1, 1, np.nan]))
    assert clipped.tolist() == [0.0, 1.0, 1.0]


def test_a_trained_model_records_how_many_inspected_sticks_it_learned_from(inspected, tmp_path):
    url = f"sqlite:///{tmp_path / 'plant.sqlite'}"
    shutil.copy(inspected.url.removeprefix("sqlite:///"), tmp_path / "plant.sqlite")
    with Store.open(url) as store:
        result = train_station(store, inspected.config, STATION)
        cooling = result.model_id
        furnace = train_station(store, inspected.config, "furnace").model_id
        line = trained_line(result)
        recorded = get_model(store, cooling)["metrics"]
        artifact = load_model(store, cooling).model.metrics
        elsewhere = get_model(store, furnace)["metrics"]
    assert recorded["inspected_sticks"] == artifact["inspected_sticks"] == 5
    assert recorded["inspected_failing"] == artifact["inspected_failing"] == 3
    assert elsewhere["inspected_sticks"] == 0  # no inspections at the furnace
    assert " sticks (5 inspected, 3 failing), bag error" in line  # what qcllp train prints


def test_a_model_records_whether_audits_at_the_top_of_its_ranking_pay(
    inspected, history_plant, tmp_path
):
    """Every cooling stick of 40 history charges inspected (their hidden truth): the model
    records how many inspected sticks lie at or above its audit band's floor and how many
    failed, and declines audits exactly when the precision's upper bound is below
    ``inspection_cost / fail_cost``; ``qcllp train`` says so."""
    url = f"sqlite:///{tmp_path / 'plant.sqlite'}"
    shutil.copy(inspected.url.removeprefix("sqlite:///"), tmp_path / "plant.sqlite")
    truth = history_plant.history.truth.astype({"charge_id": str, "stick_id": str})
    charges = sorted(truth["charge_id"].unique())[1:41]  # not the one already inspected
    seen = truth[truth["charge_id"].isin(charges)]
    base = {"station": STATION, "inspected_at": None, "flag_id": None, "audit": True}
    rows = [
        {**base, "charge_id": c, "stick_id": s, "result": r}
        for c, s, r in seen[["charge_id", "stick_id", "defect"]].itertuples(index=False)
    ]
    with Store.open(url) as store:
        _insert_inspections(store, rows)
        result = train_station(store, inspected.config, STATION)
        recorded = get_model(store, result.model_id)["metrics"]
        artifact = load_model(store, result.model_id).model.metrics
    m, f = recorded["audit_inspected"], recorded["audit_inspected_failing"]
    assert m >= 10 and 0 <= f <= m and artifact["audit_inspected"] == m
    pays_from = station_costs(inspected.config, STATION).audit_pays_from
    declined = precision_bounds(int(f), int(m), 0.9)[1] < pays_from
    assert recorded.get("audits_declined") == (1.0 if declined else None)
    said = trained_line(replace(result, metrics={**result.metrics, "audits_declined": 1.0}))
    assert said.endswith(
        f"; no audit samples: {f:.0f} of {m:.0f} inspected at the top of its ranking failed, "
        "too few to pay for a look"
    )


def test_a_result_that_is_no_configured_type_stops_training_in_one_line(inspected, tmp_path):
    shutil.copy(inspected.url.removeprefix("sqlite:///"), tmp_path / "plant.sqlite")
    with Store.open(f"sqlite:///{tmp_path / 'plant.sqlite'}") as store:
        row = {
            "station": STATION,
            "charge_id": inspected.acted,
            "stick_id": inspected.passed[1],
            "result": "rust",
            "inspected_at": None,
            "flag_id": None,
            "audit": True,
        }
        _insert_inspections(store, [row])
        with pytest.raises(TrainingError) as caught:
            labeled_data(store, inspected.config, STATION)
    message = str(caught.value)
    assert "\n" not in message
    assert f"{inspected.passed[1]}" in message and "'rust'" in message and "cooling" in message


def _set_decision(store: Store, charge: str, stick: str, decision: str) -> None:
    """The cooling flag of one stick says ``decision`` from now on."""
    with store.engine.begin() as conn:
        conn.execute(
            update(Flag.__table__)
            .where(Flag.station == STATION, Flag.charge_id == charge, Flag.stick_id == stick)
            .values(decision=decision, flagged=decision == "lock_out")
        )


def test_a_failed_audit_sample_returns_to_its_bag_and_one_not_inspected_holds_it_back(
    inspected, tmp_path
):
    """The audit sample ``passed[0]`` (inspected: bend) flagged ``inspect``: scrapped at
    cooling, so QC counted one stick and one bend fewer; it returns to the bag with its bend
    added, as a lock-out does. Then ``passed[1]`` flagged ``inspect`` with no inspection at
    cooling yet: the charge is held back from training and from the promotion gate's window."""
    shutil.copy(inspected.url.removeprefix("sqlite:///"), tmp_path / "plant.sqlite")
    acted = inspected.acted
    with Store.open(f"sqlite:///{tmp_path / 'plant.sqlite'}") as store:
        _set_decision(store, acted, inspected.passed[0], "inspect")
        with store.engine.begin() as conn:  # what QC reports when the audit sample was scrapped
            conn.execute(
                update(Charge.__table__)
                .where(Charge.charge_id == acted)
                .values(n_sticks=len(inspected.passed) - 1)
            )
            conn.execute(
                update(DefectCount.__table__)
                .where(DefectCount.charge_id == acted, DefectCount.defect_type == "bend")
                .values(count=0)
            )
        data = labeled_data(store, inspected.config, STATION)
        rows = {*inspected.passed, *inspected.locked[:2]}
        assert set(data.features.X.loc[acted].index) == rows
        n = len(rows)  # QC's, the two inspected lock-outs and the scrapped audit sample
        assert data.n_sticks[acted] == n
        assert data.defective_counts[acted] == 3  # QC's crack, a crack and the bend inspected
        assert data.type_shares.loc[acted].tolist() == pytest.approx([2 / n, 1 / n, 0.0])
        _set_decision(store, acted, inspected.passed[1], "inspect")
        held = labeled_data(store, inspected.config, STATION)
        line = trained_line(train_station(store, inspected.config, STATION))
        window, _ = window_data(store, inspected.config, STATION, labeled_counts(
            store, inspected.config, pd.Index([acted, inspected.shadow])
        ))  # fmt: skip
    assert acted not in set(held.bags) and inspected.shadow in set(held.bags)
    assert (data.held_back, held.held_back) == (0, 1)
    assert "(1 more held back: their audit samples await inspection)" in line
    assert len(held.bags) == len(data.bags) - n
    assert set(window.bags) == {inspected.shadow}


def test_em_llp_learns_from_the_known_labels_it_is_given(history_plant):
    """Every stick inspected: EM with known labels is a supervised fit, and ranks the training
    sticks far better than from the counts alone; the models per defect type get each type's
    labels."""
    with Store.open(history_plant.url) as store:
        data = labeled_data(store, history_plant.config, STATION)
    truth = history_plant.history.truth.set_index(["charge_id", "stick_id"])["defect"]
    truth.index = truth.index.set_levels([lv.astype(str) for lv in truth.index.levels])
    labels = truth.reindex(data.features.X.index).astype(object)
    full = replace(data, labels=labels)
    X, bags = data.features.X, data.bags
    bad = (labels != "ok").to_numpy()

    def auc(model) -> float:
        return roc_auc_score(bad, model.predict_proba(X)[:, 1])

    alone = EMLLP(base="logistic", random_state=0).fit(X, bags, data.proportions)
    known = EMLLP(base="logistic", random_state=0).fit(X, bags, full.proportions, full.known())
    assert auc(known) > max(auc(alone) + 0.03, 0.95)
    per_type = PerDefectClassifier(
        [(t, EMLLP(base="logistic", random_state=0)) for t in history_plant.config.defect_types]
    )
    fitted = per_type.fit(X, bags, full.type_shares, full.known(per_type=True))
    for j, kind in enumerate(fitted.defect_types_):
        hit = (labels == kind).to_numpy()
        if 0 < hit.sum() < len(hit):
            assert roc_auc_score(hit, fitted.defect_proba(X)[:, j]) > 0.9
    with pytest.raises(ValueError, match="defect type names"):
        per_type.fit(X, bags, full.type_shares, full.known())  # 0/1 cannot name the type


def test_training_passes_the_known_labels_to_every_fit_of_the_search_and_the_folds(
    history_plant,
):
    """Every stick inspected, em-llp per defect type as ``qcllp train`` fits it: the grid
    search, the models per type and the out-of-fold fits all learn from the labels, so the
    out-of-fold probabilities rank the sticks far better than from the counts alone."""
    config = history_plant.config
    with Store.open(history_plant.url) as store:
        data = labeled_data(store, config, STATION)
    truth = history_plant.history.truth.set_index(["charge_id", "stick_id"])["defect"]
    truth.index = truth.index.set_levels([lv.astype(str) for lv in truth.index.levels])
    labels = truth.reindex(data.features.X.index).astype(object)
    bad = (labels != "ok").to_numpy()
    plan = training_plan(config, STATION, method_name="em-llp")
    assert plan.per_type
    costs = station_costs(config, STATION)
    with Store.open(history_plant.url) as store:
        times = store.read_charge_times().reindex(data.proportions.index)
    alone = fit_station_model(plan, data, costs)
    cheap = LockoutCosts(fail_cost=200.0, good_cost=100.0)  # so that it locks out
    known = fit_station_model(plan, replace(data, labels=labels), cheap, times=times)
    oof_alone = roc_auc_score(bad, alone.decision.raw_probability)
    oof_known = roc_auc_score(bad, known.decision.raw_probability)
    assert oof_known > oof_alone + 0.08  # measured: 0.883 against 0.750
    assert known.model.metrics["inspected_sticks"] == len(labels)
    assert known.model.metrics["inspected_failing"] == bad.sum()
    # every stick its own unit: the stated week is still counted in charges
    m, week = known.model.metrics, charges_per_week(times)
    assert not m["lockout_declined"] and week is not None
    assert m["saving_period_charges"] == week  # 16 charges in 12 hours: 215 a week
    assert m["saving_low_per_1000"] < m["expected_saving_per_1000"] < m["saving_high_per_1000"]
