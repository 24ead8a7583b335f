"""Lab 3's sparse step is timed from outside: the probe runs the student's sparse_lr_gradient only in
child processes and reads their CPU time from /proc, so a step that replaces the clocks, or the
probe's own functions, in its process changes nothing read. The reference passes and a dense step
fails, with the factor and both CPU times named, quiet and with both cores kept busy. About 2 min."""

import os
import signal
import subprocess
import sys

import pytest

from helpers import hidden_verdict
from labkit.core import cputime
from labkit.labs.lab3 import checks

ARGS = {"seed": 11}  # the rubric's


def reference(w, x, y):
    """The sparse step: each non-zero's weight gathered, the gradient summed per distinct feature."""
    import tensorflow as tf

    rows, cols = x.indices[:, 0], x.indices[:, 1]
    n = x.dense_shape[0]
    z = tf.math.unsorted_segment_sum(x.values * tf.gather(w, cols), rows, n)
    per_nonzero = x.values * tf.gather(tf.sigmoid(z) - y, rows) / tf.cast(n, tf.float32)
    ids, slot = tf.unique(cols)
    g = tf.math.unsorted_segment_sum(per_nonzero, slot, tf.shape(ids)[0])
    loss = tf.reduce_mean(tf.math.softplus(z) - y * z)
    return loss, tf.IndexedSlices(g, ids, tf.constant([w.shape[0]], tf.int64))


def dense(w, x, y):
    """Right values from a dense [F] gradient each step (all of w touched), then tf.unique and tf.gather."""
    import tensorflow as tf

    z = tf.reshape(tf.sparse.sparse_dense_matmul(x, tf.reshape(w, [-1, 1])), [-1])
    err = tf.reshape(tf.sigmoid(z) - y, [-1, 1])
    g = tf.reshape(tf.sparse.sparse_dense_matmul(x, err, adjoint_a=True), [-1]) / tf.cast(x.dense_shape[0], tf.float32)
    uniq, _ = tf.unique(x.indices[:, 1])
    loss = tf.reduce_mean(tf.nn.softplus(z) - y * z)
    return loss, tf.IndexedSlices(tf.gather(g, uniq), uniq, tf.constant([w.shape[0]], tf.int64))


def dense_with_frozen_clocks(w, x, y):
    """The dense step, after replacing every clock of its process with one that never moves."""
    import time

    for name in ("perf_counter", "process_time", "monotonic", "time", "thread_time"):
        setattr(time, name, lambda: 0.0)
    return dense(w, x, y)


def dense_with_patched_probe(w, x, y):
    """The dense step, after replacing the probe's CPU reading, its threshold and the clock-tick rate
    in its process (the child runs probe.py as ``__main__``) and in the lab's checks module."""
    import importlib

    for module in (
        sys.modules.get("__main__"),
        importlib.import_module("labkit.labs.lab3.checks"),
        importlib.import_module("labkit.core.cputime"),
    ):
        if module is not None:
            module.cpu_seconds = lambda pid: 0.0
            module.MAX_GROWTH = 1e9
    os.sysconf = lambda name: 10**9  # the clock ticks per second, as the probe would read them here
    return dense(w, x, y)


def _ratio(reason: str) -> float:
    return max(float(part.split("x (")[0].split()[-1]) for part in reason.split("; ") if "x (" in part)


@pytest.mark.tensorflow
@pytest.mark.parametrize("busy", [False, True], ids=["quiet", "both-cores-busy"])
def test_the_reference_passes_and_a_dense_step_fails_whatever_it_patches(tmp_path, busy):
    loops = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(2 if busy else 0)]
    try:
        for name in ("ref", "dense_with_frozen_clocks", "dense_with_patched_probe"):
            (tmp_path / name).mkdir()
        v = hidden_verdict("lab3_sparse_gradient", reference, tmp_path / "ref", **ARGS)
        assert v.ok and "at most 5x passes" in v.reason and " ms against " in v.reason, v.reason
        assert _ratio(v.reason) < checks.MAX_GROWTH / 2, v.reason
        print(f"reference ({'busy' if busy else 'quiet'}): {v.reason}")
        # (the plain dense step fails in test_hidden_sparse_gradient_scaling.py; here, the same step patching)
        for step in (dense_with_frozen_clocks, dense_with_patched_probe) if not busy else (dense_with_frozen_clocks,):
            v = hidden_verdict("lab3_sparse_gradient", step, tmp_path / step.__name__, **ARGS)
            assert not v.ok and "CPU time per step grows with the number of features F" in v.reason, (step, v.reason)
            assert _ratio(v.reason) > 2 * checks.MAX_GROWTH and "ms against" in v.reason, (step, v.reason)
            print(f"{step.__name__} ({'busy' if busy else 'quiet'}): {v.reason}")
    finally:
        for p in loops:
            p.kill()
            p.wait()


BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\ninput()"


def _until(condition, seconds: float = 30) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_the_cpu_time_is_read_from_outside_the_process_and_a_helper_process_is_charged():
    """``cpu_seconds`` reads another process's CPU time; ``tree_cpu_seconds`` adds that of the
    processes it started, so work handed to a helper process is counted too."""
    helper = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {BURN!r}])\ninput()"
    p = subprocess.Popen([sys.executable, "-c", helper], stdin=subprocess.PIPE, start_new_session=True)
    q = subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.PIPE)
    try:
        _until(lambda: cputime.cpu_seconds(q.pid) >= 0.4 and cputime.tree_cpu_seconds(p.pid) >= 0.4)
        assert 0.4 <= cputime.cpu_seconds(q.pid) < 5
        assert cputime.tree_cpu_seconds(p.pid) >= 0.4 > cputime.cpu_seconds(p.pid)
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # its helper too: the same session and group
        q.kill()
        p.wait()
        q.wait()
