"""Lab 4's self-checks pass the reference notebook's functions and fail the answers students get
wrong, naming the function and the property and no value; the hidden check of the same function
fails each of them too (its probe and judge called directly, as helpers.hidden_verdict does), and
``make check`` lists both self-checks and names a failed one. NumPy only."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from helpers import LABS, hidden_verdict
from labkit.grading.judge import probe
from labkit.labs.lab4 import selfcheck, solution
from labkit.notebook import verdicts

NOTEBOOK = LABS / "lab4" / "04_lenet_batch_sweep.ipynb"
HIDDEN = {"ring_allreduce": ("lab4_ring_allreduce", {"seed": 4}), "identical_pairs": ("lab4_identical_pairs", {})}


@pytest.fixture(scope="module")
def reference():
    """The reference notebook's own functions, as the grader's probe takes them."""
    fns, _ = probe.load_functions(NOTEBOOK, ["ring_allreduce", "identical_pairs"])
    return fns


def _ring(grads, shift_gather: int = 1, gather: bool = True, split=np.array_split, scale: bool = False):
    """A ring all-reduce with the mistakes students make as switches: the all-gather's chunk index
    (w + ``shift_gather`` - s), no all-gather, chunks cut by ``split``, the mean for the sum."""
    n = len(grads)
    chunks = [[c.copy() for c in split(np.asarray(g, np.float32), n)] for g in grads]
    sent = [0] * n
    for phase, shift in (("reduce", 0), ("gather", shift_gather)):
        if phase == "gather" and not gather:
            break
        for s in range(n - 1):
            messages = [(w, (w + shift - s) % n, chunks[w][(w + shift - s) % n].copy()) for w in range(n)]
            for w, c, data in messages:
                right = (w + 1) % n
                chunks[right][c] = chunks[right][c] + data if phase == "reduce" else data
                sent[w] += data.nbytes
    sums = [np.concatenate(c) for c in chunks]
    return ([s / n for s in sums] if scale else sums), sent


def _equal_then_rest(g, n):
    """Chunks of len // n values, the last taking the rest: equal only when n divides the length."""
    k = len(g) // n
    return [g[i * k : (i + 1) * k] for i in range(n - 1)] + [g[(n - 1) * k :]]


def _in_place(grads):
    """The right answer, summed into worker 0's own gradient (the input changes)."""
    sums, sent = _ring([g.copy() for g in grads])
    grads[0] += 1.0
    return sums, sent


def _groups(workers, batch_sizes):
    return Counter(w * b for w in workers for b in batch_sizes).values()


WRONG = {
    "ring_allreduce": [
        (
            lambda g: _ring(g, shift_gather=0),
            "every worker ends with the elementwise sum",
        ),  # all-gather chunk off by one
        (lambda g: _ring(g, gather=False), "every worker ends with the elementwise sum"),  # no all-gather phase
        (lambda g: _ring(g, scale=True), "every worker ends with the elementwise sum"),  # the mean for the sum
        (lambda g: _ring(g, split=_equal_then_rest), "each worker sends one of np.array_split's N chunks"),
        (_in_place, "the gradients it is given are left unchanged"),
    ],
    "identical_pairs": [
        (lambda w, b: sum(k * (k - 1) for k in _groups(w, b)), "each pair once"),  # ordered pairs
        (lambda w, b: sum(k * (k + 1) // 2 for k in _groups(w, b)), "at most every pair"),  # itself as a pair
        (lambda w, b: len(b) * len(w) * (len(w) - 1) // 2, "worker counts and batch sizes swapped"),  # per-worker batch
        (lambda w, b: sum(k > 1 for k in _groups(w, b)), "each pair once"),  # global batches shared, not pairs
        (lambda w, b: sum(k for k in _groups(w, b) if k > 1), "each pair once"),  # configurations, not pairs
    ],
}
CASES = [(name, i) for name, wrong in WRONG.items() for i in range(len(wrong))]


def _selfcheck(name: str, fn) -> verdicts.Verdict:
    return getattr(selfcheck, name)(fn)


@pytest.mark.parametrize("name", list(HIDDEN))
def test_the_reference_passes_its_self_check_and_its_hidden_check(name, reference, tmp_path):
    v = _selfcheck(name, reference[name])
    assert v.passed and len(v.checked) >= 5, v.text()
    check, args = HIDDEN[name]
    assert hidden_verdict(check, reference[name], tmp_path, **args).ok
    assert _selfcheck(name, getattr(solution, name, None) or _ring).passed  # the kit's own reference too


@pytest.mark.parametrize("name, i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_a_wrong_answer_fails_its_self_check_and_its_hidden_check(name, i, tmp_path):
    wrong, prop = WRONG[name][i]
    v = _selfcheck(name, wrong)
    assert not v.passed and any(prop in f for f in v.failed), v.text()
    assert name in v.text() and not re.search(r"\d\.\d|\b\d{3,}\b", " ".join(v.failed))  # no value shown
    check, args = HIDDEN[name]
    assert not hidden_verdict(check, wrong, tmp_path, **args).ok


def test_a_ring_that_raises_or_returns_no_pair_fails_saying_so():
    v = selfcheck.ring_allreduce(lambda grads: grads[0])
    assert v.failed == ["a pair (sums, sent) for every case tried, without an error (it raised TypeError)"]
    v = selfcheck.identical_pairs(lambda w, b: "two")
    assert "it raised ValueError" in v.failed[0]


def test_the_checks_cases_are_not_the_graders():
    from labkit.labs.lab4 import checks

    ring = {(len(c["grads"]), c["grads"][0].size) for c in checks.inputs_ring_allreduce(4)}
    own = {(len(c), c[0].size) for c in selfcheck._ring_cases(np.random.default_rng(0))}
    assert own and not own & ring and any(size % n for n, size in own)
    grids = {(tuple(sorted(c["workers"])), tuple(sorted(c["batch_sizes"]))) for c in checks.inputs_identical_pairs()}
    assert not grids & {(tuple(sorted(w)), tuple(sorted(b))) for w, b in selfcheck.GRIDS}


def test_make_check_lists_both_self_checks_and_names_a_failed_one(reference, tmp_path):
    from _check_report import make_check_lines

    right = {
        "lab4-ring-selfcheck": [selfcheck.ring_allreduce(reference["ring_allreduce"])],
        "lab4-predict-selfcheck": [selfcheck.identical_pairs(reference["identical_pairs"])],
    }
    (_, checked), cell = make_check_lines("lab4", NOTEBOOK, right, tmp_path / "right")
    assert checked.status == "ok" and "ring_allreduce" in checked.text and "identical_pairs" in checked.text
    wrong = dict(right, **{"lab4-predict-selfcheck": [selfcheck.identical_pairs(WRONG["identical_pairs"][2][0])]})
    (_, checked), cell = make_check_lines("lab4", NOTEBOOK, wrong, tmp_path / "wrong")
    assert checked.status == "FAIL" and (
        f"identical_pairs fails its self-check (cell {cell['lab4-predict-selfcheck']}) on: no pair" in checked.text
    ), checked.text
