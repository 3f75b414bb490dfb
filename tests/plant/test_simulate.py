"""Plant simulator: reproducible, shaped like plant data, consistent counts, learnable truth."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from qcllp.features import build_station_features
from qcllp.plant import parse_plant_config, simulate_plant, write_simulation

KEY = ["charge_id", "stick_id", "station", "timestamp", "sensor"]


@pytest.fixture(scope="module")
def sim(config):
    return simulate_plant(config, 60, random_state=7)


def test_same_seed_gives_identical_plant_and_other_seed_a_different_one(config, sim):
    again = simulate_plant(config, 60, random_state=7)
    # DataFrame.equals: same dtypes and values (assert_frame_equal is very slow on categoricals)
    assert sim.readings.equals(again.readings)
    assert sim.defect_counts.equals(again.defect_counts)
    assert sim.truth.equals(again.truth)
    other = simulate_plant(config, 60, random_state=8)
    assert not other.readings["value"].head(100).equals(sim.readings["value"].head(100))


def test_simulating_200_charges_is_vectorized_not_a_python_loop(config):
    # ~680k readings; a per-reading Python loop takes many seconds. CPU time, generous bound.
    started = time.process_time()
    big = simulate_plant(config, 200, random_state=0)
    assert len(big.readings) > 500_000
    assert time.process_time() - started < 3.0


def test_readings_have_the_data_contract_columns_and_valid_values(config, sim):
    r = sim.readings
    assert list(r.columns) == ["charge_id", "stick_id", "station", "timestamp", "sensor", "value"]
    assert str(r["timestamp"].dtype) == "datetime64[ns, UTC]"
    assert not r.duplicated(KEY).any()  # the natural key of the store is unique
    for station in config.stations:
        part = r[r["station"] == station.name]
        assert set(part["sensor"]) == set(station.sensor_names)
        for sensor in station.sensors:
            values = part.loc[part["sensor"] == sensor.name, "value"]
            assert values.between(sensor.min, sensor.max).all(), (station.name, sensor.name)


def test_charges_have_20_to_80_sticks_and_each_stick_3_to_8_readings_per_station(sim):
    sizes = sim.truth.groupby("charge_id").size()
    assert sizes.between(20, 80).all() and sizes.nunique() > 5
    per_series = sim.readings.groupby(["stick_id", "station", "sensor"], observed=True).size()
    assert per_series.between(3, 8).all()
    assert set(per_series.unique()) == set(range(3, 9))
    assert per_series.groupby(level="stick_id").size().eq(12).all()  # every sensor, every stick


def test_timestamps_advance_through_the_stations_in_line_order(config, sim):
    span = sim.readings.groupby(["stick_id", "station"], observed=True)["timestamp"].agg(
        ["min", "max"]
    )
    names = config.station_names
    for before, after in zip(names, names[1:], strict=False):
        left = span.xs(before, level="station")
        right = span.xs(after, level="station").loc[left.index]
        assert (left["max"] < right["min"]).all(), (before, after)
    dwell = (span["max"] - span["min"]).dt.total_seconds()
    furnace = dwell.xs("furnace", level="station")
    assert (
        furnace.std() > 0 and furnace.median() > 10 * dwell.xs("rolling", level="station").median()
    )


def test_defect_counts_equal_the_truth_counts(config, sim):
    truth = pd.crosstab(sim.truth["charge_id"], sim.truth["defect"])
    truth = truth.reindex(columns=list(config.classes), fill_value=0)
    counts = sim.defect_counts.set_index("charge_id")
    assert list(counts.columns) == ["n_sticks", *config.defect_types]
    assert (counts["n_sticks"] == truth.sum(axis=1).loc[counts.index]).all()
    for defect in config.defect_types:
        assert (counts[defect] == truth[defect].loc[counts.index]).all(), defect
    assert set(sim.truth["defect"]) <= set(config.classes)
    assert sim.truth["stick_id"].is_unique


def test_defective_shares_of_the_counts_match_the_hidden_truth(sim):
    from_truth = sim.failing().groupby(level="charge_id", observed=True).mean()
    shares = sim.defective_shares()
    np.testing.assert_allclose(shares.to_numpy(), from_truth.loc[shares.index].to_numpy())
    assert sim.failing().mean() == sim.defect_rate


def test_defect_rate_is_between_10_and_25_percent_and_varies_between_charges(config):
    sim = simulate_plant(config, 150, random_state=1)
    assert 0.10 <= sim.defect_rate <= 0.25
    assert sim.defective_shares().std() > 0.05  # charges differ: the bags carry information
    assert (sim.defect_counts[list(config.defect_types)].sum() > 0).all()  # every type occurs


def _defective(sim, index: pd.MultiIndex) -> np.ndarray:
    return sim.failing().loc[index].to_numpy()


def test_truth_is_learnable_from_features_up_to_the_middle_station(config):
    """Supervised logistic regression, trained and evaluated on different plants' charges."""
    middle = config.station_names[len(config.stations) // 2]
    assert middle == "cooling"
    train = simulate_plant(config, 80, random_state=11)
    test = simulate_plant(config, 80, random_state=12)
    f_train = build_station_features(train.readings, config, middle)
    f_test = build_station_features(test.readings, config, middle, imputation=f_train.imputation)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    model.fit(f_train.X.to_numpy(), _defective(train, f_train.X.index))
    scores = model.predict_proba(f_test.X.to_numpy())[:, 1]
    assert roc_auc_score(_defective(test, f_test.X.index), scores) >= 0.85


def test_simulator_works_for_any_config_not_only_the_example_names():
    config = parse_plant_config(
        {
            "name": "other",
            "defect_types": ["dent", "porosity"],
            "stations": [
                {
                    "name": f"s{i}",
                    "fail_cost": 10 - i,
                    "good_cost": 20,
                    "sensors": [
                        {"name": f"x{j}", "unit": "u", "min": 0, "max": 100} for j in range(2)
                    ],
                }
                for i in range(3)
            ],
        }
    )
    sim = simulate_plant(config, 30, random_state=0, sticks_per_charge=(5, 10))
    assert sim.truth.groupby("charge_id").size().between(5, 10).all()
    assert set(sim.readings["station"]) == {"s0", "s1", "s2"}
    assert 0.05 <= sim.defect_rate <= 0.3
    assert list(sim.defect_counts.columns) == ["charge_id", "n_sticks", "dent", "porosity"]


def test_invalid_arguments_are_rejected(config):
    with pytest.raises(ValueError, match="n_charges"):
        simulate_plant(config, 0, random_state=0)
    with pytest.raises(ValueError, match="sticks_per_charge"):
        simulate_plant(config, 3, random_state=0, sticks_per_charge=(10, 5))
    with pytest.raises(ValueError, match="defect_rate"):
        simulate_plant(config, 3, random_state=0, defect_rate=1.5)


def _read(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_long_files_round_trip_and_truth_is_kept_apart(tmp_path, config, fmt):
    sim = simulate_plant(config, 4, random_state=3)
    paths = write_simulation(sim, tmp_path, format=fmt, layout="long")
    assert [p.parent.name for p in paths["measurements"]] == ["measurements"]
    assert paths["defects"].parent.name == "defects" and paths["truth"].parent.name == "truth"
    assert not list((tmp_path / "measurements").glob("*truth*"))
    back = _read(paths["measurements"][0])
    back["timestamp"] = pd.to_datetime(back["timestamp"], utc=True)
    expected = sim.readings.astype({c: str for c in ["charge_id", "stick_id", "station", "sensor"]})
    back = back.astype({c: str for c in ["charge_id", "stick_id", "station", "sensor"]})
    pd.testing.assert_frame_equal(back, expected, check_dtype=False, check_exact=False)
    pd.testing.assert_frame_equal(_read(paths["defects"]), sim.defect_counts, check_dtype=False)
    pd.testing.assert_frame_equal(_read(paths["truth"]), sim.truth, check_dtype=False)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_wide_files_have_one_file_per_station_with_its_sensors_as_columns(tmp_path, config, fmt):
    sim = simulate_plant(config, 3, random_state=4)
    paths = write_simulation(sim, tmp_path, format=fmt, layout="wide")
    assert [p.name for p in paths["measurements"]] == [
        f"measurements_{s}.{fmt}" for s in config.station_names
    ]
    for station, path in zip(config.stations, paths["measurements"], strict=True):
        wide = _read(path)
        assert list(wide.columns) == [
            "charge_id",
            "stick_id",
            "station",
            "timestamp",
            *station.sensor_names,
        ]
        assert not wide[list(station.sensor_names)].isna().any().any()
        n_long = (sim.readings["station"] == station.name).sum()
        assert len(wide) * len(station.sensors) == n_long


def test_write_rejects_unknown_format_and_layout(tmp_path, sim):
    with pytest.raises(ValueError, match="format"):
        write_simulation(sim, tmp_path, format="xlsx")
    with pytest.raises(ValueError, match="layout"):
        write_simulation(sim, tmp_path, layout="tall")


def _proportion_loss_logistic(X: np.ndarray, bags: pd.Series, shares: pd.Series) -> np.ndarray:
    """The simplest LLP learner: logistic model whose mean per bag matches the bag's share.

    Minimizes the bag-size-weighted cross-entropy between each bag's share of defective sticks
    and the mean predicted probability of its sticks (+ a small ridge term). Returns (b, w).
    """
    codes, ids = pd.factorize(bags.to_numpy())
    target = shares.loc[ids].to_numpy()
    sizes = np.bincount(codes).astype(float)
    ridge = 1e-3

    def loss(theta):
        p = 1.0 / (1.0 + np.exp(-(X @ theta[1:] + theta[0])))
        q = np.clip(np.bincount(codes, p) / sizes, 1e-9, 1 - 1e-9)
        value = -(sizes * (target * np.log(q) + (1 - target) * np.log1p(-q))).sum() / len(X)
        dq = -sizes * (target / q - (1 - target) / (1 - q)) / len(X)
        dz = dq[codes] / sizes[codes] * p * (1 - p)
        grad = np.r_[dz.sum(), X.T @ dz + 2 * ridge * theta[1:]]
        return value + ridge * theta[1:] @ theta[1:], grad

    return minimize(loss, np.zeros(X.shape[1] + 1), jac=True, method="L-BFGS-B").x


def test_truth_is_learnable_from_the_charges_defect_counts_alone(config):
    """LLP: trained on features + per-charge defect shares only, evaluated on stick truth."""
    middle = config.station_names[len(config.stations) // 2]
    train = simulate_plant(config, 100, random_state=31)
    test = simulate_plant(config, 60, random_state=32)
    f_train = build_station_features(train.readings, config, middle)
    f_test = build_station_features(test.readings, config, middle, imputation=f_train.imputation)
    scaler = StandardScaler().fit(f_train.X.to_numpy())
    shares = train.defective_shares()
    theta = _proportion_loss_logistic(scaler.transform(f_train.X.to_numpy()), f_train.bags, shares)
    scores = scaler.transform(f_test.X.to_numpy()) @ theta[1:]
    assert roc_auc_score(_defective(test, f_test.X.index), scores) >= 0.85


def test_sensor_dropouts_remove_whole_series_but_not_sticks_or_counts(tmp_path, config):
    full = simulate_plant(config, 20, random_state=9)
    holes = simulate_plant(config, 20, random_state=9, missing_rate=0.2)
    pd.testing.assert_frame_equal(full.defect_counts, holes.defect_counts)
    assert full.truth.equals(holes.truth)
    series = holes.readings.groupby(["stick_id", "station", "sensor"], observed=True).size()
    n_series = len(full.truth) * 12
    assert 0.15 <= 1 - len(series) / n_series <= 0.25
    assert series.between(3, 8).all()  # a series is either complete or absent
    paths = write_simulation(holes, tmp_path, format="parquet", layout="wide")
    wide = pd.read_parquet(paths["measurements"][0])
    assert wide[list(config.station("furnace").sensor_names)].isna().any().any()
    with pytest.raises(ValueError, match="missing_rate"):
        simulate_plant(config, 2, random_state=0, missing_rate=1.0)


def test_separate_mechanisms_make_each_type_visible_from_its_own_station_on(config):
    """defect_stations: a type is predictable (supervised) from its station on, not before."""
    where = {"crack": "furnace", "bend": "rolling", "scale": "cooling"}
    train = simulate_plant(config, 80, random_state=21, defect_stations=where)
    test = simulate_plant(config, 60, random_state=22, defect_stations=where)
    rates = train.truth["defect"].value_counts(normalize=True)
    for defect in where:
        assert 0.02 < rates[defect] < 0.08  # about 15 % / 3 each
    kind_tr = train.truth.set_index(["charge_id", "stick_id"])["defect"]
    kind_te = test.truth.set_index(["charge_id", "stick_id"])["defect"]
    auc = {}
    for station in ("furnace", "rolling"):
        f_tr = build_station_features(train.readings, config, station)
        f_te = build_station_features(test.readings, config, station, imputation=f_tr.imputation)
        for defect in ("crack", "bend"):
            model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
            model.fit(f_tr.X, kind_tr.loc[f_tr.X.index] == defect)
            truth = kind_te.loc[f_te.X.index] == defect
            auc[station, defect] = roc_auc_score(truth, model.predict_proba(f_te.X)[:, 1])
    assert auc["furnace", "crack"] > 0.9 and auc["rolling", "bend"] > 0.9
    assert auc["furnace", "bend"] < 0.65  # bends arise at rolling: the furnace cannot know


def test_defect_stations_must_name_every_type_and_known_stations(config):
    with pytest.raises(ValueError, match="missing"):
        simulate_plant(config, 3, random_state=0, defect_stations={"crack": "furnace"})
    with pytest.raises(ValueError, match="unknown"):
        simulate_plant(
            config,
            3,
            random_state=0,
            defect_stations={"crack": "furnace", "bend": "rolling", "scale": "x", "rust": "y"},
        )


def _digest(sim) -> str:
    """A digest of everything a simulated plant holds (values, ids, times, counts, truth)."""
    import hashlib

    digest = hashlib.sha256()
    for frame in (sim.readings, sim.defect_counts, sim.truth):
        plain = frame.astype({c: str for c in frame.columns if frame[c].dtype == "category"})
        digest.update(pd.util.hash_pandas_object(plain, index=False).to_numpy().tobytes())
    return digest.hexdigest()[:16]


def test_without_the_charge_effect_every_simulated_figure_is_as_before(config):
    """Digests taken before the option existed: a default run is bit for bit the same."""
    sepa = {"crack": "furnace", "bend": "rolling", "scale": "cooling"}
    assert _digest(simulate_plant(config, 12, random_state=7)) == "785395bee1750c60"
    separate = simulate_plant(config, 12, random_state=7, defect_stations=sepa, missing_rate=0.1)
    assert _digest(separate) == "5ab3ffcc2ec312bf"
    shifted = simulate_plant(config, 12, random_state=7, sensor_shift={"furnace.temperature": 1})
    assert _digest(shifted) == "5363a54c3fff1f5a"


def test_the_charge_effect_moves_a_furnace_sensor_with_the_charge_risk_not_the_sticks(config):
    """The furnace gas flow's charge means track the charges' failing shares; within a charge
    it does not tell the failing sticks from the others. Without the effect neither holds."""

    def gas_flow(sim) -> tuple[float, float]:
        f = build_station_features(sim.readings, config, "furnace")
        gas = f.X["furnace.gas_flow.mean"]
        bad = sim.failing().reindex(f.X.index).to_numpy()
        means = gas.groupby(f.bags.to_numpy()).mean()
        shares = sim.defective_shares().reindex(means.index)
        between = float(np.corrcoef(means, shares)[0, 1])
        within = gas - means.reindex(f.bags.to_numpy()).to_numpy()
        return between, float(roc_auc_score(bad, within))

    between, within = gas_flow(simulate_plant(config, 150, random_state=5, charge_effect=3.5))
    assert between > 0.5 and abs(within - 0.5) < 0.05  # measured: 0.667 and 0.489
    between, _ = gas_flow(simulate_plant(config, 150, random_state=5))
    assert abs(between) < 0.3  # measured: -0.106
    with pytest.raises(ValueError, match="charge_effect must be >= 0"):
        simulate_plant(config, 2, random_state=5, charge_effect=-1.0)
