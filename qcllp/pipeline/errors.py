"""The errors a person can fix (a bad file, config or name; no labeled charges; a corrupt model;
a station someone else is training).

Front ends (the CLI, the services) print these as one line instead of a traceback; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

from qcllp.ingest import IngestError
from qcllp.plant.config import ConfigError
from qcllp.store import StoreError

from .artifacts import ArtifactError
from .flag_sink import SinkError
from .leases import LeaseBusy, LeaseLost
from .methods import UnknownMethodError
from .registry import RegistryError
from .train import TrainingError

__all__ = ["USER_ERRORS"]

USER_ERRORS: tuple[type[BaseException], ...] = (
    ArtifactError,
    ConfigError,
    IngestError,
    LeaseBusy,
    LeaseLost,
    RegistryError,
    SinkError,
    StoreError,
    TrainingError,
    UnknownMethodError,
    FileNotFoundError,
    PermissionError,
)
