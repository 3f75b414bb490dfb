"""What every service's ``/metrics`` carries besides its own metrics: the process (CPU, memory,
open files, start time) and the build (``qcllp_build_info{version, python} 1``).

The services keep their metrics in a registry of their own (:mod:`.scorer_metrics`,
:mod:`.retrainer_health`), so prometheus_client's default process collector, which lives in
the global registry, is not on their ``/metrics``: without this an alert on a scorer's memory
or a dashboard's "which version runs where" would have nothing to read.
"""

from __future__ import annotations

import importlib.metadata
import platform

from prometheus_client import CollectorRegistry, Info, ProcessCollector

__all__ = ["qcllp_version", "register_process_and_build"]


def qcllp_version() -> str:
    """The installed distribution's version; a source tree run without installing it (the
    package on ``PYTHONPATH``) reports the package's own ``__version__``."""
    try:
        return importlib.metadata.version("qcllp")
    except importlib.metadata.PackageNotFoundError:
        from qcllp import __version__

        return __version__


def register_process_and_build(registry: CollectorRegistry) -> None:
    """Add the process collector (``process_*``; Linux only: it reads ``/proc``) and
    ``qcllp_build_info`` to a service's registry."""
    ProcessCollector(registry=registry)
    build = Info(
        "qcllp_build",
        "The qcllp version and the Python that run this service (always 1).",
        registry=registry,
    )
    build.info({"version": qcllp_version(), "python": platform.python_version()})
