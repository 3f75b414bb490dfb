"""One BLAS / OpenMP thread for the small dense algebra inside a single fit.

The learners parallelise over restarts and grid points (joblib); inside one fit, matrices of a
few hundred columns run faster on one thread than on contending pools. ``threadpoolctl``'s
``threadpool_limits`` inspects every loaded library on each call (about 6 ms), which is a fifth
of a small alter-pSVM restart; the controller here inspects them once per process.
"""

from __future__ import annotations

from threadpoolctl import ThreadpoolController

__all__ = ["single_threaded"]

_controller: ThreadpoolController | None = None


def single_threaded():
    """A context manager limiting BLAS and OpenMP pools to one thread."""
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller.limit(limits=1)
