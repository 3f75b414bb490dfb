"""Where an active model's audit samples are drawn: the floor of its audit band.

One definition for the scorer that draws the samples (:func:`qcllp.scoring.audits.
audit_floor`) and for training, which judges from the inspected sticks above the same floor
whether the samples pay for their looks (:func:`qcllp.training.lockout.audit_evidence`).
"""

from __future__ import annotations

__all__ = ["audit_band_floor"]


def audit_band_floor(break_even: float, audit_pays_from: float, audit_from: float | None) -> float:
    """The lowest probability of an active model's audit band: break-even, or lower, the top of
    its training ranking (``audit_from``) when its probabilities stay below break-even, but
    never below ``audit_pays_from``, where a look costs more than a failing stick saves."""
    top = break_even if audit_from is None else min(break_even, float(audit_from))
    return max(top, audit_pays_from)
