"""The services the line runs unattended: the station scorer (and, later, the retraining
daemon). They schedule and observe; the work itself is the flows' (training, scoring,
retraining)."""
