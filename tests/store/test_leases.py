"""Leases on both engines: one holder at a time, renewal, expiry and takeover, a lost lease
refusing the commit, and ``qcllp train`` refusing a station someone else is training."""

from __future__ import annotations

import threading
import time

import pytest

from qcllp.store.leases import (
    HeldLease,
    LeaseBusy,
    LeaseLost,
    acquire,
    lease_holder,
    release,
    renew,
    station_lease_name,
)
from qcllp.training.train import train_station


def test_one_holder_at_a_time_and_renewal_keeps_it(store):
    assert acquire(store, "retrainer", "a", ttl_s=30)
    assert not acquire(store, "retrainer", "b", ttl_s=30)
    assert acquire(store, "retrainer", "a", ttl_s=30)  # the holder again: extended
    assert renew(store, "retrainer", "a", ttl_s=30)
    assert not renew(store, "retrainer", "b", ttl_s=30)
    holder, until = lease_holder(store, "retrainer")
    assert holder == "a" and until.tzinfo is not None
    release(store, "retrainer", "b")  # not b's: nothing happens
    assert lease_holder(store, "retrainer")[0] == "a"
    release(store, "retrainer", "a")
    assert lease_holder(store, "retrainer") is None
    assert acquire(store, "retrainer", "b", ttl_s=30)


def test_an_expired_lease_is_taken_over_and_the_old_holder_cannot_renew(store):
    assert acquire(store, "train:rolling", "dead", ttl_s=0.2)
    assert not acquire(store, "train:rolling", "next", ttl_s=30)
    time.sleep(0.3)
    assert lease_holder(store, "train:rolling") is None  # expired: free
    assert acquire(store, "train:rolling", "next", ttl_s=30)
    assert not renew(store, "train:rolling", "dead", ttl_s=30)
    assert lease_holder(store, "train:rolling")[0] == "next"


def test_concurrent_takers_get_exactly_one_lease(store):
    winners: list[str] = []
    barrier = threading.Barrier(6)

    def take(name: str) -> None:
        barrier.wait()
        if acquire(store, "retrainer", name, ttl_s=30):
            winners.append(name)

    threads = [threading.Thread(target=take, args=(f"t{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and lease_holder(store, "retrainer")[0] == winners[0]


def test_a_held_lease_is_renewed_while_work_runs_and_released_after(store):
    with HeldLease.take(store, "train:cooling", ttl_s=0.6, holder="worker") as lease:
        time.sleep(1.0)  # longer than the time to live: the heartbeat renews it
        assert lease_holder(store, "train:cooling")[0] == "worker"
        lease.check()
        with pytest.raises(LeaseBusy, match="training of station 'cooling' is held by worker"):
            HeldLease.take(store, "train:cooling", ttl_s=30)
    assert lease_holder(store, "train:cooling") is None


def test_a_lost_lease_refuses_the_commit(store):
    lease = HeldLease.take(store, "train:furnace", ttl_s=30, holder="slow")
    release(store, "train:furnace", "slow")  # as if it expired and someone took it
    assert acquire(store, "train:furnace", "fast", ttl_s=30)
    with pytest.raises(LeaseLost, match="lease was lost; nothing was committed"):
        lease.check()


def test_train_station_refuses_a_station_being_trained_and_registers_nothing(
    history_plant, tmp_path
):
    from qcllp.station.registry import list_models
    from qcllp.store import Store

    store = Store.open(history_plant.copy_to(tmp_path))
    name = station_lease_name("cooling")
    assert acquire(store, name, "daemon-on-host:123", ttl_s=60)
    with pytest.raises(LeaseBusy, match="held by daemon-on-host:123"):
        train_station(store, history_plant.config, "cooling")
    assert list_models(store, "cooling") == []
    release(store, name, "daemon-on-host:123")
    result = train_station(store, history_plant.config, "cooling")
    assert [m["id"] for m in list_models(store, "cooling")] == [result.model_id]
    assert lease_holder(store, name) is None  # released after the training
    store.close()
