"""Count calibrations fitted in a batch: the same fits as one by one, and the compiled
likelihood (each bag's recursion, the reverse-mode gradient) equal to its definition."""

from __future__ import annotations

import numpy as np
import pytest

from qcllp.learn.calibration import CountCalibrator, _CountLayout, poisson_binomial_logpmf
from qcllp.learn.count_batch import fit_count_calibrators


def _bags(seed: int, n_bags: int = 60):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(20, 70, n_bags)
    codes = np.repeat(np.arange(n_bags), sizes)
    f = rng.normal(size=len(codes)) + 0.5 * rng.normal(size=n_bags)[codes]
    bad = rng.random(len(f)) < 1 / (1 + np.exp(-(1.5 * f - 2.5)))
    return f, codes, np.bincount(codes, bad, minlength=n_bags).astype(float)


def _resample(f, codes, counts, rng):
    """A bootstrap replicate of the bags: (rows' f, new codes, counts, charge drawn per bag)."""
    drawn = rng.integers(0, len(counts), len(counts))
    rows = np.concatenate([np.flatnonzero(codes == d) for d in drawn])
    new = np.repeat(np.arange(len(drawn)), np.bincount(codes, minlength=len(counts))[drawn])
    return f[rows], new, counts[drawn], drawn


def test_fits_together_are_the_fits_one_by_one():
    f, codes, counts = _bags(0)
    start = CountCalibrator().fit(f, codes, counts)
    rng = np.random.default_rng(1)
    tasks = [(f, codes, counts, np.arange(len(counts)))]
    tasks += [_resample(f, codes, counts, rng) for _ in range(12)]
    together = fit_count_calibrators(tasks, init=start)
    for task, fit in zip(tasks, together, strict=True):
        alone = CountCalibrator().fit(*task[:3], init=start)
        got = [fit.slope_, fit.intercept_, fit.ceiling_]
        np.testing.assert_allclose(got, [alone.slope_, alone.intercept_, alone.ceiling_], rtol=1e-9)


def test_a_fit_that_fails_raises_and_the_others_do_not_hang():
    f, codes, counts = _bags(2)
    broken = (f[:10], codes, counts)  # ten decision values for all the rows
    with pytest.raises(Exception):  # noqa: B017 - whatever the fit raises, it reaches the caller
        fit_count_calibrators([(f, codes, counts), broken, (f, codes, counts)])


def _by_convolution(p: np.ndarray, k: int) -> float:
    """P(count = k) of independent Bernoulli(p): the product of the rows' generating
    polynomials ``(1 - p) + p x``, multiplied out one row at a time."""
    poly = np.array([1.0])
    for pi in p:
        poly = np.convolve(poly, [1.0 - pi, pi])
    return float(poly[k]) if 0 <= k < len(poly) else 0.0


def test_the_compiled_likelihood_and_its_reverse_mode_match_the_definition():
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 40, 300)
    codes = rng.permutation(np.repeat(np.arange(300), sizes))
    counts = np.array([rng.integers(0, s + 1) for s in sizes]) // rng.integers(1, 4, 300)
    counts[:3] = [-1, sizes[1] + 1, sizes[2]]  # impossible counts, and a full bag
    p = rng.uniform(0.01, 0.9, len(codes))
    layout = _CountLayout(codes, counts, 300)
    exact = [_by_convolution(p[codes == b], counts[b]) for b in range(300)]
    single = np.log(np.maximum(exact, 1e-300))
    np.testing.assert_allclose(layout.logpmf(p), single, rtol=1e-12)
    alone = [
        poisson_binomial_logpmf(p[codes == b], np.zeros(sizes[b], int), counts[b : b + 1])[0]
        for b in range(300)
    ]
    np.testing.assert_allclose(alone, single, rtol=1e-12)
    dp = rng.normal(size=(2, len(codes)))
    value, grad = layout.logpmf_and_grad(p, dp)
    np.testing.assert_allclose(value, single, rtol=1e-12)
    eps = 1e-7
    for m in range(2):
        numeric = (layout.logpmf(p + eps * dp[m]) - layout.logpmf(p - eps * dp[m])) / (2 * eps)
        finite = value > -600
        np.testing.assert_allclose(grad[m][finite], numeric[finite], rtol=1e-5, atol=1e-6)
        assert np.all(grad[m][~finite] == 0.0)
