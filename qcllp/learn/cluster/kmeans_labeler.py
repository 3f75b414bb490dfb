"""The LLP algorithm of Stolpe & Morik (2011): evolved feature weights, k-means, labeled clusters.

Alg. 1: an evolution strategy searches feature-weight vectors w in [0, 1]^m. Each w is scored
by clustering the sample with k-means under the weighted Euclidean distance
d(x, z)^2 = sum_f w_f (x_f - z_f)^2 (k-means on X * sqrt(w)), labeling the clusters so that
the bags' label proportions are matched best (:mod:`.cluster_labeling`: exhaustive or Alg. 2)
and taking that labeling's error as the fitness: Err_Pi (eq. 5, or eq. 8 with known instance
labels), by default without its Err_prior factor (see :mod:`.cluster_labeling` for why).
The best (w, clustering, labeling) seen over all generations is the model (Sect. 3.4): a new
row gets the label of its nearest weighted cluster mean, or a scikit-learn classifier trained
on the labeled training rows predicts it (``final_estimator``, Sect. 3.5).

Choices where the paper leaves room, and why:

* Features are min-max scaled to [0, 1] on the training data first (``scale="minmax"``), as in
  the paper's experiments; weights in [0, 1] can only shrink a feature, so without a common
  scale a sensor measured in degrees would drown one measured in metres. ``scale="standard"``
  (mean 0, variance 1) is the other common scale: min-max gives every feature the same
  *range*, not the same spread, so a discrete feature (a plant's reading count, 3..8, has
  variance 0.12 on [0, 1]) or one with a rare outlier gets 6x the variance of a clipped
  Gaussian sensor (0.02) and decides the clusters until the evolution strategy happens to zero
  its weight. On the simulated plant (cooling, 69 features, 4,900 sticks) the evolved weights
  kept reading counts at 1.0 and the clusters ranked at chance; standardized, the same search
  ranks better (``benchmarks/bench_kmeans_labeler.py --part plant``).
* "Normalized" weight vectors: after mutation and crossover each weight is clipped to [0, 1]
  and the vector divided by its largest weight. The weighted distance is invariant to a
  common factor, so this loses no clustering and keeps the mutation's step size meaningful;
  an all-zero vector (every feature ignored) becomes all ones.
* Alg. 1 selects from P u P_copy u P_children before those are scored; here the copies and
  children are scored first (each individual once), then the tournament picks ``psize``
  survivors: the usual (mu + lambda) strategy. Mutation is DEAP's Gaussian with
  sigma = sqrt(mutvar) on every weight; crossover is DEAP's uniform crossover (swap
  probability 0.5) applied with probability ``crossprob`` to random pairs of P u P_copy, the
  crossed pairs being the children; ``tournsize`` is a fraction of ``psize`` (at least 2).
* The fitness is ``"err_weight"`` by default, eq. (5)/(8) without the Err_prior factor,
  whose exact zeros mislead the search; ``fitness="err_pi"`` is the paper's product as
  written. Ties are broken by the sum of the product's factors.
* The final estimator (Sect. 3.5: "train a classifier ... based on the now labeled
  observations") sees the features as k-means saw them (``scale``), so that its
  regularisation, too, meets comparable scales. Its target is the paper's cluster label
  (``final_target="label"``) or, with ``final_target="composition"``, each training row once
  per class weighted by its cluster's estimated composition (rows with known labels: their
  label, weight 1). The hard labels of eq. (3) say little about a rare class: with 5 % defects
  of one type hardly a cluster is mostly defective (simulated plant, cooling, k = 16: 1, 0 and
  1 of 16 clusters labeled crack, bend, scale), and a classifier trained on such a labeling
  learns one cluster or has one class. The composition target keeps what the labeled
  clusters say (this cluster is 30 % defective, that one 2 %) and the classifier turns the k
  cluster values into a ranking within clusters too. It needs ``fit(..., sample_weight=)``.
* ``predict_proba`` of the cluster-mean model is each cluster's class composition estimated
  from the bags (:func:`.cluster_labeling.cluster_compositions`), not the hard 0/1 of its
  label: the station scorer thresholds these probabilities. As with scikit-learn's SVC,
  ``predict`` (the paper's cluster label) and the argmax of ``predict_proba`` can disagree on
  a mixed cluster.

DEAP gives the individuals and their fitness (``creator``, ``base.Fitness``, ``Toolbox.clone``);
its variation and selection operators (``tools.mutGaussian``, ``cxUniform``, ``selTournament``)
draw from Python's *process-global* ``random``, which two fits in threads of one process (a
threaded joblib or in-process Dask backend, a grid search) would share and interleave. So a
fit draws from its own ``random.Random`` seeded from ``random_state`` through
:class:`_Operators`, which repeat those three operators draw for draw (the same seed gives the
same model as seeding the global ``random`` and calling DEAP's did). Fits are reproducible,
also with ``n_jobs > 1`` (every k-means run gets a seed drawn before the population is
dispatched) and side by side in threads.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Literal, get_args

import numpy as np
import pandas as pd
from deap import base, creator
from joblib import Parallel, delayed
from sklearn.base import BaseEstimator, clone
from sklearn.cluster import KMeans
from sklearn.metrics import pairwise_distances_argmin
from sklearn.utils import check_random_state
from sklearn.utils.validation import has_fit_parameter

from qcllp.learn.cluster.cluster_labeling import (
    Fitness,
    cluster_compositions,
    label_clusters,
    labeling_statistics,
)
from qcllp.learn.core.base import SEED_MAX, LLPClassifierMixin
from qcllp.learn.core.params import (
    COUNT,
    INTEGER,
    NON_NEGATIVE,
    UNIT_INTERVAL,
    HasMethods,
    StrOptions,
    check_params,
)
from qcllp.learn.core.threads import limited_threads

__all__ = ["KMeansLabeler"]

# Below this many rows k-means, the assignment and the final estimator run on one thread (2
# cores: k-means of 800 rows 13 vs. 170 ms; the demo's logistic final estimator 14 vs. 257 ms).
_THREADED_KMEANS_ROWS = 50_000


def _threads_for(rows: int) -> int | None:
    """The BLAS / OpenMP thread limit for work on ``rows`` rows (``None``: no limit)."""
    return None if rows >= _THREADED_KMEANS_ROWS else 1


if not hasattr(creator, "QcllpWeightFitness"):
    # (fitness, tie-break), both minimised; DEAP compares fitnesses lexicographically.
    creator.create("QcllpWeightFitness", base.Fitness, weights=(-1.0, -1.0))
    creator.create("QcllpWeights", list, fitness=creator.QcllpWeightFitness)


@dataclass(frozen=True)
class _Scored:
    """One evaluated weight vector: its clustering (weighted centers) and best labeling."""

    weights: np.ndarray
    centers: np.ndarray
    labels: np.ndarray
    error: float
    tie_break: float


class KMeansLabeler(LLPClassifierMixin, BaseEstimator):
    """Evolutionary feature-weighted k-means labeler (Stolpe & Morik 2011, Alg. 1).

    Parameters
    ----------
    n_clusters : k, the number of k-means clusters (the paper found k <= 6 often enough).
    labeling : ``"exhaustive"`` (all l^k labelings) or ``"greedy"`` (Alg. 2).
    fitness : ``"err_weight"`` (default) or ``"err_pi"`` (eq. 5 / 8 as written).
    maxgen, psize, mutvar, crossprob, tournsize : the evolution strategy's parameters,
        defaults from the paper's experiments (10, 25, 1.0, 0.3, 0.25); ``tournsize`` is a
        fraction of ``psize``.
    kmeans_max_iter : iteration limit of each k-means run (the paper's linear run time
        assumes a limit).
    kmeans_max_rows : on larger samples k-means finds its centers on this many random rows
        and every row is then assigned to its nearest center (one linear pass); ``None``
        clusters all rows. The labeling and the fitness always use every row.
    scale : ``"minmax"`` scales features to [0, 1] on the training data (the paper's
        experiments), ``"standard"`` to mean 0 and variance 1; ``None`` leaves them.
    final_estimator : optional scikit-learn classifier trained on the labeled training rows
        (in the scaled feature space) to make predictions instead of the nearest cluster mean.
    final_target : what the final estimator learns (Sect. 3.5): ``"label"`` each row's cluster
        label, ``"composition"`` each row once per class, weighted by its cluster's estimated
        class composition (``cluster_proportions_``; rows with known labels: their label).
        ``"composition"`` needs an estimator whose ``fit`` takes ``sample_weight``.
    n_jobs : joblib workers scoring the population; ``joblib.parallel_config`` picks the
        backend.
    random_state : seed for the initial population, the operators and k-means.
    callback : optional ``callback(generation, maxgen, best_fitness)`` after each generation
        (progress bars); it must not raise.

    Attributes
    ----------
    classes_, n_features_in_, feature_names_in_ : as in scikit-learn.
    weights_ : (m,) the best feature weights (on the scaled features).
    cluster_centers_ : (k, m) cluster means in the original feature units.
    cluster_labels_ : (k,) the class label of each cluster.
    cluster_proportions_ : (k, l) each cluster's estimated class composition.
    fitness_ : the model's fitness (see ``fitness``; lower is better).
    fitness_history_ : (maxgen,) best fitness so far after each generation (non-increasing).
    n_evaluations_ : how many weight vectors were clustered and labeled.
    final_estimator_ : the fitted ``final_estimator`` or ``None``.
    """

    _parameter_constraints = {
        "n_clusters": [COUNT],
        "labeling": [StrOptions({"exhaustive", "greedy"})],
        "fitness": [StrOptions(get_args(Fitness))],
        "maxgen": [COUNT],
        "psize": [COUNT],
        "mutvar": [NON_NEGATIVE],
        "crossprob": [UNIT_INTERVAL],
        "tournsize": [UNIT_INTERVAL],
        "kmeans_max_iter": [COUNT],
        "kmeans_max_rows": [None, COUNT],
        "scale": [None, StrOptions({"minmax", "standard"})],
        "final_estimator": [None, HasMethods("fit", "predict")],
        "final_target": [StrOptions({"label", "composition"})],
        "n_jobs": [None, INTEGER],
        "random_state": ["random_state"],
        "callback": [None, "callable"],
    }

    def __init__(
        self,
        n_clusters: int = 6,
        labeling: Literal["exhaustive", "greedy"] = "exhaustive",
        fitness: Fitness = "err_weight",
        maxgen: int = 10,
        psize: int = 25,
        mutvar: float = 1.0,
        crossprob: float = 0.3,
        tournsize: float = 0.25,
        kmeans_max_iter: int = 100,
        kmeans_max_rows: int | None = 20_000,
        scale: Literal["minmax", "standard"] | None = "minmax",
        final_estimator=None,
        final_target: Literal["label", "composition"] = "label",
        n_jobs: int | None = None,
        random_state=None,
        callback: Callable[[int, int, float], None] | None = None,
    ):
        self.n_clusters = n_clusters
        self.labeling = labeling
        self.fitness = fitness
        self.maxgen = maxgen
        self.psize = psize
        self.mutvar = mutvar
        self.crossprob = crossprob
        self.tournsize = tournsize
        self.kmeans_max_iter = kmeans_max_iter
        self.kmeans_max_rows = kmeans_max_rows
        self.scale = scale
        self.final_estimator = final_estimator
        self.final_target = final_target
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.callback = callback

    def fit(self, X, bags, proportions: pd.Series | pd.DataFrame, y=None) -> KMeansLabeler:
        """Learn from bags and their label proportions; ``y`` optionally gives known labels."""
        check_params(self)
        problem = self._validate_fit_input(X, bags, proportions, y)
        self._check_cluster_counts(len(problem.X))
        rng = check_random_state(self.random_state)
        Xs = self._fit_scaling(problem.X)
        known = problem.known if np.any(problem.known >= 0) else None

        def score(population: list) -> list[_Scored]:
            seeds = rng.randint(SEED_MAX, size=len(population))
            jobs = (
                delayed(_score_weights)(
                    Xs,
                    np.asarray(ind),
                    problem.bag_codes,
                    problem.proportions,
                    known,
                    self.n_clusters,
                    self.labeling,
                    self.fitness,
                    self.kmeans_max_iter,
                    self.kmeans_max_rows,
                    int(seed),
                )
                for ind, seed in zip(population, seeds, strict=True)
            )
            scored = Parallel(n_jobs=self.n_jobs)(jobs)
            for ind, result in zip(population, scored, strict=True):
                ind.fitness.values = (result.error, result.tie_break)
            return scored

        ops = _Operators(int(rng.randint(SEED_MAX)))
        toolbox = self._toolbox(ops)
        population = [
            creator.QcllpWeights(_normalise(rng.uniform(size=Xs.shape[1])))
            for _ in range(self.psize)
        ]
        best = _best(None, score(population))
        history, n_evaluations = [], len(population)
        for generation in range(1, self.maxgen + 1):
            history.append(best.error)
            if self.callback is not None:
                self.callback(generation, self.maxgen, best.error)
            if generation == self.maxgen:
                break
            offspring = self._vary(toolbox, ops, population)
            best = _best(best, score(offspring))
            n_evaluations += len(offspring)
            selected = toolbox.select(population + offspring, self.psize)
            population = [toolbox.clone(ind) for ind in selected]

        with limited_threads(_threads_for(len(Xs))):
            self._store_model(problem, Xs, best)
        self.fitness_history_ = np.asarray(history)
        self.n_evaluations_ = n_evaluations
        return self

    def _check_cluster_counts(self, n_rows: int) -> None:
        """What the constraints table cannot say: k-means needs at least ``n_clusters`` rows,
        of the sample (``kmeans_max_rows``) and of the training data."""
        if self.kmeans_max_rows is not None and self.kmeans_max_rows < self.n_clusters:
            raise ValueError(
                f"KMeansLabeler: kmeans_max_rows must be None or at least n_clusters "
                f"({self.n_clusters}), got {self.kmeans_max_rows!r}"
            )
        if self.n_clusters > n_rows:
            raise ValueError(
                f"KMeansLabeler: n_clusters={self.n_clusters} exceeds the {n_rows} training rows"
            )

    def _toolbox(self, ops: _Operators) -> base.Toolbox:
        toolbox = base.Toolbox()
        toolbox.register("mutate", ops.mut_gaussian, mu=0.0, sigma=np.sqrt(self.mutvar), indpb=1.0)
        toolbox.register("mate", ops.cx_uniform, indpb=0.5)
        tournament = max(2, round(self.tournsize * self.psize))
        toolbox.register("select", ops.sel_tournament, tournsize=tournament)
        return toolbox

    def _vary(self, toolbox: base.Toolbox, ops: _Operators, population: list) -> list:
        """P_copy (all weights mutated) and P_children (uniform crossover on P u P_copy)."""
        copies = [toolbox.clone(ind) for ind in population]
        for ind in copies:
            toolbox.mutate(ind)
            ind[:] = _normalise(np.asarray(ind))
        pool = ops.random.sample(population + copies, len(population) + len(copies))
        children = []
        for first, second in zip(pool[::2], pool[1::2], strict=False):
            if ops.random.random() < self.crossprob:
                a, b = toolbox.clone(first), toolbox.clone(second)
                toolbox.mate(a, b)
                a[:], b[:] = _normalise(np.asarray(a)), _normalise(np.asarray(b))
                children += [a, b]
        for ind in copies + children:
            del ind.fitness.values
        return copies + children

    def _fit_scaling(self, X: np.ndarray) -> np.ndarray:
        if self.scale == "minmax":
            self.feature_min_ = X.min(axis=0)
            span = X.max(axis=0) - self.feature_min_
            self.feature_scale_ = np.where(span > 0, span, 1.0)
        elif self.scale == "standard":
            self.feature_min_ = X.mean(axis=0)  # the offset subtracted (here: the mean)
            spread = X.std(axis=0)
            self.feature_scale_ = np.where(spread > 0, spread, 1.0)
        else:
            self.feature_min_ = np.zeros(X.shape[1])
            self.feature_scale_ = np.ones(X.shape[1])
        return self._scaled(X)

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        return (X - self.feature_min_) / self.feature_scale_

    def _store_model(self, problem, Xs: np.ndarray, best: _Scored) -> None:
        self.weights_ = best.weights
        self._weighted_centers = best.centers
        self.cluster_labels_ = self.classes_[best.labels]
        self.fitness_ = best.error
        clusters = self._nearest_cluster(Xs)
        k = self.n_clusters
        counts = np.bincount(clusters, minlength=k)
        sums = np.column_stack(
            [
                np.bincount(clusters, weights=problem.X[:, f], minlength=k)
                for f in range(Xs.shape[1])
            ]
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            self.cluster_centers_ = sums / counts[:, None]
        self.cluster_proportions_ = cluster_compositions(
            problem.bag_codes, clusters, problem.proportions, k
        )
        self.final_estimator_ = None
        if self.final_estimator is None:
            return
        estimator = clone(self.final_estimator)
        if self.final_target == "label":
            codes = best.labels[clusters]
            codes = np.where(problem.known >= 0, problem.known, codes)
            self.final_estimator_ = estimator.fit(Xs, codes)
            return
        if not has_fit_parameter(estimator, "sample_weight"):
            raise ValueError(
                f"KMeansLabeler: final_target='composition' needs a final_estimator whose fit "
                f"takes sample_weight; {type(estimator).__name__} does not"
            )
        rows, codes, weights = _composition_targets(
            self.cluster_proportions_[clusters], problem.known
        )
        self.final_estimator_ = estimator.fit(Xs[rows], codes, sample_weight=weights)

    def _nearest_cluster(self, Xs: np.ndarray) -> np.ndarray:
        return _nearest(Xs * np.sqrt(self.weights_), self._weighted_centers)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities (n, l): the nearest cluster's composition, or the final model's."""
        Xs = self._scaled(self._validate_predict_input(X))
        if self.final_estimator_ is not None:
            proba = np.zeros((len(Xs), len(self.classes_)))
            model = self.final_estimator_
            if hasattr(model, "predict_proba"):
                proba[:, model.classes_] = model.predict_proba(Xs)
            else:
                proba[np.arange(len(Xs)), model.predict(Xs)] = 1.0
            return proba
        return self.cluster_proportions_[self._nearest_cluster(Xs)]

    def predict(self, X) -> np.ndarray:
        """The label of the nearest weighted cluster mean (or the final model's prediction)."""
        Xs = self._scaled(self._validate_predict_input(X))
        if self.final_estimator_ is not None:
            return self._decode(self.final_estimator_.predict(Xs))
        return self.cluster_labels_[self._nearest_cluster(Xs)]


