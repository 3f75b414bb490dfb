"""Where the types of a station model lived before the flow layout, for artifacts written then.

Model artifacts name the modules of the types they hold: skops files in their schema, the
pickles of formats 1 and 2 in their byte stream. qcllp 0.x kept the learners in one flat
``qcllp.learn`` and the station model's parts in ``qcllp.pipeline``; the flow layout moved them
(``qcllp.learn.psvm``, ``qcllp.training.methods``, ...). A plant that upgrades keeps scoring with
the models it has: :func:`alias_legacy_modules` makes each old module name an alias of the
module that holds the type now, and :func:`legacy_trusted_types` gives the allow-listed types
under their old names, so an old file passes the same allow-list check as a new one. ``qcllp
models resave`` rewrites a file under the new names. The table is frozen: it records one move and
never grows with later ones.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable

# old module -> the module that holds its types since the flow layout
LEGACY_MODULES: dict[str, str] = {
    "qcllp.pipeline.thresholds": "qcllp.station.lockout_rule",
    "qcllp.pipeline.methods": "qcllp.training.methods",
    "qcllp.learn.problem": "qcllp.learn.core.problem",
    "qcllp.learn.base": "qcllp.learn.core.base",
    "qcllp.learn.margin": "qcllp.learn.core.margin",
    "qcllp.learn.params": "qcllp.learn.core.params",
    "qcllp.learn.threads": "qcllp.learn.core.threads",
    "qcllp.learn.kernels": "qcllp.learn.core.kernels",
    "qcllp.learn.alter_psvm": "qcllp.learn.psvm.alter_psvm",
    "qcllp.learn.alternating": "qcllp.learn.psvm.alternating",
    "qcllp.learn.svm_step": "qcllp.learn.psvm.svm_step",
    "qcllp.learn.label_step": "qcllp.learn.psvm.label_step",
    "qcllp.learn.twin_psvm": "qcllp.learn.psvm.twin_psvm",
    "qcllp.learn.conv_psvm": "qcllp.learn.psvm.conv_psvm",
    "qcllp.learn.wellsvm": "qcllp.learn.psvm.wellsvm",
    "qcllp.learn.wellsvm_labels": "qcllp.learn.psvm.wellsvm_labels",
    "qcllp.learn.wellsvm_solver": "qcllp.learn.psvm.wellsvm_solver",
    "qcllp.learn.kmeans_labeler": "qcllp.learn.cluster.kmeans_labeler",
    "qcllp.learn.cluster_labeling": "qcllp.learn.cluster.cluster_labeling",
    "qcllp.learn.llpfc": "qcllp.learn.tabular.llpfc",
    "qcllp.learn.mean_maps": "qcllp.learn.tabular.mean_maps",
    "qcllp.learn.proportion_boosting": "qcllp.learn.tabular.proportion_boosting",
    "qcllp.learn.em_llp": "qcllp.learn.tabular.em_llp",
    "qcllp.learn.binning": "qcllp.learn.tabular.binning",
}


def legacy_trusted_types(trusted: Iterable[str]) -> tuple[str, ...]:
    """``trusted`` type names whose module moved, under the module's old name."""
    old_of = {new: old for old, new in LEGACY_MODULES.items()}
    names = []
    for name in trusted:
        module, _, cls = name.rpartition(".")
        if module in old_of:
            names.append(f"{old_of[module]}.{cls}")
    return tuple(names)


def alias_legacy_modules() -> None:
    """Make each old module name import the module that holds its types now (idempotent).

    Both skops and pickle import a type's module by name through :data:`sys.modules`, so an
    entry under the old name is all they need; the entries stay for the process's life.
    """
    for old, new in LEGACY_MODULES.items():
        if old not in sys.modules:
            sys.modules[old] = importlib.import_module(new)
