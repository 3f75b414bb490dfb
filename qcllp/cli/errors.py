"""The errors a person can fix (a bad file, config or name; no labeled charges; a corrupt model;
a station someone else is training), and a database that cannot be used mid-command (a full
disk, a server gone away).

Front ends (the CLI, the services) print these as one line instead of a traceback; anything
else is a bug and keeps its traceback.

The classes are named by the module that defines them, not imported: importing them would load
the store, the learners and scikit-learn into every command, ``--help`` included. An exception
of a class whose module was never imported cannot have been raised, so only the loaded
modules are looked at (:func:`is_user_error`).
"""

from __future__ import annotations

import sys

__all__ = ["DATABASE_ERROR", "USER_ERRORS", "is_database_error", "is_user_error"]

USER_ERRORS: tuple[tuple[str, str], ...] = (
    ("qcllp.station.artifacts", "ArtifactError"),
    ("qcllp.plant.config.problems", "ConfigError"),
    ("qcllp.store.credentials", "CredentialError"),
    ("qcllp.ingest.report", "IngestError"),
    ("qcllp.store.leases", "LeaseBusy"),
    ("qcllp.store.leases", "LeaseLost"),
    ("qcllp.station.registry", "RegistryError"),
    ("qcllp.scoring.flag_sink", "SinkError"),
    ("qcllp.store.engines", "StoreError"),
    ("qcllp.training.labeled", "TrainingError"),
    ("qcllp.training.methods", "UnknownMethodError"),
    ("builtins", "FileNotFoundError"),
    ("builtins", "PermissionError"),
)
DATABASE_ERROR = ("sqlalchemy.exc", "OperationalError")


def _loaded(names: tuple[tuple[str, str], ...]) -> tuple[type[BaseException], ...]:
    """The classes of ``names`` (module, class) whose module is loaded (a module that failed
    half-way through its import may lack its class: then it raised none)."""
    found = (getattr(sys.modules.get(module), name, None) for module, name in names)
    return tuple(cls for cls in found if isinstance(cls, type))


def is_database_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a database that cannot be used (SQLAlchemy's OperationalError)."""
    return isinstance(exc, _loaded((DATABASE_ERROR,)))


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is printed as one line: a person's error or an unusable database."""
    return isinstance(exc, _loaded((*USER_ERRORS, DATABASE_ERROR)))
