"""The retraining daemon's shadow-trial job: every station's shadow model judged and the verdict
acted on (:mod:`qcllp.retraining.shadow_check`), on ``retrainer.shadow_check_interval_s``.

Like the other jobs it is stored in the job table, runs under the daemon's lease and is
retried on database errors; a confirmation or rejection and its event are one transaction,
so a daemon killed mid-check, or a second one taking over, never promotes or retires twice.
``/healthz`` lists the trials with their state (:class:`.retrainer_health.RetrainerState`).

:class:`ShadowJob` is the part of :class:`qcllp.service.retrainer.RetrainerService` that does
this; it uses the service's store, config, stations and state.
"""

from __future__ import annotations

import logging
from typing import Any

from qcllp.plant.config import PlantConfig
from qcllp.retraining.shadow_check import check_trial
from qcllp.service.logs import log_event
from qcllp.service.retrainer_health import RetrainerState
from qcllp.store import Store

__all__ = ["ShadowJob"]

log = logging.getLogger("qcllp.retrainer")


class ShadowJob:
    """The shadow-trial job (a part of the daemon's service, module docstring)."""

    store: Store
    config: PlantConfig
    stations: list[str]
    state: RetrainerState

    def shadow(self) -> dict[str, Any]:
        """Judge each station's shadow trial; a confirmation or rejection is logged, the
        trials' states go to ``/healthz``. Quiet (no job log line) while nothing changes."""
        trials: dict[str, str] = {}
        decided = {}
        for station in self.stations:
            check = check_trial(self.store, self.config, station)
            if check is None:
                continue
            if check.outcome in ("confirmed", "rejected", "inconclusive"):
                decided[station] = check.outcome
                log_event(
                    log,
                    f"shadow_{check.outcome}",
                    station=station,
                    model_id=check.model_id,
                    reason=check.reason,
                )
            else:
                trials[station] = check.state()
        with self.state.lock:
            self.state.shadow_trials = trials
        return {"decided": decided, "trials": len(trials), "quiet": not decided}
