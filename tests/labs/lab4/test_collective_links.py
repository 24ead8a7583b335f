"""Lab 4's collectives across emulated nodes: one node per worker behind a shaped link, the relay on
this machine's port of their switch. The relay counts what it counts on loopback; gather/scatter's
worker 0 carries N-1 gradients through its one link each way, so its phases take at least that at
the link's rate (less the token bucket's burst) and longer than the ring's, whose workers each carry
2(N-1)/N. Skipped, with the reason, where links cannot be emulated or the relay cannot reach the
switch (root only)."""

import numpy as np
import psutil
import pytest

from labkit.infra import netem
from labkit.labs.lab4 import collective, collective_model
from labkit.labs.lab4.solution import all_gather, gather, reduce_scatter, scatter

RATE = "20mbit"
pytestmark = pytest.mark.system  # shaped links: one such test at a time


def test_across_emulated_links_the_hot_spot_takes_its_links_time(tmp_path):
    mode, why = netem.availability(RATE)
    if mode != "root":
        pytest.skip(f"the relay needs root's port on the emulated switch: {why or 'not root'}")
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(61_706).astype(np.float32) for _ in range(3)]  # LeNet's size
    run = collective.all_reduce(
        grads, ring=(reduce_scatter, all_gather), gather_scatter=(gather, scatter), folder=tmp_path, link=RATE
    )
    assert collective_model.problems(run, grads) == []
    link = netem.parse_link(RATE)
    assert run.link_bytes_per_s == link.bytes_per_s
    size = 61_706 * 4
    for phase in ("gather", "scatter"):  # worker 0's link carries 2 gradients one way
        floor = (2 * size - netem.burst_bytes(link)) / link.bytes_per_s
        assert run.seconds[run.index(phase)] >= floor, (phase, run.seconds)
    ring_s = run.seconds[run.index("reduce-scatter")] + run.seconds[run.index("all-gather")]
    assert run.seconds[run.index("gather")] + run.seconds[run.index("scatter")] > ring_s
    summary = collective_model.per_worker(collective_model.table(run))
    assert summary.loc[("gather/scatter", 0), "model_seconds"] == pytest.approx(4 * size / link.bytes_per_s)
    assert summary.loc[("ring", 0), "model_seconds"] == pytest.approx(2 * 2 / 3 * size / link.bytes_per_s, rel=1e-3)
    assert not [p for p in psutil.Process().children(recursive=True) if "collective_worker" in " ".join(p.cmdline())]
