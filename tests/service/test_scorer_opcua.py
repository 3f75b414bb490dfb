"""A station scorer's flags to the line's PLC over OPC UA: ``qcllp serve scorer`` with
``connectors.opcua``, and a stand-in PLC (:mod:`tests.support.opcua_plc`: an asyncua server in
a process of its own with the station's record variables, a method, and a program that takes
each record and acknowledges it).

Every flag the scorer commits reaches the PLC in order, with its ``flag_id`` and content, and
the PLC never finds a record overwritten before it took it. In the slow run, a ``kill -9`` of
the scorer with a record posted and not acknowledged, a PLC killed (a cold start: its
variables cleared, the record in them lost), stopped, frozen, and holding its records (a
program in STOP) lose no flag; a repeat carries the same id and content. Method mode, and a
PLC whose variables do not fit, are tested on the writer itself (no scorer process), against
the same stand-in. The plant and the scorer processes are those of
:mod:`tests.service.test_scorer_process`.
"""

from __future__ import annotations

import copy
import math
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import insert, select

from qcllp.plant import parse_plant_config
from qcllp.store import Flag, FlagDelivery, Store
from tests.conftest import TINY_PLANT
from tests.ingest.inspection_helpers import insert_model_row
from tests.service.harness import wait_until as wait
from tests.service.scorer_plant import (
    STATION,
    Plant,
    make_plant,
    wait_until,
)
from tests.support.opcua_plc import METHOD, NODES, OBJECT, StandInPlc

pytest.importorskip("asyncua", reason="the OPC UA tests need the extra qcllp[opcua]")
from qcllp.service.opcua.flag_writer import PlcFlagWriter  # noqa: E402 - after the skip

ACK_TIMEOUT_S = 2.0


@pytest.fixture
def plc(tmp_path):
    """A stand-in PLC of the test's own, starting (:meth:`StandInPlc.wait_ready`; stopped at
    teardown if still running)."""
    started = StandInPlc(tmp_path / "plc").start(wait=False)
    yield started
    if started.proc.poll() is None:
        started.resume()  # a frozen one hears SIGTERM only once thawed
        started.stop()


@pytest.fixture
def opcua_plant(tmp_path, history, plc) -> Plant:
    """The scorer tests' plant (cooling model A active), cooling's flags written to the PLC."""
    opcua = {
        "endpoint": plc.endpoint, "timeout_s": 1.0, "ack_timeout_s": ACK_TIMEOUT_S,
        "stations": {STATION: {"mode": "write", "nodes": NODES}},
    }  # fmt: skip
    built = make_plant(tmp_path, history, edit=lambda raw: raw.update(connectors={"opcua": opcua}))
    plc.wait_ready()  # it started beside the plant's training
    yield built
    built.store.close()


# ----------------------------------------------------------------------------- checks
def _flags(store: Store, station: str = STATION) -> list[dict]:
    """The station's flags, oldest first, as the PLC should have them."""
    f = Flag.__table__
    columns = (f.c.id, f.c.charge_id, f.c.stick_id, f.c.decision, f.c.probability)
    with store.engine.connect() as conn:
        rows = conn.execute(select(*columns).where(f.c.station == station).order_by(f.c.id))
        return [
            {"flag_id": r.id, "charge_id": r.charge_id, "stick_id": r.stick_id,
             "decision": r.decision, "probability": r.probability}
            for r in rows
        ]  # fmt: skip


def _cursor(store: Store, station: str = STATION) -> int | None:
    d = FlagDelivery.__table__
    with store.engine.connect() as conn:
        query = select(d.c.flag_id).where(d.c.station == station, d.c.channel == "opcua")
        return conn.execute(query).scalar()


def _same(taken: dict, flag: dict) -> bool:
    """The PLC's record is the flag (a probability as a Double, NaN/null when unscorable)."""
    if {k: taken[k] for k in ("flag_id", "charge_id", "stick_id", "decision")} != {
        k: flag[k] for k in ("flag_id", "charge_id", "stick_id", "decision")
    }:
        return False
    if flag["probability"] is None:
        return taken["probability"] is None
    return math.isclose(taken["probability"], flag["probability"], rel_tol=1e-12)


