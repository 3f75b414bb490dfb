"""A preloaded interpreter that forks the tests' service processes: ``python -m
tests.service.zygote SOCKET``.

Half of the default suite's CPU was in the processes its tests start, and most of each start
was importing the same libraries again (pandas, SQLAlchemy, scikit-learn, skops' trust list:
about 3 s of CPU a scorer; ``benchmarks/bench_model_load.py``, docs/benchmarks.md, "The test
suite's CPU"). This process imports them once, then forks a child per request, which runs
``python -m <module> <args>`` from there: a real process with its own pid, signals, log file,
working folder and environment, running the very same ``main`` -- only its imports were done
before the fork, as a forkserver's or a pre-forking server's are. The tests' harness
(:mod:`tests.service.harness`) asks for a child over a Unix socket, gets its pid, and later its
exit status (``Popen.returncode``'s convention: ``-signal`` when killed); this process is the
child's parent and reaps it, and says how much CPU it used.

It forks while single-threaded in Python (OpenBLAS's own threads are shut down and restarted
around a fork by its ``pthread_atfork`` handlers), before any logging, database engine, event
loop or thread pool exists, and it exits when the pytest worker that started it is gone.
``QCLLP_TESTS_EXEC=1`` makes the harness start every process from scratch instead.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import socket
import sys

from tests.service.forked import read_line

# what the service processes import: the CLI, the four services, a model's load (skops'
# trust list, built at its import) and a training (the retraining daemon trains)
PRELOAD = (
    "qcllp.cli",
    "qcllp.cli.serve",
    "qcllp.service.scorer",
    "qcllp.service.retrainer",
    "qcllp.service.mqtt.intake",
    "qcllp.service.bay",
    "qcllp.station.registry",
    "qcllp.training",
    "skops.io",
)
REAP_EVERY_S = 0.02


def serve(path: str) -> dict:
    """Answer requests on the Unix socket ``path`` until the parent is gone; returns only in
    a forked child, with its request (one JSON line: module, args, cwd, env, log, err)."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    children: dict[int, socket.socket] = {}
    while os.getppid() == parent:
        readable, _, _ = select.select([listener], [], [], REAP_EVERY_S)
        if readable:
            conn, _ = listener.accept()
            request = json.loads(read_line(conn))
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in children.values():
                    other.close()
                conn.close()
                return request
            with contextlib.suppress(OSError):  # a requester gone already reads no pid
                conn.sendall(f"{pid}\n".encode())
            children[pid] = conn
        _reap(children)
    sys.exit(0)


def _reap(children: dict[int, socket.socket]) -> None:
    """Tell each exited child's requester its exit status (as ``Popen.returncode``) and the
    CPU seconds it used (``benchmarks/bench_suite.py`` counts them)."""
    while children:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        cpu = usage.ru_utime + usage.ru_stime
        with contextlib.suppress(OSError):  # the requester gone (its test ended): none waits
            conn.sendall(f"{os.waitstatus_to_exitcode(status)} {cpu}\n".encode())
        conn.close()


def run_child(request: dict) -> None:
    """In the forked child: its log file as stdout and stderr (or stderr to a file of its
    own, ``err``), its folder, its environment, then ``python -m <module> <args>`` as the
    interpreter would run it (``runpy``, ``__main__``); the interpreter's own exit follows
    (threads joined, ``atexit``, streams flushed)."""
    for fd, path in ((1, request["log"]), (2, request.get("err"))):
        if path is None:  # one open file for both: stdout and stderr share its offset
            os.dup2(1, 2)
            continue
        opened = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)  # made empty before
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # as ``python -m`` from that folder
    sys.argv = [request["module"], *request["args"]]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def main() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    run_child(serve(sys.argv[1]))


if __name__ == "__main__":
    main()
