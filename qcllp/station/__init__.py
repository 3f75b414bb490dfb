"""What every flow shares about a station's model: the room below training, scoring and retraining.

* :mod:`.model` -- the fitted :class:`~qcllp.station.model.StationModel` (features, learner,
  count calibration, lock-out threshold) and how it scores sticks;
* :mod:`.artifacts` -- its file on disk (skops, an allow-list of types, verified bytes);
* :mod:`.registry` -- the models of each station in the database, which one is active;
* :mod:`.lockout_rule` -- the lock-out costs and the count-calibrated threshold with its saving
  (the costs' formulas, the bay's look included: :mod:`qcllp.plant.lockout_costs`);
* :mod:`.realized` -- what lock-outs brought in hindsight, against per-stick truth;
* :mod:`.guard_bounds` -- the guard's bounds computed in training and checked on the line;
* :mod:`.final_qc` -- which sticks final QC counted, the bag a charge's counts belong to;
* :mod:`.precision` -- exact bounds of an inspected precision, the counts' ceiling on it;
* :mod:`.audit_band` -- where an active model's audit samples are drawn.

May import :mod:`qcllp.learn`, :mod:`qcllp.features`, :mod:`qcllp.plant` and :mod:`qcllp.store`;
never a flow (:mod:`qcllp.training`, :mod:`qcllp.scoring`, :mod:`qcllp.retraining`,
:mod:`qcllp.reporting`) or a service.
"""
