"""The scorer's bulk histogram exposes what prometheus_client's own histogram would for the same
values: every cumulative bucket (values on a bucket's edge included in it), the sum (to its
rounding) and the count, in the text format the library writes."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from qcllp.service.scorer_metrics import BulkHistogram

BUCKETS = (0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60, 300)
NAME = "qcllp_scorer_arrival_to_flag_seconds"


def _samples(registry: CollectorRegistry) -> dict[tuple, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for metric in registry.collect()
        for s in metric.samples
        if not s.name.endswith("_created")
    }


def test_counts_sum_and_text_match_the_librarys_histogram_step_by_step():
    rng = np.random.default_rng(7)
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    bulk = BulkHistogram(NAME, "doc", {"station": "cooling"}, BUCKETS, ours)
    single = Histogram(NAME, "doc", ["station"], registry=theirs, buckets=BUCKETS)
    single = single.labels(station="cooling")
    steps = [
        rng.exponential(2.0, 500),
        np.array(BUCKETS, dtype=float),  # on the edges: le is "<="
        np.array([0.0, 1e-9, 299.999, 300.0, 300.001, 1e6]),
        np.empty(0),
    ]
    for values in steps:
        bulk.observe_many(values)
        for v in values:
            single.observe(float(v))
        assert _samples(ours).keys() == _samples(theirs).keys()
        for key, value in _samples(theirs).items():
            assert _samples(ours)[key] == pytest.approx(value, rel=1e-12), key
    # the text, but for the sum's last digits (NumPy adds in another order; compared above)
    ours_text, theirs_text = (
        [x for x in generate_latest(r).decode().splitlines() if not _created_or_sum(x)]
        for r in (ours, theirs)
    )
    assert ours_text == theirs_text
    assert len(ours_text) == 2 + len(BUCKETS) + 2  # HELP, TYPE, the buckets and +Inf, count


def _created_or_sum(line: str) -> bool:
    return "_created" in line or line.startswith(f"{NAME}_sum")


def test_buckets_out_of_order_are_refused():
    with pytest.raises(ValueError, match="buckets must increase"):
        BulkHistogram(NAME, "doc", {"station": "x"}, (1, 0.5), CollectorRegistry())
