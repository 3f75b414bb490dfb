"""Audit samples: sticks the scorer marks ``inspect`` instead of ``pass``, so that the station
looks at them (taken aside, returned to the line if good, scrapped if failing).

A lock-out is judged at the bay; a pass is not judged until final QC counts its charge, days
later and without saying which stick failed. Audits look where the evidence is thin:

* with an active model, its passes with a probability between the station's break-even
  precision (:attr:`qcllp.plant.config.Station.break_even`) and its threshold -- the band where
  the lock-out rule declined for lack of evidence -- or from the top of its ranking when its
  probabilities never reach break-even, but never where a look costs more than a failing
  stick saves, nor at all when the inspected sticks there failed too rarely to pay for their
  looks, nor at a station whose break-even no practical run of inspections could show a
  precision above (:func:`audit_floor`), and, when a shadow model is on
  trial, the active's passes that the shadow would lock out (the sticks on which the two
  disagree);
* with a shadow model alone, the shadow's would-be lock-outs.

Of these *eligible* sticks a share is drawn (station config keys): ``trial_audit_share``
(default 1) of the sticks a shadow model would lock out -- its trial's evidence, and a look
expected to pay wherever the shadow is roughly right (a look pays from ``inspection_cost /
fail_cost``, far below break-even); in the active model's band too, at the larger of the
two shares --, and ``audit_share`` (default 1: the whole band, 0.7-3 % of a station's sticks
on the running line) of the rest of the active model's audit band. The draw is a keyed
hash of (station, charge, stick) mapped to [0, 1) (:func:`audit_draw`), not a random
generator: a step repeated after a crash, or run in
other batches, draws the same sticks, and no state is kept. Unscorable sticks are never
audited, and an audit is no lock-out for any guard: the guards count the decisions before the
draw. The flag's ``reason``
says why in an inspector's words. Its ``model_id``, ``probability`` and ``threshold`` are the
active model's whenever there is one, also for a stick sampled because the shadow would lock
it out (the shadow's probability is in ``shadow_flags`` and the reason): final QC's counts of
the charge are then judged on the active model's probabilities of every stick it decided, as
the count guard (:mod:`.count_guard`) needs. With the shadow alone they are the shadow's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pandas as pd

from qcllp.plant.config import Station
from qcllp.station.audit_band import audit_band_floor, audits_can_earn_lockouts
from qcllp.station.registry import LoadedModel

__all__ = ["AUDIT", "audit_draw", "audit_floor", "draw_audits", "shadow_audits"]

AUDIT = "inspect"  # a flag's decision for an audit sample
_KEY = b"qcllp audit sample"


def audit_draw(station: str, charge_ids: Sequence, stick_ids: Sequence) -> np.ndarray:
    """Per stick, a number in [0, 1) that depends on (station, charge, stick) only: the
    first 8 bytes of a keyed BLAKE2b (hashlib: fast, standard, no state) over the three
    names, over 2**64 (about 4 microseconds a stick; only eligible sticks are hashed). A
    stick is drawn when it is below the share."""
    out = np.empty(len(charge_ids), dtype=np.float64)
    for i, (charge, stick) in enumerate(zip(charge_ids, stick_ids, strict=True)):
        data = "\x1f".join((station, str(charge), str(stick))).encode()
        digest = hashlib.blake2b(data, key=_KEY, digest_size=8).digest()
        out[i] = int.from_bytes(digest, "big") / 2.0**64
    return out


def draw_audits(
    st: Station,
    active: LoadedModel,
    scores: pd.DataFrame,
    shadow: LoadedModel | None = None,
    shadow_scores: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The active model's decisions (after its guards) with the drawn passes made ``inspect``;
    ``shadow_scores`` (same rows, same order) adds the passes the shadow would lock out.
    Every flag's decision is the active model's (its id and threshold go with the flags,
    :func:`qcllp.scoring.flag_writes.write_flags`)."""
    if scores.empty:
        return scores
    p = scores["probability"].to_numpy(dtype=float)
    passed = scores["decision"].to_numpy() == "pass"
    threshold = float(active.model.threshold)
    floor = audit_floor(st, active)
    band = passed & (p >= floor) & (p < threshold)
    tried = np.zeros(len(scores), dtype=bool)  # passes the shadow would lock out
    if shadow is not None and shadow_scores is not None:
        tried = passed & (shadow_scores["decision"].to_numpy() == "lock_out")
    disagree = tried & ~band
    drawn = np.zeros(len(scores), dtype=bool)
    eligible = np.flatnonzero(band | disagree)  # only they are hashed
    if not len(eligible):
        return scores
    charges, sticks = scores["charge_id"].tolist(), scores["stick_id"].tolist()
    share = np.where(tried, st.trial_audit_share, 0.0)
    share = np.where(band, np.maximum(share, st.audit_share), share)
    drawn[eligible] = (
        audit_draw(st.name, [charges[i] for i in eligible], [sticks[i] for i in eligible])
        < share[eligible]
    )
    in_band, of_shadow = band & drawn, disagree & drawn
    if not (in_band.any() or of_shadow.any()):
        return scores  # nothing drawn: the decisions as they are, not a copy
    out = scores.copy()
    if in_band.any():
        out.loc[in_band, "decision"] = AUDIT
        out.loc[in_band, "reason"] = [
            f"audit: p {q:.2f} in the audit band [{floor:.2f}, {threshold:.2f}) below the "
            f"threshold (break-even {st.break_even:.2f})"
            for q in p[in_band]
        ]
    if of_shadow.any():
        q = shadow_scores.loc[of_shadow, "probability"].to_numpy(dtype=float)
        out.loc[of_shadow, "decision"] = AUDIT
        out.loc[of_shadow, "reason"] = [_shadow_reason(shadow, x) for x in q]
    return out


