"""Lab 5's worker counts are checked before its first run: the cost model's fit needs N = 1 and 2
and a largest N of 3 or more, held out; fewer counts fail at once, naming what is needed, instead
of a KeyError after the first sweep has run."""

import tomllib

import nbformat
import pytest

from helpers import LABS, whole_rubric
from labkit.labs.lab5 import experiment as ring_vs_ps

NOTEBOOK = LABS / "lab5" / "05_ring_vs_ps.ipynb"


@pytest.mark.parametrize("workers", [[1, 2], [2], [1, 3], [1, 3, 4], [1]])
def test_too_few_counts_fail_naming_the_counts_the_fit_needs(workers):
    with pytest.raises(ValueError) as err:
        ring_vs_ps.lab_workers(workers)
    message = str(err.value)
    assert f"workers={workers}" in message and "N = 2 and a largest N of 3 or more" in message
    assert "held out of the cost model's fit" in message and "workers=[1, 2, 3]" in message


@pytest.mark.parametrize(
    "workers, counts",
    [([1, 2, 3], [1, 2, 3]), ([3, 2], [1, 2, 3]), ((2, 1, 2, 4), [1, 2, 4]), (range(1, 7), [1, 2, 3, 4, 5, 6])],
)
def test_enough_counts_come_back_sorted_with_one_added(workers, counts):
    assert ring_vs_ps.lab_workers(workers) == counts


def test_counts_that_are_not_positive_integers_are_refused():
    for bad in ([0, 2, 3], "1,2,3", [1.5, 2, 3]):
        with pytest.raises(ValueError, match="workers must be positive integers"):
            ring_vs_ps.lab_workers(bad)


def test_the_notebook_checks_its_counts_before_its_first_run_and_the_graders_pass():
    """The check sits after the full-run settings replace the defaults, and before any cell that
    starts a cluster; the grader's parameters and the notebook's own defaults pass it."""
    sources = [c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"]
    code = "\n".join(sources)
    check = code.index("workers = ring_vs_ps.lab_workers(workers)")
    assert code.index("globals().update(full_run_settings)") < check
    first_run = min(code.index(call) for call in ("ring_vs_ps.scaling(", "ring_vs_ps.emulated(", "ps_failure("))
    assert check < first_run and check < code.index("launch.placed(")

    params = {}
    exec(next(s for s in sources if s.startswith("workers =")), params)
    grader = tomllib.loads(whole_rubric())["labs"]["lab5"]["parameters"]
    for workers in (params["workers"], params["full_run_settings"]["workers"], grader["workers"]):
        assert ring_vs_ps.lab_workers(workers) == sorted(set(workers) | {1})
