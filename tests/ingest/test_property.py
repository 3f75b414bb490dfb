"""Property: random, partly malformed CSV rows never crash ingestion, and every row read is
stored, a duplicate or quarantined (the report and the database agree)."""

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qcllp.ingest import ingest_measurements
from qcllp.store import QuarantineRow, Reading, Store
from tests.ingest.helpers import HEADER

_TEXT = st.text(
    alphabet=string.ascii_letters + string.digits + " ,.:;-+_/Zé∞",
    max_size=12,
)
_FIELD = {
    "charge_id": st.one_of(st.sampled_from(["c1", "c2", ""]), _TEXT),
    "stick_id": st.one_of(st.sampled_from(["s1", "s2", " s1 "]), _TEXT),
    "station": st.one_of(st.sampled_from(["furnace", "rolling", "oven"]), _TEXT),
    "timestamp": st.one_of(
        st.sampled_from(
            ["2025-01-06T06:00:00Z", "2025-01-06 07:00:00", "2025-03-30 02:30:00", "", "2025-13-01"]
        ),
        _TEXT,
    ),
    "sensor": st.one_of(st.sampled_from(["temperature", "oxygen", "force"]), _TEXT),
    "value": st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.sampled_from(["1100", "5", "", "nan", "1e400"]),
        _TEXT,
    ),
}


@st.composite
def csv_lines(draw) -> list[str]:  # noqa: ANN001
    rows = []
    for _ in range(draw(st.integers(1, 25))):
        fields = [draw(strategy) for strategy in _FIELD.values()]
        cut = draw(st.integers(0, 8))  # sometimes too few or too many fields
        if cut < 2:
            fields = fields[: 2 + cut]
        elif cut == 8:
            fields.append("extra")
        line = ",".join(fields)
        if line.strip(" ") == "":
            line = "x,"
        rows.append(line)
    return rows


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=csv_lines())
def test_random_rows_never_crash_and_are_all_accounted_for(lines, tiny_config, tmp_path_factory):
    folder = tmp_path_factory.mktemp("prop")
    path = folder / "m.csv"
    path.write_text(HEADER + "\n".join(lines) + "\n")
    store = Store.open(f"sqlite:///{folder / 'p.sqlite'}")
    report = ingest_measurements(store, tiny_config, path, chunk_rows=7)
    assert not report.files_failed
    assert report.records == len(lines)
    assert report.stored + report.duplicates + report.quarantined_total == report.records
    assert store.count(Reading) == report.stored
    assert store.count(QuarantineRow) == report.quarantined_total
    store.close()
