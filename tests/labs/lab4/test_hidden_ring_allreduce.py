"""Lab 4's hidden check: the student's ring_allreduce, run by the probe on the grader's gradients and
judged against the plain sum and the ring's chunk schedule (no cluster, no sandbox: the two halves
called directly, as the grader's processes call them)."""

import numpy as np
import pytest

from helpers import hidden_verdict
from labkit.labs.lab4 import checks
from labkit.labs.lab4 import solution


def ring_allreduce(grads):
    """A correct simulation (the notebook's solution, written independently)."""
    n = len(grads)
    chunks = [[c.copy() for c in np.array_split(np.asarray(g, np.float32), n)] for g in grads]
    sent = [0] * n
    for s in range(n - 1):  # reduce-scatter
        msgs = [(w, (w - s) % n, chunks[w][(w - s) % n].copy()) for w in range(n)]
        for w, c, data in msgs:
            chunks[(w + 1) % n][c] = chunks[(w + 1) % n][c] + data
            sent[w] += data.nbytes
    for s in range(n - 1):  # all-gather
        msgs = [(w, (w + 1 - s) % n, chunks[w][(w + 1 - s) % n].copy()) for w in range(n)]
        for w, c, data in msgs:
            chunks[(w + 1) % n][c] = data
            sent[w] += data.nbytes
    return [np.concatenate(c) for c in chunks], sent


def verdict(fn, tmp_path, **args):
    return hidden_verdict("lab4_ring_allreduce", fn, tmp_path, **args)


def test_a_correct_ring_passes_and_the_bytes_are_the_ring_schedule(tmp_path):
    assert verdict(ring_allreduce, tmp_path).ok
    assert solution.reference_ring_bytes(12, 3) == [2 * 2 * 4 * 4] * 3  # 2(N-1) chunks of 4 values
    assert sum(solution.reference_ring_bytes(10, 4)) == 2 * 3 * 10 * 4  # chunks of 3, 3, 2, 2: uneven per worker


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (lambda grads: ([np.sum(grads, axis=0)] * len(grads), [2 * g.nbytes for g in grads]), "sent"),  # bytes of a PS
        (lambda grads: ([g for g in grads], ring_allreduce(grads)[1]), "sum of all the gradients"),  # no reduce
        (lambda grads: ring_allreduce(grads)[0][:1], "ring_allreduce must return"),  # not a pair
    ],
)
def test_wrong_rings_fail_with_a_reason(tmp_path, wrong, reason):
    try:
        v = verdict(wrong, tmp_path)
    except TypeError as e:  # the probe refuses a result that is not (sums, sent); the grader reports it
        assert reason in str(e)
        return
    assert not v.ok and reason in v.reason


def test_a_ring_that_sums_in_place_changes_the_inputs(tmp_path):
    def in_place(grads):
        total = grads[0]
        for g in grads[1:]:
            total += g  # modifies worker 0's gradient
        return [total.copy() for _ in grads], ring_allreduce([np.zeros_like(g) for g in grads])[1]

    v = verdict(in_place, tmp_path)
    assert not v.ok and "changed the gradients" in v.reason


def test_bad_cases_are_refused():
    with pytest.raises(ValueError, match="1 <= workers <= values"):
        checks.inputs_ring_allreduce(cases=[[3, 2]])
