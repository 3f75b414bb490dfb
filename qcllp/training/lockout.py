"""The lock-out rule of a fitted model and the scorer's guard bounds, decided on its
charge-grouped out-of-fold probabilities.

**Recalibration.** The learners calibrate their probabilities on their own training charges,
where the latent labels were fitted: out of fold they are over-confident, and a threshold
chosen on them locks out good sticks. So a second calibration (a monotone sigmoid on the
logit) is fitted on the out-of-fold probabilities by the likelihood of the charges' failing
*counts* (Poisson-binomial, :class:`qcllp.learn.calibration.CountCalibrator`), which, unlike
matching the charges' mean shares, penalizes over-confidence; it is stored with the model, the
threshold is chosen on recalibrated probabilities and the scorer applies it.

**Inspected sticks** (:mod:`qcllp.training.inspected`). A charge's count then says how many of
its *uninspected* sticks failed once its inspected failures are taken off, and an inspected
stick's label is known. So the recalibration and the lock-out rule stand on these units: each
charge's uninspected sticks with its count reduced by its inspected failures (clipped to
0..uninspected sticks, should an inspection and final QC disagree), and each inspected stick
as a unit of its own whose count is its label (the Poisson-binomial likelihood of one stick
is its Bernoulli likelihood). The inspected lock-outs are the top of the ranking, where the
counts cannot tell a ranking of charges from one of sticks: their labels pull the
recalibration down there when the model claimed too much. The bootstrap and the held-out
saving resample and split these units; the scorer's guard bounds stay per charge. Without
inspected sticks the units are the charges and nothing changes.

**The inspected brake** (:func:`inspected_brake`). The inspected sticks above the chosen
threshold are a direct sample of the lock-outs' precision, out of fold: when at least
:data:`MIN_INSPECTED` of them are there and the one-sided upper bound of their precision (exact
Clopper-Pearson, :func:`qcllp.station.lockout_rule.precision_bounds`, at the rule's own
level of 90 %) is below the
station's break-even, the lock-outs lose money on the evidence, whatever the counts let the
likelihood believe, and the rule declines. So the threshold reaches down toward break-even
only as far as the inspected evidence allows; the brake never lowers a threshold. Ten
inspected sticks: below that the bound is too wide to be below a break-even of 0.7 unless
most of them were good (0 to 4 failing of 10), which is the case it is there for.

**The inspected threshold** (:func:`inspected_threshold`), the other direction. The counts
cannot show how sure the top of a ranking is, so on them alone the rule declines where the
top is in fact worth locking out; the inspected sticks there (audit samples at the top of the
last model's ranking, earlier lock-outs) are that evidence. Among the inspected sticks ranked
by their recalibrated out-of-fold probability, the rule takes the lowest probability ``t``
such that at least :data:`MIN_INSPECTED` of them lie at or above it and the one-sided 90 %
lower bound of their precision (exact Clopper-Pearson) reaches break-even -- when that is
below the threshold the counts chose, or the counts declined. Its figures are then the
inspected precision's, not the counts': ``lockout rate x (precision x fail_cost - (1 -
precision) x good_cost - inspection_cost)`` per 1,000 sticks, with the precision's two-sided
90 % bounds (the lock-out rate is the training sticks', taken as known). Choices, written
down:

* the *lowest* such ``t``: the precision above it is an average over the lock-outs, and the
  last ones are the weakest; the bound is of that average, so the lock-outs as a whole
  break even at worst (at the 90 % level), not each one;
* the inspected sticks were picked by an *earlier* model (its audit band, its lock-outs), so
  they are a sample of this model's lock-outs only where the two rankings agree, and trying
  every candidate ``t`` is a multiple test: the bound is optimistic. The retraining daemon
  therefore never puts such a model straight on the line: its threshold moved, so it goes
  on a shadow trial (:mod:`qcllp.retraining.shadow_trial`), where its *own* would-be
  lock-outs on fresh sticks are audited and judged by the same bound before it acts;
* the counts still have their say: a charge with ``c`` failing sticks has at most ``min(k,
  c)`` failing among ``k`` locked out of it, so ``t`` must also leave the lock-outs a count
  ceiling of precision (:func:`qcllp.station.precision.count_precision_ceiling`) at or above
  break-even. That stops a new model that ranks the inspected sticks low in its own ranking
  from claiming their precision for a lock-out of half the plant;
* **coverage**: ``t`` may reach only as far down the ranking as the inspections sampled it.
  Measured on the running line (``benchmarks/bench_line.py``, docs/benchmarks.md,
  "Thresholds from inspections, tried in shadow"), 14 of 19 trial-weeks of models without
  this limit would have lost money on fresh sticks: the lowest ``t`` took in 4-5 % of the
  sticks where the audits had sampled the top 2 % of an earlier ranking, and the sticks
  below were never inspected. So the inspected share of the sticks at or above ``t``
  (training sticks, inspected or not) must be at least :data:`COVERAGE` (half) of that share
  above the median inspected stick (or the tenth, with fewer than twenty): at most about
  half of the would-be lock-outs lie where the inspections sampled more thinly than where
  most of them are. The median, not the highest share at any ``t``: at the very top a
  handful of sticks decide the share (ten inspected of the twelve highest give 0.83, and a
  model trained on the inspected labels ranks them there), and half of such a share would
  stop every threshold below the top dozen sticks. Chosen
  over a bound on the *marginal* precision (the lowest inspected sticks above ``t``) because
  the failure was not that the weakest inspected sticks fail, but that most lock-outs were
  never near an inspected one. Scale-free: below an active model's lock-outs (all
  inspected) and its audit band (a quarter inspected) it lets the lock-out rate grow at
  most about threefold per retraining. Measured since on six 12-week cases of four plants
  (docs/benchmarks.md, "Trials that run until decided"), with a first version that took the
  highest share as the reference: it did not bind on the case above (the same threshold,
  23/25), and 23 of 47 trial-weeks of such models would still have lost, 21 of 32 on the two
  plants whose defect types share stations, 2 of 15 on the others; the trial stays the
  guard;
* the threshold only moves down toward break-even as the inspected evidence allows: with
  fewer than ten inspected sticks above any ``t``, or a precision whose bound stays below
  break-even, nothing changes.

**Audits that do not pay** (:func:`audit_evidence`). An audit sample pays for its look when
the stick fails with a probability above ``inspection_cost / fail_cost``; at the last
station of the example plant that is 0.9 (a look costs 22.50, a failing stick saves 25
there), and on the running line its samples, drawn only where the model said p >= 0.9,
failed at 77 % (30 of 39): every one lost a little, because the top of the ranking is
over-confident exactly where the counts cannot check it. The inspected sticks at or above
the audit band's floor say so directly: with at least ten of them and the one-sided 90 %
upper bound of their precision below ``inspection_cost / fail_cost``, the model records
``audits_declined`` and the scorer draws no audit samples from its band (those of a shadow
trial, the evidence a trial needs, stay). The same level and minimum as the brake, for the
same reasons; the floor is the scorer's, so the evidence is of the sticks it would sample.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from qcllp.learn.calibration import CountCalibrator
from qcllp.plant.config import PlantConfig
from qcllp.station.audit_band import audit_band_floor
from qcllp.station.ceiling_bound import ceiling_free_saving, reaching_ceiling_one
from qcllp.station.guard_bounds import lockout_excess_bound, lockout_rate_bound
from qcllp.station.lockout_rule import (
    LEVEL,
    LockoutCosts,
    SavingEstimate,
    ThresholdChoice,
    declined_choice,
    expected_saving,
    lockout_rule,
)
from qcllp.station.precision import (
    count_precision_ceiling,
    precision_bounds,
    precision_lower_bounds,
)
from qcllp.station.saving_estimate import week_spread
from qcllp.training.evaluate import Evaluation, score_probabilities
from qcllp.training.labeled import LabeledData
from qcllp.training.out_of_fold import OutOfFold, known_failing
from qcllp.training.plan import TrainingPlan

__all__ = [
    "INSPECTED",
    "LockoutDecision",
    "decide_lockout",
    "audit_evidence",
    "inspected_brake",
    "inspected_saving",
    "inspected_threshold",
    "station_costs",
]


def station_costs(config: PlantConfig, station: str) -> LockoutCosts:
    """The lock-out costs of a station from the plant config."""
    st = config.station(station)
    return LockoutCosts(st.fail_cost, st.good_cost, st.inspection_cost)


@dataclass(frozen=True)
class LockoutDecision:
    """Out-of-fold evidence of a model and the lock-out rule chosen on it."""

    recalibration: CountCalibrator
    choice: ThresholdChoice
    costs: LockoutCosts
    evaluation: Evaluation
    raw_probability: np.ndarray  # out of fold, before the recalibration
    saving: SavingEstimate  # of the rule, on charges it did not see
    lockout_rate_bound: float  # the most a healthy model locks out (scorer's guard)
    lockout_excess_bound: float  # the most it locks out beyond that in a run (the same)
    count_loglik: float  # per charge: log P(its failing count | recalibrated probabilities)


MIN_INSPECTED = 10  # inspected sticks above the threshold before the brake may act
BRAKE_LEVEL = 0.90  # the one-sided level of the upper bound (the rule's level)


def inspected_brake(
    choice: ThresholdChoice, p: np.ndarray, failing: np.ndarray | None, costs: LockoutCosts
) -> ThresholdChoice:
    """``choice``, or a declined one when the inspected sticks at or above its threshold
    show its lock-outs below break-even precision (module docstring). ``p``: recalibrated
    out-of-fold probabilities; ``failing``: 1/0 per inspected row, NaN elsewhere."""
    if failing is None or not choice.threshold <= 1.0:
        return choice
    above = ~np.isnan(failing) & (p >= choice.threshold)
    m = int(above.sum())
    f = int(failing[above].sum())
    if m < MIN_INSPECTED:
        return choice
    upper = precision_bounds(f, m, BRAKE_LEVEL)[1]
    return choice if upper >= costs.bayes_threshold else declined_choice(costs)


def audit_evidence(
    p: np.ndarray, failing: np.ndarray | None, costs: LockoutCosts, audit_from: float | None
) -> dict[str, float]:
    """Metrics of whether audit samples at the top of this model's ranking pay for their
    look (module docstring, "Audits that do not pay"): ``audit_inspected`` /
    ``audit_inspected_failing`` over the inspected sticks at or above the audit band's floor,
    and ``audits_declined`` 1.0 when at least :data:`MIN_INSPECTED` are there and the
    one-sided 90 % upper bound of their precision is below ``costs.audit_pays_from``. The
    floor is the scorer's (:func:`qcllp.scoring.audits.audit_floor`). ``p``: recalibrated
    out-of-fold probabilities; ``failing``: 1/0 per inspected row, NaN elsewhere."""
    if failing is None:
        return {}
    floor = audit_band_floor(costs.bayes_threshold, costs.audit_pays_from, audit_from)
    seen = ~np.isnan(failing) & (p >= floor)
    m, f = int(seen.sum()), int(failing[seen].sum())
    if m < MIN_INSPECTED:
        return {}
    out = {"audit_inspected": float(m), "audit_inspected_failing": float(f)}
    if precision_bounds(f, m, BRAKE_LEVEL)[1] < costs.audit_pays_from:
        out["audits_declined"] = 1.0
    return out


INSPECTED = "inspected"  # ThresholdChoice.basis of a threshold from inspected precision


def inspected_threshold(
    choice: ThresholdChoice,
    p: np.ndarray,
    failing: np.ndarray | None,
    costs: LockoutCosts,
    units: tuple[np.ndarray, np.ndarray],
) -> ThresholdChoice:
    """``choice``, or a lower threshold that the inspected sticks' precision supports and the
    counts do not rule out (module docstring, "The inspected threshold"). ``p``: recalibrated
    out-of-fold probabilities; ``failing``: 1/0 per inspected row, NaN elsewhere; ``units``:
    each row's unit and the failing count per unit
    (:func:`qcllp.training.out_of_fold.calibration_units`)."""
    seen = np.zeros(len(p), dtype=bool) if failing is None else ~np.isnan(failing)
    if not seen.any():
        return choice
    order = np.argsort(-p[seen], kind="stable")
    q, y = p[seen][order], failing[seen][order]
    m = np.arange(1, len(q) + 1)
    f = np.cumsum(y)
    last_of_tie = np.r_[q[1:] < q[:-1], True]  # a threshold takes every stick tied at it
    low = precision_lower_bounds(f, m, BRAKE_LEVEL)
    be = costs.bayes_threshold
    enough = last_of_tie & (m >= MIN_INSPECTED)
    candidates = np.flatnonzero(enough & (low >= be) & _covered(q, m, p))
    k = _lowest_within_ceiling(candidates, q, p, units, be)
    if k is None or not q[k] < choice.threshold:
        return choice
    t = float(q[k])
    rate = float(np.mean(p >= t))
    n, bad = int(m[k]), int(f[k])
    return ThresholdChoice(
        threshold=t,
        saving_per_1000=_per_1000(rate, bad / n, costs),
        lockout_rate=rate,
        bayes_threshold=costs.bayes_threshold,
        saving_bound_per_1000=_per_1000(rate, float(low[k]), costs),
        basis=INSPECTED,
        inspected=n,
        inspected_failing=bad,
    )


COVERAGE = 0.5  # inspected share above t, as a part of the median's (module docstring)


def _covered(q: np.ndarray, m: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per inspected stick (``q`` sorted descending, ``m`` inspected at or above each): does
    the inspected share of all sticks at or above its probability, ``m / N``, reach
    :data:`COVERAGE` of that share at the median inspected stick (at least the
    :data:`MIN_INSPECTED`-th)? (Module docstring, "coverage".)"""
    at_or_above = len(p) - np.searchsorted(np.sort(p), q, side="left")
    share = m / np.maximum(at_or_above, 1)
    reference = min(len(q), max(MIN_INSPECTED, (len(q) + 1) // 2)) - 1
    return share >= COVERAGE * share[reference]


_CEILING_CHUNK = 256  # thresholds per count-ceiling pass: memory units x 256, not x inspected


def _lowest_within_ceiling(
    candidates: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    units: tuple[np.ndarray, np.ndarray],
    be: float,
) -> int | None:
    """The candidate (index into ``q``, sorted descending) of lowest threshold whose count
    ceiling of precision reaches ``be``; ``None`` if none does. Checked from the lowest up in
    chunks, so a station with thousands of inspected sticks never builds a units x inspected
    table."""
    for end in range(len(candidates), 0, -_CEILING_CHUNK):
        chunk = candidates[max(0, end - _CEILING_CHUNK) : end]
        fits = np.flatnonzero(count_precision_ceiling(p, *units, q[chunk]) >= be)
        if len(fits):
            return int(chunk[fits[-1]])
    return None


def inspected_saving(
    choice: ThresholdChoice,
    costs: LockoutCosts,
    level: float = LEVEL,
    week: tuple[float, int | None] = (0.0, None),
) -> SavingEstimate:
    """The saving per 1,000 sticks a threshold from inspected precision states: at the
    precision ``inspected_failing / inspected`` and its two-sided ``level`` Clopper-Pearson
    bounds, at the choice's lock-out rate (module docstring); ``week``: the spread of a week's
    own saving at that precision and its charges
    (:func:`qcllp.station.saving_estimate.week_spread`), added to the interval."""
    lo, hi = precision_bounds(choice.inspected_failing, choice.inspected, 0.5 + level / 2)
    rate = choice.lockout_rate
    point = _per_1000(rate, choice.inspected_failing / choice.inspected, costs)
    low, high = _per_1000(rate, lo, costs), _per_1000(rate, hi, costs)
    return SavingEstimate(point, low, high, level, basis="inspected").widened(*week)


def _per_1000(rate: float, precision: float, costs: LockoutCosts) -> float:
    """Saving per 1,000 sticks of locking out ``rate`` of them at ``precision``."""
    return 1000 * rate * costs.lockout_value(precision)


def _stated_saving(
    choice: ThresholdChoice,
    oof: OutOfFold,
    costs: LockoutCosts,
    folds: int,
    period_charges: int | None,
    rule: dict,
) -> SavingEstimate:
    """The saving a model states for ``choice``, with its interval for a week of
    ``period_charges`` charges: at the inspected precision (:func:`inspected_saving`), or on
    held-out charges (:func:`qcllp.station.lockout_rule.expected_saving`) with the upper end
    reaching a count calibration whose ceiling is 1 where the counts allow it
    (:mod:`qcllp.station.ceiling_bound`)."""
    p, codes, positives, charges = oof.probability, oof.codes, oof.positives, oof.charges
    n_charges = int(charges.max()) + 1
    if choice.basis == INSPECTED:
        m = period_charges or n_charges
        precision = choice.inspected_failing / choice.inspected
        week = week_spread(p, charges, n_charges, choice.threshold, costs, m, precision)
        return inspected_saving(choice, costs, week=(week, period_charges))
    # the held-out figure goes by units (a charge's uninspected sticks, each inspected stick):
    # a week holds as many more units than charges as the training charges did
    units = None if period_charges is None else period_charges * len(positives) / n_charges
    saving = expected_saving(
        choice,
        oof.decision,
        codes,
        positives,
        costs,
        oof.calibrate,
        groups=folds,
        period_charges=units,
        **rule,
    )
    if choice.declined:
        return saving
    saving = replace(saving, period_charges=period_charges)  # counted in charges, not units
    locked = p >= choice.threshold
    free = ceiling_free_saving(oof.decision, codes, positives, oof.recalibration, locked, costs)
    return reaching_ceiling_one(saving, free)


def decide_lockout(
    plan: TrainingPlan,
    data: LabeledData,
    oof: OutOfFold,
    costs: LockoutCosts,
    folds: int,
    period_charges: int | None = None,
) -> LockoutDecision:
    """The lock-out threshold on the recalibrated out-of-fold probabilities.

    The threshold is the one with the best bootstrap lower bound of the saving, or none
    (:func:`qcllp.station.lockout_rule.lockout_rule`), the saving it brings is estimated on
    held-out charges with an interval for a week of ``period_charges`` charges
    (:func:`qcllp.station.lockout_rule.expected_saving`; exactly 0 when the rule declined: the
    model locks out nothing), and the evaluation is of the recalibrated probabilities at
    that threshold. The inspected sticks can lower the threshold, or set one where the counts
    declined (:func:`inspected_threshold`; its figures are then theirs,
    :func:`inspected_saving`), and those above it can still make it decline
    (:func:`inspected_brake`).
    """
    decision, p, codes, positives = oof.decision, oof.probability, oof.codes, oof.positives
    rule = {"n_boot": plan.bootstrap, "random_state": plan.seed}
    choice = lockout_rule(decision, codes, positives, costs, oof.calibrate, **rule)
    known = known_failing(data)
    lowered = inspected_threshold(choice, p, known, costs, (codes, positives))
    choice = inspected_brake(lowered, p, known, costs)
    saving = _stated_saving(choice, oof, costs, folds, period_charges, rule)
    evaluation = score_probabilities(p, data.bags, data.failing_shares, threshold=choice.threshold)
    charges = oof.charges
    bound = lockout_rate_bound(p, charges, choice.threshold, random_state=plan.seed)
    excess = lockout_excess_bound(p, charges, choice.threshold, bound, random_state=plan.seed)
    return LockoutDecision(
        oof.recalibration,
        choice,
        costs,
        evaluation,
        oof.raw,
        saving,
        bound,
        excess,
        oof.count_loglik,
    )
