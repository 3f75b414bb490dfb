"""The engineers' HTML report: one self-contained file, plots embedded as PNG.

First a summary, one row per station (what :func:`qcllp.reporting.plant_report.summary_row`
says: model, lock-out shares, expected saving with its interval, and fresh-charge figures when
the truth is known), so that the page answers "what does each station do and what is it worth"
before any plot. Then one section per station: predicted versus counted defective share per
charge, what the model looks at (signed: red raises the defect risk, blue lowers it), the
lock-out rate over time and the active model's figures; last a comparison table of all
registered models. Self-contained so it can be mailed or archived as it is; laid out for a
screen 1280 px wide (tables scroll inside their box rather than widen the page).
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

__all__ = ["StationSection", "model_importances", "render_report", "write_report"]


@dataclass
class StationSection:
    """What the report shows for one station."""

    station: str
    model: dict
    per_charge: pd.DataFrame | None = None
    importances: pd.Series | None = None
    lockout_over_time: pd.Series | None = None
    notes: list[str] = field(default_factory=list)


def _png(fig, alt: str) -> str:
    """The figure as an ``<img>`` with the PNG inline (base64 data URL); closes the figure."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    finally:
        plt.close(fig)
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{encoded}">'


def _share_plot(per_charge: pd.DataFrame, station: str) -> str:
    fig, ax = plt.subplots(figsize=(4.5, 4.2))
    ax.scatter(per_charge["actual_share"], per_charge["predicted_share"], s=14, alpha=0.7)
    values = per_charge[["actual_share", "predicted_share"]].to_numpy(dtype=float)
    top = float(np.nanmax(values, initial=0.05)) if values.size else 0.05
    ax.plot([0, top], [0, top], color="grey", linewidth=1, linestyle="--")
    ax.set_xlabel("counted defective share (final QC)")
    ax.set_ylabel("predicted defective share")
    ax.set_title(f"{station}: per charge")
    return _png(fig, f"{station}: predicted vs counted defective share per charge")


def _importance_plot(importances: pd.Series, station: str) -> str:
    """The 12 largest by absolute value, coloured by sign: red where higher values go with
    more risk, blue where they go with less (an unsigned importance is drawn grey)."""
    top = importances.loc[importances.abs().sort_values().tail(12).index]
    signed = bool((top < 0).any())
    fig, ax = plt.subplots(figsize=(5.5, 0.3 * len(top) + 1.2))
    colors = [
        ("tab:red" if v > 0 else "tab:blue") if signed else "tab:grey" for v in top.to_numpy()
    ]
    ax.barh(top.index.astype(str), top.to_numpy(), color=colors)
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_xlabel(
        "correlation with the failure probability (red: higher value, more risk; blue: less)"
        if signed
        else "importance (unsigned)"
    )
    ax.set_title(f"{station}: what the model looks at")
    return _png(fig, f"{station}: feature weights")


def _lockout_plot(rate: pd.Series, station: str) -> str:
    fig, ax = plt.subplots(figsize=(5.5, 3.0))
    ax.plot(rate.index, rate.to_numpy() * 100, marker="o", markersize=3)
    ax.set_ylim(bottom=0, top=max(1.0, float(rate.max()) * 110))
    ax.set_ylabel("sticks locked out (%)")
    ax.set_title(f"{station}: lock-out rate over time")
    fig.autofmt_xdate()
    return _png(fig, f"{station}: lock-out rate over time")


def _fmt(value) -> str:
    """A cell of the model table: floats with 4 significant digits, the rest as text."""
    if isinstance(value, float | np.floating):
        return f"{value:.4g}"
    return str(value)


def _table(frame: pd.DataFrame, classes: str = "table", index: bool = True) -> str:
    """A table in a box that scrolls sideways if it is wider than the page."""
    body = frame.to_html(classes=classes, float_format=lambda v: f"{v:.3f}", border=0, index=index)
    return f"<div class='scroll'>{body}</div>"


STYLE = (
    "body{font-family:sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;"
    "box-sizing:border-box}"
    ".scroll{max-width:100%;overflow-x:auto}"
    "table.table{border-collapse:collapse;margin:.5em 0}table.table td,table.table th"
    "{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:right}"
    "table.summary td,table.summary th{text-align:left}"
    "table.summary thead th{background:#f3f3f3}"
    "section{margin-bottom:2.5em}img{max-width:100%;margin:.5em 1em .5em 0;vertical-align:top}"
    "p.note{color:#555;max-width:60em}"
)


