"""The lock-out bay page (``qcllp serve bay``): the sticks awaiting inspection at a station,
and one tap to store an inspector's result as an inspection.

**Shape.** One service per plant serves every station (the inspector picks the station on
the page; a tablet bookmarks its station's list): the bay is one place with a few tablets,
and one process is one port, one token and one unit to watch, where a page per scorer would
tie the bay to the scorers' restarts. It reads and writes only the plant database, like the
other services, so it runs anywhere the database is reachable.

**No web framework.** The page is a handful of routes with server-rendered HTML and plain
form posts; the standard library's request handler on the services' hardened server
(:class:`qcllp.service.http.GuardedServer`: slow or silent clients cannot hold its threads)
does that in a few hundred lines, with nothing to keep up to date but Python itself. A
framework would bring routing and templates this page does not need, and its own server to
harden again. Every value is escaped by hand in one place (:mod:`.pages`), and no script
runs on the page at all.

Modules: :mod:`.awaiting` (the list's query, a stored inspection), :mod:`.entry` (a tap
stored through the inspection files' validation), :mod:`.auth` (token, session cookie,
anti-forgery checks), :mod:`.pages` and :mod:`.style` (HTML and CSS), :mod:`.server` (the
routes), :mod:`.service` (the process).
"""

from qcllp.service.bay.service import run_bay

__all__ = ["run_bay"]
