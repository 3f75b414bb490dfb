"""The thread limit reaches the BLAS / OpenMP libraries loaded after its first use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import qcllp.learn.core.threads as threads

# A fresh interpreter: NumPy alone, then the thread module (loaded from its file, without the
# package, which imports every learner and so every library), a first limit, and only then
# SciPy's and scikit-learn's native libraries. The pools seen under a second limit.
_LATE_LIBRARIES = """
import importlib.util, json, sys
import numpy
spec = importlib.util.spec_from_file_location("threads", sys.argv[1])
threads = importlib.util.module_from_spec(spec)
spec.loader.exec_module(threads)
from threadpoolctl import threadpool_info
with threads.limited_threads(1):
    early = [i["filepath"] for i in threadpool_info()]
import scipy.linalg, sklearn.cluster
with threads.limited_threads(1):
    seen = [(i["filepath"], i["num_threads"]) for i in threadpool_info()]
print(json.dumps({"early": early, "seen": seen}))
"""


def test_libraries_loaded_after_the_first_limit_are_limited_too():
    environment = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_NUM_THREADS") and k != "OMP_THREAD_LIMIT"
    }
    out = subprocess.run(
        [sys.executable, "-c", _LATE_LIBRARIES, str(Path(threads.__file__))],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
        timeout=120,
    )
    found = json.loads(out.stdout)
    seen = dict(found["seen"])
    # SciPy brings its own OpenBLAS and scikit-learn its OpenMP runtime besides NumPy's BLAS
    late = set(seen) - set(found["early"])
    assert late, found
    assert set(seen.values()) == {1}, seen
