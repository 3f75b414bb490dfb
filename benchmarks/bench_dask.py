"""Training's parallel parts on a Dask cluster (joblib's Dask backend) against this process.

Two workloads on one simulated station of the example plant (``plant_config/example.yaml``,
``--charges`` charges, default 100: about 5,000 sticks x 69 features at cooling), built as
``qcllp train`` builds them (:func:`qcllp.features.build_station_features`,
:func:`qcllp.training.train.labeled_from_frames`), target: any defect (the charges' failing
shares):

* ``kmeans``: one :class:`qcllp.learn.KMeansLabeler` fit with population size 50
  (``psize=50``; otherwise the ``kmeans-labeler`` method's settings, 16 clusters): every
  generation scores its population as one ``joblib.Parallel`` call of k-means runs;
* ``grid``: the alter-psvm ``BagGridSearchCV`` of ``qcllp train --method alter-psvm`` (the
  example config's grid, 6 points x 5 charge folds, each fit with 3 random restarts, then the
  refit on all charges), as :func:`qcllp.training.train.search_parameters` runs it.

Each runs here (no cluster: joblib's default, ``n_jobs=None``, i.e. one after the other in
this process) and under :func:`qcllp.training.cluster.compute_on` on a ``LocalCluster`` of 1
and of 2 worker processes (one thread each), ``--repeats`` times (median; default 3). The
cluster runs in a child process, as a plant's scheduler runs elsewhere: a scheduler inside the
training process would change the k-means labeler's model (:mod:`qcllp.training.cluster`);
the workers import the learners before the first run (a plant's workers are long-running).

The table gives per workload and setting: the wall seconds (median, and each run), the ratio
to this process in the same run, the CPU seconds of all processes involved (this one, the
workers, the scheduler: the work plus the cluster's overhead, a figure that a busy machine
does not distort as it does the wall time), how many tasks the workers executed per run, and
whether the model is the one trained here (the same probabilities on the training sticks to
1e-12 and, for the search, the same chosen parameters). A cluster of one worker thread in all
executes nothing: joblib sees one job and runs the tasks in this process
(:mod:`qcllp.training.cluster`). Run it with ``OMP_NUM_THREADS=1``, as the workers run (their
nannies set it): otherwise the comparison is of BLAS threading too.

    OMP_NUM_THREADS=1 python benchmarks/bench_dask.py
    OMP_NUM_THREADS=1 python benchmarks/bench_dask.py --parts grid --repeats 1
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from distributed import Client
from sklearn.linear_model import LogisticRegression

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qcllp.features import build_station_features  # noqa: E402
from qcllp.learn import KMeansLabeler  # noqa: E402
from qcllp.plant.config import load_plant_config  # noqa: E402
from qcllp.plant.simulate import simulate_plant  # noqa: E402
from qcllp.training.cluster import compute_on  # noqa: E402
from qcllp.training.train import (  # noqa: E402
    LabeledData,
    labeled_from_frames,
    search_parameters,
    training_plan,
)

CONFIG = ROOT / "plant_config" / "example.yaml"
PSIZE = 50
SERVE_CLUSTER = """
import sys
from distributed import LocalCluster
with LocalCluster(
    n_workers=int(sys.argv[1]), processes=True, threads_per_worker=1, dashboard_address=":0"
) as cluster:
    print(cluster.scheduler_address, flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
"""


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def station_data(charges: int, station: str, seed: int) -> LabeledData:
    config = load_plant_config(CONFIG)
    plant = simulate_plant(config, charges, random_state=seed)
    features = build_station_features(plant.readings, config, station)
    return labeled_from_frames(
        config, station, features, plant.defect_counts.set_index("charge_id")
    )


def kmeans_fit(data: LabeledData) -> Callable[[], np.ndarray]:
    """One KMeansLabeler fit (psize 50); returns its probabilities on the training sticks."""
    X, bags, shares = data.features.X, data.bags, data.failing_shares

    def run() -> np.ndarray:
        labeler = KMeansLabeler(
            n_clusters=16,
            maxgen=2,
            psize=PSIZE,
            scale="standard",
            labeling="greedy",
            final_estimator=LogisticRegression(max_iter=1000),
            final_target="composition",
            random_state=0,
        ).fit(X, bags, shares)
        return labeler.predict_proba(X)[:, 1]

    return run


def grid_search(data: LabeledData) -> Callable[[], tuple[np.ndarray, str]]:
    """The alter-psvm grid search of ``qcllp train``; returns the refitted model's
    probabilities on the training sticks and the chosen parameters."""
    config = load_plant_config(CONFIG)
    plan = training_plan(config, data.features.station, method_name="alter-psvm")
    folds = plan.folds_for(data.n_charges)

    def run() -> tuple[np.ndarray, str]:
        found = search_parameters(plan, data, folds)
        return found.estimator.predict_proba(data.features.X)[:, 1], repr(found.params)

    return run


@contextmanager
def local_cluster(n_workers: int) -> Iterator[str]:
    """A ``LocalCluster`` of ``n_workers`` processes (one thread each) in a child process;
    its scheduler's address."""
    serve = subprocess.Popen(
        [sys.executable, "-c", SERVE_CLUSTER, str(n_workers)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        address = serve.stdout.readline().strip()
        if not address.startswith("tcp://"):
            raise RuntimeError(f"the LocalCluster did not start (exit {serve.poll()})")
        yield address
    finally:
        serve.stdin.close()
        serve.wait(timeout=60)


def warm_up() -> None:
    """Import the learners on a worker (``Client.run``): the workers of a plant's cluster are
    long-running, so the first import is not part of a training."""
    import qcllp.learn  # noqa: F401
    import qcllp.training.methods  # noqa: F401


def process_cpu_s() -> float:
    """CPU seconds of the calling process so far (run on a worker or the scheduler)."""
    import psutil

    times = psutil.Process().cpu_times()
    return times.user + times.system


@dataclass
class Counts:
    """What the cluster did so far: tasks its workers executed, CPU seconds of its workers and
    scheduler."""

    tasks: int = 0
    cluster_cpu_s: float = 0.0

    @classmethod
    def of(cls, client: Client | None) -> Counts:
        if client is None:
            return cls()
        tasks = client.run(lambda dask_worker: dask_worker.state.executed_count)
        cpu = client.run(process_cpu_s)
        return cls(sum(tasks.values()), sum(cpu.values()) + client.run_on_scheduler(process_cpu_s))


@dataclass
class Timing:
    seconds: list[float]
    cpu_s: list[float]  # this process + the cluster's processes
    tasks: list[int]
    result: object

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)


def timed(run: Callable, cluster: str | None, counter: Client | None, repeats: int) -> Timing:
    """``repeats`` runs of ``run`` under ``compute_on(cluster)``: wall and CPU seconds, tasks
    the workers executed, and the last run's result."""
    timing = Timing([], [], [], None)
    for _ in range(repeats):
        with compute_on(cluster):
            before = Counts.of(counter)
            cpu, started = time.process_time(), time.perf_counter()
            timing.result = run()
            timing.seconds.append(time.perf_counter() - started)
            cpu = time.process_time() - cpu
            after = Counts.of(counter)
        timing.cpu_s.append(cpu + after.cluster_cpu_s - before.cluster_cpu_s)
        timing.tasks.append(after.tasks - before.tasks)
    return timing


def same(result, reference) -> bool:
    if isinstance(result, tuple):
        return same(result[0], reference[0]) and result[1] == reference[1]
    return bool(np.allclose(result, reference, rtol=0, atol=1e-12))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charges", type=int, default=100)
    parser.add_argument("--station", default="cooling")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", nargs="+", default=["kmeans", "grid"])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    data = station_data(args.charges, args.station, args.seed)
    X = data.features.X
    say(f"{args.station}: {data.n_charges} charges, {X.shape[0]:,} sticks x {X.shape[1]} features")
    parts = {
        "kmeans": ("KMeansLabeler fit, psize 50", kmeans_fit),
        "grid": ("alter-psvm grid search", grid_search),
    }
    rows = []
    for part in args.parts:
        title, build = parts[part]
        run = build(data)
        say(f"{part}: here")
        here = timed(run, None, None, args.repeats)
        rows.append((title, "here (no cluster)", here, here))
        for n in args.workers:
            with (
                local_cluster(n) as address,
                Client(address, set_as_default=False) as counter,
            ):
                say(f"{part}: LocalCluster of {n} worker(s)")
                counter.run(warm_up)
                rows.append(
                    (
                        title,
                        f"{n} worker{'s' if n > 1 else ''}",
                        timed(run, address, counter, args.repeats),
                        here,
                    )
                )

    print(
        f"\n{args.station}, {data.n_charges} charges, {X.shape[0]:,} sticks x {X.shape[1]} "
        f"features; median of {args.repeats} runs\n"
    )
    print(
        "| workload | where | wall s | runs s | wall vs here | CPU s, all processes "
        "| tasks on workers | same model |"
    )
    print("|---|---|---:|---|---:|---:|---:|---|")
    for title, where, t, ref in rows:
        spread = " / ".join(f"{s:.1f}" for s in t.seconds)
        print(
            f"| {title} | {where} | {t.median_s:.1f} | {spread} | {ref.median_s / t.median_s:.2f}x "
            f"| {statistics.median(t.cpu_s):.1f} | {statistics.median(t.tasks):,.0f} | "
            f"{'yes' if same(t.result, ref.result) else 'NO'} |"
        )


if __name__ == "__main__":
    main()
