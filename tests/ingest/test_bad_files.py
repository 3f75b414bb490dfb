"""Bad input files through ``qcllp ingest``, on both engines: each gets exit code 1 and one
``error:`` line naming the file and what is wrong, or its bad rows are quarantined with a
reason while the good rows are stored -- never a traceback, never a lost row.

The small bad files live in ``tests/fixtures/bad_files`` (see its README); the oversized id is
generated here into ``tmp_path``.
"""

import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from qcllp.cli import main
from qcllp.store import DefectCount, QuarantineRow, Reading, Store
from tests.conftest import TINY_PLANT
from tests.ingest.helpers import GOOD, HEADER, write_csv

BAD_FILES = Path(__file__).resolve().parents[1] / "fixtures" / "bad_files"
COUNT_HEADER = "charge_id,n_sticks,crack,bend\n"


def _config(folder: Path, **extra) -> Path:
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY_PLANT, **extra}))
    return path


def ingest(store_url: str, kind: str, path: Path, config: Path, *options: str):
    """``qcllp ingest <kind> <path>`` in-process; returns the click result."""
    args = ["--config", str(config), "--db", store_url, *options, "ingest", kind, str(path)]
    return CliRunner().invoke(main, args)


def counts(store_url: str) -> tuple[int, int, int]:
    """(readings stored, defect counts stored, rows quarantined)."""
    store = Store.open(store_url)
    try:
        return store.count(Reading), store.count(DefectCount), store.count(QuarantineRow)
    finally:
        store.close()


def quarantined(store_url: str, columns: str) -> list[tuple]:
    """The ``columns`` of every quarantined row, in the order they were quarantined."""
    with Store.open(store_url) as store:
        return [
            tuple(r) for r in store.execute_sql(f"SELECT {columns} FROM quarantine ORDER BY id")
        ]


def one_error_line(result) -> str:  # noqa: ANN001
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("kind", ["measurements", "defects"])
def test_a_binary_file_fails_with_one_line_and_stores_nothing(kind, store_url, tmp_path):
    path = BAD_FILES / "binary.csv"
    result = ingest(store_url, kind, path, _config(tmp_path))
    assert result.exit_code == 1
    assert one_error_line(result) == (
        f"error: {path}: a binary file (NUL bytes in its first line), not CSV text"
    )
    assert counts(store_url) == (0, 0, 0)


def test_a_latin1_byte_quarantines_its_row_and_the_other_rows_are_stored(store_url, tmp_path):
    path = BAD_FILES / "latin1.csv"
    result = ingest(store_url, "measurements", path, _config(tmp_path))
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.strip() == (
        "measurements: 4 records, 3 stored, 0 duplicates, 1 quarantined (undecodable_text: 1)"
    )
    assert counts(store_url) == (3, 0, 1)
    [(row, raw, reason, detail)] = quarantined(store_url, "row_number, raw, reason, detail")
    assert (row, reason) == (3, "undecodable_text")
    assert '"stick_id":"Stab-\\\\xfc"' in raw  # the bad byte stays visible
    assert detail.startswith("stick_id: byte 0xfc at position 5 is not utf-8 text; ")
    assert "'encoding' in the plant config" in detail


def test_a_latin1_file_is_stored_whole_when_the_config_declares_its_encoding(store_url, tmp_path):
    config = _config(tmp_path, encoding="latin-1")
    result = ingest(store_url, "measurements", BAD_FILES / "latin1.csv", config)
    assert result.exit_code == 0 and "4 stored, 0 duplicates, 0 quarantined" in result.stdout
    store = Store.open(store_url)
    sticks = sorted(store.read_readings()["stick_id"])
    store.close()
    assert sticks == ["S-1", "S-2", "S-4", "Stab-\u00fc"]


def test_a_nul_byte_in_a_field_quarantines_the_row_on_both_engines(store_url, tmp_path):
    path = write_csv(tmp_path, "m.csv", GOOD + GOOD.replace("s1", "s\0two"))
    result = ingest(store_url, "measurements", path, _config(tmp_path))
    assert result.exit_code == 0 and "(undecodable_text: 1)" in result.stdout
    assert counts(store_url) == (1, 0, 1)


def test_a_csv_file_named_parquet_fails_with_one_line(store_url, tmp_path):
    path = BAD_FILES / "not_parquet.parquet"
    result = ingest(store_url, "measurements", path, _config(tmp_path))
    assert result.exit_code == 1
    line = one_error_line(result)
    assert line.startswith(f"error: {path}: not a Parquet file Arrow can read (")
    assert counts(store_url) == (0, 0, 0)


