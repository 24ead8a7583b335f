"""Lab 2's hidden check: the student's sync_round, run by the probe in a real cluster of the kit's
tasks (1 ps + 2 workers, a few rounds), and judged on the workers' step counts and the global step
and final weights the ps read (a process that runs none of the student's code) against SGD on the
mean gradient, recomputed without TensorFlow. Lab 1's model of the best
of n readings, judged on cases of the grader's. The two halves are called directly, as the grader's
processes call them."""

import json

import numpy as np
import pytest

from helpers import hidden_verdict
from labkit.grading.judge import hidden, probe
from labkit.labs.lab1 import checks
from labkit.labs.declare import Unverifiable
from labkit.labs.lab2 import checks as lab2_checks
from labkit.tasks.ps_sgd import init_weights

ARGS = {"rounds": 6, "train_limit": 600, "test_limit": 100, "seed": 4, "timeout": 180}


def sync_round(tf, grads_and_vars, global_step, learning_rate, num_workers, shared):
    """A correct round (the notebook's solution, written independently)."""
    pushed = [acc.apply_grad(g, local_step=global_step) for acc, (g, _) in zip(shared.accumulators, grads_and_vars)]
    with tf.control_dependencies(pushed):
        worker_op = shared.tokens[shared.worker].dequeue()
    mean = [acc.take_grad(num_workers) for acc in shared.accumulators]
    with tf.control_dependencies([v.assign_sub(learning_rate * m) for m, (_, v) in zip(mean, grads_and_vars)]):
        step = global_step.assign_add(1)
    return worker_op, tf.group(*[q.enqueue(step) for q in shared.tokens])


def verdict(fn, tmp_path, monkeypatch, **args):
    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path / "runs"))  # the probe sets it too; restored after
    return hidden_verdict("lab2_sync_round", fn, tmp_path, **args)


@pytest.mark.cluster
@pytest.mark.slow
def test_a_correct_round_passes_with_the_weights_of_mean_gradient_sgd(tmp_path, monkeypatch):
    v = verdict(sync_round, tmp_path, monkeypatch, **ARGS)
    assert v.ok, v
    assert v.value["local"] == {"worker:0": 6, "worker:1": 6} and v.value["error"] < 0.01, v.value


@pytest.mark.cluster
@pytest.mark.slow
def test_a_round_that_sums_the_gradients_fails_on_the_weights(tmp_path, monkeypatch):
    """One update per round, every worker released once: the counts come out right, the weights
    (the sum of the gradients, not their mean) cannot."""

    def sync_round(tf, grads_and_vars, global_step, learning_rate, num_workers, shared):
        pushed = [acc.apply_grad(g, local_step=global_step) for acc, (g, _) in zip(shared.accumulators, grads_and_vars)]
        with tf.control_dependencies(pushed):
            worker_op = shared.tokens[shared.worker].dequeue()
        total = [num_workers * acc.take_grad(num_workers) for acc in shared.accumulators]
        with tf.control_dependencies([v.assign_sub(learning_rate * t) for t, (_, v) in zip(total, grads_and_vars)]):
            step = global_step.assign_add(1)
        return worker_op, tf.group(*[q.enqueue(step) for q in shared.tokens])

    v = verdict(sync_round, tmp_path, monkeypatch, **ARGS)
    assert not v.ok and "the mean of all 2 gradients" in v.reason, v
    assert v.value["local"] == {"worker:0": 6, "worker:1": 6}


