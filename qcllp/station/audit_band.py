"""Where an active model's audit samples are drawn: the floor of its audit band, and the
stations where there is none.

One definition for the scorer that draws the samples (:func:`qcllp.scoring.audits.
audit_floor`) and for training, which judges from the inspected sticks above the same floor
whether the samples pay for their looks (:func:`qcllp.training.lockout.audit_evidence`).
"""

from __future__ import annotations

__all__ = ["EVIDENCE_LEVEL", "EVIDENCE_RUN", "audit_band_floor", "audits_can_earn_lockouts"]

EVIDENCE_RUN = 100  # failing inspections in a row: the most evidence audits are asked to give
EVIDENCE_LEVEL = 0.10  # one-sided, the level of the lock-out rule's and the brake's bounds


def audits_can_earn_lockouts(break_even: float) -> bool:
    """Whether inspected sticks could show a lock-out's precision above ``break_even``
    within :data:`EVIDENCE_RUN` inspections: even that many failing in a row put the
    one-sided 90 % lower bound of the precision at ``0.1 ** (1 / 100)`` = 0.977 (Clopper-
    Pearson with no good stick). Above it -- the example plant's straightener, 0.995, would
    need 459 in a row -- audits cannot earn the station a lock-out, and what is left is
    their own pay, at most ``fail_cost - inspection_cost`` a failing stick (2.50 EUR there),
    which overconfident probabilities at the top of a ranking turn into a loss: on the
    running line the straighteners' audit samples, drawn at p >= 0.9, failed at 66 % (114
    of 172, eleven 12-week runs) against the 90 % they needed. Such a station gets no audit
    band (:func:`qcllp.scoring.audits.audit_floor`)."""
    return break_even <= EVIDENCE_LEVEL ** (1.0 / EVIDENCE_RUN)


def audit_band_floor(break_even: float, audit_pays_from: float, audit_from: float | None) -> float:
    """The lowest probability of an active model's audit band: break-even, or lower, the top of
    its training ranking (``audit_from``) when its probabilities stay below break-even, but
    never below ``audit_pays_from``, where a look costs more than a failing stick saves."""
    top = break_even if audit_from is None else min(break_even, float(audit_from))
    return max(top, audit_pays_from)
