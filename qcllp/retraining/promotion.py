"""Champion / challenger: is a freshly trained candidate better than the station's active
model on charges neither was trained on? (The retraining daemon's promotion gate.)

**The holdout.** The newest labeled charges that came after both models' training windows
(``trained_until``), at most ``retrainer.holdout_charges`` of them; the daemon trains its
candidates only up to the start of that window, so the window is fresh for the candidate,
and a champion trained on newer charges (by hand, with everything) shrinks it. With fewer
than ``retrainer.min_holdout_charges`` charges nothing is promoted: there is no fair test.

**The two figures**, both from the charges' final-QC counts alone, both computed the same way
for both models:

* *bag-level error*, Yu et al. (2013) eq. (23), ``mean_k |p~_k - p_k|`` over the holdout's
  charges, with ``p~_k`` the model's **expected** share of failing sticks (the mean of its
  calibrated probabilities) rather than the share of sticks labeled failing at ``p >= 0.5``.
  Chosen deliberately: defects are rare (a few per cent of a charge), so almost no stick
  reaches 0.5, the label shares of any two models are all zero and the label version of eq.
  (23) ties at the mean defect share, unable to tell a good model from a useless one. The
  label version is recorded too (``label_bag_error``).
* *saving per 1,000 sticks* of the model's lock-out decisions on the holdout sticks, valued
  with the holdout's counts: the model's probabilities are recalibrated to the holdout
  charges' failing counts (:class:`qcllp.learn.calibration.CountCalibrator`, the likelihood of
  the counts, as ``qcllp train`` calibrates), and each stick the model locks out (``p >=``
  its threshold, what the scorer would do) counts ``q * fail_cost - (1 - q) * good_cost -
  inspection_cost`` (its look at the bay) with its recalibrated ``q``. A model that locks out
  nothing saves 0; one whose lock-outs the counts do not support loses.

**The rule** (the issue's): a candidate replaces the champion only if its bag-level error is
lower by the configured relative margin *and* its saving is not lower. The first model of a
station must beat "lock out nothing" and "know nothing": its saving must not be negative
(locking out nothing saves 0) and its bag-level error must be lower, by the same margin,
than that of predicting every charge at the training charges' mean share: a model that only
ties the mean share ranks nothing (on the simulated plant such first models, equal to the
baseline to four digits, were promoted by floating-point noise alone).

**A threshold from inspections** (:func:`qcllp.training.lockout.inspected_threshold`): when
a candidate's threshold rests on the precision of inspected sticks rather than on the counts,
and shadow trials are on, its holdout saving -- a figure of the counts-recalibrated
probabilities, the very figure the inspections contradict -- does not decide: a first model
needs only the bag-error margin over the mean share, a challenger a bag error no higher than
the active model's, and it goes on a shadow trial, where its own would-be lock-outs are
inspected before it acts (:func:`measured_threshold` says which evidence, in the reason).

**Shadow trials** (``retrainer.shadow_trials``, default on): a candidate that passes goes on a
shadow trial instead of active (:mod:`qcllp.retraining.shadow_trial` judges it there on
inspected lock-outs) when the station has no active model, or when its threshold differs
from the active model's: its lock-outs would scrap steel on a rule no inspection has checked.
A candidate that locks out nothing (threshold above 1) goes straight to active: there is
nothing to try, and one with the active model's threshold locks out on a rule already on the
line. The event (``promotion``, outcome ``shadow``) says which. **A running trial is decided
first**: while another model's trial is undecided and has counted fewer than
``retrainer.shadow_max_charges`` charges, a candidate that would go on trial is kept (not
promoted; the reason names the trial). Before this rule each week's candidate replaced the
last one's trial: on the simulated line (shared plant, seed 0, 12 weeks) none of rolling's
five trials reached the 20 inspected would-be lock-outs a verdict needs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Connection

from qcllp.features import StationFeatures, station_features
from qcllp.learn.calibration import CountCalibrator
from qcllp.plant.config import PlantConfig
from qcllp.retraining.charge_windows import recent_charges
from qcllp.retraining.shadow_trial import longest_trial, trial_figures
from qcllp.station.artifacts import ArtifactError
from qcllp.station.final_qc import sticks_qc_counted
from qcllp.station.lockout_rule import LockoutCosts
from qcllp.station.model import StationModel, logit
from qcllp.station.registry import (
    LoadedModel,
    RegistryError,
    active_model,
    get_model,
    load_model,
    promote,
    promote_shadow,
    shadow_model,
)
from qcllp.store import Store, stored_utc
from qcllp.store.events import insert_event
from qcllp.training.evaluate import score_probabilities
from qcllp.training.train import station_costs

__all__ = [
    "HoldoutFigures",
    "PromotionDecision",
    "decide_promotion",
    "holdout_figures",
    "judge",
    "labeled_counts",
    "running_trial",
    "shadow_reason",
    "window_data",
]


@dataclass(frozen=True)
class HoldoutFigures:
    """One model on the holdout charges (module docstring)."""

    model_id: int | None
    n_charges: int
    n_sticks: int
    bag_error: float
    label_bag_error: float
    saving_per_1000: float
    lockout_rate: float


@dataclass(frozen=True)
class PromotionDecision:
    """What the gate decided and why; ``promoted``: the candidate passed and is now active,
    or on a shadow trial when ``shadow`` (module docstring)."""

    station: str
    candidate_id: int
    promoted: bool
    reason: str
    candidate: HoldoutFigures | None = None
    champion: HoldoutFigures | None = None
    baseline_bag_error: float | None = None
    holdout: list[str] = field(default_factory=list)
    shadow: bool = False

    def detail(self) -> dict[str, Any]:
        return {
            "candidate": None if self.candidate is None else asdict(self.candidate),
            "champion": None if self.champion is None else asdict(self.champion),
            "baseline_bag_error": self.baseline_bag_error,
            "holdout_charges": len(self.holdout),
            "holdout_first": self.holdout[0] if self.holdout else None,
            "holdout_last": self.holdout[-1] if self.holdout else None,
        }


def holdout_figures(
    model: StationModel,
    features: StationFeatures,
    shares: pd.Series,
    costs: LockoutCosts,
    *,
    model_id: int | None = None,
) -> HoldoutFigures:
    """Bag-level error and count-valued saving of ``model`` on these charges (module
    docstring); ``shares``: each charge's failing share from final QC."""
    X, bags = features.X, features.bags.to_numpy()
    p = model.failure_probability(X)
    evaluation = score_probabilities(p, bags, shares)
    codes, uniques = pd.factorize(bags)
    rows = np.bincount(codes)
    positives = shares.reindex(uniques).to_numpy(float) * rows
    f = logit(p)
    q = CountCalibrator().fit(f, codes, positives).predict(f)
    locked = p >= model.threshold
    gain = costs.lockout_value(q)
    return HoldoutFigures(
        model_id=model_id,
        n_charges=len(uniques),
        n_sticks=len(p),
        bag_error=float(evaluation.metrics["calibration_error"]),
        label_bag_error=float(evaluation.metrics["bag_error"]),
        saving_per_1000=float(1000 * gain[locked].sum() / len(p)),
        lockout_rate=float(locked.mean()),
    )


