"""What a lock-out threshold saves, per charge and over a week of production, with the interval
a model states for it.

A model states its expected saving per 1,000 sticks with a 90 % interval
(:class:`SavingEstimate`). What the line then realizes in a week differs from the estimate
twice over: the estimate has its own error (the bootstrap of the training charges, or the
Clopper-Pearson bounds of an inspected precision), and the week has its own draw -- *which*
charges come (their lock-out counts vary with alloy batch and set points) and *which* locked
sticks fail (one Bernoulli draw each). ``qcllp status`` and the report set the realized
saving of the last 7 days beside the expected one, so the interval is a prediction interval for
one week: :func:`week_spread` is the second part's standard deviation, and
:meth:`SavingEstimate.widened` adds it to the first in quadrature.

The week's spread (:func:`period_spread`) is the delta method for a ratio estimator (Cochran,
*Sampling Techniques*, 3rd ed. 1977, section 6.4): ``m`` charges drawn like the training ones,
with per-charge expected saving ``s_c`` and sticks ``r_c``, realize per stick
``sum s / sum r``, whose variance is about ``E[(s_c - mu r_c)^2] / (m rbar^2)`` with
``mu = sum s / sum r``; each locked stick's outcome adds ``p (1 - p) (fail_cost +
good_cost)^2`` (its saving is ``fail_cost`` or ``-good_cost``). A week is ``m`` charges at the
rate the training charges arrived (:func:`charges_per_week`); without their times, a period as
long as the training one (which reproduces the former ``sqrt 2`` widening of the estimate's
spread). Choice made: the charges of a week are treated as independent draws of the training
charges; a plant that drifts is outside any such interval, and ``benchmarks/bench_line.py``
measures how often the realized week falls inside (issue 33's target: 80 %).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from qcllp.station.lockout_rule import LockoutCosts

__all__ = [
    "LEVEL",
    "WEEK",
    "SavingEstimate",
    "charge_savings",
    "charges_per_week",
    "locked_outcomes",
    "locked_per_charge",
    "period_spread",
    "week_spread",
]

LEVEL = 0.90
WEEK = pd.Timedelta(days=7)


@dataclass(frozen=True)
class SavingEstimate:
    """Expected saving per 1,000 sticks with its interval, and what it stands on (``basis``):
    ``"held-out"``, charges the rule did not see
    (:func:`qcllp.station.lockout_rule.held_out_saving`); ``"in-sample"``, the training charges
    themselves, when the rule refitted without each group of them declined every time;
    ``"inspected"``, an inspected precision (:func:`qcllp.training.lockout.inspected_saving`).
    ``period_charges``: the charges of the week the interval is for (``None``: a period as
    long as the training one)."""

    per_1000: float
    low: float
    high: float
    level: float = LEVEL
    basis: str = "held-out"
    period_charges: float | None = None

    @classmethod
    def nothing(cls, level: float = LEVEL) -> SavingEstimate:
        """The saving of a model that locks out nothing: exactly 0, on any charges."""
        return cls(0.0, 0.0, 0.0, level)

    def widened(self, spread: float, period_charges: float | None) -> SavingEstimate:
        """This estimate's interval as a prediction interval for a period whose own saving has
        standard deviation ``spread`` (per 1,000 sticks): each side's half-width and the
        period's ``z x spread`` added in quadrature."""
        z = NormalDist().inv_cdf(0.5 + self.level / 2)  # the stdlib's: status imports no SciPy
        below = np.hypot(self.per_1000 - self.low, z * spread)
        above = np.hypot(self.high - self.per_1000, z * spread)
        return replace(
            self,
            low=float(self.per_1000 - below),
            high=float(self.per_1000 + above),
            period_charges=period_charges,
        )


def charges_per_week(times: pd.Series | None) -> int | None:
    """Charges a week at the rate these charge times arrived: ``(n - 1)`` gaps over their
    span, times 7 days, at least 1. ``None`` when fewer than two charges have a time or they
    span no time."""
    if times is None:
        return None
    known = pd.to_datetime(times.dropna(), utc=True)
    if len(known) < 2:
        return None
    span = known.max() - known.min()
    if span <= pd.Timedelta(0):
        return None
    return max(1, round((len(known) - 1) * (WEEK / span)))


