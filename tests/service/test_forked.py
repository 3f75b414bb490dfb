"""The harness's forked processes (:mod:`tests.service.forked`) behave as processes started from
scratch where the tests look: their own environment, folder and log, the exit code of their
``main``, ``-9`` after a SIGKILL; a process whose environment a library may read at import is
started from scratch."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

import pytest

from tests.plant.conftest import EXAMPLE
from tests.service.forked import ForkedProcess, forkable, run_qcllp, start_process

ENV = dict(os.environ)
pytestmark = pytest.mark.skipif(
    bool(os.environ.get("QCLLP_TESTS_EXEC")), reason="QCLLP_TESTS_EXEC: no process is forked"
)


def test_a_forked_process_runs_the_cli_in_its_own_folder_environment_and_log(tmp_path):
    missing = tmp_path / "nowhere.yaml"
    log = tmp_path / "status.log"
    proc = start_process(
        "qcllp.cli",
        ["status"],
        cwd=tmp_path,
        env={**ENV, "QCLLP_CONFIG": str(missing)},
        log=log,
    )
    assert isinstance(proc, ForkedProcess) and proc.pid != os.getpid()
    assert log.exists()  # there on return, as Popen's caller opens it first
    assert proc.wait(timeout=60) == 1
    text = log.read_text()
    assert str(missing) in text and "Traceback" not in text, text

    here = tmp_path / "here"  # the default config is relative: found in the process's folder
    (here / "plant_config").mkdir(parents=True)
    (here / "plant_config" / "example.yaml").write_text("stations: [\n")
    environment = {k: v for k, v in ENV.items() if k != "QCLLP_CONFIG"}
    proc = start_process("qcllp.cli", ["status"], cwd=here, env=environment, log=log)
    assert proc.wait(timeout=60) == 1
    assert "plant_config/example.yaml" in log.read_text(), log.read_text()


def test_a_killed_forked_process_says_minus_9_and_its_cpu_is_counted(tmp_path):
    from tests.service import forked

    before = forked.reaped_cpu_s()
    proc = start_process(
        "qcllp.cli", ["serve", "--help"], cwd=tmp_path, env=ENV, log=tmp_path / "help.log"
    )
    assert proc.wait(timeout=60) == 0 and "scorer" in (tmp_path / "help.log").read_text()
    proc = start_process(
        "qcllp.cli",
        idle_scorer(tmp_path),
        cwd=tmp_path,
        env=ENV,
        log=tmp_path / "scorer.log",
    )
    assert proc.poll() is None  # running (one without a config exited before the kill at times)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL and proc.poll() == -signal.SIGKILL
    assert forked.reaped_cpu_s() > before


def test_an_environment_a_library_may_read_at_import_starts_from_scratch(tmp_path):
    assert forkable("qcllp.cli", {**ENV, "QCLLP_DB_PASSWORD": "x"})
    assert not forkable("qcllp.cli", {**ENV, "OMP_NUM_THREADS": "1"})
    assert not forkable("tests.service.sink_hold", ENV)
    proc = start_process(
        "qcllp.cli",
        ["--help"],
        cwd=tmp_path,
        env={**ENV, "PYTHONPATH": str(tmp_path)},
        log=tmp_path / "help.log",
    )
    assert isinstance(proc, subprocess.Popen) and proc.wait(timeout=60) == 0


def test_a_command_run_to_its_end_gives_stdout_and_stderr_apart_and_is_killed_at_its_timeout(
    tmp_path,
):
    from tests.service import forked

    before = forked.reaped_cpu_s()
    done = run_qcllp(["--config", str(tmp_path / "none.yaml"), "status"], cwd=tmp_path)
    assert forked.reaped_cpu_s() > before  # forked, not started from scratch
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.startswith("error: ") and "none.yaml" in done.stderr, done.stderr
    helped = run_qcllp(["--help"], cwd=tmp_path)
    assert helped.returncode == 0 and "Usage:" in helped.stdout and helped.stderr == ""

    with pytest.raises(subprocess.TimeoutExpired):
        run_qcllp(idle_scorer(tmp_path), cwd=tmp_path, timeout=1.0)
    assert running_in(tmp_path) == []  # killed and reaped, nothing left running


def idle_scorer(folder) -> list[str]:  # noqa: ANN001 - a path
    """The arguments of a scorer that runs until it is killed: the example plant on a new
    database in ``folder`` (made here), without a model, so it polls for ever."""
    db = f"sqlite:///{folder / 'plant.sqlite'}"
    assert run_qcllp(["--config", str(EXAMPLE), "--db", db, "init"], cwd=folder).returncode == 0
    return ["--config", str(EXAMPLE), "--db", db, "serve", "scorer", "--station", "cooling"]


def running_in(folder) -> list[int]:  # noqa: ANN001 - a path
    """The pids of the processes whose working folder is ``folder`` (a forked child's command
    line is its zygote's, so this finds it where ``pgrep -f`` would not)."""
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and os.readlink(f"/proc/{entry}/cwd") == str(folder):
                found.append(int(entry))
    return found


def test_stdout_and_stderr_share_one_log_without_overwriting_each_other(tmp_path):
    from tests.service.forked import _fork

    (tmp_path / "both_streams.py").write_text(
        "import sys\n"
        "for n in range(3):\n"
        "    print(f'out {n}', flush=True)\n"
        "    print(f'err {n}', file=sys.stderr, flush=True)\n"
    )
    log = tmp_path / "both.log"
    proc = _fork("both_streams", [], cwd=tmp_path, env=ENV, log=log)  # found in its folder
    assert proc.wait(timeout=60) == 0
    assert log.read_text().splitlines() == ["out 0", "err 0", "out 1", "err 1", "out 2", "err 2"]