def audit_floor(st: Station, model: LoadedModel) -> float:
    """The lowest probability of the active model's audit band: the station's break-even,
    or lower, the top of the model's ranking in training (metric ``audit_from``, the
    probability above which its top :data:`qcllp.training.fitting.AUDIT_TOP` of training
    sticks lay), when its recalibrated probabilities stay below break-even -- where the
    counts could not show the top of the ranking is worth locking out, and only a look at
    its sticks can. A model whose top probabilities are one tied value has no
    ``audit_from`` (:func:`qcllp.training.fitting._audit_from`): it has no top to audit.

    Never below :attr:`~qcllp.plant.config.Station.audit_pays_from`: below it a sample is
    expected to cost more than it saves even if the probability is right (at the last
    station of the example plant a look costs 22.50 EUR and a failing stick saves 25, so
    only sticks of p >= 0.9 are worth a look there). ``inf`` (no band) when the model's
    training found that the inspected sticks there fail too rarely to pay for a look (metric
    ``audits_declined``, :func:`qcllp.training.lockout.audit_evidence`), or at a station whose
    break-even is beyond what audits can show (:func:`qcllp.station.audit_band.
    audits_can_earn_lockouts`: the example plant's straightener)."""
    if model.model.metrics.get("audits_declined") or not audits_can_earn_lockouts(st.break_even):
        return float("inf")
    return audit_band_floor(
        st.break_even, st.audit_pays_from, model.model.metrics.get("audit_from")
    )


def shadow_audits(st: Station, shadow: LoadedModel, shadow_scores: pd.DataFrame) -> pd.DataFrame:
    """With no active model: the flags for the drawn share of the shadow's would-be
    lock-outs (the only flags the line gets); the shadow's id and threshold go with them
    (:func:`qcllp.scoring.flag_writes.write_flags` is given the shadow)."""
    locks = shadow_scores[shadow_scores["decision"] == "lock_out"]
    drawn = audit_draw(st.name, locks["charge_id"], locks["stick_id"]) < st.trial_audit_share
    picked = locks.loc[drawn]
    p = picked["probability"].to_numpy(dtype=float)
    audits = picked.assign(decision=AUDIT, reason=[_shadow_reason(shadow, q) for q in p])
    return audits.reset_index(drop=True)


def _shadow_reason(shadow: LoadedModel, p: float) -> str:
    return f"audit: the shadow model {shadow.id} would lock it out (p {p:.2f})"
