"""Large training sets: the seeded subsample of whole charges (``training.max_sticks``), its
setting in the plant config, and that training reads the features of the kept charges only."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import yaml

from qcllp.cli import _trained_line
from qcllp.features import station_features
from qcllp.plant.config import DEFAULT_MAX_STICKS, ConfigError, parse_plant_config
from qcllp.station.registry import get_model
from qcllp.store import Store
from qcllp.training.train import (
    TrainingError,
    labeled_data,
    subsample_charges,
    train_station,
)
from tests.support.plants import ROOT


def charge_sizes(n_charges: int, seed: int = 0) -> pd.Series:
    rng = np.random.default_rng(seed)
    ids = pd.Index([f"C{i:05d}" for i in range(n_charges)], name="charge_id")
    return pd.Series(rng.integers(30, 71, size=n_charges), index=ids, name="n_sticks")


def test_the_same_seed_keeps_the_same_charges_and_another_seed_others():
    sizes = charge_sizes(2_000)
    first = subsample_charges(sizes, 20_000, random_state=7)
    again = subsample_charges(sizes.copy(), 20_000, random_state=7)
    other = subsample_charges(sizes, 20_000, random_state=8)
    assert first.equals(again)
    assert len(first.intersection(other)) < 0.5 * len(first)  # ~20 % expected by chance


def test_the_kept_charges_do_not_depend_on_the_order_of_the_counts():
    sizes = charge_sizes(2_000)
    shuffled = sizes.sample(frac=1.0, random_state=1)
    kept = subsample_charges(sizes, 20_000, random_state=7)
    kept_shuffled = subsample_charges(shuffled, 20_000, random_state=7)
    assert set(kept) == set(kept_shuffled)
    assert list(kept_shuffled) == [c for c in shuffled.index if c in set(kept)]  # input order


def test_the_kept_charges_fill_the_limit_with_whole_charges():
    sizes = charge_sizes(2_000)
    for limit in (100, 5_000, 20_000, 99_999):
        kept = subsample_charges(sizes, limit, random_state=0)
        assert kept.isin(sizes.index).all() and kept.is_unique
        total = int(sizes.loc[kept].sum())
        assert total <= limit
        assert total > limit - 10 * sizes.max()  # a prefix of the random order: nearly full


def test_nothing_is_dropped_when_the_charges_are_within_the_limit():
    sizes = charge_sizes(300)
    total = int(sizes.sum())
    assert subsample_charges(sizes, total, random_state=0).equals(sizes.index)
    assert subsample_charges(sizes, DEFAULT_MAX_STICKS, random_state=0).equals(sizes.index)
    assert len(subsample_charges(sizes, total - 1, random_state=0)) < len(sizes)


def test_the_subsample_is_roughly_uniform_over_charges():
    sizes = pd.Series(50, index=pd.Index([f"C{i:05d}" for i in range(10_000)]))
    kept = subsample_charges(sizes, 50 * 2_000, random_state=0)
    assert len(kept) == 2_000
    position = sizes.index.get_indexer(kept)
    assert np.histogram(position, bins=5, range=(0, 10_000))[0].min() > 320  # 400 each expected


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
def test_a_bad_limit_is_refused(bad):
    with pytest.raises(ValueError, match="max_sticks must be a positive integer"):
        subsample_charges(charge_sizes(10), bad, random_state=0)


@pytest.fixture(scope="module")
def example_mapping() -> dict:
    return yaml.safe_load((ROOT / "plant_config" / "example.yaml").read_text())


def test_the_config_reads_max_sticks_with_its_documented_default(example_mapping, tmp_path):
    mapping = copy.deepcopy(example_mapping)
    assert parse_plant_config(mapping, base_dir=tmp_path).training.max_sticks == 500_000
    mapping["training"]["max_sticks"] = 20_000
    assert parse_plant_config(mapping, base_dir=tmp_path).training.max_sticks == 20_000


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (0, "must be >= 1, got 0"),
        (-100, "must be >= 1, got -100"),
        (2.5e5, "must be an integer, got float 250000.0"),
        ("500k", "must be an integer, got str '500k'"),
        (True, "must be an integer, got bool True"),
    ],
)
def test_the_config_refuses_a_bad_max_sticks_naming_the_key(
    example_mapping, tmp_path, value, problem
):
    mapping = copy.deepcopy(example_mapping)
    mapping["training"]["max_sticks"] = value
    with pytest.raises(ConfigError) as info:
        parse_plant_config(mapping, source="plant.yaml", base_dir=tmp_path)
    assert f"plant.yaml: training.max_sticks: {problem}" in info.value.errors


class RecordingStore:
    """A real store that remembers the charges whose readings or series statistics were
    read."""

    def __init__(self, store: Store):
        self._store = store
        self.read_charges: set[str] = set()

    def read_readings(self, stations=None, charge_ids=None):  # noqa: ANN001 - as Store's
        assert charge_ids is not None, "training must read the readings of named charges"
        self.read_charges |= set(map(str, charge_ids))
        return self._store.read_readings(stations=stations, charge_ids=charge_ids)

    def read_series_stats(self, stations, charge_ids=None):  # noqa: ANN001 - as Store's
        assert charge_ids is not None, "training must read the statistics of named charges"
        self.read_charges |= set(map(str, charge_ids))
        return self._store.read_series_stats(stations, charge_ids)

    def __getattr__(self, name: str):
        return getattr(self._store, name)


def with_max_sticks(config, max_sticks: int, **training):
    return replace(config, training=replace(config.training, max_sticks=max_sticks, **training))


def test_labeled_data_reads_the_features_of_the_kept_charges_only(history_plant):
    with Store.open(history_plant.url) as real:
        counts = real.read_defect_counts(list(history_plant.config.defect_types))
        limit = int(counts["n_sticks"].sum()) // 2
        config = with_max_sticks(history_plant.config, limit)
        expected = subsample_charges(counts["n_sticks"], limit, random_state=0)
        store = RecordingStore(real)
        data = labeled_data(store, config, "cooling")
        full = labeled_data(real, history_plant.config, "cooling")
        same = station_features(real, config, "cooling", charge_ids=list(expected))
    assert 4 <= len(expected) < len(counts)
    assert store.read_charges == set(expected)  # the dropped charges' readings: never read
    assert set(data.proportions.index) == set(expected) == set(data.bags)
    assert int(data.n_sticks.sum()) <= limit
    pd.testing.assert_frame_equal(data.features.X, same.X)  # whole charges, every stick
    assert data.subsample is not None and data.subsample.applied
    assert (data.subsample.labeled_charges, data.subsample.kept_charges) == (
        len(counts),
        len(expected),
    )
    assert full.subsample is not None and not full.subsample.applied
    assert full.n_charges == len(counts)


def test_a_limit_that_keeps_too_few_charges_says_to_raise_it(history_plant):
    config = with_max_sticks(history_plant.config, 60)
    with Store.open(history_plant.url) as store, pytest.raises(TrainingError) as info:
        labeled_data(store, config, "cooling")
    assert "training.max_sticks 60 keeps only" in str(info.value)


def test_train_station_says_and_records_that_it_trained_on_a_subsample(history_plant, tmp_path):
    url = history_plant.copy_to(tmp_path)
    lines: list[str] = []
    with Store.open(url) as store:
        counts = store.read_defect_counts(list(history_plant.config.defect_types))
        limit = int(counts["n_sticks"].sum() * 0.6)
        # one model on the failing shares: a rare type may miss a fold of 10 charges
        config = with_max_sticks(history_plant.config, limit, any_defect="direct")
        result = train_station(store, config, "rolling", random_state=5, progress=lines.append)
        record = get_model(store, result.model_id)
    kept = subsample_charges(counts["n_sticks"], limit, random_state=5)  # --seed seeds it too
    said = [line for line in lines if "subsampled" in line]
    assert said == [
        f"rolling: subsampled {len(kept)} of {len(counts)} charges "
        f"({int(counts['n_sticks'].loc[kept].sum()):,} of {int(counts['n_sticks'].sum()):,} "
        f"sticks; max_sticks {limit:,}, seed 5)"
    ]
    assert result.n_charges == len(kept) == record["n_charges"]
    assert result.n_sticks <= limit
    assert record["metrics"]["labeled_charges"] == len(counts)
    assert record["metrics"]["labeled_sticks"] == int(counts["n_sticks"].sum())
    assert record["metrics"]["max_sticks"] == limit
    line = _trained_line(result)  # what qcllp train prints
    assert f"on {len(kept)} charges (of {len(counts)}: training.max_sticks) / " in line
