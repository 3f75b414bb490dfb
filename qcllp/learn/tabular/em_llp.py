"""EM for label proportions: label every bag to its count by the current ranking, refit, repeat.

The unknown instance labels are latent; the bags' shares constrain them. Starting from a
ranking of the rows, the learner alternates

* **E-step**: instance labels consistent with every bag's share, from the current scores.
  *hard*: the top ``round(p_b |B_b|)`` rows of bag ``b`` by score are positive, the rest
  negative (the label step of alter-pSVM with the proportions enforced exactly,
  :meth:`qcllp.learn.psvm.label_step.BagLabeler.random_labels`, all bags at once). *soft*: the
  posterior ``pi_i = sigmoid(s_i + c_b)`` with one logit shift ``c_b`` per bag chosen so that
  the bag's mean posterior equals its share (a vectorised bisection over all bags at once);
* **M-step**: refit the base classifier on those labels (soft: every row twice, as a positive
  with weight ``pi_i`` and as a negative with weight ``1 - pi_i``, which is the cross-entropy
  against the soft label),

until the hard labels stop changing (soft: no posterior moves by more than ``tol``) or for
``max_iter`` rounds. The base is scikit-learn's ``HistGradientBoostingClassifier`` by default
(tabular station features, interactions), or a standardized ``LogisticRegression``, or any
classifier with ``fit(X, y, sample_weight)`` and ``predict_proba``.

Where it comes from. EM over the latent labels of a discriminative model under the bags'
count constraints is the approach of Sun, Sheldon & O'Connor (2017, "A probabilistic approach
for learning with label proportions applied to the US presidential election", ICDM), whose
E-step computes each instance's exact posterior given its bag's count (a Poisson-binomial
conditional); Hernández-González, Inza & Lozano (2013, "Learning Bayesian network classifiers
from label proportions", Pattern Recognition) run EM with the labels completed consistently
with the bags' counts. The hard variant is classification EM; it is also alter-pSVM's
alternation (Yu et al. 2013, Alg. 1) with a probabilistic base in place of the SVM and the
proportion weight taken to infinity. Choices of ours:

* the soft E-step uses the per-bag logit shift, not the exact count-conditional posterior:
  the shift matches the bag's *expected* count (exponential tilting of the model's
  probabilities), costs a few vectorised passes, and keeps the base's ranking within a bag;
* the start (``init``): ``"share"`` fits the base once on soft labels equal to each row's
  bag share (the rows of a 30 % bag count 0.3 positive), so the first ranking is the base's
  estimate of a row's *bag* share from its features; ``"invcal"`` starts from InvCal's linear
  scores instead, ``"alter-psvm"`` from alter-pSVM's (:func:`qcllp.learn.core.margin.binary_scores`;
  see "Which start" below);
* the base scores its own training rows (no cross-fitting), so a flexible base tends to
  reproduce the labels it was given: EM refines the start's ranking rather than searching
  widely, and ``max_iter`` (default 5) bounds the cost of a fit;
* features go through :class:`~qcllp.learn.tabular.proportion_boosting.QuantileBinner` (255 bins)
  before the gradient-boosting base: ``HistGradientBoostingClassifier`` would bin them
  itself, but with ``sample_weight`` it computes weighted quantiles, which at 5,000 x 70
  costs 15 s per fit in scikit-learn 1.9; on codes with at most 255 distinct values per
  feature it takes them as they are. Soft labels within 0.001 of 0 or 1 are fitted as hard
  ones (one copy of the row instead of two);
* the base runs on one OpenMP thread (see ``_fit_binary``); the default base is smaller than
  scikit-learn's (50 trees, 50 rows per leaf): six fits per task (start and five rounds) on
  up to twice the rows must stay within seconds;
* a hard labeling with a single class (every bag's share rounds to zero positives) gets its
  single highest-scored free row relabeled, so that the base sees both classes.

Hard or soft (``variant``)? Measured with the defaults (gradient-boosting base of 50 trees,
5 EM rounds), ROC AUC of the probabilities: on the XOR-like interaction in bags of 50 both are
perfect (training rows 1.000 / 1.000, fresh draw 0.999 / 1.000, soft / hard); on a simulated
plant (``benchmarks/bench_plant_quality.py``'s "shared" scenario, 100 training charges, any
defect; fresh-plant AUC) soft is ahead in every case: cooling station seed 0 (4,906 sticks x
69 features) 0.870 against 0.841, seed 1 0.899 against 0.888, rolling station seed 0 0.812
against 0.781. Soft is the default. Why: the base scores its own training rows, so hard
labels are reproduced almost exactly (training bag means within 0.01 of the shares) and the
alternation freezes after one to five rounds, and a hard 0/1 for the borderline rows of a
20 % charge is a coin flip of the ranking; soft labels keep that uncertainty, and the AUC
keeps rising over the rounds (0.845 after one round, 0.870 after five, 0.873 after eight,
cooling seed 0). With the logistic base the plant is ranked better still (soft: 0.931, 0.908,
0.853; the supervised oracle on the hidden labels: 0.949, 0.932, 0.900): the simulated
defects are close to linear in the station features.

The pSVM toy set: from the ``"share"`` start the logistic base ends label-flipped (accuracy
0 % soft, 2.5 % hard): the start regresses the shares on the features, which points along the
bag means, the wrong way here; the gradient-boosting base ends near chance (61 % / 21 %).
``sign_check=True`` also runs EM from the negated start and keeps the run with the lower
proportion loss of the base's probabilities on the training bags (alter-pSVM's sign check,
:mod:`qcllp.learn.psvm.alternating`); with the hard variant that recovers the toy set (100 %, with
either base). The soft variant stays flipped even so: from weakly spread scores the soft
labels are nearly the bag shares again, whose fit points along the bag means whichever way the
start pointed.

Which start. The count likelihood that EM climbs sees a feature mainly through how its charge
means follow the charges' shares. A defect's *consequence* (a later station's sensor reading
higher on a failing stick) splits the sticks within each charge. Its charge means, though, move
only by the failing share times the shift, under charge-to-charge set-point noise, so soft EM
from the share start barely uses it. alter-pSVM's labels-then-margin alternation (Yu et al.
2013, Alg. 1) follows the split, and hard EM keeps it. On the simulated plant
(``benchmarks/bench_learners.py``, fresh-plant ROC AUC, medians of 3 seeds, default
parameters), hard EM with the logistic base from the ``"alter-psvm"`` start (``EMLLP-psvm``)
against soft EM from the share start (``EMLLP-logistic``):

* ``shared``, one model on the any-defect shares: straightening (after the middle station,
  where the consequence shows) 0.929 against 0.904 (supervised gradient-boosting oracle
  0.952); but cooling 0.875 against 0.917, rolling 0.768 against 0.832, furnace 0.692 against
  0.774;
* ``sepA``, per-type models: straightening 0.934 for both, cooling 0.924 against 0.943.

Hard EM from the share start reaches less at shared straightening (0.931 and 0.903 at seeds
0 and 1, against 0.953 and 0.935 from the alter-pSVM start; C = 0.1, 20 rounds, standardized
features). The bag-level CV error cannot choose the start: it is lower for the alter-pSVM start
at cooling too (0.049 against 0.081, seed 0), where that start ranks worse (0.884 against
0.931). So ``"share"`` stays the
default, and ``"alter-psvm"`` is the start for a station that sees the defects' consequences.

Multi-class problems are one-vs-rest (:class:`~qcllp.learn.tabular.proportion_boosting.
MarginLLPClassifier`, ``n_jobs`` tasks in parallel); the decision function is the
base's log-odds, calibrated on the training bags like every margin learner's.
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral

import numpy as np
from scipy.special import expit, logit
from sklearn.base import clone
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from qcllp.learn.baselines import InvCal
from qcllp.learn.core.base import SEED_MAX
from qcllp.learn.core.margin import MarginLLPClassifier, binary_scores
from qcllp.learn.core.params import (
    COUNT,
    INTEGER,
    NON_NEGATIVE,
    POSITIVE,
    HasMethods,
    Interval,
    StrOptions,
)
from qcllp.learn.core.threads import single_threaded
from qcllp.learn.psvm.alter_psvm import AlterPSVM
from qcllp.learn.psvm.label_step import BagLabeler
from qcllp.learn.tabular.binning import QuantileBinner
from qcllp.learn.tabular.proportion_boosting import proportion_loss

__all__ = ["EMLLP", "EMScore", "shifted_posteriors"]

_LOGIT_CLIP = 1e-7
_NEGLIGIBLE = 1e-3  # a soft label this close to 0 / 1 fits as a hard one: half the rows


def shifted_posteriors(
    scores: np.ndarray,
    bag_codes: np.ndarray,
    targets: np.ndarray,
    free: np.ndarray | None = None,
    n_steps: int = 60,
) -> np.ndarray:
    """``pi_i = sigmoid(scores_i + c_b)`` with ``c_b`` per bag such that the mean of ``pi``
    over the bag's ``free`` rows is ``targets[b]`` (0 / 1 targets give exact 0 / 1).

    Vectorised bisection over all bags at once: the mean is increasing in ``c_b`` and lies
    between ``sigmoid(min s + c)`` and ``sigmoid(max s + c)``, which brackets ``c_b`` within
    ``[logit(t) - max s, logit(t) - min s]``; 60 halvings leave an error far below a row.
    Non-free rows get ``nan``.
    """
    s = np.asarray(scores, dtype=float)
    codes = np.asarray(bag_codes, dtype=np.intp)
    n_bags = len(targets)
    free = np.ones(len(s), dtype=bool) if free is None else np.asarray(free, dtype=bool)
    rows, c_rows = np.flatnonzero(free), codes[free]
    sf = s[rows]
    n_free = np.bincount(c_rows, minlength=n_bags)
    t = np.clip(np.asarray(targets, dtype=float), 0.0, 1.0)
    inner = (t > 0) & (t < 1)
    top = np.full(n_bags, -np.inf)
    np.maximum.at(top, c_rows, sf)
    bottom = np.full(n_bags, np.inf)
    np.minimum.at(bottom, c_rows, sf)
    lt = logit(np.where(inner, t, 0.5))
    lo = np.where(n_free > 0, lt - top, 0.0)
    hi = np.where(n_free > 0, lt - bottom, 0.0)
    for _ in range(n_steps):  # halvings of every bag's bracket at once
        mid = (lo + hi) / 2.0
        mean = np.bincount(c_rows, expit(sf + mid[c_rows]), minlength=n_bags)
        above = mean > t * n_free
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    shift = (lo + hi) / 2.0
    pi = np.full(len(s), np.nan)
    pi[rows] = np.where(inner[c_rows], expit(sf + shift[c_rows]), t[c_rows])
    return pi


class EMScore:
    """One binary task's model: the fitted base and its feature binning; the decision value is
    the base's log-odds of class 1."""

    def __init__(self, base, binner: QuantileBinner | None, n_iter: int, changes: np.ndarray):
        self.base = base
        self.binner = binner
        self.n_iter = n_iter
        self.changes = changes

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        Z = self.binner.transform(X) if self.binner is not None else X
        return _log_odds(self.base, Z)


