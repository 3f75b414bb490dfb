"""The flag file for the line's PLC/MES gateway: one JSON line per flag, each exactly once.

A station has at most one sink, and a sink belongs to at most one station. Which file it is
lives in the station's scorer checkpoint (``sink_path``, resolved and absolute), next to the
offset up to which the file holds committed flags (``sink_offset``) and the highest flag id
it holds (``sink_flag_id``, the delivery cursor).

**Claiming** (:func:`claim_sink`) puts a file in the checkpoint -- path and its size then (0
for a new file) -- in a transaction of its own, *before* any step appends a byte. So from the
first append on, the committed offset is known, and whatever lies beyond it was written by a
step that never committed (disk full part-way, ``kill -9``): the next step cuts it off before
it appends (:meth:`FlagSink.prepare`). Taking the file's size as committed after a failed
step would keep those bytes (a torn line, and duplicates once the flags are decided again).
Bytes before the claim were not written by qcllp and are never cut.

**Ownership**: a claim is refused, with one line naming the owner, when another station's
checkpoint names the same file (two stations appending to one file cut each other's lines
back as "uncommitted"), and when the station's own checkpoint names another file (two
scorers of one station on two files would split its flags). Moving a station's sink is an
explicit act (:func:`claim_sink` with ``move=True``, ``qcllp sink move``): the old file is cut
back to its committed flags and left as it is, and every flag not delivered yet -- the cursor
is kept -- goes to the new file. Claims are serialized plant-wide (SQLite's writer lock; on
PostgreSQL a transaction-scoped advisory lock for claims, then the station's scorer lock, so a
claim never lands in the middle of a step of that station).

**Delivery by cursor**: a step appends every flag of the station with an id above the cursor
(:mod:`qcllp.scoring.step`), not only the ones it inserted itself, and commits the new
offset and cursor with them. So a flag written while no scorer held the sink open
(``qcllp score``) still reaches it at the next step, and no code path can leave one out.

**Rotation**: once the committed flags fill ``scorer.sink_max_bytes``, a step moves the file
aside as ``<file>.<cursor>`` (the id of its last flag: the rotated files sort by their flags)
before it appends, starts an empty file at the same path and commits offset 0 with its flags;
the oldest rotated files beyond ``scorer.sink_keep_rotated`` are deleted. A gateway reading the
file follows it as it follows logrotate's ``create`` mode (``tail -F``). Killed after the
rename and before the commit, the next step finds ``<file>.<committed cursor>`` and knows the
rotation happened: the new file's bytes are uncommitted and cut, and no alarm is raised.

**OS lock**: every step holds ``fcntl.flock`` (exclusive, non-blocking) on the file from the
cut-back to its commit; a scorer of another plant database writing the same file fails its
step naming the file instead of interleaving lines. Per step rather than per process: two
scorers of one station (a standby) share the file legitimately and are already serialized by
the station's lock in the database.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select

from qcllp.store import ScorerCheckpoint, Store, dialect_insert, stored_utc
from qcllp.store.leases import scorer_lock_key

__all__ = [
    "FlagSink",
    "SinkClaim",
    "SinkError",
    "claim_sink",
    "claimed_sink",
    "flag_line",
    "flag_record",
    "resolve_sink",
]

# a flag's line: compact, as json.dumps(..., separators=(",", ":")), one encoder for all
_COMPACT = json.JSONEncoder(separators=(",", ":"))
_CLAIMS_KEY = scorer_lock_key("\x00sink-claims")  # PostgreSQL: one claim at a time, plant-wide


class SinkError(RuntimeError):
    """A sink the scorer must not write: owned by another station, not the station's own,
    held by another process, or ending in a partial line it did not write."""


def resolve_sink(path: str | Path) -> str:
    """The sink's identity: absolute, ``~`` expanded, symlinks resolved (two spellings of
    one file are one sink)."""
    return str(Path(path).expanduser().resolve())


class FlagSink:
    """An append-only JSON-lines file of flags for the line's PLC/MES gateway.

    Holds committed flags only: :meth:`prepare` (under the station lock, before appending)
    cuts off whatever a step that died before its commit had written; the offset after
    :meth:`append` is committed with the flags. One line per flag: ``station, charge_id,
    stick_id, decision, probability, threshold, model_id, reason, arrived_at, scored_at``.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold an exclusive ``flock`` on the file (created if missing) for the block;
        :class:`SinkError` at once if another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SinkError(
                    f"sink {self.path} is locked by another process (a scorer of another "
                    "plant database?): not writing to it"
                ) from None
            yield  # closing the file lets the lock go

    def start(self) -> int:
        """The size of the file at a claim (created, and its folder synced, if missing):
        what lies before it is not ours. A file ending in a partial line is refused: our
        first line would be glued to it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        with open(self.path, "ab+") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    raise SinkError(
                        f"sink {self.path} ends in a partial line (no newline at byte {size}): "
                        "not appending flags to it; give the station another file"
                    )
            os.fsync(fh.fileno())
        if created:
            _fsync_dir(self.path.parent)
        return size

    def prepare(
        self, committed: int, cursor: int = 0, *, max_bytes: int = 0, keep: int = 0
    ) -> tuple[int, str | None]:
        """Cut the file back to ``committed`` bytes, rotating it first when it holds
        ``max_bytes`` or more (0: never); returns (offset, problem or None).

        ``cursor`` is the committed delivery cursor: a rotation names the file it moves aside
        after it (:meth:`rotated_path`), which makes a rotation that a dead step did not
        commit recognizable at the next step. A file shorter than the committed offset was
        rotated or truncated by someone else: appending goes on at its end and the problem
        is returned for an alarm.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if committed and self.rotated_path(cursor).exists():  # rotated, not committed
            return self._fresh(), None
        if max_bytes and committed >= max_bytes:
            return self._rotate(committed, cursor, keep), None
        with open(self.path, "ab") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size > committed:
                fh.truncate(committed)
                os.fsync(fh.fileno())
                return committed, None
        if size < committed:
            return size, (
                f"sink {self.path} holds {size} bytes, fewer than the {committed} committed; "
                "it was rotated or truncated outside qcllp: appending at its end"
            )
        return committed, None

    def rotated_path(self, cursor: int) -> Path:
        """Where a rotation moves the file whose committed flags end at flag id ``cursor``:
        ``<file>.<cursor>``, so the rotated files sort by their flags."""
        return self.path.with_name(f"{self.path.name}.{cursor}")

    def rotated(self) -> list[Path]:
        """The rotated files, oldest first."""
        prefix = f"{self.path.name}."
        found = [
            p for p in self.path.parent.glob(f"{self.path.name}.*")
            if p.name[len(prefix):].isdigit()
        ]  # fmt: skip
        return sorted(found, key=lambda p: int(p.name[len(prefix) :]))

    def _rotate(self, committed: int, cursor: int, keep: int) -> int:
        """Move the file aside as :meth:`rotated_path` (its committed bytes only) and start
        an empty one; the oldest rotated files beyond ``keep`` (0: all kept) are deleted."""
        with open(self.path, "ab") as fh:
            if fh.seek(0, os.SEEK_END) > committed:  # what a dead step left: not ours to keep
                fh.truncate(committed)
            os.fsync(fh.fileno())
        os.replace(self.path, self.rotated_path(cursor))
        offset = self._fresh()
        for old in self.rotated()[:-keep] if keep else []:
            old.unlink(missing_ok=True)
        return offset

    def _fresh(self) -> int:
        """An empty file at the sink's path, its name durable; offset 0."""
        with open(self.path, "wb") as fh:
            os.fsync(fh.fileno())
        _fsync_dir(self.path.parent)
        return 0

    def append(self, lines: list[str]) -> int:
        """Append lines, flush them to disk; returns the new size (the offset to commit)."""
        with open(self.path, "ab") as fh:
            if lines:
                fh.write(("\n".join(lines) + "\n").encode())
                fh.flush()
                os.fsync(fh.fileno())
            return fh.tell()


