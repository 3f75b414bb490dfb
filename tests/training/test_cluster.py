"""Training on a Dask cluster (``qcllp train --cluster``, the config's ``cluster:``): on a real
``LocalCluster`` of two worker processes the model is the one trained here for the same seed
and the work ran on the workers; the daemon trains on the config's cluster; an unreachable
scheduler is one line of error, from the command and in the daemon's events."""

from __future__ import annotations

import ast
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from distributed import Client, LocalCluster
from sklearn.base import clone

from qcllp.cli import main
from qcllp.features import station_features
from qcllp.learn import KMeansLabeler
from qcllp.plant.config import ConfigError, Training, parse_plant_config
from qcllp.retraining.retrain import retrain_station
from qcllp.station.registry import load_model
from qcllp.store import Store
from qcllp.store.events import events
from qcllp.training import cluster as cluster_module
from qcllp.training.cluster import ClusterError, compute_on
from qcllp.training.train import TrainingError, labeled_data, train_station

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "plant_config" / "example.yaml"


# The cluster runs in a child process, as a plant's scheduler runs on its own machine: this
# process holds only clients. A scheduler inside the training process draws from Python's global
# ``random`` in its threads, which the k-means labeler's DEAP operators draw from too (seeded
# per fit), so there its evolved model would depend on the scheduler's timing.
SERVE_CLUSTER = """
import sys
from distributed import LocalCluster
with LocalCluster(
    n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
) as cluster:
    print(cluster.scheduler_address, flush=True)
    sys.stdin.read()  # until the tests close our stdin
"""


