"""Benchmarks that compare commits in one session: each run is a process of one source folder
(``--code DIR``, e.g. a ``git worktree`` of another commit; this checkout without one), the
folders alternated run by run so that a slower or busier spell of the machine falls on both
(``bench_step.py``, ``bench_pending.py``; ``bench_training_jobs.py`` and ``bench_demo.py`` run
a folder's CLI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def code_env(code: Path | None) -> dict[str, str]:
    """This process's environment with ``code`` ahead of any ``PYTHONPATH`` (as it is when
    ``None``)."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), *filter(None, [env.get("PYTHONPATH")])])
    return env


def refuse_other_qcllp(code: Path | None, where: str) -> None:
    """Stop the benchmark when a run meant for ``code`` (this checkout when ``None``) imported
    qcllp from ``where`` in another folder: it would have measured other code."""
    if not where.startswith(str(code or ROOT)):
        raise SystemExit(f"a run meant for {code or ROOT} imported qcllp from {where}")


def cli_env(code: Path | None) -> dict[str, str]:
    """The environment of ``code``'s CLI (``python -m qcllp.cli`` run from ``code``, so that
    the current folder's qcllp cannot come first), checked by a process that imports qcllp
    there; ``None``: the installed CLI, this environment as it is."""
    env = code_env(code)
    if code is not None:
        probe = [sys.executable, "-c", "import qcllp; print(qcllp.__file__)"]
        done = subprocess.run(probe, env=env, capture_output=True, text=True, check=True, cwd=code)
        refuse_other_qcllp(code, done.stdout.strip())
    return env


def run_in_code(code: Path | None, script: str, worker_args: Sequence[str]) -> dict:
    """One run of ``script`` with ``worker_args`` in a process of ``code`` (ahead of any
    ``PYTHONPATH``); its result, the JSON of its output's last line. Refused when the run
    imported qcllp from another folder than ``code`` (:func:`refuse_other_qcllp`)."""
    argv = [sys.executable, script, *worker_args]
    done = subprocess.run(argv, env=code_env(code), capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"a run of {code or ROOT} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    refuse_other_qcllp(code, result["qcllp"])
    return result


def alternated(
    codes: Sequence[Path | None], runs: int, run: Callable[[Path | None], dict]
) -> dict[Path | None, list[dict]]:
    """``runs`` results per code, the codes taking turns: ``{code: [result, ...]}``."""
    results: dict[Path | None, list[dict]] = {code: [] for code in codes}
    for _ in range(runs):
        for code in codes:
            results[code].append(run(code))
    return results
