"""The series' mergeable statistics (:mod:`qcllp.store.series_stats`): readings split into
batches any way and merged in any order give the statistics of all of them at once, and the
features built from statistics equal those built from the raw readings, within 1e-9
relative -- on hypothesis' series at real epoch times and on the simulated plant. The slope
is checked against its exact rational value."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as hs

from qcllp.features import (
    SERIES_COLUMNS,
    build_station_features,
    build_station_features_from_stats,
)
from qcllp.plant.simulate import simulate_plant
from qcllp.store.series_stats import STAT_COLUMNS, SeriesStats, series_stats

RTOL = 1e-9
EPOCH_2026_US = 1_767_225_600_000_000  # 2026-01-01 UTC: times where float seconds lose µs


@hs.composite
def split_series(draw) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Readings of 1-4 series (distinct times within a series, up to ~17 minutes apart, at
    2026's epoch) and, per reading, the batch (of 1-4) it arrives in."""
    ids, times, values = [], [], []
    for series in range(draw(hs.integers(1, 4))):
        offsets = draw(hs.lists(hs.integers(0, 10**9), min_size=1, max_size=25, unique=True))
        ids += [series * 7 + 3] * len(offsets)
        times += [EPOCH_2026_US + o for o in offsets]
        values += draw(
            hs.lists(
                hs.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False),
                min_size=len(offsets),
                max_size=len(offsets),
            )
        )
    batches = draw(hs.lists(hs.integers(0, 3), min_size=len(ids), max_size=len(ids)))
    return np.array(ids), np.array(times, dtype=np.int64), np.array(values), np.array(batches)


def merged_in_batches(ids, times, values, batches, order) -> SeriesStats:
    """The statistics of each batch on its own, merged in ``order``."""
    parts = [
        series_stats(ids[batches == b], times[batches == b], values[batches == b]) for b in order
    ]
    out = parts[0]
    for part in parts[1:]:
        out = out.merge(part)
    return out


def assert_same_stats(got: SeriesStats, want: SeriesStats, values: np.ndarray) -> None:
    """Counts, times, min, max and last exactly; means and centred moments within
    :data:`RTOL` of their own scale (a moment's scale is that of a sum of squares)."""
    np.testing.assert_array_equal(got.ids, want.ids)
    for exact in ("n", "t0_us", "t1_us", "v_last", "min_v", "max_v"):
        np.testing.assert_array_equal(getattr(got, exact), getattr(want, exact), exact)
    v_scale = max(float(np.abs(values).max()), 1.0)
    t_scale = float((want.t1_us - want.t0_us).max()) / 1e6 + 1.0
    np.testing.assert_allclose(got.mean_v, want.mean_v, rtol=RTOL, atol=RTOL * v_scale)
    np.testing.assert_allclose(got.mean_t, want.mean_t, rtol=RTOL, atol=RTOL * t_scale)
    n = float(want.n.max())
    np.testing.assert_allclose(got.m2_v, want.m2_v, rtol=RTOL, atol=RTOL * n * v_scale**2)
    np.testing.assert_allclose(got.m2_t, want.m2_t, rtol=RTOL, atol=RTOL * n * t_scale**2)
    np.testing.assert_allclose(got.c_tv, want.c_tv, rtol=RTOL, atol=RTOL * n * v_scale * t_scale)


@settings(max_examples=300, deadline=None)
@given(split_series(), hs.randoms(use_true_random=False))
def test_batches_merged_in_any_order_are_all_the_readings_at_once(data, rnd):
    ids, times, values, batches = data
    order = sorted(set(batches.tolist()))
    rnd.shuffle(order)
    shuffled = np.array(rnd.sample(range(len(ids)), len(ids)), dtype=np.int64)
    at_once = series_stats(ids[shuffled], times[shuffled], values[shuffled])
    assert_same_stats(merged_in_batches(ids, times, values, batches, order), at_once, values)


CONSTANT_OVER_3_US = (  # a constant series (exact slope 0) hypothesis found failing once
    np.array([3, 3, 3]),
    np.array([1767225600000000, 1767225600000001, 1767225600000003]),
    np.full(3, 2731.178266463133),
    np.array([0, 0, 0]),
)


