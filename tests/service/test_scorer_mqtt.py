"""A station scorer's flags over MQTT: ``qcllp serve scorer`` with ``connectors.mqtt``, a real
Mosquitto broker (:mod:`tests.mqttbroker`) and a real subscriber on the line's side
(:class:`tests.support.mqtt_gateway.FlagCollector`, QoS 1, persistent session).

Every flag the scorer commits reaches the subscriber, with its stable ``flag_id``; after a
``kill -9`` of the scorer, a broker restart or a frozen broker (SIGSTOP) none is missing, and a
repeat (a flag acknowledged just before the kill) carries the same id and content. The
hardest case: flags handed to a frozen broker, then the scorer and the broker killed -- the
broker never read them, so only a cursor that waits for acknowledgements sends them again. The plant
and the scorer processes are those of :mod:`tests.service.test_scorer_process`.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from qcllp.service.mqtt.flag_publisher import WAKE_S
from qcllp.store import Flag, FlagDelivery
from tests.service.scorer_plant import (
    STATION,
    Plant,
    make_plant,
    wait_until,
)
from tests.support.mqtt_gateway import FlagCollector

TOPIC = "line/{station}/flags"


@pytest.fixture
def mqtt_plant(tmp_path, history, broker) -> Plant:
    """The scorer tests' plant (cooling model A active), its flags published to the broker."""
    mqtt = {"host": "127.0.0.1", "port": broker.port, "flags_topic": TOPIC, "keepalive_s": 5}
    built = make_plant(tmp_path, history, edit=lambda raw: raw.update(connectors={"mqtt": mqtt}))
    yield built
    built.store.close()


def _received_ids(collector: FlagCollector) -> list[int]:
    return [m["flag_id"] for m in collector.received()]


def _all_delivered(plant: Plant, collector: FlagCollector, procs, timeout: float = 60.0) -> None:
    """Until the subscriber holds every flag in the database (by id), then compare contents."""
    flags = _flags(plant)
    wait_until(lambda: set(flags) <= set(_received_ids(collector)), what="every flag at the line",
               procs=procs, timeout=timeout)  # fmt: skip
    got = {m["flag_id"]: m for m in collector.received()}
    assert set(got) == set(flags)  # nothing that is not a committed flag
    for flag_id, (charge, stick, decision) in flags.items():
        message = got[flag_id]
        assert (message["v"], message["station"], message["topic"]) == (
            1, STATION, TOPIC.replace("{station}", STATION),
        )  # fmt: skip
        assert (message["charge_id"], message["stick_id"]) == (charge, stick)
        assert message["decision"] == decision


def _flags(plant: Plant) -> dict[int, tuple[str, str, str]]:
    """The station's flags: id -> (charge, stick, decision)."""
    f = Flag.__table__
    with plant.store.engine.connect() as conn:
        rows = conn.execute(
            select(f.c.id, f.c.charge_id, f.c.stick_id, f.c.decision).where(f.c.station == STATION)
        )
        return {row.id: (row.charge_id, row.stick_id, row.decision) for row in rows}


def _cursor(plant: Plant) -> int | None:
    d = FlagDelivery.__table__
    with plant.store.engine.connect() as conn:
        return conn.execute(select(d.c.flag_id).where(d.c.station == STATION)).scalar()


def test_every_flag_reaches_the_line_over_mqtt_once_with_its_id(
    mqtt_plant,
    broker,
    start_scorer,
):
    collector = FlagCollector(broker.port, [TOPIC.replace("{station}", STATION)])
    scorer = start_scorer(mqtt_plant)
    scorer.wait_stepped()
    mqtt_plant.feed(3)
    mqtt_plant.feed(2)
    wait_until(lambda: mqtt_plant.flagged() >= mqtt_plant.expected, what="all decided",
               procs=[scorer])  # fmt: skip
    _all_delivered(mqtt_plant, collector, [scorer])
    ids = _received_ids(collector)
    assert len(ids) == len(set(ids))  # no kill, no restart: no repeat
    wait_until(lambda: _cursor(mqtt_plant) == max(ids), what="the cursor at the last flag")
    assert scorer.body()["status"] == "ok"
    assert scorer.metric("qcllp_scorer_flags_published_total") == len(ids)
    assert scorer.terminate() == 0
    collector.close()


@pytest.mark.slow
def test_a_killed_scorer_a_restarted_and_a_frozen_broker_lose_no_flag(
    mqtt_plant,
    broker,
    start_scorer,
):
    collector = FlagCollector(broker.port, [TOPIC.replace("{station}", STATION)])
    scorer = start_scorer(mqtt_plant)
    scorer.wait_stepped()
    mqtt_plant.feed(4)
    wait_until(lambda: len(collector.received()) > 0, what="first flags", procs=[scorer])
    scorer.kill9()
    scorer = start_scorer(mqtt_plant)
    scorer.wait_stepped()
    broker.pause()  # flags handed to a frozen broker: sent, never acknowledged
    mqtt_plant.feed(3)
    wait_until(lambda: scorer.metric("qcllp_scorer_flags_in_flight") > 0, what="flags in flight",
               procs=[scorer])  # fmt: skip
    time.sleep(2 * WAKE_S)  # rounds of the publisher: it must keep waiting for acknowledgements
    assert scorer.metric("qcllp_scorer_flags_in_flight") > 0
    scorer.kill9()
    broker.kill()  # the frozen broker never read them: lost unless the cursor waited for them
    connects = collector.connects
    broker.start()
    wait_until(lambda: collector.connects > connects, what="the line's subscriber back")
    scorer = start_scorer(mqtt_plant)
    scorer.wait_stepped()
    broker.stop()
    mqtt_plant.feed(3)
    wait_until(lambda: mqtt_plant.flagged() >= mqtt_plant.expected, what="decided, broker away",
               procs=[scorer])  # fmt: skip
    wait_until(lambda: scorer.body().get("status") == "degraded", what="degraded",
               procs=[scorer])  # fmt: skip
    assert "flags not published" in " ".join(scorer.body()["problems"])
    broker.start()
    mqtt_plant.feed(2)
    broker.pause()
    mqtt_plant.feed(2)
    broker.resume()
    wait_until(lambda: mqtt_plant.flagged() >= mqtt_plant.expected, what="all decided",
               procs=[scorer])  # fmt: skip
    _all_delivered(mqtt_plant, collector, [scorer], timeout=90)
    wait_until(lambda: scorer.body().get("status") == "ok", what="ok again", procs=[scorer])
    assert scorer.terminate() == 0
    collector.close()