def judge(
    candidate: HoldoutFigures,
    champion: HoldoutFigures | None,
    *,
    margin: float,
    baseline_bag_error: float,
    measured: str | None = None,
) -> tuple[bool, str]:
    """The promotion rule (module docstring): ``(promote, reason)``. ``measured`` says what
    inspected evidence the candidate's threshold rests on, when it does and it will be tried
    in shadow: its holdout saving, a figure of the counts-recalibrated model that the
    inspections contradict, then does not decide, and against an active model its bag error
    need only be no higher."""
    if champion is None:
        return _judge_first(candidate, margin, baseline_bag_error, measured)
    c, ch = candidate, champion
    if measured:
        if c.bag_error > ch.bag_error:
            return False, f"bag error {c.bag_error:.4f} above the active model's {ch.bag_error:.4f}"
        return True, (
            f"{measured}; bag error {c.bag_error:.4f} vs {ch.bag_error:.4f}, holdout saving "
            f"(model-based) {c.saving_per_1000:+.0f} vs {ch.saving_per_1000:+.0f} per 1,000 sticks"
        )
    needed = ch.bag_error * (1.0 - margin)
    if not c.bag_error < needed:
        return False, (
            f"bag error {c.bag_error:.4f} not {margin:.0%} below the active model's "
            f"{ch.bag_error:.4f} (needs < {needed:.4f})"
        )
    if c.saving_per_1000 < ch.saving_per_1000:
        return False, (
            f"saving {c.saving_per_1000:+.0f} per 1,000 sticks is lower than the active "
            f"model's {ch.saving_per_1000:+.0f}"
        )
    return True, (
        f"bag error {c.bag_error:.4f} vs {ch.bag_error:.4f}, saving "
        f"{c.saving_per_1000:+.0f} vs {ch.saving_per_1000:+.0f} per 1,000 sticks"
    )


