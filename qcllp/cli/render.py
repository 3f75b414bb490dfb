"""The text the CLI prints, in one place: every table, key/value block and summary line.

The rules, for every command: a table has a header row and aligned columns (numbers to the
right, text to the left); a time is ISO 8601 with its zone, to the second
(``2026-11-26T14:05:00+00:00``; the store's times are UTC, SQLite hands them back without
their zone); a number without a format of its column is an integer if it is one, else 4
significant digits; a missing value is ``-``. Nothing is printed as a Python repr (no
``datetime.datetime(...)``, no ``{...}``, no ``None``). ``--json`` does not come here: the
commands print their results as they are.

The tables are a few lines of padding rather than a library's: tabulate or rich would be a new
runtime dependency, and rich wraps and boxes to the terminal's width, which breaks the
grep-and-cut scripts that read these lines.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

MISSING = "-"
GAP = "  "  # between the columns of a table, and between a key and its value


# ----------------------------------------------------------------------------- values
def iso_time(value: datetime) -> str:
    """A store time as ISO 8601 in UTC with its zone, to the second (a time without a zone is
    UTC: SQLite returns the UTC times it stored without one)."""
    from qcllp.store import stored_utc  # here: `qcllp --help` need not load the database layer

    pd = sys.modules.get("pandas")  # a Timestamp needs pandas loaded (see _is_bool)
    if pd is not None and isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    return stored_utc(value).astimezone(UTC).isoformat(timespec="seconds")


def stamped(text: str | None) -> str:
    """A line that starts with a store time written ``%Y-%m-%d %H:%M:%S`` (how
    :func:`qcllp.reporting.status.plant_status` words a job's last run and why a job is
    queued), with that time in ISO 8601 and its zone."""
    if not text:
        return MISSING
    try:
        at = datetime.strptime(text[:19], "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return text
    return iso_time(at) + text[19:]


def _number(value: Real) -> str:
    """A number without a column format: an integer if it is one, else 4 significant digits
    (fixed-point from 0.0001 to a million)."""
    if isinstance(value, Integral):
        return str(int(value))
    v = float(value)
    if not math.isfinite(v):
        return str(v)
    if v == int(v):
        return str(int(v))
    return f"{v:.0f}" if abs(v) >= 1e6 else f"{v:.4g}"


def is_missing(value: Any) -> bool:
    """``None``, NaN, NaT or an empty text: printed as ``-``."""
    pd = sys.modules.get("pandas")  # a NaT needs pandas loaded (see _is_bool)
    if (
        value is None
        or (pd is not None and value is pd.NaT)
        or (isinstance(value, str) and not value)
    ):
        return True
    return isinstance(value, Real) and not isinstance(value, Integral) and math.isnan(value)


def _is_bool(value: Any) -> bool:
    """A Python or numpy bool. The pandas and numpy types are looked up only if loaded (no
    value can be one otherwise): printing a table need not load them (``qcllp models list``)."""
    np = sys.modules.get("numpy")
    return isinstance(value, bool) or (np is not None and isinstance(value, np.bool_))


def text(value: Any, spec: str | None = None) -> str:
    """One value as the CLI prints it; ``spec`` (a format spec) formats a number."""
    if is_missing(value):
        return MISSING
    if _is_bool(value):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return iso_time(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Real):
        return format(value, spec) if spec else _number(value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {text(v)}" for k, v in value.items()) or MISSING
    if isinstance(value, list | tuple | set):
        return ", ".join(text(v) for v in value) or MISSING
    return str(value)


def signed(value: Any, spec: str = "+.0f") -> str:
    """A saving in sticks per 1,000: with its sign, ``-`` if missing."""
    return text(value, spec)


# ----------------------------------------------------------------------------- blocks
@dataclass(frozen=True)
class Column:
    """A table column: its header, the row's key (or a function of the row) and the format
    of its numbers."""

    header: str
    key: str | Callable[[Mapping[str, Any]], Any]
    spec: str | None = None

    def value(self, row: Mapping[str, Any]) -> Any:
        return self.key(row) if callable(self.key) else row.get(self.key)


def _numeric(values: Iterable[Any]) -> bool:
    """A column of numbers (missing ones aside) is aligned to the right."""
    present = [v for v in values if not is_missing(v)]
    return bool(present) and all(isinstance(v, Real) and not _is_bool(v) for v in present)


def table(rows: Iterable[Mapping[str, Any]], columns: Sequence[Column], indent: str = "") -> str:
    """The rows under a header row, each column as wide as its widest cell."""
    rows = list(rows)
    raw = [[c.value(row) for c in columns] for row in rows]
    cells = [[text(v, c.spec) for v, c in zip(values, columns, strict=True)] for values in raw]
    lines = [[c.header for c in columns], *cells]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    right = [_numeric(values[i] for values in raw) for i in range(len(columns))]
    return "\n".join(
        indent
        + GAP.join(
            cell.rjust(w) if r else cell.ljust(w)
            for cell, w, r in zip(line, widths, right, strict=True)
        ).rstrip()
        for line in lines
    )


def frame_table(frame: pd.DataFrame, float_spec: str, indent: str = "") -> str:
    """A data frame as a table, its index a column like the others; floats as ``float_spec``."""
    flat = frame.reset_index() if frame.index.name is not None else frame
    floats = {name for name, dtype in flat.dtypes.items() if dtype.kind == "f"}
    columns = [Column(str(n), n, float_spec if n in floats else None) for n in flat.columns]
    return table(flat.to_dict(orient="records"), columns, indent)


def key_values(
    pairs: Iterable[tuple[str, Any]], *, indent: str = "", float_spec: str | None = None
) -> str:
    """``key  value`` lines, the values aligned; ``float_spec`` formats the floats."""
    pairs = list(pairs)
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(
        f"{indent}{k:<{width}}{GAP}{text(v, float_spec if isinstance(v, float) else None)}"
        for k, v in pairs
    )


# ----------------------------------------------------------------------------- ingest
def ingest_text(report: Any) -> str:
    """An ingest report: what was read, stored, skipped as a duplicate or quarantined."""
    quarantined = ", ".join(f"{k}: {v}" for k, v in sorted(report.quarantined.items()))
    lines = [
        f"{report.kind}: {report.records:,} records, {report.stored:,} stored, "
        f"{report.duplicates:,} duplicates, {report.quarantined_total:,} quarantined"
        + (f" ({quarantined})" if quarantined else "")
    ]
    if report.kind == "inspections":
        lines[0] += f"; {report.audit_samples:,} of the stored are audit samples (not locked out)"
    lines += [f"skipped (already ingested): {f}" for f in report.files_skipped]
    return "\n".join(lines)


def sql_ingest_text(reports: Mapping[str, Any]) -> str:
    """One ingest report per configured SQL source, each named."""
    return "\n".join(f"[{name}] {ingest_text(report)}" for name, report in reports.items())


def failed_file_line(file: str, why: str) -> str:
    """The ``error:`` line of a file ingest could not take: one line, naming the file."""
    line = " ".join(why.split())  # one line, whatever the underlying error printed
    return f"error: {line if line.startswith(file) else f'{file}: {line}'}"


# ----------------------------------------------------------------------------- train
IN_SAMPLE_NOTE = (
    "in-sample, on its training charges: refitted without a fifth of them, the rule "
    "declined every time"
)


def _week(m: Mapping[str, Any]) -> str:
    """What period the interval is for: " for a week of N charges" when the charges' times
    gave one (:mod:`qcllp.station.saving_estimate`), else nothing."""
    charges = m.get("saving_period_charges")
    return f" for a week of {charges:,.0f} charges" if charges else ""


def trained_line(r: Any) -> str:
    """What ``qcllp train`` prints of a TrainingResult: the model, its rule and its expected
    saving; with ``--method auto``, what each method did."""
    m = r.metrics
    rule = (
        "locks out nothing (no threshold's saving is significant)"
        if m.get("lockout_declined")
        else f"threshold {m['threshold']:.3f}"
    )
    basis = "on charges it did not see"
    if m.get("saving_in_sample"):
        basis = IN_SAMPLE_NOTE
    if m.get("threshold_inspected") and not m.get("lockout_declined"):
        rule += (
            f" (from inspected precision {m['threshold_inspected_failing']:.0f}/"
            f"{m['threshold_inspected']:.0f}; try it in shadow first: "
            "qcllp models promote ID --shadow)"
        )
        basis = "at that precision and the training lock-out rate"
    saving = (
        "expected saving 0 (it locks out nothing)"
        if m.get("lockout_declined")
        else f"expected saving {m['expected_saving_per_1000']:+.0f} per 1,000 sticks "
        f"(90 % interval {m['saving_low_per_1000']:+.0f} to {m['saving_high_per_1000']:+.0f}"
        f"{_week(m)}, {basis})"
    )
    subsampled = m.get("labeled_sticks", 0) > m.get("max_sticks", float("inf"))
    of = f" (of {m['labeled_charges']:,.0f}: training.max_sticks)" if subsampled else ""
    seen = m.get("inspected_sticks", 0)
    inspected = f" ({seen:,.0f} inspected, {m['inspected_failing']:,.0f} failing)" if seen else ""
    held = m.get("held_back_charges", 0)
    if held:  # a plant that draws audit samples and never enters their inspections sees it here
        inspected += f" ({held:,.0f} more held back: their audit samples await inspection)"
    line = (
        f"model {r.model_id}: {r.station} {r.method} on {r.n_charges} charges{of} / "
        f"{r.n_sticks} sticks{inspected}, bag error {m['bag_error']:.3f}, {rule}, {saving}"
    ) + (f"; {audits_declined_note(m)}" if m.get("audits_declined") else "")
    for trial in r.params.get("auto", []):
        mark = "*" if trial["method"] == r.method else " "
        line += (
            f"\n  {mark} {trial['method']:<15} CV bag error {trial['cv_bag_error']:.4f}, "
            f"expected saving {trial['expected_saving_per_1000']:+.0f} "
            f"[{trial['saving_low_per_1000']:+.0f}, {trial['saving_high_per_1000']:+.0f}], "
            f"{trial['seconds']:.0f} s"
        )
    return line


def audits_declined_note(m: Mapping[str, Any]) -> str:
    """Why a model (metrics ``m`` with ``audits_declined``) draws no audit samples from its
    band: what ``qcllp train`` and ``qcllp status`` say."""
    return (
        f"no audit samples: {m['audit_inspected_failing']:.0f} of {m['audit_inspected']:.0f} "
        "inspected at the top of its ranking failed, too few to pay for a look"
    )


def evaluation_text(station: str, result: Any) -> str:
    """``qcllp evaluate``: the setup, the held-out metrics and the charges it got most wrong."""
    metrics, per_charge = result.evaluation.metrics, result.evaluation.per_charge
    head = (
        f"{station} {result.method}, target {result.target}: {result.n_charges} charges, "
        f"{result.n_sticks} sticks; thresholds per fold "
        + ", ".join(f"{t:.3f}" for t in result.thresholds)
    )
    worst = per_charge.sort_values("abs_error", ascending=False).head(5)
    return "\n".join(
        [
            head,
            key_values(metrics.items(), indent="  ", float_spec=".4f"),
            "  charges with the largest share error:",
            frame_table(worst, ".3f", indent="  "),
        ]
    )


# ----------------------------------------------------------------------------- models
MODEL_COLUMNS = (
    Column("id", "id"),
    Column("station", "station"),
    Column("method", "method"),
    Column("target", "target"),
    Column("status", "status"),
    Column("charges", "n_charges"),
    Column("bag error", lambda m: (m["metrics"] or {}).get("bag_error"), ".3f"),
    Column("created at", "created_at"),
)


def models_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The registry, one model a row under a header, newest first."""
    return table(rows, MODEL_COLUMNS) if rows else "no models registered yet"


