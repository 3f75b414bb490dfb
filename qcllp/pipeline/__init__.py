"""From plant data to station models and lock-out flags: training, evaluation, the model
registry, cost-based thresholds, scoring, reports and the demo. Each module holds one step;
the CLI and the retraining daemon call them."""
