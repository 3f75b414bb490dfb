"""What one lock-out costs and brings: the three formulas every saving figure is built from.

A stick locked out at a station and failing saves ``fail_cost`` (what the rest of the line
would have spent on it); a good one locked out loses ``good_cost`` (its value); and every
locked-out stick is looked at at the lock-out bay before it is scrapped (``inspection_cost``,
the issue "Decisions that learn from the line": "a locked-out stick is looked at before it is
scrapped"). So a lock-out of a stick failing with probability ``p`` brings
``p * fail_cost - (1 - p) * good_cost - inspection_cost`` and breaks even at ``p = (good_cost
+ inspection_cost) / (good_cost + fail_cost)``; an audit sample (looked at, returned to the
line when good) pays from ``p = inspection_cost / fail_cost``.

Written once here, plain arithmetic on numbers or NumPy arrays, so that the plant's
:class:`qcllp.plant.config.Station` (the scorer's guard, a shadow trial's verdict) and
:class:`LockoutCosts`, the costs a model is trained and judged with (thresholds, savings;
:mod:`qcllp.station.lockout_rule`), cannot disagree. The look used to be left out of the
break-even while the realized saving counted it: at the example cooling station that put
break-even at 0.88 instead of 0.924, and a model confirmed at 92.7 % precision earned about
nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # arrays pass through the arithmetic; a plant config needs no NumPy
    import numpy as np


def break_even(fail_cost: float, good_cost: float, inspection_cost: float) -> float:
    """The failure probability at which a lock-out neither saves nor loses (1 when both
    costs are 0: nothing to gain). Above 1 when a look costs more than a failing stick saves:
    then no lock-out pays."""
    total = good_cost + fail_cost
    return (good_cost + inspection_cost) / total if total > 0 else 1.0


def lockout_value(
    precision: np.ndarray | float, fail_cost: float, good_cost: float, inspection_cost: float
) -> np.ndarray | float:
    """What one lock-out brings when its stick fails with probability ``precision`` (a
    number, or an array of them)."""
    return precision * fail_cost - (1.0 - precision) * good_cost - inspection_cost


def audit_pays_from(fail_cost: float, inspection_cost: float) -> float:
    """The failure probability above which an audit sample pays for its look (a failing
    sample saves ``fail_cost``, every sample costs ``inspection_cost``; ``inf`` when a
    failing stick saves nothing here)."""
    return inspection_cost / fail_cost if fail_cost > 0 else float("inf")


@dataclass(frozen=True)
class LockoutCosts:
    """Costs per stick at one station, in the plant's currency.

    ``fail_cost``: saved per failing stick locked out here; ``good_cost``: lost per good stick
    locked out here; ``inspection_cost``: the cost of looking at one stick here (as
    ``qcllp.plant.config.Station``; 0 in models trained before it was recorded).
    """

    fail_cost: float
    good_cost: float
    inspection_cost: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.fail_cost) and math.isfinite(self.good_cost)):
            raise ValueError(
                f"lock-out costs must be finite, got {self.fail_cost!r} and {self.good_cost!r}"
            )
        if not (math.isfinite(self.inspection_cost) and self.inspection_cost >= 0):
            raise ValueError(
                f"inspection_cost must be finite and >= 0, got {self.inspection_cost!r}"
            )
        if not (self.fail_cost >= 0 and self.good_cost > 0):
            raise ValueError(
                f"lock-out costs need fail_cost >= 0 and good_cost > 0, got {self.fail_cost!r} "
                f"and {self.good_cost!r}"
            )

    @property
    def bayes_threshold(self) -> float:
        """The threshold that is optimal for perfectly calibrated probabilities, where a
        lock-out neither saves nor loses: ``(good_cost + inspection_cost) / (good_cost +
        fail_cost)`` (:func:`break_even`). Above 1 when a look costs
        more than a failing stick saves: no lock-out pays."""
        return break_even(self.fail_cost, self.good_cost, self.inspection_cost)

    def lockout_value(self, precision: np.ndarray | float) -> np.ndarray | float:
        """What one lock-out brings when its stick fails with probability ``precision``:
        ``precision x fail_cost - (1 - precision) x good_cost - inspection_cost``, the look at
        the lock-out bay included (:func:`lockout_value`)."""
        return lockout_value(precision, self.fail_cost, self.good_cost, self.inspection_cost)

    @property
    def audit_pays_from(self) -> float:
        """The failure probability above which an audit sample pays for its look,
        ``inspection_cost / fail_cost`` (``inf`` when a failing stick saves nothing here)."""
        return audit_pays_from(self.fail_cost, self.inspection_cost)
