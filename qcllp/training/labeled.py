"""The labeled training set of a station: the charges with final-QC counts, their sticks' features
and shares.

**Large training sets** (``training.max_sticks``, :func:`subsample_charges`). When the labeled
charges hold more sticks than ``max_sticks`` (default 500,000), a seeded random subset of
*whole* charges is trained on (a charge is a bag: its count only means something for all its
sticks), chosen from the final-QC counts before any feature is read, so the features of the
other charges are never read. Every fit, the grid's, the folds' and the bootstrap rule's, runs
on that subset; the model's metrics record how many labeled charges and sticks there were
(``labeled_charges``, ``labeled_sticks``) and the limit (``max_sticks``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
import pandas as pd

from qcllp.features import StationFeatures, station_features
from qcllp.learn import counts_to_shares
from qcllp.plant.config import PlantConfig
from qcllp.station.final_qc import qc_counted
from qcllp.store import Store
from qcllp.store.retention import retained_since
from qcllp.training.inspected import InspectionError, read_inspections, with_inspections

__all__ = [
    "LabeledData",
    "Subsample",
    "TrainingError",
    "check_target",
    "labeled_data",
    "labeled_from_frames",
    "subsample_charges",
]


class TrainingError(ValueError):
    """Training cannot start: no labeled charges, an unknown target, too few charges."""


@dataclass(frozen=True)
class Subsample:
    """How many labeled charges and sticks there were, how many were kept (whole charges, by
    :func:`subsample_charges`) and under which limit."""

    labeled_charges: int
    labeled_sticks: int
    kept_charges: int
    kept_sticks: int
    max_sticks: int
    random_state: int

    @property
    def applied(self) -> bool:
        return self.kept_charges < self.labeled_charges

    def describe(self) -> str:
        return (
            f"subsampled {self.kept_charges:,} of {self.labeled_charges:,} charges "
            f"({self.kept_sticks:,} of {self.labeled_sticks:,} sticks; "
            f"max_sticks {self.max_sticks:,}, seed {self.random_state})"
        )

    def metrics(self) -> dict[str, float]:
        return {
            "labeled_charges": float(self.labeled_charges),
            "labeled_sticks": float(self.labeled_sticks),
            "max_sticks": float(self.max_sticks),
        }


def subsample_charges(n_sticks: pd.Series, max_sticks: int, random_state: int) -> pd.Index:
    """The charges to train on: all of them when their sticks sum to at most ``max_sticks``,
    else a seeded random subset of whole charges whose sticks sum to at most ``max_sticks``.

    ``n_sticks``: sticks per charge, indexed by charge id (final QC's ``n_sticks``). The rule:
    every charge gets a pseudo-random key, a hash of its id and ``random_state``; in the order
    of the keys, charges are kept while the running sum of their sticks stays within
    ``max_sticks`` (a prefix of that order, so a few sticks of room may stay unused). The keys
    depend on the charge ids, not on their order or on the other charges: the same seed keeps
    the same charges however the counts are sorted, and when new charges arrive a charge kept
    before is dropped only to make room for a new one with a smaller key. Vectorized (a hash,
    an argsort and a cumsum). Returns the kept charge ids in the order of ``n_sticks``.
    """
    if isinstance(max_sticks, bool) or int(max_sticks) != max_sticks or max_sticks < 1:
        raise ValueError(f"max_sticks must be a positive integer, got {max_sticks!r}")
    sizes = n_sticks.to_numpy(dtype=np.int64)
    if (sizes < 0).any():
        raise ValueError("n_sticks must be >= 0 for every charge")
    if sizes.sum() <= max_sticks:
        return n_sticks.index
    ids = n_sticks.index.astype(str).to_numpy(dtype=object) + f"\x1f{int(random_state)}"
    keys = pd.util.hash_array(ids)
    order = np.argsort(keys, kind="stable")
    inside = np.cumsum(sizes[order]) <= max_sticks
    return n_sticks.index[np.sort(order[inside])]


@dataclass(frozen=True)
class LabeledData:
    """The station-s training set: features, the charge of each stick and the targets.

    ``subsample``: set by :func:`labeled_data`, how the charges were chosen from the labeled
    ones (``training.max_sticks``)."""

    features: StationFeatures
    proportions: pd.Series | pd.DataFrame
    defective_counts: pd.Series
    target: str
    n_sticks: pd.Series
    type_shares: pd.DataFrame  # per charge, the share of each defect type (final QC)
    subsample: Subsample | None = None
    labels: pd.Series | None = None  # per row: its inspection result, NaN if not inspected
    held_back: int = 0  # labeled charges left out: an audit sample's inspection is to come

    def known(self, per_type: bool = False) -> np.ndarray | None:
        """The inspected rows' labels for the learner (``y``: NaN where unknown), as the
        target needs them: 1/0 for ``defective`` (not ``ok``) or one defect type (that type),
        the result itself for ``multiclass`` and, ``per_type``, for the models per defect
        type (:class:`qcllp.learn.PerDefectClassifier` splits them). ``None`` without
        inspected rows: the learners are fitted exactly as on counts alone."""
        if self.labels is None:
            return None
        labels = self.labels.to_numpy(dtype=object)
        given = pd.notna(labels)
        if not given.any():
            return None
        if per_type or self.target == "multiclass":
            return np.where(given, labels, None)
        hit = labels != "ok" if self.target == "defective" else labels == self.target
        return np.where(given, hit.astype(float), np.nan)

    @property
    def inspected(self) -> np.ndarray:
        """Per row: was the stick inspected (its label known)?"""
        if self.labels is None:
            return np.zeros(len(self.features.X), dtype=bool)
        return self.labels.notna().to_numpy()

    @property
    def bags(self) -> np.ndarray:
        return self.features.bags.to_numpy()

    @property
    def n_charges(self) -> int:
        return len(self.proportions)

    @property
    def failing_shares(self) -> pd.Series:
        """Share of failing sticks per charge, whatever the target (multiclass: 1 - ok)."""
        if isinstance(self.proportions, pd.Series):
            return self.proportions
        return (1.0 - self.proportions["ok"]).rename("defective")

    def subset(self, charges) -> LabeledData:  # noqa: ANN001 - charge ids
        """The same training set restricted to some charges (their sticks and shares)."""
        features = self.features.of_charges(charges)
        index = pd.Index(pd.unique(features.bags.to_numpy()))
        return LabeledData(
            features,
            self.proportions.loc[index],
            self.defective_counts.loc[index],
            self.target,
            self.n_sticks.loc[index],
            self.type_shares.loc[index],
            self.subsample,
            None if self.labels is None else self.labels.loc[features.X.index],
        )

    def for_type(self, defect_type: str) -> LabeledData:
        """The same sticks with one defect type as the target (its binary shares)."""
        return replace(
            self,
            proportions=self.type_shares[defect_type],
            target=defect_type,
            defective_counts=(self.type_shares[defect_type] * self.n_sticks).round(),
        )


def labeled_data(
    store: Store,
    config: PlantConfig,
    station: str,
    *,
    target: str = "defective",
    since: datetime | None = None,
    until: datetime | None = None,
    random_state: int | None = None,
) -> LabeledData:
    """Features and proportions of the charges that have final-QC counts; a charge's bag
    holds the sticks QC counted (not those the line locked out: :mod:`qcllp.station.final_qc`)
    and the sticks inspected at the station, their labels known (:mod:`.inspected`: a
    locked-out stick or a failed audit sample that was inspected returns to its bag, its
    result added to the counts); a charge with an audit sample not inspected yet is left out
    until its inspection arrives.

    When those charges hold more than ``training.max_sticks`` sticks (by their final-QC
    ``n_sticks``), only a seeded subset of whole charges is read (:func:`subsample_charges`,
    seeded by ``random_state``, default ``training.random_state``); the features of the others
    are never read. The result's ``subsample`` says how many there were."""
    config.station(station)  # an unknown station fails here, with the known ones listed
    check_target(config, target)
    counts = _labeled_counts(store, config, since, until)
    max_sticks = config.training.max_sticks
    seed = int(config.training.random_state if random_state is None else random_state)
    kept = subsample_charges(counts["n_sticks"], max_sticks, seed)
    subsample = Subsample(
        len(counts),
        int(counts["n_sticks"].sum()),
        len(kept),
        int(counts["n_sticks"].loc[kept].sum()),
        max_sticks,
        seed,
    )
    if subsample.applied:
        counts = counts.loc[kept]
        if len(counts) < 4:
            raise TrainingError(
                f"training.max_sticks {max_sticks:,} keeps only {len(counts)} of the "
                f"{subsample.labeled_charges:,} labeled charges; at least 4 are needed: "
                "raise it"
            )
    charges = list(counts.index)
    features = station_features(store, config, station, charge_ids=charges)
    counted, held = qc_counted(store, config, features, counts["n_sticks"])
    if len(held):  # an audit sample's inspection is still to come (final_qc docstring)
        counts = counts.loc[~counts.index.isin(held)]
        charges, features = list(counts.index), features.of_charges(counts.index)
    counted = counted.X.index
    try:
        inspections = read_inspections(store, station, charges)
        features, counts, labels = with_inspections(
            features, counted, counts, inspections, list(config.defect_types)
        )
    except InspectionError as exc:
        raise TrainingError(f"station {station!r}: {exc}") from None
    data = labeled_from_frames(config, station, features, counts, target=target, labels=labels)
    return replace(data, subsample=subsample, held_back=len(held))


def _labeled_counts(
    store: Store, config: PlantConfig, since: datetime | None, until: datetime | None
) -> pd.DataFrame:
    """Final QC's counts of the charges in the window (``since`` no earlier than retention
    keeps readings); a :class:`TrainingError` when there are none."""
    counts = store.read_defect_counts(list(config.defect_types))
    kept_since = retained_since(config)  # older charges may have lost readings to retention
    if kept_since is not None and (since is None or since < kept_since):
        since = kept_since
    if since is not None or until is not None:
        times = store.read_charge_times().reindex(counts.index)
        keep = pd.Series(True, index=counts.index)
        if since is not None:
            keep &= times >= pd.Timestamp(since)
        if until is not None:
            keep &= times < pd.Timestamp(until)
        counts = counts.loc[keep.to_numpy()]
    if counts.empty:
        raise TrainingError(
            "no labeled charges yet: ingest final-QC defect counts first (qcllp ingest defects)"
            + (" or widen --since/--until" if since or until else "")
        )
    return counts


def labeled_from_frames(
    config: PlantConfig,
    station: str,
    features: StationFeatures,
    counts: pd.DataFrame,
    *,
    target: str = "defective",
    labels: pd.Series | None = None,
) -> LabeledData:
    """The training set from a station feature table and the charges' defect counts
    (index ``charge_id``; ``n_sticks`` and one count column per defect type), as stored or as
    a simulator gives them. Only charges with both are kept; at least 4 are needed.
    ``labels``: the inspection result of inspected rows (index as ``features.X``, NaN
    elsewhere; :func:`qcllp.training.inspected.with_inspections`)."""
    check_target(config, target)
    if features.X.empty:
        raise TrainingError(
            f"none of the {len(counts)} labeled charges has readings at station {station!r}"
        )
    known = pd.Index(pd.unique(features.bags.to_numpy()))
    counts = counts.loc[counts.index.intersection(known, sort=False)]
    if len(counts) < 4:
        raise TrainingError(
            f"only {len(counts)} labeled charges with readings at {station!r}; "
            "at least 4 are needed to validate a model on held-out charges"
        )
    if not features.bags.isin(counts.index).all():
        features = features.of_charges(counts.index)
    counts = counts.loc[pd.unique(features.bags.to_numpy())]
    types = list(config.defect_types)
    n_sticks = counts["n_sticks"].astype(float)
    defective = counts[types].sum(axis=1)
    type_shares = counts_to_shares(counts[types], n_sticks)
    if target == "defective":
        proportions: pd.Series | pd.DataFrame = counts_to_shares(
            defective.rename("defective"), n_sticks
        )
    elif target in types:
        proportions = type_shares[target]
        defective = counts[target]
    else:
        proportions = counts_to_shares(counts[types], n_sticks, remainder="ok")
    if labels is not None:
        labels = labels.reindex(features.X.index)
    return LabeledData(
        features,
        proportions,
        defective.astype(float),
        target,
        n_sticks,
        type_shares,
        labels=labels,
    )


def check_target(config: PlantConfig, target: str) -> None:
    """Targets: ``defective`` (any defect), one defect type, or ``multiclass`` (ok + types)."""
    if target not in ("defective", "multiclass", *config.defect_types):
        raise TrainingError(
            f"unknown target {target!r}; choose defective, multiclass or a defect type "
            f"({', '.join(config.defect_types)})"
        )
