"""The lock-out bay page as the plant runs it: ``qcllp serve bay`` in a process of its own on
a SQLite plant with flags (:mod:`tests.service.bay_plant`), talked to over HTTP and driven
in headless Chromium at a tablet's size (800 x 1280, upright, touch).

What an inspector does: opens the page (no session: the login), enters the token, picks the
station, reads the sticks awaiting inspection newest first, taps a result; the stick leaves
the list and an inspection row holds the result. A second tablet whose list is older taps
another result for the same stick and is refused with the first shown. What an attacker
cannot do: see the page without the token, or store a result from another site's page
(403 for a foreign Origin or a missing anti-forgery token; nothing stored).

Chromium is Debian's (``/usr/bin/chromium``), driven by Playwright for Python (the ``test``
extra; no browser of its own is downloaded); without either the browser tests skip with
that reason. The list's screenshot is saved in the test's folder, and also at the path in
``QCLLP_BAY_SCREENSHOT`` when that is set (for a person to look at).
"""

from __future__ import annotations

import http.client
import os
import shutil
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import pytest
from prometheus_client.parser import text_string_to_metric_families

from qcllp.store import Store
from tests.service.bay_plant import AWAITING_AT_FURNACE, TOKEN, make_bay_plant
from tests.service.harness import ServiceProcess

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TABLET = {"width": 800, "height": 1280}


@pytest.fixture
def plant(tmp_path):
    """Each test's own plant: what one test stores is no other's starting point."""
    return tmp_path, make_bay_plant(tmp_path)


@pytest.fixture
def bay(plant):
    """``qcllp serve bay`` on the plant, with its token; stopped by SIGTERM (exit 0)."""
    folder, _ = plant
    proc = ServiceProcess(
        ["--config", str(folder / "plant.yaml")],
        ["bay"],
        folder=folder,
        name="bay",
        env={"QCLLP_BAY_TOKEN": TOKEN},
    )
    try:
        assert proc.wait_up()[1]["status"] == "ok"
        yield proc
        assert proc.terminate() == 0, proc.log()
        assert [e["event"] for e in proc.events()][-2:] == ["stopping", "stopped"]
    finally:
        proc.stop_if_running()


def inspections(config) -> list[tuple]:  # noqa: ANN001
    with Store.open(config.database_url) as store:
        return store.execute_sql(
            "SELECT i.charge_id, i.stick_id, i.result, i.audit, f.decision, b.source "
            "FROM inspections i JOIN flags f ON f.id = i.flag_id "
            "JOIN ingestion_batches b ON b.id = i.batch_id ORDER BY i.id"
        )


# --------------------------------------------------------------------------- over HTTP
def request(proc, method, path, *, form=None, headers=None):  # noqa: ANN001, ANN201
    """(status, headers, body) of one request, redirects not followed."""
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=10)
    body = urlencode(form).encode() if form is not None else None
    sent = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
    conn.request(method, path, body=body, headers={**sent, **(headers or {})})
    answer = conn.getresponse()
    result = answer.status, answer.headers, answer.read().decode()
    conn.close()
    return result


def counted(proc) -> dict[str, float]:  # noqa: ANN001
    """The bay's /metrics counters as ``{"name{label}": value}`` (one label each)."""
    status, _, body = request(proc, "GET", "/metrics")
    assert status == 200
    found = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name.startswith("qcllp_bay_") and sample.name.endswith("_total"):
                found[f"{sample.name}{{{','.join(sample.labels.values())}}}"] = sample.value
    return found


def login_cookie(proc) -> str:  # noqa: ANN001
    own = {"Origin": f"http://127.0.0.1:{proc.port}"}
    status, headers, _ = request(proc, "POST", "/login", form={"token": TOKEN}, headers=own)
    assert status == 303 and headers["Location"] == "/"
    return headers["Set-Cookie"].split(";")[0]


def test_without_a_token_the_service_does_not_start_and_says_so_in_one_line(plant):
    folder, _ = plant
    proc = ServiceProcess(
        ["--config", str(folder / "plant.yaml")],
        ["bay"],
        folder=folder,
        name="bay-no-token",
        env={"QCLLP_BAY_TOKEN": "", "QCLLP_BAY_TOKEN_FILE": ""},
    )
    try:
        assert proc.proc.wait(timeout=60) == 1
    finally:
        proc.stop_if_running()
    assert proc.log().splitlines() == [
        "error: the lock-out bay page needs a token: set QCLLP_BAY_TOKEN, or "
        "QCLLP_BAY_TOKEN_FILE to a file only its owner can read (e.g. openssl rand -hex 16 > "
        "bay-token; chmod 600 bay-token)"
    ]


