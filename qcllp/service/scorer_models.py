"""The station scorer's models (:mod:`qcllp.service.scorer`): loading a model completely before
it is used, and the station's shadow model as the service holds it.

A **shadow** model (:func:`qcllp.station.registry.promote_shadow`) is reloaded like the active
one, by a change of the id in the registry, and verified as completely. It differs in what a
failure means: the line acts on none of its decisions, so a shadow that cannot be loaded is
refused with one alarm per id and the scorer runs **without a shadow** (it does not keep an
older one: the registry retired that one) -- and the active model's scoring never depends on
it. A shadow that leaves its status (promoted to active, retired) is dropped at the next tick.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from qcllp.features import feature_names
from qcllp.plant.config import PlantConfig
from qcllp.service.logs import one_line
from qcllp.station.artifacts import ArtifactError
from qcllp.station.registry import LoadedModel, load_model
from qcllp.store import Store

__all__ = ["ShadowSlot", "load_verified"]


def load_verified(store: Store, config: PlantConfig, station: str, model_id: int) -> LoadedModel:
    """Model ``model_id`` loaded and verified completely (checksum, station, target) and
    building the features the station builds today; :class:`ArtifactError` (or
    ``RegistryError``) otherwise, so that no step is scored by a half-loaded model."""
    loaded = load_model(store, model_id)
    expected = feature_names(config, station)
    if list(loaded.model.features) != expected:
        raise ArtifactError(
            f"model {model_id} uses {len(loaded.model.features)} features, the "
            f"station builds {len(expected)} from the plant config; retrain it"
        )
    return loaded


class ShadowSlot:
    """The station's shadow model in the service (``model``: ``None`` when it has none)."""

    def __init__(
        self,
        store: Store,
        config: PlantConfig,
        station: str,
        alarm: Callable[[str, str], None],
    ):
        self.store, self.config, self.station = store, config, station
        self.alarm = alarm  # (kind, message): stored, counted, logged by the service
        self.model: LoadedModel | None = None
        self._refused: set[int] = set()

    def refresh(self, wanted: int | None) -> bool:
        """Follow the registry's shadow model of the station (``wanted``: its id, ``None``
        when it has none); ``True`` when the model held changed (loaded, dropped or refused).
        A database away raises, as for the active model; any failure to load the artifact is
        an alarm and no shadow."""
        held = None if self.model is None else self.model.id
        if wanted == held or (wanted is not None and wanted in self._refused and held is None):
            return False
        self.model = None
        if wanted is None or wanted in self._refused:
            return True
        try:
            self.model = load_verified(self.store, self.config, self.station, wanted)
        except SQLAlchemyError:
            raise  # the database is away: the tick fails and retries, nothing refused
        except Exception as exc:  # noqa: BLE001 - a shadow never stops the active's scoring
            self._refused.add(wanted)
            self.alarm("shadow_refused", f"shadow model {wanted} refused: {one_line(exc)}")
        return True