def _log_odds(base, Z: np.ndarray) -> np.ndarray:
    proba = base.predict_proba(Z)
    classes = list(base.classes_)
    p = proba[:, classes.index(1)] if 1 in classes else np.zeros(len(Z))
    return logit(np.clip(p, _LOGIT_CLIP, 1.0 - _LOGIT_CLIP))


class EMLLP(MarginLLPClassifier):
    """EM for label proportions with a gradient-boosting (or any) base (module docstring).

    Parameters
    ----------
    base : ``"hgb"`` (``HistGradientBoostingClassifier`` with ``n_estimators``,
        ``learning_rate``, ``max_leaf_nodes``, ``min_samples_leaf``, no early stopping),
        ``"logistic"`` (``LogisticRegression(C=C)`` on standardized features) or an unfitted
        classifier with ``fit(X, y, sample_weight)`` and ``predict_proba`` (cloned per fit).
    variant : ``"soft"`` (posteriors by a per-bag logit shift) or ``"hard"`` (top-ranked rows
        of each bag labeled positive).
    init : ``"share"`` (base fitted on the bag shares as soft labels), ``"invcal"`` or
        ``"alter-psvm"`` (that learner's linear scores, :class:`AlterPSVM` at its defaults; both
        on standardized features).
    max_iter : EM rounds (E-step + M-step) after the start, at most.
    tol : soft variant: stop once no posterior moves by more than ``tol``.
    n_estimators, learning_rate, max_leaf_nodes, min_samples_leaf : the ``"hgb"`` base's
        ``max_iter``, ``learning_rate``, ``max_leaf_nodes``, ``min_samples_leaf``.
    C : the ``"logistic"`` base's inverse regularization.
    n_jobs : one-vs-rest tasks in parallel (joblib).
    random_state : seeds the base (and InvCal's or AlterPSVM's start) per task.

    Fitted attributes besides the base class's: ``n_iter_`` (EM rounds per task) and
    ``label_changes_`` (per task, per round: share of rows whose hard label changed, or the
    largest posterior change for the soft variant).
    """

    _parameter_constraints = {
        "base": [StrOptions({"hgb", "logistic"}), HasMethods("fit", "predict_proba")],
        "variant": [StrOptions({"soft", "hard"})],
        "init": [StrOptions({"share", "invcal", "alter-psvm"})],
        "max_iter": [COUNT],
        "sign_check": ["boolean"],
        "tol": [NON_NEGATIVE],
        "n_estimators": [COUNT],
        "learning_rate": [POSITIVE],
        "max_leaf_nodes": [None, Interval(Integral, 2, None, closed="left")],
        "min_samples_leaf": [COUNT],
        "C": [POSITIVE],
        "n_jobs": [None, INTEGER],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        base="hgb",
        variant: str = "soft",
        init: str = "share",
        max_iter: int = 5,
        sign_check: bool = False,
        tol: float = 1e-3,
        n_estimators: int = 50,
        learning_rate: float = 0.1,
        max_leaf_nodes: int | None = 31,
        min_samples_leaf: int = 50,
        C: float = 1.0,
        n_jobs: int | None = None,
        random_state=None,
    ):
        self.base = base
        self.variant = variant
        self.init = init
        self.max_iter = max_iter
        self.sign_check = sign_check
        self.tol = tol
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.C = C
        self.n_jobs = n_jobs
        self.random_state = random_state

    def fit(self, X, bags, proportions, y=None):
        """Fit as :meth:`MarginLLPClassifier.fit`; also records ``n_iter_`` and
        ``label_changes_`` per binary task."""
        super().fit(X, bags, proportions, y)
        self.n_iter_ = np.array([m.n_iter for m in self.estimators_])
        self.label_changes_ = [m.changes for m in self.estimators_]
        return self

    def _make_base(self, seed: int):
        if _is_name(self.base, "hgb"):
            return HistGradientBoostingClassifier(
                max_iter=self.n_estimators,
                learning_rate=self.learning_rate,
                max_leaf_nodes=self.max_leaf_nodes,
                min_samples_leaf=self.min_samples_leaf,
                early_stopping=False,
                random_state=seed,
            )
        if _is_name(self.base, "logistic"):
            return make_pipeline(StandardScaler(), LogisticRegression(C=self.C, max_iter=1000))
        base = clone(self.base)
        if "random_state" in base.get_params():
            base.set_params(random_state=seed)
        return base

    def _fit_binary(self, X, bag_codes, shares, known, random_state):
        # one OpenMP thread per task: at 5,000 rows the gradient-boosting base fits faster on
        # one thread than on two (1.4 s against 2.8 s, 2 cores), and far faster when another
        # process holds a core; one-vs-rest tasks are the unit of parallelism (n_jobs)
        with single_threaded():
            return self._fit_em(X, bag_codes, shares, known, random_state)

    def _fit_em(self, X, bag_codes, shares, known, random_state):
        """One binary task: EM from the start's scores (module docstring, "Which start"), and
        from their mirror image too with ``sign_check``, keeping the run of lower proportion
        loss."""
        binner = QuantileBinner(255).fit(X) if _is_name(self.base, "hgb") else None
        Z = binner.transform(X) if binner is not None else X
        seed = int(random_state.randint(SEED_MAX))
        free = known < 0
        sizes, targets = _free_targets(bag_codes, shares, known, free)

        def m_step(pi: np.ndarray):
            return self._m_step(Z, pi, seed)

        labeler = BagLabeler(bag_codes, shares, known)
        known_pi = np.where(known == 1, 1.0, 0.0)
        e_step = self._e_step(labeler, bag_codes, targets, free, known_pi)
        if self.init == "share":
            start = _log_odds(m_step(np.where(free, targets[bag_codes], known_pi)), Z)
        else:  # the linear start's scores on standardized features (EMLLP takes raw ones)
            first = InvCal if self.init == "invcal" else AlterPSVM
            Xs = StandardScaler().fit_transform(X)
            start = binary_scores(
                first(random_state=seed), Xs, bag_codes, shares, known, random_state
            )

        def run(scores: np.ndarray) -> tuple:
            return self._run_em(scores, m_step, e_step, Z, bag_codes, shares, sizes)

        loss, base, changes = run(start)
        if self.sign_check:
            mirrored = run(-start)
            if mirrored[0] < loss:
                loss, base, changes = mirrored
        return EMScore(base, binner, len(changes), changes)

    def _m_step(self, Z: np.ndarray, pi: np.ndarray, seed: int):
        """Fit a fresh base on soft labels ``pi`` (hard labels are 0 / 1 posteriors)."""
        positive, negative = pi > _NEGLIGIBLE, pi < 1.0 - _NEGLIGIBLE
        soft = positive & negative
        rows = np.concatenate([np.flatnonzero(positive), np.flatnonzero(negative)])
        labels = np.repeat([1.0, 0.0], [positive.sum(), negative.sum()])
        weights = np.concatenate([pi[positive], 1.0 - pi[negative]])
        model = self._make_base(seed)
        if soft.any():
            model.fit(Z[rows], labels, **_weight_kwarg(model, weights))
        else:
            model.fit(Z[rows], labels)
        return model

    def _e_step(
        self,
        labeler: BagLabeler,
        bag_codes: np.ndarray,
        targets: np.ndarray,
        free: np.ndarray,
        known_pi: np.ndarray,
    ) -> Callable[[np.ndarray], np.ndarray]:
        """The E step of the variant: scores -> labels; hard: the bags' labels within their
        counts, ranked by the scores; soft: the shifted posteriors meeting every bag's
        ``targets`` (known rows keep their labels)."""

        def e_step(scores: np.ndarray) -> np.ndarray:
            if self.variant == "hard":
                positive = labeler.random_labels(scores) > 0
                _ensure_both_classes(positive, scores, free)
                return positive.astype(float)
            pi = shifted_posteriors(scores, bag_codes, targets, free)
            return np.where(free, pi, known_pi)

        return e_step

    def _run_em(self, scores, m_step, e_step, Z, bag_codes, shares, sizes) -> tuple:
        """EM from ``scores`` until the labels change by at most ``tol`` (hard: not at all) or
        for ``max_iter`` rounds; returns the last base's proportion loss on the training bags,
        the base and the change of every round."""
        pi = e_step(scores)
        changes = []
        for _ in range(int(self.max_iter)):
            base = m_step(pi)
            new_pi = e_step(_log_odds(base, Z))
            change = (
                float(np.mean(new_pi != pi))
                if self.variant == "hard"
                else float(np.max(np.abs(new_pi - pi), initial=0.0))
            )
            changes.append(change)
            pi = new_pi
            if change <= (0.0 if self.variant == "hard" else float(self.tol)):
                break
        loss = proportion_loss(_log_odds(base, Z), bag_codes, shares, sizes)
        return loss, base, np.array(changes)


