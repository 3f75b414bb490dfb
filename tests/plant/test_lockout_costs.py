"""The price of a lock-out includes its look at the bay: one break-even for the plant's
stations and the costs a model is trained with, and every saving built on it."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from qcllp.plant.config import ConfigError, load_plant_config
from qcllp.station.lockout_rule import (
    LockoutCosts,
    charge_savings,
    lockout_rule,
)
from qcllp.station.realized import (
    decisions_saving,
    lockout_saving_per_1000,
    realized_saving_per_1000,
)
from qcllp.training.lockout import station_costs
from tests.support.plants import ROOT


def test_the_example_plants_break_evens_count_the_look():
    config = load_plant_config(ROOT / "plant_config" / "example.yaml")
    by_hand = {  # (good_cost + inspection_cost) / (good_cost + fail_cost)
        "furnace": (400 + 20) / (400 + 180),
        "rolling": (420 + 21) / (420 + 120),
        "cooling": (440 + 22) / (440 + 60),
        "straightening": (450 + 22.5) / (450 + 25),
    }
    for name, want in by_hand.items():
        station, costs = config.station(name), station_costs(config, name)
        assert station.break_even == pytest.approx(want)
        assert costs.bayes_threshold == pytest.approx(want)
        assert station.lockout_value(want) == pytest.approx(0.0, abs=1e-9)
        assert costs.lockout_value(want) == pytest.approx(0.0, abs=1e-9)
    assert round(config.station("cooling").break_even, 3) == 0.924


def test_a_lockout_is_worth_its_failing_share_less_its_good_share_and_its_look():
    costs = LockoutCosts(fail_cost=60.0, good_cost=440.0, inspection_cost=22.0)
    assert costs.lockout_value(1.0) == pytest.approx(38.0)
    assert costs.lockout_value(0.0) == pytest.approx(-462.0)
    values = costs.lockout_value(np.array([0.9, 0.95]))
    assert values == pytest.approx([54 - 44 - 22, 57 - 22 - 22])


def test_savings_per_1000_charge_each_lockout_its_look():
    costs = LockoutCosts(fail_cost=60.0, good_cost=440.0, inspection_cost=22.0)
    locked = np.array([True, True, True, False, False])
    bad = np.array([1, 1, 0, 1, 0])
    want = 1000 * (2 * 60 - 440 - 3 * 22) / 5
    assert lockout_saving_per_1000(locked, bad, costs) == pytest.approx(want)
    p = np.array([0.99, 0.97, 0.95, 0.5, 0.1])
    assert realized_saving_per_1000(p, bad, 0.9, costs) == pytest.approx(want)
    by_charge = charge_savings(p, np.array([0, 0, 1, 1, 1]), 2, np.array([0.9]), costs)
    assert by_charge[0] == pytest.approx(
        [costs.lockout_value(0.99) + costs.lockout_value(0.97), costs.lockout_value(0.95)]
    )


def test_where_a_look_costs_more_than_a_failing_stick_saves_nothing_is_locked_out():
    costs = LockoutCosts(fail_cost=20.0, good_cost=450.0, inspection_cost=22.5)
    assert costs.bayes_threshold > 1.0
    rng = np.random.default_rng(0)
    codes = np.repeat(np.arange(40), 30)
    f = rng.normal(size=len(codes)) * 3
    bad = rng.random(len(f)) < 1 / (1 + np.exp(-f))  # a ranking that separates well
    counts = np.bincount(codes, bad, minlength=40)

    def identity(decision, codes, positives):
        return lambda x: 1 / (1 + np.exp(-np.asarray(x, dtype=float)))

    choice = lockout_rule(f, codes, counts, costs, identity, n_boot=20, random_state=0)
    assert choice.threshold > 1.0 and choice.lockout_rate == 0.0


def test_the_lines_decisions_count_lockouts_at_their_price_and_audits_at_their_look():
    costs = LockoutCosts(fail_cost=60.0, good_cost=440.0, inspection_cost=22.0)
    locked = np.array([True, True, False, False, False])
    audited = np.array([False, False, True, True, False])
    bad = np.array([1, 0, 1, 0, 1])
    # lock-outs: 60 - 22 and -440 - 22; audits: 60 - 22 (scrapped) and -22 (returned)
    assert decisions_saving(locked, audited, bad, costs) == pytest.approx(38 - 462 + 38 - 22)
    with pytest.raises(ValueError, match="5 decisions but 4 truth values"):
        decisions_saving(locked, audited, bad[:4], costs)


def test_trial_audit_share_defaults_to_every_would_be_lockout_and_above_1_is_one_line(tmp_path):
    doc = yaml.safe_load((ROOT / "plant_config" / "example.yaml").read_text())
    doc["stations"][2]["trial_audit_share"] = 1.5
    path = tmp_path / "plant.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError) as refused:
        load_plant_config(path)
    assert (
        str(refused.value) == f"{path}: stations[2].trial_audit_share: must be at most 1, got 1.5"
    )
    doc["stations"][2]["trial_audit_share"] = 0.25
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    config = load_plant_config(path)
    assert config.stations[2].trial_audit_share == 0.25
    assert config.stations[0].trial_audit_share == 1.0