def _fsync_dir(folder: Path) -> None:
    """Make a new file's name durable (a claim names the file before anything is in it)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def flag_record(row: Mapping, when: Callable[[Any], str] | None = None) -> dict:
    """A flag (a ``flags`` row) as the JSON object the line reads: the sink's line and, with
    its id and payload version, the MQTT message (:func:`qcllp.scoring.flag_outbox.
    flag_message`). ``when`` turns a stored time into its ISO text (:func:`_iso_utc`, or a
    memo of it)."""
    when = when or _iso_utc
    arrived = row["arrived_at"]
    return {
        "station": row["station"],
        "charge_id": row["charge_id"],
        "stick_id": row["stick_id"],
        "decision": row["decision"],
        "probability": row["probability"],
        "threshold": row["threshold"],
        "model_id": row["model_id"],
        "reason": row["reason"],
        "arrived_at": None if arrived is None else when(arrived),
        "scored_at": when(row["scored_at"]),
    }


def flag_line(row: Mapping) -> str:
    """A flag (a ``flags`` row) as one compact JSON line."""
    return _COMPACT.encode(flag_record(row))


def flag_lines(rows: Iterable[Mapping]) -> list[str]:
    """:func:`flag_line` of each row, the same bytes, built from a template of the record's
    keys: each distinct text (station, charge, stick, decision, reason, time) encoded once by
    the JSON encoder and numbers by ``repr`` as it does. The record and the encoder per line
    took a drain's delivery two thirds of its time (``benchmarks/bench_scorer.py`` backlog,
    issue 34); ``tests/scoring/test_flag_lines.py`` holds the two to the same bytes."""
    texts: dict[Any, str] = {}

    def text(value: Any) -> str:
        known = texts.get(value)
        if known is None:
            known = texts[value] = _COMPACT.encode(value)
        return known

    def when(value: Any) -> str:
        # an instant in another zone is equal to it, and written with its own offset
        key = ("time", value, None if isinstance(value, str) else value.utcoffset())
        known = texts.get(key)
        if known is None:
            known = texts[key] = _COMPACT.encode(_iso_utc(value))
        return known

    return [
        _LINE.format(
            text(row["station"]),
            text(row["charge_id"]),
            text(row["stick_id"]),
            text(row["decision"]),
            _number(row["probability"]),
            _number(row["threshold"]),
            _number(row["model_id"]),
            text(row["reason"]),
            "null" if row["arrived_at"] is None else when(row["arrived_at"]),
            when(row["scored_at"]),
        )  # fmt: skip
        for row in rows
    ]


# flag_record's keys in its order, the values' JSON text left to fill in
_LINE = (
    '{{"station":{},"charge_id":{},"stick_id":{},"decision":{},"probability":{},'
    '"threshold":{},"model_id":{},"reason":{},"arrived_at":{},"scored_at":{}}}'
)


def _number(value: Any) -> str:
    """A number's JSON text as the encoder writes it (``repr`` of a finite float or an int,
    ``NaN``/``Infinity`` otherwise, ``null`` for ``None``); anything else through it."""
    if type(value) is float and math.isfinite(value):
        return float.__repr__(value)
    if type(value) is int:
        return int.__repr__(value)
    return _COMPACT.encode(value)


def _iso_utc(value: datetime | str) -> str:
    """A stored time as ISO 8601 text with its zone: a datetime (PostgreSQL's, or SQLite's
    through SQLAlchemy) or the text SQLite holds (read through the driver's own cursor)."""
    stamp = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return stored_utc(stamp).isoformat()


# ----------------------------------------------------------------------------- claims
@dataclass(frozen=True)
class SinkClaim:
    """A station's sink after a claim: ``previous`` is the file it had before a move (or
    ``None``), ``offset`` where its committed flags end, ``flag_id`` the delivery cursor."""

    station: str
    path: str
    offset: int
    flag_id: int
    previous: str | None = None


def claim_sink(store: Store, station: str, path: str | Path, *, move: bool = False) -> SinkClaim:
    """Make ``path`` the station's sink, committed before anything is appended to it.

    Idempotent for the station's own sink. Refused (:class:`SinkError`, one line naming the
    owner) when another station's checkpoint names the file, or -- unless ``move`` -- when the
    station's checkpoint names another file. With ``move`` the old file is cut back to its
    committed flags (unless another station names it too) and kept; the cursor is kept, so
    the new file starts with the first flag the old one has not got.
    """
    target = resolve_sink(path)
    with _claim_transaction(store, station) as conn:
        claims = _claims(conn)
        others = [s for s, c in claims.items() if s != station and _same(c["path"], target)]
        if others:
            raise SinkError(
                f"sink {target} belongs to station {others[0]} (its scorer's checkpoint "
                f"names it): give station {station} a file of its own"
            )
        mine = claims.get(station)
        if mine is not None and _same(mine["path"], target):
            return SinkClaim(station, mine["path"], mine["offset"], mine["flag_id"])
        if mine is not None and not move:
            raise SinkError(
                f"station {station} writes its flags to {mine['path']}, not {target}: refusing "
                f"to split them over two files (to move them: qcllp sink move --station "
                f"{station} --to {target})"
            )
        if mine is not None:
            _cut_back_old(mine, claims, station)
        sink = FlagSink(target)
        with sink.lock():
            offset = sink.start()
        flag_id = 0 if mine is None else mine["flag_id"]
        _write_claim(conn, station, target, offset)
    return SinkClaim(station, target, offset, flag_id, None if mine is None else mine["path"])


def _cut_back_old(mine: dict, claims: dict[str, dict], station: str) -> None:
    """Cut a station's old sink back to its committed flags before a move (what a failed
    step left there would be a torn line the gateway reads), unless another station names
    the file too (then its bytes are not all ours) or it is gone."""
    old = FlagSink(mine["path"])
    shared = any(_same(c["path"], mine["path"]) for s, c in claims.items() if s != station)
    if shared or not old.path.exists():
        return
    with old.lock():
        old.prepare(mine["offset"])


def claimed_sink(store: Store, station: str) -> str | None:
    """The file the station's checkpoint names as its sink (``None``: it has none)."""
    t = ScorerCheckpoint.__table__
    with store.engine.connect() as conn:
        return conn.execute(select(t.c.sink_path).where(t.c.station == station)).scalar()


@contextmanager
def _claim_transaction(store: Store, station: str) -> Iterator[Connection]:
    """One transaction in which no other claim and no step of ``station`` runs: SQLite's
    writer lock; on PostgreSQL the claims' advisory lock, then the station's scorer lock
    (both waited for: a claim is rare and short, a step lasts a second)."""
    if store.dialect == "sqlite":
        with store.write() as conn:
            yield conn
        return
    with store.engine.connect() as conn, conn.begin():
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_CLAIMS_KEY})")
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({scorer_lock_key(station)})")
        yield conn