def assert_every_flag_taken(store: Store, plc: StandInPlc, *, once: bool) -> list[dict]:
    """Every flag of the database reached the PLC with its content, first seen in the order
    of the flags; a repeat only as the same record; never a record overwritten untaken."""
    flags = {f["flag_id"]: f for f in _flags(store)}
    taken = plc.taken()
    assert {t["flag_id"] for t in taken} == set(flags), "flags missing at the PLC, or extra"
    for record in taken:
        assert _same(record, flags[record["flag_id"]]), (record, flags[record["flag_id"]])
    first_seen = list(dict.fromkeys(t["flag_id"] for t in taken))
    assert first_seen == sorted(flags), "the PLC got the flags out of order"
    if once:
        assert [t["flag_id"] for t in taken] == sorted(flags), "a flag taken twice"
    assert plc.violations() == [], "qcllp wrote into a record the PLC had not taken"
    return taken


def _all_taken(plant: Plant, plc: StandInPlc) -> bool:
    return {f["flag_id"] for f in _flags(plant.store)} <= {t["flag_id"] for t in plc.taken()}


# ----------------------------------------------------------------------------- write mode
def test_every_flag_reaches_the_plc_once_in_order_by_the_write_handshake(
    opcua_plant,
    plc,
    start_scorer,
):
    scorer = start_scorer(opcua_plant)
    scorer.wait_stepped()
    opcua_plant.feed(3)
    opcua_plant.feed(2)
    wait_until(lambda: opcua_plant.flagged() >= opcua_plant.expected, what="all decided",
               procs=[scorer])  # fmt: skip
    wait_until(lambda: _all_taken(opcua_plant, plc), what="every flag at the PLC", procs=[scorer])
    taken = assert_every_flag_taken(opcua_plant.store, plc, once=True)
    assert {t["mode"] for t in taken} == {"write"}
    last = taken[-1]["flag_id"]
    wait_until(lambda: _cursor(opcua_plant.store) == last, what="the cursor at the last flag")
    assert scorer.body()["status"] == "ok"
    assert scorer.metric("qcllp_scorer_plc_flags_delivered_total") == len(taken)
    assert scorer.metric("qcllp_scorer_plc_connected") == 1
    assert scorer.terminate() == 0
    assert "plc_connected" in [e["event"] for e in scorer.events()]


# ----------------------------------------------------------------------------- the writer alone
def _writer_plant(folder: Path, endpoint: str, station: dict, **settings: str) -> tuple:
    """The tiny plant with furnace's flags to the PLC as ``station`` says (and ``settings``),
    its database with a model row to hang flags on."""
    raw = copy.deepcopy(TINY_PLANT)
    raw["connectors"] = {
        "opcua": {"endpoint": endpoint, "timeout_s": 1.0, "ack_timeout_s": ACK_TIMEOUT_S,
                  "stations": {"furnace": station}, **settings},
    }  # fmt: skip
    config = parse_plant_config(raw, base_dir=folder)
    store = Store.open(f"sqlite:///{folder / 'plant.sqlite'}")
    with store.engine.begin() as conn:
        model_id = insert_model_row(conn, datetime.now(UTC))
    return config, store, model_id


def _decide(store: Store, model_id: int, charge: str, n: int) -> None:
    """``n`` flags of furnace, every decision in turn (unscorable without a probability)."""
    decisions = ("pass", "lock_out", "inspect", "unscorable")
    now = datetime.now(UTC)
    with store.engine.begin() as conn:
        for i in range(n):
            decision = decisions[i % 4]
            conn.execute(
                insert(Flag.__table__).values(
                    station="furnace", charge_id=charge, stick_id=f"{charge}-{i:03d}",
                    model_id=model_id, probability=None if decision == "unscorable" else i / n,
                    flagged=decision == "lock_out", decision=decision, threshold=0.5,
                    scored_at=now,
                )
            )  # fmt: skip


def _problems(writer: PlcFlagWriter) -> str:
    return " ".join(writer.status().problems())


def test_method_mode_calls_the_plc_once_per_flag_in_order_and_a_refusal_holds_the_flag(
    tmp_path, plc
):
    method = {"mode": "method", "object": OBJECT, "method": METHOD}
    config, store, model_id = _writer_plant(tmp_path, plc.endpoint, method)
    plc.wait_ready()
    writer = PlcFlagWriter(store, config, "furnace", CollectorRegistry())
    try:
        writer.start()
        wait(lambda: writer.status().connected, what="connected")
        _decide(store, model_id, "c1", 40)
        writer.nudge()
        wait(lambda: len(plc.taken()) == 40, what="40 calls", timeout=30)
        plc.hold()  # the PLC refuses (BadResourceUnavailable) what comes now
        _decide(store, model_id, "c2", 3)
        writer.nudge()
        wait(lambda: "has refused flag 41" in _problems(writer), what="the refusal in /healthz",
             timeout=ACK_TIMEOUT_S + 10)  # fmt: skip
        assert "BadResourceUnavailable" in _problems(writer) and "3 wait" in _problems(writer)
        assert len(plc.taken()) == 40 and writer.cursor == 40
        plc.hold(False)
        wait(lambda: len(plc.taken()) == 43 and writer.cursor == 43, what="the rest", timeout=30)
        assert writer.status().problems() == []
    finally:
        writer.stop()
        store.close()
    taken = assert_every_flag_taken_of(store, plc, "furnace")
    assert {t["mode"] for t in taken} == {"method"}


