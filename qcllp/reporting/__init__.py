"""Telling people: the plant's status, the training report and the HTML report.

* :mod:`.status` -- what ``qcllp status`` shows (models, scorers, guards, alarms, retraining);
* :mod:`.plant_report` -- the per-station figures of a report (savings, lock-out shares);
* :mod:`.report` -- the HTML report and its plots.

May import every flow and everything below; never the services or the CLI. Text rendering for
the terminal lives in :mod:`qcllp.cli.render`.
"""
