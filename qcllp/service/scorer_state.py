"""What a station scorer's ``/healthz`` reports (:class:`ScorerState`): written by the
scoring job's thread (:class:`qcllp.service.scorer.ScorerService`), read by the HTTP thread
(:mod:`qcllp.service.http`), under one lock."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from qcllp.scoring.inspection_guard import Realized, realized_line

__all__ = ["ALARMS_SHOWN", "ScorerState"]

ALARMS_SHOWN = 5  # the latest alarms of the station in /healthz


@dataclass
class ScorerState:
    """What ``/healthz`` reports; written by the job thread, read by the HTTP thread."""

    station: str
    max_lag_s: float
    model_id: int | None = None
    shadow_model_id: int | None = None  # the model on a shadow trial, if any
    lag_s: float | None = None  # None until the first step has counted the backlog
    pending: int | None = None
    last_step_at: datetime | None = None
    last_error: str | None = None
    standby: bool = False
    lockouts_suspended: str | None = None  # the guard's reason while it holds lock-outs
    realized: Realized | None = None  # the active model's realized (inspected) saving
    publishing: list[str] = field(default_factory=list)  # why flags miss MQTT or the PLC
    alarms: deque[str] = field(default_factory=lambda: deque(maxlen=ALARMS_SHOWN))
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def health(self) -> tuple[int, dict[str, Any]]:
        """HTTP status and body: 503 (``unhealthy``) without a model, after a failed step, or
        when lagging; 503 ``starting`` with a model but before the first step, which is what
        counts the backlog (``pending_sticks`` and ``lag_s`` are ``null`` until then: a
        restart behind 15,000 sticks does not say 0); 200 ``degraded`` while the lock-outs are
        suspended (module docstring: the scorer still works); else 200 ``ok``."""
        with self.lock:
            problems = []
            if self.model_id is None and self.shadow_model_id is None:
                problems.append("no model loaded")
            if self.last_error:
                problems.append(f"last step failed: {self.last_error}")
            if self.lag_s is not None and self.lag_s > self.max_lag_s:
                problems.append(f"lag {self.lag_s:.1f} s above {self.max_lag_s:g} s")
            status = "unhealthy" if problems else "ok"
            if self.last_step_at is None and not problems:
                problems.append("starting: no step yet, so the sticks waiting are not counted")
                status = "starting"
            if self.model_id is None and self.shadow_model_id is not None:
                problems.append(
                    f"no active model: shadow model {self.shadow_model_id} decides alone, the "
                    "line gets its audit samples only"
                )
                status = "degraded" if status == "ok" else status
            if self.publishing:
                problems.extend(self.publishing)
                status = "degraded" if status == "ok" else status
            if self.lockouts_suspended:
                shown = self.realized is not None and self.realized.inspected
                realized = f"; {realized_line(self.realized)}" if shown else ""
                problems.append(f"lock-outs suspended: {self.lockouts_suspended}{realized}")
                status = "degraded" if status == "ok" else status
            body = {
                "station": self.station,
                "status": status,
                "problems": problems,
                "model_id": self.model_id,
                "shadow_model_id": self.shadow_model_id,
                "lag_s": None if self.lag_s is None else round(self.lag_s, 3),
                "pending_sticks": self.pending,
                "standby": self.standby,
                "lockouts_suspended": self.lockouts_suspended,
                "realized_saving": None if self.realized is None else self.realized.as_dict(),
                "last_step_at": self.last_step_at.isoformat() if self.last_step_at else None,
                "alarms": list(self.alarms),
            }
        return (503 if status in ("unhealthy", "starting") else 200), body