def _judge_first(
    c: HoldoutFigures, margin: float, baseline_bag_error: float, measured: str | None
) -> tuple[bool, str]:
    """The rule for a station's first model (:func:`judge`)."""
    if c.saving_per_1000 < 0 and not measured:
        return False, (
            f"first model loses money on the holdout: {c.saving_per_1000:+.0f} per 1,000 "
            "sticks against 0 for locking out nothing"
        )
    floor = baseline_bag_error * (1.0 - margin)
    if not c.bag_error < floor:
        return False, (
            f"first model's bag error {c.bag_error:.4f} is not {margin:.0%} below "
            f"{baseline_bag_error:.4f} of predicting the mean share for every charge "
            f"(needs < {floor:.4f})"
        )
    return True, (
        f"first model: bag error {c.bag_error:.4f} (mean-share baseline "
        f"{baseline_bag_error:.4f}), saving {c.saving_per_1000:+.0f} per 1,000 sticks"
        + (f" (model-based); {measured}" if measured else "")
    )


def measured_threshold(model: StationModel) -> str | None:
    """What a model's threshold rests on when it is inspected precision (metrics
    ``threshold_inspected`` and ``threshold_inspected_failing``,
    :func:`qcllp.training.lockout.inspected_threshold`), in words; else ``None``."""
    n = model.metrics.get("threshold_inspected")
    if not n or not model.threshold <= 1.0:
        return None
    f = int(model.metrics.get("threshold_inspected_failing", 0))
    return (
        f"its threshold {model.threshold:.3f} rests on inspected precision {f}/{int(n)} "
        f"(break-even {model.metrics.get('bayes_threshold', float('nan')):.3f})"
    )


def decide_promotion(
    store: Store, config: PlantConfig, station: str, candidate_id: int
) -> PromotionDecision:
    """Compare candidate and active model on the holdout, promote the candidate if it passes
    (active, or on a shadow trial: module docstring), and record the decision (event
    ``promotion``): a promotion and its event are one transaction, so a crash never leaves one
    without the other."""
    decision = _evaluate(store, config, station, candidate_id)

    def record(conn: Connection, made: PromotionDecision) -> None:
        outcome = "kept" if not made.promoted else "shadow" if made.shadow else "promoted"
        insert_event(
            conn,
            "promotion",
            outcome,
            made.reason,
            station=station,
            model_id=candidate_id,
            detail=made.detail(),
        )

    if decision.promoted:
        how = promote_shadow if decision.shadow else promote
        try:
            how(store, candidate_id, also=lambda conn: record(conn, decision))
            return decision
        except (ArtifactError, RegistryError) as exc:
            decision = replace(
                decision,
                promoted=False,
                shadow=False,
                reason=f"candidate cannot be promoted: {exc}",
            )
    with store.writing() as conn:
        record(conn, decision)
    return decision


def _evaluate(
    store: Store, config: PlantConfig, station: str, candidate_id: int
) -> PromotionDecision:
    """The gate's decision, nothing written: the holdout, both models' figures, the rule, and
    whether a candidate that passes goes on a shadow trial."""
    settings = config.retrainer
    record = get_model(store, candidate_id)
    if record["station"] != station:
        raise RegistryError(f"model {candidate_id} is a model of {record['station']!r}")
    try:
        candidate = load_model(store, candidate_id)
    except (ArtifactError, RegistryError) as exc:
        return PromotionDecision(station, candidate_id, False, f"candidate unusable: {exc}")
    champion, champion_note = _champion(store, station, candidate_id)
    ends = [record["trained_until"]]
    if champion is not None:
        ends.append(champion.record["trained_until"])
    after = max((e for e in ends if e is not None), default=None, key=stored_utc)
    window = recent_charges(store, labeled=True, after=after, limit=settings.holdout_charges).index
    counts = labeled_counts(store, config, window)
    holdout = [str(c) for c in counts.index]
    if len(holdout) < settings.min_holdout_charges:
        return PromotionDecision(
            station,
            candidate_id,
            False,
            f"only {len(holdout)} labeled charges that neither model was trained on "
            f"(needs {settings.min_holdout_charges}); the active model stays" + champion_note,
            holdout=holdout,
        )
    features, shares = window_data(store, config, station, counts)
    costs = station_costs(config, station)
    cand = holdout_figures(candidate.model, features, shares, costs, model_id=candidate_id)
    champ = (
        None
        if champion is None
        else holdout_figures(champion.model, features, shares, costs, model_id=champion.id)
    )
    baseline = _baseline_bag_error(store, config, candidate.model, shares)
    measured = measured_threshold(candidate.model) if settings.shadow_trials else None
    promoted, reason = judge(
        cand,
        champ,
        margin=settings.promotion_margin,
        baseline_bag_error=baseline,
        measured=measured,
    )
    trial = promoted and settings.shadow_trials
    why_shadow = shadow_reason(candidate.model, None if champion is None else champion.model)
    shadow = bool(trial and why_shadow)
    running = running_trial(store, config, station, candidate_id) if shadow else None
    if running is not None:
        promoted = shadow = False
        reason += champion_note + f"; {why_shadow}, but {running}"
    else:
        reason += champion_note + (f"; {why_shadow}: on a shadow trial" if shadow else "")
    return PromotionDecision(
        station, candidate_id, promoted, reason, cand, champ, baseline, holdout, shadow
    )


