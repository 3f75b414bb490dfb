"""The errors a person can fix (a bad file, config or name; no labeled charges; a corrupt model;
a station someone else is training).

Front ends (the CLI, the services) print these as one line instead of a traceback; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

from qcllp.ingest import IngestError
from qcllp.plant.config import ConfigError
from qcllp.scoring.flag_sink import SinkError
from qcllp.station.artifacts import ArtifactError
from qcllp.station.registry import RegistryError
from qcllp.store import StoreError
from qcllp.store.leases import LeaseBusy, LeaseLost
from qcllp.training.methods import UnknownMethodError
from qcllp.training.train import TrainingError

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
