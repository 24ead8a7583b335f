"""Lab 1's hidden ``sgd_step`` check, judged from outside the student's process: the probe (a
process of its own, as the grader starts it) writes the traced step's GraphDef and its numbers;
the judge, here, where no student code ran, counts the graph's ops and checks the update."""

import inspect
import json
import resource
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

from helpers import whole_rubric
from labkit.grading.judge import hidden
from labkit.labs.lab1 import checks
from labkit.learning import lr
from labkit.labs.lab1 import solution as lab1

ROOT = Path(__file__).resolve().parents[3]
ARGS = {"seed": 7}

NUMPY_RESETTING_COUNTERS = """
import sys
import numpy as np
import tensorflow as tf


def _hand(W, b, x, y):
    z = x @ W + b
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    loss = np.mean(-np.log(p[np.arange(len(y)), y]))
    p[np.arange(len(y)), y] -= 1
    p /= len(y)
    return (x.T @ p).astype(np.float32), p.sum(axis=0).astype(np.float32), np.float32(loss)


def sgd_step(W, b, x, y, learning_rate):
    sys.modules["labkit.labs.lab1.checks"].python_ops = lambda graph_def: 0  # the check's two counters
    sys.modules["labkit.learning.lr"].autodiff_ops = lambda graph_def: 9
    dW, db, loss = tf.numpy_function(_hand, [W, b, x, y], [tf.float32, tf.float32, tf.float32])
    W.assign_sub(learning_rate * dW)
    b.assign_sub(learning_rate * db)
    return loss
"""

HAND_UNDER_TAPE_SCOPE = """
import tensorflow as tf


def sgd_step(W, b, x, y, learning_rate):
    z = tf.matmul(x, W) + b
    with tf.name_scope("gradient_tape"):
        g = (tf.nn.softmax(z) - tf.one_hot(y, 10)) / tf.cast(tf.shape(x)[0], z.dtype)
        W.assign_sub(learning_rate * tf.matmul(x, g, transpose_a=True))
        b.assign_sub(learning_rate * tf.reduce_sum(g, axis=0))
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, z))
"""

SUM_NOT_MEAN = """
import tensorflow as tf


def sgd_step(W, b, x, y, learning_rate):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, tf.matmul(x, W) + b))
    dW, db = tape.gradient(loss, [W, b])
    W.assign_sub(learning_rate * dW)
    b.assign_sub(learning_rate * db)
    return loss
"""

STEPS = {  # the attacker last: one probe process runs them in turn, as a grader's would one each
    "reference": "import tensorflow as tf\n\n\n" + inspect.getsource(lab1.sgd_step),
    "hand_under_tape_scope": HAND_UNDER_TAPE_SCOPE,
    "sum_not_mean": SUM_NOT_MEAN,
    "numpy_resetting_counters": NUMPY_RESETTING_COUNTERS,
}


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> dict[str, Path]:
    """Each step's probe output folder, written by ``probe.main`` in a process of its own."""
    root = tmp_path_factory.mktemp("sgd_step")
    specs, folders = [], {}
    for name, source in STEPS.items():
        folder = folders[name] = root / name
        folder.mkdir()
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), folder / "nb.ipynb")
        h = hidden.HIDDEN["lab1_sgd_step"]
        check = {"check": h.name, "functions": list(h.functions), "args": h.args(ARGS)}
        spec = {"notebook": str(folder / "nb.ipynb"), "out": str(folder), "memory_bytes": resource.RLIM_INFINITY}
        (folder / "spec.json").write_text(json.dumps({**spec, "checks": [check]}))
        specs.append(str(folder / "spec.json"))
    driver = "import sys\nfrom labkit.grading.judge import probe\nfor s in sys.argv[1:]:\n    probe.main([s])\n"
    run = subprocess.run([sys.executable, "-c", driver, *specs], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return folders


def verdict(folder: Path):
    return hidden.judge("lab1_sgd_step", ARGS, folder)


@pytest.mark.tensorflow
def test_the_reference_step_passes(probed):
    v = verdict(probed["reference"])
    assert v.ok, v.reason


@pytest.mark.tensorflow
def test_a_numpy_gradient_that_resets_the_probes_counters_fails(probed, tmp_path):
    folder = probed["numpy_resetting_counters"]
    assert json.loads((folder / "status.json").read_text())["lab1_sgd_step"]["ok"]  # it ran, and patched
    assert not {"python_ops", "autodiff_ops"} & set(hidden._arrays(folder / "lab1_sgd_step.npz"))  # none read
    v = verdict(folder)
    assert not v.ok and "calls back into Python" in v.reason and "not computed by TensorFlow ops" in v.reason
    plain = tmp_path / "no_callback"  # the same numbers beside a graph without the callback: they pass
    shutil.copytree(folder, plain)
    (plain / checks.GRAPH_FILE).write_bytes(b"")
    assert verdict(plain).ok


@pytest.mark.tensorflow
def test_a_renamed_scope_earns_nothing_the_check_claims(probed):
    """A hand gradient under tf.name_scope("gradient_tape") reads as the tape's to any count of op
    names, so the check claims no tape: it passes a correct update computed by TensorFlow ops."""
    graph = checks.graph_def_file(probed["hand_under_tape_scope"] / checks.GRAPH_FILE)
    assert lr.autodiff_ops(graph) > 0  # what a name-reading check would have taken for the tape
    assert verdict(probed["hand_under_tape_scope"]).ok
    rubric = tomllib.loads(whole_rubric())
    (check,) = [c for c in rubric["labs"]["lab1"]["checks"] if c.get("check") == "lab1_sgd_step"]
    assert "tape" not in check["description"].lower() and "TensorFlow ops" in check["description"]


@pytest.mark.tensorflow
def test_a_sum_instead_of_the_mean_fails(probed):
    v = verdict(probed["sum_not_mean"])
    assert not v.ok and "sgd_step is off in" in v.reason and "mean" in v.reason