def _free_targets(
    bag_codes: np.ndarray, shares: np.ndarray, known: np.ndarray, free: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per bag its size and the share of positives among its free rows (those of unknown
    label): what the soft E step's posteriors must meet."""
    n_bags = len(shares)
    sizes = np.bincount(bag_codes, minlength=n_bags)
    n_free = np.bincount(bag_codes[free], minlength=n_bags)
    known_pos = np.bincount(bag_codes, weights=known == 1, minlength=n_bags)
    targets = np.clip((shares * sizes - known_pos) / np.maximum(n_free, 1), 0.0, 1.0)
    return sizes, targets


def _weight_kwarg(model, weights: np.ndarray) -> dict:
    """``sample_weight`` for ``fit``, routed to the last step of a pipeline."""
    steps = getattr(model, "steps", None)
    if steps:
        return {f"{steps[-1][0]}__sample_weight": weights}
    return {"sample_weight": weights}


def _ensure_both_classes(positive: np.ndarray, scores: np.ndarray, free: np.ndarray) -> None:
    """Relabel the best-scored free negative (worst-scored free positive) when the labeling
    has no positive (no negative), so that the base sees both classes."""
    for wanted, pick in ((True, np.argmax), (False, np.argmin)):
        candidates = np.flatnonzero(free & (positive != wanted))
        if not (positive == wanted).any() and len(candidates):
            positive[candidates[pick(scores[candidates])]] = wanted


def _is_name(base, name: str) -> bool:
    return isinstance(base, str) and base == name