def _score_weights(
    Xs: np.ndarray,
    weights: np.ndarray,
    bag_codes: np.ndarray,
    proportions: np.ndarray,
    known: np.ndarray | None,
    n_clusters: int,
    labeling: str,
    fitness: Fitness,
    max_iter: int,
    max_rows: int | None,
    seed: int,
) -> _Scored:
    """clusterer(U, w) and labeler(C, G, Pi, Y) of Alg. 1 for one weight vector."""
    Xw = Xs * np.sqrt(weights)
    kmeans = KMeans(n_clusters=n_clusters, n_init=1, max_iter=max_iter, random_state=seed)
    rows = len(Xw) if max_rows is None else min(len(Xw), max_rows)
    if rows < len(Xw):
        sample = np.random.RandomState(seed).choice(len(Xw), rows, replace=False)
        with limited_threads(_threads_for(rows)):
            kmeans.fit(Xw[np.sort(sample)])
        with limited_threads(_threads_for(len(Xw))):
            clusters = _nearest(Xw, kmeans.cluster_centers_)
    else:
        with limited_threads(_threads_for(rows)):
            clusters = kmeans.fit_predict(Xw)
    stats = labeling_statistics(bag_codes, clusters, proportions, n_clusters, known)
    labels, err, tie = label_clusters(stats, labeling, fitness)
    return _Scored(weights, kmeans.cluster_centers_, labels, err, tie)


