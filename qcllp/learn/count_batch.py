"""Many :class:`~qcllp.learn.calibration.CountCalibrator` fits: the count calibration's
bootstrap refits (the lock-out rule: 30 replicates, and 30 more for each of five held-out
groups), each started from the fit on all charges.

They run one after the other, each ``CountCalibrator.fit`` unchanged (scipy's L-BFGS-B with
its line search and stopping rules), with BLAS and OpenMP pools held to one thread meanwhile:
L-BFGS-B's vectors have three entries, and on a busy two-core machine its BLAS threads'
waiting cost more CPU than the fits (a third of it, measured).

Why one by one: while the likelihood was NumPy vectorized across bags, a fit's evaluation was
a few hundred small array operations, and the fits ran side by side in threads with their
evaluations pooled into one to share that overhead. With the recursion compiled
(:mod:`qcllp.learn.count_kernel`) an evaluation costs in proportion to its bags' rows and
counts, and the pooling's threads, waits and copies cost twice what they saved
(``benchmarks/bench_lockout_rule.py``, docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qcllp.learn.calibration import CountCalibrator
from qcllp.learn.core.threads import single_threaded

__all__ = ["fit_count_calibrators"]

Task = tuple[np.ndarray, ...]
"""``(decision, bag_codes, counts)`` of one fit, as :meth:`CountCalibrator.fit` takes them
(further entries, such as the charge a bootstrap replicate drew per bag, are ignored)."""


def fit_count_calibrators(
    tasks: Sequence[Task], *, init: CountCalibrator | None = None
) -> list[CountCalibrator]:
    """``CountCalibrator(init.l2, init.ceiling).fit(*task, init=init)`` for every task, one
    after the other with BLAS held to one thread (module docstring)."""
    settings = (init.l2, init.ceiling) if init is not None else (1e-6, True)
    with single_threaded():  # BLAS threads only cost here: L-BFGS-B's vectors have 3 entries
        return [CountCalibrator(*settings).fit(*task[:3], init=init) for task in tasks]
