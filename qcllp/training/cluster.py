"""Where a training's parallel parts run: on a Dask cluster (``qcllp train --cluster
tcp://HOST:8786`` and the plant config's ``cluster:``, which the retraining daemon uses too)
or on processes of this machine (``qcllp train --jobs N``, ``training.n_jobs``).

**Why joblib's Dask backend.** The training runs its parallel parts through ``joblib.Parallel``
-- grid points x folds of the bag-aware grid search (whose folds give the out-of-fold
probabilities too), the out-of-fold folds of a method without a grid, the restarts of
the alternating proportion-SVMs, one-vs-rest fits, the k-means labeler's population -- and
pins no backend, so whichever backend the caller's ``joblib.parallel_config`` names runs them:
loky on one machine, Dask's workers on a cluster. :func:`compute_on` only sets that backend
(or the number of local processes) for the duration of a training; :mod:`qcllp.learn` knows
nothing of clusters and imports no Dask.

**The same model.** Every random seed a parallel part needs is drawn in the training process
*before* its tasks are dispatched and travels with its task, and joblib hands the results
back in task order, so a fixed seed gives the same model locally and on any cluster, whatever
the number of workers (``tests/training/test_cluster.py`` checks it on a real cluster), also
with the scheduler inside the training process: no learner draws from Python's global
``random``, which a scheduler's threads share (the k-means labeler's evolution strategy has
a ``random.Random`` of its own fit).

What the backend does, checked on joblib 1.6 / distributed 2026.8 (worker PIDs inside the
tasks, the workers' executed-task counts):

* under ``parallel_config(backend="dask")`` *every* ``Parallel`` call goes to the cluster,
  also ``n_jobs=None`` or ``n_jobs=1``: the backend ignores ``n_jobs`` and uses the cluster's
  total worker threads, so no ``n_jobs=-1`` is needed (or honoured);
* a cluster of **one worker thread in all** gets nothing: joblib sees one "job" and runs the
  tasks sequentially in the training process. Give a lone worker two or more threads
  (``dask worker ADDRESS --nthreads 2``) or start several workers;
* the parts that are not ``Parallel`` calls stay in the training process: reading the
  features, the refit of the chosen parameters (its own restarts still go out), the
  lock-out rule, the registration.

**On this machine** (no cluster) the same ``Parallel`` calls run on ``training.n_jobs``
processes (``qcllp train --jobs``) through joblib's own loky backend, with the same model for
any number. Why processes and not threads: the learners' loops hold the GIL between their
numpy calls (the evolution strategy's operators, the alternating pSVMs' label steps), so
threads would not add a core. ``--method auto`` on the demo plant's cooling (6,647 sticks)
took 66 s on one process and 42 s on two (docs/benchmarks.md, "Training on several cores").

The workers import the learners by name, so they need qcllp and the same versions of numpy,
scikit-learn and DEAP installed (``pip install 'qcllp[dask]'`` on every machine).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import CancelledError
from contextlib import contextmanager
from typing import TYPE_CHECKING

from joblib import parallel_config

from qcllp.plant.config import scheduler_address_problem
from qcllp.training.train import TrainingError

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["CONNECT_TIMEOUT_S", "ClusterError", "compute_on", "connect"]

CONNECT_TIMEOUT_S = 10.0  # a scheduler that does not answer within this is taken as away
INSTALL = "pip install 'qcllp[dask]'"


class ClusterError(TrainingError):
    """Training cannot use the cluster: Dask is not installed, the address is malformed, the
    scheduler cannot be reached or has no workers. A user error: one line, no traceback."""


@contextmanager
def compute_on(
    cluster: str | None, *, n_jobs: int = 1, timeout_s: float | None = None
) -> Iterator[Client | None]:
    """Run the joblib-parallel parts of the block on the Dask cluster at ``cluster``, or on
    ``n_jobs`` processes of this machine.

    ``None``: the parts run on ``n_jobs`` local processes (joblib's default loky backend, or
    the backend of a ``parallel_config`` around the call; -1 one per core); 1 changes nothing
    (joblib's sequential default); yields ``None``.
    An address (``tcp://HOST:PORT``): connects a client (:func:`connect`, ``timeout_s`` as
    there), enters ``joblib.parallel_config(backend="dask")`` with it for the block, yields the
    client and closes it afterwards, also when the block fails. A scheduler lost during the
    block (its tasks cancelled, the client reconnecting) ends it with :class:`ClusterError`, one
    line, instead of Dask's cancelled future.
    """
    if n_jobs == 0 or n_jobs < -1:
        raise ValueError(f"n_jobs must be 1, 2, ... or -1 (one per core), got {n_jobs}")
    if cluster is None:
        if n_jobs == 1:
            yield None
            return
        with parallel_config(n_jobs=n_jobs):  # joblib's default backend: loky, or the caller's
            yield None
        return
    client = connect(cluster, timeout_s=timeout_s)
    try:
        with parallel_config(backend="dask", client=client):
            yield client
    except (CancelledError, OSError) as exc:
        if client.status == "running":  # the cluster is fine: not its error
            raise
        raise ClusterError(
            f"lost the Dask scheduler at {cluster.strip()} during training "
            f"({type(exc).__name__}); the training in progress was not registered: train "
            "again once the scheduler is back"
        ) from exc
    finally:
        client.close()


def connect(address: str, *, timeout_s: float | None = None) -> Client:
    """A ``distributed.Client`` of the scheduler at ``address`` that has at least one worker.

    Raises :class:`ClusterError` with one line naming the address and the cause when Dask is
    not installed, the address is malformed, the scheduler does not answer within
    ``timeout_s`` or no worker joins it within ``timeout_s`` (joblib would otherwise wait and
    fail with a message about its own settings). ``timeout_s``: default
    :data:`CONNECT_TIMEOUT_S`.
    """
    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    problem = scheduler_address_problem(address)
    if problem is not None:
        raise ClusterError(f"the cluster {problem}")
    address = address.strip()
    try:
        from distributed import Client
    except ImportError as exc:
        raise ClusterError(
            f"training on the Dask cluster at {address} needs Dask: {INSTALL} "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    try:
        client = Client(address, timeout=timeout_s, set_as_default=False)
    except OSError as exc:  # distributed's connect timeout is an OSError, its causes too
        raise ClusterError(
            f"cannot reach the Dask scheduler at {address}: {_cause(exc, timeout_s)} "
            "(is it running, and is the address right?)"
        ) from exc
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except TimeoutError as exc:
        client.close()
        raise ClusterError(
            f"the Dask scheduler at {address} has no workers after {timeout_s:g} s "
            f"(start some: dask worker {address})"
        ) from exc
    return client


def _cause(exc: BaseException, timeout_s: float) -> str:
    """Why a connection failed, in a few words: the innermost operating-system error
    (connection refused, unknown host), else that nothing answered in time."""
    reason = f"no answer within {timeout_s:g} s"
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            reason = f"{current.strerror.lower()}; gave up after {timeout_s:g} s"
        current = current.__cause__ or current.__context__
    return reason
