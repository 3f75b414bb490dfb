"""The lock-out bay page's parts without a browser: the list of sticks awaiting inspection
(its rows, its order, its bound, its index), a tap stored through the inspection files'
validation (stored, the same again, refused showing the first, quarantined), the session
cookie and the anti-forgery checks, and the token's rules (SQLite, real files)."""

from __future__ import annotations

import http.client
import json
import re
import threading
from datetime import UTC, datetime
from urllib.parse import urlencode

import pytest
from sqlalchemy import create_engine

from qcllp.service.bay.auth import COOKIE, Sessions, cross_site_problem, load_token
from qcllp.service.bay.awaiting import awaiting
from qcllp.service.bay.entry import Entry, record_entry
from qcllp.service.bay.server import BayApp, handler_class
from qcllp.service.http import GuardedServer
from qcllp.store import Store
from qcllp.store.credentials import CredentialError
from tests.service.bay_plant import AUDIT_REASON, AWAITING_AT_FURNACE, TOKEN, make_bay_plant


@pytest.fixture
def plant(store_url, tmp_path):
    """The bay plant on each engine (SQLite, PostgreSQL)."""
    config = make_bay_plant(tmp_path, store_url)
    with Store.open(config.database_url) as store:
        yield store, config


@pytest.fixture
def sqlite_plant(tmp_path):
    config = make_bay_plant(tmp_path)
    with Store.open(config.database_url) as store:
        yield store, config


def waiting(store: Store, station: str, **kwargs) -> list[tuple[str, str]]:
    with store.engine.connect() as conn:
        rows, _ = awaiting(conn, station, **kwargs)
    return [(r.charge_id, r.stick_id) for r in rows]


def test_lock_outs_and_audit_samples_wait_newest_first_until_inspected(plant):
    store, config = plant
    assert waiting(store, "furnace") == AWAITING_AT_FURNACE
    assert waiting(store, "rolling") == [("C-1042", "05")]
    with store.engine.connect() as conn:
        rows, more = awaiting(conn, "furnace")
    assert not more
    assert [r.why for r in rows] == [
        "locked out: p 0.97 at or above the threshold 0.62",
        "locked out: p 0.78 at or above the threshold 0.62",
        AUDIT_REASON,
        "locked out: p 0.91 at or above the threshold 0.62",
    ]
    assert rows[0].at > rows[1].at  # the stick's arrival, not the time it was scored
    assert record_entry(store, config, Entry("furnace", "C-1042", "03", "ok"), "t").status == (
        "stored"
    )
    assert waiting(store, "furnace") == [AWAITING_AT_FURNACE[0], *AWAITING_AT_FURNACE[2:]]
    assert waiting(store, "rolling") == [("C-1042", "05")]  # an inspection is per station


def test_the_list_is_bounded_and_says_that_more_wait(plant):
    store, _ = plant
    with store.engine.connect() as conn:
        rows, more = awaiting(conn, "furnace", limit=2)
    assert [(r.charge_id, r.stick_id) for r in rows] == AWAITING_AT_FURNACE[:2]
    assert more
    # only the station's newest `scan` flags are looked at: the 3 newest hold 2 lock-outs
    assert waiting(store, "furnace", scan=3) == AWAITING_AT_FURNACE[:2]


def test_the_list_walks_the_flags_station_index_and_the_inspections_key(sqlite_plant):
    """The plan SQLite chooses: the flags' (station, id) index in its order (no sort of the
    station's history), one look-up of the inspections' unique key per candidate."""
    store, _ = sqlite_plant
    with store.engine.connect() as conn:
        statements = []
        conn.execute = _recording(conn.execute, statements)
        awaiting(conn, "furnace")
        compiled = statements[0].compile(
            dialect=store.engine.dialect, compile_kwargs={"literal_binds": True}
        )
        plan = [r[3] for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}")]
    assert any(re.search(r"SEARCH flags USING INDEX ix_flags_station_id", p) for p in plan), plan
    assert any("SEARCH inspections USING COVERING INDEX" in p for p in plan), plan
    assert not any("TEMP B-TREE" in p or p.startswith("SCAN flags") for p in plan), plan