def _attention_html(attention: list[str] | None) -> list[str]:
    """The "Needs attention" section: suspensions and alarms, before everything else."""
    if not attention:
        return []
    return [
        "<section id='attention'><h2>Needs attention</h2><ul>",
        *(f"<li>{html.escape(line)}</li>" for line in attention),
        "</ul></section>",
    ]


def _summary_html(summary: pd.DataFrame | None, with_truth: bool) -> list[str]:
    """The summary section: a row per station and what its figures mean."""
    if summary is None or not len(summary):
        return []
    parts = ["<section id='summary'><h2>Summary</h2>"]
    parts.append(_table(summary, classes="table summary", index=False))
    parts.append(
        "<p class='note'>Expected saving: what the station's lock-out rule brings per 1,000 "
        "sticks against locking out nothing, estimated on training charges the rule did "
        "not see, with a 90 % prediction interval for a week of production (the week's "
        "charges, and which locked-out sticks fail, vary too). A station whose rule found "
        "no threshold with a positive saving bound locks out nothing and says so."
        + (
            " Fresh figures: the scorer's flags against the per-stick truth given."
            if with_truth
            else ""
        )
        + "</p>"
    )
    parts.append("</section>")
    return parts


def render_report(
    plant: str,
    sections: list[StationSection],
    comparison: pd.DataFrame | None,
    *,
    summary: pd.DataFrame | None = None,
    with_truth: bool = False,
    attention: list[str] | None = None,
) -> str:
    """The report as one HTML string; ``attention``: lines that need a person (suspensions,
    alarms), shown before everything else."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>qcllp report: {html.escape(plant)}</title>",
        f"<style>{STYLE}</style>",
        "</head><body>",
        f"<h1>qcllp report: {html.escape(plant)}</h1>",
        f"<p>Generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.</p>",
    ]
    parts += _attention_html(attention) + _summary_html(summary, with_truth)
    for section in sections:
        parts.append(
            f"<section class='station' id='station-{html.escape(section.station)}'>"
            f"<h2>Station {html.escape(section.station)}</h2>"
        )
        if section.model:
            model_rows = pd.Series(
                {k: _fmt(v) for k, v in section.model.items()}, dtype=object
            ).to_frame("value")
            parts.append(_table(model_rows))
        if section.per_charge is not None and len(section.per_charge):
            parts.append(_share_plot(section.per_charge, section.station))
        if section.importances is not None and len(section.importances):
            parts.append(_importance_plot(section.importances, section.station))
        if section.lockout_over_time is not None and len(section.lockout_over_time):
            parts.append(_lockout_plot(section.lockout_over_time, section.station))
        parts.extend(f"<p>{html.escape(note)}</p>" for note in section.notes)
        parts.append("</section>")
    if comparison is not None and len(comparison):
        parts.append("<section id='models'><h2>Model comparison</h2>")
        parts.append(_table(comparison))
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(
    path: Path,
    plant: str,
    sections: list[StationSection],
    comparison: pd.DataFrame | None,
    *,
    summary: pd.DataFrame | None = None,
    with_truth: bool = False,
    attention: list[str] | None = None,
) -> Path:
    """Render the report and write it to ``path`` (UTF-8); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render_report(
        plant, sections, comparison, summary=summary, with_truth=with_truth, attention=attention
    )
    path.write_text(text, encoding="utf-8")
    return path


def model_importances(model, feature_names: list[str]) -> pd.Series | None:
    """What a fitted model looks at, one value per feature, or None when it cannot be said.

    Linear margin learners (pSVM family, InvCal, MeanMap on linear features): the weight
    vector of the binary model, on the standardized features when the model is wrapped in a
    scaler (``estimator_``), so weights are comparable across sensors. TwinPSVM: the difference
    of its two unit normals (pointing from the ok to the defective plane). The k-means labeler:
    its evolved feature weights (non-negative: how much a feature shapes the clusters). Kernel
    models (a feature map) have no per-feature weight.
    """
    inner = getattr(model, "estimator_", model)
    if hasattr(inner, "weights_"):
        values = np.asarray(inner.weights_, dtype=float)
    else:
        estimators = getattr(inner, "estimators_", None)
        if not estimators or getattr(estimators[0], "feature_map", None) is not None:
            return None
        binary = estimators[0]
        if hasattr(binary, "coef"):
            values = np.asarray(binary.coef, dtype=float)
        elif hasattr(binary, "z_pos"):
            pos, neg = binary.z_pos[:-1], binary.z_neg[:-1]
            values = neg / max(np.linalg.norm(neg), 1e-12) - pos / max(np.linalg.norm(pos), 1e-12)
        else:
            return None
    if values.shape != (len(feature_names),):
        return None
    return pd.Series(values, index=list(feature_names), name="importance")
