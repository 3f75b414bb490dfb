"""Cost-based lock-out decisions: when is locking a stick out worth it, and what will it save?

Locking out a stick that would fail saves what the rest of the line would have spent on it
(``fail_cost``: the later the station, the less is left to save); locking out a good stick
loses its value (``good_cost``). With calibrated probabilities the Bayes rule locks out when
``p * fail_cost > (1 - p) * good_cost + inspection_cost`` (every locked-out stick is looked at
at the lock-out bay before it is scrapped), i.e. ``p > (good_cost + inspection_cost) /
(good_cost + fail_cost)``, and the expected saving of locking out every stick with ``p >= t``
is ``sum over those sticks of p * fail_cost - (1 - p) * good_cost - inspection_cost``
(:meth:`LockoutCosts.lockout_value`).

An LLP model's probabilities are only as calibrated as the counts can make them: the
calibration (:class:`qcllp.learn.calibration.CountCalibrator`, fitted on out-of-fold
probabilities by the likelihood of the charges' failing counts) is itself an estimate from a
hundred charges or so, and a threshold near the break-even point turns a small calibration
error into a loss (the issue "Lock-out decisions that pay": thresholds chosen on point
estimates lost money on fresh charges at most stations). So the rule asks for evidence:

* **Threshold** (:func:`lockout_rule`): candidates are the Bayes threshold and the quantiles of
  the calibrated probabilities above it. For each, the expected saving per 1,000 sticks is
  recomputed on ``n_boot`` bootstrap resamples of the *charges*, each with the calibration
  refitted on its resample, so both the charges' sampling and the calibration's uncertainty
  enter. The threshold with the largest lower bound (the ``alpha`` quantile, default 10 %) is
  taken if that bound is positive; otherwise the station locks out nothing and says so
  (``threshold`` above 1, ``declined``). A bootstrap over charges rather than sticks because
  charges, not sticks, are the independent units (alloy batch, set points).
* **Expected saving with an interval** (:func:`held_out_saving`): the saving the rule will
  bring is estimated on charges it did not see. The charges are split into ``groups``; for
  each group the whole rule (calibration, bootstrap, threshold) runs on the other groups and
  the held-out group's expected saving at that threshold is taken from its probabilities under
  the other groups' calibration. The per-charge held-out savings give the estimate, and a
  bootstrap over them its sampling spread; the interval is a prediction interval for one week
  of production at ``level`` (90 %): the estimate's error plus the week's own, which charges
  come and which locked sticks fail (:mod:`qcllp.station.saving_estimate`). A model whose
  rule declined on all its charges locks out nothing and states a saving of exactly 0
  (:meth:`SavingEstimate.nothing`), even where the rule locked out on some of the held-out
  groups' training subsets: what it promises is what the model will do, not what a rule
  refitted on fewer charges might.

What the interval cannot cover: a plant that changes (new sensors, recipes, drift) moves the
probabilities themselves; ``benchmarks/bench_plant_quality.py`` measures how often the saving
realized on a differently seeded plant falls inside.

Vectorized: per bootstrap replicate the savings of all thresholds come from one (charge x
threshold-bin) ``bincount`` and a reverse cumulative sum over the bins
(:func:`locked_per_charge`), memory O(charges x thresholds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from qcllp.learn.calibration import CountCalibrator
from qcllp.learn.core.threads import single_threaded
from qcllp.learn.count_batch import fit_count_calibrators
from qcllp.plant import lockout_costs
from qcllp.station.saving_estimate import (
    LEVEL,
    SavingEstimate,
    charge_savings,
    locked_outcomes,
    locked_per_charge,
    period_spread,
    week_spread,
)

__all__ = [
    "LockoutCosts",
    "SavingEstimate",
    "ThresholdChoice",
    "charge_savings",
    "count_calibration",
    "declined_choice",
    "expected_saving",
    "held_out_saving",
    "lockout_rule",
    "locked_per_charge",
]

N_BOOT = 30
ALPHA = 0.10
GROUPS = 5
_N_CANDIDATES = 40


@dataclass(frozen=True)
class LockoutCosts:
    """Costs per stick at one station, in the plant's currency.

    ``fail_cost``: saved per failing stick locked out here; ``good_cost``: lost per good stick
    locked out here; ``inspection_cost``: the cost of looking at one stick here (as
    ``qcllp.plant.config.Station``; 0 in models trained before it was recorded).
    """

    fail_cost: float
    good_cost: float
    inspection_cost: float = 0.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.fail_cost) and np.isfinite(self.good_cost)):
            raise ValueError(
                f"lock-out costs must be finite, got {self.fail_cost!r} and {self.good_cost!r}"
            )
        if not (np.isfinite(self.inspection_cost) and self.inspection_cost >= 0):
            raise ValueError(
                f"inspection_cost must be finite and >= 0, got {self.inspection_cost!r}"
            )
        if not (self.fail_cost >= 0 and self.good_cost > 0):
            raise ValueError(
                f"lock-out costs need fail_cost >= 0 and good_cost > 0, got {self.fail_cost!r} "
                f"and {self.good_cost!r}"
            )

    @property
    def bayes_threshold(self) -> float:
        """The threshold that is optimal for perfectly calibrated probabilities, where a
        lock-out neither saves nor loses: ``(good_cost + inspection_cost) / (good_cost +
        fail_cost)`` (:func:`qcllp.plant.lockout_costs.break_even`). Above 1 when a look costs
        more than a failing stick saves: no lock-out pays."""
        return lockout_costs.break_even(self.fail_cost, self.good_cost, self.inspection_cost)

    def lockout_value(self, precision: np.ndarray | float) -> np.ndarray | float:
        """What one lock-out brings when its stick fails with probability ``precision``:
        ``precision x fail_cost - (1 - precision) x good_cost - inspection_cost``, the look at
        the lock-out bay included (:func:`qcllp.plant.lockout_costs.lockout_value`)."""
        return lockout_costs.lockout_value(
            precision, self.fail_cost, self.good_cost, self.inspection_cost
        )

    @property
    def audit_pays_from(self) -> float:
        """The failure probability above which an audit sample pays for its look,
        ``inspection_cost / fail_cost`` (``inf`` when a failing stick saves nothing here)."""
        return lockout_costs.audit_pays_from(self.fail_cost, self.inspection_cost)


@dataclass(frozen=True)
class ThresholdChoice:
    """The chosen threshold and what it is expected to bring on the charges it was chosen on.

    ``threshold`` > 1 means "lock out nothing"; ``declined`` says it was for want of evidence
    (the lower bound of the best candidate was not positive). ``saving_per_1000``: the
    expected saving at the threshold on these charges; ``saving_bound_per_1000``: its
    bootstrap lower bound.

    ``basis``: what the threshold rests on, ``"counts"`` (the bootstrap of the charges'
    counts, :func:`lockout_rule`) or ``"inspected"`` (the precision of the inspected sticks
    above it, ``inspected_failing`` of ``inspected``:
    :func:`qcllp.training.lockout.inspected_threshold`; the saving figures are then that
    precision's, per 1,000 sticks).
    """

    threshold: float
    saving_per_1000: float
    lockout_rate: float
    bayes_threshold: float
    saving_bound_per_1000: float = 0.0
    declined: bool = False
    basis: str = "counts"
    inspected: int = 0
    inspected_failing: int = 0

    def as_dict(self) -> dict[str, float | str]:
        return {
            "threshold": self.threshold,
            "saving_per_1000": self.saving_per_1000,
            "saving_bound_per_1000": self.saving_bound_per_1000,
            "lockout_rate": self.lockout_rate,
            "bayes_threshold": self.bayes_threshold,
            "declined": self.declined,
            "basis": self.basis,
            "inspected": self.inspected,
            "inspected_failing": self.inspected_failing,
        }


def declined_choice(costs: LockoutCosts) -> ThresholdChoice:
    """The rule's choice when it declines for want of evidence: lock out nothing."""
    return ThresholdChoice(
        threshold=1.0 + 1e-9,
        saving_per_1000=0.0,
        lockout_rate=0.0,
        bayes_threshold=costs.bayes_threshold,
        saving_bound_per_1000=0.0,
        declined=True,
    )


Calibrate = Callable[[np.ndarray, np.ndarray, np.ndarray], Callable[[np.ndarray], np.ndarray]]
"""``calibrate(decision, bag_codes, positives)`` -> a map from decision values to P(fail)."""


class CountRefits:
    """The :data:`Calibrate` of :func:`count_calibration`: the count calibration refitted on
    other charges, started from the fit on all of them (a refit converges in a few steps
    instead of two cold starts); :meth:`many` makes many such refits
    (:func:`qcllp.learn.count_batch.fit_count_calibrators`)."""

    def __init__(self, fitted: CountCalibrator):
        self.fitted = fitted

    def __call__(
        self, f: np.ndarray, c: np.ndarray, k: np.ndarray
    ) -> Callable[[np.ndarray], np.ndarray]:
        return self.many([(f, c, k)])[0]

    def many(self, tasks: list[tuple[np.ndarray, ...]]) -> list[Callable[[np.ndarray], np.ndarray]]:
        """The calibration map of each ``(decision, bag_codes, positives, ...)``
        (:data:`qcllp.learn.count_batch.Task`)."""
        return [fit.predict for fit in fit_count_calibrators(tasks, init=self.fitted)]


def count_calibration(
    decision: np.ndarray, codes: np.ndarray, positives: np.ndarray
) -> tuple[CountCalibrator, CountRefits]:
    """The count calibration of these out-of-fold decision values, and a :data:`Calibrate`
    that refits it on other charges starting from it (:class:`CountRefits`)."""
    with single_threaded():  # three parameters: BLAS threads would only wait
        fitted = CountCalibrator().fit(decision, codes, positives)
    return fitted, CountRefits(fitted)


def _candidates(p: np.ndarray, costs: LockoutCosts) -> np.ndarray:
    """The Bayes threshold and quantiles of the probabilities above it."""
    above = p[p >= costs.bayes_threshold]
    spread = np.quantile(above, np.linspace(0, 1, _N_CANDIDATES)) if len(above) else []
    return np.unique(np.r_[costs.bayes_threshold, spread])


def _check(decision: np.ndarray, codes: np.ndarray, positives: np.ndarray) -> None:
    if decision.shape != codes.shape:
        raise ValueError(f"{len(decision)} decision values but {len(codes)} bag codes")
    if len(codes) == 0:
        raise ValueError("cannot choose a lock-out threshold without sticks")
    if codes.min() < 0 or codes.max() >= len(positives):
        raise ValueError(f"bag codes must index the {len(positives)} charges' counts")


def _resample(
    rng: np.random.Generator, order: np.ndarray, sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Charges drawn with replacement: (row index, new bag code per row, drawn charges).

    ``order`` sorts the rows by charge and ``sizes`` counts them per charge (computed once for
    all replicates)."""
    n_bags = len(sizes)
    drawn = rng.integers(0, n_bags, n_bags)
    starts = np.cumsum(sizes) - sizes
    take = np.repeat(starts[drawn], sizes[drawn]) + _ramp(sizes[drawn])
    return order[take], np.repeat(np.arange(n_bags), sizes[drawn]), drawn


def _ramp(sizes: np.ndarray) -> np.ndarray:
    """0..s-1 for every s in sizes, concatenated."""
    return np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)


def lockout_rule(
    decision: np.ndarray,
    codes: np.ndarray,
    positives: np.ndarray,
    costs: LockoutCosts,
    calibrate: Calibrate,
    *,
    n_boot: int = N_BOOT,
    alpha: float = ALPHA,
    random_state: int | np.random.Generator | None = 0,
) -> ThresholdChoice:
    """The threshold with the largest bootstrap lower bound of the expected saving (module
    docstring), or none when that bound is not positive.

    ``decision``: out-of-fold decision values (the logit of the raw probabilities), ``codes``
    the charge of each stick (0..h-1), ``positives`` the failing sticks per charge among its
    rows, ``calibrate`` fits the map to probabilities (refitted per bootstrap replicate).
    """
    return _rule(decision, codes, positives, costs, calibrate, n_boot, alpha, random_state)[0]


@dataclass(frozen=True)
class _Resamples:
    """One rule's charges and the bootstrap resamples it draws: the calibrations it needs
    are one on all its charges and one per resample (:meth:`tasks`)."""

    f: np.ndarray
    codes: np.ndarray
    positives: np.ndarray
    draws: list[tuple[np.ndarray, np.ndarray, np.ndarray]]  # (rows, new codes, drawn charges)

    @classmethod
    def draw(
        cls,
        decision: np.ndarray,
        codes: np.ndarray,
        positives: np.ndarray,
        n_boot: int,
        rng: np.random.Generator,
    ) -> _Resamples:
        """Check the inputs and draw ``n_boot`` resamples of the charges from ``rng``."""
        f = np.asarray(decision, dtype=float)
        codes = np.asarray(codes, dtype=np.intp)
        positives = np.asarray(positives, dtype=float)
        _check(f, codes, positives)
        order = np.argsort(codes, kind="stable")
        sizes = np.bincount(codes, minlength=len(positives))
        return cls(f, codes, positives, [_resample(rng, order, sizes) for _ in range(n_boot)])

    def tasks(self) -> list[tuple[np.ndarray, ...]]:
        """``(decision, bag codes, positives)`` of every calibration the rule fits."""
        everything = (self.f, self.codes, self.positives)
        return [everything, *((self.f[r], c, self.positives[d]) for r, c, d in self.draws)]


def _calibrations(
    calibrate: Calibrate, resamples: list[_Resamples]
) -> list[list[Callable[[np.ndarray], np.ndarray]]]:
    """Every calibration map the rules on ``resamples`` need, per rule: by
    :meth:`CountRefits.many` when ``calibrate`` is one (BLAS held to one thread once for all
    of them), else one call each."""
    tasks = [task for r in resamples for task in r.tasks()]
    if isinstance(calibrate, CountRefits):
        maps = calibrate.many(tasks)
    else:
        maps = [calibrate(*task) for task in tasks]
    per_rule, start = [], 0
    for r in resamples:
        per_rule.append(maps[start : start + 1 + len(r.draws)])
        start += 1 + len(r.draws)
    return per_rule


def _rule(
    decision: np.ndarray,
    codes: np.ndarray,
    positives: np.ndarray,
    costs: LockoutCosts,
    calibrate: Calibrate,
    n_boot: int,
    alpha: float,
    random_state: int | np.random.Generator | None,
) -> tuple[ThresholdChoice, Callable[[np.ndarray], np.ndarray]]:
    """:func:`lockout_rule`, and the calibration map it fitted on all these charges."""
    rng = np.random.default_rng(random_state)
    resamples = _Resamples.draw(decision, codes, positives, n_boot, rng)
    return _choose(resamples, _calibrations(calibrate, [resamples])[0], costs, alpha)


def _choose(
    r: _Resamples,
    maps: list[Callable[[np.ndarray], np.ndarray]],
    costs: LockoutCosts,
    alpha: float,
) -> tuple[ThresholdChoice, Callable[[np.ndarray], np.ndarray]]:
    """The threshold with the largest bootstrap lower bound, from the calibration on all
    charges (``maps[0]``) and on each resample (``maps[1:]``)."""
    h = len(r.positives)
    calibrated = maps[0]
    p = calibrated(r.f)
    ts = _candidates(p, costs)
    point = 1000 * charge_savings(p, r.codes, h, ts, costs).sum(axis=1) / len(p)
    boot = np.empty((len(r.draws), len(ts)))
    for b, ((rows, new_codes, _), map_b) in enumerate(zip(r.draws, maps[1:], strict=True)):
        pb = map_b(r.f[rows])  # each replicate is vectorized over sticks and thresholds
        boot[b] = 1000 * charge_savings(pb, new_codes, h, ts, costs).sum(axis=1) / len(rows)
    bound = np.quantile(boot, alpha, axis=0)
    best = len(ts) - 1 - int(np.argmax(bound[::-1]))  # ties: the higher threshold
    if bound[best] <= 0:
        return declined_choice(costs), calibrated
    chosen = ThresholdChoice(
        threshold=float(ts[best]),
        saving_per_1000=float(point[best]),
        lockout_rate=float(np.mean(p >= ts[best])),
        bayes_threshold=costs.bayes_threshold,
        saving_bound_per_1000=float(bound[best]),
    )
    return chosen, calibrated


def held_out_saving(
    decision: np.ndarray,
    codes: np.ndarray,
    positives: np.ndarray,
    costs: LockoutCosts,
    calibrate: Calibrate,
    *,
    groups: int = GROUPS,
    n_boot: int = N_BOOT,
    alpha: float = ALPHA,
    level: float = LEVEL,
    random_state: int | None = 0,
    in_sample: ThresholdChoice | None = None,
    period_charges: float | None = None,
) -> SavingEstimate:
    """The saving :func:`lockout_rule` brings on charges it did not see, with a prediction
    interval for a week of ``period_charges`` charges (``None``: a period as long as the
    training one; module docstring, :mod:`qcllp.station.saving_estimate`). Counted in the
    units ``codes`` names: where inspected sticks are units of their own, a week holds more
    units than charges (:func:`qcllp.training.lockout.decide_lockout` converts).

    ``in_sample``: the rule's choice on all the charges. When it locks out but the rule
    refitted without each group declined every time, the held-out figure (0 [0, 0]) would say
    "saves nothing" of a model that locks out: the choice's own figure on the training charges
    is stated, labelled ``"in-sample"``, from its bootstrap's ``alpha`` quantile up to the
    point's mirror image, widened for the week by the calibration on all charges
    (model-based until a shadow trial measures its lock-outs).
    """
    f = np.asarray(decision, dtype=float)
    codes = np.asarray(codes, dtype=np.intp)
    positives = np.asarray(positives, dtype=float)
    _check(f, codes, positives)
    h = len(positives)
    rng = np.random.default_rng(random_state)
    held, noise, locking = _held_out(
        f, codes, positives, costs, calibrate, groups, n_boot, alpha, rng
    )
    rows = np.bincount(codes, minlength=h).astype(float)
    m = period_charges or h
    if not locking and in_sample is not None and not in_sample.declined:
        point, low = in_sample.saving_per_1000, in_sample.saving_bound_per_1000
        p = calibrate(f, codes, positives)(f)
        week = week_spread(p, codes, h, in_sample.threshold, costs, m)
        stated = SavingEstimate(point, low, 2 * point - low, level, basis="in-sample")
        return stated.widened(week, period_charges)
    estimate = 1000 * held.sum() / rows.sum()
    weights = rng.multinomial(h, np.full(h, 1.0 / h), size=max(n_boot, 200)).astype(float)
    half = float(norm.ppf(0.5 + level / 2)) * float(
        np.std(1000 * (weights @ held) / (weights @ rows))
    )
    stated = SavingEstimate(float(estimate), float(estimate - half), float(estimate + half), level)
    return stated.widened(period_spread(held, noise, rows, m), period_charges)


def _held_out(
    f: np.ndarray,
    codes: np.ndarray,
    positives: np.ndarray,
    costs: LockoutCosts,
    calibrate: Calibrate,
    groups: int,
    n_boot: int,
    alpha: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Per charge the expected saving of the rule refitted without its group and the variance
    of its locked sticks' outcomes (:func:`held_out_saving`), and how many groups' rules
    locked out."""
    h = len(positives)
    group = rng.permutation(h) % max(2, min(groups, h))
    trains, resamples = [], []
    for g in np.unique(group):  # every group's resamples drawn first, in the same order
        train = group[codes] != g
        kept = np.flatnonzero(group != g)
        local = np.searchsorted(kept, codes[train])  # training charges renumbered 0..len(kept)-1
        trains.append(train)
        resamples.append(_Resamples.draw(f[train], local, positives[kept], n_boot, rng))
    held, noise, locking = np.zeros(h), np.zeros(h), 0
    for train, r, maps in zip(trains, resamples, _calibrations(calibrate, resamples), strict=True):
        choice, calibrated = _choose(r, maps, costs, alpha)
        if choice.declined:
            continue
        locking += 1
        out = ~train
        p = calibrated(f[out])  # the other groups' calibration, as the rule fitted it
        saving, outcomes = locked_outcomes(p, codes[out], h, choice.threshold, costs)
        held += saving
        noise += outcomes
    return held, noise, locking


def expected_saving(
    choice: ThresholdChoice,
    decision: np.ndarray,
    codes: np.ndarray,
    positives: np.ndarray,
    costs: LockoutCosts,
    calibrate: Calibrate,
    **rule,  # noqa: ANN003 - held_out_saving's keywords
) -> SavingEstimate:
    """What a model whose rule made ``choice`` on these charges states it will save: exactly 0
    when the rule declined (it locks out nothing), else :func:`held_out_saving` (its
    ``in_sample`` case included)."""
    if choice.declined:
        return SavingEstimate.nothing(rule.get("level", LEVEL))
    return held_out_saving(decision, codes, positives, costs, calibrate, in_sample=choice, **rule)