def assert_every_flag_taken_of(store: Store, plc: StandInPlc, station: str) -> list[dict]:
    """Every flag of ``station`` taken exactly once, in order, with its content."""
    flags = _flags(store, station)
    taken = plc.taken()
    assert [t["flag_id"] for t in taken] == [f["flag_id"] for f in flags]
    assert all(_same(t, f) for t, f in zip(taken, flags, strict=True))
    assert {f["decision"] for f in flags} == {"pass", "lock_out", "inspect", "unscorable"}
    return taken


def test_a_plc_whose_variables_do_not_fit_gets_nothing_and_health_names_the_variable(tmp_path, plc):
    nodes = {k: v for k, v in NODES.items() if k != "probability"}
    nodes["charge_id"] = NODES["probability"]  # a Double where the charge (a String) belongs
    config, store, model_id = _writer_plant(tmp_path, plc.endpoint, {"nodes": nodes})
    plc.wait_ready()
    writer = PlcFlagWriter(store, config, "furnace", CollectorRegistry())
    try:
        writer.start()
        wait(lambda: writer.cursor is not None, what="the cursor")
        _decide(store, model_id, "c1", 2)
        writer.nudge()
        said = f"variable {NODES['probability']} for charge_id is of type Double; it must be String"
        wait(lambda: said in _problems(writer) and "2 wait" in _problems(writer),
             what="the type problem in /healthz", timeout=15)  # fmt: skip
        assert not writer.status().connected
        time.sleep(0.5)
        assert plc.taken() == [] and plc.violations() == []
    finally:
        writer.stop()
        store.close()


def _client_certificate(folder: Path) -> tuple[Path, Path]:
    """qcllp's certificate (DER, its URI in the subject alternative name) and key (PEM)."""
    from asyncua.crypto import cert_gen
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = cert_gen.generate_private_key()
    names = [x509.UniformResourceIdentifier("urn:qcllp:line1"), x509.DNSName("localhost")]
    cert = cert_gen.generate_self_signed_app_certificate(
        key, "qcllp", {}, names, [ExtendedKeyUsageOID.CLIENT_AUTH]
    )
    cert_path, key_path = folder / "qcllp-cert.der", folder / "qcllp-key.pem"
    cert_path.write_bytes(cert.public_bytes(Encoding.DER))
    key_path.write_bytes(cert_gen.dump_private_key_as_pem(key))
    key_path.chmod(0o600)
    return cert_path, key_path


def test_a_secured_plc_takes_flags_from_the_trusted_certificate_and_user_only(
    tmp_path, monkeypatch, caplog
):
    """Basic256Sha256 (sign and encrypt) with qcllp's certificate, the PLC's pinned, and a
    user whose password comes from QCLLP_OPCUA_PASSWORD: refused with a wrong password (said in
    /healthz), taken once it is right -- read again at the next reconnect, no restart."""
    cert, key = _client_certificate(tmp_path)
    plc = StandInPlc(tmp_path / "plc", secure=True, password="s3cret")
    (plc.folder / "trusted-client.der").write_bytes(cert.read_bytes())
    plc.start()
    secured = {
        "security": "Basic256Sha256", "certificate": str(cert), "private_key": str(key),
        "server_certificate": str(plc.folder / "server-cert.der"), "username": "qcllp",
    }  # fmt: skip
    method = {"mode": "method", "object": OBJECT, "method": METHOD}
    config, store, model_id = _writer_plant(tmp_path, plc.endpoint, method, **secured)
    monkeypatch.setenv("QCLLP_OPCUA_PASSWORD", "x9-wrong-x9")
    writer = PlcFlagWriter(store, config, "furnace", CollectorRegistry())
    try:
        writer.start()
        wait(lambda: "BadUserAccessDenied" in _problems(writer), what="the refused login")
        monkeypatch.setenv("QCLLP_OPCUA_PASSWORD", "s3cret")
        wait(lambda: writer.status().connected, what="the login", timeout=30)
        _decide(store, model_id, "c1", 8)
        writer.nudge()
        wait(lambda: len(plc.taken()) == 8, what="8 calls over the secure channel", timeout=30)
    finally:
        writer.stop()
        store.close()
        plc.stop()
    assert_every_flag_taken_of(store, plc, "furnace")
    assert "plc_lost" in caplog.text and "BadUserAccessDenied" in caplog.text
    assert "s3cret" not in caplog.text and "x9-wrong-x9" not in caplog.text