def _composition_targets(
    theta: np.ndarray, known: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, class codes and weights for a classifier learning class compositions: row i
    appears once per class j with weight theta_ij (its cluster's share of class j), a row with
    a known label once with weight 1; zero weights are left out."""
    theta = np.array(theta, dtype=float)
    labeled = known >= 0
    theta[labeled] = 0.0
    theta[labeled, known[labeled]] = 1.0
    n, n_classes = theta.shape
    rows = np.tile(np.arange(n), n_classes)
    codes = np.repeat(np.arange(n_classes), n)
    weights = theta.T.ravel()
    keep = weights > 0
    return rows[keep], codes[keep], weights[keep]


def _nearest(Xw: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Index of the nearest center (Euclidean in the weighted space) for every row."""
    return pairwise_distances_argmin(Xw, centers)


def _best(best: _Scored | None, results: list[_Scored]) -> _Scored:
    """Keep the first of the lowest (fitness, tie-break), as Alg. 1's strict comparison does."""
    for result in results:
        if best is None or (result.error, result.tie_break) < (best.error, best.tie_break):
            best = result
    assert best is not None
    return best


def _normalise(weights: np.ndarray) -> list[float]:
    """Clip to [0, 1] and scale the largest weight to 1 (all-zero becomes all ones)."""
    w = np.clip(np.asarray(weights, dtype=float), 0.0, 1.0)
    top = w.max()
    return (w / top if top > 0 else np.ones_like(w)).tolist()


class _Operators:
    """DEAP's ``tools.mutGaussian``, ``tools.cxUniform`` and ``tools.selTournament``, drawing
    from a ``random.Random`` of their own instead of the process-global ``random`` (see the
    module docstring); each repeats DEAP's draws in DEAP's order (deap 1.4 ``tools``)."""

    def __init__(self, seed: int):
        self.random = random.Random(seed)

    def mut_gaussian(self, ind: list, mu: float, sigma: float, indpb: float) -> tuple[list]:
        for i in range(len(ind)):
            if self.random.random() < indpb:
                ind[i] += self.random.gauss(mu, sigma)
        return (ind,)

    def cx_uniform(self, ind1: list, ind2: list, indpb: float) -> tuple[list, list]:
        for i in range(min(len(ind1), len(ind2))):
            if self.random.random() < indpb:
                ind1[i], ind2[i] = ind2[i], ind1[i]
        return ind1, ind2

    def sel_tournament(self, individuals: list, k: int, tournsize: int) -> list:
        chosen = []
        for _ in range(k):
            aspirants = [self.random.choice(individuals) for _ in range(tournsize)]
            chosen.append(max(aspirants, key=attrgetter("fitness")))
        return chosen
