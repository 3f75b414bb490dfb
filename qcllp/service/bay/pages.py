"""The bay page's HTML: plain server-rendered pages, no script.

Made for a tablet at arm's length, in gloves: text at 22 px and more, each result a button
at least 72 px high with room between them, ``ok`` green and apart from the defect types
(the plant config's, as configured), one card per stick with charge, stick, time,
probability and reason above its buttons. A tap submits the card's form; the answer is the
list again with a banner saying what was stored, or what was stored first when the entry was
refused. No script runs (the Content-Security-Policy allows none): every tap is a form
``POST`` with its anti-forgery token, and the list reloads itself every
:data:`REFRESH_S` seconds to show sticks locked out meanwhile. Every value from the database
or a request is escaped (:func:`html.escape`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from qcllp.service.bay.awaiting import LIST_LIMIT, Stored, Waiting
from qcllp.service.bay.style import CSS

__all__ = [
    "CSS",
    "Banner",
    "StationView",
    "login_page",
    "message_page",
    "picker_page",
    "station_page",
]

REFRESH_S = 60
_DECISION = {"lock_out": "Locked out", "inspect": "Audit sample"}


@dataclass(frozen=True)
class Banner:
    """The line above the list after a tap: ``kind`` is ``stored``, ``same``, ``refused`` or
    ``invalid``; ``inspection`` the stored one it names, ``tried`` the result tapped."""

    kind: str
    inspection: Stored | None = None
    tried: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class StationView:
    """Everything the list of one station shows."""

    station: str
    stations: Sequence[str]
    rows: Sequence[Waiting]
    more: bool
    classes: Sequence[str]  # ok and the defect types, as configured
    csrf: str
    timezone: str
    banner: Banner | None = None


def _page(title: str, body: str, *, refresh: str | None = None) -> str:
    meta = (
        f'<meta http-equiv="refresh" content="{REFRESH_S}; url={escape(refresh)}">'
        if refresh
        else ""
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'{meta}<title>{escape(title)}</title><link rel="stylesheet" href="/bay.css">'
        f"</head><body>{body}</body></html>\n"
    )


def login_page(error: str | None = None) -> str:
    """The form that asks for the token once per tablet."""
    problem = f'<p class="banner bad" role="alert">{escape(error)}</p>' if error else ""
    return _page(
        "Lock-out bay: log in",
        '<header><h1>Lock-out bay</h1></header><main class="login">'
        f'{problem}<form method="post" action="/login">'
        '<label for="token">Access token of this plant\'s bay page</label>'
        '<input id="token" name="token" type="password" autocomplete="current-password" '
        "required autofocus>"
        '<button type="submit" class="go">Log in</button></form>'
        '<p class="hint">Ask the quality engineer for the token. You enter it once on this '
        "tablet.</p></main>",
    )


def message_page(title: str, text: str, *, link: str = "/", link_text: str = "Back") -> str:
    """A page saying one thing (not found, refused, log in again)."""
    return _page(
        title,
        f"<header><h1>{escape(title)}</h1></header><main>"
        f'<p class="banner bad" role="alert">{escape(text)}</p>'
        f'<p><a class="go" href="{escape(link)}">{escape(link_text)}</a></p></main>',
    )


def picker_page(counts: dict[str, tuple[int, bool]], csrf: str) -> str:
    """The stations to choose from, with how many sticks wait at each."""
    links = "".join(
        f'<li><a class="station" href="/?{urlencode({"station": name})}">'
        f"<b>{escape(name)}</b> <span>{_waiting_text(n, more)}</span></a></li>"
        for name, (n, more) in counts.items()
    )
    return _page(
        "Lock-out bay",
        "<header><h1>Lock-out bay</h1></header><main>"
        f'<p class="count">Choose your station.</p><ul class="stations">{links}</ul></main>'
        f"{_footer(csrf)}",
    )


def station_page(view: StationView) -> str:
    """The sticks awaiting inspection at one station, newest first, each with its buttons."""
    zone = ZoneInfo(view.timezone)
    today = datetime.now(zone).date()
    cards = "".join(_card(view, row, zone, today) for row in view.rows)
    count = _waiting_text(len(view.rows), view.more)
    more = f'<p class="hint">Only the newest {LIST_LIMIT} are shown.</p>' if view.more else ""
    empty = '<p class="empty">Nothing waits here. New lock-outs appear by themselves.</p>'
    body = (
        f'<header><h1>Lock-out bay <span class="where">{escape(view.station)}</span></h1>'
        f"{_station_nav(view)}</header><main>"
        f"{_banner(view.banner, zone, today)}"
        f'<p class="count">{count}{", newest first" if view.rows else ""}.</p>'
        f'<ol class="sticks">{cards}</ol>{empty if not view.rows else ""}{more}</main>'
        f"{_footer(view.csrf)}"
    )
    title = f"Lock-out bay: {view.station}"
    return _page(title, body, refresh="/?" + urlencode({"station": view.station}))


def _waiting_text(n: int, more: bool) -> str:
    if n == 0:
        return "no stick waits"
    return f"{n}{'+' if more else ''} stick{'s' if n != 1 or more else ''} waiting"


def _station_nav(view: StationView) -> str:
    if len(view.stations) < 2:
        return ""
    current = ' aria-current="page"'
    links = "".join(
        f'<a href="/?{urlencode({"station": s})}"{current if s == view.station else ""}>'
        f"{escape(s)}</a>"
        for s in view.stations
    )
    return f'<nav aria-label="Stations">{links}</nav>'


def _when(at: datetime, zone: ZoneInfo, today) -> str:  # noqa: ANN001
    local = at.astimezone(zone)
    return local.strftime("%H:%M") if local.date() == today else local.strftime("%d %b %H:%M")


def _card(view: StationView, row: Waiting, zone: ZoneInfo, today) -> str:  # noqa: ANN001
    p = "–" if row.probability is None else f"{row.probability:.0%}"
    hidden = "".join(
        f'<input type="hidden" name="{k}" value="{escape(v)}">'
        for k, v in (
            ("csrf", view.csrf),
            ("station", view.station),
            ("charge_id", row.charge_id),
            ("stick_id", row.stick_id),
        )
    )
    buttons = "".join(
        f'<button type="submit" name="result" value="{escape(c)}" '
        f'class="{"ok" if c == "ok" else "defect"}">{escape(c.upper() if c == "ok" else c)}'
        "</button>"
        for c in view.classes
    )
    return (
        f'<li class="stick {escape(row.decision)}" data-charge="{escape(row.charge_id)}" '
        f'data-stick="{escape(row.stick_id)}">'
        f'<div class="top"><span class="kind">{_DECISION.get(row.decision, row.decision)}'
        f'</span><span class="time">{_when(row.at, zone, today)}</span></div>'
        f'<dl class="ids"><div><dt>Charge</dt><dd class="charge">{escape(row.charge_id)}</dd>'
        f'</div><div><dt>Stick</dt><dd class="stick-id">{escape(row.stick_id)}</dd></div>'
        f'<div><dt>Probability</dt><dd class="p">{p}</dd></div></dl>'
        f'<p class="reason">{escape(row.why)}</p>'
        f'<form method="post" action="/inspect">{hidden}<div class="buttons">{buttons}</div>'
        "</form></li>"
    )


def _banner(banner: Banner | None, zone: ZoneInfo, today) -> str:  # noqa: ANN001
    if banner is None:
        return ""
    first = banner.inspection
    if banner.kind == "invalid" or first is None:
        text = f"Not stored: {banner.detail or 'the entry was refused'}"
        return f'<p class="banner bad" role="alert">{escape(text)}</p>'
    stick = f"stick {first.stick_id} of charge {first.charge_id}"
    said = f"{_when(first.at, zone, today)}, {first.source}"
    if banner.kind == "stored":
        text, css = f"Stored: {stick} is {first.result}.", "good"
    elif banner.kind == "same":
        text, css = f"Already stored: {stick} is {first.result} ({said}). Nothing changed.", "info"
    else:
        text, css = (
            f"Not stored: {stick} was already recorded as {first.result} ({said}). "
            f"Your tap: {banner.tried}. The first result stays.",
            "bad",
        )
    role = "status" if css == "good" else "alert"
    return f'<p class="banner {css}" role="{role}">{escape(text)}</p>'


def _footer(csrf: str) -> str:
    return (
        '<footer><form method="post" action="/logout">'
        f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
        '<button type="submit" class="quiet">Log out this tablet</button></form></footer>'
    )
