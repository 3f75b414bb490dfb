"""Thread limits for the BLAS / OpenMP pools inside a single fit.

The learners parallelise over restarts, individuals and grid points (joblib); inside one fit,
matrices of a few hundred columns and k-means on a few thousand rows run faster on one thread
than on contending pools. ``threadpoolctl``'s ``threadpool_limits`` inspects every loaded
library on each call (about 6 ms), which is a fifth of a small alter-pSVM restart and half a
small k-means fit; the controller here inspects them once per process.
"""

from __future__ import annotations

from threadpoolctl import ThreadpoolController

__all__ = ["limited_threads", "single_threaded"]

_controller: ThreadpoolController | None = None


def limited_threads(limits: int | None):
    """A context manager limiting BLAS and OpenMP pools to ``limits`` threads (``None``: no
    limit)."""
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller.limit(limits=limits)


def single_threaded():
    """A context manager limiting BLAS and OpenMP pools to one thread."""
    return limited_threads(1)
