"""The sweep's analytic bytes per ring worker (``throughput``'s ``analytic_bytes``) come from the
collectives' cost model, not a formula of their own: they must equal what the ring's schedule of
chunks sends per worker, where the notebook's simulation and the measured sweep meet."""

import pytest

from labkit.labs.lab4 import solution
from labkit.labs.lab4.experiment import ring_bytes_per_worker


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 6])
def test_analytic_bytes_equal_the_ring_schedule(workers):
    size = 61_706 - 61_706 % 12  # LeNet's weights, cut to a length every N here divides
    per_worker = solution.reference_ring_bytes(size, workers)
    assert len(set(per_worker)) == 1
    assert ring_bytes_per_worker(size * 4, workers) == pytest.approx(per_worker[0], rel=1e-12)


def test_one_worker_sends_nothing_and_more_workers_send_more_but_under_twice_the_model():
    sent = [ring_bytes_per_worker(1000.0, n) for n in range(1, 9)]
    assert sent[0] == 0
    assert all(a < b < 2000.0 for a, b in zip(sent, sent[1:]))
