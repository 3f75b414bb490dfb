"""Scoring on the line: which sticks a station's active model locks out, exactly once.

To change how the scorer decides, start here:

* :mod:`.step` -- ``score_step``: one step of a station's scorer (new sticks, their features,
  the model's decisions, flags written with the checkpoint in one transaction);
* :mod:`.decide` -- a step's due sticks: their readings, features and the model's decisions;
* :mod:`.flag_writes` -- a step's flags and alarms written, the flags delivered to the sink;
* :mod:`.pending` -- which sticks are complete at a station and not yet decided;
* :mod:`.share_guard` -- the guard's share and recent-excess rules on the line's decisions;
* :mod:`.count_guard` -- the guard's third rule: final QC's counts against the predictions;
* :mod:`.flag_sink` -- the flags written to the line's JSONL file, each once;
* :mod:`.nothing_decided` -- why a step decided no stick, in one line.

May import :mod:`qcllp.station` and everything below it; never training, retraining,
reporting, the services or the CLI.
"""