@settings(max_examples=100, deadline=None)
@given(split_series())
@example(CONSTANT_OVER_3_US)
def test_the_slope_from_the_statistics_is_the_exact_least_squares_slope(data):
    ids, times, values, _ = data
    stats = series_stats(ids, times, values)
    for k, series in enumerate(stats.ids):
        t = [Fraction(int(x), 10**6) for x in times[ids == series]]
        v = [Fraction(float(x)) for x in values[ids == series]]
        mt, mv = sum(t) / len(t), sum(v) / len(v)
        sxx = sum((ti - mt) ** 2 for ti in t)
        if sxx == 0:
            assert stats.m2_t[k] == 0.0
            continue
        exact = sum((ti - mt) * (vi - mv) for ti, vi in zip(t, v, strict=True)) / sxx
        # the absolute scale of a slope's rounding: the values' size over the time span (a
        # constant series' exact slope is 0, and its float mean is off by an ulp of the value)
        scale = float(max(abs(vi) for vi in v)) / float(max(t) - min(t))
        assert stats.c_tv[k] / stats.m2_t[k] == pytest.approx(
            float(exact), rel=RTOL, abs=RTOL * scale
        )


def stats_frame(readings: pd.DataFrame, batches: np.ndarray) -> pd.DataFrame:
    """What the store will keep: per (charge, stick, station, sensor) series the statistics
    of its readings, taken batch by batch (``batches``: the batch of each reading) and
    merged."""
    keys = readings[list(SERIES_COLUMNS)]
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(keys))
    ok = readings["value"].notna().to_numpy()
    times = pd.DatetimeIndex(readings["timestamp"]).as_unit("us").asi8
    values = readings["value"].to_numpy(dtype=float)
    merged = None
    for b in np.unique(batches):
        rows = ok & (batches == b)
        part = series_stats(codes[rows], times[rows], values[rows])
        merged = part if merged is None else merged.merge(part)
    frame = pd.DataFrame(list(uniques[merged.ids]), columns=list(SERIES_COLUMNS))
    for column in STAT_COLUMNS:
        frame[column] = getattr(merged, column)
    return frame


@pytest.mark.parametrize("station", ["furnace", "cooling", "straightening"])
def test_features_from_batch_statistics_are_the_features_of_the_readings(config, station):
    plant = simulate_plant(config, 12, random_state=3, missing_rate=0.1)
    readings = plant.readings
    batches = np.random.default_rng(0).integers(0, 5, len(readings))  # series span batches
    raw = build_station_features(readings, config, station)
    kept = build_station_features_from_stats(stats_frame(readings, batches), config, station)
    assert kept.X.index.equals(raw.X.index)
    assert list(kept.X.columns) == list(raw.X.columns)
    assert kept.imputation == pytest.approx(raw.imputation, rel=RTOL)
    want = raw.X.to_numpy()
    column_scale = np.abs(want).max(axis=0)  # a slope's column is ~1e-6, a count's ~100
    assert np.all(np.abs(kept.X.to_numpy() - want) <= RTOL * (np.abs(want) + column_scale))
    assert raw.X.filter(like=".missing").to_numpy().any()  # some series had no readings


def test_statistics_without_a_column_are_one_line(config):
    frame = pd.DataFrame({"charge_id": ["C1"], "stick_id": ["S1"], "station": ["furnace"]})
    with pytest.raises(ValueError, match=r"^series statistics lack column\(s\) sensor, n, "):
        build_station_features_from_stats(frame, config, "furnace")


def test_a_repeated_time_keeps_the_larger_value_whatever_the_order_or_batch():
    ids = np.array([5, 5, 5, 5])
    times = np.array([10, 30, 30, 20], dtype=np.int64) + EPOCH_2026_US
    values = np.array([1.0, 7.0, 9.0, 4.0])
    for order in ([0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]):
        assert series_stats(ids[order], times[order], values[order]).v_last.tolist() == [9.0]
    split = series_stats(ids[:2], times[:2], values[:2]).merge(
        series_stats(ids[2:], times[2:], values[2:])
    )
    assert split.v_last.tolist() == [9.0] and split.n.tolist() == [4]


def test_readings_without_a_column_are_one_line(config):
    frame = pd.DataFrame({"charge_id": ["C1"], "stick_id": ["S1"], "station": ["furnace"]})
    with pytest.raises(ValueError, match=r"^readings lack column\(s\) timestamp, sensor, value$"):
        build_station_features(frame, config, "furnace")
