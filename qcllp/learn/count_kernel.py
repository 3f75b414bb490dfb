"""The Poisson-binomial probability of a bag's count and its derivative by each row, compiled.

``P(count = k)`` of a bag whose rows are independent Bernoulli(``p_i``) by the convolution
recursion ``dist <- dist + p (shift(dist) - dist)`` over its rows, and every row's derivative
by one backward pass of the adjoint ``lam`` (of ``P(count = k)`` by ``dist``): a row's
derivative is ``lam . (shift(dist) - dist)`` and ``lam`` becomes ``lam (1 - p) + shift^T(lam)
p``. Per bag it costs O(rows x (k + 1)) with no padding: only the bag's own rows and the
columns up to its own count are touched.

Why compiled (numba) rather than NumPy: the recursion is sequential over a bag's rows, so
NumPy can only vectorize it across bags (a table padded to the largest bag, one array
operation per row position and count column), and the count calibration's refits (the
lock-out rule's bootstrap) spent most of their time in those small operations and their
temporaries. The same recursion in a loop compiled by numba, a well-kept JIT compiler for
exactly such NumPy loops, gives the same values to the last bit and derivatives to about
1e-13 (only the order of a dot product's terms differs) at a tenth of the cost. Compiled on
first use and cached on disk (``cache=True``), so a process pays the compilation (about a
second) only once per machine and a process that never fits a count calibration not at all.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["bag_probabilities"]


def _recursion(  # pragma: no cover - runs compiled
    p: np.ndarray,
    starts: np.ndarray,
    k: np.ndarray,
    value: np.ndarray,
    by_row: np.ndarray,
    want_grad: bool,
) -> None:
    """Bag ``b`` holds rows ``starts[b]:starts[b + 1]`` of ``p``; writes ``P(count = k[b])``
    to ``value[b]`` and, with ``want_grad``, its derivative by each row's ``p`` to
    ``by_row``. ``0 <= k[b] <= `` the bag's rows."""
    for b in range(len(k)):
        lo, n, kb = starts[b], starts[b + 1] - starts[b], k[b]
        dists = np.zeros((n + 1, kb + 1))
        dists[0, 0] = 1.0
        for j in range(n):
            pj, prev, nxt = p[lo + j], dists[j], dists[j + 1]
            nxt[0] = prev[0] + pj * (-prev[0])
            for c in range(1, kb + 1):
                nxt[c] = prev[c] + pj * (prev[c - 1] - prev[c])
        value[b] = dists[n, kb]
        if not want_grad:
            continue
        lam = np.zeros(kb + 1)
        lam[kb] = 1.0
        for j in range(n - 1, -1, -1):
            pj, dist = p[lo + j], dists[j]
            up, down = 0.0, lam[kb] * dist[kb]
            for c in range(kb):
                up += lam[c + 1] * dist[c]
                down += lam[c] * dist[c]
            by_row[lo + j] = up - down
            q = 1.0 - pj
            for c in range(kb):
                lam[c] = lam[c] * q + lam[c + 1] * pj
            lam[kb] = lam[kb] * q


_compiled: Callable | None = None


def _kernel() -> Callable:
    """The compiled :func:`_recursion`, compiled on first use and cached on disk where numba
    finds a writable place (beside this file, else the user's cache folder); where it finds
    none (a read-only install without a home) it compiles per process instead of failing."""
    global _compiled
    if _compiled is None:
        import numba  # imported on first use: a CLI that fits nothing does not load it

        try:
            _compiled = numba.njit(cache=True, nogil=True)(_recursion)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            _compiled = numba.njit(nogil=True)(_recursion)
    return _compiled


def bag_probabilities(
    p: np.ndarray, starts: np.ndarray, k: np.ndarray, *, grad: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """``P(count = k[b])`` of every bag ``b`` (rows ``starts[b]:starts[b + 1]`` of ``p``,
    sorted by bag) and, with ``grad``, its derivative by each row's ``p`` (module
    docstring); ``k`` must lie in ``0..`` the bag's rows."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    value = np.empty(len(k))
    by_row = np.empty(len(p) if grad else 0)
    _kernel()(p, np.asarray(starts, np.intp), np.asarray(k, np.intp), value, by_row, grad)
    return value, (by_row if grad else None)
