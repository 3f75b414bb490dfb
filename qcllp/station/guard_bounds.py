"""When does a model lock out more than a healthy one would? The lock-out guard's statistics.

Training knows how much a healthy model locks out, from its out-of-fold probabilities on the
training charges; the scorer (:mod:`qcllp.scoring.share_guard`) watches what it does on the
line. Two rules, each with its bound computed in training and stored with the model:

* **share since promotion** (:func:`lockout_rate_bound`): the share of sticks locked out may
  exceed the 99 % bootstrap quantile of the training share by three binomial standard
  deviations, judged after ``min_sticks`` decisions. It catches a model that never fitted this
  plant, but a model that was right for months moves its share since promotion only slowly
  when the plant changes: on the simulated process change the guard tripped after a week of
  losses (``benchmarks/bench_process_change.py``).
* **recent excess** (:func:`lockout_excess_bound`): Page's CUSUM (Page 1954, "Continuous
  inspection schemes") of the lock-outs above the rate bound, ``S_t = max(0, S_{t-1} + x_t -
  k)`` with ``x_t`` 1 for a lock-out and ``k`` the rate bound: the number of sticks locked out
  beyond the healthy rate since the last quiet stretch. It forgets a healthy history by
  construction, so a sudden change trips it within a few charges, whatever came before. Its
  limit ``h`` is calibrated on the training charges rather than taken from a binomial formula:
  lock-outs cluster in charges (a defect-rich charge has many), so a healthy model reaches
  excesses far above the independent-sticks figure. ``h`` is the 99 % quantile, over bootstrap
  sequences of training charges in random order, of the largest excess a healthy model reaches
  within ``horizon`` charges (default 1,000: most of a year at 25 charges a week; long on
  purpose, the guard must not trip on a healthy model), computed at charge granularity (within
  a charge the excess can pass its end-of-charge value by at most that charge's lock-outs).
  It is judged from the first decision and needs no minimum count: ``h`` already holds what a
  run of unlucky charges can do.

Why CUSUM and not a sliding window: it needs one number of state per model (the scorer's
table row), costs O(new decisions) per step, and is the classical optimal detector of a rate
increase; a window of the last N decisions would need their history read on every poll.

A third rule needs no training bound, because it asks the plant itself: **final QC's counts**
(:func:`count_excess_path`; the scorer's side is :mod:`qcllp.scoring.count_guard`). Days
after a charge was decided, final QC reports its failures among the sticks that reached it.
A model that still fits the plant predicts about as many; one that over-predicts on this plant
(its probabilities shifted up) locks out good sticks. Per charge ``c``, with ``q`` the
probabilities of its sticks that reached QC and ``F_c`` the failures QC reported,
``z_c = (sum q - F_c) / sqrt(sum q (1 - q))`` is the standardized over-prediction (mean 0,
variance 1 for a calibrated model: the count is Poisson-binomial), and the one-sided CUSUM
``S_c = max(0, S_{c-1} + z_c - k)`` with reference ``k`` = :data:`COUNT_REFERENCE` (0.5:
optimal for a shift of one standard deviation per charge) trips above the decision interval
``h`` (``scorer.count_guard_interval``, default :data:`COUNT_INTERVAL`). A calibrated model
trips it by chance within 1,000 charges (most of a year) in about 1.5 % of simulated plants
(200 runs of Poisson-binomial counts, charges of 20–60 sticks; Siegmund's approximation for
normal ``z`` gives a mean run length of about 19,000 charges), and each promotion starts the
count afresh. The interval was chosen on the 60 reseeded plant cases of
``benchmarks/bench_lockout_rules.py`` (docs/benchmarks.md): ``h`` 8 stopped both models
that lost money (−1,388 and −1,287 per 1,000 sticks became +362 and −80) and cost one healthy
case 345 of its 509; ``h`` 4 tripped on healthy models' noise and gave up a third of the gains.
The rule looks only at the sticks that reached QC, a selection made by the model's own
decisions, not by the outcome, so a calibrated model's ``z`` keeps mean 0. One charge's ``z``
counts at most :data:`COUNT_Z_CAP` (8, the default ``h``), so that no single charge trips the
rule from rest at the default interval: a charge of
near-certain sticks (``q`` close to 1, variance close to 0) that all passed QC would
otherwise trip it alone, and no single charge -- a mislabelled report, a misassigned stick --
should. On the 60 replayed cases the cap of 8 changes nothing; a cap of 4 let one of the two
losing models run on (−1,328 instead of +362 per 1,000 sticks; sum +12,260 against +13,949).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "COUNT_INTERVAL",
    "COUNT_REFERENCE",
    "GuardCounts",
    "count_excess_path",
    "guard_step",
    "GuardVerdict",
    "excess_path",
    "guard_trip",
    "lockout_excess_bound",
    "lockout_rate_bound",
]

HORIZON_CHARGES = 1000
MIN_EXCESS = 3.0  # sticks; a model that locked out (almost) nothing in training
COUNT_REFERENCE = 0.5  # the count CUSUM's reference k, in standard deviations per charge
COUNT_INTERVAL = 8.0  # its decision interval h (module docstring)
COUNT_Z_CAP = 8.0  # the most one charge's z counts: at the default h, no charge trips alone


def lockout_rate_bound(
    probability: np.ndarray,
    codes: np.ndarray,
    threshold: float,
    *,
    quantile: float = 0.99,
    n_boot: int = 400,
    random_state: int | None = 0,
) -> float:
    """The share of sticks the threshold locks out, at its ``quantile`` over bootstrap
    resamples of the charges: how much a healthy model may lock out."""
    locked, rows = _per_charge(probability, codes, threshold)
    h = len(rows)
    weights = np.random.default_rng(random_state).multinomial(h, np.full(h, 1.0 / h), n_boot)
    return float(np.quantile((weights @ locked) / (weights @ rows), quantile))


def lockout_excess_bound(
    probability: np.ndarray,
    codes: np.ndarray,
    threshold: float,
    rate_bound: float,
    *,
    horizon: int = HORIZON_CHARGES,
    quantile: float = 0.99,
    n_boot: int = 400,
    random_state: int | None = 0,
) -> float:
    """The most sticks a healthy model locks out beyond ``rate_bound`` in a run (the CUSUM's
    largest value within ``horizon`` charges), at its ``quantile`` over bootstrap sequences of
    the training charges; at least :data:`MIN_EXCESS` (module docstring)."""
    locked, rows = _per_charge(probability, codes, threshold)
    increments = locked - rate_bound * rows
    rng = np.random.default_rng(random_state)
    cusum = np.zeros(n_boot)
    largest = np.zeros(n_boot)
    draws = rng.integers(0, len(rows), size=(horizon, n_boot))
    for increment in increments[draws]:  # one charge after another, all draws at once
        cusum = np.maximum(cusum + increment, 0.0)
        np.maximum(largest, cusum, out=largest)
    return float(max(np.quantile(largest, quantile), MIN_EXCESS))


def excess_path(locked: np.ndarray, rate_bound: float, excess_before: float = 0.0) -> np.ndarray:
    """The CUSUM ``S_t`` after each decision, from ``excess_before``: Lindley's recursion in
    closed form, ``S_t = C_t - min(0, min_{s <= t} C_s)`` with ``C_t = S_0 + sum_{s <= t}
    (x_s - k)``."""
    return _lindley(np.asarray(locked, dtype=float) - rate_bound, excess_before)


def count_excess_path(
    predicted: np.ndarray,
    variance: np.ndarray,
    observed: np.ndarray,
    excess_before: float = 0.0,
    reference: float = COUNT_REFERENCE,
) -> np.ndarray:
    """The count CUSUM ``S_c`` after each charge (module docstring), from ``excess_before``:
    per charge the failures ``predicted`` among its sticks that reached final QC (the sum of
    their probabilities), the ``variance`` of that count (the sum of ``q (1 - q)``) and the
    failures ``observed`` (reported); ``reference``: the CUSUM's ``k``. One charge's ``z``
    counts at most :data:`COUNT_Z_CAP`."""
    predicted = np.asarray(predicted, dtype=float)
    z = (predicted - np.asarray(observed, dtype=float)) / np.sqrt(
        np.asarray(variance, dtype=float) + 1e-9
    )
    return _lindley(np.minimum(z, COUNT_Z_CAP) - reference, excess_before)


def _lindley(increments: np.ndarray, before: float) -> np.ndarray:
    """``S_t = max(0, S_{t-1} + x_t)`` from ``S_0 = before`` for all ``t`` at once."""
    walk = before + np.cumsum(increments)
    return walk - np.minimum(np.minimum.accumulate(walk), 0.0)


class GuardVerdict(NamedTuple):
    """Where the guard trips in the new decisions (``None``: it does not), and the CUSUM after
    the last of them (stored for the next step)."""

    at: int | None
    excess: float


def guard_trip(
    locked: np.ndarray,
    bound: float,
    min_sticks: int,
    *,
    decided: int = 0,
    locked_before: int = 0,
    excess_bound: float | None = None,
    excess_before: float = 0.0,
) -> GuardVerdict:
    """Where, in the new decisions ``locked`` (bool, in the order they are made), the model's
    lock-outs stop being believable for a healthy model, and the excess to carry on.

    ``decided`` / ``locked_before`` count the same model's earlier decisions, ``excess_before``
    its CUSUM after them. Trips at the first decision at which either rule of the module
    docstring does: the share since promotion (after ``min_sticks`` decisions) exceeds
    ``bound`` by three binomial standard deviations, or the recent excess exceeds
    ``excess_bound`` (``None``: a model trained before that rule, judged by the share alone).
    """
    locked = np.asarray(locked, dtype=bool)
    n = decided + np.arange(1, len(locked) + 1)
    share = (locked_before + np.cumsum(locked)) / n
    spread = np.sqrt(max(bound * (1.0 - bound), 1e-4) / n)
    over = (n >= min_sticks) & (share > bound + 3.0 * spread)
    path = excess_path(locked, bound, excess_before)
    if excess_bound is not None:
        over |= path > excess_bound
    hits = np.flatnonzero(over)
    return GuardVerdict(
        int(hits[0]) if len(hits) else None, float(path[-1]) if len(path) else excess_before
    )


@dataclass(frozen=True)
class GuardCounts:
    """What the guard knows of one model: its decisions and lock-outs so far (its wishes, also
    while suspended), its recent excess, and whether its lock-outs are suspended."""

    decided: int = 0
    locked: int = 0
    excess: float = 0.0
    suspended: bool = False


def guard_step(
    counts: GuardCounts,
    wants: np.ndarray,
    bound: float | None,
    min_sticks: int,
    excess_bound: float | None = None,
) -> tuple[np.ndarray, GuardCounts, int | None]:
    """One step of the guard on the lock-outs a model ``wants`` (bool, in decision order):
    the lock-outs allowed, the counts after the step, and where it tripped in this step (or
    ``None``). ``bound`` ``None`` (a model trained before the guard): the share and excess
    rules are not applied, but a suspension (by final QC's counts) still holds. The scorer's
    :func:`qcllp.scoring.share_guard.apply_guard` keeps the counts in the database; the
    benchmarks keep them in memory."""
    wants = np.asarray(wants, dtype=bool)
    if bound is None:
        allowed = np.zeros_like(wants) if counts.suspended else wants.copy()
        after = GuardCounts(
            counts.decided + len(wants),
            counts.locked + int(wants.sum()),
            counts.excess,
            counts.suspended,
        )
        return allowed, after, None
    verdict = guard_trip(
        wants,
        bound,
        min_sticks,
        decided=counts.decided,
        locked_before=counts.locked,
        excess_bound=excess_bound,
        excess_before=counts.excess,
    )
    at = None if counts.suspended else verdict.at
    allowed = np.zeros_like(wants) if counts.suspended else wants.copy()
    if at is not None:
        allowed[at:] = False
    after = GuardCounts(
        counts.decided + len(wants),
        counts.locked + int(wants.sum()),
        verdict.excess,
        counts.suspended or at is not None,
    )
    return allowed, after, at


def _per_charge(
    probability: np.ndarray, codes: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """Sticks locked out and sticks, per charge."""
    codes = np.asarray(codes, dtype=np.intp)
    h = int(codes.max()) + 1 if len(codes) else 0
    locked = np.bincount(codes, np.asarray(probability) >= threshold, minlength=h)
    return locked.astype(float), np.bincount(codes, minlength=h).astype(float)
