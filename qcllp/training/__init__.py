"""Training a station: from ingested charges to a fitted, evaluated, registered station model.

* :mod:`.train` -- ``train_station``: read the charges, fit the chosen learner, calibrate on the
  counts, choose the lock-out threshold, register the model; its steps live in :mod:`.labeled`
  (the labeled charges, subsampled), :mod:`.plan` (what is trained), :mod:`.search` (the grid
  search), :mod:`.lockout` (recalibration, threshold, guard bounds), :mod:`.fitting` (one plan's
  model, the choice among ways and methods) and :mod:`.registering` (artifact and registry row);
* :mod:`.methods` -- which learner a method name builds, and its parameter grid;
* :mod:`.evaluate` and :mod:`.station_evaluation` -- charge-grouped evaluation (``qcllp
  evaluate``);
* :mod:`.cluster` -- the parallel parts of training on a Dask cluster.

May import :mod:`qcllp.station` and everything below it (store, features, plant, learn); never
scoring, retraining, reporting, the services or the CLI.
"""
