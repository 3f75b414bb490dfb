"""Service processes forked from a preloaded interpreter (:mod:`tests.service.zygote`), behind
the part of :class:`subprocess.Popen` the harness uses (``pid``, ``poll``, ``wait``,
``returncode``).

One zygote per pytest worker, started on first use and stopped (and reaped, so its children's
CPU is counted) when the worker exits. Processes that need what a fork cannot give -- another
module's ``PYTHONPATH``, a thread setting read when a library loads -- are started from
scratch: :func:`forkable` says which, :func:`start_process` starts either, and
:func:`run_qcllp` runs a CLI command to its end (the tests' ``qcllp ...`` helpers).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "ForkedProcess",
    "forkable",
    "read_line",
    "reaped_cpu_s",
    "run_qcllp",
    "start_process",
]

ROOT = Path(__file__).resolve().parents[2]
ZYGOTE_READY_S = 120.0  # its imports: a few seconds, more on a loaded machine
_zygote: dict[str, object] = {}
_reaped_cpu = [0.0]


def start_process(
    module: str, args: list[str], *, cwd: Path, env: dict[str, str], log: Path
) -> subprocess.Popen | ForkedProcess:
    """``python -m module args`` in ``cwd`` with exactly ``env``, stdout and stderr to ``log``
    (created or truncated): forked from the worker's zygote where :func:`forkable`, else
    started from scratch."""
    if forkable(module, env):
        return _fork(module, args, cwd=cwd, env=env, log=log)
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
        )


def run_qcllp(
    args: list[str], *, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess:
    """``subprocess.run([python, "-m", "qcllp.cli", *args], capture_output=True, text=True)``
    in ``cwd`` with ``env`` (default: this process's): a command run to its end, forked from
    the worker's zygote where :func:`forkable` (stdout and stderr through files of their
    own), else started from scratch. A command still running after ``timeout`` is killed and
    :class:`subprocess.TimeoutExpired` raised, as ``subprocess.run`` does."""
    env = dict(os.environ if env is None else env)
    command = [sys.executable, "-m", "qcllp.cli", *args]
    if not forkable("qcllp.cli", env):
        return subprocess.run(
            command, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
        )
    with tempfile.TemporaryDirectory(prefix="qcllp-run-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        proc = _fork("qcllp.cli", args, cwd=cwd, env=env, log=out, err=err)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        return subprocess.CompletedProcess(command, code, out.read_text(), err.read_text())


def forkable(module: str, env: Mapping[str, str]) -> bool:
    """Whether a process of ``module`` with the environment ``env`` may be forked: the qcllp
    CLI, ``QCLLP_TESTS_EXEC`` unset, and no variable other than in the zygote's environment
    but qcllp's own (read when a command runs, never at import) and pytest's (which names the
    running test) -- a library may read the others when it loads (``OMP_NUM_THREADS``,
    ``PYTHONPATH``, ...)."""
    if os.environ.get("QCLLP_TESTS_EXEC") or module != "qcllp.cli":
        return False
    base = _zygote.get("env", os.environ)
    differ = {key for key in {*base, *env} if base.get(key) != env.get(key)}
    return all(key.startswith(("QCLLP_", "PYTEST_")) for key in differ)


class ForkedProcess:
    """A child of the zygote, as the harness sees a ``Popen``: its exit status arrives on the
    socket the request was made on, once the zygote has reaped it."""

    def __init__(self, conn: socket.socket, pid: int):
        self._conn, self.pid = conn, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._conn], [], [], 0)[0]:
            self._read_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._conn], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout)
            self._read_status()
        return self.returncode

    def _read_status(self) -> None:
        code, cpu = read_line(self._conn).split()
        self._conn.close()
        self.returncode = int(code)
        _reaped_cpu[0] += float(cpu)


def reaped_cpu_s() -> float:
    """CPU seconds of the forked processes whose exit this worker has read: what
    ``RUSAGE_CHILDREN`` counts for the processes it started from scratch."""
    return _reaped_cpu[0]


def _fork(
    module: str,
    args: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    log: Path,
    err: Path | None = None,
) -> ForkedProcess:
    """:func:`start_process` by the worker's zygote, stderr to ``err`` if given, else with
    stdout to ``log``; the files are there (empty) on return, as ``Popen``'s caller opens
    them before the start."""
    for path in filter(None, (log, err)):
        path.write_bytes(b"")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(_zygote_socket())
    request = {"module": module, "args": args, "cwd": str(cwd), "env": env, "log": str(log)}
    request["err"] = None if err is None else str(err)
    conn.sendall((json.dumps(request) + "\n").encode())
    return ForkedProcess(conn, int(read_line(conn)))


def read_line(conn: socket.socket) -> str:
    """One line of the zygote's protocol (the zygote reads its requests with it too)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("the socket closed mid-line (the zygote: see its log)")
        data += chunk
    return data.decode()


def _zygote_socket() -> str:
    """The worker's zygote's socket, the zygote started first if it is not running."""
    proc = _zygote.get("proc")
    if isinstance(proc, subprocess.Popen) and proc.poll() is None:
        return str(_zygote["socket"])
    folder = Path(tempfile.mkdtemp(prefix="qcllp-zygote-"))
    path, log = folder / "zygote.sock", folder / "zygote.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.service.zygote", str(path)],
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=ROOT,
        )
    ready, _, _ = select.select([proc.stdout], [], [], ZYGOTE_READY_S)
    if not ready or proc.stdout.readline() != b"ready\n":
        proc.kill()
        raise RuntimeError(f"the test zygote did not start: {log.read_text()[-3000:]}")
    _zygote.update(proc=proc, socket=path, env=dict(os.environ))
    atexit.register(_stop_zygote, proc, folder)
    return str(path)


def _stop_zygote(proc: subprocess.Popen, folder: Path) -> None:
    """Stop the zygote and wait for it (its children's CPU then counts in this process's
    ``RUSAGE_CHILDREN``); remove its socket and log."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    shutil.rmtree(folder, ignore_errors=True)