def model_text(row: Mapping[str, Any]) -> str:
    """Everything recorded about one model: its fields with the first of its features, then
    its parameters and its metrics, each an indented block under its name."""
    features = row.get("features") or []
    more = " ..." if len(features) > 8 else ""
    fields = [(k, v) for k, v in row.items() if k not in ("params", "metrics", "features")]
    blocks = [key_values([*fields, ("features", f"{len(features)}: {text(features[:8])}{more}")])]
    for name in ("params", "metrics"):
        values = row.get(name) or {}
        blocks.append(f"{name}\n" + key_values(values.items(), indent="  ") if values else name)
    return "\n".join(blocks)


def resave_text(rows: Sequence[tuple[int, Mapping[str, Any] | None]]) -> str:
    """``qcllp models resave``: each model's new artifact, or that it was already skops."""
    return (
        "\n".join(
            f"model {i}: " + ("already a skops artifact" if r is None else r["artifact_path"])
            for i, r in rows
        )
        or "no models registered yet"
    )


# ----------------------------------------------------------------------------- score
def delivery_text(station: str, result: Any, input_path: str | None) -> str:
    """Where a score run's flags went: the station's sink, or that it has none."""
    if input_path:
        return ""
    if result.sink is None:
        return (
            f"; {station} has no sink: the flags are in the database only "
            "(give --sink or scorer.sink_dir)"
        )
    return f", {result.sink_lines} lines appended to {result.sink}"


