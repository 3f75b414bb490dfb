"""The channels of a station's flags besides the sink: the MQTT publisher
(:mod:`qcllp.service.mqtt.flag_publisher`) and the PLC writer
(:mod:`qcllp.service.opcua.flag_writer`).

Each is fed from the flags table as an outbox under a delivery cursor of its own
(:mod:`qcllp.scoring.flag_outbox`), runs in a thread of the scorer process, is woken after
each step and says in ``/healthz`` what keeps its flags (:mod:`qcllp.service.scorer`). A
station may have both: the line's MES on MQTT, its PLC on OPC UA; a broker away does not
hold the PLC's flags back, nor the reverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from qcllp.plant.config import ConfigError, PlantConfig
from qcllp.service.mqtt.flag_publisher import FlagPublisher
from qcllp.store import Store

__all__ = ["FlagChannel", "flag_channels"]


class FlagChannel(Protocol):
    """A channel of the station's flags besides the sink, fed from the flags table as an
    outbox: a thread of its own, woken after each step, its problems in ``/healthz``."""

    def start(self) -> None: ...

    def nudge(self) -> None: ...

    def status(self) -> Any: ...  # with problems() -> list[str]

    def stop(self) -> None: ...


def flag_channels(
    store: Store, config: PlantConfig, station: str, registry: CollectorRegistry
) -> Sequence[FlagChannel]:
    """The station's flag channels: the MQTT publisher (``connectors.mqtt`` with
    ``publish_flags``) and the PLC writer (the station in ``connectors.opcua.stations``)."""
    channels: list[FlagChannel] = []
    mqtt, opcua = config.connectors.mqtt, config.connectors.opcua
    if mqtt is not None and mqtt.publish_flags:
        channels.append(FlagPublisher(store, config, station, registry))
    if opcua is not None and station in opcua.stations:
        # imported here: asyncua is the optional extra qcllp[opcua], needed only with a PLC
        try:
            from qcllp.service.opcua.flag_writer import PlcFlagWriter
        except ImportError as exc:
            raise ConfigError(
                f"connectors.opcua needs asyncua ({exc}): pip install 'qcllp[opcua]'"
            ) from None
        channels.append(PlcFlagWriter(store, config, station, registry))
    return channels
