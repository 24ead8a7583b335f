"""A collective of Lab 4 written wrong, for the tests that run it between real processes, and for the
parent processes they start (which import it from here)."""

from __future__ import annotations


def reduce_scatter_loops(rank, world, value, send, recv):
    """Worker 2 never returns (it loops): the run must end it, and a parent's death must end its workers."""
    while rank == 2:
        pass
    return value