def period_spread(
    saving: np.ndarray, noise: np.ndarray, rows: np.ndarray, period_charges: float
) -> float:
    """Standard deviation of the saving per 1,000 sticks realized over ``period_charges``
    charges drawn like these (module docstring): ``saving`` the expected saving per charge,
    ``noise`` the variance of its outcomes per charge, ``rows`` its sticks."""
    saving, noise, rows = (np.asarray(a, dtype=float) for a in (saving, noise, rows))
    if rows.sum() <= 0 or period_charges < 1:
        return 0.0
    mu = saving.sum() / rows.sum()
    per_charge = np.mean((saving - mu * rows) ** 2) + np.mean(noise)
    return float(1000 * np.sqrt(per_charge / period_charges) / rows.mean())


def week_spread(
    p: np.ndarray,
    codes: np.ndarray,
    n_bags: int,
    threshold: float,
    costs: LockoutCosts,
    period_charges: float,
    precision: float | None = None,
) -> float:
    """:func:`period_spread` of locking out ``p >= threshold`` on these charges: each locked
    stick fails with its ``p``, or with ``precision`` when the saving stands on an inspected
    precision rather than on the probabilities."""
    saving, noise = locked_outcomes(p, codes, n_bags, threshold, costs, precision)
    rows = np.bincount(codes, minlength=n_bags)
    return period_spread(saving, noise, rows, period_charges)


def locked_outcomes(
    p: np.ndarray,
    codes: np.ndarray,
    n_bags: int,
    threshold: float,
    costs: LockoutCosts,
    precision: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per charge, of locking out ``p >= threshold``: the expected saving and the variance
    of its outcomes (a locked stick saves ``fail_cost`` or loses ``good_cost``, plus the
    look), each locked stick failing with its ``p`` or with ``precision``."""
    p = np.asarray(p, dtype=float)
    q = p if precision is None else np.full_like(p, precision)
    outcome = (costs.fail_cost + costs.good_cost) ** 2 * q * (1 - q)
    at = np.array([threshold])
    _, saving = locked_per_charge(p, codes, n_bags, at, weights=costs.lockout_value(q))
    _, noise = locked_per_charge(p, codes, n_bags, at, weights=outcome)
    return saving[0], noise[0]


def locked_per_charge(
    p: np.ndarray,
    codes: np.ndarray,
    n_bags: int,
    thresholds: np.ndarray,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(count, sum of ``weights``) of sticks with ``p >= t`` per threshold and charge, (T, h)."""
    order = np.argsort(thresholds, kind="stable")
    ts = thresholds[order]
    # bin k (0..T): the stick reaches the k smallest thresholds (p >= ts[:k])
    reach = np.searchsorted(ts, p, side="right")
    T = len(ts)
    flat = codes * (T + 1) + reach
    count = np.bincount(flat, minlength=n_bags * (T + 1)).reshape(n_bags, T + 1)
    mass = np.bincount(flat, p if weights is None else weights, minlength=n_bags * (T + 1))
    mass = mass.reshape(n_bags, T + 1)
    # locked at sorted threshold j = sticks in bins j+1..T
    count_at = np.cumsum(count[:, ::-1], axis=1)[:, ::-1][:, 1:]
    mass_at = np.cumsum(mass[:, ::-1], axis=1)[:, ::-1][:, 1:]
    out_count = np.empty((T, n_bags))
    out_mass = np.empty((T, n_bags))
    out_count[order] = count_at.T
    out_mass[order] = mass_at.T
    return out_count, out_mass


def charge_savings(
    p: np.ndarray, codes: np.ndarray, n_bags: int, thresholds: np.ndarray, costs: LockoutCosts
) -> np.ndarray:
    """(T, h) expected saving per charge of locking out ``p >= t``, trusting ``p``."""
    gain = costs.lockout_value(p)
    return locked_per_charge(p, codes, n_bags, thresholds, weights=gain)[1]
