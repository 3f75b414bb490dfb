"""Keeping models current: retrain on new charges, promote only a better candidate, watch drift.

To change how a candidate is promoted, start here:

* :mod:`.retrain` -- ``retrain_station``: one station's retraining run (lease, train, compare,
  promote or keep);
* :mod:`.promotion` -- the candidate against the active model on held-out charges;
* :mod:`.drift` -- when the plant has moved away from a model's training charges;
* :mod:`.charge_windows` -- which charges train and which are held out.

May import :mod:`qcllp.training`, :mod:`qcllp.scoring` and everything below them; never
reporting, the services or the CLI. The daemon that runs it is :mod:`qcllp.service.retrainer`.
"""