def score_line(station: str, summary: Mapping[str, Any], why: str, delivered: str) -> str:
    """The one line ``qcllp score`` prints: what it decided, or why it decided nothing."""
    shadow = summary.get("shadow_id")
    if summary.get("model_id") is None and shadow is not None:
        deciding = f"shadow model {shadow} alone (the line gets its audit samples only)"
    else:
        deciding = f"model {summary['model_id']}" + (
            f" (shadow model {shadow} beside it)" if shadow is not None else ""
        )
    if why:
        return f"{station}: decided 0 sticks with {deciding}: {why}{delivered}"
    threshold = summary.get("threshold")
    at = f" (threshold {threshold:.3f})" if threshold is not None else ""
    return (
        f"{station}: decided {summary['sticks_decided']} sticks with {deciding}{at}: "
        f"{summary['locked_out']} locked out, "
        f"{summary['passed']} passed, "
        + (f"{summary['audited']} audit samples (inspect), " if summary.get("audited") else "")
        + f"{summary['unscorable']} unscorable; "
        f"{summary['flags_written']} flags written{delivered}"
    )


def sink_moved_line(station: str, claim: Any) -> str:
    """``qcllp sink move``: where the station's flags go from which flag on."""
    return f"{station}: flags go to {claim.path} from flag id {claim.flag_id + 1} on" + (
        f" (before: {claim.previous})" if claim.previous else ""
    )


# ----------------------------------------------------------------------------- demo
def demo_text(result: Any, seconds: float, looks: Sequence[str]) -> str:
    """What the demo did: its scored tables, how long it took, where its plant is and the
    commands to look at it."""
    qc = "" if result.final_qc is None else frame_table(result.final_qc, ".1f")
    return (
        "\nfresh charges at every station: the line's decisions against the simulator's hidden "
        "truth (saving_per_1000: realized by the lock-outs and the audit samples scrapped, net "
        f"of inspections):\n"
        f"{frame_table(result.table, '.3f')}\n\nfinal QC's counts of the fresh charges against "
        f"each model (lock-out guard):\n{qc}\n\ndemo finished in {seconds:.0f} s\n"
        f"report: {result.report}\ndatabase: {result.database_url}\nlook at the results:\n"
        + "\n".join(f"  {c}" for c in looks)
    )