def test_no_token_no_page_and_a_forged_post_changes_nothing(bay, plant):
    _, config = plant
    own = {"Origin": f"http://127.0.0.1:{bay.port}"}
    for path in ("/", "/?station=furnace"):
        status, headers, body = request(bay, "GET", path)
        assert (status, headers["Location"]) == (303, "/login") and "C-1042" not in body
    tap = {"station": "furnace", "charge_id": "C-1042", "stick_id": "03", "result": "ok"}
    assert request(bay, "POST", "/inspect", form=tap, headers=own)[0] == 401
    status, _, body = request(bay, "POST", "/login", form={"token": "guess" * 8}, headers=own)
    assert status == 401 and "That is not the token" in body
    status, headers, _ = request(bay, "POST", "/login", form={"token": TOKEN}, headers=own)
    flags = [f.strip() for f in headers["Set-Cookie"].split(";")[1:]]
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(flags), flags
    cookie = {"Cookie": headers["Set-Cookie"].split(";")[0]}
    status, _, page = request(bay, "GET", "/?station=furnace", headers=cookie)
    assert status == 200 and 'data-stick="03"' in page
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    forged = [
        ({**cookie, "Origin": "http://evil.example"}, {**tap, "csrf": csrf}),
        ({**cookie, "Origin": "null"}, {**tap, "csrf": csrf}),
        (cookie, {**tap, "csrf": csrf}),  # neither Origin nor Referer
        ({**cookie, **own}, tap),  # no anti-forgery token
        ({**cookie, **own}, {**tap, "csrf": "0" * 64}),
        ({**cookie, **own, "Sec-Fetch-Site": "cross-site"}, {**tap, "csrf": csrf}),
    ]
    for headers, form in forged:
        status, _, body = request(bay, "POST", "/inspect", form=form, headers=headers)
        assert status == 403 and "refused" in body, (headers, form, status)
    assert inspections(config) == []
    status, _, page = request(bay, "GET", "/?station=furnace", headers=cookie)
    assert 'data-stick="03"' in page  # still waiting
    assert request(bay, "GET", "/healthz")[0] == 200
    assert counted(bay) == {
        **{f"qcllp_bay_results_total{{{o}}}": 0 for o in ("stored", "same", "refused", "invalid")},
        "qcllp_bay_requests_refused_total{401}": 1,
        "qcllp_bay_requests_refused_total{403}": len(forged),
        "qcllp_bay_logins_total{ok}": 1,
        "qcllp_bay_logins_total{wrong}": 1,
    }