def serve_cluster() -> tuple[subprocess.Popen, str]:
    """A ``LocalCluster`` of two worker processes of one thread each in a child process of its
    own session (so its workers can be killed with it), and its scheduler's address
    (``dashboard_address ":0"``: its HTTP server on a free port, not 8787)."""
    serve = subprocess.Popen(
        [sys.executable, "-c", SERVE_CLUSTER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True,
    )
    address = serve.stdout.readline().strip()
    assert address.startswith("tcp://"), f"the cluster did not start (exit {serve.poll()})"
    return serve, address


def stop_cluster(serve: subprocess.Popen) -> None:
    serve.stdin.close()
    try:
        serve.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(serve.pid, signal.SIGKILL)
        serve.wait()


@pytest.fixture(scope="module")
def dask_cluster():
    """A cluster (:func:`serve_cluster`) for the module, and a client of our own to count the
    tasks its workers ran."""
    serve, address = serve_cluster()
    try:
        with Client(address, set_as_default=False) as client:
            yield address, client
    finally:
        stop_cluster(serve)


def tasks_run_on_workers(client: Client) -> int:
    """How many tasks the cluster's workers have executed so far (not counting ``run``)."""
    counts = client.run(lambda dask_worker: dask_worker.state.executed_count)
    assert len(counts) == 2
    return sum(counts.values())


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def quick_timeout(monkeypatch):
    """Give up on a scheduler after 1 s instead of 10, in this process."""
    monkeypatch.setattr(cluster_module, "CONNECT_TIMEOUT_S", 1.0)


# ----------------------------------------------------------------------------- same model
@pytest.mark.slow  # 20 s: a whole station trained twice; the task-level tests below stay
def test_a_station_trained_on_the_cluster_is_the_model_trained_here(
    history_plant, tmp_path, dask_cluster
):
    address, client = dask_cluster
    url = history_plant.copy_to(tmp_path)
    config = replace(
        history_plant.config,
        training=Training(
            default_method="alter-psvm",  # random restarts: seeds that must not depend on where
            methods={"alter-psvm": {"C": [0.1, 1.0]}},
            cv=2,
            bootstrap=5,
        ),
    )
    with Store.open(url) as store:
        here = load_model(store, train_station(store, config, "rolling", random_state=3).model_id)
        before = tasks_run_on_workers(client)
        with compute_on(address) as connected:
            assert connected is not None and connected.status == "running"
            remote_id = train_station(store, config, "rolling", random_state=3).model_id
        ran = tasks_run_on_workers(client) - before
        remote = load_model(store, remote_id)
        X = station_features(store, config, "rolling").X
    # per defect type (3) a grid of 2 points x 2 folds went out, and each fit's restarts
    assert ran >= 3 * 2 * 2, f"only {ran} tasks ran on the workers"
    assert connected.status == "closed"  # the client is closed after the block
    np.testing.assert_allclose(
        remote.model.failure_probability(X), here.model.failure_probability(X), rtol=0, atol=1e-12
    )
    assert remote.model.params == here.model.params
    assert remote.model.threshold == pytest.approx(here.model.threshold, abs=1e-12)


def test_a_k_means_labeler_evolved_on_the_cluster_is_the_one_evolved_here(
    history_plant, dask_cluster
):
    address, client = dask_cluster
    with Store.open(history_plant.url) as store:
        data = labeled_data(store, history_plant.config, "rolling")
    X, bags, shares = data.features.X, data.bags, data.failing_shares
    labeler = KMeansLabeler(n_clusters=8, maxgen=3, psize=10, scale="standard", random_state=5)
    here = clone(labeler).fit(X, bags, shares)
    before = tasks_run_on_workers(client)
    with compute_on(address):
        remote = clone(labeler).fit(X, bags, shares)
    assert tasks_run_on_workers(client) - before >= 10  # the first population at least
    np.testing.assert_array_equal(remote.fitness_history_, here.fitness_history_)
    np.testing.assert_array_equal(remote.weights_, here.weights_)
    np.testing.assert_array_equal(remote.predict_proba(X), here.predict_proba(X))


def test_the_retraining_daemon_trains_on_the_configs_cluster(retrain_plant, tmp_path, dask_cluster):
    address, client = dask_cluster
    store = retrain_plant.copy_to(tmp_path)
    before = tasks_run_on_workers(client)
    outcome = retrain_station(store, replace(retrain_plant.config, cluster=address), "rolling")
    store.close()
    assert outcome.outcome == "promoted", outcome.reason
    assert tasks_run_on_workers(client) - before >= 3 * 2  # 3 types x (1 grid point x 2 folds)


# ----------------------------------------------------------------------------- errors
@pytest.mark.slow  # a real process waits out the 10 s connect timeout
def test_qcllp_train_on_an_unreachable_scheduler_exits_1_with_one_line(tmp_path):
    """A real process: --cluster wins over the config's cluster, the error is one line."""
    in_config, given = f"tcp://127.0.0.1:{closed_port()}", f"tcp://127.0.0.1:{closed_port()}"
    config = tmp_path / "plant.yaml"
    config.write_text(EXAMPLE.read_text() + f"\ncluster: {in_config}\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "qcllp.cli", "--config", str(config), "train"]
        + ["--db", f"sqlite:///{tmp_path / 'plant.sqlite'}", "--cluster", given],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: cannot reach the Dask scheduler at {given}: ")
    assert "is it running" in lines[0] and in_config not in lines[0]
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_qcllp_train_uses_the_configs_cluster_when_none_is_given(tmp_path, quick_timeout):
    address = f"tcp://127.0.0.1:{closed_port()}"
    config = tmp_path / "plant.yaml"
    config.write_text(EXAMPLE.read_text() + f"\ncluster: {address}\n")
    db = f"sqlite:///{tmp_path / 'plant.sqlite'}"
    result = CliRunner().invoke(main, ["--config", str(config), "--db", db, "train"])
    assert result.exit_code == 1
    assert f"cannot reach the Dask scheduler at {address}" in result.stderr
    assert result.stderr.count("\n") == 1


def test_an_unreachable_scheduler_fails_the_daemons_training_with_the_reason(
    retrain_plant, tmp_path, quick_timeout
):
    address = f"tcp://127.0.0.1:{closed_port()}"
    store = retrain_plant.copy_to(tmp_path)
    outcome = retrain_station(store, replace(retrain_plant.config, cluster=address), "rolling")
    failed = events(store, ["trained"], station="rolling")
    store.close()
    assert outcome.outcome == "failed"
    assert f"cannot reach the Dask scheduler at {address}" in outcome.reason
    assert [(e["outcome"], e["reason"]) for e in failed] == [("failed", outcome.reason)]


@pytest.mark.slow
def test_a_scheduler_killed_mid_training_ends_it_with_one_line():
    """kill -9 of the scheduler and its workers while tasks run: not Dask's cancelled future,
    but the one line that names the lost scheduler (and nothing registered by the block)."""
    from joblib import Parallel, delayed

    serve, address = serve_cluster()
    started = threading.Event()

    def kill_when_running() -> None:
        started.wait(60)
        time.sleep(1.0)
        os.killpg(serve.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_when_running, daemon=True)
    killer.start()
    lost = pytest.raises(ClusterError, match=f"^lost the Dask scheduler at {address} during")
    try:
        with lost as caught, compute_on(address):
            started.set()
            Parallel()(delayed(time.sleep)(0.2) for _ in range(200))  # 20 s of work on 2
    finally:
        killer.join(10)
        serve.wait(10)
    assert "\n" not in str(caught.value)


def test_a_scheduler_without_workers_is_named_as_such(quick_timeout):
    with LocalCluster(n_workers=0, protocol="tcp", dashboard_address=":0") as empty:
        address = empty.scheduler_address
        no_workers = pytest.raises(ClusterError, match=f"scheduler at {address} has no workers")
        with no_workers, compute_on(address):
            pass


def test_without_dask_installed_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    install = pytest.raises(ClusterError, match=r"pip install 'qcllp\[dask\]'")
    with install, compute_on("tcp://127.0.0.1:8786"):
        pass


def test_no_cluster_leaves_joblib_as_it_is():
    from joblib.parallel import get_active_backend

    before = type(get_active_backend()[0])
    with compute_on(None) as client:
        assert client is None and type(get_active_backend()[0]) is before


def test_cluster_errors_are_training_errors_so_front_ends_print_one_line():
    assert issubclass(ClusterError, TrainingError)


def test_no_code_pins_a_joblib_backend_and_the_learners_know_no_dask():
    """Any joblib backend must serve: no ``Parallel(backend=...)``, no local backend named in a
    ``parallel_config``; and :mod:`qcllp.learn` imports no Dask."""
    pinned, learn_imports = [], []
    for path in sorted((ROOT / "qcllp").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                values = [k.value for k in node.keywords if k.arg == "backend"] + node.args[:1]
                named = [v.value for v in values if isinstance(v, ast.Constant)]
                if (name == "Parallel" and any(k.arg == "backend" for k in node.keywords)) or (
                    name in ("parallel_config", "parallel_backend")
                    and set(named) & {"loky", "multiprocessing", "threading", "sequential"}
                ):
                    pinned.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if "learn" in path.parts and isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] in ("dask", "distributed") for n in names):
                    learn_imports.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert pinned == [] and learn_imports == []


# ----------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "value", ["localhost:8786", "tcp://scheduler", "http://host:8786", "tcp://host:99999", 8786]
)
def test_the_cluster_key_must_be_a_scheduler_address(tiny_config, value):
    raw = _tiny_plant(cluster=value)
    with pytest.raises(ConfigError) as error:
        parse_plant_config(raw, source="plant.yaml")
    assert len(error.value.errors) == 1
    assert error.value.errors[0].startswith("plant.yaml: cluster: must be a Dask scheduler") or (
        error.value.errors[0].startswith("plant.yaml: cluster: port must be 1..65535")
    )


def test_the_cluster_key_is_optional_and_kept(tiny_config):
    assert tiny_config.cluster is None
    parsed = parse_plant_config(_tiny_plant(cluster=" tcp://10.0.0.5:8786 "))
    assert parsed.cluster == "tcp://10.0.0.5:8786"
    assert parse_plant_config(_tiny_plant(cluster=None)).cluster is None


def _tiny_plant(**extra) -> dict:
    from tests.conftest import TINY_PLANT

    return {**TINY_PLANT, **extra}
