"""Reading a plant YAML: the file, its duplicate keys, the validation, the built config."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from qcllp.plant.config import document as doc
from qcllp.plant.config.model import (
    Bay,
    Connectors,
    FileConnector,
    MqttConnector,
    OpcuaConnector,
    PlantConfig,
    PlcStation,
    Retention,
    Retrainer,
    Schedules,
    Scorer,
    Sensor,
    SqlSource,
    Station,
    Training,
)
from qcllp.plant.config.problems import ConfigError, error_lines

INSPECTION_COST_SHARE = 0.05  # a station's inspection_cost by default: 5 % of its good_cost


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys instead of keeping the last one."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep=False):
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first at line {seen[key]})",
                key_node.start_mark,
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def example_config_path() -> Path:
    """The example plant shipped with the package (``plant_config/example.yaml``)."""
    return Path(str(resources.files("qcllp.plant").joinpath("example.yaml")))


def read_yaml(path: Path) -> Any:
    """The YAML document of ``path``; :class:`ConfigError` naming the file (and the line)."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read file: {exc.strerror or exc}") from exc
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(yaml)"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}: {where}: invalid YAML: {problem}") from exc


def load_plant_config(path: str | Path) -> PlantConfig:
    """Read and validate a plant YAML file; raises :class:`ConfigError` naming file and key."""
    path = Path(path)
    mapping = read_yaml(path)
    resolved = path.resolve()
    return parse_plant_config(mapping, source=str(path), base_dir=resolved.parent, path=resolved)


def check_plant_config(path: str | Path) -> tuple[bool, list[str]]:
    """What ``qcllp config check`` says of the file ``path``: whether it is a valid plant
    config, and either the line saying so or one line per problem."""
    try:
        config = load_plant_config(path)
    except ConfigError as exc:
        return False, exc.errors
    return True, [f"{path}: ok (plant {config.name}, {len(config.stations)} stations)"]


def parse_plant_config(
    mapping: Any,
    source: str = "<dict>",
    base_dir: Path | None = None,
    *,
    path: Path | None = None,
) -> PlantConfig:
    """Validate a plant mapping (as read from YAML) and build a :class:`PlantConfig`.

    ``source`` names the file in error messages; ``base_dir`` is where relative paths resolve
    (default: the current working directory); ``path``: the file it came from, if any.
    """
    folder = Path(base_dir) if base_dir is not None else Path.cwd()
    try:
        document = doc.Plant.model_validate(mapping, context={"base_dir": folder})
    except ValidationError as exc:
        raise ConfigError(error_lines(source, exc, doc.Plant)) from None
    return build(document, folder, path)


def build(plant: doc.Plant, base_dir: Path, path: Path | None = None) -> PlantConfig:
    """The :class:`PlantConfig` of a validated document."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", plant.name)
    database_url = plant.database_url or f"sqlite:///{(base_dir / f'{stem}.sqlite').resolve()}"
    scoring = plant.schedules.scoring_interval_s
    stations = tuple(_station(s, scoring) for s in plant.stations)
    return PlantConfig(
        name=plant.name,
        path=path,
        stations=stations,
        defect_types=tuple(plant.defect_types),
        database_url=database_url,
        timezone=plant.timezone,
        connectors=_connectors(plant.connectors),
        schedules=_schedules(plant.schedules, stations),
        training=_training(plant.training),
        scorer=Scorer(**plant.scorer.model_dump()),
        retrainer=_retrainer(plant.retrainer),
        retention=Retention(**plant.retention.model_dump()),
        bay=Bay(**plant.bay.model_dump()),
        encoding=plant.encoding,
        currency=plant.currency,
        cluster=plant.cluster,
        statement_timeout_s=plant.statement_timeout_s,
    )


def _station(station: doc.Station, scoring_interval_s: float) -> Station:
    return Station(
        name=station.name,
        sensors=tuple(Sensor(**s.model_dump()) for s in station.sensors),
        fail_cost=station.fail_cost,
        good_cost=station.good_cost,
        scoring_interval_s=station.scoring_interval_s or scoring_interval_s,
        inspection_cost=(
            INSPECTION_COST_SHARE * station.good_cost
            if station.inspection_cost is None
            else station.inspection_cost
        ),
        audit_share=station.audit_share,
        trial_audit_share=station.trial_audit_share,
        settle_s=station.completion.settle_s,
        timeout_s=station.completion.timeout_s,
    )


def _schedules(schedules: doc.Schedules, stations: tuple[Station, ...]) -> Schedules:
    cron = schedules.ingest_cron
    return Schedules(
        ingest_interval_s=None if cron is not None else schedules.ingest_interval_s,
        ingest_cron=cron,
        retrain_cron=schedules.retrain_cron,
        scoring_interval_s={s.name: s.scoring_interval_s for s in stations},
        retrain_interval_s=schedules.retrain_interval_s,
    )


def _retrainer(retrainer: doc.Retrainer) -> Retrainer:
    fields = retrainer.model_dump(exclude={"drift", "stations"})
    drift = {f"drift_{k}": v for k, v in retrainer.drift.model_dump().items()}
    return Retrainer(**fields, **drift, stations=tuple(retrainer.stations))


def _training(training: doc.Training) -> Training:
    grids = {m: grid for m, grid in training.methods.items() if grid}
    return Training(**{**training.model_dump(exclude={"methods"}), "methods": grids})


def _connectors(connectors: doc.Connectors) -> Connectors:
    measurements, defects = connectors.measurements, connectors.defects
    inspections = connectors.inspections
    sql = {
        name: SqlSource(name=name, **source.model_dump())
        for name, source in (connectors.sql or {}).items()
    }
    return Connectors(
        measurements=FileConnector(**measurements.model_dump()) if measurements else None,
        defects=FileConnector(**defects.model_dump()) if defects else None,
        inspections=FileConnector(**inspections.model_dump()) if inspections else None,
        sql=sql,
        mqtt=MqttConnector(**connectors.mqtt.model_dump()) if connectors.mqtt else None,
        opcua=_opcua(connectors.opcua) if connectors.opcua else None,
        future_tolerance_s=connectors.future_tolerance_s,
    )


def _opcua(opcua: doc.Opcua) -> OpcuaConnector:
    """The PLC's settings, each station's nodes as a mapping of the fields given."""
    stations = {
        name: PlcStation(
            mode=station.mode,
            nodes=station.nodes.model_dump(exclude_none=True) if station.nodes else {},
            object=station.object,
            method=station.method,
        )
        for name, station in opcua.stations.items()
    }
    return OpcuaConnector(**{**opcua.model_dump(exclude={"stations"}), "stations": stations})