@pytest.mark.parametrize("kind", ["measurements", "defects"])
def test_a_semicolon_separated_file_is_told_its_delimiter_looks_wrong(kind, store_url, tmp_path):
    path = BAD_FILES / "semicolon.csv"
    if kind == "defects":
        path = tmp_path / "counts.csv"
        path.write_text("charge_id;n_sticks;crack;bend\nC-100;20;1;0\n")
    result = ingest(store_url, kind, path, _config(tmp_path))
    assert result.exit_code == 1
    assert one_error_line(result) == (
        f"error: {path}: the delimiter looks wrong: the header line is separated by "
        "semicolons, not commas; export the file comma-separated"
    )
    assert counts(store_url) == (0, 0, 0)


def test_a_folder_ingests_every_good_file_reports_each_bad_one_and_exits_1(store_url, tmp_path):
    folder = tmp_path / "drop"
    folder.mkdir()
    for name in ["binary.csv", "latin1.csv", "not_parquet.parquet", "semicolon.csv"]:
        shutil.copy(BAD_FILES / name, folder / name)
    later = "c2,s1,furnace,2025-01-06T07:00:00Z,temperature,1200\n"
    write_csv(folder, "zz_good.csv", GOOD + later)  # sorts after every bad file
    result = ingest(store_url, "measurements", folder, _config(tmp_path))
    assert result.exit_code == 1
    errors = result.stderr.strip().splitlines()
    assert [line.split(": ")[1] for line in errors] == [
        str(folder / "binary.csv"),
        str(folder / "not_parquet.parquet"),
        str(folder / "semicolon.csv"),
    ]
    assert all(line.startswith("error: ") for line in errors)
    assert result.stdout.strip() == (
        "measurements: 6 records, 5 stored, 0 duplicates, 1 quarantined (undecodable_text: 1)"
    )
    assert counts(store_url) == (5, 0, 1)


def test_an_id_of_20_million_characters_is_quarantined_on_both_engines(store_url, tmp_path):
    huge = "c1,{},furnace,2025-01-06T06:00:00Z,temperature,1100\n".format("x" * 20_000_000)
    rows = [GOOD.replace("s1", f"s{i}") for i in range(4)]
    path = write_csv(tmp_path, "huge.csv", "".join(rows[:2]) + huge + "".join(rows[2:]))
    result = ingest(store_url, "measurements", path, _config(tmp_path))
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.strip() == (
        "measurements: 5 records, 4 stored, 0 duplicates, 1 quarantined (id_too_long: 1)"
    )
    assert counts(store_url) == (4, 0, 1)
    [(row, detail, raw)] = quarantined(store_url, "row_number, detail, raw")
    assert row == 3
    assert detail == "stick_id is 20,000,000 characters long; ids may have at most 128"
    assert len(raw) < 2000 and raw.count("x") == 1000  # its beginning, not 20 MB again
    assert "... [20,000,000 characters]" in raw and '"charge_id":"c1"' in raw


def test_ids_of_128_characters_are_stored_and_129_quarantined(store_url, tmp_path):
    ok, long = "k" * 128, "k" * 129
    readings = write_csv(
        tmp_path, "m.csv", GOOD.replace("c1", ok) + GOOD.replace("c1", long).replace("s1", "s2")
    )
    defects = write_csv(tmp_path, "d.csv", f"{ok},20,1,0\n{long},20,1,0\n", header=COUNT_HEADER)
    config = _config(tmp_path)
    assert ingest(store_url, "measurements", readings, config).exit_code == 0
    result = ingest(store_url, "defects", defects, config)
    assert result.exit_code == 0 and "(id_too_long: 1)" in result.stdout
    assert counts(store_url) == (1, 2, 2)  # 2 defect types of one charge
    details = [d for (d,) in quarantined(store_url, "detail")]
    assert details == ["charge_id is 129 characters long; ids may have at most 128"] * 2


@pytest.mark.parametrize("kind", ["measurements", "defects"])
def test_a_path_that_does_not_exist_exits_1_with_one_line(kind, store_url, tmp_path):
    missing = tmp_path / "no_such_export.csv"
    result = ingest(store_url, kind, missing, _config(tmp_path))
    assert result.exit_code == 1
    assert one_error_line(result) == f"error: {missing}: no such file or folder"


def test_the_first_line_not_in_the_declared_encoding_fails_the_file(store_url, tmp_path):
    path = tmp_path / "m.csv"
    path.write_bytes(HEADER.replace("value", "v\xe4lue").encode("latin-1") + GOOD.encode())
    result = ingest(store_url, "measurements", path, _config(tmp_path))
    assert result.exit_code == 1
    assert one_error_line(result) == (
        f"error: {path}: the header line is not utf-8 text (byte 0xe4 at position 45): a binary "
        "file, or text in another encoding; declare the files' encoding as 'encoding' in the "
        "plant config (e.g. cp1252)"
    )
    assert counts(store_url) == (0, 0, 0)