@pytest.mark.cluster
@pytest.mark.slow
def test_weights_and_counts_forged_in_the_workers_results_fail(tmp_path, monkeypatch):
    """The chief's result holds the right weights and every worker's the right counts, all written
    by the round's own process; the ps, which never ran the round, read its weights unchanged."""

    def sync_round(tf, grads_and_vars, global_step, learning_rate, num_workers, shared):
        """No round at all (the chief's steps only bump the global step), and a patched result writer in
        the workers' processes: every worker reports the rounds' step counts, the chief the weights of
        mean-gradient SGD reproduced in NumPy (the kit's own float64 SGD stands in for the student's)."""
        from labkit.labs.lab2.checks import reference_sync_weights, settings_sync_round
        from labkit.tasks.runtime import TaskRuntime

        W, b = reference_sync_weights(
            settings_sync_round(rounds=6, train_limit=600, test_limit=100, seed=4), num_workers
        )
        finish = TaskRuntime.finish

        def forged(self, *args, **kwargs):
            self.steps.update(local=6, global_at_exit=6)
            if self.is_chief:
                self.result["weights"] = {"W": W.tolist(), "b": b.tolist()}
            return finish(self, *args, **kwargs)

        TaskRuntime.finish = forged
        step = global_step.assign_add(1) if shared.worker == 0 else tf.identity(global_step)  # the chief counts
        return step, shared.tokens[0].dequeue()  # the chief's round runner waits until the session closes

    v = verdict(sync_round, tmp_path, monkeypatch, **ARGS)
    run = next((tmp_path / "runs").rglob("worker-0.json")).parent
    chief = json.loads((run / "worker-0.json").read_text())
    want_W, _ = lab2_checks.reference_sync_weights(lab2_checks.settings_sync_round(**ARGS), 2)
    assert chief["steps"]["local"] == 6 and np.allclose(chief["weights"]["W"], want_W)  # the forgery landed
    assert not v.ok and "weights on the ps" in v.reason, v


def test_the_judge_reads_the_weights_and_global_step_the_ps_read(tmp_path):
    """Files as the forging round leaves them: right counts and weights in the workers' results, the
    seeded start and the real global step in the ps's. The ps's decide; with the ps's weights right
    the same files pass."""
    s = lab2_checks.settings_sync_round(**ARGS)
    W, b = lab2_checks.reference_sync_weights(s, 2)
    W0, b0 = init_weights(s["seed"])
    run = tmp_path / "runs" / "lab2" / "hidden-sync"
    run.mkdir(parents=True)
    for i in range(2):
        data = {"task": f"worker:{i}", "steps": {"local": 6, "global_at_exit": 6}}
        data.update({"weights": {"W": W.tolist(), "b": b.tolist()}} if i == 0 else {})
        (run / f"worker-{i}.json").write_text(json.dumps(data))

    def ps(step, W, b):
        data = {"task": "ps:0", "steps": {"global_final": step}, "weights": {"W": W.tolist(), "b": b.tolist()}}
        (run / "ps-0.json").write_text(json.dumps(data))

    arrays = {"run_dir": np.asarray("runs/lab2/hidden-sync")}
    ps(6, W0, b0)
    forged = hidden.decide("lab2_sync_round", ARGS, arrays, tmp_path)
    assert not forged.ok and "weights on the ps" in forged.reason
    ps(12, W, b)  # an update per worker step
    assert "the ps's global step is 12" in hidden.decide("lab2_sync_round", ARGS, arrays, tmp_path).reason
    ps(6, W, b)
    assert hidden.decide("lab2_sync_round", ARGS, arrays, tmp_path).ok
    (run / "ps-0.json").unlink()
    with pytest.raises(Unverifiable, match="ps wrote no final global step"):
        hidden.decide("lab2_sync_round", ARGS, arrays, tmp_path)


def test_the_best_reading_model_is_judged_on_the_graders_cases(tmp_path):
    import math

    def chance_best_reading(q, n, batch_size=50, level=0.97):
        need = math.ceil(level * batch_size - 1e-9)
        p = sum(math.comb(batch_size, k) * q**k * (1 - q) ** (batch_size - k) for k in range(need, batch_size + 1))
        return 1 - (1 - p) ** n

    def normal(q, n, batch_size=50, level=0.97):  # a normal approximation: poor in the tail that matters
        z = (level - q) / math.sqrt(q * (1 - q) / batch_size)
        return 1 - (0.5 * (1 + math.erf(z / math.sqrt(2)))) ** n

    for fn, ok in ((chance_best_reading, True), (normal, False)):
        arrays = probe.outputs(hidden.HIDDEN["lab1_best_reading"], {"chance_best_reading": fn}, {"seed": 2}, tmp_path)
        v = hidden.decide("lab1_best_reading", {"seed": 2}, arrays, tmp_path)
        assert v.ok is ok, v
    cases = checks.inputs_best_reading(seed=2, cases=40)
    assert all(abs(c["level"] * c["batch_size"] - round(c["level"] * c["batch_size"])) >= 0.05 for c in cases)
    assert len({c["batch_size"] for c in cases}) > 10 and min(c["n"] for c in cases) >= 1