def _champion(store: Store, station: str, candidate_id: int) -> tuple[LoadedModel | None, str]:
    """The station's active model the candidate is judged against, and a note when it cannot
    be loaded (then it is judged as if there were none)."""
    record = active_model(store, station)
    if record is None or record["id"] == candidate_id:
        return None, ""
    try:
        return load_model(store, record["id"]), ""
    except (ArtifactError, RegistryError) as exc:
        return None, f" (active model {record['id']} unusable: {exc})"


def running_trial(store: Store, config: PlantConfig, station: str, candidate_id: int) -> str | None:
    """Why a candidate may not take the station's shadow trial now (another model's trial
    runs and may still be decided: module docstring), or ``None``."""
    record = shadow_model(store, station)
    if record is None or record["id"] == candidate_id:
        return None
    figures = trial_figures(store, config, station, record)
    settings = config.retrainer
    limit = longest_trial(settings)
    if figures.charges >= limit:
        return None
    return (
        f"model {record['id']}'s shadow trial is decided first ({figures.charges} of at most "
        f"{limit} charges counted, {figures.inspected} of {settings.shadow_min_audits} "
        "would-be lock-outs inspected)"
    )


def shadow_reason(candidate: StationModel, champion: StationModel | None) -> str | None:
    """Why a candidate that passed the gate goes on a shadow trial rather than active, or
    ``None`` (module docstring)."""
    if not candidate.threshold <= 1.0:
        return None  # it locks out nothing: nothing to try
    if champion is None:
        return "the station's first model that locks out"
    if champion.threshold != candidate.threshold:
        return (
            f"its threshold {candidate.threshold:.3f} differs from the active model's "
            f"{champion.threshold:.3f}"
        )
    return None


def labeled_counts(store: Store, config: PlantConfig, charges: pd.Index) -> pd.DataFrame:
    """Final-QC counts of these charges (those with complete, unconflicted counts)."""
    return store.read_defect_counts(list(config.defect_types)).reindex(charges).dropna()


def window_data(
    store: Store, config: PlantConfig, station: str, counts: pd.DataFrame
) -> tuple[StationFeatures, pd.Series]:
    """The station features of a window of labeled charges and each charge's failing share
    (final QC), for the charges with readings at the station: what the promotion gate and the
    drift watch judge a model on. A charge's rows are the sticks QC counted
    (:mod:`qcllp.station.final_qc`)."""
    features = station_features(store, config, station, charge_ids=list(counts.index))
    features = sticks_qc_counted(store, config, features, counts["n_sticks"])
    shares = counts[list(config.defect_types)].sum(axis=1) / counts["n_sticks"]
    return features, shares.reindex(pd.unique(features.bags.to_numpy()))


def _baseline_bag_error(
    store: Store, config: PlantConfig, model: StationModel, shares: pd.Series
) -> float:
    """Bag-level error of predicting every holdout charge at the mean failing share of the
    charges the model was trained on (sticks weighted alike)."""
    trained = model.per_charge
    if trained is not None and len(trained) and "actual_share" in trained:
        sizes = trained["n_sticks"].to_numpy(float)
        mean = float(np.average(trained["actual_share"].to_numpy(float), weights=sizes))
    else:  # an artifact without its per-charge table: the holdout's own mean (lenient)
        mean = float(shares.mean())
    return float(np.mean(np.abs(shares.to_numpy(float) - mean)))
