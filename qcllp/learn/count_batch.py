"""Many :class:`~qcllp.learn.calibration.CountCalibrator` fits at once, each exactly as it
would be fitted alone.

A bootstrap over charges refits the count calibration once per replicate (the lock-out rule:
30 replicates, and 30 more for each of five held-out groups). Every refit is a short L-BFGS-B
run of about a dozen likelihood evaluations, and one evaluation over a hundred charges is a
few hundred small NumPy operations, so their per-call overhead, not the arithmetic, is what a
refit costs. Here the fits run side by side and their evaluations are pooled:

* each fit runs ``CountCalibrator.fit`` unchanged, in a thread of its own, with a likelihood
  that hands its rows' probabilities to a shared :class:`_Pool` and waits;
* once every running fit is waiting, the pool evaluates all their bags in one layout
  (:class:`~qcllp.learn.calibration._CountLayout`) and hands each fit its own bags' values;
* a bag's recursion is element-wise, and a padding row (probability 0) leaves its values
  unchanged, so every fit receives the values it would have computed alone and takes the
  same L-BFGS-B steps (to the last bits of a log or a sum: its parameters agree to about
  1e-14, the lock-out rule's thresholds are the same).

Only one thread computes at a time (the others wait on the pool), so nothing runs in
parallel and no result depends on timing. BLAS and OpenMP pools are held to one thread
meanwhile: L-BFGS-B's vectors have three entries, and on a busy two-core machine its BLAS
threads' waiting cost more CPU than the fits (a third of it, measured).

Why threads rather than a hand-written batched optimizer: scipy's L-BFGS-B stays the
optimizer, with its line search and stopping rules, so the fits are the fits the product has
always made. (A batched projected Newton was tried: at the likelihood's flat shoulder between
slope and ceiling its Hessian is not positive definite for a third of the replicates.)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from qcllp.learn.calibration import CountCalibrator, _CountLayout
from qcllp.learn.core.threads import single_threaded

__all__ = ["fit_count_calibrators"]

Task = tuple[np.ndarray, ...]
"""``(decision, bag_codes, counts)`` of one fit, as :meth:`CountCalibrator.fit` takes them,
and optionally ``keys``: one per bag, equal for bags that hold the same rows (the charge a
bootstrap replicate drew), so that such bags are evaluated once."""


def fit_count_calibrators(
    tasks: Sequence[Task], *, init: CountCalibrator | None = None
) -> list[CountCalibrator]:
    """``CountCalibrator(init.l2, init.ceiling).fit(*task, init=init)`` for every task, with
    their likelihood evaluations pooled (module docstring); the same fits as one by one."""
    settings = (init.l2, init.ceiling) if init is not None else (1e-6, True)
    pool = _Pool(tasks)
    fits: list[CountCalibrator | None] = [None] * len(tasks)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            fits[i] = CountCalibrator(*settings).fit(
                *tasks[i][:3], init=init, likelihood=lambda p, dp: pool.evaluate(i, p, dp)
            )
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)
        finally:
            pool.leave(i)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(tasks))]
    with single_threaded():  # BLAS threads only cost here: L-BFGS-B's vectors have 3 entries
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    return fits  # type: ignore[return-value]


class _Pool:
    """Where the running fits leave their probabilities and get their bags' values back."""

    def __init__(self, tasks: Sequence[Task]):
        self.tasks = tasks
        self.running = set(range(len(tasks)))
        self.waiting: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.ready: dict[int, tuple[np.ndarray, np.ndarray] | BaseException] = {}
        self.condition = threading.Condition()
        self.layout: _PooledLayout | None = None

    def evaluate(self, i: int, p: np.ndarray, dp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fit ``i``'s bags' log-likelihoods and derivatives at its rows' ``p`` and ``dp``."""
        with self.condition:
            self.waiting[i] = (p, dp)
            self._run_if_all_wait()
            self.condition.wait_for(lambda: i in self.ready)
            out = self.ready.pop(i)
        if isinstance(out, BaseException):
            raise out
        return out

    def leave(self, i: int) -> None:
        """Fit ``i`` has ended; the others no longer wait for it."""
        with self.condition:
            self.running.discard(i)
            self._run_if_all_wait()

    def _run_if_all_wait(self) -> None:
        if not self.waiting or len(self.waiting) < len(self.running):
            return
        waiting, self.waiting = self.waiting, {}
        try:
            if self.layout is None or not self.layout.covers(waiting):
                self.layout = _PooledLayout(self.tasks, sorted(waiting))
            self.ready.update(self.layout.evaluate(waiting))
        except BaseException as exc:  # noqa: BLE001 - every waiting fit raises it
            self.ready.update({i: exc for i in waiting})
        self.condition.notify_all()


class _PooledLayout:
    """The bags of some fits in one :class:`_CountLayout` (fit ``i``'s bags at an offset).

    A bag drawn twice by one fit (the same charge in a bootstrap replicate, ``keys`` equal) is
    evaluated once: its rows and probabilities are the same, so is its value. Rebuilt when
    fewer than 2/3 of the fits it holds still run, so a few long fits do not carry the rows of
    many ended ones."""

    def __init__(self, tasks: Sequence[Task], members: list[int]):
        self.members = members
        codes, counts, self.offsets, self.inverse, self.taken = [], [], {}, {}, {}
        self.rows: dict[int, int] = {}
        offset = 0
        for i in members:
            bag_codes, bag_counts, keys = _bags(tasks[i])
            _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
            local = np.full(len(bag_counts), -1)
            local[first] = np.arange(len(first))
            taken = local[bag_codes] >= 0  # the rows of each key's first bag
            codes.append(local[bag_codes[taken]] + offset)
            counts.append(bag_counts[first])
            self.offsets[i], self.inverse[i], self.taken[i] = offset, inverse, taken
            self.rows[i] = int(taken.sum())
            offset += len(first)
        self.layout = _CountLayout(np.concatenate(codes), np.concatenate(counts), offset)

    def covers(self, waiting: dict) -> bool:
        return set(waiting) <= set(self.members) and 3 * len(waiting) >= 2 * len(self.members)

    def evaluate(self, waiting: dict) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Each waiting fit's (values, derivatives); members not waiting get probability 0."""
        m = len(next(iter(waiting.values()))[1])
        p, dp = [], []
        for i in self.members:
            rows = self.rows[i]
            p.append(waiting[i][0][self.taken[i]] if i in waiting else np.zeros(rows))
            dp.append(waiting[i][1][:, self.taken[i]] if i in waiting else np.zeros((m, rows)))
        value, grad = self.layout.logpmf_and_grad(np.concatenate(p), np.concatenate(dp, axis=1))
        out = {}
        for i in waiting:
            bags = self.offsets[i] + self.inverse[i]
            out[i] = (value[bags], np.ascontiguousarray(grad[:, bags]))
        return out


def _bags(task: Task) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A task's bag codes, counts and keys (bags of equal key hold the same rows; without
    keys every bag is its own)."""
    codes = np.asarray(task[1], dtype=np.intp)
    counts = np.asarray(task[2], dtype=float)
    keys = np.asarray(task[3]) if len(task) > 3 else np.arange(len(counts))
    return codes, counts, keys
