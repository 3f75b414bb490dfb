"""Thread limits for the BLAS / OpenMP pools inside a single fit.

The learners parallelise over restarts, individuals and grid points (joblib); inside one fit,
matrices of a few hundred columns and k-means on a few thousand rows run faster on one thread
than on contending pools. ``threadpoolctl``'s ``threadpool_limits`` inspects every loaded
library on each call (about 6 ms), which is a fifth of a small alter-pSVM restart and half a
small k-means fit; the controller here inspects them once and again only after new modules
were imported.

Why again: a controller knows the libraries loaded when it was made. One made after importing
NumPy alone limits NumPy's OpenBLAS and not the OpenBLAS SciPy brings or scikit-learn's OpenMP
runtime, loaded later. A native library comes with the import of an extension module, so a
changed count of ``sys.modules`` (read in constant time) is the signal to inspect again. In a
training that is a few times at the start, while the learners' modules load; then never.
"""

from __future__ import annotations

import sys

from threadpoolctl import ThreadpoolController

__all__ = ["limited_threads", "single_threaded"]

_controller: ThreadpoolController | None = None
_modules_seen = -1  # len(sys.modules) when _controller was made


def _current_controller() -> ThreadpoolController:
    """The controller of the libraries loaded now: made again when modules were imported since
    the last one (module docstring)."""
    global _controller, _modules_seen
    if _controller is None or len(sys.modules) != _modules_seen:
        _controller = ThreadpoolController()
        _modules_seen = len(sys.modules)
    return _controller


def limited_threads(limits: int | None):
    """A context manager limiting BLAS and OpenMP pools to ``limits`` threads (``None``: no
    limit)."""
    return _current_controller().limit(limits=limits)


def single_threaded():
    """A context manager limiting BLAS and OpenMP pools to one thread."""
    return limited_threads(1)