# --------------------------------------------------------------------------- in Chromium
@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api",
        reason="Playwright for Python not installed (pip install -e '.[test]')",
    )
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium not found (Debian's package, deploy/bootstrap.sh --test)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


def tablet(browser, bay):  # noqa: ANN001, ANN201
    """A new tablet (its own cookies) logged in and showing the furnace's list."""
    context = browser.new_context(viewport=TABLET, has_touch=True, is_mobile=True)
    page = context.new_page()
    page.goto(f"http://127.0.0.1:{bay.port}/?station=furnace")
    assert page.url.endswith("/login")
    page.fill("#token", TOKEN)
    page.tap("button[type=submit]")
    page.wait_for_url("**/")
    page.get_by_role("link", name="furnace").tap()
    page.wait_for_url("**/?station=furnace")
    return page


def listed(page) -> list[tuple[str, str]]:  # noqa: ANN001
    cards = page.locator("li.stick")
    return [
        (cards.nth(i).get_attribute("data-charge"), cards.nth(i).get_attribute("data-stick"))
        for i in range(cards.count())
    ]


def test_the_page_at_tablet_size_and_a_tap_that_stores_an_inspection(browser, bay, plant):
    folder, config = plant
    page = tablet(browser, bay)
    assert listed(page) == AWAITING_AT_FURNACE
    first = page.locator("li.stick").first
    assert first.locator(".kind").inner_text().lower() == "locked out"
    assert first.locator(".charge").inner_text() == "C-1042"
    assert first.locator(".stick-id").inner_text() == "11"
    assert first.locator(".p").inner_text() == "97%"
    assert first.locator(".time").inner_text() == arrival_time(config, "C-1042", "11")
    assert "at or above the threshold 0.62" in first.locator(".reason").inner_text()
    buttons = first.locator("button")
    assert [buttons.nth(i).inner_text() for i in range(buttons.count())] == ["OK", "crack", "bend"]
    for i in range(buttons.count()):
        box = buttons.nth(i).bounding_box()
        assert box["height"] >= 72 and box["width"] >= 120, box  # a gloved finger's target
    assert page.evaluate("document.documentElement.scrollWidth") <= TABLET["width"]
    shot = page.screenshot()
    (folder / "bay-list.png").write_bytes(shot)
    if os.environ.get("QCLLP_BAY_SCREENSHOT"):
        Path(os.environ["QCLLP_BAY_SCREENSHOT"]).write_bytes(shot)

    first.get_by_role("button", name="crack").tap()
    page.wait_for_url("**stored=*")
    assert page.locator(".banner").inner_text() == "Stored: stick 11 of charge C-1042 is crack."
    assert listed(page) == AWAITING_AT_FURNACE[1:]
    (folder / "bay-after-tap.png").write_bytes(page.screenshot())
    assert inspections(config) == [("C-1042", "11", "crack", 0, "lock_out", "bay page, 127.0.0.1")]
    page.reload()  # the list again; the tap is not sent twice
    assert listed(page) == AWAITING_AT_FURNACE[1:] and len(inspections(config)) == 1
    page.context.close()


def arrival_time(config, charge: str, stick: str) -> str:  # noqa: ANN001
    """The flag's arrival in the plant's time zone as the page shows it: HH:MM today, with
    the day before it otherwise (a run just after the plant's midnight)."""
    with Store.open(config.database_url) as store:
        ((at,),) = store.execute_sql(
            "SELECT arrived_at FROM flags WHERE charge_id = :c AND stick_id = :s",
            c=charge,
            s=stick,
        )
    zone = ZoneInfo(config.timezone)
    local = datetime.fromisoformat(str(at)).replace(tzinfo=ZoneInfo("UTC")).astimezone(zone)
    today = datetime.now(zone).date()
    return local.strftime("%H:%M") if local.date() == today else local.strftime("%d %b %H:%M")


def test_a_second_tablet_is_refused_and_shown_the_first_result(browser, bay, plant):
    folder, config = plant
    first, second = tablet(browser, bay), tablet(browser, bay)
    card = 'li.stick[data-charge="C-1041"][data-stick="07"]'
    assert first.locator(card).count() == second.locator(card).count() == 1
    first.locator(card).get_by_role("button", name="bend").tap()
    first.wait_for_url("**stored=*")
    second.locator(card).get_by_role("button", name="OK").tap()  # its list is older
    second.wait_for_url("**refused=*")
    banner = second.locator(".banner").inner_text()
    assert banner.startswith("Not stored: stick 07 of charge C-1041 was already recorded as bend")
    assert "bay page, 127.0.0.1). Your tap: ok. The first result stays." in banner
    assert second.locator(card).count() == 0
    (folder / "bay-refused.png").write_bytes(second.screenshot())
    stored = [r for r in inspections(config) if r[:2] == ("C-1041", "07")]
    assert [r[2] for r in stored] == ["bend"]
    taps = {k: v for k, v in counted(bay).items() if k.startswith("qcllp_bay_results")}
    assert taps == {
        "qcllp_bay_results_total{stored}": 1,
        "qcllp_bay_results_total{same}": 0,
        "qcllp_bay_results_total{refused}": 1,
        "qcllp_bay_results_total{invalid}": 0,
    }
    with Store.open(config.database_url) as store:
        assert ("conflicting_inspection",) in store.execute_sql("SELECT reason FROM quarantine")
    first.context.close()
    second.context.close()


def test_another_sites_form_cannot_store_a_result(browser, bay, plant):
    """A page on another port of the same host is the same *site*: SameSite=Strict sends the
    cookie along. Even with the session's anti-forgery token in its form (as if it had
    leaked), the post is refused as one from another origin (Chromium says ``Sec-Fetch-Site:
    same-site``; its Origin, another port, would be refused too): 403, nothing stored."""
    _, config = plant
    page = tablet(browser, bay)
    csrf = page.locator('input[name="csrf"]').first.get_attribute("value")
    evil = _OnePage(
        f'<form method="post" action="http://127.0.0.1:{bay.port}/inspect">'
        f'<input name="csrf" value="{csrf}"><input name="station" value="furnace">'
        '<input name="charge_id" value="C-1042"><input name="stick_id" value="03">'
        '<button name="result" value="ok">win</button></form>'
    )
    try:
        page.goto(evil.url)
        with page.expect_response(f"http://127.0.0.1:{bay.port}/inspect") as answer:
            page.tap("button")
        assert answer.value.status == 403
    finally:
        evil.stop()
    assert [r for r in inspections(config) if r[:2] == ("C-1042", "03")] == []
    refused = [e for e in bay.events() if e["event"] == "refused"]
    assert refused[-1]["why"] == "refused: Sec-Fetch-Site is 'same-site', not same-origin"
    page.context.close()


class _OnePage:
    """A page of another origin (another port), served from a thread."""

    def __init__(self, html: str):
        body = html.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
