"""A model row pointing the scorer at a file outside the models folder: whoever can write the
registry makes a genuine artifact copied elsewhere (its checksum right) the station's active
model. The scorer refuses it with one alarm naming the model and the path, and keeps scoring
with the last good model."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import update

from qcllp.service.scorer import ScorerService
from qcllp.station.registry import get_model, promote, register_model
from qcllp.store import Alarm, Model, Store
from tests.support.plants import (
    fast_config,  # noqa: F401 (fixture)
    history_plant,  # noqa: F401 (fixture)
)


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_the_scorer_refuses_an_active_model_outside_the_models_folder_and_keeps_the_last(
    history_plant,  # noqa: F811
    tmp_path,
    how,
):
    store = Store.open(history_plant.copy_to(tmp_path))
    good = history_plant.record_trained(store, history_plant.config, "cooling")
    promote(store, good)
    service = ScorerService(store, history_plant.config, "cooling")
    service.refresh_models()
    assert service.model.id == good

    row = get_model(store, good)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    copy = elsewhere / row["artifact_path"]
    copy.write_bytes((tmp_path / "models" / row["artifact_path"]).read_bytes())
    stored = {
        "absolute": str(copy),
        "dotdot": f"../elsewhere/{copy.name}",
        "symlink": "link.skops",
    }[how]
    if how == "symlink":
        os.symlink(copy, tmp_path / "models" / "link.skops")
    fields = {k: v for k, v in row.items() if k not in ("id", "status", "promoted_at")}
    hostile = register_model(store, **{**fields, "artifact_path": stored})
    with store.write_session() as session:  # as a hand with write access to the table would
        session.execute(update(Model).where(Model.id == good).values(status="retired"))
        session.execute(update(Model).where(Model.id == hostile).values(status="active"))

    service.refresh_models()
    service.refresh_models()  # refused once, not once per tick
    assert service.model.id == good
    with store.session() as session:
        alarms = [(a.kind, a.message) for a in session.query(Alarm).all()]
    assert len(alarms) == 1, alarms
    kind, message = alarms[0]
    assert kind == "model_refused" and "\n" not in message
    assert message.startswith(f"model {hostile} refused: model {hostile} (cooling): ")
    assert f"model artifact path {stored!r} lies outside the models folder" in message
    store.close()