def _claims(conn: Connection) -> dict[str, dict]:
    """Every station's sink claim (one checkpoint row per station: a small table)."""
    t = ScorerCheckpoint.__table__
    rows = conn.execute(
        select(t.c.station, t.c.sink_path, t.c.sink_offset, t.c.sink_flag_id).where(
            t.c.sink_path.is_not(None)
        )
    ).all()
    return {
        r.station: {
            "path": r.sink_path,
            "offset": int(r.sink_offset),
            "flag_id": int(r.sink_flag_id),
        }
        for r in rows
    }


def _same(stored: str, target: str) -> bool:
    """Whether a checkpoint's path is the target file (paths stored before claims were
    resolved are resolved as the scorer that wrote them would have)."""
    return stored == target or resolve_sink(stored) == target


def _write_claim(conn: Connection, station: str, path: str, offset: int) -> None:
    """The claim in the checkpoint; a station without one yet starts at batch 0 with cursor
    0 (every flag of the station goes to its first sink)."""
    t = ScorerCheckpoint.__table__
    now = datetime.now(UTC)
    stmt = dialect_insert(conn, t).values(
        station=station,
        commit_seq=0,
        sink_path=path,
        sink_offset=offset,
        sink_flag_id=0,
        model_id=None,
        updated_at=now,
    )
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["station"],
            set_={"sink_path": path, "sink_offset": offset, "updated_at": now},
        )
    )