# ----------------------------------------------------------------------------- faults (slow)
def _health_says(scorer, words: str) -> bool:
    return words in " ".join(scorer.body().get("problems", []))


def _hold_a_record(scorer, plant, plc) -> None:
    """The PLC holds the next record unacknowledged while two charges are fed."""
    plc.hold()
    plant.feed(2)
    wait_until(lambda: _health_says(scorer, "has not acknowledged flag"), what="a record held",
               procs=[scorer])  # fmt: skip


def _kill_the_scorer_while_the_plc_holds_a_record(scorer, plant, plc, start):
    """1. the scorer killed with a record posted and not acknowledged, the PLC taking it
    meanwhile; 2. again, the scorer back while the PLC still holds the record. ``start``
    starts a scorer. Returns the scorer running after them."""
    _hold_a_record(scorer, plant, plc)
    scorer.kill9()
    plc.hold(False)
    scorer = start(plant)
    scorer.wait_stepped()
    wait_until(lambda: _all_taken(plant, plc), what="the held flags", procs=[scorer])
    _hold_a_record(scorer, plant, plc)
    scorer.kill9()
    scorer = start(plant)
    scorer.wait_stepped()
    wait_until(lambda: _health_says(scorer, "has not acknowledged flag"),
               what="the restarted scorer waiting for the same record", procs=[scorer])  # fmt: skip
    plc.hold(False)
    wait_until(lambda: _all_taken(plant, plc), what="the held flags", procs=[scorer])
    return scorer


def _stop_then_freeze_the_plc(scorer, plant, plc) -> None:
    """4. the PLC stopped: decisions go on, /healthz says how many flags wait; 5. the PLC
    frozen (its socket open, no answer), then thawed: every flag reaches it."""
    plc.stop()
    plant.feed(2)
    wait_until(lambda: plant.flagged() >= plant.expected, what="decided, PLC away",
               procs=[scorer])  # fmt: skip
    wait_until(lambda: _health_says(scorer, "flags not delivered to the PLC"), what="degraded",
               procs=[scorer])  # fmt: skip
    assert scorer.body()["status"] == "degraded"
    assert scorer.metric("qcllp_scorer_plc_connected") == 0
    plc.start()
    wait_until(lambda: _all_taken(plant, plc), what="the flags after the stop", procs=[scorer])
    plc.pause()
    plant.feed(2)
    wait_until(lambda: _health_says(scorer, "flags not delivered to the PLC"),
               what="a frozen PLC noticed", procs=[scorer])  # fmt: skip
    plc.resume()
    plant.feed(2)
    wait_until(lambda: plant.flagged() >= plant.expected, what="all decided", procs=[scorer])
    wait_until(lambda: _all_taken(plant, plc), what="every flag at the PLC", procs=[scorer],
               timeout=90)  # fmt: skip


@pytest.mark.slow
def test_a_killed_scorer_and_a_killed_stopped_frozen_or_holding_plc_lose_no_flag(
    opcua_plant,
    plc,
    start_scorer,
):
    plant = opcua_plant
    scorer = start_scorer(plant)
    scorer.wait_stepped()
    plant.feed(3)
    wait_until(lambda: len(plc.taken()) > 0, what="first records taken", procs=[scorer])
    scorer = _kill_the_scorer_while_the_plc_holds_a_record(scorer, plant, plc, start_scorer)
    # 3. the PLC killed with a record posted, not taken: a cold start loses it from the PLC
    _hold_a_record(scorer, plant, plc)
    plc.kill()
    plc.hold(False)
    plc.start()
    wait_until(lambda: _all_taken(plant, plc), what="the lost record again", procs=[scorer])
    _stop_then_freeze_the_plc(scorer, plant, plc)
    wait_until(lambda: scorer.body().get("status") == "ok", what="ok again", procs=[scorer])
    assert scorer.terminate() == 0
    taken = assert_every_flag_taken(plant.store, plc, once=False)
    ids = [t["flag_id"] for t in taken]
    # write mode repeats a record only when the PLC dies between storing it and its ack
    assert len(ids) - len(set(ids)) <= 1, "more repeats than the kills can explain"