def _recording(execute, into: list):  # noqa: ANN001, ANN202
    def run(statement, *args, **kwargs):  # noqa: ANN001, ANN202
        into.append(statement)
        return execute(statement, *args, **kwargs)

    return run


def test_a_tap_is_stored_as_an_inspection_batch_with_the_flag_and_audit_mark(plant):
    store, config = plant
    # 02:30 in Berlin the night 02:00-03:00 came twice: stored with its offset, not refused
    tap = datetime(2025, 10, 26, 0, 30, tzinfo=UTC)
    locked = record_entry(store, config, Entry("furnace", "C-1042", "11", "crack"), "bay page, x")
    audit = record_entry(store, config, Entry("furnace", "C-1041", "15", "ok"), "y", now=tap)
    assert (locked.status, locked.inspection.result, locked.inspection.source) == (
        "stored", "crack", "bay page, x",
    )  # fmt: skip
    assert audit.inspection.at == tap
    rows = store.execute_sql(
        "SELECT i.stick_id, i.result, i.audit, f.decision, b.kind, b.status, b.rows_stored "
        "FROM inspections i JOIN flags f ON f.id = i.flag_id "
        "JOIN ingestion_batches b ON b.id = i.batch_id ORDER BY i.id"
    )
    assert [tuple(r[:2]) + (bool(r[2]),) + tuple(r[3:]) for r in rows] == [
        ("11", "crack", False, "lock_out", "inspections", "done", 1),
        ("15", "ok", True, "inspect", "inspections", "done", 1),
    ]


def test_a_second_result_is_refused_naming_the_first_and_the_same_again_changes_nothing(plant):
    store, config = plant
    first = record_entry(store, config, Entry("furnace", "C-1041", "07", "bend"), "bay page, a")
    other = record_entry(store, config, Entry("furnace", "C-1041", "07", "ok"), "bay page, b")
    again = record_entry(store, config, Entry("furnace", "C-1041", "07", "bend"), "bay page, b")
    assert (other.status, other.reason) == ("refused", "conflicting_inspection")
    assert other.inspection == first.inspection  # the first result, its time and tablet
    assert (other.inspection.result, other.inspection.source) == ("bend", "bay page, a")
    assert (again.status, again.inspection) == ("same", first.inspection)
    assert store.execute_sql("SELECT result FROM inspections") == [("bend",)]
    assert store.execute_sql("SELECT reason, source FROM quarantine") == [
        ("conflicting_inspection", "bay page, b")
    ]


def test_a_result_the_plant_does_not_name_is_quarantined_as_a_files_row_would_be(plant):
    store, config = plant
    wrong = record_entry(store, config, Entry("furnace", "C-1041", "07", "Crack"), "bay page, a")
    assert (wrong.status, wrong.reason, wrong.inspection) == ("invalid", "unknown_result", None)
    assert "spelled 'crack' in the plant config" in wrong.detail
    nowhere = record_entry(store, config, Entry("rolling", "C-1041", "07", "ok"), "bay page, a")
    assert nowhere.reason == "stick_not_at_station"
    assert store.execute_sql("SELECT count(*) FROM inspections") == [(0,)]


def test_a_session_cookie_holds_only_while_signed_by_this_token_and_young_enough():
    sessions = Sessions(TOKEN, max_age_s=3600)
    cookie = sessions.issue(now=1_000_000)
    sid = sessions.session_of(cookie, now=1_000_100)
    assert sid is not None and sid in cookie
    assert sessions.session_of(cookie, now=1_000_000 + 3601) is None  # expired
    assert sessions.session_of(cookie, now=999_000) is None  # issued in the future
    body, mac = cookie.rsplit(".", 1)
    assert sessions.session_of(f"{body}.{'0' * len(mac)}", now=1_000_100) is None
    sid_part, issued = body.split(".")
    assert sessions.session_of(f"{sid_part}.{issued}9.{mac}", now=1_000_100) is None
    assert Sessions(TOKEN + "x", 3600).session_of(cookie, now=1_000_100) is None  # new token
    assert sessions.session_of(None) is None and sessions.session_of("a.b") is None
    assert sessions.csrf_ok(sid, sessions.csrf_token(sid))
    assert not sessions.csrf_ok(sid, None) and not sessions.csrf_ok(sid, "0" * 64)
    assert not sessions.csrf_ok("another-session", sessions.csrf_token(sid))
    assert sessions.token_ok(TOKEN) and sessions.token_ok(f" {TOKEN}\n")
    assert not sessions.token_ok(TOKEN[:-1]) and not sessions.token_ok("")


