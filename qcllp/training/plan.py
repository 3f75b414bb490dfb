"""What a training fits: the plan of one station (method, grid, seed, folds, the way the
any-defect target is learned) and the methods ``auto`` tries."""

from __future__ import annotations

from dataclasses import dataclass

from qcllp.plant.config import DEFAULT_ANY_DEFECT, DEFAULT_BOOTSTRAP, PlantConfig
from qcllp.training.labeled import check_target
from qcllp.training.methods import Method, canonical_name, method

__all__ = [
    "AUTO",
    "AUTO_ANY_DEFECT",
    "AUTO_ANY_DEFECT_MODES",
    "AUTO_METHODS",
    "TrainingPlan",
    "auto_methods",
    "is_auto",
    "methods_to_try",
    "training_plan",
]

AUTO_ANY_DEFECT = "auto"
AUTO_ANY_DEFECT_MODES = ("per-type-sum", "direct")  # what ``any_defect: auto`` compares


@dataclass(frozen=True)
class TrainingPlan:
    """What to train, resolved from the command's choices and the config's defaults.

    ``any_defect``: how the ``defective`` target is learned -- ``direct`` (one model on the
    charges' failing shares), ``per-type-sum`` / ``per-type-noisy-or`` (one model per
    defect type on its own shares, combined as :class:`qcllp.learn.PerDefectClassifier`) or
    ``auto`` (``per-type-sum`` and ``direct`` both trained, :func:`choose_any_defect`).
    """

    station: str
    method: Method
    target: str
    seed: int
    folds: int
    grid: dict[str, list]
    any_defect: str = DEFAULT_ANY_DEFECT
    bootstrap: int = DEFAULT_BOOTSTRAP

    @property
    def any_defect_auto(self) -> bool:
        """Whether both ways of learning the ``defective`` target are trained and compared."""
        return self.target == "defective" and self.any_defect == AUTO_ANY_DEFECT

    @property
    def per_type(self) -> bool:
        """Whether the model is one learner per defect type (``defective`` target only)."""
        return self.target == "defective" and self.any_defect.startswith("per-type")

    def folds_for(self, n_charges: int) -> int:
        """Charge folds: as configured, but at least 2 and at most half the charges."""
        return max(2, min(self.folds, n_charges // 2))


def training_plan(
    config: PlantConfig,
    station: str,
    *,
    method_name: str | None = None,
    target: str = "defective",
    random_state: int | None = None,
    n_splits: int | None = None,
    any_defect: str | None = None,
) -> TrainingPlan:
    """The method, grid, seed and folds for one station; unknown names fail here."""
    config.station(station)  # an unknown station fails here, with the known ones listed
    check_target(config, target)
    training = config.training
    chosen = method(method_name or training.default_method)
    grids = {canonical_name(k): v for k, v in training.methods.items()}
    return TrainingPlan(
        station=station,
        method=chosen,
        target=target,
        seed=int(training.random_state if random_state is None else random_state),
        folds=int(n_splits or training.cv),
        grid=chosen.param_grid(grids.get(chosen.name)),
        any_defect=any_defect or training.any_defect,
        bootstrap=training.bootstrap,
    )


AUTO = "auto"
AUTO_METHODS = ("em-llp", "alter-psvm", "invcal", "meanmap", "kmeans-labeler")


def is_auto(method_name: str | None, config: PlantConfig) -> bool:
    """Whether the method is chosen per station (``--method auto``, or the config's
    ``default_method: auto`` when no method is named)."""
    name = method_name or config.training.default_method
    return name.strip().lower() == AUTO


def auto_methods(config: PlantConfig) -> list[str]:
    """The methods ``auto`` tries: those the config gives grids for, else :data:`AUTO_METHODS`
    (not conv-psvm and twin-psvm: the slowest, and on the simulated plant not better)."""
    named = [canonical_name(k) for k in config.training.methods]
    return list(dict.fromkeys(named)) or list(AUTO_METHODS)


def methods_to_try(config: PlantConfig, method_name: str | None) -> list[str | None]:
    """The methods a training fits: every :func:`auto_methods` for ``auto``, else the one
    named (``None``: the config's default)."""
    return list(auto_methods(config)) if is_auto(method_name, config) else [method_name]
