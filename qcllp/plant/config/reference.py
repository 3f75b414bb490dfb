"""The plant YAML's JSON Schema (``qcllp config schema``) and its key reference as Markdown
tables (docs/config.md, one per section, rendered when the site is built by
docs/hooks/plant_reference.py), both from the models of :mod:`.document`, so the reference
cannot drift from what the loader checks."""

from __future__ import annotations

import json
from typing import Any

from qcllp.plant.config import document as doc
from qcllp.plant.config.fields import NAME_PATTERN

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_HEADER = "| Key | Type | Default | Meaning |\n|---|---|---|---|"


def plant_schema() -> dict[str, Any]:
    """The JSON Schema of a plant YAML file (draft 2020-12): keys, types, ranges, defaults
    and descriptions. Rules spanning several keys (unique names, ``min < max``...) are the
    loader's alone: ``qcllp config check`` says them."""
    return {"$schema": SCHEMA_DIALECT, **doc.Plant.model_json_schema()}


def sections() -> list[str]:
    """The top-level keys that are mappings or lists of mappings (``stations``, ``scorer``...)."""
    schema = plant_schema()
    defs = schema.get("$defs", {})
    return [
        key
        for key, prop in schema["properties"].items()
        if _nesting(_resolve(prop, defs), defs, key)[0] is not None
    ]


def reference_table(section: str | None = None) -> str:
    """The keys of ``section`` (their paths below it), or with ``None`` the plant's own keys
    that are no section, as a Markdown table, in the file's order."""
    schema = plant_schema()
    rows = _rows(schema, schema.get("$defs", {}), "")
    if section is None:
        chosen = [(p, r) for p, r in rows if p.isidentifier() and p not in sections()]
    else:
        below = [f"{section}.", f"{section}[]."]
        chosen = [(_after(p, below), r) for p, r in rows if _after(p, below) != p]
    if not chosen:
        raise KeyError(f"the plant config has no section {section!r}; known: {sections()}")
    lines = [f"| `{path}` | {row} |" for path, row in chosen]
    return "\n".join([_HEADER, *lines]) + "\n"


def _after(path: str, prefixes: list[str]) -> str:
    """``path`` without the first of ``prefixes`` it starts with (else unchanged)."""
    return next((path[len(p) :] for p in prefixes if path.startswith(p)), path)


def _rows(section: dict, defs: dict, prefix: str) -> list[tuple[str, str]]:
    """``(key path, rest of the row)`` of ``section``'s keys and of the sections below."""
    required = set(section.get("required", ()))
    rows = []
    for key, prop in section.get("properties", {}).items():
        target = _resolve(prop, defs)
        path = f"{prefix}{key}"
        below, kind, nested = _nesting(target, defs, path)
        rows.append((path, _row(kind or _type(target), prop, key in required)))
        if below is not None:
            rows += _rows(below, defs, nested)
    return rows


def _nesting(target: dict, defs: dict, path: str) -> tuple[dict | None, str | None, str]:
    """A section below ``path`` (a mapping, a list of mappings, mappings by name): its
    schema, the type shown, and the prefix of its keys; else ``(None, None, "")``."""
    if "properties" in target:
        return target, "mapping", f"{path}."
    items = _resolve(target.get("items", {}), defs)
    if "properties" in items:
        return items, "list of mappings", f"{path}[]."
    values = _resolve(target.get("additionalProperties") or {}, defs)
    if isinstance(values, dict) and "properties" in values:
        return values, "mapping by name", f"{path}.<name>."
    return None, None, ""


def _resolve(prop: Any, defs: dict) -> dict:
    """``prop`` without its ``$ref`` and without the ``null`` of an optional section."""
    if not isinstance(prop, dict):
        return {}
    options = [p for p in prop.get("anyOf", ()) if p.get("type") != "null"]
    if len(options) == 1:
        prop = options[0]
    if "$ref" in prop:
        return defs[prop["$ref"].rsplit("/", 1)[-1]]
    return prop


def _type(prop: dict) -> str:
    """The type as a plant engineer reads it: ``number > 0``, ``one of csv, parquet``..."""
    if "enum" in prop:
        return "one of " + ", ".join(map(str, prop["enum"]))
    kind = prop.get("type", "")
    if isinstance(kind, list):
        kind = " or ".join(k for k in kind if k != "null")
    if kind == "array":
        kind = f"list of {_type(prop.get('items', {})) or 'values'}"
    if kind == "object":
        kind = "mapping"
    if prop.get("pattern") == NAME_PATTERN:
        kind = "name"
    bounds = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<="}
    limits = [f"{sign} {_number(prop[b])}" for b, sign in bounds.items() if b in prop]
    return " ".join([kind, *limits]) if limits else kind


def _row(kind: str, prop: dict, required: bool) -> str:
    default = "required" if required else _default(prop.get("default"))
    meaning = prop.get("description", "").replace("|", "\\|").replace("<", "&lt;")
    return f"{kind} | {default} | {meaning}"


def _default(value: Any) -> str:
    """A default as the YAML would write it; none for an absent value or a whole section."""
    if value is None or isinstance(value, dict) or value == []:
        return ""
    if isinstance(value, float):
        value = _number(value)
    return f"`{value}`" if isinstance(value, str) else f"`{json.dumps(value)}`"


def _number(value: float) -> int | float:
    """``600`` for ``600.0``: as a plant file would write it."""
    return int(value) if float(value).is_integer() else value