_SAME, _CROSS = "same-origin", "cross-site"
ORIGIN_CASES = [
    ("own_origin", {"Host": "bay:9467", "Origin": "http://bay:9467"}, None),
    ("own_referer", {"Host": "bay:9467", "Referer": "http://bay:9467/?station=x"}, None),
    ("same_origin_fetch", {"Host": "b", "Origin": "https://b", "Sec-Fetch-Site": _SAME}, None),
    ("other_origin", {"Host": "bay:9467", "Origin": "http://evil.example"}, "Origin"),
    ("other_port", {"Host": "bay:9467", "Origin": "http://bay:9468"}, "Origin"),
    ("null_origin", {"Host": "bay:9467", "Origin": "null"}, "Origin"),
    ("cross_site_fetch", {"Host": "b", "Origin": "http://b", "Sec-Fetch-Site": _CROSS}, _CROSS),
    ("no_origin_no_referer", {"Host": "bay:9467"}, "neither Origin nor Referer"),
    ("origin_wins", {"Host": "b", "Origin": "http://evil", "Referer": "http://b/"}, "Origin"),
    ("no_host", {"Origin": "http://bay:9467"}, "no Host"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("headers", "says"), [c[1:] for c in ORIGIN_CASES], ids=[c[0] for c in ORIGIN_CASES]
)
def test_a_post_from_another_site_is_recognized(headers, says):
    problem = cross_site_problem(headers)
    assert problem is None if says is None else says in problem


def test_the_token_comes_from_the_credentials_and_must_be_long_enough(tmp_path):
    assert load_token({"QCLLP_BAY_TOKEN": TOKEN}) == TOKEN
    path = tmp_path / "bay-token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    assert load_token({"QCLLP_BAY_TOKEN_FILE": str(path)}) == TOKEN
    with pytest.raises(CredentialError, match="needs a token: set QCLLP_BAY_TOKEN, or"):
        load_token({})
    with pytest.raises(CredentialError, match="token is 8 characters long; use at least 16"):
        load_token({"QCLLP_BAY_TOKEN": "12345678"})


def test_a_database_that_does_not_answer_is_said_on_the_page_and_in_healthz(tmp_path):
    """The page's server in this process, on a database file that cannot be opened: the list
    and a tap answer 503 with a sentence for the inspector, ``/healthz`` 503 with the error."""
    config = make_bay_plant(tmp_path)
    gone = Store(create_engine(f"sqlite:///{tmp_path / 'no-such-folder' / 'plant.sqlite'}"))
    sessions = Sessions(TOKEN, max_age_s=3600)
    server = GuardedServer(
        ("127.0.0.1", 0), handler_class(BayApp(gone, config, sessions)), idle_s=5, max_workers=2
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        cookie = f"{COOKIE}={sessions.issue()}"
        sid = sessions.session_of(cookie.split("=", 1)[1])
        status, body = _get(port, "/?station=furnace", cookie)
        assert status == 503 and "The database does not answer" in body
        tap = urlencode({"csrf": sessions.csrf_token(sid), "station": "furnace",
                         "charge_id": "C-1042", "stick_id": "11", "result": "ok"})  # fmt: skip
        status, body = _post(port, "/inspect", tap, cookie)
        assert status == 503 and "a result stored already is not stored twice" in body
        status, body = _get(port, "/healthz", cookie)
        assert status == 503 and json.loads(body)["status"] == "unhealthy"
    finally:
        server.stopping.set()
        thread.join(timeout=5)
        server.server_close()


def _get(port: int, path: str, cookie: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers={"Cookie": cookie})
    answer = conn.getresponse()
    return answer.status, answer.read().decode()


def _post(port: int, path: str, body: str, cookie: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Cookie": cookie, "Origin": f"http://127.0.0.1:{port}"}
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    conn.request("POST", path, body=body, headers=headers)
    answer = conn.getresponse()
    return answer.status, answer.read().decode()
