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
:class:`qcllp.station.lockout_rule.LockoutCosts`, the costs a model is trained and judged with
(thresholds, savings), cannot disagree. The look used to be left out of the
break-even while the realized saving counted it: at the example cooling station that put
break-even at 0.88 instead of 0.924, and a model confirmed at 92.7 % precision earned about
nothing.
"""

from __future__ import annotations

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
