"""The value types of the plant YAML: each checks one value and says what is wrong in the
words the loader has always used (``must be a number, got str 'cheap'``).

Each type is a pydantic ``Annotated`` type: a small check before (or after) the core type, so
the JSON Schema still says ``number``, ``integer`` or ``string`` while a ``bool`` is refused
where a number belongs (YAML's ``yes``) and nothing is coerced (``"5"`` is no number). A check
raises :func:`problem`, a pydantic error whose message is printed as it is.
"""

from __future__ import annotations

import math
import re
import zoneinfo
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ValidationInfo, WithJsonSchema
from pydantic_core import PydanticCustomError

from qcllp.plant.config.checks import (
    ascii_compatible_problem,
    currency_problem,
    database_url_problems,
    resolve_sqlite,
    scheduler_address_problem,
    url_problem,
)

PROBLEM = "qcllp_config"  # the error type of a message written here, printed verbatim
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_NAME_RE = re.compile(NAME_PATTERN)
RESERVED_COLUMNS = {"charge_id", "stick_id", "station", "timestamp", "sensor", "value", "n_sticks"}


def problem(message: str, **ctx: Any) -> PydanticCustomError:
    """A validation error printed as ``message`` (``ctx``: extra facts, e.g. ``also``)."""
    return PydanticCustomError(PROBLEM, message, ctx or None)


def type_name(value: Any) -> str:
    """``nothing`` for a missing value (YAML's empty ``key:``), else the Python type's name."""
    return "nothing" if value is None else type(value).__name__


def describe(value: Any) -> str:
    """The type and the value, as a message shows a wrong one: ``str 'cheap'``."""
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"


def is_number(value: Any) -> bool:
    """A YAML number that is no ``bool`` (``true`` is an int to Python)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def base_dir(info: ValidationInfo) -> Path:
    """Where relative paths resolve: the config file's folder (the validation context)."""
    context = info.context or {}
    return Path(context.get("base_dir") or Path.cwd())


def _number(value: Any) -> Any:
    if not is_number(value) or math.isnan(value):
        raise problem(f"must be a number, got {describe(value)}")
    if not math.isfinite(value):
        raise problem(f"must be finite, got {value}")
    return value  # as written: a range error shows the number as the file has it


def _integer(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise problem(f"must be an integer, got {describe(value)}")
    return value


def _switch(value: Any) -> Any:
    if not isinstance(value, bool):
        raise problem(f"must be true or false, got {describe(value)}")
    return value


def _text(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise problem(f"must be a non-empty string, got {describe(value)}")
    return value


def _name(value: str) -> str:
    if not _NAME_RE.match(value):
        raise problem(
            f"{value!r} is not a valid name (letters, digits and '_', not starting with a digit)"
        )
    return value


def _defect_type(value: Any) -> Any:
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise problem(f"must be a name (letters, digits, '_'), got {describe(value)}")
    if value == "ok" or value in RESERVED_COLUMNS:
        raise problem(f"{value!r} is reserved ('ok' is the implicit good class)")
    return value


def _cron(value: str) -> str:
    from apscheduler.triggers.cron import CronTrigger

    try:
        CronTrigger.from_crontab(value)
    except (ValueError, TypeError) as exc:
        raise problem(f"invalid cron string {value!r}: {exc}") from None
    return value


def _timezone(value: str) -> str:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise problem(
            f"unknown time zone {value!r} (use an IANA name, e.g. Europe/Berlin)"
        ) from None
    return value


def _encoding(value: str) -> str:
    if (found := ascii_compatible_problem(value)) is not None:
        raise problem(found)
    return value


def _currency(value: str) -> str:
    if (found := currency_problem(value)) is not None:
        raise problem(found)
    return value.strip()


def _cluster(value: Any) -> Any:
    if value is not None and (found := scheduler_address_problem(value)) is not None:
        raise problem(found)
    return value.strip() if isinstance(value, str) else value


def _local_path(value: str, info: ValidationInfo) -> str:
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else (base_dir(info) / path).resolve())


def _sql_url(value: str, info: ValidationInfo) -> str:
    """A source's SQLAlchemy URL; its password is checked where the source's name is known."""
    if (found := url_problem(value)) is not None:
        raise problem(found)
    return resolve_sqlite(value, base_dir(info))


def _database_url(value: str, info: ValidationInfo) -> str:
    if (found := database_url_problems(value, source=None)) is not None:
        raise problem(found)
    return resolve_sqlite(value, base_dir(info))


def _columns(value: Any) -> Any:
    if not isinstance(value, dict) or not all(
        isinstance(a, str) and isinstance(b, str) for a, b in value.items()
    ):
        raise problem("must map column names to source column names")
    return value


def _grid(value: Any) -> Any:
    if not isinstance(value, dict):
        raise problem(f"must map parameter names to lists, got {type_name(value)}")
    return value


def _values(value: Any) -> Any:
    if not isinstance(value, list) or not value:
        raise problem("must be a non-empty list of values")
    return value


def choice(*options: str) -> Any:
    """One of ``options`` (a JSON Schema ``enum``), refused as ``must be one of a, b; got 'c'``."""

    def check(value: Any) -> Any:
        if value not in options:
            raise problem(f"must be one of {', '.join(options)}; got {value!r}")
        return value

    return Annotated[Literal[options], BeforeValidator(check)]


NUMBER_CHECKS = (_number, _integer)  # an optional number left empty (`key:`) takes its default
Number = Annotated[float, BeforeValidator(_number)]
Integer = Annotated[int, BeforeValidator(_integer)]
Text = Annotated[str, BeforeValidator(_text)]
Switch = Annotated[bool, BeforeValidator(_switch)]
Name = Annotated[
    str,
    AfterValidator(_name),
    BeforeValidator(_text),
    WithJsonSchema({"type": "string", "pattern": NAME_PATTERN}),
]
DefectType = Annotated[
    str, BeforeValidator(_defect_type), WithJsonSchema({"type": "string", "pattern": NAME_PATTERN})
]
Cron = Annotated[str, AfterValidator(_cron), BeforeValidator(_text)]
Timezone = Annotated[str, AfterValidator(_timezone), BeforeValidator(_text)]
Encoding = Annotated[str, AfterValidator(_encoding), BeforeValidator(_text)]
Currency = Annotated[str, AfterValidator(_currency), BeforeValidator(_text)]
Cluster = Annotated[
    str | None,
    BeforeValidator(_cluster),
    WithJsonSchema({"type": ["string", "null"], "pattern": r"^\s*(tcp|tls)://.+:\d{1,5}\s*$"}),
]
LocalPath = Annotated[str, AfterValidator(_local_path), BeforeValidator(_text)]
SqlUrl = Annotated[str, AfterValidator(_sql_url), BeforeValidator(_text)]
DatabaseUrl = Annotated[str, AfterValidator(_database_url), BeforeValidator(_text)]
Columns = Annotated[dict[str, str], BeforeValidator(_columns)]
Grid = Annotated[dict[str, Annotated[list, BeforeValidator(_values)]], BeforeValidator(_grid)]
