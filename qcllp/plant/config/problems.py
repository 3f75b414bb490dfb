"""From pydantic's validation errors to the loader's lines ``"<file>: <key path>: <what>"``.

:class:`Section` is the base of every model of the YAML: frozen, unknown keys refused, and a
hook :meth:`Section.cross_problems` for the rules that span several keys of one mapping
(``min < max``, ``table`` or ``query``, unique names...). Those rules read the mapping as
written and are reported *together with* the errors of its keys (a pydantic after-validator
would run only once every key is valid), so a plant engineer still fixes a file in one pass.
:func:`duplicates` is such a rule for names; :func:`default_of` reads a key's one default.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from qcllp.plant.config.fields import NUMBER_CHECKS, PROBLEM, problem, type_name

Loc = tuple[str | int, ...]


class ConfigError(ValueError):
    """An invalid plant configuration; ``errors``: one ``"<file>: <key>: <what>"`` per problem."""

    def __init__(self, errors: Sequence[str] | str):
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))


@dataclass(frozen=True)
class Problem:
    """A cross-key problem at ``loc`` (relative to its mapping); ``also``: where the same name
    was first given, for a duplicate."""

    loc: Loc
    message: str
    also: Loc | None = None


class Section(BaseModel):
    """A mapping of the plant YAML: frozen, strict about its keys, with cross-key rules."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=False)
    cross_keys: ClassVar[bool] = False  # whether cross_problems has anything to say
    empty_is_default: ClassVar[frozenset[str]] = frozenset()  # optional numbers: `key:` = absent

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.empty_is_default = frozenset(
            name
            for name, field in cls.model_fields.items()
            if not field.is_required()
            and any(getattr(m, "func", None) in NUMBER_CHECKS for m in field.metadata)
        )

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        """The problems spanning several keys of ``raw`` (the mapping as written)."""
        return []

    @model_validator(mode="wrap")
    @classmethod
    def _with_cross_problems(cls, data: Any, handler: Any, info: Any) -> Any:
        if isinstance(data, Mapping) and cls.empty_is_default:
            data = {k: v for k, v in data.items() if v is not None or k not in cls.empty_is_default}
        found = cls.cross_problems(data, info.context or {}) if _crossable(cls, data) else []
        try:
            model = handler(data)
        except ValidationError as exc:
            if not found:
                raise
            raise _merged(cls.__name__, exc.errors(), found, data) from None
        if found:
            raise _merged(cls.__name__, [], found, data)
        return model


def _crossable(cls: type[Section], data: Any) -> bool:
    return cls.cross_keys and isinstance(data, Mapping)


def _merged(title: str, errors: list, found: list[Problem], data: Any) -> ValidationError:
    """One ValidationError holding pydantic's ``errors`` and the cross-key ``found``."""
    lines: list[InitErrorDetails] = []
    for error in errors:
        kind: Any = error["type"]
        if kind == PROBLEM:
            kind = PydanticCustomError(PROBLEM, error["msg"], error.get("ctx"))
        line: dict = {"type": kind, "loc": error["loc"], "input": error.get("input")}
        if "ctx" in error and kind is error["type"]:
            line["ctx"] = error["ctx"]
        lines.append(line)  # type: ignore[arg-type]
    for p in found:
        ctx = {"also": p.also, "depth": len(p.loc)} if p.also else {}
        lines.append({"type": problem(p.message, **ctx), "loc": p.loc, "input": data})
    return ValidationError.from_exception_data(title, lines)


def default_of(model: type[Section], key: str) -> Any:
    """The default of ``model``'s key ``key``: declared once, in the field."""
    return model.model_fields[key].default


def duplicates(items: Any, what: str, loc: tuple, key: str | None = "name") -> list[Problem]:
    """A problem for each repeated name among ``items`` (mappings' ``key``, or the items)."""
    if not isinstance(items, list):
        return []
    seen: dict[str, tuple] = {}
    found = []
    for i, item in enumerate(items):
        name = item.get(key) if key and isinstance(item, Mapping) else (None if key else item)
        here = (*loc, i, key) if key else (*loc, i)
        if not isinstance(name, str):
            continue
        if name in seen:
            found.append(Problem(here, f"duplicate {what} {name!r}", also=seen[name]))
        else:
            seen[name] = here
    return found


def key_path(loc: Sequence[str | int]) -> str:
    """``("stations", 2, "sensors", 0, "max")`` -> ``stations[2].sensors[0].max``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def error_lines(source: str, exc: ValidationError, root: type[BaseModel]) -> list[str]:
    """One ``"<source>: <key path>: <what>"`` line per error of ``exc``, in the file's order."""
    return [f"{source}: {key_path(e['loc']) or '<top>'}: {_what(e, root)}" for e in exc.errors()]


_MAPPING_TYPES = {"model_type", "dict_type", "model_attributes_type"}


def _what(error: Any, root: type[BaseModel]) -> str:
    """What is wrong, in the words of one error of pydantic's."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == PROBLEM:
        if "also" in ctx:
            prefix = error["loc"][: len(error["loc"]) - ctx["depth"]]
            return f"{error['msg']} (also at {key_path((*prefix, *ctx['also']))})"
        return error["msg"]
    if kind == "missing":
        return "missing required key"
    if kind == "extra_forbidden":
        allowed = fields_at(root, error["loc"][:-1])
        return "unknown key" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
    if kind in _MAPPING_TYPES:
        return f"must be a mapping, got {type_name(value)}"
    if kind in ("list_type", "tuple_type"):
        return f"must be a list, got {type_name(value)}"
    if kind == "too_short":
        return "must not be empty"
    bounds = {"greater_than": ">", "greater_than_equal": ">="}
    if kind in bounds:
        return f"must be {bounds[kind]} {next(iter(ctx.values())):g}, got {value}"
    if kind == "less_than_equal":
        most = ctx["le"]
        days = f" ({most / 86_400:g} days)" if most % 86_400 == 0 else ""
        shown = int(most) if float(most).is_integer() else most
        return f"must be at most {shown}{days}, got {value}"
    return error["msg"]


def fields_at(root: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The keys allowed in the mapping at ``loc`` (for "unknown key; allowed: ...")."""
    kind: Any = root
    for part in loc:
        kind = _unwrap(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(str(part))
            if field is None:
                return []
            kind = field.annotation
        elif typing.get_origin(kind) in (list, tuple, dict):
            kind = typing.get_args(kind)[-1 if typing.get_origin(kind) is dict else 0]
        else:
            return []
    kind = _unwrap(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return list(kind.model_fields)
    return []


def _unwrap(kind: Any) -> Any:
    """``Annotated[X, ...]`` and ``X | None`` -> ``X``."""
    while True:
        if typing.get_origin(kind) is typing.Annotated:
            kind = typing.get_args(kind)[0]
            continue
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if typing.get_origin(kind) in (typing.Union, types.UnionType) and args:
            kind = args[0]
            continue
        return kind
