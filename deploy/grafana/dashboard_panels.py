"""The kinds of panel qcllp's Grafana dashboard is made of (``build_dashboard.py``): each
takes a title, what it tells the person on call, its PromQL targets and its width, and adds
the boilerplate Grafana's JSON repeats per panel. Standard library only."""

from __future__ import annotations

from typing import Any

__all__ = ["DS", "HEIGHT", "bars", "stat", "states", "table", "target", "timeseries"]

DS = {"type": "prometheus", "uid": "${datasource}"}
HEIGHT = 8  # grid units of a panel's height (a row of the 24-unit-wide grid)


def target(expr: str, legend: str = "", *, instant: bool = False, table: bool = False) -> dict:
    """One PromQL query of a panel."""
    query = {"datasource": DS, "expr": expr, "legendFormat": legend, "range": not instant}
    query["instant"] = instant
    if table:
        query["format"] = "table"
    return query


def timeseries(
    title: str, about: str, targets: list[dict], unit: str, *, w: int, limit: float | None = None
) -> dict:
    """A graph over time, ``w`` grid units wide; ``limit``: a red dashed line at an alert's
    threshold."""
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    if limit is not None:
        steps.append({"color": "red", "value": limit})
    custom = {
        "drawStyle": "line",
        "lineWidth": 1,
        "fillOpacity": 10,
        "showPoints": "never",
        "thresholdsStyle": {"mode": "dashed" if limit is not None else "off"},
    }
    thresholds = {"mode": "absolute", "steps": steps}
    defaults = {"unit": unit, "min": 0, "custom": custom, "thresholds": thresholds}
    options = {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return _panel("timeseries", title, about, targets, defaults, options, w)


def states(
    title: str, about: str, targets: list[dict], names: dict[int, tuple[str, str]], *, w: int
) -> dict:
    """A state timeline: each series a band coloured by its value's (text, colour)."""
    mappings = {
        str(value): {"text": text, "color": color} for value, (text, color) in names.items()
    }
    defaults = {
        "mappings": [{"type": "value", "options": mappings}],
        "thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None}]},
    }
    options = {"showValue": "never", "legend": {"showLegend": False}, "rowHeight": 0.8}
    return _panel("state-timeline", title, about, targets, defaults, options, w)


def stat(
    title: str, about: str, targets: list[dict], *, w: int, red_below: float | None = None
) -> dict:
    """Current values as numbers, each named by its legend (``red_below``: values under it
    red, the others green)."""
    steps = [{"color": "text", "value": None}]
    if red_below is not None:
        steps = [{"color": "red", "value": None}, {"color": "green", "value": red_below}]
    defaults = {"unit": "none", "thresholds": {"mode": "absolute", "steps": steps}}
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "value",
        "textMode": "value_and_name",
    }
    return _panel("stat", title, about, targets, defaults, options, w)


def bars(title: str, about: str, targets: list[dict], *, w: int) -> dict:
    """Horizontal bars of instant values (counts over the dashboard's time range)."""
    defaults = {
        "unit": "none",
        "min": 0,
        "thresholds": {"mode": "absolute", "steps": [{"color": "blue", "value": None}]},
    }
    options = {
        "orientation": "horizontal",
        "displayMode": "basic",
        "showUnfilled": True,
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
    }
    return _panel("bargauge", title, about, targets, defaults, options, w)


def table(title: str, about: str, targets: list[dict], *, w: int) -> dict:
    """Instant rows of label columns only (the build of each service)."""
    panel = _panel("table", title, about, targets, {}, {"showHeader": True}, w)
    hide = {"Time": True, "Value": True}
    panel["transformations"] = [{"id": "organize", "options": {"excludeByName": hide}}]
    return panel


def _panel(
    kind: str, title: str, about: str, targets: list[dict], defaults: dict, options: dict, w: int
) -> dict:
    for ref, query in zip("ABCDEFGH", targets, strict=False):
        query["refId"] = ref
    return {
        "type": kind,
        "title": title,
        "description": about,
        "datasource": DS,
        "gridPos": {"h": HEIGHT, "w": w},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": targets,
    }
